"""Check for one training step (paper §5.3, §5.4): forward, loss, backward, the optimizer and the schedule.

The reference is the course's own :func:`transformer_lessons.train.train_step`. The
check runs the learner's step and the course's on two copies of one small Transformer
with dropout, and watches each ``optimizer.step()`` through PyTorch's step pre-hook.
The label-smoothed loss it trains with is checked in :mod:`.loss`.
"""

from __future__ import annotations

import copy
import math
import numbers
from typing import Any, Callable

import torch
from torch import nn

from transformer_lessons.checks.common import (
    NO_RETURN,
    ExerciseError,
    call_answer,
    all_close,
    exercise,
    known_bug,
)
from transformer_lessons.config import ModelConfig
from transformer_lessons.data import Batch, make_batch
from transformer_lessons.loss import LabelSmoothingLoss
from transformer_lessons.model import Transformer
from transformer_lessons.schedule import noam_rate, noam_scheduler
from transformer_lessons.train import train_step

# The toy task of this check: reverse a sequence. Its ids are not the course's (<pad> 1, <bos> 2, <eos> 3).
_TS_PAD, _TS_BOS, _TS_EOS, _TS_V = 0, 1, 2, 11
_TS_STEPS = 3
_TS_CONFIG = ModelConfig(
    n_layers=1, d_model=16, n_heads=2, d_ff=32, dropout=0.3, max_len=16, tie_embeddings=False
)  # dropout on: train mode shows
_TS_WARMUP = 4  # rates noam_rate(1..4) = 0.031, 0.063, 0.094, 0.125 (d_model = 16): every update counts


def _ts_batches() -> list[Batch]:
    """Three padded batches of six reversal pairs: src = s <eos>, tgt_in = <bos> reversed(s), tgt_out = reversed(s) <eos>."""
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(_TS_STEPS):
        lengths = torch.randint(2, 7, (6,), generator=g).tolist()
        symbols = [torch.randint(3, _TS_V, (n,), generator=g).tolist() for n in lengths]
        batches.append(make_batch([(s, s[::-1]) for s in symbols], _TS_PAD, _TS_BOS, _TS_EOS))
    return batches


class _Trainer:
    """A model, Adam, the Noam schedule and the loss, recording the gradients and rate at each optimizer.step()."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        self.scheduler = noam_scheduler(self.optimizer, _TS_CONFIG.d_model, _TS_WARMUP)
        self.criterion = LabelSmoothingLoss(_TS_V, _TS_PAD, 0.1)
        self.steps: list[tuple[torch.Tensor | None, float]] = []  # (gradients, rate) at each optimizer.step()
        self.optimizer.register_step_pre_hook(lambda optimizer, args, kwargs: self._record())

    def _record(self) -> None:
        grads = [p.grad for p in self.model.parameters()]
        flat = (
            None
            if all(g is None for g in grads)
            else torch.cat(
                [
                    (g if g is not None else torch.zeros_like(p)).flatten()
                    for g, p in zip(grads, self.model.parameters())
                ]
            )
        )
        self.steps.append((flat, self.optimizer.param_groups[0]["lr"]))

    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]


def _loss_value(value: Any) -> float:
    """The learner's returned loss as a float: a float, or a 0-dim tensor without a graph."""
    if value is None:
        raise ExerciseError(NO_RETURN)
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ExerciseError(f"return the loss, one number; got a tensor of shape {tuple(value.shape)}")
        if value.requires_grad:
            raise known_bug(
                "you return the loss tensor with its graph: whoever keeps it (a list of losses) keeps every "
                "activation of the step alive. Return a float[[: loss.item() (or loss.detach())]]"
            )
        return float(value.item())
    if isinstance(value, numbers.Real):
        return float(value)
    raise ExerciseError(f"return the loss as a float, got {type(value).__name__}[[: return loss.item()]]")


def _ts_teacher_forcing(model: nn.Module, batch: Batch, criterion: nn.Module, seed: int, got: float) -> None:
    """The loss of this step differs: name the forward-pass bug it matches (same weights, same dropout masks)."""
    variants = [
        (
            "the decoder reads batch.tgt_out: it is the answer. Teacher forcing feeds batch.tgt_in (<bos> y1 ... yn) "
            "and scores against batch.tgt_out (y1 ... yn <eos>)",
            (batch.tgt_out, batch.src_mask, batch.tgt_mask),
            batch.tgt_out,
        ),
        (
            "the loss compares with batch.tgt_in, the decoder's own input: score against batch.tgt_out, the input "
            "shifted by one position",
            (batch.tgt_in, batch.src_mask, batch.tgt_mask),
            batch.tgt_in,
        ),
        (
            "no tgt_mask: the decoder sees the future words it must predict. Pass batch.tgt_mask",
            (batch.tgt_in, batch.src_mask, None),
            batch.tgt_out,
        ),
        (
            "no src_mask: the queries attend to the padding of the shorter sources. Pass batch.src_mask",
            (batch.tgt_in, None, batch.tgt_mask),
            batch.tgt_out,
        ),
    ]
    for hint, (tgt, src_mask, tgt_mask), scored in variants:
        twin = copy.deepcopy(model).train()
        torch.manual_seed(seed)  # the dropout masks of the step
        if math.isclose(
            criterion(twin(batch.src, tgt, src_mask, tgt_mask), scored).item(), got, rel_tol=1e-4, abs_tol=1e-5
        ):
            raise known_bug(hint)


