"""Check for multi-head attention (paper §3.2.2): h heads attending in parallel, merged by w_o.

The reference is PyTorch's own ``nn.MultiheadAttention`` holding the learner's four
projections (:func:`_torch_mha`). The bug simulation :func:`_mha` recomputes the answer
from the learner's four Linear layers with one mistake switched on (scaling, the head
split or merge, w_o, the mask, the inputs).
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lessons.checks.common import (
    DROPOUT,
    MASK_NAN_HINT,
    NEG,
    Bug,
    call_in_eval,
    exercise,
    expect_dropout,
    expect_tensor,
    expect_unchanged,
    expect_linear,
    build_module,
)
from transformer_lessons.checks.evidence import Inputs
from transformer_lessons.checks.slips import Slip, slip_bugs


def _mha(
    m,
    n_heads,
    query,
    key,
    value,
    mask=None,
    *,
    scale=None,
    split="ok",
    concat="ok",
    w_o=True,
    mask_mode="ok",
    inputs="ok",
):
    """Multi-head attention from the learner's four Linear layers, with knobs that reproduce the common bugs."""
    B, T, D = query.shape
    Dh = D // n_heads
    if inputs == "query":
        key = value = query
    elif inputs == "swap":
        key, value = value, key

    def project(layer, x):
        return F.linear(x, layer.weight, layer.bias)

    def heads(x):
        L = x.size(1)
        if split == "view":  # no transpose: each "head" gets a slab of consecutive positions
            return x.reshape(B, n_heads, L, Dh)
        return x.reshape(B, L, n_heads, Dh).transpose(1, 2)  # (B, L, D) -> (B, H, L, Dh)

    q, k, v = heads(project(m.w_q, query)), heads(project(m.w_k, key)), heads(project(m.w_v, value))
    scores = q @ k.transpose(-2, -1) * (1 / math.sqrt(Dh) if scale is None else scale)  # (B, H, T, S)
    if mask is not None and mask_mode != "ignore":
        scores = scores.masked_fill(mask if mask_mode == "inverted" else ~mask, NEG)
    out = scores.softmax(-1) @ v  # (B, H, T, Dh)
    if concat == "no_transpose":
        out = out.reshape(B, T, D)
    elif concat == "heads_last":
        out = out.permute(0, 2, 3, 1).reshape(B, T, D)  # (B, T, Dh, H): head index varies fastest
    else:
        out = out.transpose(1, 2).reshape(B, T, D)  # (B, H, T, Dh) -> (B, T, D)
    return project(m.w_o, out) if w_o else out


def _torch_mha(m, n_heads, query, key, value, mask=None) -> torch.Tensor:
    """nn.MultiheadAttention holding the learner's weights: the independent reference."""
    D = query.size(-1)
    ref = nn.MultiheadAttention(D, n_heads, dropout=0.0, batch_first=True).eval()
    zero = torch.zeros(D)
    ref.in_proj_weight.copy_(torch.cat([m.w_q.weight, m.w_k.weight, m.w_v.weight]))
    ref.in_proj_bias.copy_(torch.cat([b if b is not None else zero for b in (m.w_q.bias, m.w_k.bias, m.w_v.bias)]))
    ref.out_proj.weight.copy_(m.w_o.weight)
    ref.out_proj.bias.copy_(m.w_o.bias if m.w_o.bias is not None else zero)
    attn_mask = None
    if mask is not None:
        B, T, S = query.size(0), query.size(1), key.size(1)
        # nn.MultiheadAttention reads True as BLOCKED, the opposite of our convention: invert.
        attn_mask = ~mask.expand(B, n_heads, T, S).reshape(B * n_heads, T, S)
    return ref(query, key, value, attn_mask=attn_mask, need_weights=False)[0]


