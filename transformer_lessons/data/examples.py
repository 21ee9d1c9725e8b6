"""A handful of Multi30k test sentences shipped with the package, so the finale needs no data.

Notebook 11 opens on the course's committed model, which needs no data at all, and
shows it translating six sentences of the test set. Those six pairs are copied
here, so that the notebook reaches its translator and its attention explorers on a
machine with no network and no copy of Multi30k (a classroom that was not
prepared, a train). Everything else reads the real files
(:func:`~transformer_lessons.data.files.load_split`); a test checks that these
lines equal the real file's, line by line.

Dataset: Elliott, Frank, Sima'an, Specia (2016), "Multi30K: Multilingual
English-German Image Descriptions", task 1, ``test_2016_flickr.{de,en}``
(github.com/multi30k/dataset, ``data/task1/raw/``).
"""

from __future__ import annotations

from typing import Sequence

SPLIT = "test_2016_flickr"

#: Line number (0-based) -> (German, English), exactly as ``load_split(SPLIT)[i]`` gives them.
TEST_2016_FLICKR = {
    3: (
        "Fünf Leute in Winterjacken und mit Helmen stehen im Schnee mit Schneemobilen im Hintergrund.",
        "Five people wearing winter jackets and helmets stand in the snow, with snowmobiles in the background.",
    ),
    8: ("Ein Typ arbeitet an einem Gebäude.", "A guy works on a building."),
    9: (
        "Ein Mann in einer Weste sitzt auf einem Stuhl und hält Magazine.",
        "A man in a vest is sitting in a chair and holding magazines.",
    ),
    18: (
        "Die Person im gestreiften Shirt klettert auf einen Berg.",
        "The person in the striped shirt is mountain climbing.",
    ),
    20: ("Leute, die vor einem Gebäude stehen.", "People standing outside of a building."),
    32: ("Ein Kind planscht im Wasser.", "A child is splashing in the water"),  # sic: the reference has no full stop
}


def example_pairs(lines: Sequence[int]) -> list[tuple[str, str]]:
    """The ``(German, English)`` pairs at these line numbers of ``test_2016_flickr``, with no file and no network.

    Args:
        lines: line numbers, each one of ``TEST_2016_FLICKR`` (3, 8, 9, 18, 20, 32).

    Raises:
        KeyError: a line that is not shipped; ``load_split("test_2016_flickr")`` has all 1,000.
    """
    missing = [i for i in lines if i not in TEST_2016_FLICKR]
    if missing:
        raise KeyError(
            f"lines {missing} of {SPLIT} are not shipped with the package (only {sorted(TEST_2016_FLICKR)}); "
            f'data.load_split("{SPLIT}") reads all 1,000'
        )
    return [TEST_2016_FLICKR[i] for i in lines]
