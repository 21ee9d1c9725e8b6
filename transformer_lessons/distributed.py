"""Training one model on several processes: ``torchrun`` and ``DistributedDataParallel``.

    torchrun --nproc_per_node=2 -m transformer_lessons train --preset quick --device cpu   # two CPU processes
    torchrun --nproc_per_node=8 -m transformer_lessons train --preset full                  # the eight GPUs of one machine

``torchrun`` starts N copies of the command, its *ranks* ``0 … N-1``, and tells each
one who it is in environment variables (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``). :func:`~transformer_lessons.run.train` reads
them (:func:`process_group`) and then, on every rank:

1. joins the process group: backend ``gloo`` on CPUs, ``nccl`` on CUDA GPUs, where
   rank ``r`` of a machine takes its GPU number ``LOCAL_RANK``;
2. builds the same model (same seed). ``DistributedDataParallel`` (DDP) also copies
   rank 0's weights to the others when it wraps the model;
3. walks through the same batches in the same order (the batcher's shuffle depends
   only on the seed and the epoch) and trains on its *shard* of each one, a
   contiguous 1/N of its sentences (:func:`shard_batch`);
4. backward: DDP averages the gradients over the ranks (an all-reduce, bucket by
   bucket while backward is still running), so every rank applies the same update
   and the weights stay equal without ever being sent;
5. weights each rank's loss by its share of the batch's target tokens
   (:class:`ShardedLoss`), so that the averaged gradient is the gradient of the
   whole batch's mean loss: a step on N processes is the one-process step on the
   same batch, up to float rounding (``tests/test_distributed.py`` checks it);
6. and only rank 0 writes: checkpoints, ``history.json``, ``metrics.json``,
   TensorBoard, the log. Both files record ``world_size``.

So ``max_tokens`` stays the size of the whole batch, and the run learns what the
one-process run learns, N times faster at best. To give N GPUs as much work each
as one had, multiply ``--max-tokens`` by N (the paper: 8 P100 GPUs, §5.2, with
batches of about 25,000 source and 25,000 target tokens, §5.1), and expect to
retune the warm-up.

Stopping: ``torchrun`` passes Ctrl-C on to every rank. A rank never stops where
the signal lands: the others' next all-reduce would then fail at once (connection
closed) or pair with the wrong step, and the run would end with an error at a
step no rank saved. Instead it finishes its step, and before the next one the
ranks agree (:meth:`Distributed.stop_here`) and stop together, rank 0 saving
``last.pt``. Resuming works as in one process, and each step's dropout draws come
from ``(seed, step, rank)``, so a resumed run continues exactly as the
uninterrupted run would. A rank that
dies (an error, killed, out of memory) breaks the others' next all-reduce: each
says so in one line (:class:`~transformer_lessons.errors.RankLostError`, not
gloo's traceback) and stops, and the run resumes from its last save.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Iterator

import torch
from torch import nn

from transformer_lessons.errors import RankLostError, TrainingError
from transformer_lessons.hardware import resolve_device
from transformer_lessons.interrupt import StepBoundary, StopRequested

#: How long a rank waits at a collective for others that are alive but busy (rank 0 evaluating, a slow epoch end).
TIMEOUT = timedelta(minutes=60)


@dataclass(frozen=True)
class Distributed:
    """Where this process stands in a run: its rank among ``world_size`` processes.

    The default, one process of one, makes every method here do nothing: a run
    that ``torchrun`` did not start is trained exactly as before.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None  # "gloo" or "nccl" once the process group is joined
    device: torch.device = torch.device("cpu")  # where collectives put their tensors

    @property
    def active(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes files and prints."""
        return self.rank == 0

    def wrap(self, model: nn.Module) -> nn.Module:
        """The module a training step runs: ``model`` itself, or DDP around it."""
        if not self.active:
            return model
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)

    def shard(self, batch, pad_id: int):
        """This rank's part of ``batch`` (:func:`shard_batch`); the batch itself in one process."""
        return shard_batch(batch, self.rank, self.world_size, pad_id) if self.active else batch

    def seed_step(self, seed: int, step: int) -> None:
        """Seed the dropout of ``step`` from ``(seed, step, rank)``: ranks draw differently, and a resumed run repeats itself.

        One process keeps one random stream for the whole run (saved in ``last.pt``); N
        processes would need N streams saved, so each step starts from a known seed instead.
        """
        if self.active:
            torch.manual_seed((seed * 1_000_003 + step) * 1_009 + self.rank)

    def agree(self, *values: int) -> list[int]:
        """The largest of each value over all ranks (every rank gets the same answer)."""
        if not self.active:
            return list(values)
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.int64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def stop_here(self, time_is_up: bool, guard: StepBoundary) -> bool:
        """Before a step: has the time run out on any rank? Raises :class:`StopRequested` if any rank got Ctrl-C/SIGTERM.

        Every rank calls it at the same step, so they all stop at the same boundary.
        """
        if not self.active:
            return time_is_up
        up, signum = self.agree(int(time_is_up), guard.pending or 0)
        if signum:
            guard.pending = None
            raise StopRequested(signum)
        return bool(up)

    def step_boundary(self) -> StepBoundary:
        return AgreedStepBoundary() if self.active else StepBoundary()


class AgreedStepBoundary(StepBoundary):
    """A :class:`StepBoundary` that only notes a signal: the ranks act on it together in :meth:`Distributed.stop_here`.

    A second signal during a step still stops this process at once (the step is lost).
    """

    def _handle(self, signum: int, frame) -> None:
        if self.pending is not None and self._in_step:
            raise StopRequested(signum, mid_step=True)
        self.pending = signum

    def _after_step(self) -> None:
        pass  # the signal stays pending until stop_here, where every rank sees it


def shard_batch(batch, rank: int, world_size: int, pad_id: int):
    """Rank ``rank``'s contiguous ``1/world_size`` of ``batch``'s sentences, as a :class:`~transformer_lessons.data.Batch`.

    The rows are split as evenly as they go (the first shards get one more when
    they do not divide). A batch with fewer sentences than ranks leaves some
    ranks none: they get its first sentence with every target position padding,
    which adds nothing to the loss or the gradient but keeps them in step with
    the others' all-reduce. (Collectives pair by order, not by step: a rank that
    skipped a step would mix its next step's gradients into the others' step.)

    Shape:
        every tensor keeps its width: ``(B, S) -> (B_r, S)``, masks alike.
    """
    from transformer_lessons.data import Batch

    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank}")
    rows = torch.tensor_split(torch.arange(len(batch)), world_size)[rank]  # (B_r,)
    if len(rows) == 0:
        tgt_out = torch.full_like(batch.tgt_out[:1], pad_id)  # (1, T): no token to score
        return Batch(batch.src[:1], batch.tgt_in[:1], tgt_out, batch.src_mask[:1], batch.tgt_mask[:1], 0, [])
    a, b = int(rows[0]), int(rows[-1]) + 1
    part = Batch(
        batch.src[a:b],
        batch.tgt_in[a:b],
        batch.tgt_out[a:b],
        batch.src_mask[a:b],
        batch.tgt_mask[a:b],
        int((batch.tgt_out[a:b] != pad_id).sum()),
        batch.indices[a:b] if batch.indices is not None else None,
    )
    return part


