"""Scaled dot-product attention and multi-head attention.

Paper: §3.2.1 (Eq. 1) and §3.2.2.

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V
    MultiHead(Q, K, V) = Concat(head_1, …, head_h) W^O,  head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

Since the paper, ``n_kv_heads < n_heads`` shares each key/value head among
``n_heads / n_kv_heads`` query heads: grouped-query attention (Ainslie et al.
2023, "GQA"), and with one key/value head multi-query attention (Shazeer 2019,
"Fast Transformer Decoding: One Write-Head is All You Need"). A decoder's
key/value cache then holds ``n_kv_heads`` heads instead of ``n_heads``.

    head_i = Attention(Q W_i^Q, K W_g(i)^K, V W_g(i)^V),  g(i) = i // (n_heads / n_kv_heads)

Built with ``rotary_base``, the projected queries and keys are rotated by their
positions (RoFormer, Su et al. 2021; :mod:`transformer_lessons.rotary`).

A ``head_mask`` switches heads off in a trained model without touching its weights:
each head's output is multiplied by its entry before the heads are concatenated,
so a head with 0 contributes nothing to what ``W^O`` mixes (the gates ``ξ_h`` of
Michel et al. 2019, "Are Sixteen Heads Really Better than One?").

    MultiHead(Q, K, V) = Concat(m_1 head_1, …, m_h head_h) W^O

:mod:`transformer_lessons.heads` sets the masks and measures what each head is worth.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch import nn

from transformer_lessons.rotary import apply_rotary


def _check_mask(mask: torch.Tensor) -> None:
    if mask.dtype != torch.bool:
        raise TypeError(
            f"masks in this course are bool tensors with True = 'may attend'; got dtype {mask.dtype}. "
            "Build one with transformer_lessons.masks (padding_mask, causal_mask) or compare, e.g. tokens != pad_id."
        )


def _check_head_mask(mask: torch.Tensor, n_heads: int) -> None:
    if (
        not isinstance(mask, torch.Tensor)
        or tuple(mask.shape) != (n_heads,)
        or not (mask.dtype == torch.bool or mask.is_floating_point())
    ):
        got = (
            f"shape {tuple(mask.shape)}, dtype {mask.dtype}" if isinstance(mask, torch.Tensor) else type(mask).__name__
        )
        raise ValueError(
            f"head_mask must be None or a bool or float tensor of shape ({n_heads},), one entry per head "
            f"(True or 1 keeps the head, False or 0 switches it off); got {got}"
        )


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax(Q Kᵀ / √d_k) V, returning the attention weights as well.

    Args:
        query: ``(..., T, Dh)``.
        key: ``(..., S, Dh)``.
        value: ``(..., S, Dv)``.
        mask: optional BoolTensor broadcastable to ``(..., T, S)``; ``True`` = may attend.
        dropout: optional module (e.g. ``nn.Dropout``) applied to the weights
            before they mix the values. Not in the paper: §5.4 applies dropout
            to each sublayer's output and to the sums of embeddings and
            positional encodings; dropout on the attention weights is an
            addition from tensor2tensor (``attention_dropout``) that the
            Annotated Transformer follows.

    Returns:
        ``(output, weights)``: output ``(..., T, Dv)``; weights ``(..., T, S)``,
        the softmax probabilities before dropout. Each row sums to 1, masked keys
        get exactly 0, and a query with every key masked gets an all-zero row
        (and a zero output) rather than NaN, as ``F.scaled_dot_product_attention``
        does.
    """
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., T, Dh) @ (..., Dh, S) -> (..., T, S)
    if mask is not None:
        _check_mask(mask)
        # -inf makes exp() exactly 0: masked keys get no weight at all.
        scores = scores.masked_fill(~mask, float("-inf"))
    # Over the keys: each query's weights sum to 1. In float32 even under bf16 autocast (a no-op in float32):
    # bf16 stores 7 mantissa bits (8 with the implicit leading 1), so a sum near 1 drops any term below about
    # 0.004. The weights come back in the scores' dtype.
    weights = scores.float().softmax(dim=-1).to(scores.dtype)
    if mask is not None:
        # A row whose keys are all masked is NaN after softmax (0/0); make it 0 instead.
        weights = weights.masked_fill(~mask, 0.0)
    mixed = weights if dropout is None else dropout(weights)
    return mixed @ value, weights  # (..., T, S) @ (..., S, Dv) -> (..., T, Dv)


#: Take PyTorch's plain ("math") kernel for bfloat16 on a CPU. Its fused CPU kernel runs ~7x slower there at the
#: course's sizes (about 100 sentences, 17 positions, 8 heads of 32; forward and backward: 33 ms against 4-6 ms on
#: the course's 2-core machine), though 2x faster in float32; benchmarks/bench_profile.py --compare-attention times both.
CPU_BFLOAT16_MATH_KERNEL = True


