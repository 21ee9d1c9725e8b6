"""check_layer_norm and check_feed_forward, fed the reference, correct answers written differently and the bugs learners write."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from check_helpers import failure, forward_stub, returns_float64
from transformer_lessons import checks
from transformer_lessons.layers import LayerNorm, PositionwiseFeedForward, layer_norm as layer_norm_formula

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
    test_wrong_dtype_is_reported,  # noqa: F401
    test_wrong_shape_is_reported,  # noqa: F401
)

# --- answers for the tables below, right and buggy ----------------------------------------


class BuggyLayerNorm(nn.Module):
    bug: str | None = None

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = 1e-5 if self.bug == "ignores_eps" else eps

    def forward(self, x):
        bug = self.bug
        dim = 0 if bug == "dim0" else -1
        mean = x.mean(dim, keepdim=True)
        if bug == "in_place":
            x -= mean
            return self.weight * x / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + self.eps) + self.bias
        if bug == "annotated":  # the Annotated Transformer's version: unbiased std, eps outside
            return self.weight * (x - mean) / (x.std(-1, keepdim=True) + self.eps) + self.bias
        var = x.var(dim, keepdim=True, unbiased=bug == "unbiased")
        denominator = var.sqrt() + self.eps if bug == "eps_outside" else torch.sqrt(var + self.eps)
        normed = (x - mean) / denominator
        if bug == "shape":
            return normed.mean(-1)
        if bug == "no_gain":
            return normed + self.bias
        if bug == "no_bias":
            return self.weight * normed
        return self.weight * normed + self.bias


def layer_norm(bug):
    return type(f"LayerNorm_{bug}", (BuggyLayerNorm,), {"bug": bug})


class LayerNormPlainTensors(BuggyLayerNorm):
    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model, eps)
        del self.weight
        self.weight = torch.ones(d_model)  # not a Parameter: never trained


class BuggyFeedForward(PositionwiseFeedForward):
    bug: str | None = None

    def forward(self, x):
        bug = self.bug
        h = self.w_1(x)
        if bug not in ("no_relu", "relu_after_w_2"):
            h = F.gelu(h) if bug == "gelu" else torch.relu(h)
        if bug == "shape":
            return h
        y = self.w_2(self.dropout(h))
        if bug in ("relu_twice", "relu_after_w_2"):
            y = torch.relu(y)
        return x + y if bug == "residual" else y


def feed_forward(bug):
    return type(f"FFN_{bug}", (BuggyFeedForward,), {"bug": bug})


class FeedForwardTransposed(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_ff, d_model)
        self.w_2 = nn.Linear(d_model, d_ff)

    def forward(self, x):
        return x


class LayerNormWrittenOut(LayerNorm):
    """The package's LayerNorm computes with F.layer_norm, which the exercise refuses; this is its formula written out."""

    def forward(self, x):
        return layer_norm_formula(x, self.weight, self.bias, self.eps)


class LayerNormFunctional(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


# --- right answers and bugs written differently -------------------------------------------


class LayerNormSquares(nn.Module):
    """The variance as the mean squared deviation, and rsqrt."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps
        self.bug = ""

    def forward(self, x):
        dims = tuple(range(x.dim())) if self.bug == "whole_tensor" else -1
        centred = x - x.mean(dim=dims, keepdim=True)
        var = (centred**2).mean(dim=dims, keepdim=True)  # biased: divides by D
        if self.bug == "divides_by_variance":
            return self.weight * centred / (var + self.eps) + self.bias
        return self.weight * centred * torch.rsqrt(var + self.eps) + self.bias


class LayerNormVarMean(nn.Module):
    """torch.var_mean with correction=0 (the biased variance), and the gain and bias as addcmul."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, correction=0, keepdim=True)  # (..., 1) each
        return torch.addcmul(self.bias, self.weight, (x - mean) / (var + self.eps).sqrt())


def _layer_norm_bug(bug):
    def init(self, d_model, eps=1e-5):
        LayerNormSquares.__init__(self, d_model, eps)
        self.bug = bug

    return type(f"LayerNorm_{bug}", (LayerNormSquares,), {"__init__": init})


ln_divides_by_variance = _layer_norm_bug("divides_by_variance")


ln_whole_tensor = _layer_norm_bug("whole_tensor")


class FeedForwardClamp(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.w_2(self.dropout(torch.clamp(self.w_1(x), min=0)))  # clamp(min=0) is max(0, x)


class FeedForwardSequential(nn.Module):
    """The same two Linear layers, registered as w_1 and w_2 and run inside an nn.Sequential."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.net = nn.Sequential(self.w_1, nn.ReLU(), nn.Dropout(dropout), self.w_2)

    def forward(self, x):
        return self.net(x)


class FeedForwardMatmul(nn.Module):
    """Eq. 2 as written in the paper, max(0, x W1 + b1) W2 + b2, from the layers' weights."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.p = dropout

    def forward(self, x):
        hidden = F.relu(x @ self.w_1.weight.T + self.w_1.bias)  # (B, L, d_ff)
        hidden = F.dropout(hidden, self.p, training=self.training)
        return hidden @ self.w_2.weight.T + self.w_2.bias  # (B, L, D)


class ffn_dropout_on_output(PositionwiseFeedForward):  # noqa: N801 - named like the other bugs in the table
    def forward(self, x):
        return self.dropout(self.w_2(torch.relu(self.w_1(x))))  # the bug: dropout after w_2


class ffn_dropout_on_input(PositionwiseFeedForward):  # noqa: N801
    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(self.dropout(x))))  # the bug: dropout on the input


