"""A key/value cache: decode one new position per step instead of the whole prefix.

Not in the paper, which only says the decoder is auto-regressive (§3, "consuming
the previously generated symbols as additional input when generating the next").
Fed the whole prefix ``y_1 … y_t`` at every step, the decoder recomputes every
earlier position, although causal masking (§3.2.3) means none of them can change:
position ``i`` attends only to positions ``<= i``. So at step ``t`` only the new
position is new, and it needs

* its own query, key and value in each self-attention layer, plus the keys and
  values of the earlier positions, which are kept from the steps before
  (``self_k``, ``self_v``: one more position per step);
* the keys and values of the cross-attention, ``memory W^K`` and ``memory W^V``,
  which depend on the source sentence only: computed once per sentence
  (``cross_k``, ``cross_v``).

A step then costs ``O(t)`` instead of ``O(t²)`` attention and one position of
feed-forward instead of ``t``. The outputs are the recomputed ones up to float
rounding (tests check the logits to 1e-5 and the decoded tokens exactly).

:meth:`~transformer_lessons.model.Transformer.init_cache` builds a cache from the
encoder's output and :meth:`~transformer_lessons.model.Transformer.decode_step`
runs one step. The decoders use them, and this module knows nothing of the model:
``greedy_decode(..., use_cache=True)`` (:mod:`transformer_lessons.decode`) is greedy
decoding written with them, and beam search uses :meth:`KVCache.reorder` to follow
the beams it keeps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class KVCache:
    """Per decoder layer, the keys and values a decoding step reuses.

    Attributes:
        self_k, self_v: per layer ``(B, Hkv, t, Dh)``, the self-attention keys and
            values of the ``t`` positions decoded so far (grow by one per step).
        cross_k, cross_v: per layer ``(B, Hkv, S, Dh)``, the cross-attention keys
            and values of the memory (fixed for the sentence).

    ``Hkv`` is the model's key/value heads: ``H`` in the paper, fewer with
    grouped-query or multi-query attention (``ModelConfig.n_kv_heads``), which
    is what makes the cache ``H / Hkv`` times smaller.
    """

    self_k: list[torch.Tensor]
    self_v: list[torch.Tensor]
    cross_k: list[torch.Tensor]
    cross_v: list[torch.Tensor]

    @property
    def length(self) -> int:
        """``t``, the number of positions cached: the index of the next position."""
        return self.self_k[0].size(2)

    @property
    def batch_size(self) -> int:
        return self.cross_k[0].size(0)

    @property
    def nbytes(self) -> int:
        """The bytes its tensors hold: ``2 · layers · B · Hkv · (t + S) · Dh`` numbers."""
        return sum(
            x.nelement() * x.element_size()
            for tensors in (self.self_k, self.self_v, self.cross_k, self.cross_v)
            for x in tensors
        )

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the new positions' ``k, v (B, Hkv, T, Dh)`` to ``layer``; return all its keys and values ``(B, Hkv, t + T, Dh)``."""
        self.self_k[layer] = torch.cat([self.self_k[layer], k], dim=2)  # (B, Hkv, t, Dh) -> (B, Hkv, t + T, Dh)
        self.self_v[layer] = torch.cat([self.self_v[layer], v], dim=2)  # (B, Hkv, t, Dh) -> (B, Hkv, t + T, Dh)
        return self.self_k[layer], self.self_v[layer]

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index`` (LongTensor ``(B',)``), in that order, in every tensor: ``(B, …) -> (B', …)``.

        Beam search calls it when it picks which prefixes go on (a row may be
        kept twice, another dropped) and when finished sentences leave the batch.
        """
        for tensors in (self.self_k, self.self_v, self.cross_k, self.cross_v):
            for layer, x in enumerate(tensors):
                tensors[layer] = x.index_select(0, index)  # (B, Hkv, L, Dh) -> (B', Hkv, L, Dh)


def step_mask(T: int, t: int, device: torch.device | None = None) -> torch.Tensor | None:
    """Causal mask of ``T`` new positions over ``t`` cached + ``T`` new keys: ``(T, t + T)``, ``True`` = may attend.

    New position ``i`` (absolute index ``t + i``) may attend to keys ``<= t + i``.
    One new position may attend to every key, so ``None`` for ``T == 1``.
    """
    if T == 1:
        return None
    return torch.ones(T, t + T, dtype=torch.bool, device=device).tril(diagonal=t)  # (T, t + T)
