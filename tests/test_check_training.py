"""check_train_step (notebook 09), fed right answers written several ways and the bugs learners write.

Each buggy answer is written the way a learner would write it, not with the check's own simulation.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from check_helpers import assert_named, assert_passes, stub
from test_check_loss import ls_reference  # a right loss, for the random-state test that runs both checks
from transformer_lessons.checks.loss import check_label_smoothing_loss
from transformer_lessons.checks.training import check_train_step
from transformer_lessons.train import train_step

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


@pytest.mark.parametrize("check", [check_train_step])
def test_every_check_is_documented_with_its_signature(check):
    doc = check.__doc__ or ""
    assert "Expected signature:" in doc and "Raises:" in doc, check.__name__
