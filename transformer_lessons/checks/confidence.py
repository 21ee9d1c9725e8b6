"""Check for the AUROC of notebook 15: how well one number separates two groups of sentences.

The AUROC (the area under the ROC curve) is the chance that a score drawn from the first
group beats one drawn from the second, a tie counting half: the Mann-Whitney statistic
divided by the number of pairs (Hanley & McNeil 1982). The reference is the package's
:func:`transformer_lessons.confidence.auroc`; :func:`_buggy_auroc` writes it out with
knobs, only to reproduce the mistakes learners make (ties counted as wins or losses, the
groups swapped, pairs made by position, the wrong number of pairs, a count for a share).
"""

from __future__ import annotations

from typing import Callable, Sequence


from transformer_lessons.checks.common import ExerciseError, call_answer, exercise, known_bug, one_number
from transformer_lessons.checks.slips import Slip, slip_pairs

# (higher, lower): ties inside and across the groups, groups of different sizes, a perfect and a reversed split,
# pairs by position that disagree with all pairs, and a group of one.
_CASES: tuple[tuple[tuple[float, ...], tuple[float, ...]], ...] = (
    ((-0.2, -0.5, -0.3), (-0.9, -0.4, -1.2, -0.6)),
    ((0.9, 0.8, 0.8), (0.8, 0.1)),
    ((3.0, 1.0), (2.0, 2.0, 0.0)),
    ((-0.1, -0.2), (-1.0, -2.0, -3.0)),  # every caption higher: 1
    ((-2.0, -3.0, -2.0), (-1.0, -0.5)),  # every caption lower: 0
    ((0.5,), (0.5, 0.2, 0.7)),
    ((1.0, 4.0, 2.0, 5.0), (3.0, 0.0, 6.0, 1.0)),  # the same size: pairing by position gives another answer
    ((-0.31, -0.12, -0.45, -0.28, -0.6), (-0.31, -0.9, -0.2)),
)


def _reference(higher: Sequence[float], lower: Sequence[float]) -> float:
    from transformer_lessons.confidence import auroc

    return auroc(higher, lower)


def _buggy_auroc(higher, lower, *, tie=0.5, swap=False, pairs="all", divide="pairs") -> float:
    """The AUROC with knobs that reproduce the common bugs (defaults: every pair, ties half, a share)."""
    if swap:
        higher, lower = lower, higher
    if pairs == "all":
        pairs_ = [(a, b) for a in higher for b in lower]
    else:  # the i-th score of one group against the i-th of the other, as zip pairs them
        pairs_ = list(zip(higher, lower))
    wins = sum(1.0 if a > b else tie if a == b else 0.0 for a, b in pairs_)
    return wins / {"pairs": len(pairs_), "sum": len(higher) + len(lower), "higher": len(higher), "none": 1}[divide]


_BUGS = [
    (
        "a tie counts as a loss: count it as half a win (with ranks: give tied scores their mean rank; with a "
        "curve: move past tied scores together)[[: 1 if a > b, 0.5 if a == b, 0 otherwise]]",
        dict(tie=0.0),
    ),
    (
        "a tie counts as a whole win: count it as half (with ranks: give tied scores their mean rank; with a "
        "curve: move past tied scores together)[[: 1 if a > b, 0.5 if a == b, 0 otherwise]]",
        dict(tie=1.0),
    ),
    (
        "the groups are swapped: this is the chance that a score of the SECOND list beats one of the first "
        "(1 minus the answer); count the pairs where the first list's score is higher",
        dict(swap=True),
    ),
    (
        "you pair the scores by position (the i-th of one list with the i-th of the other, as zip does): "
        "compare every score of the first list with every score of the second",
        dict(pairs="zip"),
    ),
    (
        "you divide by the number of scores, len(higher) + len(lower): divide by the number of pairs compared"
        "[[, len(higher) * len(lower)]]",
        dict(divide="sum"),
    ),
    (
        "you divide by the size of one list: divide by the number of pairs compared[[, len(higher) * len(lower)]]",
        dict(divide="higher"),
    ),
    (
        "you return the count of wins: return their share, a number from 0 to 1 (divide by the number of pairs)",
        dict(divide="none"),
    ),
]
# Each alone, then two at a time (ties as losses AND the groups swapped, say).
_SLIPS = [*(Slip(hint, knobs) for hint, knobs in _BUGS), *slip_pairs([Slip(h, k) for h, k in _BUGS])]


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6  # a float32 answer (a tensor) is as right as a float64 one


@exercise(
    "auroc",
    "compare every score of `higher` with every score of `lower`, count a win as 1 and a tie as a half, and return "
    "the wins divided by the number of pairs",
)
def check_auroc(fn: Callable[[list[float], list[float]], float]) -> str:
    """Check the AUROC: the chance that a score of ``higher`` beats one of ``lower``, a tie counting half.

    Expected signature: ``fn(higher, lower) -> float``, both lists of floats (each sentence's
    signal). Compared with :func:`transformer_lessons.confidence.auroc` on groups with ties,
    of different sizes, perfectly split, reversed and of one score; the lists must come back
    unchanged (no sorting in place).

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (ties counted as losses or wins, the groups
            swapped, scores paired by position, the wrong number of pairs, a count for a share),
            or a changed input.
    """
    answers = []
    for higher, lower in _CASES:
        given = (list(higher), list(lower))
        answers.append(
            one_number(call_answer(fn, *given, hint="higher and lower are lists of floats"), "the share of pairs")
        )
        if given != (list(higher), list(lower)):
            raise ExerciseError(
                "your code changed the lists it was given (sorted them in place?): read them without modifying "
                "them, e.g. sorted(scores) makes a new list"
            )
    wrong = [i for i, (case, got) in enumerate(zip(_CASES, answers)) if not _same(got, _reference(*case))]
    if wrong:
        # A bug is named only if it gives the learner's answer on EVERY case (checks/evidence.py's rule).
        for slip in _SLIPS:
            if all(_same(got, _buggy_auroc(*case, **slip.knobs)) for case, got in zip(_CASES, answers)):
                raise known_bug(slip.hint)
        higher, lower = _CASES[wrong[0]]
        raise ExerciseError(
            f"for higher = {list(higher)} and lower = {list(lower)} the AUROC is {_reference(higher, lower):.4f}, "
            f"got {answers[wrong[0]]:.4f}: the share of the {len(higher) * len(lower)} pairs (one score from each "
            "list) in which the score of `higher` is the larger, a tie counting half"
        )
    return (
        f"{len(_CASES)} pairs of groups against the package's auroc: ties, unequal sizes, perfect and reversed splits"
    )


__all__ = ["check_auroc"]
