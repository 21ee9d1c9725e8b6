"""The check of notebook 12's cached step: the new positions' index, the classic key/value cache bug.

A cached decoder runs on the new position only, and that position is number ``t``,
the count of positions already cached, not 0. With the paper's sinusoids (§3.5) it
gets ``PE(t)``; with rotary positions, the course model's, its query and key are
rotated for position ``t`` (the cached keys were rotated for ``0 … t-1`` at their own
steps). Forget it, and every new word is treated as the first one: nothing crashes,
the translations are just wrong.

``check_cached_self_attention`` runs the learner's self-attention step on caches of
0, 1, 4 and 7 positions and on two new positions at once, against an independent
reference (the uncached causal self-attention over the whole prefix), then decodes
with it inside a small random rotary Transformer. :func:`greedy_with_self_attention`
is that decoder, for the notebook's own comparison on the course's model.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from transformer_lessons.attention import MultiHeadAttention
from transformer_lessons.checks import _feedback
from transformer_lessons.checks.common import (
    Bug,
    ExerciseError,
    _NotImplementedYet,
    all_close,
    call_answer,
    exercise,
    expect_tensor,
    expect_unchanged,
    known_bug,
)
from transformer_lessons.checks.evidence import Inputs
from transformer_lessons.config import ModelConfig
from transformer_lessons.kv_cache import step_mask
from transformer_lessons.masks import causal_mask
from transformer_lessons.model import Transformer

# The exact fix, kept back for hint() ([[...]], see common.split_fix).
_FIX = "[[: t = past_k.size(2); attn.project_kv(y, y, offset=t); attn.attend(y, k, v, step_mask(T, t), offset=t)]]"
_AXES = {0: "dim 0, the batch (B)", 1: "dim 1, the key/value heads (Hkv)", 3: "dim 3, the head width (Dh)"}
# (B, Hkv, Dh) = (3, 2, 6) and t never 2, 3 or 6: an offset read from the wrong axis shows on some input.
_D, _H, _HKV, _B = 24, 4, 2, 3
_CASES = [  # (description, t, T)
    ("the first step (an empty cache, t = 0)", 0, 1),
    ("a cache of one position", 1, 1),
    ("a cache of four positions", 4, 1),
    ("a cache of seven positions", 7, 1),
    ("two new positions after five cached", 5, 2),
]


def _triple(got: Any) -> tuple[Any, Any, Any]:
    """The learner's answer as (out, k, v)."""
    if got is None:
        raise ExerciseError("your function returned None: did you forget a `return`?")
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        what = "one tensor" if isinstance(got, torch.Tensor) else f"{type(got).__name__} of {len(got)}"
        what = what if isinstance(got, (torch.Tensor, tuple, list)) else type(got).__name__
        raise ExerciseError(
            f"return three tensors, (out, k, v): the attention's output and the grown cache; got {what}"
        )
    return got[0], got[1], got[2]


def _step(attn, y, cache_k, cache_v, q_at: int, k_at: int, masked: bool = True, own_only: bool = False):
    """One cached step with the query rotated for ``q_at …`` and the new keys for ``k_at …`` (a bug's simulation)."""
    t, T = cache_k.size(2), y.size(1)
    new_k, new_v = attn.project_kv(y, y, offset=k_at)  # (B, Hkv, T, Dh) each
    k, v = torch.cat([cache_k, new_k], dim=2), torch.cat([cache_v, new_v], dim=2)  # (B, Hkv, t + T, Dh)
    if own_only:  # attends over the new positions only
        return attn.attend(y, new_k, new_v, step_mask(T, 0), offset=q_at), k, v
    return attn.attend(y, k, v, step_mask(T, t) if masked else None, offset=q_at), k, v


