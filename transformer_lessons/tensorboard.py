"""TensorBoard logging for a training run: ``train(..., tensorboard=True)``.

TensorBoard is an optional extra (``pip install "transformer-lessons[tensorboard]"``):
the course itself needs only ``history.json`` and the plots of :mod:`transformer_lessons.viz`.
When asked for and missing, :func:`summary_writer_class` says how to install it,
before any data is read or any step trained.

What a run logs, every scalar at the global update step so that the curves line up:

- ``train/loss``: the label-smoothed loss of each update;
- ``train/lr``: the learning rate that update used (paper §5.3, Eq. 3);
- ``train/scheduled_sampling``: the probability of feeding predictions, when above 0;
- ``epoch/train_loss``: the epoch's mean training loss per target token;
- ``val/loss`` and ``val/ppl``: the validation loss and perplexity, every epoch;
- ``val/bleu``: the validation BLEU, on the epochs that compute it;
- ``test/bleu``: the final test sacreBLEU, at the last step.

Watch it with ``tensorboard --logdir runs/<name>/tensorboard``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from transformer_lessons.errors import TrainingError

#: The command that installs the extra (its name in pyproject.toml).
INSTALL_HINT = 'pip install "transformer-lessons[tensorboard]"'


class TensorBoardMissingError(TrainingError, ImportError):
    """``tensorboard=`` was asked for, but the ``tensorboard`` package is not installed."""


def summary_writer_class() -> type:
    """``torch.utils.tensorboard.SummaryWriter``, or :class:`TensorBoardMissingError` saying how to install it."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # optional: imported only when a run asks for TensorBoard
    except ImportError as err:
        raise TensorBoardMissingError(
            f"TensorBoard logging needs the tensorboard package, which is not installed: {INSTALL_HINT} "
            "(or pip install tensorboard), or train without tensorboard="
        ) from err
    return SummaryWriter


def _asked(tensorboard: bool | str | os.PathLike | None) -> bool:
    """Whether ``tensorboard=`` asks for logging; ``TypeError`` unless it is ``None``, ``False``, ``True`` or a folder."""
    if tensorboard is None or tensorboard is False:
        return False
    if not (tensorboard is True or isinstance(tensorboard, (str, os.PathLike))):
        raise TypeError(
            f"tensorboard must be None, True or a folder, got {type(tensorboard).__name__}: {tensorboard!r}"
        )
    return True


def check_tensorboard(tensorboard: bool | str | os.PathLike | None) -> None:
    """Refuse a ``tensorboard=`` of another type, or one that asks for logging while the package is missing."""
    if _asked(tensorboard):
        summary_writer_class()


def tensorboard_dir(tensorboard: bool | str | os.PathLike | None, out: Path) -> Path | None:
    """Where the events go: ``None``/``False`` nowhere, ``True`` ``<out>/tensorboard``, a path that folder."""
    if not _asked(tensorboard):
        return None
    return out / "tensorboard" if tensorboard is True else Path(tensorboard)


def open_writer(log_dir: Path, step: int) -> Any:
    """A ``SummaryWriter`` on ``log_dir`` for a run that has done ``step`` updates.

    A resumed run purges what an earlier call logged after its last checkpoint
    (steps above ``step``), so the curves show the run that was kept.
    """
    writer_class = summary_writer_class()
    return writer_class(log_dir=str(log_dir), purge_step=step + 1 if step else None)


def log_step(writer: Any, step: int, loss: float, lr: float, scheduled_sampling: float = 0.0) -> None:
    """One update's scalars: ``train/loss``, ``train/lr`` (and ``train/scheduled_sampling`` when used)."""
    writer.add_scalar("train/loss", loss, step)
    writer.add_scalar("train/lr", lr, step)
    if scheduled_sampling:
        writer.add_scalar("train/scheduled_sampling", scheduled_sampling, step)


def log_epoch(writer: Any, entry: dict) -> None:
    """An epoch's entry of the history at its last step: training loss, validation loss, perplexity, BLEU."""
    step = entry["step"]
    writer.add_scalar("epoch/train_loss", entry["train_loss"], step)
    writer.add_scalar("val/loss", entry["val_loss"], step)
    writer.add_scalar("val/ppl", entry["val_ppl"], step)
    if entry.get("val_bleu") is not None:
        writer.add_scalar("val/bleu", entry["val_bleu"], step)
    writer.flush()


def log_test(writer: Any, step: int, test: dict) -> None:
    """The final test's sacreBLEU as ``test/bleu`` at the run's last step."""
    writer.add_scalar("test/bleu", test["bleu"], step)
    writer.flush()


__all__ = [
    "INSTALL_HINT",
    "TensorBoardMissingError",
    "check_tensorboard",
    "log_epoch",
    "log_step",
    "log_test",
    "open_writer",
    "summary_writer_class",
    "tensorboard_dir",
]
