"""Checks for the encoder and decoder layers (paper §3.1): sublayers, residual connections, post-norm.

The check copies the learner's submodules (attention, feed-forward, LayerNorms
with distinct non-trivial weights) into the package's ``EncoderLayer`` or
``DecoderLayer`` and compares outputs. The bug simulations restack the same
submodules wrongly with :func:`_residual_stack`: pre-norm, a missing residual,
norms swapped or shared, sublayers out of order, masks dropped or swapped. When
the learner's own submodules compute something else than the reference's holding
the same weights (their own LayerNorm class, say), the simulations are also run on
the learner's own submodules, so that "pre-norm, with your own LayerNorm" is
named as the two things it is (:func:`_own_parts`).
"""

from __future__ import annotations

import functools
import itertools
from typing import Any, Callable, NamedTuple, Sequence

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
    diagnose,
    exercise,
    expect_dropout,
    expect_tensor,
    expect_unchanged,
    build_module,
    shape_of,
    expect_submodule,
)
from transformer_lessons.checks.slips import Slip, slip_bugs
from transformer_lessons.masks import causal_mask
from transformer_lessons.model import DecoderLayer, EncoderLayer


def _residual_stack(x, steps, mode="post"):
    """Apply (sublayer, norm, residual) steps: post-norm (the paper), pre-norm, or norm on the sublayer."""
    for sublayer, norm, residual in steps:
        if mode == "pre":
            x = (x if residual else 0) + sublayer(norm(x))
        elif mode == "norm_sublayer":
            x = x + norm(sublayer(x))
        else:
            x = norm((x if residual else 0) + sublayer(x))
    return x


def _copy_layer(learner: nn.Module, name: str, description: str, target: nn.Module) -> None:
    """Load the learner's submodule `name` into the reference's `target` (same parameter names)."""
    source = expect_submodule(learner, name, description)
    try:
        target.load_state_dict(source.state_dict())
    except RuntimeError as error:
        raise ExerciseError(f"`{name}` should be {description}; its parameters do not match:\n{error}") from None


def _learner_norms(learner: nn.Module, count: int) -> list[tuple[str, Any]]:
    """The learner's LayerNorms in sublayer order, with the names to report them by.

    Two layouts: ``norm1``, ``norm2``, ... on the layer (what the exercises ask for),
    or ``sublayers[i].norm`` (the package's SublayerConnection, as in model.EncoderLayer).
    """
    sublayers = getattr(learner, "sublayers", None)
    if not hasattr(learner, "norm1") and isinstance(sublayers, nn.ModuleList) and len(sublayers) == count:
        return [(f"sublayers[{i}].norm", getattr(sublayer, "norm", None)) for i, sublayer in enumerate(sublayers)]
    return [(f"norm{i + 1}", getattr(learner, f"norm{i + 1}", None)) for i in range(count)]


def _copy_norms(learner: nn.Module, targets: Sequence[nn.Module], D: int) -> None:
    """Give the learner's norms distinct non-trivial gains and biases, and copy them into the reference."""
    for (name, norm), target in zip(_learner_norms(learner, len(targets)), targets):
        if not isinstance(norm, nn.Module):
            raise ExerciseError(
                f"your layer should have a submodule `{name}` (a LayerNorm(d_model) with weight and bias of shape ({D},))"
            )
        for param in ("weight", "bias"):
            p = getattr(norm, param, None)
            if not isinstance(p, torch.Tensor) or shape_of(p) != (D,):
                raise ExerciseError(f"`{name}` should be a LayerNorm(d_model) with a `{param}` of shape ({D},)")
        norm.weight.copy_(1 + 0.5 * torch.randn(D))  # distinct per norm, so a swapped or shared norm shows
        norm.bias.copy_(0.5 * torch.randn(D))
        target.weight.copy_(norm.weight)
        target.bias.copy_(norm.bias)


def _pad_mask(lengths: Sequence[int], size: int) -> torch.Tensor:
    return (torch.arange(size)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]  # (B, 1, 1, size)


_NORM_HINT = "norm the SUM: x = norm(x + sublayer(x)), not x + norm(sublayer(x))"


class _Parts(NamedTuple):
    """The submodules a layer stacks: the reference's (holding the learner's weights) or the learner's own."""

    self_attn: Any
    feed_forward: Any
    norms: Sequence[Any]
    cross_attn: Any = None