def _bugs(attn, y, ck, cv) -> list[Bug]:
    t, T = ck.size(2), y.size(1)

    def at(q_at: int, k_at: int, **how):
        return lambda: _step(attn, y, ck, cv, q_at, k_at, **how)

    bugs = [
        (
            "every new position was placed at position 0 (no offset): its query and key are rotated as if it were "
            "the first word, while the cached keys sit at positions 0 … t-1. The new position's index is t, the "
            f"number of positions already cached, and both the keys and the query need it{_FIX}",
            at(0, 0),
        ),
        (
            "the new keys are at position 0: project_kv rotated them as the first word's, while the query is at "
            f"t. A key is cached once, so it must be rotated for its own position, t, before it is stored{_FIX}",
            at(t, 0),
        ),
        (
            "the query is at position 0: attend rotated it as the first word's, while its key is at t. The query "
            f"of the new position needs the same offset as its key{_FIX}",
            at(0, t),
        ),
        (
            "off by one: the new position is placed at t + 1. Positions count from 0, so after t cached "
            f"positions (0 … t-1) the new one is number t{_FIX}",
            at(t + 1, t + 1),
        ),
        (
            "off by one: the new position is placed at t - 1, the last cached position's index. The cache holds "
            f"positions 0 … t-1, so the new one is number t{_FIX}",
            at(t - 1, t - 1),
        ),
        (
            "the new position is placed at t + T, the length of the prefix after this step. Positions count from "
            f"0: after t cached positions (0 … t-1) the new ones are t … t + T - 1, so the offset is t{_FIX}",
            at(t + T, t + T),
        ),
        (
            "the new positions are placed from t + T - 1, the last new position's index. The offset is the index of "
            f"the FIRST new position (the first row of y): t, the number of positions already cached{_FIX}",
            at(t + T - 1, t + T - 1),
        ),
        (
            "the new positions see each other without a mask: with two new positions at once, the first "
            f"may not see the second (step_mask(T, t) hides it; it is None when T = 1){_FIX}",
            at(t, t, masked=False),
        ),
        (
            "the query attends over the new position's keys and values only: the cached positions must be "
            f"attended to as well, so attend over the grown cache (the k, v you return){_FIX}",
            at(t, t, own_only=True),
        ),
    ]
    for dim, name in _AXES.items():
        n = ck.size(dim)
        bugs.append(
            (
                f"t was read from {name} of past_k: (B, Hkv, t, Dh) counts the cached positions in dim 2{_FIX}",
                at(n, n),
            )
        )
    return bugs


def _watch_masks(attn: MultiHeadAttention) -> None:
    """Make ``attn`` refuse a mask whose shape does not fit (queries T) x (keys t + T), before PyTorch fails inside."""
    attend_heads = attn._attend_heads

    def checked(q, k, v, mask):
        T, S = q.size(2), k.size(2)  # queries, keys
        if mask is not None:
            rows, cols = (mask.shape[-2] if mask.dim() > 1 else 1), mask.shape[-1]
            if rows not in (1, T) or cols not in (1, S):
                raise known_bug(
                    f"your mask is {tuple(mask.shape)}, but there are T = {T} new queries and t + T = {S} keys "
                    f"(cached and new): the mask is (queries T) x (keys t + T), and step_mask takes the number of new "
                    "positions first[[: step_mask(T, t)]]"
                )
        return attend_heads(q, k, v, mask)

    attn._attend_heads = checked  # type: ignore[method-assign]


def _stub_called(error: BaseException) -> str | None:
    """The name of the function whose ``raise NotImplementedError`` stopped the learner's step, if not the step itself."""
    cause = error.__cause__ if isinstance(error, _NotImplementedYet) else error
    if cause is None or cause.__traceback__ is None:
        return None
    return _feedback._last(cause.__traceback__).tb_frame.f_code.co_name


def _not_written(name: str | None) -> str:
    where = " (the exercise above)" if name == "append_kv" else ", which your step calls,"
    return f"your {name}{where} is not written yet: write it and run its check first, then check this step again"


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """``call_answer``, except that a stub in a function the step calls (``append_kv``) is named as such."""
    try:
        return call_answer(
            fn,
            *args,
            hint="the layer's project_kv gives the new keys and values, its attend the output; each takes an offset",
        )
    except _NotImplementedYet as yet:
        name = _stub_called(yet)
        if name is not None and name != getattr(fn, "__name__", name):
            raise ExerciseError(_not_written(name)) from yet
        raise


