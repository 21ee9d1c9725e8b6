"""Checks for the layers inside a sublayer: layer normalisation and the position-wise feed-forward (§3.1, §3.3).

The references: ``nn.LayerNorm`` holding the learner's (non-trivial) gain and
bias, and ``w_2(relu(w_1(x)))`` computed from the learner's own two Linear layers.
"""

from __future__ import annotations

import functools
import math
from typing import Callable
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lessons.checks.common import (
    DROPOUT,
    Bug,
    ExerciseError,
    call_answer,
    call_in_eval,
    diagnose,
    exercise,
    expect_dropout,
    expect_dropout_at,
    fixed_dropout,
    expect_tensor,
    expect_unchanged,
    known_bug,
    expect_linear,
    build_module,
    shape_of,
)
from transformer_lessons.checks.evidence import Inputs
from transformer_lessons.checks.slips import Slip, own_default, own_number, slip_bugs


def _layer_norm(
    x, weight, bias, eps=1e-5, unbiased=False, eps_outside=False, dim=-1, gain=True, shift=True, sqrt=True, swap=False
):
    """LayerNorm with knobs that reproduce the common bugs (defaults: nn.LayerNorm)."""
    mean = x.mean(dim=dim, keepdim=True)
    var = x.var(dim=dim, keepdim=True, unbiased=unbiased)
    if eps_outside:
        normed = (x - mean) / (var.sqrt() + eps)
    else:
        normed = (x - mean) / ((var + eps).sqrt() if sqrt else var + eps)
    if swap:
        weight, bias = bias, weight
    return (weight * normed if gain else normed) + (bias if shift else 0)


# Where learners (and tutorials) keep their epsilon: nn.LayerNorm's `eps`, BERT's `variance_epsilon`, ...
_EPS_NAMES = ("eps", "epsilon", "variance_epsilon", "eps_")


# The formula's mistakes, independent of the inputs: each alone, then (slip_bugs) two at a time.
_LAYER_NORM_SLIPS = [
    Slip(
        "use the biased variance, as nn.LayerNorm does, dividing by D "
        "(torch.var's default divides by D - 1)[[: x.var(dim=-1, keepdim=True, unbiased=False)]]",
        {"unbiased": True},
    ),
    Slip(
        "eps belongs INSIDE the square root, added to the variance, not to the standard deviation"
        "[[: (x - mean) / torch.sqrt(var + eps), not / (std + eps)]]",
        {"eps_outside": True},
    ),
    Slip(
        "use the biased variance and put eps inside the square root"
        "[[: (x - mean) / torch.sqrt(var + eps) with var = x.var(dim=-1, keepdim=True, unbiased=False)]]",
        {"eps_outside": True, "unbiased": True},
    ),
    Slip(
        "divide by the standard deviation (the square root), not by the variance[[: torch.sqrt(var + eps)]]",
        {"sqrt": False},
    ),
    Slip(
        "normalise over the LAST axis, the features; "
        "you normalised over the batch (dim=0)[[: mean(dim=-1, keepdim=True), var(dim=-1, ...)]]",
        {"dim": 0},
    ),
    Slip(
        "normalise over the LAST axis, the features; you normalised over the "
        "positions (dim=1)[[: mean(dim=-1, keepdim=True)]]",
        {"dim": 1},
    ),
    Slip(
        "normalise each vector over the LAST axis, not over the whole tensor[[: dim=-1, keepdim=True]]",
        {"dim": (0, 1, 2)},
    ),
    Slip("the gain is missing: multiply the normalised x by self.weight", {"gain": False}),
    Slip("the bias is missing: add self.bias after scaling", {"shift": False}),
    Slip(
        "the gain and the bias are missing: scale by weight, then shift by bias"
        "[[: return self.weight * normalised + self.bias]]",
        {"gain": False, "shift": False},
    ),
    Slip("weight and bias are swapped: weight multiplies, bias adds", {"swap": True}),
]


