"""Check for the learning-rate schedule of the paper (§5.3, Eq. 3).

The reference is :func:`transformer_lessons.schedule.noam_rate`, the course's one
formula. :func:`_buggy_noam` writes the same formula with knobs, only to
reproduce the mistakes learners make (wrong exponents, max for min, a branch
missing); with its default knobs it equals ``noam_rate`` (tests/test_check_schedule.py checks).
"""

from __future__ import annotations

import math
import numbers
from typing import Callable

import torch

from transformer_lessons.checks.common import NO_RETURN, ExerciseError, call_answer, exercise, known_bug
from transformer_lessons.checks.slips import Slip, slip_pairs
from transformer_lessons.schedule import noam_rate


def _buggy_noam(
    step, d_model, warmup, factor=1.0, *, d_power=-0.5, step_power=-0.5, warmup_power=-1.5, pick=min, shift=0
) -> float:
    """Eq. 3 with knobs that reproduce the common bugs; the default knobs give :func:`noam_rate`.

    ``shift``: the step moved by this much inside the function (``step += 1``, an off-by-one).
    """
    step = step + shift
    return factor * d_model**d_power * pick(step**step_power, step * warmup**warmup_power)


# The schedule's mistakes: each hint, and the knobs of _buggy_noam that reproduce it.
_NOAM_BUGS = [
    (
        "the warm-up is missing: take the smaller of the decay term and the warm-up term, so the rate grows "
        "linearly for the first `warmup` steps[[: min(step ** -0.5, step * warmup ** -1.5)]]",
        dict(pick=lambda a, b: a),
    ),
    (
        "only the warm-up branch is there: take the smaller of it and the decay term, so the rate decays "
        "after `warmup` steps[[: min(step ** -0.5, step * warmup ** -1.5)]]",
        dict(pick=lambda a, b: b),
    ),
    (
        "use the smaller (min), not the larger (max), of the decay and warm-up terms"
        "[[: min(step ** -0.5, step * warmup ** -1.5)]]",
        dict(pick=max),
    ),
    (
        "the exponents are wrong: warmup's power is -1.5 in the warm-up term (you used -0.5)"
        "[[: step ** -0.5 and step * warmup ** -1.5]]",
        dict(warmup_power=-0.5),
    ),
    (
        "the exponents are wrong: the step's power is -0.5 in the decay term (you used -1.5)"
        "[[: step ** -0.5 and step * warmup ** -1.5]]",
        dict(step_power=-1.5),
    ),
    (
        "the exponents are swapped: -0.5 belongs to the step, -1.5 to warmup[[: step ** -0.5 and warmup ** -1.5]]",
        dict(step_power=-1.5, warmup_power=-0.5),
    ),
    ("d_model should be raised to the power -0.5[[: d_model ** -0.5]]", dict(d_power=0.5)),
    ("d_model should be raised to the power -0.5[[: d_model ** -0.5]]", dict(d_power=-1.0)),
    ("the factor d_model to the power -0.5 is missing[[: d_model ** -0.5 * ...]]", dict(d_power=0.0)),
    (
        "off by one: at every step your rate is the schedule's rate of the NEXT step, as if the step were moved "
        "by one inside the function. Steps count from 1 and the caller passes the step number itself, so use it "
        "as it comes",
        dict(shift=1),
    ),
]
_NOAM_SLIPS = [Slip(hint, knobs) for hint, knobs in _NOAM_BUGS]


def _rates(fn: Callable[..., float], cases: list[tuple[int, int, int, float]]) -> list[float]:
    """The learner's rate for each (step, d_model, warmup, factor), as floats (factor passed only when not 1)."""
    got = []
    for step, d_model, warmup, factor in cases:
        value = (
            call_answer(fn, step, d_model, warmup) if factor == 1.0 else call_answer(fn, step, d_model, warmup, factor)
        )
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if value is None:
            raise ExerciseError(NO_RETURN)
        if not isinstance(value, numbers.Real):
            raise ExerciseError(f"the rate should be a float, got {type(value).__name__}")
        got.append(float(value))
    return got


@exercise(
    "noam_rate",
    "return the rate of §5.3, Eq. 3: linear warm-up for `warmup` steps, then decay as 1/sqrt(step)",
)
def check_noam_rate(fn: Callable[..., float]) -> str:
    """Check the learning-rate schedule of the paper (§5.3, Eq. 3), "Noam" after Noam Shazeer.

    Expected signature: ``fn(step, d_model, warmup, factor=1.0) -> float`` with
    ``factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``: a linear
    warm-up for ``warmup`` steps, then decay as ``1/sqrt(step)``. Steps count
    from 1 (at step 0, ``step ** -0.5`` divides by zero; training loops call the
    schedule with ``step + 1``).

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (no warm-up, wrong exponents,
            d_model not to the -0.5, max instead of min, factor ignored, the step
            shifted by one).
    """
    cases = [(step, 512, 4000, 1.0) for step in (1, 100, 3999, 4000, 4001, 10000, 100000)]
    cases += [(step, 256, 100, 2.0) for step in (1, 50, 100, 1000)]
    got = _rates(fn, cases)

    def matches(rates):
        return all(math.isclose(g, e, rel_tol=1e-5) for g, e in zip(got, rates))

    expected = [noam_rate(*case) for case in cases]
    if matches(expected):
        return "warm-up, peak at step = warmup, 1/sqrt(step) decay, d_model and factor, 11 steps"
    for hint, knobs in [*_NOAM_SLIPS, *slip_pairs(_NOAM_SLIPS)]:  # each alone, then two at a time
        if matches([_buggy_noam(*case, **knobs) for case in cases]):
            raise known_bug(hint)
    if matches([noam_rate(step, d_model, warmup) for step, d_model, warmup, _ in cases]):
        raise known_bug("the `factor` argument is ignored: multiply the rate by it")
    index = next(i for i, (g, e) in enumerate(zip(got, expected)) if not math.isclose(g, e, rel_tol=1e-5))
    step, d_model, warmup, factor = cases[index]
    raise ExerciseError(
        f"at step={step}, d_model={d_model}, warmup={warmup}, factor={factor} the rate should be "
        f"{expected[index]:.6g}, got {got[index]:.6g}: compare your formula with Eq. 3 of §5.3"
        "[[: factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)]]"
    )