def _ts_gradients(learner: _Trainer, reference: _Trainer, k: int) -> None:
    """The gradients at the k-th optimizer.step() (k from 1) must be the reference's."""
    got, want = learner.steps[-1][0], reference.steps[-1][0]
    if got is None or not bool(got.abs().sum() > 0):
        raise known_bug(
            f"at update {k} optimizer.step() found no gradients, so it changed nothing: it ran before "
            "loss.backward(), or optimizer.zero_grad() ran between them. The order is "
            "optimizer.zero_grad(), loss.backward(), optimizer.step()"
        )
    if all_close(got, want):
        return
    if k > 1 and all_close(got, want + reference.steps[-2][0]):
        raise known_bug(
            f"at update {k} the gradients are this batch's plus the previous one's: backward() adds to "
            ".grad. Call optimizer.zero_grad() in every step, before loss.backward()"
        )
    if torch.cosine_similarity(got, want, dim=0) > 0.9999 and got.norm() < want.norm():
        raise known_bug(
            "your gradients point the right way but were scaled down (clipped?): this step does no gradient clipping"
        )
    raise ExerciseError(
        f"at update {k} the gradients differ from train.train_step's: compute the loss of the "
        "teacher-forced forward pass, then loss.backward()"
    )


def _ts_rates(learner: _Trainer, k: int) -> None:
    """optimizer.step() used noam_rate(k) and the scheduler then moved on to noam_rate(k + 1)."""
    used, after = learner.steps[-1][1], learner.lr()
    rate = [noam_rate(i, _TS_CONFIG.d_model, _TS_WARMUP) for i in range(k + 3)]
    if math.isclose(used, rate[k + 1]):
        raise known_bug(
            f"update {k} used the rate of update {k + 1}: scheduler.step() ran before optimizer.step(). "
            "Step the optimizer first, then the scheduler"
        )
    if not math.isclose(used, rate[k]):
        raise ExerciseError(
            f"update {k} used the learning rate {used:.4g}, not noam_rate({k}) = {rate[k]:.4g}: "
            "leave the rate to the scheduler"
        )
    if math.isclose(after, rate[k]):
        raise known_bug(
            "the learning rate never changes: call scheduler.step() after optimizer.step(), once per update"
        )
    if not math.isclose(after, rate[k + 1]):
        raise ExerciseError(
            f"after update {k} the rate is {after:.4g}, not noam_rate({k + 1}) = {rate[k + 1]:.4g}: "
            "call scheduler.step() exactly once per update"
        )


@exercise(
    "train_step",
    "switch the model to training mode, compute the teacher-forced loss (the decoder reads batch.tgt_in, the loss "
    "scores batch.tgt_out), then zero the gradients, backward, step the optimizer, then the scheduler; return the loss "
    "as a float",
)
def check_train_step(fn: Callable[..., float]) -> str:
    """Check one training step (what ``train.train_step`` does, without clipping and autocast).

    Expected signature: ``fn(model, batch, criterion, optimizer, scheduler) -> float``:
    switch the model to training mode (dropout on), run the teacher-forced forward pass
    ``model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)``, score it with
    ``criterion(logits, batch.tgt_out)``, then ``optimizer.zero_grad()``,
    ``loss.backward()``, ``optimizer.step()``, ``scheduler.step()``, and return the loss
    as a float (``loss.item()``; a 0-dim tensor without a graph, like ``loss.detach()``,
    is accepted too).

    The check trains two copies of a small Transformer with dropout 0.3 for three steps,
    one with ``fn`` and one with ``train.train_step``, with Adam, the Noam schedule and
    the same dropout masks, and compares the returned loss, the gradients and the rate
    each ``optimizer.step()`` sees, and the rate after the step.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (no zero_grad, optimizer.step() before
            backward(), the scheduler not stepped or stepped first, tgt_out fed to the
            decoder or tgt_in scored, masks missing, eval mode, the loss returned with
            its graph).
    """
    torch.manual_seed(0)
    model = Transformer(_TS_CONFIG, _TS_V, _TS_V)
    learner, reference = _Trainer(copy.deepcopy(model)), _Trainer(copy.deepcopy(model))
    for k, batch in enumerate(_ts_batches(), start=1):
        learner.model.eval()  # the step itself must switch dropout on
        reference.model.eval()
        before = copy.deepcopy(reference.model)
        torch.manual_seed(100 + k)
        with torch.enable_grad():
            got = _loss_value(
                call_answer(
                    fn,
                    learner.model,
                    batch,
                    learner.criterion,
                    learner.optimizer,
                    learner.scheduler,
                    hint="batch has .src, .tgt_in, .tgt_out, .src_mask, .tgt_mask",
                )
            )
            torch.manual_seed(100 + k)
            want = train_step(
                reference.model, batch, reference.criterion, reference.optimizer, reference.scheduler
            ).item()
        if not learner.model.training:
            raise known_bug(
                "the model is in eval mode during your step, so dropout is off: call model.train() "
                "first (an evaluation may have left it in eval mode)"
            )
        if not math.isclose(got, want, rel_tol=1e-4, abs_tol=1e-5):
            _ts_teacher_forcing(before, batch, reference.criterion, 100 + k, got)
            raise ExerciseError(
                f"step {k} returned the loss {got:.5g}, expected {want:.5g}: return the loss of the "
                "model's output on the batch (source, tgt_in, masks) against tgt_out"
                "[[: criterion(model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask), "
                "batch.tgt_out)]]"
            )
        calls = len(learner.steps) - (k - 1)
        if calls != 1:
            raise known_bug(
                f"optimizer.step() ran {calls} times in step {k}: call it once per step, on the optimizer "
                "passed in (not on a new one)"
            )
        _ts_gradients(learner, reference, k)
        _ts_rates(learner, k)
    return f"{_TS_STEPS} steps against train.train_step: loss, gradients and Noam rate at each update, dropout on"
