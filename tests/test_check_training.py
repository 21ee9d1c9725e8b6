"""check_label_smoothing_loss and check_train_step (notebook 09), fed right answers written several ways and the bugs learners write.

Each buggy answer is written the way a learner would write it, not with the check's own simulation.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from check_helpers import assert_named, assert_passes, stub
from transformer_lessons.checks.training import _ls_cases, _smoothed_loss, check_label_smoothing_loss, check_train_step
from transformer_lessons.loss import LabelSmoothingLoss, smoothed_targets
from transformer_lessons.train import train_step

# --- label_smoothing_loss -----------------------------------------------------------------


def ls_reference(logits, target, pad_id, eps):
    return LabelSmoothingLoss(logits.size(-1), pad_id, eps)(logits, target)


def ls_explicit_q(logits, target, pad_id, eps):
    q = smoothed_targets(target, logits.size(-1), pad_id, eps)  # (N, V), zero rows at padding
    return -(q * F.log_softmax(logits, dim=-1)).sum() / (target != pad_id).sum()


def ls_loop(logits, target, pad_id, eps):
    V, total, count = logits.size(-1), logits.new_zeros(()), 0
    for row, y in zip(F.log_softmax(logits, dim=-1), target.tolist()):
        if y == pad_id:
            continue
        others = row.sum() - row[y] - row[pad_id]
        total = total - (1 - eps) * row[y] - eps / (V - 2) * others
        count += 1
    return total / count


def ls_kl_plus_entropy(logits, target, pad_id, eps):
    q = smoothed_targets(target, logits.size(-1), pad_id, eps)
    kl = F.kl_div(F.log_softmax(logits, dim=-1), q, reduction="sum")
    entropy = -torch.xlogy(q, q).sum()
    return (kl + entropy) / (target != pad_id).sum()


def ls_learner(bug):
    """A learner's loss from an explicit q; ``bug`` switches on one mistake."""

    def fn(logits, target, pad_id, eps):
        V = logits.size(-1)
        spread = {"eps_over_v_minus_1": V - 1}.get(bug, V - 2)
        q = torch.full_like(logits, eps / spread)
        q.scatter_(1, target[:, None], 1 - eps)
        if bug != "eps_over_v_minus_1":
            q[:, pad_id] = 0.0
        if bug == "no_smoothing":
            q = F.one_hot(target, V).float()
        log_p = torch.log(F.softmax(logits, dim=-1)) if bug == "log_of_softmax" else F.log_softmax(logits, dim=-1)
        per_position = -(q * log_p).sum(-1)  # (N,)
        real = target != (1 if bug == "hard_coded_pad" else pad_id)
        if bug == "pad_not_ignored":
            return per_position.mean()
        per_position = per_position * real
        if bug == "sum":
            return per_position.sum()
        if bug == "mean_over_all":
            return per_position.mean()
        if bug == "item":
            return (per_position.sum() / real.sum()).item()
        return per_position.sum() / real.sum()

    return fn


def ls_cross_entropy_label_smoothing(logits, target, pad_id, eps):
    return F.cross_entropy(logits, target, ignore_index=pad_id, label_smoothing=eps)


def ls_kl(logits, target, pad_id, eps):
    q = smoothed_targets(target, logits.size(-1), pad_id, eps)
    return F.kl_div(F.log_softmax(logits, dim=-1), q, reduction="sum") / (target != pad_id).sum()


def test_label_smoothing_reference_passes(capsys):
    assert_passes(check_label_smoothing_loss, ls_reference, "label_smoothing_loss", capsys)


@pytest.mark.parametrize(
    "answer",
    [ls_explicit_q, ls_loop, ls_kl_plus_entropy, ls_learner(None)],
    ids=["explicit_q", "loop", "kl_plus_entropy", "learner"],
)
def test_label_smoothing_other_correct_answers_pass(answer, capsys):
    assert_passes(check_label_smoothing_loss, answer, "label_smoothing_loss", capsys)


@pytest.mark.parametrize(
    "answer, hint",
    [
        (ls_cross_entropy_label_smoothing, r"ε/V over every class.*F.cross_entropy"),
        (ls_learner("eps_over_v_minus_1"), r"<pad> gets some too"),
        (ls_learner("no_smoothing"), "no smoothing"),
        (ls_learner("pad_not_ignored"), "positions whose target is pad_id change: those positions are not ignored"),
        (ls_learner("hard_coded_pad"), "use the pad_id argument"),
        (ls_learner("mean_over_all"), "divide by all N positions"),
        (ls_learner("sum"), "the sum over positions"),
        (ls_learner("log_of_softmax"), r"log\(softmax\(x\)\) takes log 0"),
        (ls_learner("item"), "Python float"),
        (ls_kl, "KL divergence"),
    ],
    ids=[
        "eps_over_v",
        "eps_over_v_minus_1",
        "no_smoothing",
        "pad_not_ignored",
        "hard_coded_pad",
        "mean_over_all",
        "sum",
        "log_of_softmax",
        "item",
        "kl",
    ],
)
def test_label_smoothing_bugs_are_named(answer, hint, capsys):
    assert assert_named(check_label_smoothing_loss, answer, "label_smoothing_loss", hint).known_bug
    assert capsys.readouterr().out == ""


