"""Label smoothing (paper §5.4, ε_ls = 0.1): the loss a translation model is trained on.

:func:`smoothed_targets` builds the target distribution, for looking at;
:class:`LabelSmoothingLoss` computes the same loss without building it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def smoothed_targets(target: torch.Tensor, vocab_size: int, pad_id: int, smoothing: float = 0.1) -> torch.Tensor:
    """The distribution the model is trained to predict at each position.

    Paper §5.4: "we employed label smoothing of value ε_ls = 0.1. This hurts
    perplexity, as the model learns to be more unsure, but improves accuracy
    and BLEU score." The true token gets ``1 - ε``; the other ``ε`` is spread
    evenly over the ``V - 2`` tokens that are neither the true one nor
    ``<pad>`` (the model must never predict padding, so it gets 0). A position
    whose target *is* padding is not a real position: its row is all zeros, so
    it adds nothing to the loss.

    This differs slightly from ``F.cross_entropy(..., label_smoothing=ε)``,
    which gives ``ε / V`` to *every* class, the true one and ``<pad>`` included
    (true token ``1 - ε + ε/V``). With ``V`` in the thousands the two are
    almost the same; ours is the Annotated Transformer's.

    Args:
        target: LongTensor ``(...)`` of token ids, e.g. ``(B, T)``.
        vocab_size: ``V``.
        pad_id: id of ``<pad>``.
        smoothing: ``ε``, between 0 and 1.

    Returns:
        FloatTensor ``(..., V)``; each non-pad row sums to 1.
    """
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    if vocab_size < 3:
        raise ValueError(
            f"label smoothing needs at least 3 classes (the true one, <pad> and another), got vocab_size={vocab_size}"
        )
    dist = torch.full((*target.shape, vocab_size), smoothing / (vocab_size - 2), device=target.device)  # (..., V)
    dist.scatter_(-1, target.unsqueeze(-1), 1.0 - smoothing)  # the true token
    dist[..., pad_id] = 0.0  # never put mass on <pad>
    return dist.masked_fill_((target == pad_id).unsqueeze(-1), 0.0)  # padding positions do not count


class LabelSmoothingLoss(nn.Module):
    """Cross-entropy against :func:`smoothed_targets`, averaged over real (non-pad) tokens.

    ``loss = -Σ_v q_v log p_v`` with ``p = softmax(logits)`` and ``q`` the
    smoothed targets. It is computed from ``log_softmax`` (never ``log`` of a
    softmax, which is ``log 0 = -inf`` for a confident model) and without
    building ``q`` (which would be ``(B, T, V)`` floats): because ``q`` is
    uniform off the true token,
    ``-Σ q log p = -(1-ε) log p_y - ε/(V-2) (Σ_v log p_v - log p_y - log p_pad)``.

    The cross-entropy equals the KL divergence ``KL(q ‖ p)`` that the Annotated
    Transformer minimises plus the entropy of ``q``, a constant: the gradients
    are the same, but this loss is never below that constant (about 1.25 for
    ``ε = 0.1`` and ``V = 10,000``), not 0. With ``smoothing=0`` it is exactly
    ``F.cross_entropy(..., ignore_index=pad_id)``.

    Args:
        vocab_size: ``V``.
        pad_id: id of ``<pad>`` (ignored as a target, never predicted).
        smoothing: ``ε`` (paper: 0.1).

    Shape:
        logits ``(B, T, V)`` (or ``(N, V)``), target ``(B, T)`` (or ``(N,)``) -> scalar.
    """

    def __init__(self, vocab_size: int, pad_id: int, smoothing: float = 0.1):
        super().__init__()
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
        self.vocab_size = vocab_size
        self.pad_id = pad_id
        self.smoothing = smoothing

    def forward(self, logits: torch.Tensor, target: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        """Args: ``reduction`` is ``"mean"`` (per real token), ``"sum"`` or ``"none"`` (per position, 0 at padding)."""
        if logits.size(-1) != self.vocab_size:
            raise ValueError(
                f"logits have {logits.size(-1)} classes but the loss was built for vocab_size={self.vocab_size}"
            )
        # float32 even under bf16 autocast: the sum over 10k classes needs the precision.
        log_p = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
        true = log_p.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (B, T): log p of the true token
        eps = self.smoothing
        loss = -(1.0 - eps) * true  # (B, T)
        if eps > 0:
            # Σ log p over every token but <pad>, summed around the <pad> column rather than subtracting it:
            # a model that rules <pad> out completely has log p_pad = -inf, and sum - (-inf) would be NaN.
            pad = self.pad_id
            not_pad = log_p[..., :pad].sum(-1) + log_p[..., pad + 1 :].sum(-1)  # (B, T)
            others = not_pad - true  # (B, T): Σ log p over the other non-pad tokens
            loss = loss - eps / (self.vocab_size - 2) * others
        real = target != self.pad_id  # (B, T)
        loss = loss.masked_fill(~real, 0.0)
        if reduction == "none":
            return loss
        if reduction == "sum":
            return loss.sum()
        if reduction == "mean":
            return loss.sum() / real.sum().clamp(min=1)
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
