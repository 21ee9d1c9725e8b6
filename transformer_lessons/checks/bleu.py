"""Checks for the two parts of BLEU (Papineni et al. 2002): clipped n-gram counts (§2.1) and the brevity penalty (§2.2.2).

The reference is sacreBLEU itself (Post 2018), the scorer the course reports: its
``counts`` and ``totals`` for one sentence pair, and the ``bp`` its
``BLEU.compute_bleu`` returns. :func:`_ngram_stats` and :func:`_buggy_bp` write the
two parts out with knobs, only to reproduce the mistakes learners make (counts not
clipped, n-grams off by one, the penalty inverted). sacreBLEU is imported when a check
runs, so that importing the checks stays cheap.
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from typing import Any, Callable

import torch

from transformer_lessons.checks.common import NO_RETURN, ExerciseError, call_answer, exercise, known_bug, one_number
from transformer_lessons.checks.slips import Slip, slip_pairs

# (hypothesis, reference, n): clipping (Papineni's "the the the ..."), all four orders, sentences shorter than n, empty.
_PAPINENI = ("the the the the the the the".split(), "the cat is on the mat".split())
_MP_CASES = (
    [
        (*_PAPINENI, 1),
        (*_PAPINENI, 2),
        ("a a a b b c".split(), "a a b c c d".split(), 1),
    ]
    + [
        ("the cat sat on the mat near the cat".split(), "the cat is on the mat near a cat".split(), n)
        for n in (1, 2, 3, 4)
    ]
    + [
        ("a dog runs".split(), "a dog runs".split(), 3),
        ("a dog".split(), "a dog runs fast".split(), 3),  # shorter than n: no n-grams at all
        ("a b c".split(), "a b".split(), 3),  # the reference is shorter than n
        (["dog"], "a dog runs".split(), 4),  # 1 - 4 + 1 < 0: no n-grams, not a negative number
        ([], "a dog runs".split(), 1),  # an empty output
    ]
)


def _reference_stats(hyp: list[str], ref: list[str], n: int) -> tuple[int, int]:
    """sacreBLEU's (matches, total) for the n-grams of one sentence pair, with its own tokenization switched off."""
    from sacrebleu.metrics import BLEU

    score = BLEU(tokenize="none", force=True).corpus_score([" ".join(hyp)], [[" ".join(ref)]])
    return int(score.counts[n - 1]), int(score.totals[n - 1])


def _ngrams(tokens: list[str], n: int, stop: int) -> Counter:
    """The n-grams starting at 0 .. stop - 1, as tuples (a short one where the slice runs past the end)."""
    return Counter(tuple(tokens[i : i + n]) for i in range(stop))


def _ngram_stats(hyp, ref, n, *, clip=True, distinct=False, stop="n-1", wrap=False, denominator="hyp", clamp=True):
    """(matches, total) with knobs that reproduce the common bugs (defaults: clipped counts, Papineni §2.1)."""
    how_many = {"n-1": lambda t: len(t) - n + 1, "n": lambda t: len(t) - n, "len": len}["len" if wrap else stop]
    if wrap:  # n-grams that run over the end of the sentence back to its start
        hyp, ref, how_many = hyp + hyp[: n - 1], ref + ref[: n - 1], lambda t: len(t) - n + 1
    h, r = _ngrams(hyp, n, max(how_many(hyp), 0)), _ngrams(ref, n, max(how_many(ref), 0))
    if distinct:
        matches = len(set(h) & set(r))
    elif clip:
        matches = sum(min(c, r[g]) for g, c in h.items())
    else:
        matches = sum(c for g, c in h.items() if g in r)
    total = how_many(hyp if denominator == "hyp" else ref)
    return matches, (max(total, 0) if clamp else total)


def _counts(value: Any) -> tuple[float, float]:
    """The learner's (matches, total) as two numbers."""
    if value is None:
        raise ExerciseError(NO_RETURN)
    if isinstance(value, (numbers.Real, torch.Tensor)) and not isinstance(value, bool):
        raise known_bug(
            "return the two counts (matches, total), not one number: BLEU sums each over the whole "
            "corpus before dividing, so a sentence's ratio cannot be used"
        )
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ExerciseError(f"return a pair (matches, total), got {type(value).__name__}")
    out = []
    for name, v in zip(("matches", "total"), value):
        v = v.item() if isinstance(v, torch.Tensor) and v.numel() == 1 else v
        if not isinstance(v, numbers.Real) or v != int(v):
            raise ExerciseError(f"{name} should be a whole number (a count), got {v!r}")
        out.append(int(v))
    return out[0], out[1]


