"""Check for the decoder layer (paper §3.1): masked self-attention, cross-attention over memory, feed-forward.

The check copies the learner's submodules into the package's ``DecoderLayer`` and
compares outputs; the bug simulations restack them wrongly (:mod:`.sublayers`), and
changing a later target position must not change earlier outputs (:func:`_leaks_future`).
"""

from __future__ import annotations

import functools
import itertools
from typing import Callable, Sequence

import torch
from torch import nn

from transformer_lessons.checks.common import (
    ATOL,
    DROPOUT,
    MASK_NAN_HINT,
    RTOL,
    Bug,
    ExerciseError,
    call_answer,
    call_in_eval,
    exercise,
    expect_dropout,
    expect_dropout_at,
    expect_tensor,
    fixed_dropout,
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
from transformer_lessons.masks import causal_mask
from transformer_lessons.model import DecoderLayer


_CAUSAL_HINT = (
    "the future leaks: changing a later target position changed the outputs at earlier positions. "
    "Pass tgt_mask to the self-attention[[: self_attn(x, x, x, tgt_mask)]]"
)


# Every other way to feed cross_attn(query, key, value) from x (the decoder) and memory (the encoder).
_CROSS_WIRINGS = [w for w in itertools.product(("y", "memory"), repeat=3) if w != ("y", "memory", "memory")]


def _cross_wiring_hint(wiring: Sequence[str]) -> str:
    """Name which of cross_attn's arguments came from the wrong side, e.g. "memory as queries and x as keys"."""
    names = [("x" if source == "y" else "memory") for source in wiring]
    wrong = {}
    for role, source, right in zip(("queries", "keys", "values"), names, ("x", "memory", "memory")):
        if source != right:
            wrong.setdefault(source, []).append(role)
    used = " and ".join(f"{source} as {' and '.join(roles)}" for source, roles in wrong.items())
    return (
        f"cross-attention is mis-wired: you called cross_attn({', '.join(names)}, ...), using {used}. The "
        "queries come from the decoder (x) and the keys and values from the encoder's output (memory)"
        "[[: cross_attn(x, memory, memory, src_mask)]]"
    )


def _decoder_layer_bugs(
    ref: DecoderLayer,
    x: torch.Tensor,
    memory: torch.Tensor,
    src_mask: torch.Tensor,
    tgt_mask: torch.Tensor,
    own: Sequence[Slip] = (),
) -> list[Bug]:
    """The common decoder layer bugs, restacking the reference's submodules (or the learner's own, ``own``,
    named with each bug): each hint, and what it returns."""
    masks = {"tgt": tgt_mask, "src": src_mask, None: None}

    def simulate(
        parts=reference_parts(ref),
        self_mask="tgt",
        cross_mask="src",
        wiring=("y", "memory", "memory"),
        order=("self", "cross", "ff"),
        norms=(0, 1, 2),
        residual=(True, True, True),
        mode="post",
    ):
        def cross(y):
            q, k, v = ({"y": y, "x": x, "memory": memory}[name] for name in wiring)
            return parts.cross_attn(q, k, v, masks[cross_mask])

        subs = {
            "self": functools.partial(self_attend, parts.self_attn, masks[self_mask]),
            "cross": cross,
            "ff": parts.feed_forward,
        }
        return residual_stack(x, [(subs[order[i]], parts.norms[norms[i]], residual[i]) for i in range(3)], mode)

    slips = [
        Slip(_CAUSAL_HINT, {"self_mask": None}),
        Slip(
            "src_mask and tgt_mask are swapped: self-attention takes tgt_mask (causal + padding), "
            "cross-attention takes src_mask (source padding)",
            {"self_mask": "src", "cross_mask": "tgt"},
        ),
        *(Slip(_cross_wiring_hint(wiring), {"wiring": wiring}) for wiring in _CROSS_WIRINGS),
        Slip(
            "cross-attention should take the output of the self-attention sublayer as its query, not the layer's input",
            {"wiring": ("x", "memory", "memory")},
        ),
        Slip(
            "src_mask is not passed to cross-attention, so queries attend to source padding"
            "[[: cross_attn(x, memory, memory, src_mask)]]",
            {"cross_mask": None},
        ),
        Slip(
            "that is pre-norm, x + sublayer(norm(x)); this exercise follows the paper's post-norm: "
            "x = norm(x + sublayer(x)) for each of the three sublayers",
            {"mode": "pre"},
        ),
        Slip(NORM_HINT, {"mode": "norm_sublayer"}),
        Slip(
            "the sublayers are in the wrong order: masked self-attention, then cross-attention, then feed-forward",
            {"order": ("cross", "self", "ff")},
        ),
    ]
    for i, name in enumerate(("self-attention", "cross-attention", "feed-forward")):
        slips.append(
            Slip(
                f"the residual around the {name} is missing: x = norm{i + 1}(x + sublayer(x))",
                {"residual": tuple(j != i for j in range(3))},
            )
        )
    for order in itertools.product(range(3), repeat=3):  # every other way to pick a norm per sublayer
        if order != (0, 1, 2):
            slips.append(
                Slip(
                    "the LayerNorms are mixed up: norm1 after self-attention, norm2 after cross-attention, "
                    "norm3 after the feed-forward",
                    {"norms": order},
                )
            )
    return slip_bugs(simulate, slips, own, among=False)


def _reference_holding(m: nn.Module, D: int, H: int, d_ff: int) -> DecoderLayer:
    """The package's DecoderLayer holding the learner's submodules' weights (their norms given distinct weights)."""
    ref = DecoderLayer(D, H, d_ff, dropout=0.0).eval()
    copy_layer(m, "self_attn", "a MultiHeadAttention(d_model, n_heads, dropout)", ref.self_attn)
    copy_layer(m, "cross_attn", "a MultiHeadAttention(d_model, n_heads, dropout)", ref.cross_attn)
    copy_layer(m, "feed_forward", "a PositionwiseFeedForward(d_model, d_ff, dropout)", ref.feed_forward)
    copy_norms(m, [s.norm for s in ref.sublayers], D)
    return ref


# Where a learner may put the dropout instead of on the sublayer's output (§5.4), and the hint for each.
_DROPOUT_PLACES = {
    "sum": "dropout goes on the sublayer's output, not on x + sublayer(x): norm(x + dropout(sublayer(x)))",
    "after_norm": "dropout goes on the sublayer's output, before the residual addition, not after the LayerNorm",
    "input": "dropout goes on the sublayer's output, not on its input: norm(x + dropout(sublayer(x)))",
    "residual": "dropout goes on the sublayer's output, not on the residual x: norm(x + dropout(sublayer(x)))",
}
_SUBLAYER_NAMES = ("self-attention", "cross-attention", "feed-forward")


def _dropped(
    ref: DecoderLayer,
    x: torch.Tensor,
    memory: torch.Tensor,
    src_mask: torch.Tensor,
    tgt_mask: torch.Tensor,
    places: Sequence[str],
) -> torch.Tensor:
    """The reference's post-norm stack with the fixed dropout stand-in at ``places[i]`` in sublayer i.

    "output" is the right place (§5.4); "none" leaves it out; the others are :data:`_DROPOUT_PLACES`.
    """
    drop = functools.partial(fixed_dropout, p=DROPOUT)
    parts = reference_parts(ref)
    subs = [
        functools.partial(self_attend, parts.self_attn, tgt_mask),
        lambda y: parts.cross_attn(y, memory, memory, src_mask),
        parts.feed_forward,
    ]
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


def _dropout_bugs(ref: DecoderLayer, *args: torch.Tensor) -> list[Bug]:
    """Dropout in a wrong place (in all three sublayers or in one), missing from all three, or missing from one."""
    bugs = []
    for place, hint in _DROPOUT_PLACES.items():
        for i in range(-1, 3):  # -1: in every sublayer; else only in sublayer i
            places = tuple(place if i in (-1, j) else "output" for j in range(3))
            bugs.append((hint, functools.partial(_dropped, ref, *args, places)))
    bugs.append(
        (
            "there is no dropout on the sublayers' outputs: the paper applies it to the output of each "
            "sub-layer, before it is added to the sub-layer input and normalized (§5.4)",
            functools.partial(_dropped, ref, *args, ("none",) * 3),
        )
    )
    for i, name in enumerate(_SUBLAYER_NAMES):
        places = tuple("none" if j == i else "output" for j in range(3))
        bugs.append(
            (
                f"the dropout is missing after the {name}: all three sublayers' outputs get one",
                functools.partial(_dropped, ref, *args, places),
            )
        )
    return bugs


@exercise(
    "decoder_layer",
    "masked self-attention, cross-attention over memory, feed-forward, each with a residual and a LayerNorm",
    takes="class",
)
def check_decoder_layer(cls: Callable[..., nn.Module]) -> str:
    """Check a decoder layer: masked self-attention, cross-attention, feed-forward (paper §3.1).

    Expected signature: ``cls(d_model, n_heads, d_ff, dropout=0.0)``, an
    ``nn.Module`` with ``self_attn``, ``cross_attn`` (package
    ``MultiHeadAttention``), ``feed_forward`` (``PositionwiseFeedForward``),
    ``norm1``, ``norm2``, ``norm3`` (LayerNorm), and
    ``forward(x, memory, src_mask=None, tgt_mask=None)``: masked self-attention
    over ``x`` (``tgt_mask``), cross-attention with queries from ``x`` and keys and
    values from ``memory`` (``src_mask``), then the feed-forward; each sublayer's
    output goes through dropout, is added to its input and normalised by its own norm.

    The norms may instead live in ``sublayers[i].norm`` (the package's
    ``SublayerConnection`` layout). The check copies the learner's submodules into
    the package's ``DecoderLayer`` and compares, and checks that no position sees
    later ones. As for the encoder layer, dropout is on when the layer is built and
    must be off in eval mode.

    Shape:
        x ``(B, T, D)``, memory ``(B, S, D)``, src_mask broadcastable to
        ``(B, 1, T, S)``, tgt_mask to ``(B, 1, T, T)`` -> ``(B, T, D)``.

    Args:
        cls: the learner's class.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (no causal mask, masks swapped,
            cross-attention over x instead of memory, pre-norm, missing residual, ...),
            also on top of the learner's own submodules when those differ.
    """
    D, H, d_ff, B, T = 8, 2, 16, 2, 5
    m = build_module(cls, (D, H, d_ff, DROPOUT), "cls(d_model, n_heads, d_ff, dropout)")
    ref = _reference_holding(m, D, H, d_ff)
    x = 2 * torch.randn(B, T, D) + 1
    tgt_mask = pad_mask([T, T - 2], T) & causal_mask(T)  # (B, 1, T, T)
    # First with memory as long as the target (S = T), so that swapped masks still run and can be named;
    # then with a longer memory.
    seen = Inputs()  # a bug is named only if it explains every input
    for S in (T, T + 2):
        with seen.one():
            memory = torch.randn(B, S, D)
            src_mask = pad_mask([S - 1, S], S)  # (B, 1, 1, S)
            inputs = {"x": x, "memory": memory, "src_mask": src_mask, "tgt_mask": tgt_mask}
            originals = {name: t.clone() for name, t in inputs.items()}
            out = call_in_eval(m, x, memory, src_mask, tgt_mask)
            expect_unchanged(originals, inputs)
            out = expect_tensor(
                out,
                "the output",
                x.shape,
                x.dtype,
                nan_hint=MASK_NAN_HINT,
                shape_hint="one vector per TARGET position: (B, T, d_model)",
            )
            bugs = _decoder_layer_bugs(ref, x, memory, src_mask, tgt_mask, own_parts(m, ref, x))
            leaks = _leaks_future(m, x, memory, src_mask, tgt_mask, out)
            differs = (lambda: ExerciseError(_CAUSAL_HINT)) if leaks else None  # when no bug explains every input
            expected = ref(x, memory, src_mask, tgt_mask)
            right = seen.compare(out, expected, bugs, f"the output (memory length {S})", differs=differs)
            if right and S == T and leaks:
                raise ExerciseError(_CAUSAL_HINT)
    seen.verdict()
    _expect_sublayer_dropout(
        m,
        lambda: build_module(cls, (D, H, d_ff, 0.0), "cls(d_model, n_heads, d_ff, dropout)"),
        ref,
        (x, memory, src_mask, tgt_mask),
        out,
    )
    return (
        "values against the package's DecoderLayer holding your weights, masks, memory longer than the "
        "target, no peeking at later positions, dropout on each sublayer's output in training only"
    )


def _expect_sublayer_dropout(m, without_dropout, ref: DecoderLayer, args: tuple, out: torch.Tensor) -> None:
    """Dropout is on in training only, and on each sublayer's output (§5.4), not on the sum or after the norm."""
    expect_dropout(m, without_dropout, args, out, SUBLAYER_DROPOUT)
    expect_dropout_at(
        m,
        args,
        lambda: _dropped(ref, *args, ("output",) * 3),
        _dropout_bugs(ref, *args),
        f"the output (memory length {args[1].size(1)})",
        keep_eval=("self_attn", "cross_attn", "feed_forward"),
    )


def _leaks_future(m, x, memory, src_mask, tgt_mask, out) -> bool:
    """Does changing the last target position change the outputs at earlier positions?"""
    changed = x.clone()
    changed[:, -1] = torch.randn_like(changed[:, -1])
    again = call_answer(m, changed, memory, src_mask, tgt_mask)
    return isinstance(again, torch.Tensor) and not torch.allclose(again[:, :-1], out[:, :-1], atol=ATOL, rtol=RTOL)