def _eps_partners(eps: float, own_eps: float | None, default: bool) -> list[Slip]:
    """The learner's own epsilon, as a partner slip tried on top of every formula bug (see :func:`_layer_norm_bugs`)."""
    differs = own_eps is not None and not math.isclose(own_eps, eps)
    partners = []
    if default:  # built as cls(d_model): its own default eps, or (unknown) the usual other one, 1e-6
        wrong_eps = own_eps if differs else 1e-6
        hint = (
            f"your default eps is {wrong_eps:g}: this exercise's, like nn.LayerNorm's, is 1e-5 (eps decides how "
            "much a vector of nearly equal entries is blown up, so the two give different outputs)"
        )
    else:  # built as cls(d_model, eps=eps): what it uses instead, or (unknown) the default 1e-5
        wrong_eps = own_eps if differs else 1e-5
        hint = (
            f"the eps argument is ignored: built with eps={eps:g}, your module uses {wrong_eps:g}. Store the "
            "argument and use it"
            if differs
            else "the eps argument is ignored: store it and use it[[: self.eps = eps]]"
        )
    if differs or own_eps is None:
        partners.append(Slip(hint, {"eps": wrong_eps}))
    return partners


def _layer_norm_bugs(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
    own_eps: float | None = None,
    default: bool = True,
) -> list[Bug]:
    """The common LayerNorm bugs on x: each hint, and what that bug returns; then two at a time.

    ``own_eps`` is the epsilon the learner's module holds (None when it cannot be
    read). When it differs from ``eps`` that difference is tried on top of every
    formula bug, so the Annotated Transformer's LayerNorm (its own default 1e-6, the
    unbiased std, eps outside the square root) is named as both. ``default``: the
    module was built with its default eps (else with ``eps`` passed in).
    """

    def simulate(**knobs):
        return _layer_norm(x, weight, bias, **({"eps": eps} | knobs))

    return slip_bugs(simulate, _LAYER_NORM_SLIPS, _eps_partners(eps, own_eps, default))


def _renamed_parameters(m: nn.Module, D: int) -> ExerciseError | None:
    """A known bug when the learner's gain and shift are two (D,) parameters under other names (a_2, b_2; alpha, bias)."""
    own = [name for name, p in m.named_parameters(recurse=False) if shape_of(p) == (D,)]
    if len(own) == 2 and set(own) != {"weight", "bias"}:
        return known_bug(
            f"your two parameters of shape ({D},) are called `{own[0]}` and `{own[1]}`: this exercise, like "
            "nn.LayerNorm, calls the gain `weight` and the shift `bias`, the names the course's LayerNorm weights are "
            "saved and loaded under"
        )
    return None


_LAYER_NORM_NAN = (
    "Is eps added INSIDE the square root, to the variance? Without it a vector whose "
    "entries are all equal divides 0 by 0"
)


_BUILT_IN = (
    "your module calls PyTorch's own layer norm (F.layer_norm, torch.layer_norm or nn.LayerNorm): this exercise "
    "asks you to compute it yourself, from the mean and the variance of each vector"
)


