"""Check for batching by tokens (paper §5.1, "batched together by approximate sequence length").

The rule is :class:`~transformer_lessons.data.batching.TokenBatcher`'s: sort the
indices by length, shortest first, and cut them greedily into batches whose padded
size, ``len(batch) * longest``, stays ``<= max_tokens``; a single sequence longer
than the budget gets a batch of its own. The reference runs ``TokenBatcher`` itself
on one-sided pairs. :func:`_greedy` re-runs the rule with knobs, only to reproduce the
mistakes learners make; with its default knobs it cuts the same batches
(tests/test_check_batching.py checks).

Two answers are the same when they hold the same batches of lengths: equal lengths
may trade places (an unstable sort), and the order of the batches does not matter.
"""

from __future__ import annotations

import contextlib
import functools
import io
import numbers
import operator
from typing import Any, Callable, Sequence

import torch

from transformer_lessons.checks.common import NO_RETURN, ExerciseError, call_answer, exercise, known_bug
from transformer_lessons.checks.evidence import Inputs
from transformer_lessons.data.batching import TokenBatcher

Batches = list[list[int]]


def _reference(lengths: Sequence[int], max_tokens: int) -> Batches:
    """TokenBatcher's batches for sequences of these lengths (>= 1), in length order."""
    # A source of l - 1 ids gets <eos>: length l; an empty target gets <bos>/<eos>: length 1 <= l.
    pairs = [([0] * (length - 1), []) for length in lengths]
    return TokenBatcher(pairs, max_tokens, pad_id=0, bos_id=1, eos_id=2, shuffle=False).batch_indices()


def _greedy(
    lengths: Sequence[int],
    max_tokens: int,
    *,
    order: str = "shortest",
    cost: str = "padded",
    strict: bool = False,
    drop_last: bool = False,
    drop_long: bool = False,
) -> Batches:
    """The greedy cut with knobs that reproduce the common bugs (defaults: TokenBatcher's rule)."""
    n = len(lengths)
    indices = {
        "shortest": sorted(range(n), key=lengths.__getitem__),
        "longest": sorted(range(n), key=lengths.__getitem__, reverse=True),
        "input": list(range(n)),
    }[order]
    if drop_long:
        indices = [i for i in indices if lengths[i] <= max_tokens]
    batches: Batches = []
    batch: list[int] = []
    for i in indices:
        grown = batch + [i]
        longest = max(lengths[j] for j in grown)
        size = {
            "padded": len(grown) * longest,  # rows x longest row: what the padded tensor holds
            "tokens": sum(lengths[j] for j in grown),  # bug: the padding is not counted
            "rows_before": len(batch) * longest,  # bug: the new row is not counted
            "longest_before": len(grown) * max((lengths[j] for j in batch), default=lengths[i]),
        }[cost]
        fits = size < max_tokens if strict else size <= max_tokens
        if batch and not fits:
            batches.append(batch)
            grown = [i]
        batch = grown
    if batch and not drop_last:
        batches.append(batch)
    return batches


def _signature(lengths: Sequence[int], batches: Batches) -> list[tuple[int, ...]]:
    """The batches as sorted tuples of lengths, in sorted order: what two equivalent answers share."""
    return sorted(tuple(sorted(lengths[i] for i in batch)) for batch in batches)


def _padded(lengths: Sequence[int], batches: Batches) -> int:
    return sum(len(batch) * max(lengths[i] for i in batch) for batch in batches)


def _as_batches(value: Any) -> Batches:
    """The learner's answer as a list of lists of ints, or an ExerciseError saying what it is instead."""
    if value is None:
        raise ExerciseError(NO_RETURN)
    if not isinstance(value, (list, tuple)):
        raise ExerciseError(
            f"return a list of batches, each a list of indices into `lengths`; got {type(value).__name__}"
        )
    batches = []
    for k, batch in enumerate(value):
        if isinstance(batch, torch.Tensor):
            batch = batch.tolist()
        if not isinstance(batch, (list, tuple)):
            raise ExerciseError(
                f"batch {k} should be a list of indices, got {type(batch).__name__}: return a list "
                "of lists, e.g. [[3, 0], [2, 1, 4]]"
            )
        if not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in batch):
            raise ExerciseError(f"batch {k} should hold int indices into `lengths`, got {list(batch)[:6]}")
        batches.append([int(i) for i in batch])
    return batches


