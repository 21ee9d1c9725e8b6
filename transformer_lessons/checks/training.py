"""Checks for training: the label-smoothed loss (§5.4) and one training step (§5.3, §5.4).

The references are the course's own: :class:`transformer_lessons.loss.LabelSmoothingLoss`
and :func:`transformer_lessons.train.train_step`. :func:`_smoothed_loss` writes the
loss out with knobs, only to reproduce the mistakes learners make (ε spread over the
wrong classes, padding counted, the KL divergence); with its default knobs it equals
``LabelSmoothingLoss`` (tests/test_check_training.py checks). The training-step check
runs the learner's step and the course's on two copies of one small Transformer with
dropout, and watches each ``optimizer.step()`` through PyTorch's step pre-hook.
"""

from __future__ import annotations

import copy
import math
import numbers
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lessons.checks.common import (
    NO_RETURN,
    Bug,
    ExerciseError,
    call_answer,
    all_close,
    diagnose,
    exercise,
    expect_tensor,
    expect_unchanged,
    known_bug,
)
from transformer_lessons.checks.slips import Slip, slip_bugs
from transformer_lessons.config import ModelConfig
from transformer_lessons.data import Batch, make_batch
from transformer_lessons.loss import LabelSmoothingLoss
from transformer_lessons.model import Transformer
from transformer_lessons.schedule import noam_rate, noam_scheduler
from transformer_lessons.train import train_step

# --------------------------------------------------------------------------------------
# The label-smoothed loss
# --------------------------------------------------------------------------------------

# Not the course's <pad> (1): a hard-coded pad id counts padding positions, and is caught.
_LS_PAD = 3
_LS_V = 7  # small, so that ε/V, ε/(V-1) and ε/(V-2) differ clearly


def _smoothed_loss(logits, target, pad_id, eps, *, spread="V-2", divide="real", kl=False) -> torch.Tensor:
    """-Σ q log p per position, averaged, with knobs that reproduce the common bugs (defaults: the course's loss).

    ``spread``: where ε goes. "V-2": ε/(V-2) on each class neither true nor pad (the course);
    "V": ε/V on every class (``F.cross_entropy(label_smoothing=ε)``); "V-1 pad": ε/(V-1) on
    every class but the true one; "V-1 true": ε/(V-1) on every class but <pad>; "none": one-hot.
    ``divide``: "real" (non-pad targets), "all" (N positions) or "none" (the sum).
    """
    V = logits.size(-1)
    log_p = F.log_softmax(logits.double(), dim=-1)  # (N, V)
    one_hot = F.one_hot(target, V).double()  # (N, V)
    if spread == "none":
        q = one_hot
    elif spread == "V":
        q = eps / V + (1 - eps) * one_hot
    elif spread == "V-1 pad":
        q = eps / (V - 1) * (1 - one_hot) + (1 - eps) * one_hot
    else:
        rest = (1 - one_hot) if spread == "V-2" else torch.ones_like(one_hot)
        rest[:, pad_id] = 0.0
        q = eps / (V - 2 if spread == "V-2" else V - 1) * rest + (1 - eps) * one_hot
    loss = -(q * log_p).sum(-1)  # (N,)
    if kl:  # KL(q ‖ p) = Σ q log q - Σ q log p: the cross-entropy minus the entropy H(q)
        loss = loss + torch.xlogy(q, q).sum(-1)
    real = target != pad_id  # (N,)
    loss = loss.masked_fill(~real, 0.0).sum()
    count = {"real": real.sum(), "all": target.numel(), "none": 1}[divide]
    return (loss / count).float()


def _ls_cases() -> list[tuple[torch.Tensor, torch.Tensor, float]]:
    """``(logits (N, V), target (N,), eps)``: targets with a few <pad> positions, two values of ε."""
    g = torch.Generator().manual_seed(0)
    cases = []
    for n, eps, pads in ((10, 0.2, [2, 5, 9]), (6, 0.05, [4])):
        logits = 2 * torch.randn(n, _LS_V, generator=g)  # (N, V)
        target = torch.randint(0, _LS_V - 1, (n,), generator=g)
        target = target + (target >= _LS_PAD).long()  # real targets: any class but <pad>
        target[pads] = _LS_PAD
        cases.append((logits, target, eps))
    return cases