def test_label_smoothing_hard_coded_eps_is_named():
    def fixed_eps(logits, target, pad_id, eps):
        return ls_reference(logits, target, pad_id, 0.1)

    assert_named(check_label_smoothing_loss, fixed_eps, "label_smoothing_loss", "eps argument is not used")


def test_label_smoothing_without_gradient_is_named():
    def detached(logits, target, pad_id, eps):
        return ls_reference(logits.detach(), target, pad_id, eps)

    assert_named(check_label_smoothing_loss, detached, "label_smoothing_loss", "no gradient back to the logits")


def test_label_smoothing_simulation_with_default_knobs_is_the_course_loss():
    for logits, target, eps in _ls_cases():
        expected = LabelSmoothingLoss(logits.size(-1), 3, eps)(logits, target)
        assert torch.allclose(_smoothed_loss(logits, target, 3, eps), expected, atol=1e-6)


# --- train_step ---------------------------------------------------------------------------


def ts_learner(bug=None):
    """A learner's training step; ``bug`` switches on one mistake."""

    def fn(model, batch, criterion, optimizer, scheduler):
        if bug != "eval_mode":
            model.train()
        tgt = batch.tgt_out if bug == "feeds_tgt_out" else batch.tgt_in
        scored = batch.tgt_in if bug == "scores_tgt_in" else batch.tgt_out
        logits = model(batch.src, tgt, batch.src_mask, None if bug == "no_tgt_mask" else batch.tgt_mask)  # (B, T, V)
        loss = criterion(logits, scored)
        if bug == "step_before_backward":
            optimizer.zero_grad()
            optimizer.step()
            loss.backward()
        else:
            if bug != "no_zero_grad":
                optimizer.zero_grad()
            loss.backward()
            if bug == "clips":
                nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            if bug == "scheduler_first":
                scheduler.step()
            optimizer.step()
        if bug not in ("scheduler_first", "no_scheduler"):
            scheduler.step()
        return loss if bug == "returns_graph" else loss.item()

    return fn


def ts_flattened(model, batch, criterion, optimizer, scheduler):
    model.train()
    memory = model.encode(batch.src, batch.src_mask)  # (B, S, D)
    logits = model.decode(memory, batch.src_mask, batch.tgt_in, batch.tgt_mask)  # (B, T, V)
    loss = criterion(logits.reshape(-1, logits.size(-1)), batch.tgt_out.reshape(-1))  # (B*T, V) against (B*T,)
    loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=False)  # zeroed after the update instead of before: the same
    return loss.detach()


def test_train_step_reference_passes(capsys):
    assert_passes(check_train_step, train_step, "train_step", capsys)


@pytest.mark.parametrize("answer", [ts_learner(None), ts_flattened], ids=["learner", "flattened_zero_grad_after"])
def test_train_step_other_correct_answers_pass(answer, capsys):
    assert_passes(check_train_step, answer, "train_step", capsys)


@pytest.mark.filterwarnings(
    "ignore:Detected call of `lr_scheduler.step\\(\\)` before"
)  # PyTorch agrees: scheduler_first
@pytest.mark.parametrize(
    "bug, hint",
    [
        ("no_zero_grad", r"plus the previous one's.*zero_grad\(\)"),
        ("scheduler_first", r"scheduler.step\(\) ran before optimizer.step\(\)"),
        ("no_scheduler", "the learning rate never changes"),
        ("feeds_tgt_out", "the decoder reads batch.tgt_out"),
        ("scores_tgt_in", "compares with batch.tgt_in"),
        ("no_tgt_mask", "no tgt_mask"),
        ("step_before_backward", r"found no gradients.*before\s+loss.backward\(\)"),
        ("returns_graph", "with its graph"),
        ("eval_mode", r"eval mode.*model.train\(\)"),
        ("clips", "clipped"),
    ],
)
def test_train_step_bugs_are_named(bug, hint, capsys):
    assert assert_named(check_train_step, ts_learner(bug), "train_step", hint).known_bug
    assert capsys.readouterr().out == ""


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_train_step_with_a_new_optimizer_is_named():
    def own_optimizer(model, batch, criterion, optimizer, scheduler):
        model.train()
        mine = torch.optim.Adam(model.parameters(), lr=1e-3)
        loss = criterion(model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask), batch.tgt_out)
        mine.zero_grad()
        loss.backward()
        mine.step()
        scheduler.step()
        return loss.item()

    assert_named(check_train_step, own_optimizer, "train_step", r"ran 0 times.*the optimizer\s+passed in")


# --- stubs, random state, docstrings ------------------------------------------------------


@pytest.mark.parametrize(
    "check, name",
    [
        (check_label_smoothing_loss, "label_smoothing_loss"),
        (check_train_step, "train_step"),
    ],
)
def test_stub_says_not_implemented_and_returns_none(check, name, capsys):
    assert check(stub) is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"{name}: not implemented yet — ")


def test_checks_leave_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_train_step(train_step)
    check_label_smoothing_loss(ls_reference)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("check", [check_label_smoothing_loss, check_train_step])
def test_every_check_is_documented_with_its_signature(check):
    doc = check.__doc__ or ""
    assert "Expected signature:" in doc and "Raises:" in doc, check.__name__