# What each common mistake looks like, and what _greedy does to reproduce it.
_BUGS = [
    (
        "the last batch is missing: after the loop, append the batch still being filled (if it is not empty)",
        dict(drop_last=True),
    ),
    (
        "you counted the tokens (the sum of the lengths), but a batch is padded to its longest member: its size is "
        "its number of rows times its longest length. Count the size the batch would have with i, before adding i"
        "[[: (len(batch) + 1) * max(longest, lengths[i]) <= max_tokens]]",
        dict(cost="tokens"),
    ),
    ("off by one: a batch whose padded size EQUALS max_tokens fits (<=); you cut it with <", dict(strict=True)),
    (
        "sort the indices by length first, shortest first[[: sorted(range(len(lengths)), key=lambda i: lengths[i])]]. "
        "Cut in input order, short sentences share batches with long ones and are padded to their width",
        dict(order="input"),
    ),
    (
        "sort shortest first, as TokenBatcher does (you sorted "
        "longest first, which cuts the batches elsewhere)[[: sorted(range(len(lengths)), key=lambda i: lengths[i])]]",
        dict(order="longest"),
    ),
    (
        "count the new row too: adding index i makes the batch one row longer, each row as wide as the longest"
        "[[: (len(batch) + 1) * longest]]",
        dict(cost="rows_before"),
    ),
    (
        "count the new item's length: the batch becomes as wide as the longer of its longest so far and the new one; "
        "check the size BEFORE adding it[[: (len(batch) + 1) * max(longest, lengths[i]) <= max_tokens]]",
        dict(cost="longest_before"),
    ),
    (
        "a sequence longer than max_tokens still goes in, alone: when the batch is empty, add the index whatever its "
        "length (dropping it would lose training data)",
        dict(drop_long=True),
    ),
]


def _expect_indices(batches: Batches, lengths: Sequence[int], expected: Batches) -> None:
    """Batches that differ from ``expected`` must at least hold indices into ``lengths``."""
    n, want = len(lengths), _signature(lengths, expected)
    if sorted(tuple(sorted(batch)) for batch in batches) == want:
        raise known_bug(
            "your batches hold the LENGTHS; return the INDICES (positions in `lengths`) of the sequences in each batch"
        )
    flat = sorted(i for batch in batches for i in batch)
    if any(not 0 <= i < n for i in flat):
        raise ExerciseError(
            f"index {next(i for i in flat if not 0 <= i < n)} is not a position in `lengths` "
            f"(0 .. {n - 1}): each batch holds indices into `lengths`"
        )


def _what_batches_show(lengths: Sequence[int], batches: Batches) -> tuple[list, list[int]]:
    """What the check compares of some batches: their lengths (sorted, see _signature) and the indices they hold."""
    return _signature(lengths, batches), sorted(i for batch in batches for i in batch)


