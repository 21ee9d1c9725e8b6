"""The errors the package raises on purpose, each with a message that says what to do.

They are ``RuntimeError`` subclasses, so older code that caught ``RuntimeError``
still catches them. The command line turns each into one line on stderr.
"""

from __future__ import annotations


class DataError(RuntimeError):
    """Multi30k (or a cached file made from it) is missing, unreadable or corrupt."""


class CheckpointError(RuntimeError):
    """A checkpoint is missing, unreadable, not finite, or does not fit the model; the message says what differs."""


class TrainingError(RuntimeError):
    """A training run stopped or refused to start; nothing was lost (the message says what was kept)."""


class DivergedError(TrainingError):
    """The loss (or the gradient) became NaN or infinite: the run stopped before the weights were changed."""


class RunInUseError(TrainingError):
    """Another training run is writing to the same output folder."""


class ResumeMismatchError(TrainingError):
    """``resume`` found a run in the output folder that was trained with other settings."""


__all__ = ["CheckpointError", "DataError", "DivergedError", "ResumeMismatchError", "RunInUseError", "TrainingError"]
