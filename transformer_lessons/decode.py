"""Turning a trained model into output sequences: greedy decoding.

Paper: §6.1 uses beam search (beam 4, length penalty α = 0.6); greedy decoding
is beam search with a beam of one and the fastest way to see what a model learned.
"""

from __future__ import annotations

import torch

from transformer_lessons.masks import causal_mask
from transformer_lessons.model import Transformer


@torch.no_grad()
def greedy_decode(
    model: Transformer,
    src: torch.Tensor,
    src_mask: torch.Tensor | None,
    max_len: int,
    bos_id: int,
    eos_id: int | None = None,
    pad_id: int | None = None,
) -> torch.Tensor:
    """Generate a batch of sequences, one most-likely token at a time.

    The source is encoded once; each step feeds everything generated so far to
    the decoder and appends the argmax of the last position's logits. A
    sequence that has produced ``eos_id`` is finished: it receives ``pad_id``
    (or ``eos_id`` again when no pad id is given) from then on, and the loop
    stops early when every sequence is finished.

    Args:
        model: the Transformer (put it in eval mode first).
        src: source ids ``(B, S)``.
        src_mask: ``(B, 1, 1, S)`` padding mask, or ``None``.
        max_len: the most tokens to generate after ``<bos>``.
        bos_id: id the decoder input starts with.
        eos_id: id that ends a sequence, or ``None`` to always run ``max_len`` steps.
        pad_id: id written after a sequence's ``<eos>``.

    Returns:
        LongTensor ``(B, 1 + L)`` with ``L <= max_len``, starting with ``bos_id``.
    """
    memory = model.encode(src, src_mask)  # (B, S, D)
    batch = src.size(0)
    ys = torch.full((batch, 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
    filler = pad_id if pad_id is not None else eos_id
    for _ in range(max_len):
        # Every row has the same length here, so the causal mask alone suffices.
        logits = model.decode(memory, src_mask, ys, causal_mask(ys.size(1), src.device))  # (B, t, V)
        next_token = logits[:, -1].argmax(dim=-1)  # (B,)
        if eos_id is not None:
            next_token = next_token.masked_fill(finished, filler)
            finished |= next_token == eos_id
        ys = torch.cat([ys, next_token[:, None]], dim=1)  # (B, t) -> (B, t + 1)
        if eos_id is not None and bool(finished.all()):
            break
    return ys
