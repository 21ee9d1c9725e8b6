"""check_noam_rate (§5.3), fed the reference, correct answers written differently and the bugs learners write."""

from __future__ import annotations

import math

import pytest
import torch

from transformer_lessons import checks, schedule
from transformer_lessons.checks import ExerciseError
from transformer_lessons.checks import schedule as check_schedule
from transformer_lessons.schedule import noam_rate as course_noam_rate

# Collected here and run on this file's tables (check_tables.py, conftest.pytest_generate_tests):
from check_tables import (
    test_bug_written_differently_is_named,  # noqa: F401
    test_correct_answer_written_differently_passes,  # noqa: F401
    test_known_bug_is_named,  # noqa: F401
    test_learner_exception_is_reported_and_chained,  # noqa: F401
    test_other_correct_answers_pass,  # noqa: F401
    test_package_reference_passes,  # noqa: F401
    test_reference_passes_with_one_line,  # noqa: F401
    test_stub_returns_none_and_says_so,  # noqa: F401
)

# --- reference answers written the way a learner would ------------------------------------


def noam_rate(step, d_model, warmup, factor=1.0):
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


# --- right answers and bugs written differently -------------------------------------------


def noam_branch(step, d_model, warmup, factor=1.0):
    if step < warmup:  # warm-up: linear in step
        return factor * step / (math.sqrt(d_model) * warmup**1.5)
    return factor / math.sqrt(d_model * step)  # then 1/sqrt(step)


def noam_sqrt(step, d_model, warmup, factor=1.0):
    return factor * math.pow(d_model, -0.5) * min(1 / math.sqrt(step), step / (warmup * math.sqrt(warmup)))


def noam_branch_flipped(step, d_model, warmup, factor=1.0):
    if step > warmup:  # the bug: the comparison is the wrong way round, so each branch runs where the other should
        return factor * step / (math.sqrt(d_model) * warmup**1.5)
    return factor / math.sqrt(d_model * step)


# --- the tables ---------------------------------------------------------------------------

REFERENCES = {
    "noam_rate": (checks.check_noam_rate, noam_rate),
}


# (check, buggy answer, a phrase the hint must contain)
BUGS = {
    # learning-rate schedule
    "noam-no-warmup": ("noam_rate", lambda s, d, w, f=1.0: f * d**-0.5 * s**-0.5, "warm-up is missing"),
    "noam-exponent": ("noam_rate", lambda s, d, w, f=1.0: f * d**-0.5 * min(s**-0.5, s * w**-0.5), "exponents"),
    "noam-d-model": ("noam_rate", lambda s, d, w, f=1.0: f * d**0.5 * min(s**-0.5, s * w**-1.5), "power -0.5"),
    "noam-max": ("noam_rate", lambda s, d, w, f=1.0: f * d**-0.5 * max(s**-0.5, s * w**-1.5), "not the larger (max)"),
    "noam-factor-ignored": ("noam_rate", lambda s, d, w, f=1.0: d**-0.5 * min(s**-0.5, s * w**-1.5), "factor"),
    "noam-wrong-type": ("noam_rate", lambda s, d, w, f=1.0: [noam_rate(s, d, w, f)], "float"),
    "noam-unknown": ("noam_rate", lambda s, d, w, f=1.0: 1e-3, "should be"),
}


# Correct answers written differently from the package: the checks must accept them too.
ALTERNATIVES = {
    "noam-tensor": (
        "noam_rate",
        lambda s, d, w, f=1.0: f * torch.tensor(d, dtype=torch.float64) ** -0.5 * min(s**-0.5, s * w**-1.5),
    ),
}


# Correct answers written the way a learner would, differently from the reference and the answers above.
WRITTEN_DIFFERENTLY = {
    "noam_branch": ("noam_rate", noam_branch),
    "noam_sqrt": ("noam_rate", noam_sqrt),
}


# Bugs written in the styles above, each one a mistake the older tests did not feed its check:
# (check, buggy answer, a phrase of the message that names the bug)
BUGS_WRITTEN_DIFFERENTLY = {
    "noam_branch_flipped": ("noam_rate", noam_branch_flipped, "not the larger (max)"),
}


# --- tests --------------------------------------------------------------------------------


PACKAGE_REFERENCES = {
    "noam_rate": schedule.noam_rate,
}


@pytest.mark.parametrize("name", ["noam_rate"])
def test_returning_none_asks_for_a_return(name):
    with pytest.raises(ExerciseError, match="return"):
        REFERENCES[name][0](lambda *args: None)


def test_buggy_noam_with_default_knobs_is_the_course_formula():
    # check_noam_rate compares with schedule.noam_rate; its knob function only reproduces the bugs,
    # and must not drift from the one formula it varies.
    for d_model, warmup, factor in ((512, 4000, 1.0), (256, 100, 2.0), (128, 1, 0.5)):
        for step in (1, 2, warmup - 1 or 1, warmup, warmup + 1, 10 * warmup, 123_457):
            assert check_schedule._buggy_noam(step, d_model, warmup, factor) == course_noam_rate(
                step, d_model, warmup, factor
            )
