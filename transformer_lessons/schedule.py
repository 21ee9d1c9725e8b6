"""The learning-rate schedule of the paper (§5.3, Eq. 3): a linear warm-up, then 1/sqrt(step).

:func:`noam_rate` is the formula, the only one in the course; :func:`noam_scheduler`
applies it to an optimizer. (The name "Noam" is the Annotated Transformer's, after
Noam Shazeer.)
"""

from __future__ import annotations

import torch


def noam_rate(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """The paper's learning rate at training step ``step`` (Eq. 3, §5.3).

    ``lrate = factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)``:
    it grows linearly for ``warmup`` steps, peaks at step ``warmup`` (the two
    terms are equal there), then decays as ``1 / sqrt(step)``. The paper uses
    ``warmup = 4000`` and ``factor = 1``; ``factor`` (the Annotated
    Transformer's name) scales the whole curve.

    Steps count from 1 (the first update). ``step = 0`` is treated as 1 rather
    than returning 0 or dividing by zero.
    """
    if d_model <= 0 or warmup <= 0:
        raise ValueError(f"d_model and warmup must be positive, got d_model={d_model}, warmup={warmup}")
    step = max(int(step), 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def noam_scheduler(
    optimizer: torch.optim.Optimizer, d_model: int, warmup: int, factor: float = 1.0
) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` that sets the learning rate to :func:`noam_rate` at every update.

    Call ``scheduler.step()`` after each ``optimizer.step()``. The optimizer's
    own ``lr`` is replaced: every group's base rate becomes 1, so the lambda's
    value *is* the learning rate. The ``k``-th update (k = 1, 2, …) uses
    ``noam_rate(k)``: ``LambdaLR`` calls the lambda with 0 before the first update.
    """
    for group in optimizer.param_groups:
        group["lr"] = 1.0
        group["initial_lr"] = 1.0
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: noam_rate(i + 1, d_model, warmup, factor))