_MP_BUGS = [
    (
        "the counts are not clipped: each hypothesis n-gram may match at most as often as it occurs in the reference, "
        "min(count in hypothesis, count in reference). 'the the the the the the the' scores 2 of 7 against "
        "'the cat is on the mat', not 7",
        dict(clip=False),
    ),
    (
        "you count distinct n-grams (a set): count every occurrence, clipped to the reference's count, "
        "min(hyp_counts[g], ref_counts[g]) summed over the hypothesis's n-grams",
        dict(distinct=True),
    ),
    (
        "off by one: a sentence of L tokens has L - n + 1 n-grams, starting at i in range(L - n + 1); you stop one early",
        dict(stop="n"),
    ),
    (
        "n-grams shorter than n at the end: tokens[i:i + n] for i in range(L) gives short slices; start only at "
        "i in range(L - n + 1)",
        dict(stop="len"),
    ),
    (
        "n-grams run over the end of the sentence back to its start: a sentence of L tokens has only L - n + 1 n-grams",
        dict(wrap=True),
    ),
    (
        "the total should count the hypothesis's n-grams (precision: how much of the output is right), not the "
        "reference's",
        dict(denominator="ref"),
    ),
    ("a sentence shorter than n has no n-grams: the total is max(L - n + 1, 0), never negative", dict(clamp=False)),
]

# Each alone, then two at a time (counts not clipped AND one n-gram short, say).
_MP_SLIPS = [*(Slip(hint, knobs) for hint, knobs in _MP_BUGS), *slip_pairs([Slip(h, k) for h, k in _MP_BUGS])]


@exercise(
    "modified_precision",
    "count the hypothesis's n-grams and the reference's (collections.Counter of tuples), clip each match to the "
    "reference's count, and return (matches, total) with total = the number of hypothesis n-grams",
)
def check_modified_precision(fn: Callable[..., tuple[int, int]]) -> str:
    """Check BLEU's modified n-gram precision (Papineni et al. 2002, §2.1) for one sentence pair.

    Expected signature: ``fn(hypothesis, reference, n) -> (matches, total)``, both token
    lists: ``total`` is the number of n-grams of the hypothesis, ``max(len - n + 1, 0)``;
    ``matches`` counts them, each n-gram at most as often as it occurs in the reference
    (clipped counts). Compared with sacreBLEU's ``counts`` and ``totals`` (tokenization
    off) for n = 1 to 4, Papineni's "the the the ..." example, sentences shorter than
    ``n`` and an empty hypothesis.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (counts not clipped, distinct n-grams,
            one n-gram too few or partial ones at the end, n-grams wrapping round,
            the reference's total, a negative total, a ratio instead of the counts).
    """
    answers = []
    for hyp, ref, n in _MP_CASES:
        inputs = (list(hyp), list(ref))
        answers.append(_counts(call_answer(fn, *inputs, n, hint="hypothesis and reference are lists of str, n an int")))
        if inputs != (hyp, ref):
            raise ExerciseError("your code changed the token lists it was given: count without modifying them")
    wrong = [
        i for i, ((hyp, ref, n), got) in enumerate(zip(_MP_CASES, answers)) if got != _reference_stats(hyp, ref, n)
    ]
    if wrong:
        # A bug is named only if it gives the learner's counts on EVERY case: one that happens to match the first
        # failing case alone would name a mistake that was not made.
        for hint, knobs in _MP_SLIPS:
            if all(got == _ngram_stats(hyp, ref, n, **knobs) for (hyp, ref, n), got in zip(_MP_CASES, answers)):
                raise known_bug(hint)
        hyp, ref, n = _MP_CASES[wrong[0]]
        raise ExerciseError(
            f"for hypothesis {' '.join(hyp)!r}, reference {' '.join(ref)!r} and n = {n} the answer is "
            f"(matches, total) = {_reference_stats(hyp, ref, n)}, got {answers[wrong[0]]}: the clipped count of the "
            "hypothesis's n-grams, and how many there are"
        )
    return (
        f"{len(_MP_CASES)} sentence pairs, n = 1 to 4, against sacreBLEU's counts, clipping, short and empty sentences"
    )


def _reference_bp(hyp_len: int, ref_len: int) -> float:
    """sacreBLEU's brevity penalty for a corpus of ``hyp_len`` output and ``ref_len`` reference tokens."""
    from sacrebleu.metrics import BLEU

    return float(BLEU.compute_bleu([1] * 4, [1] * 4, hyp_len, ref_len).bp)