def _own_formula(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The learner's output on x; refused if it came from PyTorch's built-in layer norm."""
    used = []

    def spy(real):
        def recorded(*args, **kwargs):
            used.append(True)
            return real(*args, **kwargs)

        return recorded

    with (
        mock.patch.object(F, "layer_norm", spy(F.layer_norm)),
        mock.patch.object(torch, "layer_norm", spy(torch.layer_norm)),
    ):
        out = call_answer(layer, x)
    if used:
        raise known_bug(_BUILT_IN)
    return out


@exercise(
    "layer_norm",
    "normalise each vector over its last axis, then apply the gain weight and the bias",
    takes="class",
)
def check_layer_norm(cls: Callable[..., nn.Module]) -> str:
    """Check a layer normalisation module (Ba et al. 2016; paper §3.1 uses it after every sublayer).

    Expected signature: ``cls(d_model, eps=1e-5)``, an ``nn.Module`` with
    parameters ``weight`` (ones) and ``bias`` (zeros) of shape ``(d_model,)``,
    computing ``weight * (x - mean) / sqrt(var + eps) + bias`` over the last
    axis with the biased variance: the same function as ``nn.LayerNorm``.

    Shape:
        ``(..., D)`` -> ``(..., D)``.

    Args:
        cls: the learner's class.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (unbiased variance, eps outside the
            square root, wrong axis, missing gain or bias, ignored eps, another
            default eps read from the module, gain and shift under other names),
            or two at once (the Annotated Transformer's: unbiased std, eps outside,
            and its default eps 1e-6).
    """
    D = 8
    m = build_module(cls, (D,), "cls(d_model, eps=1e-5)")
    if not isinstance(getattr(m, "weight", None), nn.Parameter) and (renamed := _renamed_parameters(m, D)):
        raise renamed
    for name, start in (("weight", torch.ones(D)), ("bias", torch.zeros(D))):
        p = getattr(m, name, None)
        if not isinstance(p, nn.Parameter):
            raise ExerciseError(
                f"`{name}` should be an nn.Parameter of shape ({D},) so the optimiser trains it; "
                f"got {type(p).__name__ if p is not None else 'nothing'}"
            )
        if shape_of(p) != (D,):
            raise ExerciseError(f"`{name}` should have shape (d_model,) = ({D},), got {shape_of(p)}")
        if not torch.equal(p.detach(), start):
            start_name = "torch.ones(d_model)" if name == "weight" else "torch.zeros(d_model)"
            raise ExerciseError(f"`{name}` should start as {start_name}, as nn.LayerNorm's does")
    # Non-trivial gain and bias, so forgetting (or swapping) them shows.
    m.weight.copy_(1 + 0.5 * torch.randn(D))
    m.bias.copy_(torch.randn(D))
    weight, bias = m.weight.detach().clone(), m.bias.detach().clone()
    # Rows at very different scales: tiny-variance rows make eps's place visible.
    scale = torch.tensor([[3.0, 1e-3, 1.0], [0.5, 2.0, 1e-3]])[..., None]  # (2, 3, 1)
    x = scale * (torch.randn(2, 3, D) + 1.5)  # (2, 3, D), non-zero means
    seen = Inputs()  # a bug is named only if it explains every input
    for eps in (1e-5, 1e-2):
        with seen.one():
            layer = m if eps == 1e-5 else _make_layer_norm(cls, D, eps, weight, bias)
            original = x.clone()
            out = expect_tensor(_own_formula(layer, x), "the output", x.shape, x.dtype, nan_hint=_LAYER_NORM_NAN)
            expect_unchanged({"x": original}, {"x": x})
            reference = nn.LayerNorm(D, eps=eps)
            reference.weight.copy_(weight)
            reference.bias.copy_(bias)
            # The learner's own epsilon: what their module holds, else their constructor's default.
            own_eps = own_number(layer, _EPS_NAMES)
            if own_eps is None and eps == 1e-5:
                own_eps = own_default(cls, "eps")
            seen.compare(
                out,
                reference(x),
                _layer_norm_bugs(x, weight, bias, eps, own_eps, default=eps == 1e-5),
                f"the output (eps={eps})",
                "compare with nn.LayerNorm(d_model)",
            )
    seen.verdict()
    return (
        "parameters, your own formula (not PyTorch's layer norm), values against nn.LayerNorm with non-trivial weight "
        "and bias, eps, inputs unchanged"
    )


def _make_layer_norm(cls, D, eps, weight, bias) -> nn.Module:
    m = build_module(lambda *args: cls(*args, eps=eps), (D,), "cls(d_model, eps=1e-5)")
    m.weight.copy_(weight)
    m.bias.copy_(bias)
    return m


def _ffn(m, x, relu_at=("hidden",), activation=F.relu, residual=False, biases=(True, True), drop_at=()):
    """w_2(relu(w_1(x))) from the learner's layers, with knobs that reproduce the common bugs.

    ``drop_at``: where the fixed dropout stand-in (:func:`fixed_dropout`) acts: "input", "hidden", "output".
    """
    drop = functools.partial(fixed_dropout, p=DROPOUT)
    b_1, b_2 = (m.w_1.bias if biases[0] else None), (m.w_2.bias if biases[1] else None)
    x_in = drop(x) if "input" in drop_at else x
    h = F.linear(activation(x_in) if "input" in relu_at else x_in, m.w_1.weight, b_1)  # (B, L, d_ff)
    h = activation(h) if "hidden" in relu_at else h
    h = drop(h) if "hidden" in drop_at else h
    y = F.linear(h, m.w_2.weight, b_2)  # (B, L, D)
    y = activation(y) if "output" in relu_at else y
    y = drop(y) if "output" in drop_at else y
    return x + y if residual else y


_FFN_DROPOUT_PLACE = (
    "the dropout is in the wrong place: it goes on the hidden activations, after the ReLU and before w_2 "
    "(where the package and the Annotated Transformer put it)"
)


_FFN_NO_BIAS = (
    "the biases are missing: FFN(x) = max(0, xW1 + b1)W2 + b2 (paper Eq. 2). Call the layers themselves, "
    "or pass their biases too[[: self.w_2(relu(self.w_1(x))), or F.linear(x, w.weight, w.bias)]]"
)


_FFN_DROPOUT_TWICE = _FFN_DROPOUT_PLACE + "; you apply it twice, there and on the output of w_2"


def _ffn_bugs(m: nn.Module, x: torch.Tensor) -> list:
    """The feed-forward slips, each simulated with the learner's own w_1 and w_2."""
    return [
        (
            "the ReLU is missing: without it the two Linear layers collapse into one linear map[[: w_2(relu(w_1(x)))]]",
            lambda: _ffn(m, x, relu_at=()),
        ),
        (
            "apply the ReLU only between the two Linear layers: the output of w_2 must be able to go negative",
            lambda: _ffn(m, x, relu_at=("hidden", "output")),
        ),
        (
            "the ReLU is in the wrong place: it goes between the Linear layers, on the hidden (B, L, d_ff) "
            "activations, not after w_2",
            lambda: _ffn(m, x, relu_at=("output",)),
        ),
        (
            "the ReLU is in the wrong place: it goes on the hidden activations, after w_1, not on the input",
            lambda: _ffn(m, x, relu_at=("input",)),
        ),
        (
            "the paper uses ReLU, max(0, x), between the two Linear layers (GELU is a later choice, e.g. BERT/GPT)",
            lambda: _ffn(m, x, activation=F.gelu),
        ),
        (
            "don't add the residual here: the sublayer connection adds x around the whole FFN",
            lambda: _ffn(m, x, residual=True),
        ),
        (_FFN_NO_BIAS, lambda: _ffn(m, x, biases=(False, False))),
        (_FFN_NO_BIAS + " (b1 is missing)", lambda: _ffn(m, x, biases=(False, True))),
        (_FFN_NO_BIAS + " (b2 is missing)", lambda: _ffn(m, x, biases=(True, False))),
    ]


