"""Padding and causal masks. The mask convention of the whole course lives here.

Convention: a mask is a ``torch.bool`` tensor and ``True`` means "this query may
attend to this key". Masks broadcast to the attention scores' shape
``(B, H, T, S)``. This matches ``F.scaled_dot_product_attention``; note that
``nn.Transformer`` and ``nn.MultiheadAttention`` use the *opposite* meaning
(``True`` = blocked), so code that calls them inverts the mask with ``~mask``.

Paper: §3.2.3 ("masking out (setting to −∞) all values in the input of the
softmax which correspond to illegal connections").
"""

from __future__ import annotations

import torch


def causal_mask(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Lower-triangular mask: position ``t`` may attend to positions ``0..t``.

    Args:
        size: sequence length ``T``.
        device: where to build the mask.

    Returns:
        BoolTensor of shape ``(T, T)``; ``mask[t, s]`` is ``True`` iff ``s <= t``.
        The diagonal is ``True``: a token may look at itself.
    """
    positions = torch.arange(size, device=device)  # (T,)
    # Query t (rows) may see key s (columns) when s <= t: the lower triangle with its diagonal.
    return positions[:, None] >= positions[None, :]  # (T, 1) >= (1, T) -> (T, T)


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Mask that hides padding keys from every query.

    Args:
        tokens: LongTensor ``(B, S)`` of token ids.
        pad_id: the id of the padding token.

    Returns:
        BoolTensor ``(B, 1, 1, S)``: ``True`` where the key is a real token.
        The two singleton axes broadcast over heads and queries.
    """
    return (tokens != pad_id)[:, None, None, :]  # (B, S) -> (B, 1, 1, S)


def target_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Decoder self-attention mask: no padding keys and no future keys.

    Args:
        tokens: LongTensor ``(B, T)`` of target ids (the decoder's input).
        pad_id: the id of the padding token.

    Returns:
        BoolTensor ``(B, 1, T, T)``, the AND of :func:`padding_mask` and
        :func:`causal_mask`.
    """
    size = tokens.size(-1)
    return padding_mask(tokens, pad_id) & causal_mask(size, tokens.device)  # (B, 1, 1, T) & (T, T) -> (B, 1, T, T)
