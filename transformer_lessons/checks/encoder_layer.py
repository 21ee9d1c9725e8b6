"""Check for the encoder layer (paper §3.1): self-attention then feed-forward, each with a residual and post-norm.

The check copies the learner's submodules into the package's ``EncoderLayer`` and
compares outputs; the bug simulations restack them wrongly (:mod:`.sublayers`).
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

import torch
from torch import nn

from transformer_lessons.checks.common import (
    DROPOUT,
    MASK_NAN_HINT,
    Bug,
    call_in_eval,
    exercise,
    expect_dropout,
    expect_dropout_at,
    fixed_dropout,
    expect_tensor,
    expect_unchanged,
    build_module,
)
from transformer_lessons.checks.evidence import Inputs
from transformer_lessons.checks.slips import Slip, slip_bugs
from transformer_lessons.checks.sublayers import (
    NORM_HINT,
    SUBLAYER_DROPOUT,
    copy_layer,
    copy_norms,
    own_parts,
    pad_mask,
    reference_parts,
    residual_stack,
    self_attend,
)
from transformer_lessons.model import EncoderLayer


_SHARED_NORM = "the same LayerNorm is used twice: norm1 after self-attention, norm2 after the feed-forward"


def _encoder_layer_bugs(
    ref: EncoderLayer, x: torch.Tensor, mask: torch.Tensor | None, own: Sequence[Slip] = ()
) -> list[Bug]:
    """The common encoder layer bugs, restacking the reference's submodules (or the learner's own, ``own``),
    alone and two at a time: each hint, and what it returns."""

    def simulate(
        parts=reference_parts(ref), mode="post", residual=(True, True), norms=(0, 1), ff_first=False, use_mask=True
    ):
        attend = functools.partial(self_attend, parts.self_attn, mask if use_mask else None)
        subs = [parts.feed_forward, attend] if ff_first else [attend, parts.feed_forward]
        return residual_stack(x, [(subs[i], parts.norms[norms[i]], residual[i]) for i in range(2)], mode)

    slips = [
        Slip(
            "that is pre-norm, x + sublayer(norm(x)); this exercise follows the paper's post-norm, "
            "norm(x + sublayer(x)), for both sublayers"
            "[[: x = norm1(x + self_attn(x, x, x, src_mask)), then x = norm2(x + feed_forward(x))]]",
            {"mode": "pre"},
        ),
        Slip(
            "the residual around self-attention is missing: add the sublayer's input back before norm1"
            "[[: x = norm1(x + self_attn(x, x, x, src_mask))]]",
            {"residual": (False, True)},
        ),
        Slip(
            "the residual around the feed-forward is missing: add the sublayer's input back before norm2"
            "[[: x = norm2(x + feed_forward(x))]]",
            {"residual": (True, False)},
        ),
        Slip(
            "both residual connections are missing: norm(x + sublayer(x)), adding the sublayer's input back",
            {"residual": (False, False)},
        ),
        Slip("norm1 and norm2 are swapped: norm1 follows self-attention, norm2 the feed-forward", {"norms": (1, 0)}),
        Slip(_SHARED_NORM, {"norms": (0, 0)}),
        Slip(_SHARED_NORM, {"norms": (1, 1)}),
        Slip("the sublayers are in the wrong order: self-attention first, then the feed-forward", {"ff_first": True}),
        Slip(NORM_HINT, {"mode": "norm_sublayer"}),
    ]
    if mask is not None:
        slips.insert(
            0,
            Slip(
                "src_mask is not passed to self-attention, so queries attend to padding"
                "[[: self_attn(x, x, x, src_mask)]]",
                {"use_mask": False},
            ),
        )
    return slip_bugs(simulate, slips, own)


_DROPOUT_PLACES = {
    "sum": "dropout goes on the sublayer's output, not on x + sublayer(x): norm(x + dropout(sublayer(x)))",
    "after_norm": "dropout goes on the sublayer's output, before the residual addition, not after the LayerNorm",
    "input": "dropout goes on the sublayer's output, not on its input: norm(x + dropout(sublayer(x)))",
    "residual": "dropout goes on the sublayer's output, not on the residual x: norm(x + dropout(sublayer(x)))",
}


def _dropped(ref: EncoderLayer, x: torch.Tensor, mask: torch.Tensor | None, places: Sequence[str]) -> torch.Tensor:
    """The reference's post-norm stack with the fixed dropout stand-in at ``places[i]`` in sublayer i.

    "output" is the right place (§5.4); "none" leaves it out; the others are :data:`_DROPOUT_PLACES`.
    """
    drop = functools.partial(fixed_dropout, p=DROPOUT)
    parts = reference_parts(ref)
    subs = [functools.partial(self_attend, parts.self_attn, mask), parts.feed_forward]
    for sublayer, norm, place in zip(subs, parts.norms, places):
        if place == "sum":
            x = norm(drop(x + sublayer(x)))
        elif place == "after_norm":
            x = drop(norm(x + sublayer(x)))
        elif place == "input":
            x = norm(x + sublayer(drop(x)))
        elif place == "residual":
            x = norm(drop(x) + sublayer(x))
        elif place == "none":
            x = norm(x + sublayer(x))
        else:
            x = norm(x + drop(sublayer(x)))
    return x


def _dropout_bugs(ref: EncoderLayer, x: torch.Tensor, mask: torch.Tensor | None) -> list[Bug]:
    """Dropout in a wrong place, in both sublayers or in one; or missing after one of them."""
    bugs = []
    for place, hint in _DROPOUT_PLACES.items():
        for places in ((place, place), (place, "output"), ("output", place)):
            bugs.append((hint, functools.partial(_dropped, ref, x, mask, places)))
    bugs.append(
        (
            "the dropout is missing after the feed-forward: both sublayers' outputs get one",
            functools.partial(_dropped, ref, x, mask, ("output", "none")),
        )
    )
    bugs.append(
        (
            "the dropout is missing after self-attention: both sublayers' outputs get one",
            functools.partial(_dropped, ref, x, mask, ("none", "output")),
        )
    )
    return bugs


@exercise(
    "encoder_layer",
    "self-attention then feed-forward, each inside a residual connection followed by its LayerNorm",
    takes="class",
)
def check_encoder_layer(cls: Callable[..., nn.Module]) -> str:
    """Check an encoder layer: self-attention then feed-forward, each with residual and post-norm (paper §3.1).

    Expected signature: ``cls(d_model, n_heads, d_ff, dropout=0.0)``, an
    ``nn.Module`` with submodules ``self_attn`` (the package's
    ``MultiHeadAttention``), ``feed_forward`` (``PositionwiseFeedForward``),
    ``norm1``, ``norm2`` (LayerNorm), and ``forward(x, src_mask=None)``: self-attention
    then the feed-forward, each as ``LayerNorm(x + Dropout(Sublayer(x)))`` (§3.1, §5.4),
    ``norm1`` after the first and ``norm2`` after the second.

    The norms may instead live in ``sublayers[0].norm`` and ``sublayers[1].norm``
    (the package's ``SublayerConnection`` layout). The check copies the learner's
    submodules into the package's ``EncoderLayer`` (with non-trivial LayerNorm
    weights) and compares. It builds the layer with dropout on and compares in eval
    mode, where dropout must be off; in training mode the dropout must change the output.

    Shape:
        x ``(B, S, D)``, src_mask bool broadcastable to ``(B, 1, S, S)`` -> ``(B, S, D)``.

    Args:
        cls: the learner's class.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (pre-norm, missing residual, mask not
            passed, norms swapped or shared, sublayers in the wrong order, the
            learner's own LayerNorm, attention or feed-forward computing something
            else), or two at once (pre-norm with their own LayerNorm).
    """
    D, H, d_ff, B, S = 8, 2, 16, 2, 5
    m = build_module(cls, (D, H, d_ff, DROPOUT), "cls(d_model, n_heads, d_ff, dropout)")
    ref = EncoderLayer(D, H, d_ff, dropout=0.0).eval()
    copy_layer(m, "self_attn", "a MultiHeadAttention(d_model, n_heads, dropout)", ref.self_attn)
    copy_layer(m, "feed_forward", "a PositionwiseFeedForward(d_model, d_ff, dropout)", ref.feed_forward)
    copy_norms(m, (ref.sublayers[0].norm, ref.sublayers[1].norm), D)
    x = 2 * torch.randn(B, S, D) + 1
    seen = Inputs()  # a bug is named only if it explains every input
    for mask in (None, pad_mask([S, S - 2], S)):
        with seen.one():
            original = x.clone()
            args = (x,) if mask is None else (x, mask)
            out = call_in_eval(m, *args)
            expect_unchanged({"x": original}, {"x": x})
            out = expect_tensor(
                out,
                "the output",
                x.shape,
                x.dtype,
                nan_hint=MASK_NAN_HINT,
                shape_hint="an encoder layer keeps the shape (B, S, d_model)",
            )
            what = "the output" + (" with a padding mask" if mask is not None else "")
            seen.compare(out, ref(x, mask), _encoder_layer_bugs(ref, x, mask, own_parts(m, ref, x)), what)
    seen.verdict()
    expect_dropout(
        m,
        lambda: build_module(cls, (D, H, d_ff, 0.0), "cls(d_model, n_heads, d_ff, dropout)"),
        args,
        out,
        SUBLAYER_DROPOUT,
    )
    expect_dropout_at(
        m,
        args,
        lambda: _dropped(ref, x, mask, ("output", "output")),
        _dropout_bugs(ref, x, mask),
        "the output with a padding mask",
        keep_eval=("self_attn", "feed_forward"),
    )
    return (
        "values against the package's EncoderLayer holding your weights, with and without a padding mask, "
        "dropout on each sublayer's output in training only"
    )