class ffn_relu_on_input(FeedForwardClamp):  # noqa: N801 - named like the other bugs in the table
    def forward(self, x):
        return self.w_2(self.dropout(self.w_1(torch.clamp(x, min=0))))  # the bug: clamps the input


# --- the tables ---------------------------------------------------------------------------

REFERENCES = {
    "layer_norm": (checks.check_layer_norm, LayerNormWrittenOut),
    "feed_forward": (checks.check_feed_forward, PositionwiseFeedForward),
}


# (check, buggy answer, a phrase the hint must contain)
BUGS = {
    # layer norm
    "ln-unbiased": ("layer_norm", layer_norm("unbiased"), "biased variance"),
    "ln-eps-outside": ("layer_norm", layer_norm("eps_outside"), "INSIDE the square root"),
    "ln-annotated": ("layer_norm", layer_norm("annotated"), "biased variance and put eps inside"),
    "ln-dim0": ("layer_norm", layer_norm("dim0"), "LAST axis"),
    "ln-no-gain": ("layer_norm", layer_norm("no_gain"), "gain is missing"),
    "ln-no-bias": ("layer_norm", layer_norm("no_bias"), "bias is missing"),
    "ln-ignores-eps": ("layer_norm", layer_norm("ignores_eps"), "eps argument is ignored"),
    "ln-in-place": ("layer_norm", layer_norm("in_place"), "in place"),
    "ln-not-parameter": ("layer_norm", LayerNormPlainTensors, "nn.Parameter"),
    "ln-built-in-nn": ("layer_norm", nn.LayerNorm, "PyTorch's own layer norm"),
    "ln-built-in-functional": ("layer_norm", LayerNormFunctional, "PyTorch's own layer norm"),
    "ln-built-in-package": ("layer_norm", LayerNorm, "PyTorch's own layer norm"),
    # feed-forward
    "ffn-no-relu": ("feed_forward", feed_forward("no_relu"), "ReLU is missing"),
    "ffn-relu-twice": ("feed_forward", feed_forward("relu_twice"), "only between"),
    "ffn-relu-after-w-2": ("feed_forward", feed_forward("relu_after_w_2"), "not after w_2"),
    "ffn-gelu": ("feed_forward", feed_forward("gelu"), "GELU"),
    "ffn-residual": ("feed_forward", feed_forward("residual"), "residual"),
    "ffn-transposed-linears": ("feed_forward", FeedForwardTransposed, "nn.Linear(6, 10)"),
}


# Answers of the wrong shape: the message must say "shape".
WRONG_SHAPES = {
    "layer_norm": layer_norm("shape"),
    "feed_forward": feed_forward("shape"),
}


# Answers of the wrong dtype (float64 from float32 inputs): the message must name the dtype.
WRONG_DTYPES = {
    "layer_norm": returns_float64(LayerNormWrittenOut),
    "feed_forward": returns_float64(PositionwiseFeedForward),
}


# Correct answers written differently from the package: the checks must accept them too.
ALTERNATIVES = {
    "layer-norm-written-out": ("layer_norm", LayerNormWrittenOut),
}


# Correct answers written the way a learner would, differently from the reference and the answers above.
WRITTEN_DIFFERENTLY = {
    "LayerNormSquares": ("layer_norm", LayerNormSquares),
    "LayerNormVarMean": ("layer_norm", LayerNormVarMean),
    "FeedForwardClamp": ("feed_forward", FeedForwardClamp),
    "FeedForwardSequential": ("feed_forward", FeedForwardSequential),
    "FeedForwardMatmul": ("feed_forward", FeedForwardMatmul),
}


