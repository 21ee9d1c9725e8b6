"""Checkpoint averaging: translate with the mean of the last few checkpoints' weights.

Paper §6.1: "For the base models, we used a single model obtained by averaging the last 5
checkpoints, which were written at 10-minute intervals." Late in training the weights wander
around a minimum from one save to the next; their mean sits nearer its centre than any one of
them, and often translates a little better. It costs nothing at training time, only the disk
for the saves being averaged.

A run with ``TrainConfig.average_last = N`` (N > 1) keeps the weights of its last N epochs in
``<out>/epochs/epoch_NNN.pt`` (:func:`save_epoch_weights`), and its final test scores
``averaged.pt``, their mean (:func:`average_last_epochs`), instead of ``best.pt``. The
course's runs default to ``average_last = 1``: no averaging, the epoch with the best
validation BLEU, which is what notebook 10 teaches.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from transformer_lessons.checkpoint import save_checkpoint
from transformer_lessons.errors import CheckpointError

EPOCHS_DIR = "epochs"  # inside a run's folder
_NAME = re.compile(r"^epoch_(\d+)\.pt$")


def epoch_weights_path(out: str | Path, epoch: int) -> Path:
    """Where a run in ``out`` keeps the weights of ``epoch`` (1-based): ``out/epochs/epoch_007.pt``."""
    return Path(out) / EPOCHS_DIR / f"epoch_{epoch:03d}.pt"


def saved_epochs(out: str | Path) -> list[int]:
    """The epochs whose weights ``out/epochs`` holds, in order."""
    folder = Path(out) / EPOCHS_DIR
    found = (_NAME.match(p.name) for p in folder.iterdir()) if folder.is_dir() else ()
    return sorted(int(m[1]) for m in found if m)


def save_epoch_weights(out: str | Path, epoch: int, model: nn.Module, keep: int) -> Path:
    """Save ``model``'s weights as ``epoch``'s (atomically), then delete all but the last ``keep`` epochs' files."""
    path = epoch_weights_path(out, epoch)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint({"epoch": epoch, "model": model.state_dict()}, path)
    for old in saved_epochs(out)[:-keep]:
        epoch_weights_path(out, old).unlink(missing_ok=True)
    return path


def average_state_dicts(states: Sequence[dict]) -> dict:
    """The element-wise mean of state dicts of one architecture.

    Floating-point tensors are summed in float32 and returned in their own dtype; any
    other tensor (a step counter, a bool buffer) must be the same in every state and is
    kept as it is.

    Raises:
        ValueError: no states, or states whose names or shapes differ.
    """
    if not states:
        raise ValueError("nothing to average: give at least one state dict")
    first = states[0]
    for i, state in enumerate(states[1:], start=1):
        if state.keys() != first.keys() or any(state[k].shape != first[k].shape for k in first):
            raise ValueError(f"state {i} is not of the same model as state 0 (other names or shapes)")
    mean = {}
    for name, tensor in first.items():
        if torch.is_floating_point(tensor):
            total = sum(s[name].float() for s in states)
            mean[name] = (total / len(states)).to(tensor.dtype)
        elif all(torch.equal(s[name], tensor) for s in states):
            mean[name] = tensor.clone()
        else:
            raise ValueError(f"{name} is not a float and differs between the states: it cannot be averaged")
    return mean


def average_last_epochs(out: str | Path, n: int) -> tuple[dict, list[int]]:
    """The mean of the weights of the last ``n`` epochs saved in ``out``, and which epochs those are.

    Raises:
        CheckpointError: a saved file is not readable (it names the file).
    """
    epochs = saved_epochs(out)[-n:]
    states = []
    for epoch in epochs:
        path = epoch_weights_path(out, epoch)
        try:
            states.append(torch.load(path, map_location="cpu", weights_only=True)["model"])
        except Exception as err:  # a damaged file: torch raises many kinds
            raise CheckpointError(
                f"{path}: cannot be read to average ({err}); delete it and the run averages the others"
            ) from err
    return average_state_dicts(states), epochs


__all__ = [
    "EPOCHS_DIR",
    "average_last_epochs",
    "average_state_dicts",
    "epoch_weights_path",
    "save_epoch_weights",
    "saved_epochs",
]
