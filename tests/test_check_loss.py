"""check_label_smoothing_loss (notebook 09), fed right answers written several ways and the bugs learners write.

Each buggy answer is written the way a learner would write it, not with the check's own simulation.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from check_helpers import assert_named, assert_passes, stub
from transformer_lessons.checks.loss import _ls_cases, _smoothed_loss, check_label_smoothing_loss
from transformer_lessons.loss import LabelSmoothingLoss, smoothed_targets

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


# --- stubs, docstrings ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "check, name",
    [
        (check_label_smoothing_loss, "label_smoothing_loss"),
    ],
)
def test_stub_says_not_implemented_and_returns_none(check, name, capsys):
    assert check(stub) is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"{name}: not implemented yet — ")


@pytest.mark.parametrize("check", [check_label_smoothing_loss])
def test_every_check_is_documented_with_its_signature(check):
    doc = check.__doc__ or ""
    assert "Expected signature:" in doc and "Raises:" in doc, check.__name__