def _case(attn: MultiHeadAttention, t: int, T: int, g: torch.Generator):
    """A prefix of ``t + T`` positions: the learner's inputs and the uncached reference for its last ``T``."""
    x = torch.randn(_B, t + T, _D, generator=g)  # (B, t + T, D): every position's input to the layer
    k_all, v_all = attn.project_kv(x, x)  # (B, Hkv, t + T, Dh): keys rotated for 0 … t + T - 1, once each
    out = attn(x, x, x, causal_mask(t + T))[:, t:]  # (B, T, D): the new positions, recomputing the whole prefix
    inputs = {"y": x[:, t:].clone(), "past_k": k_all[:, :, :t].clone(), "past_v": v_all[:, :, :t].clone()}
    return inputs, (out, k_all, v_all)


def _self_attention_with(fn: Callable[..., Any], cache, layer: int, attn: MultiHeadAttention):
    """The self-attention sublayer of a cached step, written with ``fn`` (called as it is): ``y (B, T, D)`` -> ``(B, T, D)``."""

    def self_attention(y: torch.Tensor) -> torch.Tensor:
        out, cache.self_k[layer], cache.self_v[layer] = _triple(fn(attn, y, cache.self_k[layer], cache.self_v[layer]))
        return out

    return self_attention


def cached_logits(
    model: Transformer, cache, src_mask: torch.Tensor | None, tokens: torch.Tensor, self_attention
) -> torch.Tensor:
    """``model.decode_step(cache, src_mask, tokens)`` written out, its self-attention step ``self_attention(attn, y, past_k, past_v)``.

    The cross-attention and the feed-forward are the model's own. Use in eval mode, under no_grad.

    Shape:
        tokens ``(B, 1)``, the positions after the ``t`` in ``cache`` -> logits ``(B, V)``.
    """
    x = model.tgt_pos(model.tgt_embed(tokens), offset=cache.length)  # (B, 1, D); rotary: adds nothing
    for i, layer in enumerate(model.decoder.layers):
        x = layer.sublayers[0](x, _self_attention_with(self_attention, cache, i, layer.self_attn))
        x = layer.sublayers[1](x, lambda y: layer.cross_attn.attend(y, cache.cross_k[i], cache.cross_v[i], src_mask))
        x = layer.sublayers[2](x, layer.feed_forward)  # (B, 1, D)
    return model.generator(model.decoder.norm(x)[:, -1])  # (B, V)


def greedy_with_self_attention(
    model: Transformer, src: torch.Tensor, src_mask: torch.Tensor | None, self_attention, steps: int, bos_id: int
) -> torch.Tensor:
    """Cached greedy decoding of ``steps`` tokens whose self-attention step is ``self_attention(attn, y, past_k, past_v)``.

    Shape:
        src ``(B, S)``, src_mask ``(B, 1, 1, S)`` or ``None`` -> token ids ``(B, 1 + steps)``, ``<bos>`` first.
    """
    cache = model.init_cache(model.encode(src, src_mask))  # cross-attention K, V once per sentence
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    try:
        for _ in range(steps):
            logits = cached_logits(model, cache, src_mask, ys[:, -1:], self_attention)  # (B, V)
            ys = torch.cat([ys, logits.argmax(-1, keepdim=True)], dim=1)  # (B, t + 2)
    except NotImplementedError as error:  # a stub: say whose (the step's own, or the append_kv it calls)
        if not _feedback.is_stub(error):
            raise
        name = _stub_called(error)
        own = name == getattr(self_attention, "__name__", name)
        raise NotImplementedError("it is not written yet" if own else _not_written(name)) from error
    return ys


