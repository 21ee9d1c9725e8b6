"""check_auroc (notebook 15), fed right answers written several ways and the bugs learners write.

Each buggy answer is written the way a learner would write it, not with the check's own simulation.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from check_helpers import assert_named, assert_passes, stub
from transformer_lessons.checks import ExerciseError
from transformer_lessons.checks.confidence import _CASES, check_auroc
from transformer_lessons.confidence import auroc


def loops(higher, lower):
    wins = 0.0
    for a in higher:
        for b in lower:
            if a > b:
                wins += 1
            elif a == b:
                wins += 0.5
    return wins / (len(higher) * len(lower))


def with_numpy(higher, lower):
    a, b = np.asarray(higher)[:, None], np.asarray(lower)[None, :]
    return float(((a > b) + 0.5 * (a == b)).mean())


def by_ranks(higher, lower):
    """Mann-Whitney's U from the ranks of the pooled scores (ties share a mean rank)."""
    pooled = list(higher) + list(lower)
    order = sorted(pooled)
    rank = {v: (order.index(v) + 1 + len(order) - order[::-1].index(v)) / 2 for v in pooled}
    u = sum(rank[v] for v in higher) - len(higher) * (len(higher) + 1) / 2
    return u / (len(higher) * len(lower))


def as_tensor(higher, lower):
    a, b = torch.tensor(higher)[:, None], torch.tensor(lower)[None, :]
    return ((a > b).float() + 0.5 * (a == b).float()).mean()  # a 0-d tensor


@pytest.mark.parametrize("answer", [loops, with_numpy, by_ranks, as_tensor])
def test_right_answers_pass(answer, capsys):
    assert_passes(check_auroc, answer, "auroc", capsys)


def test_the_stub_is_not_implemented_yet(capsys):
    assert check_auroc(stub) is None
    assert "not implemented yet" in capsys.readouterr().out


def learner(bug):
    def fn(higher, lower):
        if bug == "swapped":
            higher, lower = lower, higher
        if bug == "zip":
            pairs = list(zip(higher, lower))
        else:
            pairs = [(a, b) for a in higher for b in lower]
        if bug == "strict":
            wins = sum(a > b for a, b in pairs)
        elif bug == "ge":
            wins = sum(a >= b for a, b in pairs)
        elif bug == "strict_and_swapped":
            wins = sum(b > a for a, b in pairs)
        else:
            wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in pairs)
        if bug == "count":
            return wins
        if bug == "sum":
            return wins / (len(higher) + len(lower))
        if bug == "one_list":
            return wins / len(higher)
        return wins / len(pairs)

    return fn


@pytest.mark.parametrize(
    "bug, hint",
    [
        ("strict", "a tie counts as a loss"),
        ("ge", "a tie counts as a whole win"),
        ("swapped", "the groups are swapped"),
        ("zip", "pair the scores by position"),
        ("sum", r"len\(higher\) \+ len\(lower\)"),
        ("one_list", "the size of one list"),
        ("count", "the count of wins"),
        ("strict_and_swapped", "(?s)two things differ.*tie counts as a loss.*groups are swapped"),
    ],
)
def test_each_bug_is_named(bug, hint, capsys):
    error = assert_named(check_auroc, learner(bug), "auroc", hint, capsys)
    assert "len(higher) * len(lower)" not in str(error)  # the fix is kept for hint()


def test_sorting_the_callers_list_in_place_is_refused():
    def sorts(higher, lower):
        higher.sort()
        lower.sort()
        return loops(higher, lower)

    with pytest.raises(ExerciseError, match="changed the lists it was given"):
        check_auroc(sorts)


def test_a_bug_right_on_one_case_only_is_not_named():
    """An answer that is the "ties as losses" bug on the first case only did not make that mistake."""

    def odd(higher, lower):
        if (tuple(higher), tuple(lower)) == _CASES[1]:
            return learner("strict")(higher, lower)
        return loops(higher, lower) + 0.01

    with pytest.raises(ExerciseError) as info:
        check_auroc(odd)
    assert not getattr(info.value, "known_bug", False), str(info.value)
    assert "the AUROC is" in str(info.value)


def test_the_cases_can_tell_every_bug_from_the_answer():
    from transformer_lessons.checks.confidence import _SLIPS, _buggy_auroc

    for slip in _SLIPS:
        assert any(abs(_buggy_auroc(*case, **slip.knobs) - auroc(*case)) > 1e-9 for case in _CASES), slip.hint


def test_a_wrong_type_gets_one_clear_line():
    with pytest.raises(ExerciseError, match="return one number"):
        check_auroc(lambda higher, lower: [0.5])