def _unexplained_batches(batches: Batches, lengths: Sequence[int], max_tokens: int, expected: Batches) -> ExerciseError:
    """The error that best explains batches that differ from ``expected``, where no known bug does."""
    n, want = len(lengths), _signature(lengths, expected)
    flat = sorted(i for batch in batches for i in batch)
    twice = sorted({i for i in flat if flat.count(i) > 1})
    missing = sorted(set(range(n)) - set(flat))
    if twice:
        raise known_bug(
            f"index {twice[0]} is in more than one batch: every index must be in exactly one. Start a new "
            "batch with the index that did not fit, after appending the full batch WITHOUT it"
        )
    if missing:
        raise known_bug(
            f"index {missing[0]} (length {lengths[missing[0]]}) is in no batch: every index must be in "
            "exactly one. When i does not fit, append the full batch, then start the next one WITH i"
        )
    for batch in batches:
        size = len(batch) * max(lengths[i] for i in batch)
        if len(batch) > 1 and size > max_tokens:
            rows = f"{len(batch)} rows x longest {max(lengths[i] for i in batch)} = {size} > max_tokens = {max_tokens}"
            if sum(lengths[i] for i in batch) <= max_tokens:
                raise known_bug(
                    f"a batch's padded size is {rows}: you counted the tokens (the sum of the lengths), "
                    "but every row is padded to the longest; count rows times the longest length"
                    "[[: len(batch) * max(lengths in it)]]"
                )
            raise known_bug(f"a batch's padded size is {rows}: cut the batch before it grows past max_tokens")
    if _padded(lengths, batches) > _padded(lengths, expected):
        raise known_bug(
            f"your batches hold {_padded(lengths, batches)} padded tokens, the rule's "
            f"{_padded(lengths, expected)}: sort the indices by length first, shortest first, so "
            "similar lengths share a batch"
        )
    got = _signature(lengths, batches)
    first = next((k for k, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
    return ExerciseError(
        f"the batches differ from the rule's (sort by length, shortest first; cut when the batch with one more row "
        f"would exceed max_tokens, padding included): {len(want)} batches expected, got {len(got)}. Sorted by their lengths, batch "
        f"{first} should hold lengths {list(want[first]) if first < len(want) else 'nothing'}, yours holds "
        f"{list(got[first]) if first < len(got) else 'nothing'}"
    )


_OVER_LONG = (
    "these lengths hold a sequence longer than max_tokens ({n} > {budget}), and with a budget that fits it your code "
    "runs: such a sequence is not an error, it gets a batch of its own (the loader must not lose a sentence)"
)


def _runs(fn: Callable, *args: Any) -> bool:
    """Whether the learner's ``fn(*args)`` returns without raising (its output is not looked at)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            fn(*args)
    except Exception:  # noqa: BLE001 - any error means no
        return False
    return True


def _cases() -> list[tuple[list[int], int]]:
    """(lengths, max_tokens): one padded size exactly at the budget, a long random list, items over budget, none."""
    generator = torch.Generator().manual_seed(0)
    many = torch.randint(1, 31, (40,), generator=generator).tolist()
    return [([3, 7, 2, 5, 5, 9, 4, 2, 6, 3, 12, 1, 11, 8, 4], 10), (many, 64), ([15, 20], 10), ([], 10)]


def _batch_case(fn: Callable, lengths: list[int], max_tokens: int, seen: Inputs) -> None:
    """Run the answer on one list of lengths; keep its batches beside those of each known bug on the same list."""
    given = list(lengths)
    try:
        answer = call_answer(fn, given, max_tokens, hint="batches = [[indices ...], ...]")
    except ExerciseError:
        if max(lengths, default=0) > max_tokens and _runs(fn, list(lengths), max(lengths)):
            # It raised only because a sequence alone is over the budget: say the rule (raises again).
            call_answer(fn, list(lengths), max_tokens, hint=_OVER_LONG.format(n=max(lengths), budget=max_tokens))
        raise
    batches = _as_batches(answer)
    if given != lengths:
        raise known_bug(
            "your code changed `lengths` (lengths.sort()?), which loses which index has which "
            "length: sort the INDICES by length[[: sorted(range(len(lengths)), key=lambda i: lengths[i])]]"
        )
    if any(not batch for batch in batches):
        where = f" for lengths={lengths}, max_tokens={max_tokens}" if len(lengths) < 16 else ""
        raise known_bug(
            f"your answer has an empty batch{where}: when an index does not fit in an EMPTY batch "
            "(it alone is longer than max_tokens), add it anyway, a batch of its own; and append "
            "the last batch only if it is not empty"
        )
    expected = _reference(lengths, max_tokens)
    flat = sorted(i for batch in batches for i in batch)
    if flat != list(range(len(lengths))) or _signature(lengths, batches) != _signature(lengths, expected):
        _expect_indices(batches, lengths, expected)  # raises unless every index is in range
    got = _what_batches_show(lengths, batches)
    bugs = [
        (hint, lambda knobs=knobs: _what_batches_show(lengths, _greedy(lengths, max_tokens, **knobs)))
        for hint, knobs in _BUGS
    ]
    differs = functools.partial(_unexplained_batches, batches, lengths, max_tokens, expected)
    seen.compare(got, _what_batches_show(lengths, expected), bugs, "the batches", same=operator.eq, differs=differs)


@exercise(
    "batch_by_tokens",
    "sort the indices by length and cut them greedily into batches of at most max_tokens padded tokens",
)
def check_batch_by_tokens(fn: Callable[[list[int], int], list[list[int]]]) -> str:
    """Check batching by tokens, the rule of :class:`~transformer_lessons.data.TokenBatcher` (§5.1).

    Expected signature: ``fn(lengths, max_tokens) -> list[list[int]]``: the indices
    ``0 .. len(lengths) - 1``, sorted by length (shortest first), cut greedily into
    batches whose padded size ``len(batch) * max(lengths in it)`` is ``<= max_tokens``.
    Every index is in exactly one batch, no batch is empty, and a sequence longer than
    ``max_tokens`` gets a batch of its own. Equal lengths may come in any order, and so
    may the batches.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while ``fn`` still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (tokens counted without padding, no sorting,
            ``<`` for ``<=``, the last batch dropped, an index twice or missing, an empty
            batch, lengths returned instead of indices, ``lengths`` sorted in place).
    """
    seen = Inputs()  # a bug is named only if it explains all four lists
    for lengths, max_tokens in _cases():
        with seen.one():
            _batch_case(fn, lengths, max_tokens, seen)
    seen.verdict()
    return (
        "batches against data.TokenBatcher for 4 lists (a batch exactly at the budget, sequences over it, "
        "none), every index once, lengths unchanged"
    )
