"""A training run's output folder: where it is, and the lock that lets only one run write to it.

Runs go to one ``runs/`` folder: in a clone of the course, the one at the
repository's top level, wherever the notebook or command runs (a notebook runs
in ``notebooks/`` or ``learner/``, and its runs must not land among the lessons);
elsewhere, ``./runs``. ``$TRANSFORMER_LESSONS_RUNS`` overrides both.

Two runs writing ``last.pt`` in one folder would each report success while
overwriting the other's checkpoints. :func:`run_lock` makes the second one stop
at once with a message naming the first. The lock is an operating-system lock on
``<out>/.run.lock`` (``fcntl.flock``, or ``msvcrt.locking`` on Windows): it is
released when the run ends, and also when its process dies, so a crash never
leaves a folder locked.

Holding the lock, a run removes the temporary files that a killed save left
(:func:`remove_stale_temporary_files`), and it refuses to start over in a folder
whose earlier run lacks ``last.pt`` unless told to (:func:`refuse_to_replace`).
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from transformer_lessons.atomic import temporary_writer
from transformer_lessons.errors import RunInUseError, TrainingError

try:
    import tomllib  # Python 3.11+
except ModuleNotFoundError:  # Python 3.10: a clone is still found by its .git folder
    tomllib = None

LOCK_NAME = ".run.lock"
RUNS_ENV = "TRANSFORMER_LESSONS_RUNS"  # a folder for every run, instead of the repository's runs/
PROJECT_NAME = "transformer-lessons"  # pyproject.toml's [project] name: how a clone of the course is recognised


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503: transformer_lessons == Transformer-Lessons


def _is_course_root(folder: Path) -> bool:
    """``folder`` is the top of a clone: the package beside ``.git``, or this project's ``pyproject.toml``."""
    if (folder / ".git").exists() and (folder / "transformer_lessons").is_dir():
        return True
    pyproject = folder / "pyproject.toml"
    if tomllib is None or not pyproject.is_file():
        return False
    try:
        name = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("name", "")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return isinstance(name, str) and _normalized(name) == PROJECT_NAME


def course_root(start: str | os.PathLike | None = None) -> Path | None:
    """The top folder of the clone of the course that holds ``start`` (default: the current directory), or None."""
    folder = Path(start if start is not None else Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        if _is_course_root(candidate):
            return candidate
    return None


def default_out_dir(name: str) -> Path:
    """Where a run named ``name`` writes by default.

    ``$TRANSFORMER_LESSONS_RUNS/<name>`` when that is set; else, inside a clone of
    the course, ``runs/<name>`` at the repository's top level (given relative to the
    current directory, e.g. ``../runs/quick`` from ``notebooks/``, so that a printed
    path names no folder of this machine); else ``runs/<name>`` here.
    """
    chosen = os.environ.get(RUNS_ENV, "")
    if chosen:
        return Path(chosen) / name
    root = course_root()
    if root is None:
        return Path("runs") / name
    try:
        return Path(os.path.relpath(root / "runs", Path.cwd().resolve())) / name
    except ValueError:  # Windows: the clone is on another drive than the current directory
        return root / "runs" / name


def make_out_dir(out: str | os.PathLike) -> Path:
    """Create the output folder ``out``; a file of that name, or a folder that cannot be made, raises :class:`TrainingError`."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise TrainingError(
            f"the output folder {out} is a file: choose a folder for the run's checkpoints (or remove the file)"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise TrainingError(f"cannot create the output folder {out}: {err.strerror or err}{_WAY_OUT}") from err
    return out


#: What to do when a run's folder cannot be written (a shared, read-only course install, a full disk).
_WAY_OUT = (
    f"; give the run a folder you can write: out_dir=... in a notebook, --out DIR on the command line, "
    f"or {RUNS_ENV}=<folder> for every run"
)


def try_lock(handle) -> bool:
    """Take the exclusive lock of an open file without waiting (fcntl, or msvcrt on Windows); whether it was taken."""
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
    try:
        handle = open(path, "a+", encoding="utf-8")
    except PermissionError as err:  # a read-only folder: the run could write nothing there either
        raise TrainingError(f"cannot write in the run's folder {out}: {err.strerror or err}{_WAY_OUT}") from err
    try:
        if not try_lock(handle):
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


def _is_running(pid: int) -> bool:
    """Whether process ``pid`` exists. This one, holding the lock, writes nothing in the folder yet; Windows is not
    asked (``os.kill(pid, 0)`` would send Ctrl-C there), and a file another process holds open cannot be removed there."""
    if os.name == "nt" or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)  # signal 0: no signal, only the question
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists, as another user's
        return True
    return True


#: What a run writes besides last.pt, which a run that starts over in the same folder replaces.
RUN_RECORDS = ("best.pt", "history.json", "metrics.json", "test_hypotheses.txt")


def refuse_to_replace(out: str | os.PathLike) -> None:
    """Refuse to start over (no ``last.pt`` to resume) in a folder that holds an earlier run's records.

    Without ``last.pt`` (deleted, moved, never copied) ``resume`` has nothing to
    continue, and a fresh run would overwrite ``best.pt`` and ``history.json``
    at its first epoch. Starting over there must be asked for: ``resume=False``.

    Raises:
        TrainingError: naming what is there and what to do.
    """
    out = Path(out)
    found = [name for name in RUN_RECORDS if (out / name).exists()]
    if found and not (out / "last.pt").is_file():
        listed = found[0] if len(found) == 1 else f"{', '.join(found[:-1])} and {found[-1]}"
        raise TrainingError(
            f"{out} holds {listed} of an earlier run but no last.pt to resume it from: a new run would replace them. "
            "Move them (or the folder) away, or give this run another output folder (out_dir=..., command line --out); "
            "to start over there and replace them, pass resume=False (command line --no-resume)"
        )


def remove_stale_temporary_files(out: str | os.PathLike) -> str | None:
    """Remove what saves cut off (a killed process, a power cut) left in the run folder ``out``; call it holding :func:`run_lock`.

    Only files named as the atomic writer names its temporary files
    (:data:`~transformer_lessons.atomic.TEMPORARY_NAME`, ``.last.pt.<pid>.<hex>.tmp``),
    directly in ``out``, whose process is no longer running: the lock makes this
    run the folder's only writer, and a writer still running keeps its file.

    Returns:
        One line saying what was removed, or None when nothing was.
    """
    removed = []
    for path in sorted(Path(out).iterdir()):
        pid = temporary_writer(path)
        if pid is None or not path.is_file() or path.is_symlink() or _is_running(pid):
            continue
        try:
            size = path.stat().st_size
            path.unlink()
        except OSError:  # gone already, or held open (Windows): leave it
            continue
        removed.append((path.name, size))
    if not removed:
        return None
    names = ", ".join(name for name, _ in removed[:3]) + (" …" if len(removed) > 3 else "")
    return (
        f"removed {len(removed)} temporary file(s) that a cut-off save left in {out} ({names}; "
        f"{sum(size for _, size in removed) / 1e6:.1f} MB); the checkpoints were not touched"
    )


__all__ = [
    "LOCK_NAME",
    "RUN_RECORDS",
    "course_root",
    "default_out_dir",
    "make_out_dir",
    "refuse_to_replace",
    "remove_stale_temporary_files",
    "run_lock",
    "try_lock",
]