class ShardedLoss(nn.Module):
    """The loss of a shard, weighted so that DDP's average of the gradients is the whole batch's.

    Rank ``r`` sums its tokens' losses, ``L_r = Σ loss`` over its ``n_r`` target
    tokens, and one all-reduce gives every rank ``L = Σ_r L_r`` and ``n = Σ_r n_r``.
    Backward runs on ``L_r · N / n``: DDP divides the sum of the ranks' gradients
    by ``N``, which leaves ``∇(Σ_r L_r) / n = ∇(L / n)``, the gradient of the
    batch's mean loss. (Averaging each rank's own mean instead, ``L_r / n_r``,
    would weight a token of a shard of short sentences more than one of long ones.)

    The value returned is ``L / n`` itself, the same on every rank: it is what the
    log prints and what the divergence check tests, so all ranks stop together.
    """

    def __init__(self, criterion: nn.Module, dist: Distributed):
        super().__init__()
        self.criterion = criterion
        self.dist = dist

    @property
    def pad_id(self) -> int:
        return self.criterion.pad_id

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        local = self.criterion(logits, target, reduction="sum")  # Σ over this shard's tokens
        totals = torch.stack([local.detach().float(), (target != self.pad_id).sum().float()])  # (2,)
        if self.dist.active:
            dist.all_reduce(totals)  # (Σ_r L_r, Σ_r n_r)
        n = totals[1].clamp(min=1.0)
        weighted = local * self.dist.world_size / n  # backward of this, averaged by DDP = ∇ mean loss of the batch
        return weighted + (totals[0] / n - weighted).detach()  # value: the batch's mean loss; gradient: weighted's