def _decode_with(fn: Callable[..., Any], steps: int = 10) -> None:
    """Steps of a small random rotary Transformer with the learner's step: the logits of recomputing the prefix."""
    torch.manual_seed(0)
    config = ModelConfig(
        n_layers=2, d_model=16, n_heads=2, d_ff=32, dropout=0.0, positional="rotary", tie_embeddings=False
    )
    model = Transformer(config, 11, 11).eval()
    src = torch.randint(3, 11, (2, 6))  # (B, S)
    memory = model.encode(src, None)  # (B, S, D)
    cache = model.init_cache(memory)
    ys = torch.randint(3, 11, (2, steps))  # (B, steps): any prefix will do, the logits must agree
    for step in range(1, steps + 1):
        cached = cached_logits(model, cache, None, ys[:, step - 1 : step], functools.partial(call_answer, fn))  # (B, V)
        recomputed = model.decode(memory, None, ys[:, :step], causal_mask(step))[:, -1]  # (B, V)
        if not all_close(cached, recomputed):
            raise ExerciseError(
                f"used inside a real decoder, your function gives other logits than recomputing the whole "
                f"prefix, at step {step}{_FIX}"
            )


@exercise("cached_self_attention", "return (out, k, v): the new positions' attention over the grown cache")
def check_cached_self_attention(fn: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> str:
    """Check one cached step of a rotary self-attention layer: above all, the new positions' index.

    Expected signature: ``fn(attn, y, past_k, past_v) -> (out, k, v)``, with ``attn`` a
    :class:`~transformer_lessons.attention.MultiHeadAttention` with rotary positions,
    ``y`` the layer's input at the ``T`` new positions, and ``past_k``, ``past_v`` the
    keys (already rotated for their positions) and values of the ``t`` earlier ones.
    What ``DecoderLayer.step`` does in its self-attention: project the new keys and
    values at positions ``t … t + T - 1``, append them, and attend with the new
    queries (at the same positions) over all ``t + T``.

    Checked on caches of 0, 1, 4 and 7 positions and two new positions at once, against
    the uncached causal self-attention over the whole prefix (its output at the new
    positions, its keys and values); then inside a small random rotary Transformer fed a
    random prefix of 10 tokens, whose cached logits at each step must be those of
    recomputing the whole prefix.

    Shape:
        y ``(B, T, D)``, past_k, past_v ``(B, Hkv, t, Dh)`` -> out ``(B, T, D)``,
        k, v ``(B, Hkv, t + T, Dh)``.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError (an ExerciseError naming
        append_kv when the stub that raised is the append_kv it calls).

    Raises:
        ExerciseError: naming the likely bug (the new position at 0, only its key or
            only its query at 0, off by one either way, at t + T or t + T - 1, t read
            from another axis, a mask of the wrong shape, no mask between two new positions, the cache not attended to, inputs
            changed in place).
    """
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    attn = MultiHeadAttention(_D, _H, 0.0, n_kv_heads=_HKV, rotary_base=10000.0).eval()
    _watch_masks(attn)  # a mask of the wrong shape is named before PyTorch fails on it
    seen = Inputs()  # a bug is named only if it explains every input
    for description, t, T in _CASES:
        with seen.one():
            originals, expected = _case(attn, t, T, g)
            inputs = {name: x.clone() for name, x in originals.items()}
            got = _triple(_call(fn, attn, *inputs.values()))
            expect_unchanged(originals, inputs)
            shapes = ((_B, T, _D), (_B, _HKV, t + T, _D // _H), (_B, _HKV, t + T, _D // _H))
            for value, which, shape in zip(got, ("out", "the grown keys k", "the grown values v"), shapes):
                expect_tensor(
                    value,
                    f"{which} ({description})",
                    shape=shape,
                    dtype=torch.float32,
                    shape_hint="out is (B, T, D); k and v hold the t cached positions and the T new ones, (B, Hkv, t + T, Dh)",
                )
            seen.compare(
                tuple(got),
                expected,
                _bugs(attn, inputs["y"], inputs["past_k"], inputs["past_v"]),
                f"(out, k, v) for {description}",
                f"Expected the uncached self-attention's output at the new positions and keys rotated for their own positions{_FIX}",
            )
    seen.verdict()
    _decode_with(fn)
    return "caches of 0, 1, 4 and 7 positions and two new positions at once, and 10 steps of a real rotary decoder against recomputing"