def _buggy_bp(c: int, r: int, *, ratio="r/c", always=False, sign=1, swap=False) -> float:
    """The brevity penalty with knobs that reproduce the common bugs (defaults: Papineni §2.2.2)."""
    if swap:  # the parameters read in the other order: (ref_len, hyp_len), as NLTK's brevity_penalty takes them
        c, r = r, c
    if c > r and not always:
        return 1.0
    x = r / c if ratio == "r/c" else c / r
    return math.exp(sign * (1 - x))


_BP_CASES = [(12, 10), (10, 10), (9, 10), (5, 10), (1, 7), (20, 31), (31, 20)]
_BP_BUGS = [
    (
        "the ratio is inverted: BP = exp(1 - r/c), reference length over hypothesis length (you used c/r)",
        dict(ratio="c/r"),
    ),
    (
        "the penalty is applied to long hypotheses too: BP = 1 when c > r (longer outputs are already punished by "
        "their precisions); exp(1 - r/c) only when c <= r",
        dict(always=True),
    ),
    (
        "the sign is flipped: BP = exp(1 - r/c), which is below 1 for a short hypothesis (you computed exp(r/c - 1))",
        dict(sign=-1),
    ),
    (
        "your function reads its two arguments in the other order: it is called as fn(hyp_len, ref_len), the "
        "hypothesis length first (NLTK's brevity_penalty takes the reference length first)",
        dict(swap=True),
    ),
]

_BP_SLIPS = [*(Slip(hint, knobs) for hint, knobs in _BP_BUGS), *slip_pairs([Slip(h, k) for h, k in _BP_BUGS])]


def _bp_value(value: Any) -> float:
    return one_number(value, "the penalty")


@exercise(
    "brevity_penalty",
    "return 1.0 for a hypothesis longer than the reference, a penalty below 1 for a shorter one (Papineni et al. "
    "§2.2.2), and 0.0 for an empty hypothesis",
)
def check_brevity_penalty(fn: Callable[[int, int], float]) -> str:
    """Check BLEU's brevity penalty (Papineni et al. 2002, §2.2.2).

    Expected signature: ``fn(hyp_len, ref_len) -> float``: ``BP = 1`` if ``c > r``, else
    ``exp(1 - r / c)``, with ``c = hyp_len`` and ``r = ref_len`` (corpus totals), and
    ``BP = 0`` for an empty hypothesis (``c = 0``, the limit of ``exp(1 - r/c)``), as
    sacreBLEU computes it. Compared with sacreBLEU's ``bp`` for short, equal and long outputs.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (r/c inverted, the penalty applied to long
            outputs, the sign of the exponent, a division by zero or inf/NaN for an
            empty hypothesis).
    """
    got = [_bp_value(call_answer(fn, c, r, hint="hyp_len and ref_len are ints")) for c, r in _BP_CASES]
    expected = [_reference_bp(c, r) for c, r in _BP_CASES]

    def matches(values):
        return all(math.isclose(g, e, rel_tol=1e-6, abs_tol=1e-9) for g, e in zip(got, values))

    if not matches(expected):
        for hint, knobs in _BP_SLIPS:
            if matches([_buggy_bp(c, r, **knobs) for c, r in _BP_CASES]):
                raise known_bug(hint)
        i = next(i for i, (g, e) in enumerate(zip(got, expected)) if not math.isclose(g, e, rel_tol=1e-6, abs_tol=1e-9))
        c, r = _BP_CASES[i]
        raise ExerciseError(
            f"for hyp_len = {c}, ref_len = {r} the penalty is {expected[i]:.6g}, got {got[i]:.6g}: "
            "compare with §2.2.2 of the BLEU paper[[: BP = 1 if c > r, else exp(1 - r/c)]]"
        )
    empty = _bp_value(
        call_answer(
            fn, 0, 5, hint="an empty hypothesis (hyp_len = 0) gets BP = 0.0: return it before dividing by hyp_len"
        )
    )
    if not math.isfinite(empty):
        raise known_bug(
            f"for an empty hypothesis (hyp_len = 0) you return {empty}: return 0.0 before dividing by hyp_len"
        )
    if empty != 0.0:
        raise known_bug(
            f"an empty hypothesis (hyp_len = 0) gets BP = 0.0 (the limit of exp(1 - r/c) as c -> 0), got {empty:.6g}"
        )
    return f"{len(_BP_CASES)} length pairs, shorter, equal and longer, and an empty hypothesis against sacreBLEU's bp"
