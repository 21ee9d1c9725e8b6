"""One training step on two CPU processes, to compare with the same step in one (notebook 13, tests/test_distributed.py).

    torchrun --standalone --nproc_per_node=2 -m transformer_lessons.ddp_demo step.pt

Every rank builds the same small model (:func:`fresh_model`), takes its shard of
the same batch (:func:`global_batch`: three short pairs and two long ones, so the
two shards hold very different numbers of tokens) and runs one
:func:`~transformer_lessons.train.train_step` the way a distributed run does:
DDP around the model, :class:`~transformer_lessons.distributed.ShardedLoss`
around the loss. Rank 0 saves to ``step.pt``:

* ``grads``, ``weights``: the gradients and weights after the step;
* ``naive_grads``: the same step with each rank averaging the loss over its own
  tokens only (the mistake ShardedLoss avoids);
* ``stopped_with``: what each rank did at the next step boundary when only rank 1
  had received a Ctrl-C (both must stop).

:func:`one_process_step` is the same step in one process on the whole batch.
"""

from __future__ import annotations

import signal
import sys

import torch

from transformer_lessons.data import make_batch
from transformer_lessons.distributed import ShardedLoss, process_group
from transformer_lessons.interrupt import StopRequested
from transformer_lessons.loss import LabelSmoothingLoss
from transformer_lessons.model import make_model
from transformer_lessons.specials import BOS_ID, EOS_ID, PAD_ID
from transformer_lessons.train import train_step

V = 40


def fresh_model():
    torch.manual_seed(0)
    return make_model(V, V, n_layers=2, d_model=32, d_ff=64, n_heads=4, dropout=0.0, max_len=64, tie_embeddings=False)


def global_batch():
    """Five pairs, the first three short and the last two long: the two ranks' shards hold very different token counts."""
    g = torch.Generator().manual_seed(3)
    lengths = [(3, 2), (4, 3), (3, 3), (14, 16), (12, 15)]
    pairs = [
        (torch.randint(4, V, (s,), generator=g).tolist(), torch.randint(4, V, (t,), generator=g).tolist())
        for s, t in lengths
    ]
    return make_batch(pairs, PAD_ID, BOS_ID, EOS_ID)


def criterion():
    return LabelSmoothingLoss(V, PAD_ID, smoothing=0.1)


def one_step(step_model, batch, loss):
    """``train_step`` with plain SGD, so that the update is the (clipped) gradient times the rate (Adam's first step is only its sign)."""
    optimizer = torch.optim.SGD(step_model.parameters(), lr=0.5)
    value = train_step(step_model, batch, loss, optimizer, clip_norm=1.0)
    return value


def one_process_step():
    """The step of :func:`main` in this one process, on the whole batch: ``(model after the step, loss)``."""
    model = fresh_model()
    loss = one_step(model, global_batch(), criterion())
    return model, loss


def main(out: str) -> None:
    with process_group("cpu") as (dist, _device):
        record = {"world_size": dist.world_size, "backend": dist.backend}
        model = fresh_model()
        value = one_step(dist.wrap(model), dist.shard(global_batch(), PAD_ID), ShardedLoss(criterion(), dist))
        record["loss"] = value.item()
        record["grads"] = {n: p.grad.clone() for n, p in model.named_parameters()}
        record["weights"] = {n: p.detach().clone() for n, p in model.named_parameters()}

        naive = fresh_model()  # the same step, each rank averaging over its own tokens only
        one_step(dist.wrap(naive), dist.shard(global_batch(), PAD_ID), criterion())
        record["naive_grads"] = {n: p.grad.clone() for n, p in naive.named_parameters()}

        guard = dist.step_boundary()
        guard.pending = signal.SIGINT if dist.rank == 1 else None  # only rank 1 got the Ctrl-C
        stops = torch.zeros(dist.world_size, dtype=torch.int64)
        try:
            dist.stop_here(False, guard)
        except StopRequested as stop:
            stops[dist.rank] = stop.signum
        import torch.distributed as tdist

        tdist.all_reduce(stops)  # every rank's answer, gathered on every rank
        record["stopped_with"] = stops.tolist()
        if dist.is_main:
            torch.save(record, out)


if __name__ == "__main__":
    main(sys.argv[1])
