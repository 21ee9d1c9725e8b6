"""Stopping a training run with Ctrl-C or SIGTERM without losing or bending anything.

A signal that arrives in the middle of a training step would leave the run in a
state no uninterrupted run passes through: the dropout random numbers half drawn,
the weights updated but the step not counted. :class:`StepBoundary` holds such a
signal back until the step in progress has ended; outside a step (batching,
validation, saving) it stops the run at once. Either way the run stops between
two steps, so the saved ``last.pt`` resumes into exactly the run that was not
interrupted. A second Ctrl-C during a step stops it at once (the step is then
lost, and ``last.pt`` is not overwritten).
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

#: The signals a run stops on: Ctrl-C (a notebook's "interrupt the kernel" too) and SIGTERM (``kill``, a job scheduler).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequested(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped the run; ``mid_step`` is True when it cut a step short (a second Ctrl-C)."""

    def __init__(self, signum: int, mid_step: bool = False):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.mid_step = mid_step


class StepBoundary:
    """``with StepBoundary() as guard: ... with guard.step(): <one training step>``.

    Outside the main thread (where Python cannot install signal handlers) it does
    nothing, and a run stops as Python's default would.
    """

    def __init__(self) -> None:
        self.pending: int | None = None
        self._in_step = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "StepBoundary":
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                if signal.getsignal(signum) is signal.SIG_IGN:
                    continue  # ignored on purpose (a job started in the background with '&' ignores Ctrl-C): keep it so
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame) -> None:
        if self._in_step and self.pending is None:
            self.pending = signum  # let the step finish
            return
        raise StopRequested(signum, mid_step=self._in_step)

    @contextmanager
    def step(self) -> Iterator[None]:
        """The block of one training step: a signal during it takes effect when it ends."""
        self._in_step = True
        try:
            yield
        finally:
            self._in_step = False
        self._after_step()

    def _after_step(self) -> None:
        """A signal held back during the step stops the run now."""
        if self.pending is not None:
            signum, self.pending = self.pending, None
            raise StopRequested(signum)


def quiet_in_notebooks() -> None:
    """In IPython or Jupyter, show a :class:`StopRequested` as one line, not as a traceback.

    The run has already said what it saved and how to go on ("interrupted: saved ... run again with resume");
    the 40 red lines of frames that IPython would print after it look like a crash, and are not one. The cell
    still ends as interrupted (Run All stops there). Outside IPython this does nothing. IPython is imported
    only when it is already loaded, so a command-line run pays nothing.
    """
    import sys

    if "IPython" not in sys.modules:
        return
    shell = sys.modules["IPython"].get_ipython()
    if shell is None:
        return

    def one_line(shell, etype, value, tb, tb_offset=None):
        where = "in the middle of a step" if getattr(value, "mid_step", False) else "between two steps"
        print(f"training stopped by {value} {where} (not an error)")

    shell.set_custom_exc((StopRequested,), one_line)


__all__ = ["STOP_SIGNALS", "StepBoundary", "StopRequested", "quiet_in_notebooks"]
