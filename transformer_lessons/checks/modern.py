"""Checks for notebook 14, "From 2017 to today": RMSNorm.

RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization", Eq. 4) is
LayerNorm without the mean: each vector is divided by its root mean square,
``sqrt(mean(x²) + eps)``, and multiplied by a trained gain; there is no shift. The
reference is PyTorch's own ``F.rms_norm`` (eps inside the square root, as
``nn.RMSNorm``, T5 and LLaMA put it). The bugs are simulated by :func:`_rms`, whose
knobs reproduce what learners write: LayerNorm's centring, the standard deviation,
eps outside the root or missing, the sum instead of the mean, the wrong axis, the
gain forgotten, multiplying by the root mean square instead of dividing.

The inputs have rows at very different scales (so eps's place shows on the tiny
ones) and non-zero means (so centring shows), and every axis a different size (so a
reduction over the wrong axis shows).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from transformer_lessons.checks.common import (
    call_answer,
    diagnose,
    exercise,
    expect_tensor,
    expect_unchanged,
    known_bug,
)
from transformer_lessons.checks.evidence import Inputs
from transformer_lessons.checks.slips import Slip, slip_bugs


def _rms(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    center: bool = False,
    unbiased: bool = False,
    eps_outside: bool = False,
    sqrt: bool = True,
    reduce: str = "mean",
    dim: int | tuple[int, ...] = -1,
    gain: bool = True,
    multiply: bool = False,
) -> torch.Tensor:
    """RMSNorm of ``x (..., D)`` with knobs that reproduce the common bugs; all off, it is Eq. 4 of the paper."""
    y = x - x.mean(dim=dim, keepdim=True) if center else x
    if unbiased:  # x.std() or x.var(): centred, and divided by D - 1
        square = x.var(dim=dim, keepdim=True)
    else:
        square = (y * y).sum(dim=dim, keepdim=True) if reduce == "sum" else (y * y).mean(dim=dim, keepdim=True)
    if eps_outside:
        scale = square.sqrt() + eps
    else:
        scale = (square + eps).sqrt() if sqrt else square + eps
    out = y * scale if multiply else y / scale
    return weight * out if gain else out


_FIX = "[[: weight * x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)]]"

_RMS_SLIPS = [
    Slip(
        "RMSNorm does not subtract the mean: that is LayerNorm's first step, and leaving it out is the point of "
        "RMSNorm (Zhang & Sennrich 2019): divide x itself by its root mean square" + _FIX,
        {"center": True},
    ),
    Slip(
        "the root mean square is not the standard deviation: x.std() and x.var() subtract the mean and divide by "
        "D - 1; RMSNorm takes the mean of the squares of x itself, divided by D" + _FIX,
        {"unbiased": True},
    ),
    Slip(
        "eps belongs INSIDE the square root, added to the mean of the squares, not to the root" + _FIX,
        {"eps_outside": True},
    ),
    Slip(
        "divide by the ROOT mean square (the square root of the mean of the squares), not by the mean square" + _FIX,
        {"sqrt": False},
    ),
    Slip(
        "take the MEAN of the squares (divide the sum by D): with the sum, every output shrinks by sqrt(D)" + _FIX,
        {"reduce": "sum"},
    ),
    Slip(
        "normalise each vector over its LAST axis, the features; you reduced over the batch (dim=0)" + _FIX,
        {"dim": 0},
    ),
    Slip(
        "normalise each vector over its LAST axis, the features; you reduced over the positions (dim=1)" + _FIX,
        {"dim": 1},
    ),
    Slip(
        "normalise each vector over its LAST axis, not over the whole tensor (keep that axis: keepdim=True)" + _FIX,
        {"dim": (0, 1, 2)},
    ),
    Slip("the gain is missing: multiply the normalised x by weight, elementwise", {"gain": False}),
    Slip(
        "DIVIDE by the root mean square: multiplying by it makes large vectors larger instead of bringing every "
        "vector to the same scale" + _FIX,
        {"multiply": True},
    ),
]


_NO_EPS = Slip(
    "eps is missing: add it to the mean of the squares, under the root, so that a vector of zeros (or of tiny "
    "entries) is not divided by zero (or blown up)" + _FIX,
    {"eps": 0.0},
)


#: What F.rms_norm uses when it is given no eps: the machine epsilon of the input's dtype (float32: 1.19e-07).
_TORCH_DEFAULT_EPS = torch.finfo(torch.float32).eps
_TORCH_DEFAULT = Slip(
    f"your function gives F.rms_norm no eps, so PyTorch uses its own default, the float32 machine epsilon "
    f"({_TORCH_DEFAULT_EPS:.3g}), not the eps argument: pass it on[[: F.rms_norm(x, (x.size(-1),), weight, eps)]]",
    {"eps": _TORCH_DEFAULT_EPS},
)


def _eps_slips(eps: float, default: bool) -> list[Slip]:
    """The learner's epsilon differs: a default other than 1e-5 (LLaMA's 1e-6, 1e-8), the argument ignored, or
    F.rms_norm called without it (PyTorch's own default then)."""
    if default:
        return [
            Slip(
                f"your default eps is {wrong:g}: this exercise's, like nn.RMSNorm's default in the course's model, is "
                "1e-5 (eps decides how much a vector of tiny entries is blown up, so the two give different outputs)",
                {"eps": wrong},
            )
            for wrong in (1e-6, 1e-8)
        ] + [_NO_EPS, _TORCH_DEFAULT]
    return [_NO_EPS, _TORCH_DEFAULT] + [
        Slip(
            f"the eps argument is ignored: called with eps={eps:g}, your function used {wrong:g}. Use the argument",
            {"eps": wrong},
        )
        for wrong in (1e-5, 1e-6, 1e-8)
    ]


_BROADCAST = (
    "a size mismatch between x (..., D) and its root mean square usually means the reduced axis was dropped: keep it "
    "(keepdim=True), so that one number per vector divides all D of its entries"
)


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """``x (2, 3, 8)`` with rows at very different scales and non-zero means, and a gain far from ones."""
    D = 8
    scale = torch.tensor([[3.0, 1e-3, 1.0], [0.5, 2.0, 1e-3]])[..., None]  # (2, 3, 1): two tiny rows show eps
    x = scale * (torch.randn(2, 3, D) + 1.5)  # (2, 3, D): non-zero means show centring
    weight = 1 + 0.5 * torch.randn(D)  # (D,): a forgotten gain shows
    return x, weight


_CALLED_PYTORCHS = (
    "your function calls PyTorch's own RMSNorm (F.rms_norm, torch.rms_norm or nn.RMSNorm): it is what the check "
    "compares you with, so it proves nothing. Write it from the formula: the mean of the squares over the last "
    "axis, eps added, the square root, then divide and scale"
)


@contextlib.contextmanager
def _watch_pytorchs_rms_norm() -> Iterator[list[str]]:
    """While the learner's function runs, record every call of PyTorch's RMSNorm (its module calls the function)."""
    called: list[str] = []
    places = ((F, "F.rms_norm"), (torch, "torch.rms_norm"))
    saved = [owner.rms_norm for owner, _ in places]

    def watched(original: Callable[..., torch.Tensor], name: str) -> Callable[..., torch.Tensor]:
        def call(*args, **kwargs):
            called.append(name)
            return original(*args, **kwargs)

        return call

    for (owner, name), original in zip(places, saved):
        owner.rms_norm = watched(original, name)
    try:
        yield called
    finally:
        for (owner, _), original in zip(places, saved):
            owner.rms_norm = original


def _call_rms(fn: Callable[..., torch.Tensor], *args: torch.Tensor) -> torch.Tensor:
    """The learner's answer, refused if it got there by calling PyTorch's RMSNorm."""
    with _watch_pytorchs_rms_norm() as called:
        got = call_answer(fn, *args, hint=_BROADCAST)
    if called:
        raise known_bug(_CALLED_PYTORCHS)
    return got


@exercise("rms_norm", "divide each vector by its root mean square (eps inside the root), times the gain")
def check_rms_norm(fn: Callable[..., torch.Tensor]) -> str:
    """Check an RMSNorm function (Zhang & Sennrich 2019, Eq. 4): ``fn(x, weight, eps=1e-5)``.

    ``x (..., D)``, ``weight (D,)`` -> ``weight * x / sqrt(mean(x²) + eps)`` over the last
    axis, shaped like ``x``; PyTorch's ``F.rms_norm`` is the reference.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented yet"
        while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (LayerNorm's centring, the standard
            deviation, eps outside the root or ignored, the mean square without the
            root, the sum, the wrong axis, no gain, multiplying), or two at once.
    """
    x, weight = _inputs()
    D = x.size(-1)
    seen = Inputs()  # a bug is named only if it explains every input
    for eps, default in ((1e-5, True), (1e-2, False)):
        with seen.one():
            originals = {"x": x.clone(), "weight": weight.clone()}
            got = _call_rms(fn if default else functools.partial(fn, eps=eps), x, weight)
            what = "the output" + ("" if default else f" (eps={eps})")
            got = expect_tensor(got, what, x.shape, x.dtype)
            expect_unchanged(originals, {"x": x, "weight": weight})

            def simulate(**knobs):
                return _rms(x, weight, **({"eps": eps} | knobs))

            bugs = slip_bugs(simulate, _RMS_SLIPS, _eps_slips(eps, default))
            seen.compare(
                got, F.rms_norm(x, (D,), weight, eps), bugs, what, "compare with F.rms_norm(x, (D,), weight, eps)"
            )
    seen.verdict()
    rows = torch.randn(5, D) * 4  # (5, D): two axes, not three
    got = expect_tensor(_call_rms(fn, rows, weight), "the output for a (5, D) input", rows.shape, rows.dtype)
    diagnose(got, F.rms_norm(rows, (D,), weight, 1e-5), [], "the output for a (5, D) input")
    return "values against F.rms_norm with a trained gain, eps given and by default, (2, 3, D) and (5, D) inputs"