def _ls_call(fn: Callable, logits: torch.Tensor, target: torch.Tensor, eps: float) -> torch.Tensor:
    """The learner's loss on one case: a scalar float32 tensor, inputs left unchanged."""
    inputs = {"logits": logits.clone(), "target": target.clone()}
    loss = call_answer(
        fn,
        inputs["logits"],
        inputs["target"],
        _LS_PAD,
        eps,
        hint="logits (N, V), target (N,) of class ids, pad_id an int, eps a float",
    )
    expect_unchanged({"logits": logits, "target": target}, inputs)
    if isinstance(loss, numbers.Real):
        raise known_bug(
            f"the loss is a Python {type(loss).__name__}: return a tensor, so that loss.backward() "
            "can follow it back to the logits (drop the .item())"
        )
    return expect_tensor(
        loss,
        "the loss",
        shape=(),
        dtype=torch.float32,
        finite=False,
        shape_hint="Return one number, the mean over the non-pad positions: did you forget the "
        "reduction, or keep a dimension (keepdim=True)?",
    )


def _ls_bugs(logits: torch.Tensor, target: torch.Tensor, eps: float) -> list[Bug]:
    """The loss's known mistakes, alone and two at a time (the Annotated Transformer's KL summed, say)."""

    def simulate(eps=eps, **knobs):
        return _smoothed_loss(logits, target, _LS_PAD, eps, **knobs)

    share = "the true class gets exactly 1 - ε, <pad> gets 0, and each of the V - 2 other classes ε/(V - 2)"
    slips = [
        Slip(
            "you spread ε/V over every class, the true one and <pad> included: that is F.cross_entropy(..., "
            f"label_smoothing=ε), a slightly different target. Here {share}",
            {"spread": "V"},
        ),
        Slip(
            "you give ε/(V - 1) to every class but the true one, so <pad> gets some too: <pad> is never a right "
            f"answer. Here {share}",
            {"spread": "V-1 pad"},
        ),
        Slip(
            f"you give ε/(V - 1) to every class but <pad>, the true one included (it gets 1 - ε + ε/(V - 1)): {share}",
            {"spread": "V-1 true"},
        ),
        Slip(
            f"no smoothing: the true class gets 1 and the others 0, the plain cross-entropy. Smooth it: {share}",
            {"spread": "none"},
        ),
        Slip("the eps argument is not used (a hard-coded 0.1?): smooth with the eps passed in", {"eps": 0.1}),
        Slip(
            "you return the sum over positions: divide by the number of non-pad targets[[: (target != pad_id).sum()]]",
            {"divide": "none"},
        ),
        Slip(
            "you divide by all N positions, padding included: divide by the number of non-pad targets, "
            "(target != pad_id).sum()",
            {"divide": "all"},
        ),
        Slip(
            "you compute the KL divergence KL(q ‖ p) = Σ q log(q / p) (F.kl_div): the cross-entropy minus the entropy "
            "H(q), a constant. It has the same gradients and is a fine loss (the Annotated Transformer's), but this "
            "exercise asks for the course's loss, the cross-entropy -Σ q log p: drop the Σ q log q term",
            {"kl": True},
        ),
    ]
    return slip_bugs(simulate, slips)


def _ls_properties(fn: Callable, logits: torch.Tensor, target: torch.Tensor, eps: float, got: torch.Tensor) -> None:
    """Name a wrong loss by what it depends on: logits at padding, the number of padding rows, ε."""
    pads = target == _LS_PAD
    moved = logits.clone()
    moved[pads] = 5 * torch.randn(int(pads.sum()), logits.size(-1), generator=torch.Generator().manual_seed(1))
    if not all_close(_ls_call(fn, moved, target, eps), got):
        raise known_bug(
            "the loss changes when only the logits of positions whose target is pad_id change: those "
            "positions are not ignored. Zero their loss (target != pad_id) and use the pad_id argument, "
            "not a hard-coded id"
        )
    extra = torch.cat([logits, torch.randn(3, logits.size(-1))]), torch.cat([target, torch.full((3,), _LS_PAD)])
    if not all_close(_ls_call(fn, *extra, eps), got):
        raise known_bug(
            "appending padding positions changes the loss: divide by the number of non-pad targets, "
            "(target != pad_id).sum(), not by all positions"
        )
    if all_close(_ls_call(fn, logits, target, 0.0), LabelSmoothingLoss(logits.size(-1), _LS_PAD, 0.0)(logits, target)):
        raise known_bug(
            "with eps = 0 your loss is right (the cross-entropy), so the smoothing is off: the true class "
            "gets 1 - ε, <pad> 0, and each of the V - 2 other classes ε/(V - 2)"
        )


