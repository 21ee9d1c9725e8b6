"""Rotary position embeddings: positions as rotations of the queries and keys.

Not in the paper, which adds a position vector to each embedding (§3.5). Su et
al. (2021), "RoFormer: Enhanced Transformer with Rotary Position Embedding"
(§3.2, Eq. 13-15 and 34), rotate instead: in each self-attention head the query
and the key of position ``m`` are cut into pairs of dimensions
``(x_{2i}, x_{2i+1})``, and pair ``i`` is turned by the angle ``m·θ_i``, with
``θ_i = base^(-2i/Dh)`` and base 10000, the sinusoid's wavelengths (§3.5) per head:

    [x_{2i}, x_{2i+1}] -> [x_{2i} cos mθ_i - x_{2i+1} sin mθ_i,  x_{2i} sin mθ_i + x_{2i+1} cos mθ_i]

Read as complex numbers ``z_i = x_{2i} + i·x_{2i+1}``, that is ``z_i·e^{i m θ_i}``.
A rotation keeps lengths, and the rotated scores depend on the positions only
through their difference: ``Re(q_i e^{imθ} · conj(k_i e^{inθ})) = Re(q_i conj(k_i) e^{i(m-n)θ})``.
So attention sees relative positions, although each vector is rotated by its
absolute one, which is what lets a key/value cache keep keys rotated once, at
their own position. Nothing is added to the embeddings, and no table limits the
length (``max_len`` does not apply): the angles are computed for the positions asked.

:class:`~transformer_lessons.attention.MultiHeadAttention` applies :func:`apply_rotary`
when built with ``rotary_base``; the model does so for the self-attention of the
encoder and the decoder (``ModelConfig.positional="rotary"``), not for
cross-attention, whose queries (target positions) and keys (source positions)
count positions in two different sentences.
"""

from __future__ import annotations

import torch


def rotary_angles(
    start: int, length: int, d_head: int, base: float = 10000.0, device: torch.device | None = None
) -> torch.Tensor:
    """``m·θ_i`` for positions ``m = start … start + length - 1`` and pairs ``i < Dh / 2`` (RoFormer Eq. 15).

    Returns:
        FloatTensor ``(length, Dh / 2)``, in float32 whatever the model's dtype.
    """
    if d_head % 2:
        raise ValueError(f"rotary positions turn pairs of dimensions: d_head must be even, got {d_head}")
    position = torch.arange(start, start + length, dtype=torch.float32, device=device)  # (L,)
    theta = base ** (-torch.arange(0, d_head, 2, dtype=torch.float32, device=device) / d_head)  # (Dh/2,)
    return position[:, None] * theta  # (L, 1) * (Dh/2,) -> (L, Dh/2)


def apply_rotary(x: torch.Tensor, start: int = 0, base: float = 10000.0) -> torch.Tensor:
    """Rotate each pair ``(x_{2i}, x_{2i+1})`` of position ``start + l`` by ``(start + l)·θ_i`` (RoFormer Eq. 34).

    ``start``: the absolute position of ``x``'s first row (a cached decoder passes
    the number of positions already cached).

    Shape:
        ``(..., L, Dh)`` -> ``(..., L, Dh)``: queries or keys, split into heads.
    """
    L, Dh = x.shape[-2:]
    angle = rotary_angles(start, L, Dh, base, x.device)  # (L, Dh/2)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    pairs = x.unflatten(-1, (Dh // 2, 2))  # (..., L, Dh) -> (..., L, Dh/2, 2)
    even, odd = pairs[..., 0], pairs[..., 1]  # (..., L, Dh/2) each
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (..., L, Dh/2, 2)
    return rotated.flatten(-2)  # (..., L, Dh)