def _reference_parts(ref: nn.Module) -> _Parts:
    return _Parts(ref.self_attn, ref.feed_forward, [s.norm for s in ref.sublayers], getattr(ref, "cross_attn", None))


def _learner_parts(learner: nn.Module, count: int) -> _Parts:
    return _Parts(
        learner.self_attn,
        learner.feed_forward,
        [norm for _, norm in _learner_norms(learner, count)],
        getattr(learner, "cross_attn", None),
    )


def _differs(a: Any, b: Any, *args: Any) -> bool:
    """Do two modules (the learner's and the reference's, same weights) give different outputs on args?"""
    try:
        got = a(*args)
    except Exception:  # noqa: BLE001 - the learner's module fails here: the layer's own call will say so
        return False
    return not (
        isinstance(got, torch.Tensor)
        and got.shape == args[0].shape
        and torch.allclose(got, b(*args), atol=ATOL, rtol=RTOL)
    )


def _own_parts(learner: nn.Module, ref: nn.Module, x: torch.Tensor) -> list[Slip]:
    """The learner's own submodules, as a partner slip (knob ``parts``), if they differ from the reference's.

    The reference's submodules hold the learner's weights, so they differ only when the
    learner's classes compute something else (the Annotated Transformer's LayerNorm, say).
    The hint names which and the check that tests each alone.
    """
    own, theirs = _learner_parts(learner, len(ref.sublayers)), _reference_parts(ref)
    differences = []
    norms = [type(n).__name__ for n, r in zip(own.norms, theirs.norms) if _differs(n, r, x)]
    if norms:
        differences.append(
            f"your LayerNorm ({', '.join(sorted(set(norms)))}) is not nn.LayerNorm's function: with the same weight "
            "and bias it gives other values. check_layer_norm on that class names what differs"
        )
    attentions = [
        (name, a)
        for name, a, r in (
            ("self_attn", own.self_attn, theirs.self_attn),
            ("cross_attn", own.cross_attn, theirs.cross_attn),
        )
        if a is not None and _differs(a, r, x, x, x, None)
    ]
    if attentions:
        differences.append(
            f"your {' and '.join(name for name, _ in attentions)} ({type(attentions[0][1]).__name__}) computes something "
            "else than multi-head attention holding the same weights: check_multi_head_attention on that class names what"
        )
    if _differs(own.feed_forward, theirs.feed_forward, x):
        differences.append(
            f"your feed_forward ({type(own.feed_forward).__name__}) computes something else than the paper's "
            "FFN with the same weights: check_feed_forward on that class names what"
        )
    return [Slip("; and ".join(differences), {"parts": own})] if differences else []


def _encoder_layer_bugs(
    ref: EncoderLayer, x: torch.Tensor, mask: torch.Tensor | None, own: Sequence[Slip] = ()
) -> list[Bug]:
    """The common encoder layer bugs, restacking the reference's submodules (or the learner's own, ``own``),
    alone and two at a time: each hint, and what it returns."""

    def simulate(
        parts=_reference_parts(ref), mode="post", residual=(True, True), norms=(0, 1), ff_first=False, use_mask=True
    ):
        attend = functools.partial(_self_attend, parts.self_attn, mask if use_mask else None)
        subs = [parts.feed_forward, attend] if ff_first else [attend, parts.feed_forward]
        return _residual_stack(x, [(subs[i], parts.norms[norms[i]], residual[i]) for i in range(2)], mode)

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
        Slip(_NORM_HINT, {"mode": "norm_sublayer"}),
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


def _self_attend(attention: Callable[..., torch.Tensor], mask: torch.Tensor | None, y: torch.Tensor) -> torch.Tensor:
    return attention(y, y, y, mask)


_SHARED_NORM = "the same LayerNorm is used twice: norm1 after self-attention, norm2 after the feed-forward"


