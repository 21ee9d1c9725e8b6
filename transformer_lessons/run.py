"""A training run: the loop around the step, built from small named pieces.

Read it top to bottom:

1. :func:`build_run`: the model, Adam, the schedule, the loss and the batches of a run
   (:class:`~transformer_lessons.run_state.Run`); every update is :func:`~transformer_lessons.train.train_step`.
2. :func:`run_epoch`: the steps of one epoch, stopping on the time limit or ``max_steps``.
3. :func:`end_epoch`: validation (:mod:`.evaluation`), the history, ``best.pt`` and ``last.pt``.
4. :func:`train`: the whole run, which resumes (:mod:`.run_state`), never loses work, refuses what
   would make its record untrue (a second run in the same folder, a resumed run with other
   settings), and ends with the final test (:func:`~transformer_lessons.evaluation.final_test`).

The pieces it uses live in the files named after them: where a run is and its checkpoints
(:mod:`.run_state`), validation and the final test (:mod:`.evaluation`), the step (:mod:`.train`),
the loss (:mod:`.loss`), the schedule (:mod:`.schedule`), the settings (:mod:`.config`), the output
folder and its lock (:mod:`.rundir`), Ctrl-C (:mod:`.interrupt`), devices and precision
(:mod:`.hardware`), scheduled sampling (:mod:`.scheduled_sampling`, off by default as in the
paper), TensorBoard logging (:mod:`.tensorboard`), checkpoint averaging (:mod:`.averaging`).
"""

from __future__ import annotations

import os
import random
import signal
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import torch

import transformer_lessons.run_state as run_state
from transformer_lessons.averaging import save_epoch_weights
from transformer_lessons.checkpoint import save_checkpoint
from transformer_lessons.config import TrainConfig, get_train_config
from transformer_lessons.distributed import Distributed, ShardedLoss, main_only, process_group
from transformer_lessons.errors import DivergedError
from transformer_lessons.evaluation import final_test, validate
from transformer_lessons.hardware import autocast_for
from transformer_lessons.interrupt import StepBoundary, StopRequested, quiet_in_notebooks
from transformer_lessons.loss import LabelSmoothingLoss
from transformer_lessons.model import Transformer
from transformer_lessons.progress_bar import bar_extras, progress_bar
from transformer_lessons.run_state import (
    Budget,
    Run,
    TrainState,
    remove_first_epoch_cut_short,
    checkpoint_dict,
    read_resumable,
    restore,
    save_last,
)
from transformer_lessons.rundir import (
    default_out_dir,
    make_out_dir,
    refuse_to_replace,
    remove_stale_temporary_files,
    run_lock,
)
from transformer_lessons.schedule import noam_scheduler, to_end_scheduler
from transformer_lessons.scheduled_sampling import scheduled_inputs, scheduled_probability, step_generator
from transformer_lessons.tensorboard import (
    check_tensorboard,
    log_epoch,
    log_step,
    log_test,
    open_writer,
    tensorboard_dir,
)
from transformer_lessons.train import make_optimizer, train_step

if TYPE_CHECKING:
    from transformer_lessons.data import Corpus


def build_run(
    config: TrainConfig, corpus: "Corpus", out: Path, device: torch.device, dist: Distributed = Distributed(), **options
) -> Run:
    """A fresh model (seeded), Adam, the schedule, the loss and the batcher for ``config``; DDP around the model under torchrun."""
    torch.manual_seed(config.seed)
    random.seed(config.seed)
    model = Transformer(config.model, len(corpus.src_vocab), len(corpus.tgt_vocab)).to(device)
    optimizer = make_optimizer(model, config)
    amp_dtype, autocast = autocast_for(device, config.precision)
    criterion = LabelSmoothingLoss(len(corpus.tgt_vocab), corpus.tgt_vocab.pad_id, config.smoothing)
    step_model = dist.wrap(model)
    batcher = corpus.batcher("train", config.max_tokens, shuffle=True, seed=config.seed, max_len=config.model.max_len)
    budget, d_model = None, config.model.d_model
    if config.schedule == "to_end":
        budget = Budget(config.max_minutes, config.epochs * len(batcher))
        scheduler = to_end_scheduler(optimizer, d_model, config.warmup, config.lr_factor, lambda: budget.spent)
    else:
        ramp = config.schedule != "noam_no_ramp"
        scheduler = noam_scheduler(optimizer, d_model, config.warmup, config.lr_factor, ramp)
    return Run(
        config=config,
        corpus=corpus,
        out=out,
        device=device,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        criterion=criterion,
        step_criterion=ShardedLoss(criterion, dist) if dist.active else criterion,
        batcher=batcher,
        budget=budget,
        step_model=torch.compile(step_model, dynamic=True)
        if (config.compile and device.type == "cuda")
        else step_model,
        autocast=autocast,
        amp_dtype=amp_dtype,
        dist=dist,
        **options,
    )


