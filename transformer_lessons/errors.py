"""The errors the package raises on purpose, each with a message that says what to do.

They are ``RuntimeError`` subclasses, so older code that caught ``RuntimeError``
still catches them. The command line turns each into one line on stderr; in
IPython and Jupyter each draws itself as that message alone, in red
(:meth:`CourseError._render_traceback_`), not as a chained traceback through the
package whose last line was the only one that said what to do.
"""

from __future__ import annotations

import textwrap

_RED, _BOLD, _RESET = "\x1b[31m", "\x1b[1m", "\x1b[0m"  # ANSI colours: JupyterLab and terminals draw them
_WIDTH = 100  # wrap the message so it reads in a notebook column


class CourseError(RuntimeError):
    """Base of the errors below: something the learner or teacher can fix, and the message says how."""

    def _render_traceback_(self) -> list[str]:
        """IPython's hook: the lines shown instead of the traceback, ``DataError: <message>``, wrapped, in red.

        IPython calls it for an exception that has it, and shows nothing else, so the
        errors this one was raised ``from`` (a ``URLError`` deep in ``urllib``) stay
        out of sight. Plain Python and pytest print the usual traceback.
        """
        name = type(self).__name__
        lines: list[str] = []
        for paragraph in f"{name}: {self}".split("\n"):
            lines += textwrap.wrap(
                paragraph, _WIDTH, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
            ) or [""]
        lines[0] = f"{_BOLD}{name}:{_RESET}{_RED}{lines[0][len(name) + 1 :]}"
        return [f"{_RED}{line}{_RESET}" for line in lines]  # each line coloured on its own: a renderer may split them


class DataError(CourseError):
    """Multi30k (or a cached file made from it) is missing, unreadable or corrupt."""


class CheckpointError(CourseError):
    """A checkpoint is missing, unreadable, not finite, or does not fit the model; the message says what differs."""


class TrainingError(CourseError):
    """A training run stopped or refused to start; nothing was lost (the message says what was kept)."""


class DivergedError(TrainingError):
    """The loss (or the gradient) became NaN or infinite: the run stopped before the weights were changed."""


class RankLostError(TrainingError):
    """Under torchrun, another process of the run stopped (or could not be reached), so this one stopped too."""


class RunInUseError(TrainingError):
    """Another training run is writing to the same output folder."""


class ResumeMismatchError(TrainingError):
    """``resume`` found a run in the output folder that was trained with other settings."""


__all__ = [
    "CheckpointError",
    "CourseError",
    "DataError",
    "DivergedError",
    "RankLostError",
    "ResumeMismatchError",
    "RunInUseError",
    "TrainingError",
]
