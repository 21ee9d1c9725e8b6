"""Where a training run is, what it trains with, and its checkpoints: ``last.pt`` to resume, ``best.pt`` to translate.

* :class:`TrainState`: the step, the epoch, the time, the history; saved in ``last.pt``.
* :class:`Run`: the settings, the data, the model, its optimizer and schedule, where it writes.
* :func:`checkpoint_dict`, :func:`save_last`, :func:`read_resumable`, :func:`restore`: a run saved
  and taken up again exactly where it stopped (weights, optimizer, schedule, random state).

The loop that moves a run forward is :mod:`.run`; its validation and final test, :mod:`.evaluation`.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch import nn

from transformer_lessons.atomic import atomic_write_json
from transformer_lessons.checkpoint import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_VERSION,
    check_state_fits,
    read_checkpoint,
    save_checkpoint,
    vocab_from_dict,
)
from transformer_lessons.config import TrainConfig
from transformer_lessons.distributed import Distributed
from transformer_lessons.errors import CheckpointError, ResumeMismatchError
from transformer_lessons.loss import LabelSmoothingLoss
from transformer_lessons.model import Transformer
from transformer_lessons.rundir import RUN_RECORDS

if TYPE_CHECKING:
    from transformer_lessons.data import Corpus, TokenBatcher

#: The clock training time is measured with (a module attribute, so a test can drive it).
_clock = time.perf_counter

# --------------------------------------------------------------------------------------
# 1. Where a run is, and everything it trains with
# --------------------------------------------------------------------------------------


@dataclass
class TrainState:
    """Everything that changes as a run trains, apart from the weights and the optimizer: saved in ``last.pt``."""

    step: int = 0  # updates so far
    epoch: int = 0  # epochs completed
    batch_in_epoch: int = 0  # batches of the current epoch already trained on
    epoch_loss: float = 0.0  # Σ loss × tokens over those batches
    epoch_tokens: int = 0
    epoch_time_s: float = 0.0
    train_time_s: float = 0.0  # the run's training time, every call together (evaluation excluded)
    wall_time_s: float = 0.0  # the run's wall time before this call
    history: list[dict] = field(default_factory=list)  # one entry per completed epoch
    best_val_bleu: float = -1.0
    best_epoch: int | None = None

    def to_checkpoint(self) -> dict:
        return {
            "step": self.step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "history": self.history,
            "epoch_sums": {"loss": self.epoch_loss, "tokens": self.epoch_tokens, "time": self.epoch_time_s},
            "best_val_bleu": self.best_val_bleu,
            "best_epoch": self.best_epoch,
            "train_time_s": self.train_time_s,
        }

    @classmethod
    def from_checkpoint(cls, ckpt: dict) -> "TrainState":
        sums, history = ckpt["epoch_sums"], list(ckpt["history"])
        return cls(
            step=ckpt["step"],
            epoch=ckpt["epoch"],
            batch_in_epoch=ckpt["batch_in_epoch"],
            epoch_loss=sums["loss"],
            epoch_tokens=sums["tokens"],
            epoch_time_s=sums["time"],
            history=history,
            best_val_bleu=ckpt["best_val_bleu"],
            best_epoch=ckpt["best_epoch"],
            train_time_s=ckpt.get("train_time_s", sum(h["epoch_time_s"] for h in history) + sums["time"]),
            wall_time_s=ckpt.get("wall_time_s", history[-1]["elapsed_s"] if history else 0.0),
        )


@dataclass
class Budget:
    """How much of a run's budget is spent, from 0 to 1: what the ``to_end`` schedule reads at every update.

    The larger of the training time over ``max_minutes`` (when set) and the updates over
    ``total_steps`` (the epochs' batches); :meth:`update` sets it from the run's state.
    """

    max_minutes: float | None
    total_steps: int
    spent: float = 0.0

    def update(self, state: "TrainState") -> None:
        parts = [state.step / max(self.total_steps, 1)]
        if self.max_minutes is not None:
            parts.append(state.train_time_s / (60 * self.max_minutes))
        self.spent = min(max(parts), 1.0)


@dataclass
class Run:
    """What a training call works with: the settings, the data, the model and its optimizer, and where it writes."""

    config: TrainConfig
    corpus: "Corpus"
    out: Path
    device: torch.device
    model: Transformer
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    criterion: LabelSmoothingLoss
    batcher: "TokenBatcher"
    step_model: nn.Module  # the model, compiled on a GPU if asked
    autocast: Callable = nullcontext
    amp_dtype: torch.dtype | None = None
    max_steps: int | None = None
    progress: bool = True
    log: bool = True
    writer: Any = None  # a TensorBoard SummaryWriter (train(tensorboard=...)), or None
    dist: Distributed = field(default_factory=Distributed)  # this process's rank under torchrun (:mod:`.distributed`)
    step_criterion: nn.Module | None = None  # the loss the steps train on: criterion, or its ShardedLoss under torchrun
    started: float = field(default_factory=lambda: _clock())  # when this call began
    budget: Budget | None = None  # what the to_end schedule has spent (config.schedule); None under "noam"

    @property
    def last_path(self) -> Path:
        return self.out / "last.pt"

    @property
    def best_path(self) -> Path:
        return self.out / "best.pt"

    def wall_seconds(self, state: TrainState) -> float:
        return state.wall_time_s + (_clock() - self.started)

    def time_is_up(self, state: TrainState, since: float) -> bool:
        """The run's training time (every call, plus this epoch's unsaved part) has reached ``max_minutes``."""
        limit = self.config.max_minutes
        return limit is not None and state.train_time_s + (_clock() - since) >= 60 * limit


# --------------------------------------------------------------------------------------
# 2. Checkpoints of a run: last.pt to resume, best.pt to translate with
# --------------------------------------------------------------------------------------


def _rng_state() -> dict:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    # RNG states are CPU ByteTensors even when the checkpoint was mapped to the GPU.
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def checkpoint_dict(run: Run, state: TrainState, training_state: bool = True) -> dict:
    """The checkpoint of ``run`` now: ``last.pt`` with the training state, ``best.pt`` without it."""
    ckpt = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "model_config": run.config.model.to_dict(),
        "train_config": run.config.to_dict(),
        "src_vocab": run.corpus.src_vocab.to_dict(),
        "tgt_vocab": run.corpus.tgt_vocab.to_dict(),
        "model": run.model.state_dict(),
    }
    progress = state.to_checkpoint()
    if not training_state:
        return ckpt | {k: progress[k] for k in ("step", "epoch", "history", "best_val_bleu", "best_epoch")}
    return (
        ckpt
        | progress
        | {
            "optimizer": run.optimizer.state_dict(),
            "scheduler": run.scheduler.state_dict(),
            "rng": _rng_state(),
            "wall_time_s": run.wall_seconds(state),
        }
    )


def save_last(run: Run, state: TrainState) -> None:
    """``last.pt`` (everything needed to resume) and ``history.json``, both written atomically (by rank 0 alone)."""
    if not run.dist.is_main:
        return
    save_checkpoint(checkpoint_dict(run, state), run.last_path)
    atomic_write_json(run.out / "history.json", state.history)


def read_resumable(path: Path, config: TrainConfig, device: torch.device) -> dict:
    """``last.pt`` of the run to resume, checked against ``config`` before any data is prepared.

    Raises:
        ResumeMismatchError: the run was trained with other settings; names each field that changed.
        CheckpointError: ``path`` is not a usable ``last.pt``.
    """
    start_over = "start over with resume=False (command line: --no-resume), or choose another output folder"
    try:
        ckpt = read_checkpoint(path, map_location=device)
    except CheckpointError as err:
        raise CheckpointError(f"cannot resume: {err}; delete {path}, or {start_over}") from err
    missing = [
        k
        for k in ("optimizer", "scheduler", "step", "epoch", "batch_in_epoch", "epoch_sums", "history", "rng")
        if k not in ckpt
    ]
    if missing:
        raise CheckpointError(
            f"cannot resume: {path} lacks the training state {missing} (is it a best.pt or an export?); {start_over}"
        )
    try:
        saved = TrainConfig.from_dict(ckpt.get("train_config") or {})
    except (TypeError, ValueError) as err:
        raise ResumeMismatchError(
            f"cannot resume {path}: its training settings are not this code's ({err}); {start_over}"
        ) from err
    changed = config.changes_on_resume(saved)
    if changed:
        raise ResumeMismatchError(
            f"cannot resume {path} with other settings ({'; '.join(changed)}): a resumed run may change only the epochs, "
            f"the time limit and the evaluation settings. Resume with the run's settings, or {start_over}"
        )
    return ckpt


def restore(run: Run, ckpt: dict) -> TrainState:
    """Load ``last.pt``'s weights, optimizer, schedule and random state into ``run``; its :class:`TrainState`."""
    src_vocab, tgt_vocab = run.corpus.src_vocab, run.corpus.tgt_vocab
    if (
        vocab_from_dict(ckpt["src_vocab"], "source") != src_vocab
        or vocab_from_dict(ckpt["tgt_vocab"], "target") != tgt_vocab
    ):
        raise ResumeMismatchError(
            f"{run.last_path} was trained with other vocabularies (source {len(ckpt['src_vocab']['itos'])}, target "
            f"{len(ckpt['tgt_vocab']['itos'])} tokens; this corpus: {len(src_vocab)}, {len(tgt_vocab)}): "
            "prepare the corpus with the run's min_freq/limit/drop_longer_than/bpe_merges, or start over with resume=False (--no-resume)"
        )
    check_state_fits(run.model, ckpt["model"], len(src_vocab), len(tgt_vocab))
    run.model.load_state_dict(ckpt["model"])
    run.optimizer.load_state_dict(ckpt["optimizer"])
    run.scheduler.load_state_dict(ckpt["scheduler"])
    _set_rng_state(ckpt["rng"])
    state = TrainState.from_checkpoint(ckpt)
    if run.budget is not None:
        run.budget.update(state)
    if run.dist.is_main:  # last.pt is the record: a history.json a kill cut short (or left behind) is written anew
        atomic_write_json(run.out / "history.json", state.history)
    return state