def from_environment() -> Distributed:
    """The rank and world size ``torchrun`` set in the environment (one process of one without them)."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError as err:
        raise TrainingError(
            f"the environment of a distributed run is unreadable ({err}): start it with torchrun"
        ) from err
    if world < 1 or not 0 <= rank < world:
        raise TrainingError(f"RANK={rank} and WORLD_SIZE={world} do not fit together: start the run with torchrun")
    return Distributed(rank=rank, world_size=world, local_rank=local)


@contextmanager
def process_group(device: str | torch.device | None = None) -> Iterator[tuple[Distributed, torch.device]]:
    """``(Distributed, device)`` of this process for the length of a run, joined to torchrun's process group if there is one.

    One process: nothing to join, and the device is :func:`resolve_device`'s. Under
    ``torchrun``: ``gloo`` for CPU, ``nccl`` for CUDA, where rank ``r`` of a machine
    takes GPU ``LOCAL_RANK`` (whatever index ``device`` names). The group is left
    when the run ends, unless it was joined before (a test, a notebook that joined it).
    """
    env = from_environment()
    device = resolve_device(device)
    if not env.active:
        yield env, device
        return
    import torch.distributed as dist

    if not dist.is_available():
        raise TrainingError(
            "this PyTorch build has no torch.distributed: train with one process (plain python -m transformer_lessons train)"
        )
    if device.type == "cuda":
        if env.local_rank >= torch.cuda.device_count():
            raise TrainingError(
                f"local rank {env.local_rank} has no GPU: this machine has {torch.cuda.device_count()}; "
                f"start torchrun with --nproc_per_node={torch.cuda.device_count()} or fewer"
            )
        device = torch.device("cuda", env.local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    elif device.type == "cpu":
        backend = "gloo"
    else:
        raise TrainingError(
            f"training on several processes runs on CPUs (gloo) or CUDA GPUs (nccl), not on {device.type}: "
            "pass --device cpu, or train with one process"
        )
    joined = dist.is_initialized()
    if not joined:
        dist.init_process_group(backend, timeout=TIMEOUT)
    try:
        yield replace(env, backend=dist.get_backend(), device=device), device
    except RuntimeError as err:
        if not lost_connection(err):
            raise
        raise RankLostError(lost_rank_message(env, err)) from err
    finally:
        if not joined:
            dist.destroy_process_group()


#: What gloo and NCCL say, in the RuntimeError of a collective, when another rank has gone (crashed, killed, out of memory).
_CONNECTION_LOST = re.compile(
    r"Connection (reset|closed) by peer|Broken pipe|Connection refused|remote process exited|communicator was aborted",
    re.IGNORECASE,
)


def lost_connection(err: BaseException) -> bool:
    """Whether ``err``, raised by a collective (DDP's all-reduce, :meth:`Distributed.agree`), says another rank has gone."""
    return isinstance(err, RuntimeError) and bool(_CONNECTION_LOST.search(str(err)))


def lost_rank_message(env: Distributed, err: BaseException) -> str:
    """One line for the rank that survived: which process stopped, where to look, what to do.

    gloo's message (``[.../pair.cc:537] Read error [127.0.0.1]:17313: Connection reset by
    peer. This is typically caused by ...``) is cut to its reason.
    """
    reason = str(err).strip().splitlines()[0]
    reason = re.sub(r"^\[[^\]]*\]\s*", "", reason).split(". ")[0].rstrip(".")  # drop the source location and the advice
    other = (
        f"the other process of this torchrun run (rank {1 - env.rank})"
        if env.world_size == 2
        else "another process of this torchrun run"
    )
    return (
        f"{other} stopped: rank {env.rank} lost its connection to it ({reason}). Its own output above says why it stopped "
        "(an error, killed, out of memory); this process stopped too. Run the same command again to resume from the last save"
    )


def main_only(dist: Distributed, context):
    """``context`` on rank 0, nothing elsewhere (the run lock: one writer per run folder)."""
    return context if dist.is_main else nullcontext()


__all__ = [
    "AgreedStepBoundary",
    "Distributed",
    "ShardedLoss",
    "TIMEOUT",
    "from_environment",
    "lost_connection",
    "lost_rank_message",
    "main_only",
    "process_group",
    "shard_batch",
]
