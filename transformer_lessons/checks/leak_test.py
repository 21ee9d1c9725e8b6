"""Check for the leak test of notebook 06: does a decoder layer let a position read a later one?

The learner writes ``sees_future(layer, d_model)``: run a layer, change a later target position, and say
whether an earlier output moved (paper §3.2.3: "prevent leftward information flow"). The check feeds it a correct
layer (also in training mode with dropout) and leaky ones: no mask, a mask one step ahead, one wrong cell, one
far from the diagonal, a tiny leak, a norm across positions. Each leak it misses names the incomplete test.
"""

from __future__ import annotations

from typing import Callable

import torch

from transformer_lessons.checks.common import ExerciseError, call_answer, exercise, known_bug
from transformer_lessons.masks import causal_mask
from transformer_lessons.model import DecoderLayer


class _IgnoresMask(DecoderLayer):
    """Self-attention without any mask: every position reads every other."""

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return super().forward(x, memory, src_mask, None)


class _OneStepAhead(DecoderLayer):
    """The causal mask shifted by one (tril(1)): position t also reads position t + 1."""

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        T = x.size(1)
        return super().forward(x, memory, src_mask, torch.ones(T, T, dtype=torch.bool).tril(1))


class _FirstSeesSecond(DecoderLayer):
    """The causal mask with one wrong cell: position 0 also reads position 1, and nothing else leaks."""

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        mask = causal_mask(x.size(1)).clone()
        mask[0, 1] = True
        return super().forward(x, memory, src_mask, mask)


class _FarCell(DecoderLayer):
    """The causal mask with one wrong cell far from the diagonal and from position 0: position 2 also reads 5."""

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        mask = causal_mask(x.size(1)).clone()
        mask[2, 5] = True
        return super().forward(x, memory, src_mask, mask)


class _SmallLeak(DecoderLayer):
    """Masked attention done right, then a thousandth of the last position's input added to every position."""

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return super().forward(x, memory, src_mask, tgt_mask) + 1e-3 * x[:, -1:]


class _NormAcrossPositions(DecoderLayer):
    """Masked attention done right, then a normalisation over the positions axis: the mean of all positions,
    the later ones included, reaches every position."""

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        y = super().forward(x, memory, src_mask, tgt_mask)  # (B, T, D)
        return (y - y.mean(dim=1, keepdim=True)) / (y.std(dim=1, keepdim=True) + 1e-5)


_SEES_FUTURE_D = 8

# (what the layer is, its class, dropout, whether it sees the future, the hint when the answer is wrong)
_LEAK_CASES = [
    ("the package's DecoderLayer", DecoderLayer, 0.0, False, None),
    (
        "a layer that ignores tgt_mask",
        _IgnoresMask,
        0.0,
        True,
        "change one input position and compare the outputs at the positions BEFORE it; a layer without a mask "
        "lets them move",
    ),
    (
        "a layer whose mask lets position t also see t + 1",
        _OneStepAhead,
        0.0,
        True,
        "a leak of one step is still a leak: after changing position t, every earlier position must come out "
        "exactly as before, including t - 1",
    ),
    (
        "a layer whose only leak is that position 0 also sees position 1",
        _FirstSeesSecond,
        0.0,
        True,
        "a leak can hide where one experiment does not look: section 1 changed position 4 only. Change every "
        "position in turn, and look at all the positions before it",
    ),
    (
        "a layer whose only leak is that position 2 also sees position 5",
        _FarCell,
        0.0,
        True,
        "a leak can hide anywhere: change every position in turn, and compare ALL the positions before it, not "
        "only the one just before",
    ),
    (
        "a layer that normalises over the positions axis after its masked attention",
        _NormAcrossPositions,
        0.0,
        True,
        "information from the future can enter after the attention too: test the layer's output, not its mask",
    ),
    (
        "a layer that adds a thousandth of the last position's input to every position",
        _SmallLeak,
        0.0,
        True,
        "a small leak is still a leak: a correct layer leaves the earlier positions exactly as they were, so "
        "compare with a tolerance near float precision (about 1e-6), not a loose one",
    ),
    (
        "the package's DecoderLayer with dropout 0.3, in training mode",
        DecoderLayer,
        0.3,
        False,
        "two runs of a layer with dropout in training mode differ everywhere, future or not: put the layer in "
        "eval mode first[[: layer.eval()]]",
    ),
]

_FALSE_ALARM = (
    "your function says that a correct layer sees the future. Run the layer as a decoder runs it: with the causal "
    "mask as tgt_mask (a layer without it reads everything), and compare only the positions BEFORE the one you "
    "changed (the changed position and the later ones may move)[[: layer(inputs, memory, None, causal_mask(T))]]"
)


@exercise(
    "sees_future",
    "return True if changing some input position changes the layer's output at an earlier position, else False",
)
def check_sees_future(fn: Callable[..., object]) -> str:
    """Check a leak test for decoder layers: does the layer let some position read a later one?

    Expected signature: ``fn(layer, d_model) -> bool``. ``layer`` is a decoder layer
    called as ``layer(x, memory, src_mask, tgt_mask)`` (``x (B, T, d_model)``,
    ``memory (B, S, d_model)``); ``fn`` runs it as a decoder does (with the causal
    mask, in eval mode), changes one input position at a time, and returns
    ``True`` when some output before the changed position moves. The check hands
    it a correct layer (once with dropout, in training mode) and six leaky ones:
    no mask, a mask one step ahead, a mask with one wrong cell next to position 0,
    one with a wrong cell far from it (2 sees 5), a leak of a thousandth added
    after the attention, and a normalisation across positions.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the layer misjudged and the likely bug (no causal
            mask given, dropout left on, only one position changed, the wrong
            positions compared, a loose tolerance, not a bool).
    """
    for what, cls, dropout, leaks, hint in _LEAK_CASES:
        layer = cls(_SEES_FUTURE_D, 2, 16, dropout=dropout)
        layer.train(dropout > 0)
        with torch.enable_grad():  # a learner may test with gradients (autograd.functional.jacobian)
            got = call_answer(fn, layer, _SEES_FUTURE_D)
        if isinstance(got, torch.Tensor) and got.numel() == 1 and got.dtype == torch.bool:
            got = bool(got)
        if not isinstance(got, bool):
            raise ExerciseError(f"return True or False, got {type(got).__name__} {got!r} for {what}")
        if got == leaks:
            continue
        if leaks:
            raise known_bug(f"your function says that {what} does not see the future, but it does: {hint}")
        if hint is None:
            raise known_bug(f"{_FALSE_ALARM}. (It said so of {what}.)")
        raise known_bug(f"your function says that {what} sees the future, but it does not: {hint}")
    return (
        "a correct layer (with and without dropout) and six leaky ones: no mask, one step ahead, a wrong cell next "
        "to position 0, a wrong cell far from it, a leak of a thousandth, a norm across positions"
    )
