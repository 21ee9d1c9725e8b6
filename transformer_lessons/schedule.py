"""The learning-rate schedules: the paper's (§5.3, Eq. 3), and one that ends with the run's budget.

:func:`noam_rate` is the paper's formula: a linear warm-up, then 1/sqrt(step); :func:`noam_scheduler`
applies it to an optimizer. (The name "Noam" is the Annotated Transformer's, after Noam Shazeer.)

:func:`to_end_rate` is the paper's warm-up ramp times a straight line that falls from 1 to 0 as
the run's budget is spent (its time limit, or its epochs), so the rate reaches zero when the run
ends. The paper's curve never ends (a run stopped after ten minutes stops near its peak rate); a
run that knows its end can anneal into it, which is what a short run on a laptop needs (the
``laptop`` preset). Bergsma et al. (ICLR 2025, "Straight to Zero: Why Linearly Decaying the
Learning Rate to Zero Works Best for LLMs") found a linear decay to zero better than the usual
cosine decay to a tenth for language models trained for a known number of tokens.
"""

from __future__ import annotations

from typing import Callable

import torch


def noam_rate(step: int, d_model: int, warmup: int, factor: float = 1.0, ramp: bool = True) -> float:
    """The paper's learning rate at training step ``step`` (Eq. 3, §5.3).

    ``lrate = factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)``:
    it grows linearly for ``warmup`` steps, peaks at step ``warmup`` (the two
    terms are equal there), then decays as ``1 / sqrt(step)``. The paper uses
    ``warmup = 4000`` and ``factor = 1``; ``factor`` (the Annotated
    Transformer's name) scales the whole curve.

    Steps count from 1 (the first update). ``step = 0`` is treated as 1 rather
    than returning 0 or dividing by zero.

    ``ramp=False`` removes the warm-up and nothing else: the peak rate from the first
    update until step ``warmup``, then the same decay (the ``noam_no_ramp`` schedule of
    notebook 14's lab, the control that tells warm-up's effect from a higher rate's: with
    ``warmup=1`` instead, the first updates would run at up to ``sqrt(warmup)`` times the peak).
    """
    if d_model <= 0 or warmup <= 0:
        raise ValueError(f"d_model and warmup must be positive, got d_model={d_model}, warmup={warmup}")
    step = max(int(step), 1)
    rising = step * warmup**-1.5 if ramp else warmup**-0.5
    return factor * d_model**-0.5 * min(step**-0.5, rising)


def noam_scheduler(
    optimizer: torch.optim.Optimizer, d_model: int, warmup: int, factor: float = 1.0, ramp: bool = True
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
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: noam_rate(i + 1, d_model, warmup, factor, ramp))


def to_end_rate(step: int, spent: float, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """The rate at update ``step`` when the fraction ``spent`` (0 to 1) of the run's budget is used up.

    ``factor · (d_model · warmup)^-0.5 · min(step / warmup, 1) · (1 - spent)``: the ramp of
    :func:`noam_rate`'s warm-up, up to its peak (so ``factor`` means what it means there), times
    ``1 - spent``, which falls in a straight line from 1 to 0 over the budget. The two overlap: the
    line is already below 1 while the ramp rises, so the peak itself is reached only by a run whose
    warm-up takes no part of its budget (about 0.8 of it after 300 updates of a 10-minute laptop
    run). ``spent`` is clipped to [0, 1].
    """
    if d_model <= 0 or warmup <= 0:
        raise ValueError(f"d_model and warmup must be positive, got d_model={d_model}, warmup={warmup}")
    step = max(int(step), 1)
    left = 1.0 - min(max(float(spent), 0.0), 1.0)
    return factor * (d_model * warmup) ** -0.5 * min(step / warmup, 1.0) * left


def to_end_scheduler(
    optimizer: torch.optim.Optimizer, d_model: int, warmup: int, factor: float, spent: Callable[[], float]
) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` that sets the rate to :func:`to_end_rate`, asking ``spent()`` for the budget used so far.

    As :func:`noam_scheduler`, every group's base rate becomes 1. ``spent`` is read at every
    update (a run's time limit is measured while it trains), so the curve is not a function of the
    step alone: on a slower machine the same run warms up over the same steps and ends at zero all the same.
    """
    for group in optimizer.param_groups:
        group["lr"] = 1.0
        group["initial_lr"] = 1.0
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: to_end_rate(i + 1, spent(), d_model, warmup, factor))