def _mha_bugs(m: nn.Module, H: int, q, k, v, mask) -> list[Bug]:
    """The common multi-head attention bugs on these inputs, alone and two at a time: each hint, and what it returns."""
    D = q.size(-1)
    split = (
        "the heads are split wrongly: viewing the projections as (B, H, L, d_head) mixes positions across heads. "
        "Split the LAST axis into (H, d_head), then move the heads axis forward"
        "[[: x.view(B, L, H, d_head).transpose(1, 2)]]"
    )
    slips = [
        Slip(
            "did you forget to divide the scores by sqrt(d_head)? "
            "[[ Each head's scores are q @ k.transpose(-2, -1) / math.sqrt(d_head)]]",
            {"scale": 1.0},
        ),
        Slip(
            f"divide each head's scores by sqrt(d_head) = sqrt(d_model / n_heads) = {math.sqrt(D // H):.3g}, "
            f"not sqrt(d_model) = {math.sqrt(D):.3g}",
            {"scale": 1 / math.sqrt(D)},
        ),
        Slip(f"divide by sqrt(d_head) = {math.sqrt(D // H):.3g}, not d_head = {D // H}", {"scale": 1 / (D // H)}),
        Slip(split, {"split": "view", "concat": "no_transpose"}),
        Slip(split, {"split": "view"}),
        Slip(
            "the heads are concatenated wrongly: transpose (B, H, T, d_head) back to (B, T, H, d_head) BEFORE "
            "reshaping to (B, T, d_model)[[: out.transpose(1, 2).reshape(B, T, d_model)]]",
            {"concat": "no_transpose"},
        ),
        Slip(
            "the heads are concatenated in the wrong order: each position's vector is head 0's d_head values, "
            "then head 1's, ...[[: out.transpose(1, 2).reshape(B, T, d_model)]]",
            {"concat": "heads_last"},
        ),
        Slip(
            "the output projection w_o is missing: apply it to the concatenated heads"
            "[[: return self.w_o(concatenated heads)]]",
            {"w_o": False},
        ),
        Slip(
            "forward uses the query for keys and values: project key with w_k and value with w_v", {"inputs": "query"}
        ),
        Slip("keys and values are swapped: keys come from w_k(key), values from w_v(value)", {"inputs": "swap"}),
    ]
    if mask is not None:
        slips[:0] = [
            Slip(
                "the mask is ignored: pass it on to the attention, where scores are filled with -inf where it is False",
                {"mask_mode": "ignore"},
            ),
            Slip(
                "the mask is inverted: True means 'may attend'; fill the scores where the mask is False",
                {"mask_mode": "inverted"},
            ),
        ]
    return slip_bugs(functools.partial(_mha, m, H, q, k, v, mask), slips)


@exercise(
    "multi_head_attention",
    "project with w_q, w_k, w_v, split into heads (B, H, L, d_head), attend, merge the heads and apply w_o",
    takes="class",
)
def check_multi_head_attention(cls: Callable[..., nn.Module]) -> str:
    """Check a multi-head attention module (paper §3.2.2).

    Expected signature: ``cls(d_model, n_heads, dropout=0.0)``, an ``nn.Module``
    owning four ``nn.Linear(d_model, d_model)`` named ``w_q, w_k, w_v, w_o``, with
    ``forward(query, key, value, mask=None) -> output``. The check copies those
    weights into ``nn.MultiheadAttention`` and compares. It builds the module with
    dropout on and compares in eval mode, where dropout must be off; in training
    mode the dropout must change the output.

    Shape:
        query ``(B, T, D)``, key and value ``(B, S, D)``, mask bool broadcastable
        to ``(B, H, T, S)`` (True = may attend); output ``(B, T, D)``.

    Args:
        cls: the learner's class.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (scaling, head split or merge, missing
            w_o, mask ignored or inverted, key/value mixed up).
    """
    D, H = 12, 3  # d_head = 4: sqrt(d_head) = 2, sqrt(d_model) = 3.46, d_head = 4 all differ
    m = build_module(cls, (D, H, DROPOUT), "cls(d_model, n_heads, dropout)")
    for name in ("w_q", "w_k", "w_v", "w_o"):
        expect_linear(m, name, D, D, "your MultiHeadAttention")
    B, T, S = 2, 4, 6
    pad = torch.tensor([[True] * S, [True] * (S - 2) + [False] * 2])
    x = torch.randn(B, T, D)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    # T != S and key != value, so mixing up lengths or inputs shows.
    cases = [
        ("cross-attention without a mask", (torch.randn(B, T, D), torch.randn(B, S, D), torch.randn(B, S, D), None)),
        (
            "cross-attention with a padding mask (B, 1, 1, S)",
            (torch.randn(B, T, D), torch.randn(B, S, D), torch.randn(B, S, D), pad[:, None, None, :]),
        ),
        ("self-attention with a causal mask (T, T)", (x, x, x, causal)),
    ]
    seen = Inputs()  # a bug is named only if it explains every input
    for case, (q, k, v, mask) in cases:
        with seen.one():
            inputs = {"query": q, "key": k, "value": v}
            originals = {name: t.clone() for name, t in inputs.items()}
            args = (q, k, v) if mask is None else (q, k, v, mask)
            out = call_in_eval(m, *args)
            expect_unchanged(originals, inputs)
            out = expect_tensor(
                out,
                "the output",
                (B, T, D),
                q.dtype,
                nan_hint=MASK_NAN_HINT,
                shape_hint="one d_model vector per query: (B, T, d_model)",
            )
            seen.compare(
                out,
                _torch_mha(m, H, q, k, v, mask),
                _mha_bugs(m, H, q, k, v, mask),
                f"the output ({case})",
                "compare with nn.MultiheadAttention holding your weights",
            )
    seen.verdict()
    expect_dropout(
        m,
        lambda: build_module(cls, (D, H, 0.0), "cls(d_model, n_heads, dropout)"),
        args,
        out,
        "to the attention weights, after the softmax",
    )
    return (
        "shapes, values against nn.MultiheadAttention with your weights, padding and causal masks, inputs "
        "unchanged, dropout on in training only"
    )