# --------------------------------------------------------------------------------------
# 2. An epoch, and the validation, history and checkpoints after it
# --------------------------------------------------------------------------------------


def _diverged(run: Run, state: TrainState, err: DivergedError) -> DivergedError:
    kept = (
        f"{run.last_path} keeps the last state saved before it"
        if run.last_path.is_file()
        else "no checkpoint had been written yet"
    )
    return DivergedError(
        f"training diverged at step {state.step + 1} (learning rate {run.scheduler.get_last_lr()[0]:.3g}): {err}. "
        f"That step changed no weight and nothing was saved after it ({kept}). "
        "Lower lr_factor, lengthen the warmup or keep clip_norm, then start over (resume=False, command line --no-resume)"
    )


def _scheduled_p(run: Run, state: TrainState) -> float:
    """The scheduled sampling probability for the next update (0: plain teacher forcing, the paper's)."""
    return scheduled_probability(run.config.scheduled_sampling, run.config.scheduled_sampling_ramp, state.step)


def run_epoch(run: Run, state: TrainState, guard: StepBoundary) -> str:
    """Train on the rest of the current epoch. Returns why it stopped: ``"done"``, ``"time_limit"`` or ``"max_steps"``.

    Each step runs inside ``guard.step()``: Ctrl-C waits for it to end, so the
    state is always between two steps. The batches already trained on before an
    interruption are skipped, and the epoch's order depends only on (seed, epoch).
    """
    run.batcher.set_epoch(state.epoch)
    bar = progress_bar()(
        total=len(run.batcher),
        desc=f"epoch {state.epoch + 1}/{run.config.epochs}",
        disable=not run.progress,
        leave=False,
        initial=state.batch_in_epoch,
    )
    since = run_state._clock()
    try:
        for i, batch in enumerate(run.batcher):
            if i < state.batch_in_epoch:
                continue  # trained on before the interruption
            if run.dist.stop_here(
                run.time_is_up(state, since), guard
            ):  # before the step: a run resumed with no time left trains nothing
                return "time_limit"
            with guard.step():
                n_tokens = batch.n_tokens  # the whole batch's: under torchrun each rank trains on its shard of it
                batch = run.dist.shard(batch, run.criterion.pad_id).to(run.device)
                lr, p = run.optimizer.param_groups[0]["lr"], _scheduled_p(run, state)
                run.dist.seed_step(run.config.seed, state.step)
                if (
                    p > 0
                ):  # scheduled sampling: the decoder reads some of its own predictions (config.scheduled_sampling)
                    batch = scheduled_inputs(
                        run.model,
                        batch,
                        p,
                        run.criterion.pad_id,
                        step_generator(run.config.seed, state.step),
                        run.autocast,
                    )
                try:
                    loss = train_step(
                        run.step_model,
                        batch,
                        run.step_criterion,
                        run.optimizer,
                        run.scheduler,
                        run.config.clip_norm,
                        run.autocast,
                    )
                except DivergedError as err:
                    raise _diverged(run, state, err) from err
                now = run_state._clock()
                state.step, state.batch_in_epoch = state.step + 1, i + 1
                state.epoch_loss += loss.item() * n_tokens
                state.epoch_tokens += n_tokens
                state.epoch_time_s += now - since
                state.train_time_s += now - since
                since = now
                if run.budget is not None:
                    run.budget.update(state)
            if run.writer is not None:
                log_step(run.writer, state.step, loss.item(), lr, p)
            bar.update(1)
            if run.progress and (state.step % 10 == 0 or i + 1 == len(run.batcher)):
                bar.set_postfix(
                    loss=f"{loss.item():.3f}", lr=f"{run.scheduler.get_last_lr()[0]:.2e}", **bar_extras(run, state)
                )
            if run.max_steps is not None and state.step >= run.max_steps:
                return "max_steps"
        return "done"
    finally:
        bar.close()