# Bugs written in the styles above, each one a mistake the older tests did not feed its check:
# (check, buggy answer, a phrase of the message that names the bug)
BUGS_WRITTEN_DIFFERENTLY = {
    "ln_divides_by_variance": ("layer_norm", ln_divides_by_variance, "not by the variance"),
    "ln_whole_tensor": ("layer_norm", ln_whole_tensor, "not over the whole tensor"),
    "ffn_relu_on_input": ("feed_forward", ffn_relu_on_input, "not on the input"),
    "ffn_dropout_on_output": ("feed_forward", ffn_dropout_on_output, "not on the output of w_2"),
    "ffn_dropout_on_input": ("feed_forward", ffn_dropout_on_input, "not on the input x"),
}


# --- tests --------------------------------------------------------------------------------


PACKAGE_REFERENCES = {
    "layer_norm": LayerNormWrittenOut,
    "feed_forward": PositionwiseFeedForward,
}


@pytest.mark.parametrize("name", ["layer_norm", "feed_forward"])
def test_class_with_forward_stub_returns_none(name, capsys):
    check, reference = REFERENCES[name]
    assert check(forward_stub(reference)) is None
    assert "not implemented yet" in capsys.readouterr().out


# --- answers that used to fool the checks: dropout, biases, NaN ---------------------------


class FeedForwardFunctionalDropout(nn.Module):
    """F.dropout without training=self.training: dropout stays on in eval mode."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w_1, self.w_2, self.p = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model), dropout

    def forward(self, x):
        return self.w_2(F.dropout(torch.relu(self.w_1(x)), self.p))


class FeedForwardNoDropout(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class FeedForwardFixedDropout(FeedForwardNoDropout):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(0.1)  # the bug: the argument is ignored

    def forward(self, x):
        return self.w_2(self.dropout(torch.relu(self.w_1(x))))


@pytest.mark.parametrize(
    "check, answer",
    [
        (checks.check_feed_forward, FeedForwardFunctionalDropout),
    ],
    ids=["feed_forward"],
)
def test_dropout_left_on_in_eval_mode_is_named(check, answer):
    error = failure(check, answer)
    message = str(error)
    assert "dropout is still on" in message and "training=self.training" in " ".join(error.fixes), message


def test_dropout_never_applied_is_named():
    assert "the dropout argument is not used" in str(failure(checks.check_feed_forward, FeedForwardNoDropout))


def test_dropout_rate_hard_coded_is_named():
    assert "hard-coded" in str(failure(checks.check_feed_forward, FeedForwardFixedDropout))


class FeedForwardNoBias(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff, bias=False)
        self.w_2 = nn.Linear(d_ff, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.w_2(self.dropout(torch.relu(self.w_1(x))))


class FeedForwardWeightsOnly(PositionwiseFeedForward):
    def forward(self, x):
        hidden = torch.relu(x @ self.w_1.weight.T)  # the bug: the biases are left out
        return self.dropout(hidden) @ self.w_2.weight.T


def test_feed_forward_without_biases_is_named():
    assert "has no bias" in str(failure(checks.check_feed_forward, FeedForwardNoBias))
    assert "the biases are missing" in str(failure(checks.check_feed_forward, FeedForwardWeightsOnly))


class FeedForwardSqrt(PositionwiseFeedForward):
    def forward(self, x):
        return self.w_2(self.dropout(torch.sqrt(self.w_1(x))))  # the bug: sqrt of negative numbers


def test_nan_without_softmax_does_not_blame_masks():
    message = str(failure(checks.check_feed_forward, FeedForwardSqrt))
    assert "NaN" in message and "sqrt" in message
    assert "mask" not in message and "softmax" not in message


# --- an instance instead of the class -----------------------------------------------------


@pytest.mark.parametrize(
    "check, instance, name",
    [
        (checks.check_feed_forward, PositionwiseFeedForward(8, 16), "feed_forward(PositionwiseFeedForward)"),
        (checks.check_layer_norm, LayerNorm(8), "layer_norm(LayerNorm)"),
    ],
    ids=["feed_forward", "layer_norm"],
)
def test_an_instance_instead_of_the_class_is_named(check, instance, name):
    message = str(failure(check, instance))
    assert f"pass the class, not an instance: check_{name}" in message, message