def remove_first_epoch_cut_short(out: str | Path, train_config: dict) -> str | None:
    """Remove ``best.pt`` when it is all that this same run's first epoch saved: a full disk (or a kill) stopped
    the saves after ``best.pt`` and before ``last.pt``, whose absence would then refuse the same command.

    Only when the folder holds ``best.pt`` and no other record (no ``last.pt``, no ``history.json``), and that
    ``best.pt`` is epoch 1 of a run with exactly ``train_config``. Returns one line saying so, or None.
    """
    out = Path(out)
    best = out / "best.pt"
    others = [name for name in ("last.pt", *RUN_RECORDS) if name != "best.pt" and (out / name).exists()]
    if not best.is_file() or others:
        return None
    try:
        saved = read_checkpoint(best)
    except CheckpointError:
        return None  # not a best.pt this run wrote: refuse_to_replace names it
    if saved.get("epoch") != 1 or saved.get("train_config") != train_config:
        return None
    best.unlink()
    return f"removed {best}: the first epoch of this same run, saved without last.pt (its saves were cut short); starting over"


def finished_run_read_only(out: Path, config: TrainConfig, resume: bool, evaluate_test: bool, log: bool) -> dict | None:
    """A finished run of these settings in a folder this user cannot write (a shared, read-only course install):
    what :func:`train` returns, read from its record, since nothing is left to train or to write. None otherwise
    (the run then goes on as usual, and an unwritable folder is refused with the way out)."""
    if not resume or not out.is_dir() or os.access(out, os.W_OK):
        return None
    try:
        metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
        history = json.loads((out / "history.json").read_text(encoding="utf-8"))
        settings = json.loads(json.dumps(config.to_dict()))  # tuples as JSON writes them
        if metrics["train_config"] != settings or metrics["stopped"] == "max_steps":
            return None
        result = {
            "history": history,
            "step": metrics["steps"],
            "best_epoch": metrics["best_epoch"],
            "best_val_bleu": metrics["best_val_bleu"],
            "train_time_s": metrics["train_time_s"],
            "stopped": metrics["stopped"],
            "out_dir": str(out),
            "test": metrics["test_2016_flickr"] if evaluate_test else None,
            "metrics": metrics,
        }
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if log:
        print(f"{out} is read-only here and holds this run, finished: its record is shown as it is", flush=True)
    return result


__all__ = [
    "Budget",
    "Run",
    "TrainState",
    "checkpoint_dict",
    "finished_run_read_only",
    "read_resumable",
    "remove_first_epoch_cut_short",
    "restore",
    "save_last",
]
