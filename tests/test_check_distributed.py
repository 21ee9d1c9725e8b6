"""check_rank_loss (notebook 13): the loss one rank of a DDP run backpropagates.

Correct answers written differently pass; the mistakes learners make with DDP's
averaging are each named. The check's own reference is compared with the
package's ShardedLoss, so the exercise teaches what the course's training does.
"""

from __future__ import annotations

import pytest
import torch

from transformer_lessons.checks import ExerciseError
from transformer_lessons.checks.distributed import check_rank_loss


def rank_loss_scaled(local_sum, local_tokens, total_tokens, world_size):
    return local_sum * world_size / total_tokens


def rank_loss_mean_of_batch(local_sum, local_tokens, total_tokens, world_size):
    batch_mean = local_sum / total_tokens  # this rank's part of the batch's mean loss
    return batch_mean * world_size  # DDP divides by world_size again


def rank_loss_tensor_counts(local_sum, local_tokens, total_tokens, world_size):
    per_rank_tokens = torch.tensor(total_tokens, dtype=local_sum.dtype) / world_size
    return local_sum / per_rank_tokens


ALTERNATIVES = [rank_loss_scaled, rank_loss_mean_of_batch, rank_loss_tensor_counts]


@pytest.mark.parametrize("answer", ALTERNATIVES, ids=lambda f: f.__name__)
def test_correct_answers_pass(answer, capsys):
    assert check_rank_loss(answer) is None
    assert "✔ rank_loss: correct" in capsys.readouterr().out


def rank_loss_own_mean(local_sum, local_tokens, total_tokens, world_size):
    return local_sum / local_tokens


def rank_loss_no_world_size(local_sum, local_tokens, total_tokens, world_size):
    return local_sum / total_tokens


def rank_loss_divides_by_world(local_sum, local_tokens, total_tokens, world_size):
    return local_sum / (world_size * total_tokens)


def rank_loss_unscaled(local_sum, local_tokens, total_tokens, world_size):
    return local_sum


def rank_loss_item(local_sum, local_tokens, total_tokens, world_size):
    return (local_sum * world_size / total_tokens).item()


def rank_loss_no_return(local_sum, local_tokens, total_tokens, world_size):
    local_sum * world_size / total_tokens


def rank_loss_own_mean_over_world(local_sum, local_tokens, total_tokens, world_size):
    return local_sum / local_tokens / world_size


def rank_loss_no_token_count(local_sum, local_tokens, total_tokens, world_size):
    return local_sum * world_size


BUGS = [
    (rank_loss_own_mean, "each rank averages over its own tokens"),
    (rank_loss_no_world_size, "world_size times too small a gradient"),
    (rank_loss_divides_by_world, "world_size divides twice"),
    (rank_loss_unscaled, "summed loss is not scaled"),
    (rank_loss_no_token_count, "nothing divides by the number of tokens"),
    (rank_loss_item, "lost its graph"),
    (rank_loss_no_return, "forget a `return`"),
    (rank_loss_own_mean_over_world, "own mean divided by world_size"),
]
FORMULA = "local_sum * world_size / total_tokens"


@pytest.mark.parametrize("bug, message", BUGS, ids=lambda x: getattr(x, "__name__", "msg"))
def test_bugs_are_named(bug, message):
    with pytest.raises(ExerciseError, match=message) as error:
        check_rank_loss(bug)
    assert FORMULA not in str(error.value)  # the fix waits for hint()


@pytest.mark.parametrize(
    "bug",
    [
        rank_loss_own_mean,
        rank_loss_no_world_size,
        rank_loss_divides_by_world,
        rank_loss_unscaled,
        rank_loss_no_token_count,
        rank_loss_own_mean_over_world,
    ],
    ids=lambda f: f.__name__,
)
def test_a_named_bug_keeps_the_fix_for_hint(bug):
    with pytest.raises(ExerciseError) as error:
        check_rank_loss(bug)
    assert error.value.known_bug
    assert error.value.fixes == (f"return {FORMULA}",)
    assert "/ total_tokens" not in str(error.value) and "* world_size" not in str(error.value)


def test_an_unknown_wrong_answer_gets_the_numbers_and_the_formula_on_asking():
    with pytest.raises(ExerciseError, match=r"shards of \[7, 33\] tokens") as error:
        check_rank_loss(lambda s, n, total, world: 2 * s * world / total)
    assert FORMULA not in str(error.value)  # the formula waits for hint()
    assert error.value.fixes == (f"return {FORMULA}",)


def test_a_stub_is_not_implemented_yet(capsys):
    def rank_loss(local_sum, local_tokens, total_tokens, world_size):
        raise NotImplementedError("write rank_loss")

    check_rank_loss(rank_loss)
    assert "rank_loss: not implemented yet" in capsys.readouterr().out


def test_the_answer_is_what_sharded_loss_backpropagates():
    """ShardedLoss (one process: no all-reduce) backpropagates local_sum * world / n with n its own tokens."""
    from transformer_lessons.distributed import Distributed, ShardedLoss
    from transformer_lessons.loss import LabelSmoothingLoss

    criterion = LabelSmoothingLoss(12, 0, 0.1)
    logits = torch.randn(2, 5, 12, requires_grad=True)
    target = torch.randint(1, 12, (2, 5))
    target[1, 3:] = 0
    sharded = ShardedLoss(criterion, Distributed())
    (via_sharded,) = torch.autograd.grad(sharded(logits, target), logits)
    n = int((target != 0).sum())
    (via_answer,) = torch.autograd.grad(rank_loss_scaled(criterion(logits, target, reduction="sum"), n, n, 1), logits)
    torch.testing.assert_close(via_sharded, via_answer)