def end_epoch(run: Run, state: TrainState, last: bool, guard: StepBoundary) -> None:
    """After an epoch's steps: validate, add the epoch to the history, save ``best.pt`` if it is the best, then ``last.pt``."""
    val_loss, val_ppl, val_bleu = validate(run, with_bleu=(state.epoch + 1) % run.config.eval_every == 0 or last)
    entry = {
        "epoch": state.epoch + 1,
        **(
            {"partial": round(state.batch_in_epoch / len(run.batcher), 3)}
            if 0 < state.batch_in_epoch < len(run.batcher)
            else {}
        ),
        "step": state.step,
        "train_loss": state.epoch_loss / max(state.epoch_tokens, 1),
        "val_loss": val_loss,
        "val_ppl": val_ppl,
        "val_bleu": val_bleu,
        "lr": run.scheduler.get_last_lr()[0],
        "tokens_per_s": state.epoch_tokens / max(state.epoch_time_s, 1e-9),
        "epoch_time_s": state.epoch_time_s,
        "elapsed_s": run.wall_seconds(state),  # since the run began, every call together
        "world_size": run.dist.world_size,  # processes that trained it (torchrun): tokens_per_s counts them all
    }
    if run.writer is not None:
        log_epoch(run.writer, entry)
    if run.log:
        bleu_text = f", val BLEU {val_bleu:.2f}" if val_bleu is not None else ""
        print(
            f"epoch {entry['epoch']:>3}  step {state.step:>6}  train loss {entry['train_loss']:.3f}  val loss {val_loss:.3f} "
            f"(ppl {val_ppl:.1f}){bleu_text}  {entry['tokens_per_s']:,.0f} tok/s",
            flush=True,
        )
    best = val_bleu is not None and val_bleu > state.best_val_bleu
    with guard.step():  # the record and the checkpoints change together: Ctrl-C waits until both are saved
        state.history.append(entry)
        if best:
            state.best_val_bleu, state.best_epoch = val_bleu, state.epoch + 1
        state.epoch, state.batch_in_epoch = state.epoch + 1, 0
        state.epoch_loss, state.epoch_tokens, state.epoch_time_s = 0.0, 0, 0.0
        if best and run.dist.is_main:
            save_checkpoint(checkpoint_dict(run, state, training_state=False), run.best_path)
        if run.config.average_last > 1 and run.dist.is_main:  # the weights checkpoint averaging will need
            save_epoch_weights(run.out, state.epoch, run.model, run.config.average_last)
        save_last(run, state)


# --------------------------------------------------------------------------------------
# 3. The whole run
# --------------------------------------------------------------------------------------


def prepare_corpus_for(
    config: "TrainConfig | str | None" = None,
    data_dir: str | os.PathLike | None = None,
    progress: bool = True,
    limit: int | None = None,
) -> "Corpus":
    """The corpus a run with ``config`` trains on: :func:`~transformer_lessons.data.prepare_corpus`
    with the config's ``min_freq``, ``drop_longer_than``, ``limit`` and ``bpe_merges`` (``limit`` here overrides the config's)."""
    from transformer_lessons.data import prepare_corpus

    config = get_train_config(config)
    return prepare_corpus(
        data_dir,
        min_freq=config.min_freq,
        drop_longer_than=config.drop_longer_than,
        limit=limit if limit is not None else config.limit,
        progress=progress,
        bpe_merges=config.bpe_merges,
    )


def check_corpus(corpus: "Corpus", config: TrainConfig) -> None:
    """Refuse a corpus without train/val; warn when it was prepared otherwise or holds pairs too long for the model."""
    corpus.require_splits()
    info = {
        ("drop_longer_than" if k == "max_len" else k): v for k, v in corpus.info.items()
    }  # corpora saved before the rename
    made = {k: info[k] for k in ("min_freq", "drop_longer_than", "limit", "bpe_merges") if k in info}
    differs = {k: (v, getattr(config, k)) for k, v in made.items() if v != getattr(config, k)}
    if differs:  # a corpus prepared elsewhere (e.g. --corpus on a GPU machine) records how it was made
        detail = ", ".join(f"{k}={v!r} (config: {c!r})" for k, (v, c) in differs.items())
        warnings.warn(
            f"the corpus was prepared with {detail}; training on it as it is. For the config's settings, prepare it with "
            f"prepare_corpus_for(config) (command line: prepare --preset {config.name})",
            stacklevel=3,
        )
    for split in ("train", "val"):
        if skipped := corpus.too_long(split, config.model.max_len):
            warnings.warn(
                f"{skipped} {split} pair(s) have a side of {config.model.max_len} or more tokens, more than the model's "
                f"max_len={config.model.max_len} holds with <bos>/<eos>; they are left out of "
                f"{'training' if split == 'train' else 'the validation loss (BLEU still translates them, cut to fit)'}. "
                "Raise model.max_len, or set drop_longer_than to filter the training data.",
                stacklevel=3,
            )


