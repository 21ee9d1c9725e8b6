"""The package's notes (transformer_lessons/notes.py): a warning for scripts, a list for whoever collects them.

The fault these tests guard: code that recorded *every* warning of the process
(``warnings.catch_warnings(record=True)`` + ``simplefilter("always")``) to read
one of the package's. On Colab (Python >= 3.12, jupyter_client 7) the kernel
warns ``DeprecationWarning: datetime.datetime.utcnow() is deprecated`` while a
cell runs: notebook 11 counted it as a second note and stopped, and the
translator widget showed it under a translation. Here another module's warning
is raised while the package collects its own notes: it must not be collected,
and it must still reach the process's warnings.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from transformer_lessons import PRESETS, Transformer, translation
from transformer_lessons.data import SPECIALS, Vocab
from transformer_lessons.notes import CourseWarning, collect_notes, note

FOREIGN = "datetime.datetime.utcnow() is deprecated and scheduled for removal in a future version."


def _foreign_warning() -> None:
    """A warning of another package, as jupyter_client 7's session raises it on Python >= 3.12."""
    warnings.warn_explicit(
        FOREIGN, DeprecationWarning, filename="jupyter_client/session.py", lineno=1, module="jupyter_client.session"
    )


def _our_note() -> None:
    note("a note of the package", stacklevel=2)  # points at the caller of this function


def test_a_note_nobody_collects_is_a_course_warning_at_the_callers_line():
    with pytest.warns(CourseWarning, match="a note of the package") as record:
        _our_note()
    assert issubclass(CourseWarning, UserWarning)  # `pytest.warns(UserWarning)` and default filters see it as before
    assert record[0].filename == __file__


def test_collected_notes_are_not_warnings():
    with warnings.catch_warnings(record=True) as caught:  # this test's own record of the whole process
        warnings.simplefilter("always")
        with collect_notes() as notes:
            _our_note()
            _our_note()
    assert notes == ["a note of the package"] * 2
    assert not caught


def test_collecting_leaves_other_warnings_alone():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with collect_notes() as notes:
            _foreign_warning()
            _our_note()
            _foreign_warning()
    assert notes == ["a note of the package"]  # the foreign warnings are not notes ...
    assert [str(w.message) for w in caught] == [FOREIGN, FOREIGN]  # ... and are not swallowed either


def test_collect_notes_nests_and_ends_with_its_block():
    with collect_notes() as outer:
        _our_note()
        with collect_notes() as inner:
            _our_note()
        with pytest.raises(ValueError), collect_notes():
            raise ValueError("the block fails: the collector is closed all the same")
        _our_note()
    assert (len(outer), len(inner)) == (2, 1)
    with pytest.warns(CourseWarning):
        _our_note()  # after the block: a warning again


@pytest.fixture(scope="module")
def short_model():
    torch.manual_seed(0)
    src_vocab = Vocab([*SPECIALS, "Ein", "Mann", "."])
    tgt_vocab = Vocab([*SPECIALS, "A", "man", "."])
    model = Transformer(PRESETS["tiny"].replace(max_len=32), len(src_vocab), len(tgt_vocab)).eval()
    return model, src_vocab, tgt_vocab


def test_translate_notes_a_cut_sentence_as_notebook_11_reads_it(short_model, monkeypatch):
    # Notebook 11's awkward-input cell: collect translate's notes, count them; the kernel's own warnings pass by.
    model, src_vocab, tgt_vocab = short_model
    real = translation.decode_token_lists

    def noisy(*args, **kwargs):
        _foreign_warning()  # what the kernel does while the cell runs
        return real(*args, **kwargs)

    monkeypatch.setattr(translation, "decode_token_lists", noisy)
    too_long = " ".join(["Ein Mann ."] * 20)  # 60 tokens, more than max_len 32 allows
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with collect_notes() as notes:
            out = translation.translate(model, too_long, src_vocab=src_vocab, tgt_vocab=tgt_vocab)
    assert isinstance(out, str)
    assert len(notes) == 1 and "only their first 31 tokens" in notes[0]
    # The cut is translate's rule (a rotary model has no positional table): the note names max_len, not a model limit.
    assert "configured for max_len=32" in notes[0] and "the most this model accepts" not in notes[0]
    assert [str(w.message) for w in caught] == [FOREIGN]
    with pytest.warns(CourseWarning, match="only their first 31 tokens"):  # a script, collecting nothing, is warned
        translation.translate(model, too_long, src_vocab=src_vocab, tgt_vocab=tgt_vocab)
