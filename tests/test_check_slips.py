"""Tests of transformer_lessons/checks/slips.py: mistakes tried one and two at a time."""

from __future__ import annotations

import pytest
import torch

from transformer_lessons import checks
from transformer_lessons.checks.slips import Slip, slip_bugs


def test_slip_bugs_tries_each_alone_then_pairs_on_different_knobs():
    def simulate(a=0, b=0, c=0):
        return (a, b, c)

    bugs = slip_bugs(
        simulate, [Slip("A", {"a": 1}), Slip("A2", {"a": 2}), Slip("B", {"b": 1})], partners=[Slip("C", {"c": 1})]
    )
    named = {hint: thunk() for hint, thunk in bugs}
    assert [hint for hint, _ in bugs][:4] == ["A", "A2", "B", "C"]  # singles first, in order
    assert named["two things differ, fix both:\n  1. A\n  2. B"] == (1, 1, 0)
    assert named["two things differ, fix both:\n  1. B\n  2. C"] == (0, 1, 1)
    assert not any("A\n  2. A2" in hint for hint in named)  # the same knob twice is no pair
    without = slip_bugs(simulate, [Slip("A", {"a": 1}), Slip("B", {"b": 1})], [Slip("C", {"c": 1})], among=False)
    assert [hint.split("\n")[-1] for hint, _ in without if "two things" in hint] == ["  2. C", "  2. C"]


def test_pythons_not_on_a_tensor_is_pointed_to_the_tensor_operators():
    # `not blocked` asks the whole mask for one bool: PyTorch's message says "ambiguous" and nothing about ~ (issue 29).
    def with_not(blocked):
        return not blocked

    with pytest.raises(checks.ExerciseError) as error:
        checks.check_mask_inversion(with_not)
    message = str(error.value)
    assert "Boolean value of Tensor with more than one value is ambiguous" in message
    assert "~ for not, & for and, | for or" in message and "return not blocked" in message  # their line, quoted

    def with_and(size):
        upper = torch.ones(size, size).triu(1).bool()
        return torch.ones(size, size).bool() and not upper

    with pytest.raises(checks.ExerciseError) as error:
        checks.check_causal_mask(with_and)
    assert "~ for not, & for and, | for or" in str(error.value)
