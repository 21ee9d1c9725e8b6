"""Check for the loss each rank of a distributed run backpropagates (notebook 13).

DDP averages the ranks' gradients. For that average to be the gradient of the
whole batch's mean loss, rank ``r`` must backpropagate ``L_r · N / n``: its summed
loss ``L_r`` times the number of ranks ``N``, over the batch's target tokens ``n``
(see :class:`transformer_lessons.distributed.ShardedLoss`, whose weighting this is).
The check builds shards of per-token losses that depend on one weight, lets every
"rank" backpropagate the learner's loss, averages the gradients as DDP does, and
compares with the gradient of the one-process mean loss.
"""

from __future__ import annotations

import math
import numbers
from typing import Callable

import torch

from transformer_lessons.checks.common import NO_RETURN, ExerciseError, call_answer, exercise, known_bug

# Token counts of each rank's shard: uneven on purpose (short sentences on one rank, long on another), and one
# case where a rank has no tokens at all (a batch with fewer sentences than ranks).
_SHARDS = [(7, 33), (10, 10, 20, 1), (12,), (5, 0)]


def _per_token_losses(counts: tuple[int, ...], weight: torch.Tensor) -> list[torch.Tensor]:
    """One tensor of per-token losses per rank, each a different function of ``weight``."""
    g = torch.Generator().manual_seed(sum(counts) * 31 + len(counts))
    return [(weight * torch.randn(n, generator=g) + torch.randn(n, generator=g)) ** 2 for n in counts]


def _averaged_gradient(counts: tuple[int, ...], rank_loss: Callable, validate: Callable = lambda value: None) -> float:
    """DDP's gradient with ``rank_loss``: each rank backpropagates its own loss, then the gradients are averaged."""
    grads = []
    for r, n in enumerate(counts):
        weight = torch.tensor(1.5, requires_grad=True)
        local = _per_token_losses(counts, weight)[r]
        value = rank_loss(local.sum(), n, sum(counts), len(counts))
        validate(value)
        (grad,) = torch.autograd.grad(value, weight, allow_unused=True)
        grads.append(0.0 if grad is None else grad.item())
    return sum(grads) / len(counts)


def _expect_loss(value) -> None:
    if value is None:
        raise ExerciseError(NO_RETURN)
    if isinstance(value, numbers.Real) or (isinstance(value, torch.Tensor) and not value.requires_grad):
        raise ExerciseError(
            "the loss has lost its graph (a float, .item() or .detach()): return a tensor computed "
            "from local_sum, so that backward reaches the weights"
        )
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        shape = f" of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else ""
        raise ExerciseError(f"the loss should be one number, a 0-dim tensor; got {type(value).__name__}{shape}")


def _whole_batch_gradient(counts: tuple[int, ...]) -> float:
    weight = torch.tensor(1.5, requires_grad=True)
    mean = torch.cat(_per_token_losses(counts, weight)).sum() / max(sum(counts), 1)
    (grad,) = torch.autograd.grad(mean, weight)
    return grad.item()


_FIX = "[[: return local_sum * world_size / total_tokens]]"  # kept back from the message until hint()
_BUGS = [
    (
        "each rank averages over its own tokens: DDP then averages those means, so a token of a shard with few "
        "tokens weighs more than a token of a long shard. In the whole batch's mean every token counts alike" + _FIX,
        lambda s, n, total, world: s / n,
    ),
    (
        "each rank backpropagates its share of the batch's mean loss: DDP's average then gives world_size times too "
        "small a gradient, since it divides the sum of the ranks' gradients by world_size" + _FIX,
        lambda s, n, total, world: s / total,
    ),
    (
        "nothing divides by the number of tokens: the gradient grows with the batch, a batch twice as long gives "
        "twice the gradient" + _FIX,
        lambda s, n, total, world: s * world,
    ),
    (
        "world_size divides twice: DDP's average divides by it once already, so the gradient is world_size² times "
        "too small" + _FIX,
        lambda s, n, total, world: s / world / total,
    ),
    (
        "the loss is each rank's own mean divided by world_size: a token still weighs by its shard's token count, "
        "and DDP's average divides by world_size a second time" + _FIX,
        lambda s, n, total, world: s / n / world,
    ),
    (
        "the summed loss is not scaled: its gradient grows with the batch's tokens, and DDP's average divides it by "
        "world_size" + _FIX,
        lambda s, n, total, world: s,
    ),
]


@exercise(
    "rank_loss",
    "return the loss this rank backpropagates so that DDP's average of the gradients is the whole batch's mean-loss gradient",
)
def check_rank_loss(fn: Callable[..., torch.Tensor]) -> str:
    """Check the loss one rank of a distributed run backpropagates.

    Expected signature: ``fn(local_sum, local_tokens, total_tokens, world_size) -> Tensor``:
    ``local_sum`` is a 0-dim tensor (with its graph), the sum of this rank's
    per-token losses over its ``local_tokens`` target tokens; ``total_tokens`` the
    target tokens of the whole batch over every rank; ``world_size`` the number of
    ranks. DDP averages the ranks' gradients; the check needs that average to equal
    the gradient of ``Σ losses / total_tokens`` over the whole batch, with uneven
    shards, four ranks, one rank, and a rank with no tokens.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (each rank's own mean, world_size
            forgotten or divided by, the sum unscaled, a number without its graph).
    """
    with torch.enable_grad():  # the check body runs under no_grad; this one is about gradients
        got, expected = [], []
        for counts in _SHARDS:
            got.append(_averaged_gradient(counts, lambda *args: call_answer(fn, *args), _expect_loss))
            expected.append(_whole_batch_gradient(counts))

        def matches(grads):  # a rank without tokens makes local_sum / local_tokens NaN: the bug matches then too
            return all(
                math.isclose(g, e, rel_tol=1e-5, abs_tol=1e-7) or (math.isnan(g) and math.isnan(e))
                for g, e in zip(got, grads)
            )

        if matches(expected):
            return f"DDP's averaged gradient equals the whole batch's, {len(_SHARDS)} batches split over 1 to 4 ranks, uneven shards"
        for hint, bug in _BUGS:
            if matches([_averaged_gradient(counts, bug) for counts in _SHARDS]):
                raise known_bug(hint)
    i = next(k for k, (g, e) in enumerate(zip(got, expected)) if not math.isclose(g, e, rel_tol=1e-5, abs_tol=1e-7))
    raise ExerciseError(
        f"with shards of {list(_SHARDS[i])} tokens on {len(_SHARDS[i])} ranks, DDP's average gives the gradient {got[i]:.6g}, "
        f"the whole batch's mean loss {expected[i]:.6g}: scale the local sum so that the average over the ranks is the whole batch's mean"
        "[[: return local_sum * world_size / total_tokens]]"
    )
