"""A training run's output folder: where it is, and the lock that lets only one run write to it.

Two runs writing ``last.pt`` in one folder would each report success while
overwriting the other's checkpoints. :func:`run_lock` makes the second one stop
at once with a message naming the first. The lock is an operating-system lock on
``<out>/.run.lock`` (``fcntl.flock``, or ``msvcrt.locking`` on Windows): it is
released when the run ends, and also when its process dies, so a crash never
leaves a folder locked.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from transformer_lessons.errors import RunInUseError, TrainingError

LOCK_NAME = ".run.lock"


def default_out_dir(name: str) -> Path:
    """Where a run named ``name`` writes by default: ``runs/<name>`` under the current directory
    (or under ``$TRANSFORMER_LESSONS_RUNS``)."""
    return Path(os.environ.get("TRANSFORMER_LESSONS_RUNS", "runs")) / name


def make_out_dir(out: str | os.PathLike) -> Path:
    """Create the output folder ``out``; a file of that name, or a folder that cannot be made, raises :class:`TrainingError`."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise TrainingError(f"the output folder {out} is a file: choose a folder for the run's checkpoints (or remove the file)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise TrainingError(f"cannot create the output folder {out}: {err.strerror or err}") from err
    return out


def _try_lock(handle) -> bool:
    try:
        import fcntl

        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
    except ImportError:  # Windows
        import msvcrt

        try:
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False


@contextmanager
def run_lock(out: str | os.PathLike) -> Iterator[Path]:
    """Hold the lock of the output folder ``out`` for the ``with`` block.

    Raises:
        RunInUseError: another run (in this process or another) holds it.
    """
    path = Path(out) / LOCK_NAME
    handle = open(path, "a+", encoding="utf-8")
    try:
        if not _try_lock(handle):
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise RunInUseError(
                f"another training run ({holder}) is writing to {out}: wait for it to finish, stop it, "
                "or give this run another output folder (out_dir=..., command line --out)"
            )
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        yield path
    finally:
        handle.close()  # closing releases the lock


__all__ = ["LOCK_NAME", "default_out_dir", "make_out_dir", "run_lock"]