def fused_sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout_p: float = 0.0
) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` with the bool mask (True = may attend), in the fastest kernel for the
    device and dtype: the same numbers up to float rounding, whichever kernel computes them."""
    if CPU_BFLOAT16_MATH_KERNEL and q.device.type == "cpu" and q.dtype == torch.bfloat16:
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with the heads computed in one batched matmul.

    ``W^Q, W^K, W^V`` are three ``nn.Linear`` as in the paper; when one tensor is
    both key and value (or query, key and value) their projections run as one
    matmul over the stacked weights (:meth:`project_qkv`), the same numbers faster.

    Args:
        d_model: width of the inputs and the output (``D``).
        n_heads: number of heads ``H``; each works in ``Dh = D / H`` dimensions.
        dropout: dropout on the attention weights (an addition to the paper; see
            :func:`scaled_dot_product_attention`).
        n_kv_heads: key/value heads ``Hkv``; ``None`` (the paper's multi-head
            attention) is ``H``. Fewer share each key/value head among ``H / Hkv``
            consecutive query heads (GQA, Ainslie et al. 2023; ``1`` is multi-query
            attention, Shazeer 2019); ``W^K, W^V`` are then ``(D, Hkv * Dh)``.
        rotary_base: ``None`` (the paper) leaves queries and keys as projected;
            a number rotates them by their positions with that base (RoFormer:
            10000). For self-attention: queries and keys count positions from 0
            (``offset`` in :meth:`project_q`, :meth:`project_kv`, :meth:`attend`
            moves a cached decoder's new positions to their absolute index).

    Shape:
        query ``(B, T, D)``, key and value ``(B, S, D)``, mask broadcastable to
        ``(B, H, T, S)``; output ``(B, T, D)``. Projected keys and values are
        ``(B, Hkv, S, Dh)``.

    Attributes:
        attn_weights: the last call's weights ``(B, H, T, S)`` (detached), or
            ``None`` when they were not recorded.
        record_weights: ``None`` (default) records weights in eval mode only, and
            in training mode uses the fused ``F.scaled_dot_product_attention``,
            which gives the same output faster but no weights. ``True`` always
            records, ``False`` never does.
        head_mask: ``None`` (default: the paper, every head counts) or a bool or
            float tensor ``(H,)`` that multiplies each head's output before ``W^O``
            mixes the heads: ``False``/``0`` switches that head off, on every path
            (recorded weights, the fused kernel, cached decoding). The recorded
            weights stay what the head computed: it still looks, its output is dropped.
            Not a parameter or buffer: checkpoints never hold it.
            :func:`transformer_lessons.heads.heads_off` sets it and puts it back.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.1,
        n_kv_heads: int | None = None,
        rotary_base: float | None = None,
    ):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(
                f"d_model ({d_model}) must be divisible by n_heads ({n_heads}): each head gets d_model / n_heads dimensions"
            )
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if isinstance(n_kv_heads, bool) or not isinstance(n_kv_heads, int) or n_kv_heads < 1 or n_heads % n_kv_heads:
            raise ValueError(
                f"n_kv_heads must be a whole number >= 1 that divides n_heads ({n_heads}) or None, got {n_kv_heads!r}"
            )
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads  # paper: = n_heads; fewer is GQA / multi-query (Ainslie et al. 2023; Shazeer 2019)
        self.d_head = d_model // n_heads
        self.rotary_base = rotary_base  # paper: None, positions are added to the embeddings instead (§3.5)
        # W^Q holds all heads side by side: (D, H * Dh) = (D, D); W^K, W^V hold the Hkv shared ones: (D, Hkv * Dh).
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, n_kv_heads * self.d_head)
        self.w_v = nn.Linear(d_model, n_kv_heads * self.d_head)
        self.w_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.record_weights: bool | None = None
        self.attn_weights: torch.Tensor | None = None
        self._head_mask: torch.Tensor | None = None  # paper: None, every head counts

    @property
    def head_mask(self) -> torch.Tensor | None:
        """Each head's weight before ``W^O`` (``(H,)``, bool or float), or ``None``: every head counts in full."""
        return self._head_mask

    @head_mask.setter
    def head_mask(self, mask: torch.Tensor | None) -> None:
        if mask is not None:
            _check_head_mask(mask, self.n_heads)
        self._head_mask = mask

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        return x.view(B, L, -1, self.d_head).transpose(1, 2)  # (B, L, H * Dh) -> (B, H, L, Dh); H or Hkv heads

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if query is key and key is value:  # self-attention: the three projections in one matmul
            return self._attend_heads(*self.project_qkv(query), mask)
        q = self.project_q(query)  # (B, H, T, Dh); projected first, as always, so gradients sum in the same order
        return self._attend_heads(q, *self.project_kv(key, value), mask)

    def _rotate(self, x: torch.Tensor, offset: int) -> torch.Tensor:
        """Queries or keys ``(B, H or Hkv, L, Dh)`` rotated to positions ``offset …`` (RoFormer), or as they are (the paper)."""
        return x if self.rotary_base is None else apply_rotary(x, offset, self.rotary_base)

    def project_q(self, query: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """``Q W^Q``, split into heads (and rotated, with ``rotary_base``, to positions ``offset …``): ``(B, T, D)`` -> ``(B, H, T, Dh)``."""
        return self._rotate(self._split_heads(self.w_q(query)), offset)

    def project_kv(self, key: torch.Tensor, value: torch.Tensor, offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """``K W^K`` and ``V W^V``, split into heads: ``(B, S, D)`` each -> ``(B, Hkv, S, Dh)`` each (``Hkv = H`` in the paper).

        With ``rotary_base`` the keys (not the values) are rotated to positions
        ``offset …``: a cached decoder stores them rotated at their absolute index.

        Kept apart from :meth:`attend` so that a decoder can compute them once and
        reuse them (a key/value cache, :mod:`transformer_lessons.kv_cache`).
        When ``key is value`` (cross-attention reads the encoder's output twice)
        both come from one matmul, as in :meth:`project_qkv`.
        """
        if key is value:
            k, v = self._fused_projection(key, (self.w_k, self.w_v))  # (B, Hkv, S, Dh) each
        else:
            k = self._split_heads(self.w_k(key))  # (B, Hkv, S, Dh)
            v = self._split_heads(self.w_v(value))  # (B, Hkv, S, Dh)
        return self._rotate(k, offset), v

    def project_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x W^Q``, ``x W^K``, ``x W^V`` for self-attention, in one matmul: ``(B, L, D)`` -> ``(B, H, L, Dh)``, 2 x ``(B, Hkv, L, Dh)``.

        The same numbers as ``project_q(x)`` and ``project_kv(x, x)`` (up to float
        rounding: the input's gradient sums over the three in one matmul), for
        one larger matmul instead of three small ones, which is faster, mostly on
        a CPU. ``nn.MultiheadAttention`` does the same with its ``in_proj_weight``;
        here the weights stay the three ``nn.Linear`` of the paper's ``W^Q, W^K, W^V``
        (so checkpoints and the lessons see them), stacked on every call.
        """
        q, k, v = self._fused_projection(x, (self.w_q, self.w_k, self.w_v))
        return self._rotate(q, 0), self._rotate(k, 0), v

    def _fused_projection(self, x: torch.Tensor, linears: tuple[nn.Linear, ...]) -> tuple[torch.Tensor, ...]:
        """``x`` through each of ``linears`` in one ``F.linear``, split into heads: ``(B, L, D)`` -> n x ``(B, H or Hkv, L, Dh)``."""
        weight = torch.cat([linear.weight for linear in linears])  # (H Dh or Hkv Dh, D) each -> (sum, D)
        bias = torch.cat([linear.bias for linear in linears])  # (sum,)
        y = F.linear(x, weight, bias)  # (B, L, D) -> (B, L, sum)
        widths = [linear.out_features for linear in linears]
        return tuple(self._split_heads(part) for part in y.split(widths, dim=-1))  # n x (B, H or Hkv, L, Dh)

    def attend(
        self, query: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, offset: int = 0
    ) -> torch.Tensor:
        """Attention of ``query (B, T, D)`` (its first position at index ``offset``) over already projected ``k, v (B, Hkv, S, Dh)`` -> ``(B, T, D)``."""
        return self._attend_heads(self.project_q(query, offset), k, v, mask)

    def _share_kv_heads(self, x: torch.Tensor) -> torch.Tensor:
        """Each of the ``Hkv`` key/value heads repeated for its ``H / Hkv`` query heads: ``(B, Hkv, S, Dh)`` -> ``(B, H, S, Dh)``.

        Query head ``i`` reads key/value head ``i // (H / Hkv)`` (Ainslie et al. 2023, Fig. 2).
        With ``Hkv = H`` (the paper) nothing is repeated.
        """
        group = self.n_heads // x.size(1)
        return x if group == 1 else x.repeat_interleave(group, dim=1)  # (B, Hkv, S, Dh) -> (B, H, S, Dh)

    def _attend_heads(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        """Attention of projected ``q (B, H, T, Dh)`` over ``k, v (B, Hkv, S, Dh)``, heads merged and mixed by ``W^O`` -> ``(B, T, D)``."""
        B, _, T, _ = q.shape
        k, v = self._share_kv_heads(k), self._share_kv_heads(v)  # (B, H, S, Dh) each
        record = self.record_weights if self.record_weights is not None else not self.training
        if record:
            out, weights = scaled_dot_product_attention(q, k, v, mask, self.dropout)  # (B, H, T, Dh), (B, H, T, S)
            self.attn_weights = weights.detach()
        else:
            if mask is not None:
                _check_mask(mask)  # F.sdpa shares our convention: bool, True = may attend
            p = self.dropout.p if self.training else 0.0
            out = fused_sdpa(q, k, v, mask, p)  # (B, H, T, Dh)
            self.attn_weights = None
        if self._head_mask is not None:  # a switched-off head's output is 0 before W^O mixes the heads
            out = out * self._head_mask.to(out).view(-1, 1, 1)  # (B, H, T, Dh) * (H, 1, 1); bool -> 0/1

        out = out.transpose(1, 2).reshape(B, T, self.d_model)  # (B, H, T, Dh) -> (B, T, D)
        return self.w_o(out)