def train_epochs(run: Run, state: TrainState) -> str:
    """Epochs until ``config.epochs``, the time limit or ``max_steps``; why it stopped. Ctrl-C/SIGTERM save at a step boundary."""
    config, stopped = run.config, "done"
    with run.dist.step_boundary() as guard:
        try:
            while state.epoch < config.epochs and stopped == "done":
                stopped = run_epoch(run, state, guard)
                if stopped == "time_limit" and config.schedule == "to_end" and state.batch_in_epoch:
                    # the schedule ended with the budget: the part-epoch is the run's last, evaluated like a whole one
                    end_epoch(run, state, last=True, guard=guard)
                    if run.log:
                        print(
                            f"time limit: {state.train_time_s / 60:.1f} min of training (max_minutes={config.max_minutes}) used up "
                            f"in epoch {state.epoch} ({state.history[-1].get('partial', 1):.0%} of it), step {state.step}; "
                            "the schedule ended with it",
                            flush=True,
                        )
                    break
                if stopped != "done":  # inside an epoch: keep its position, do not log it as an epoch
                    save_last(run, state)
                    if stopped == "time_limit" and run.log:
                        print(
                            f"time limit: {state.train_time_s / 60:.1f} min of training (max_minutes={config.max_minutes}) used up in "
                            f"epoch {state.epoch + 1} after {state.batch_in_epoch}/{len(run.batcher)} batches, step {state.step}; "
                            f"saved {run.last_path}",
                            flush=True,
                        )
                    break
                if run.dist.stop_here(run.time_is_up(state, run_state._clock()), guard):
                    stopped = "time_limit"  # the budget ended with this epoch: evaluate it as the last one
                end_epoch(run, state, last=state.epoch + 1 == config.epochs or stopped != "done", guard=guard)
                if stopped == "time_limit" and run.log:
                    print(
                        f"time limit: {state.train_time_s / 60:.1f} min of training (max_minutes={config.max_minutes}) used up "
                        f"after epoch {state.epoch}",
                        flush=True,
                    )
        except StopRequested as stop:
            _save_on_stop(run, state, stop)
            if stop.signum == signal.SIGTERM:
                raise SystemExit(128 + signal.SIGTERM) from None
            raise
        except KeyboardInterrupt:
            _save_on_stop(run, state, None)
            raise
    return stopped


def _save_on_stop(run: Run, state: TrainState, stop: StopRequested | None) -> None:
    if not run.dist.is_main:
        return  # rank 0 saves and says so
    if stop is not None and stop.mid_step:
        print(
            f"\nstopped in the middle of step {state.step + 1}: {run.last_path} was not overwritten; run again with resume to "
            "continue from it",
            flush=True,
        )
        return
    save_last(run, state)
    print(f"\ninterrupted: saved {run.last_path} (step {state.step}); run again with resume to continue", flush=True)