def _ls_extreme(fn: Callable) -> None:
    """A confident model: logits 200 apart, whose softmax underflows to 0. The loss must stay finite and exact."""
    logits = torch.zeros(4, _LS_V)
    logits[torch.arange(4), torch.tensor([0, 2, 4, 6])] = 200.0  # (N, V): p = 1 on one class, e^-200 = 0 on the others
    target = torch.tensor([0, 5, _LS_PAD, 6])
    got = _ls_call(fn, logits, target, 0.1)
    if not torch.isfinite(got):
        raise known_bug(
            f"on confident logits (one 200 above the others) your loss is {got.item()}: log(softmax(x)) "
            "takes log 0 = -inf where the probabilities underflow. Use the log-softmax function, "
            "which never forms the tiny probabilities[[: F.log_softmax(logits, dim=-1)]]"
        )
    expected = LabelSmoothingLoss(_LS_V, _LS_PAD, 0.1)(logits, target)
    if not all_close(got, expected):
        raise known_bug(
            f"on confident logits (one 200 above the others) your loss is {got.item():.4g}, not "
            f"{expected.item():.4g}: a log of the softmax with an added epsilon or a clamp changes the "
            "values there. Use the log-softmax function[[: F.log_softmax(logits, dim=-1)]]"
        )


@exercise(
    "label_smoothing_loss",
    "return the mean over non-pad targets of -Σ_v q_v log p_v, with q = 1 - eps on the true class, 0 on pad_id "
    "and eps shared equally by the V - 2 other classes, log p from a stable log-softmax",
)
def check_label_smoothing_loss(fn: Callable[..., torch.Tensor]) -> str:
    """Check the label-smoothed cross-entropy (paper §5.4, ε_ls = 0.1), the course's ``LabelSmoothingLoss``.

    Expected signature: ``fn(logits, target, pad_id, eps) -> scalar tensor``: the mean over
    the positions whose target is not ``pad_id`` of ``-Σ_v q_v log p_v``, with
    ``log p = log_softmax(logits)`` and ``q`` the smoothed target: ``1 - eps`` on the true
    class, 0 on ``pad_id``, ``eps / (V - 2)`` on each of the other classes (what
    ``loss.smoothed_targets`` builds). Compared with ``loss.LabelSmoothingLoss`` on two
    batches (pad id 3, not the course's 1), on confident logits (which must not give inf),
    and for a gradient back to the logits. The KL divergence ``KL(q ‖ p)`` is the same
    minus the constant entropy ``H(q)``: the same gradients, but not this exercise's number.

    Shape:
        logits ``(N, V)`` float, target ``(N,)`` long -> ``()``.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (ε/V or ε/(V-1) instead of ε/(V-2), no
            smoothing, eps ignored, padding positions counted, the sum instead of the
            mean, the KL divergence, log of softmax giving inf, no gradient), or two
            of them at once (the KL divergence summed over positions).
    """
    for logits, target, eps in _ls_cases():
        got = _ls_call(fn, logits, target, eps)
        expected = LabelSmoothingLoss(_LS_V, _LS_PAD, eps)(logits, target)
        if not all_close(got, expected):
            for hint, simulate in _ls_bugs(logits, target, eps):
                if all_close(got, simulate()):
                    raise known_bug(hint)
            _ls_properties(fn, logits, target, eps, got)
            diagnose(
                got, expected, [], "the loss", "loss = -Σ_v q_v log p_v per position, averaged over non-pad targets"
            )
    _ls_extreme(fn)
    logits, target, eps = _ls_cases()[0]
    with torch.enable_grad():
        logits = logits.clone().requires_grad_()
        if not _ls_call(fn, logits, target, eps).requires_grad:
            raise known_bug(
                "the loss has no gradient back to the logits: a .item(), .detach(), numpy, or a new "
                "torch.tensor(...) cut it off. Compute it from logits with torch operations"
            )
    return "two batches with padding against loss.LabelSmoothingLoss, confident logits, the gradient"


# --------------------------------------------------------------------------------------
# One training step
# --------------------------------------------------------------------------------------

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
