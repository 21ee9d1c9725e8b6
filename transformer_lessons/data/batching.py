"""Batches: id pairs padded into tensors with their masks, grouped by length.

:func:`make_batch` turns ``(source ids, target ids)`` pairs into a
:class:`Batch`: the source ends in ``<eos>``, the decoder reads the target
shifted right (``<bos>`` first) and predicts it shifted left (``<eos>`` last),
rows are right-padded with ``<pad>``, and the masks of
:mod:`transformer_lessons.masks` say which positions may be attended to.
:class:`TokenBatcher` groups pairs of similar length so that each batch holds
about ``max_tokens`` tokens.

Paper: §5.1 ("Sentence pairs were batched together by approximate sequence
length").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import torch

from transformer_lessons.masks import padding_mask, target_mask

IdPair = tuple[list[int], list[int]]


@dataclass
class Batch:
    """One training batch, batch-first.

    Teacher forcing (paper §3.1, "shifted right"): the decoder reads
    ``tgt_in = <bos> y1 … yn`` and must predict ``tgt_out = y1 … yn <eos>``,
    one position ahead.

    Shape:
        src ``(B, S)``: source ids then ``<eos>``, right-padded with ``pad_id``.
        tgt_in ``(B, T)``: ``<bos>`` then target ids, padded.
        tgt_out ``(B, T)``: target ids then ``<eos>``, padded.
        src_mask ``(B, 1, 1, S)`` and tgt_mask ``(B, 1, T, T)``: bool, True = may attend.
    """

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    src_mask: torch.Tensor
    tgt_mask: torch.Tensor
    n_tokens: int  # real (non-pad) tokens in tgt_out: what the loss is averaged over
    indices: list[int] | None = None  # positions of these pairs in the batcher's input list

    def __len__(self) -> int:
        return self.src.size(0)

    def to(self, device: torch.device | str) -> "Batch":
        """A copy on ``device``; copies from pinned memory are asynchronous."""

        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, non_blocking=t.is_pinned())

        return Batch(
            move(self.src),
            move(self.tgt_in),
            move(self.tgt_out),
            move(self.src_mask),
            move(self.tgt_mask),
            self.n_tokens,
            self.indices,
        )

    def pin_memory(self) -> "Batch":
        """A copy in page-locked memory (CUDA only), so :meth:`to` overlaps with compute."""
        return Batch(
            self.src.pin_memory(),
            self.tgt_in.pin_memory(),
            self.tgt_out.pin_memory(),
            self.src_mask.pin_memory(),
            self.tgt_mask.pin_memory(),
            self.n_tokens,
            self.indices,
        )


def _pad(rows: list[list[int]], pad_id: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), pad_id, dtype=torch.long)  # (B, L)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out


def make_batch(pairs: Sequence[IdPair], pad_id: int, bos_id: int, eos_id: int) -> Batch:
    """Pad ``(source ids, target ids)`` pairs (no specials yet) into a :class:`Batch`."""
    if not pairs:
        raise ValueError("make_batch needs at least one pair")
    src = _pad([[*s, eos_id] for s, _ in pairs], pad_id)  # (B, S)
    tgt_in = _pad([[bos_id, *t] for _, t in pairs], pad_id)  # (B, T)
    tgt_out = _pad([[*t, eos_id] for _, t in pairs], pad_id)  # (B, T)
    return Batch(
        src=src,
        tgt_in=tgt_in,
        tgt_out=tgt_out,
        src_mask=padding_mask(src, pad_id),  # (B, 1, 1, S)
        tgt_mask=target_mask(tgt_in, pad_id),  # (B, 1, T, T)
        n_tokens=int((tgt_out != pad_id).sum()),
    )


class TokenBatcher:
    """Batches of similar-length pairs, each holding at most ``max_tokens`` tokens.

    The paper (§5.1) batches "by approximate sequence length" with about 25,000
    source and 25,000 target tokens per batch. Grouping similar lengths wastes
    little on padding; counting tokens instead of sentences keeps every batch
    about the same cost, whether its sentences are short or long.

    Pairs are sorted by (source length, target length) and cut into batches
    greedily while ``B * max(S, T) <= max_tokens`` (``S``, ``T`` the padded
    lengths with ``<eos>``/``<bos>``). A single pair longer than that still
    gets a batch of its own. With ``shuffle``, each epoch the order of pairs of
    equal length and the order of batches are shuffled by a generator seeded
    with ``seed + epoch``; the epoch advances after every pass (or set it with
    :meth:`set_epoch`), so runs are reproducible and epochs differ.

    Args:
        pairs: ``(source ids, target ids)`` without specials.
        max_tokens: budget of padded tokens per batch (per side).
        pad_id, bos_id, eos_id: the special ids (:class:`Vocab` has them).
        shuffle: ``False`` yields batches in length order every time (for evaluation).
        seed: the base of the shuffling seed.

    Yields:
        :class:`Batch` with ``indices`` set to the pairs' positions in ``pairs``.
    """

    def __init__(
        self,
        pairs: Sequence[IdPair],
        max_tokens: int,
        pad_id: int,
        bos_id: int,
        eos_id: int,
        shuffle: bool = True,
        seed: int = 0,
    ):
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        self.pairs = pairs
        self.max_tokens = max_tokens
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self._lengths = [(len(s) + 1, len(t) + 1) for s, t in pairs]  # with <eos> / <bos>
        order = sorted(range(len(pairs)), key=self._lengths.__getitem__)
        # Batch boundaries depend only on the sorted lengths, which do not change
        # when equal-length pairs swap places: the same slices serve every epoch.
        self._bounds: list[tuple[int, int]] = []
        start, width = 0, 0
        for pos, i in enumerate(order):
            width_with = max(width, *self._lengths[i])
            if pos > start and (pos - start + 1) * width_with > max_tokens:
                self._bounds.append((start, pos))
                start, width_with = pos, max(self._lengths[i])
            width = width_with
        if order:
            self._bounds.append((start, len(order)))

    def set_epoch(self, epoch: int) -> None:
        """Use the shuffle of epoch ``epoch`` for the next pass."""
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self._bounds)

    def batch_indices(self) -> list[list[int]]:
        """The pair indices of each batch of the next pass (does not advance the epoch)."""
        n = len(self.pairs)
        if not self.shuffle:
            order = sorted(range(n), key=self._lengths.__getitem__)
            return [order[a:b] for a, b in self._bounds]
        gen = torch.Generator().manual_seed(self.seed + self.epoch)
        perm = torch.randperm(n, generator=gen).tolist()
        order = sorted(perm, key=self._lengths.__getitem__)  # stable: random order within equal lengths
        batches = [order[a:b] for a, b in self._bounds]
        return [batches[j] for j in torch.randperm(len(batches), generator=gen).tolist()]

    def __iter__(self) -> Iterator[Batch]:
        batches = self.batch_indices()
        self.epoch += 1
        for idx in batches:
            batch = make_batch([self.pairs[i] for i in idx], self.pad_id, self.bos_id, self.eos_id)
            batch.indices = idx
            yield batch