_SUBLAYER_DROPOUT = "to each sublayer's output before the residual addition: norm(x + dropout(sublayer(x)))"


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
    ``norm1``, ``norm2`` (LayerNorm), and ``forward(x, src_mask=None)``::

        x = norm1(x + dropout(self_attn(x, x, x, src_mask)))
        x = norm2(x + dropout(feed_forward(x)))

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
    _copy_layer(m, "self_attn", "a MultiHeadAttention(d_model, n_heads, dropout)", ref.self_attn)
    _copy_layer(m, "feed_forward", "a PositionwiseFeedForward(d_model, d_ff, dropout)", ref.feed_forward)
    _copy_norms(m, (ref.sublayers[0].norm, ref.sublayers[1].norm), D)
    x = 2 * torch.randn(B, S, D) + 1
    for mask in (None, _pad_mask([S, S - 2], S)):
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
        diagnose(out, ref(x, mask), _encoder_layer_bugs(ref, x, mask, _own_parts(m, ref, x)), what)
    expect_dropout(
        m,
        lambda: build_module(cls, (D, H, d_ff, 0.0), "cls(d_model, n_heads, d_ff, dropout)"),
        args,
        out,
        _SUBLAYER_DROPOUT,
    )
    return (
        "values against the package's EncoderLayer holding your weights, with and without a padding mask, "
        "dropout on in training only"
    )


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
        parts=_reference_parts(ref),
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
            "self": functools.partial(_self_attend, parts.self_attn, masks[self_mask]),
            "cross": cross,
            "ff": parts.feed_forward,
        }
        return _residual_stack(x, [(subs[order[i]], parts.norms[norms[i]], residual[i]) for i in range(3)], mode)

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
        Slip(_NORM_HINT, {"mode": "norm_sublayer"}),
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
    ``forward(x, memory, src_mask=None, tgt_mask=None)``::

        x = norm1(x + dropout(self_attn(x, x, x, tgt_mask)))
        x = norm2(x + dropout(cross_attn(x, memory, memory, src_mask)))
        x = norm3(x + dropout(feed_forward(x)))

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
    ref = DecoderLayer(D, H, d_ff, dropout=0.0).eval()
    _copy_layer(m, "self_attn", "a MultiHeadAttention(d_model, n_heads, dropout)", ref.self_attn)
    _copy_layer(m, "cross_attn", "a MultiHeadAttention(d_model, n_heads, dropout)", ref.cross_attn)
    _copy_layer(m, "feed_forward", "a PositionwiseFeedForward(d_model, d_ff, dropout)", ref.feed_forward)
    _copy_norms(m, [s.norm for s in ref.sublayers], D)
    x = 2 * torch.randn(B, T, D) + 1
    tgt_mask = _pad_mask([T, T - 2], T) & causal_mask(T)  # (B, 1, T, T)
    # First with memory as long as the target (S = T), so that swapped masks still run and can be named;
    # then with a longer memory.
    for S in (T, T + 2):
        memory = torch.randn(B, S, D)
        src_mask = _pad_mask([S - 1, S], S)  # (B, 1, 1, S)
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
        bugs = _decoder_layer_bugs(ref, x, memory, src_mask, tgt_mask, _own_parts(m, ref, x))
        try:
            diagnose(out, ref(x, memory, src_mask, tgt_mask), bugs, f"the output (memory length {S})")
        except ExerciseError as error:
            if not error.known_bug and _leaks_future(m, x, memory, src_mask, tgt_mask, out):
                raise ExerciseError(_CAUSAL_HINT) from None
            raise
        if S == T and _leaks_future(m, x, memory, src_mask, tgt_mask, out):
            raise ExerciseError(_CAUSAL_HINT)
    expect_dropout(
        m,
        lambda: build_module(cls, (D, H, d_ff, 0.0), "cls(d_model, n_heads, d_ff, dropout)"),
        (x, memory, src_mask, tgt_mask),
        out,
        _SUBLAYER_DROPOUT,
    )
    return (
        "values against the package's DecoderLayer holding your weights, masks, memory longer than the "
        "target, no peeking at later positions, dropout on in training only"
    )


def _leaks_future(m, x, memory, src_mask, tgt_mask, out) -> bool:
    """Does changing the last target position change the outputs at earlier positions?"""
    changed = x.clone()
    changed[:, -1] = torch.randn_like(changed[:, -1])
    again = call_answer(m, changed, memory, src_mask, tgt_mask)
    return isinstance(again, torch.Tensor) and not torch.allclose(again[:, :-1], out[:, :-1], atol=ATOL, rtol=RTOL)