def train(
    config: TrainConfig | str | None = None,
    corpus: "Corpus | None" = None,
    out_dir: str | os.PathLike | None = None,
    device: str | torch.device | None = None,
    resume: bool = True,
    progress: bool = True,
    max_minutes: float | None = None,
    max_steps: int | None = None,
    data_dir: str | os.PathLike | None = None,
    evaluate_test: bool = True,
    log: bool | None = None,
    tensorboard: bool | str | os.PathLike | None = None,
) -> dict:
    """Train a German→English Transformer on Multi30k and evaluate it.

    Each epoch: one pass over the shuffled training batches (:func:`train_step`),
    then the validation loss, and every ``eval_every`` epochs the validation BLEU
    of greedy decoding. ``out_dir`` (default ``runs/<name>``) receives ``last.pt``
    (everything needed to resume) after every epoch, ``best.pt`` (the weights with
    the best validation BLEU), ``history.json``, and at the end ``metrics.json``
    with the test BLEU of ``best.pt`` (beam ``config.beam_size``) and ``test_hypotheses.txt``.

    Nothing is lost and nothing untrue is recorded:

    - ``resume`` (default) continues the run in ``out_dir`` exactly where it stopped; it refuses other
      settings except the epochs, the time limit and the evaluation (a finished one in a read-only folder: its record).
    - Ctrl-C or SIGTERM stops at a step boundary and saves ``last.pt``: the resumed run is the uninterrupted one.
    - A NaN or infinite loss stops the run (:class:`DivergedError`) and keeps the last good checkpoint.
    - A second run in the same ``out_dir`` is refused (:class:`RunInUseError`).

    Under ``torchrun --nproc_per_node=N``, N processes share every batch (DDP, :mod:`.distributed`).

    Args:
        config: a :class:`TrainConfig`, a preset name, or ``None`` for :func:`compute_mode`'s preset.
        corpus: a prepared corpus (default: :func:`prepare_corpus_for` the config, from ``data_dir``).
        device: ``"cpu"``, ``"cuda"``, … (default: CUDA if available).
        progress: progress bars. ``log``: one line per epoch (default: as ``progress``).
        max_minutes: overrides ``config.max_minutes``; counts training time over every resumed call.
        max_steps: stop after this many updates (without the test); resume later.
        evaluate_test: run the final test (when the corpus has ``test_2016_flickr``).
        tensorboard: also log to TensorBoard (:mod:`.tensorboard`): ``True`` into ``<out_dir>/tensorboard``, or a
            folder. Needs the optional extra (``pip install "transformer-lessons[tensorboard]"``); refused without it.

    Returns:
        ``history``, ``step``, ``best_epoch``, ``best_val_bleu``, ``train_time_s``,
        ``stopped`` (``"done"``, ``"time_limit"`` or ``"max_steps"``), ``out_dir``,
        ``test`` (the scores, or ``None``) and ``metrics``.
    """
    config = get_train_config(config)
    config = config.replace(max_minutes=max_minutes) if max_minutes is not None else config
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
        raise ValueError(f"max_steps must be a whole number >= 1 or None, got {max_steps!r}")
    check_tensorboard(tensorboard)  # a missing extra is said before any data or training work
    quiet_in_notebooks()  # in a notebook, Ctrl-C ends with the saved-and-resume line, not a traceback
    with process_group(device) as (dist, device):  # under torchrun: this process's rank, its device, the process group
        if not dist.is_main:
            progress = log = False  # rank 0 speaks for the run
        log = progress if log is None else log
        out = Path(out_dir if out_dir is not None else default_out_dir(config.name))
        if (finished := run_state.finished_run_read_only(out, config, resume, evaluate_test, log)) is not None:
            return finished  # a read-only folder holding this run, finished: nothing to train or to write
        with main_only(dist, run_lock(make_out_dir(out))):  # one writer per run folder: rank 0
            _check_run_folder(out, config, dist, resume, log)
            last = out / "last.pt"
            saved = read_resumable(last, config, device) if resume and last.is_file() else None
            if corpus is None:
                corpus = prepare_corpus_for(config, data_dir, progress)
            check_corpus(corpus, config)
            run = build_run(config, corpus, out, device, dist, max_steps=max_steps, progress=progress, log=log)
            state = restore(run, saved) if saved is not None else TrainState()
            _say_resuming(last, state, config, say=saved is not None and log)
            log_dir = tensorboard_dir(tensorboard, out)
            run.writer = open_writer(log_dir, state.step) if log_dir is not None and dist.is_main else None
            try:
                stopped = train_epochs(run, state)
                return _finish(run, state, stopped, evaluate_test)
            finally:
                if run.writer is not None:
                    run.writer.close()


def _say_resuming(last: Path, state: TrainState, config: TrainConfig, say: bool) -> None:
    if not say:
        return
    if state.epoch >= config.epochs:  # nothing left to train: the test set is only scored again
        print(f"{last}: already finished ({state.epoch} epochs, step {state.step})", flush=True)
    else:
        print(f"resuming {last}: epoch {state.epoch + 1}, step {state.step}", flush=True)


def _check_run_folder(out: Path, config: TrainConfig, dist: Distributed, resume: bool, log: bool) -> None:
    """Before a run: rank 0 removes what cut-off saves left (and says so); no rank replaces an earlier run without last.pt."""
    said = remove_stale_temporary_files(out) if dist.is_main else None
    if said and log:
        print(said, flush=True)
    if resume:
        cut_short = remove_first_epoch_cut_short(out, config.to_dict()) if dist.is_main else None
        if cut_short and log:
            print(cut_short, flush=True)
        refuse_to_replace(out)


def _finish(run: Run, state: TrainState, stopped: str, evaluate_test: bool) -> dict:
    """What :func:`train` returns, after the final test when the run ended and the corpus has a test set."""
    result = {
        "history": state.history,
        "step": state.step,
        "best_epoch": state.best_epoch,
        "best_val_bleu": state.best_val_bleu if state.best_epoch is not None else None,
        "train_time_s": state.train_time_s,
        "stopped": stopped,
        "out_dir": str(run.out),
        "test": None,
    }
    if stopped != "max_steps" and evaluate_test and "test_2016_flickr" in run.corpus.text and run.dist.is_main:
        result["metrics"] = final_test(run, state, stopped)
        result["test"] = result["metrics"]["test_2016_flickr"]
        if run.writer is not None:
            log_test(run.writer, state.step, result["test"])
    return result


__all__ = ["build_run", "check_corpus", "end_epoch", "prepare_corpus_for", "run_epoch", "train", "train_epochs"]
