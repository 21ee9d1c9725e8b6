"""The learner's progress: what the checks saw on this machine, one call to see it all.

Every ``check_*`` records its verdict for its exercise when it runs: ``pass``,
``fail`` or ``stub`` (still the stub raising NotImplementedError), with the time.
The record is a small JSON file, ``progress.json`` in the user's own cache folder
(:func:`transformer_lessons.data.files.user_cache_dir`: never the ``classroom/cache`` of a
prepared course folder, whose copies every learner gets), or the file named by
``$TRANSFORMER_LESSONS_PROGRESS``. It is written atomically (:mod:`.atomic`) while a lock
file beside it is held, so that two kernels checking at once keep both verdicts; it is never
sent anywhere, and a file that cannot be read or written never breaks a check: the check
says so in one line, once, and goes on.

``progress()`` lists every exercise of the course (:data:`.exercises.EXERCISES`,
in notebook order) with ✔ (passed), ✘ (failed), … (still a stub) or "not started",
as a table in Jupyter and as plain text elsewhere. ``reset_progress()`` deletes the
record (or delete the file it names).
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from transformer_lessons.atomic import atomic_write_json
from transformer_lessons.data.files import user_cache_dir
from transformer_lessons.exercises import EXERCISES
from transformer_lessons.rundir import try_lock

PROGRESS_ENV = "TRANSFORMER_LESSONS_PROGRESS"
FILE_NAME = "progress.json"
STATUSES = ("pass", "fail", "stub")
MARKS = {"pass": "✔ passed", "fail": "✘ failed", "stub": "… stub", None: "not started"}
LOCK_WAIT_S = 5.0  # how long a check waits for another kernel's write before it writes anyway

_warned: set[str] = set()  # problems already reported once in this process


def progress_file() -> Path:
    """Where the record lives: ``$TRANSFORMER_LESSONS_PROGRESS``, else ``<user_cache_dir>/progress.json``."""
    env = os.environ.get(PROGRESS_ENV, "").strip()
    return Path(env).expanduser() if env else user_cache_dir() / FILE_NAME


def _say_once(key: str, line: str) -> None:
    if key not in _warned:
        _warned.add(key)
        print(line)


def _read(path: Path) -> dict[str, Any]:
    """The recorded exercises ({name: {"status", "when"}}); {} for a missing file, {} and one line for a bad one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        exercises = data["exercises"]
        if not isinstance(exercises, dict):
            raise TypeError("'exercises' is not an object")
        return {k: v for k, v in exercises.items() if isinstance(v, dict) and v.get("status") in STATUSES}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError) as error:
        _say_once(f"read {path}", f"(progress: could not read {path} ({type(error).__name__}); starting a new record)")
        return {}


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold ``<path>.lock`` while reading and rewriting the record: another kernel's verdict cannot be lost between
    the two. Waits at most LOCK_WAIT_S for it; where no lock can be had (a read-only folder), goes on without."""
    try:
        handle = open(path.with_name(path.name + ".lock"), "a+", encoding="utf-8")
    except OSError:
        yield
        return
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while not try_lock(handle) and time.monotonic() < deadline:
            time.sleep(0.01)
        yield
    finally:
        handle.close()  # closing releases the lock


def record(name: str, status: str) -> None:
    """Record one check's verdict; never raises (a failure to write is said in one line, once)."""
    try:
        path = progress_file()
        if path.is_dir():
            _say_once(
                "folder",
                f"(progress not saved: {path} is a folder; set {PROGRESS_ENV} to a file name, "
                f"such as {path / FILE_NAME})",
            )
            return
        with _locked(path):
            exercises = _read(path)
            when = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
            exercises[name] = {"status": status, "when": when}
            atomic_write_json(path, {"version": 1, "exercises": exercises})
    except Exception as error:  # noqa: BLE001 - a progress note must never break a check
        _say_once("write", f"(progress not saved: {type(error).__name__}: {error})")


def reset_progress() -> None:
    """Forget every recorded verdict on this machine (delete the progress file)."""
    progress_file().unlink(missing_ok=True)


class Progress:
    """The course's exercises with what the checks saw: a table in Jupyter, plain text elsewhere."""

    def __init__(self, rows: list[tuple[str, str, str | None, str]], path: Path) -> None:
        self.rows = rows  # (notebook, exercise, status or None, when)
        self.path = path

    def counts(self) -> dict[str | None, int]:
        return {s: sum(1 for r in self.rows if r[2] == s) for s in (*STATUSES, None)}

    def summary(self) -> str:
        c = self.counts()
        return (
            f"{c['pass']} of {len(self.rows)} exercises passed, {c['fail']} failed, {c['stub']} still a stub, "
            f"{c[None]} not started"
        )

    def __str__(self) -> str:
        width = max(len(r[1]) for r in self.rows)
        lines = [f"{'notebook':<40} {'exercise':<{width}}  {'status':<12} when"]
        lines += [
            f"{nb:<40} {name:<{width}}  {MARKS[status]:<12} {when}".rstrip() for nb, name, status, when in self.rows
        ]
        return "\n".join([*lines, self.summary()])

    __repr__ = __str__

    def _repr_html_(self) -> str:
        cells = "".join(
            f"<tr><td>{html.escape(nb)}</td><td><code>{html.escape(name)}</code></td>"
            f"<td>{html.escape(MARKS[status])}</td><td>{html.escape(when)}</td></tr>"
            for nb, name, status, when in self.rows
        )
        return (
            "<table><thead><tr><th>notebook</th><th>exercise</th><th>status</th><th>when</th></tr></thead>"
            f"<tbody>{cells}</tbody></table><p>{html.escape(self.summary())}</p>"
        )


def progress() -> Progress:
    """Every exercise of the course, in notebook order, with ✔ / ✘ / stub / not started and when it was checked."""
    path = progress_file()
    seen = _read(path)
    rows = []
    for exercise in EXERCISES:
        entry = seen.get(exercise.name, {})
        when = str(entry.get("when", ""))[:16].replace("T", " ")
        rows.append((exercise.notebook, exercise.name, entry.get("status"), when))
    return Progress(rows, path)


__all__ = ["PROGRESS_ENV", "Progress", "progress", "progress_file", "record", "reset_progress"]
