"""What the encoder and decoder layer checks share: the learner's parts in the reference, restacked wrongly.

A layer check copies the learner's submodules (attention, feed-forward, LayerNorms
with distinct non-trivial weights) into the package's ``EncoderLayer`` or
``DecoderLayer`` and compares outputs. The bug simulations restack the same
submodules wrongly with :func:`residual_stack`: pre-norm, a missing residual,
norms swapped or shared, sublayers out of order, masks dropped or swapped. When
the learner's own submodules compute something else than the reference's holding
the same weights (their own LayerNorm class, say), the simulations are also run on
the learner's own submodules, so that "pre-norm, with your own LayerNorm" is
named as the two things it is (:func:`own_parts`).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import torch
from torch import nn

from transformer_lessons.checks.common import (
    ATOL,
    RTOL,
    ExerciseError,
    shape_of,
    expect_submodule,
)
from transformer_lessons.checks.slips import Slip


def residual_stack(x, steps, mode="post"):
    """Apply (sublayer, norm, residual) steps: post-norm (the paper), pre-norm, or norm on the sublayer."""
    for sublayer, norm, residual in steps:
        if mode == "pre":
            x = (x if residual else 0) + sublayer(norm(x))
        elif mode == "norm_sublayer":
            x = x + norm(sublayer(x))
        else:
            x = norm((x if residual else 0) + sublayer(x))
    return x


def copy_layer(learner: nn.Module, name: str, description: str, target: nn.Module) -> None:
    """Load the learner's submodule `name` into the reference's `target` (same parameter names)."""
    source = expect_submodule(learner, name, description)
    try:
        target.load_state_dict(source.state_dict())
    except RuntimeError as error:
        raise ExerciseError(f"`{name}` should be {description}; its parameters do not match:\n{error}") from None


def learner_norms(learner: nn.Module, count: int) -> list[tuple[str, Any]]:
    """The learner's LayerNorms in sublayer order, with the names to report them by.

    Two layouts: ``norm1``, ``norm2``, ... on the layer (what the exercises ask for),
    or ``sublayers[i].norm`` (the package's SublayerConnection, as in model.EncoderLayer).
    """
    sublayers = getattr(learner, "sublayers", None)
    if not hasattr(learner, "norm1") and isinstance(sublayers, nn.ModuleList) and len(sublayers) == count:
        return [(f"sublayers[{i}].norm", getattr(sublayer, "norm", None)) for i, sublayer in enumerate(sublayers)]
    return [(f"norm{i + 1}", getattr(learner, f"norm{i + 1}", None)) for i in range(count)]


def copy_norms(learner: nn.Module, targets: Sequence[nn.Module], D: int) -> None:
    """Give the learner's norms distinct non-trivial gains and biases, and copy them into the reference."""
    for (name, norm), target in zip(learner_norms(learner, len(targets)), targets):
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


def pad_mask(lengths: Sequence[int], size: int) -> torch.Tensor:
    return (torch.arange(size)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]  # (B, 1, 1, size)


NORM_HINT = "norm the SUM: x = norm(x + sublayer(x)), not x + norm(sublayer(x))"


class Parts(NamedTuple):
    """The submodules a layer stacks: the reference's (holding the learner's weights) or the learner's own."""

    self_attn: Any
    feed_forward: Any
    norms: Sequence[Any]
    cross_attn: Any = None


def reference_parts(ref: nn.Module) -> Parts:
    return Parts(ref.self_attn, ref.feed_forward, [s.norm for s in ref.sublayers], getattr(ref, "cross_attn", None))


def learner_parts(learner: nn.Module, count: int) -> Parts:
    return Parts(
        learner.self_attn,
        learner.feed_forward,
        [norm for _, norm in learner_norms(learner, count)],
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


def own_parts(learner: nn.Module, ref: nn.Module, x: torch.Tensor) -> list[Slip]:
    """The learner's own submodules, as a partner slip (knob ``parts``), if they differ from the reference's.

    The reference's submodules hold the learner's weights, so they differ only when the
    learner's classes compute something else (the Annotated Transformer's LayerNorm, say).
    The hint names which and the check that tests each alone.
    """
    own, theirs = learner_parts(learner, len(ref.sublayers)), reference_parts(ref)
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


def self_attend(attention: Callable[..., torch.Tensor], mask: torch.Tensor | None, y: torch.Tensor) -> torch.Tensor:
    return attention(y, y, y, mask)


SUBLAYER_DROPOUT = "to each sublayer's output before the residual addition: norm(x + dropout(sublayer(x)))"
