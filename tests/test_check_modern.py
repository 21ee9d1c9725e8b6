"""The check of notebook 14 (check_rms_norm), fed right answers written several ways and the bugs learners write.

Each answer is written the way a learner would write it, not with the check's own
bug simulations; tests/test_check_common.py's COVERAGE names them.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from check_helpers import assert_named, assert_passes, stub
from transformer_lessons.checks import ExerciseError, check_rms_norm
from transformer_lessons.layers import RMSNorm, rms_norm


# --- right answers ------------------------------------------------------------------------


def rms_pow_mean(x, weight, eps=1e-5):
    return weight * x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)


def rms_rsqrt(x, weight, eps=1e-5):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def rms_norm_of_vector(x, weight, eps=1e-5):
    # ||x|| / sqrt(D) is the root mean square; eps under the root with the mean square.
    D = x.size(-1)
    return weight * x / torch.sqrt(x.norm(dim=-1, keepdim=True) ** 2 / D + eps)


def rms_functional(x, weight, eps=1e-5):
    return F.rms_norm(x, (x.size(-1),), weight, eps)


def rms_module(x, weight, eps=1e-5):
    # The package's module with the given gain.
    m = RMSNorm(x.size(-1), eps=eps)
    m.weight.data.copy_(weight)
    return m(x)


# --- bugs ---------------------------------------------------------------------------------


def rms_centred(x, weight, eps=1e-5):
    # LayerNorm's first step kept: the mean subtracted.
    y = x - x.mean(-1, keepdim=True)
    return weight * y / torch.sqrt(y.pow(2).mean(-1, keepdim=True) + eps)


def rms_std(x, weight, eps=1e-5):
    return weight * x / torch.sqrt(x.var(-1, keepdim=True) + eps)


def rms_eps_outside(x, weight, eps=1e-5):
    return weight * x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps)


def rms_no_sqrt(x, weight, eps=1e-5):
    return weight * x / (x.pow(2).mean(-1, keepdim=True) + eps)


def rms_sum(x, weight, eps=1e-5):
    return weight * x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def rms_over_batch(x, weight, eps=1e-5):
    return weight * x / torch.sqrt(x.pow(2).mean(0, keepdim=True) + eps)


def rms_over_positions(x, weight, eps=1e-5):
    return weight * x / torch.sqrt(x.pow(2).mean(1, keepdim=True) + eps)


def rms_whole_tensor(x, weight, eps=1e-5):
    return weight * x / torch.sqrt(x.pow(2).mean() + eps)


def rms_no_gain(x, weight, eps=1e-5):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rms_multiplied(x, weight, eps=1e-5):
    return weight * x * torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rms_llama_eps(x, weight, eps=1e-6):
    # LLaMA's default epsilon, 1e-6.
    return weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rms_torch_without_eps(x, weight, eps=1e-5):
    # F.rms_norm's eps left out: PyTorch then takes the dtype's machine epsilon, not 1e-5.
    return F.rms_norm(x, (x.size(-1),), weight)


def rms_ignores_eps(x, weight, eps=1e-5):
    return weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)


def rms_no_eps(x, weight, eps=1e-5):
    return weight * x / x.pow(2).mean(-1, keepdim=True).sqrt()


def rms_std_and_eps_outside(x, weight, eps=1e-5):
    return weight * x / (x.std(-1, keepdim=True) + eps)


def rms_in_place(x, weight, eps=1e-5):
    x /= torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x


def rms_float64(x, weight, eps=1e-5):
    return (weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)).double()


def rms_keepdim_forgotten(x, weight, eps=1e-5):
    return weight * x / torch.sqrt(x.pow(2).mean(-1) + eps)


@pytest.mark.parametrize(
    "answer",
    [rms_pow_mean, rms_rsqrt, rms_norm_of_vector, rms_norm],
    ids=["pow_mean", "rsqrt", "norm_of_vector", "package"],
)
def test_right_answers_pass(answer, capsys):
    assert_passes(check_rms_norm, answer, "rms_norm", capsys)


def rms_torch_module(x, weight, eps=1e-5):
    m = torch.nn.RMSNorm(x.size(-1), eps=eps)
    m.weight.data.copy_(weight)
    return m(x)


def rms_torch_function(x, weight, eps=1e-5):
    return torch.rms_norm(x, (x.size(-1),), weight, eps)


@pytest.mark.parametrize(
    "answer", [rms_functional, rms_module, rms_torch_module, rms_torch_function, rms_torch_without_eps]
)
def test_calling_pytorchs_own_rms_norm_is_refused(answer, capsys):
    """Issue 30 (T6): F.rms_norm is what the check compares with; an answer that calls it (or a module that does)
    passed the check without writing RMSNorm. Now it is told to write the formula, and F.rms_norm is unpatched after."""
    assert_named(check_rms_norm, answer, "rms_norm", r"calls PyTorch's own RMSNorm", capsys)
    assert (F.rms_norm, torch.rms_norm) == _PYTORCHS_OWN, "the check puts PyTorch's functions back"


_PYTORCHS_OWN = (F.rms_norm, torch.rms_norm)


@pytest.mark.parametrize(
    "bug, hint",
    [
        (rms_centred, r"does not subtract the mean: that is LayerNorm's"),
        (rms_std, r"not the standard deviation"),
        (rms_eps_outside, r"eps belongs INSIDE the square root"),
        (rms_no_sqrt, r"ROOT mean square"),
        (rms_sum, r"MEAN of the squares"),
        (rms_over_batch, r"reduced over the batch \(dim=0\)"),
        (rms_over_positions, r"reduced over the positions \(dim=1\)"),
        (rms_whole_tensor, r"not over the whole tensor"),
        (rms_no_gain, r"the gain is missing"),
        (rms_multiplied, r"DIVIDE by the root mean square"),
        (rms_llama_eps, r"your default eps is 1e-06"),
        (rms_ignores_eps, r"the eps argument is ignored: called with eps=0\.01, your function used 1e-05"),
        (rms_no_eps, r"eps is missing"),
        (rms_std_and_eps_outside, r"(?s)two things differ.*standard deviation.*INSIDE the square root"),
    ],
    ids=lambda x: x.__name__ if callable(x) else "",
)
def test_bugs_are_named(bug, hint, capsys):
    assert_named(check_rms_norm, bug, "rms_norm", hint, capsys)


def test_an_answer_that_changes_its_input_is_told_so():
    with pytest.raises(ExerciseError, match="changed its input `x` in place"):
        check_rms_norm(rms_in_place)


def test_a_float64_answer_is_told_to_keep_the_dtype():
    with pytest.raises(ExerciseError, match="wrong dtype torch.float64"):
        check_rms_norm(rms_float64)


def test_a_reduced_axis_that_is_not_kept_is_told_to_keep_it():
    with pytest.raises(ExerciseError, match=r"(?s)at line \d+ of your `rms_keepdim_forgotten`.*keepdim=True"):
        check_rms_norm(rms_keepdim_forgotten)


def test_a_stub_is_not_implemented_yet(capsys):
    assert check_rms_norm(stub) is None
    assert "not implemented yet" in capsys.readouterr().out


def test_the_reference_is_the_paper_formula():
    # Zhang & Sennrich (2019) Eq. 4 by hand, on one vector: g * x / sqrt(mean(x^2) + eps).
    x, g = torch.tensor([3.0, -4.0]), torch.tensor([2.0, 0.5])
    rms = math.sqrt((9 + 16) / 2 + 1e-5)
    expected = torch.tensor([2.0 * 3 / rms, 0.5 * -4 / rms])
    assert torch.allclose(F.rms_norm(x, (2,), g, 1e-5), expected)
    assert torch.allclose(rms_pow_mean(x, g), expected)