@exercise("feed_forward", "Linear w_1 (d_model -> d_ff), ReLU, Linear w_2 (d_ff -> d_model)", takes="class")
def check_feed_forward(cls: Callable[..., nn.Module]) -> str:
    """Check the position-wise feed-forward network (paper §3.3, Eq. 2).

    Expected signature: ``cls(d_model, d_ff, dropout=0.0)``, an ``nn.Module`` with
    ``w_1 = nn.Linear(d_model, d_ff)`` and ``w_2 = nn.Linear(d_ff, d_model)``,
    computing ``FFN(x) = w_2(ReLU(w_1(x))) = max(0, xW1 + b1)W2 + b2``, with both
    biases, and dropout on the hidden layer. The check builds the module with dropout
    on and compares in eval mode, where dropout must be off; in training mode the
    dropout must change the output.

    Shape:
        ``(B, L, D)`` -> ``(B, L, D)`` through ``(B, L, d_ff)``.

    Args:
        cls: the learner's class.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (missing ReLU, ReLU in the wrong
            place or twice, another activation, a residual added inside, no
            biases, dropout left on in eval mode or never applied).
    """
    D, d_ff = 6, 10
    m = build_module(cls, (D, d_ff, DROPOUT), "cls(d_model, d_ff, dropout)")
    expect_linear(m, "w_1", D, d_ff, "your feed-forward module", bias=True)
    expect_linear(m, "w_2", d_ff, D, "your feed-forward module", bias=True)
    x = torch.randn(2, 3, D)
    original = x.clone()
    out = expect_tensor(
        call_in_eval(m, x), "the output", x.shape, x.dtype, shape_hint="FFN maps (B, L, d_model) to (B, L, d_model)"
    )
    expect_unchanged({"x": original}, {"x": x})
    diagnose(out, _ffn(m, x), _ffn_bugs(m, x), "the output")
    expect_dropout(
        m,
        lambda: build_module(cls, (D, d_ff, 0.0), "cls(d_model, d_ff, dropout)"),
        (x,),
        out,
        "to the hidden activations, between the ReLU and w_2",
    )
    expect_dropout_at(
        m,
        (x,),
        lambda: _ffn(m, x, drop_at=("hidden",)),
        [
            (_FFN_DROPOUT_PLACE + ", not on the output of w_2", lambda: _ffn(m, x, drop_at=("output",))),
            (_FFN_DROPOUT_PLACE + ", not on the input x", lambda: _ffn(m, x, drop_at=("input",))),
            (_FFN_DROPOUT_TWICE, lambda: _ffn(m, x, drop_at=("hidden", "output"))),
        ],
        "the output",
    )
    return (
        "w_1, w_2 shapes and biases, values of Eq. 2, inputs unchanged, dropout on the hidden activations in "
        "training only"
    )
