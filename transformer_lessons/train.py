"""One training step: what every training loop of the course does with a batch.

Read it top to bottom: :func:`train_step` is one update (forward with teacher forcing,
the label-smoothed loss, backward, gradient clipping, Adam's update and the schedule's),
and :func:`make_optimizer` is Adam with the paper's settings (§5.3). The copy task
(:mod:`.copy_task`), the checks, the benchmark and a whole run (:mod:`.run`) all train
with these two.

The pieces they use live in the files named after them: the loss (:mod:`.loss`), the
schedule (:mod:`.schedule`), the settings (:mod:`.config`), devices and precision
(:mod:`.hardware`). A whole run, with epochs, validation, checkpoints, resuming and the
final test, is :mod:`.run`.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import nn

from transformer_lessons.config import TrainConfig
from transformer_lessons.errors import DivergedError


def train_step(
    model: nn.Module,
    batch,
    criterion: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler=None,
    clip_norm: float | None = None,
    autocast=nullcontext,
) -> torch.Tensor:
    """One update of ``model`` on ``batch``: the training step of every loop in the course.

    Forward (teacher forcing: the decoder reads ``batch.tgt_in`` and is scored on
    ``batch.tgt_out``), the loss, backward, gradient clipping, the optimizer's
    update and the schedule's. ``batch`` is a :class:`~transformer_lessons.data.Batch`
    or anything with its ``src, tgt_in, tgt_out, src_mask, tgt_mask``.

    A NaN or infinite loss (or gradient norm) raises :class:`DivergedError`
    *before* the optimizer changes a weight, so the model stays as it was.

    Returns:
        The loss, a detached 0-dim tensor on the model's device.
    """
    model.train()
    with autocast():
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (B, T, V)
        loss = criterion(logits, batch.tgt_out)
    if not torch.isfinite(loss):
        raise DivergedError(f"the loss is {loss.item()}")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip_norm:
        norm = nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        if not torch.isfinite(norm):
            optimizer.zero_grad(set_to_none=True)
            raise DivergedError(f"the gradient norm is {norm.item()} (the loss was {loss.item():.4g})")
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.detach()


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """Adam with the paper's betas and ε (§5.3); AdamW on the matrices only if ``config.weight_decay > 0``.

    The rate is 1: :func:`~transformer_lessons.schedule.noam_scheduler` sets the real one at every update.
    """
    if config.weight_decay > 0:
        # Decay matrices only: shrinking biases and LayerNorm gains towards 0 is not regularisation.
        decay = [p for p in model.parameters() if p.dim() >= 2]
        rest = [p for p in model.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": rest, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=1.0, betas=config.betas, eps=config.eps)
    return torch.optim.Adam(model.parameters(), lr=1.0, betas=config.betas, eps=config.eps)


def adam_implementations() -> dict[str, dict]:
    """PyTorch's three Adam implementations as keyword arguments: a Python loop over the tensors, ``foreach``
    (one call for all tensors of a kind) and ``fused`` (one kernel for the whole update; CPUs since PyTorch 2.4).
    The same update, each summing in its own order; ``benchmarks/bench_profile.py --compare-adam`` times them."""
    return {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


__all__ = ["adam_implementations", "make_optimizer", "train_step"]
