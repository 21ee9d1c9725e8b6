"""What a learner sees while a check runs and when it fails.

* :func:`render` draws a failing check as a few red lines, the diagnosis alone.
  :class:`~transformer_lessons.checks.common.ExerciseError` hands them to IPython
  through its ``_render_traceback_`` method, IPython's documented hook for an
  exception that draws itself: Jupyter then shows those lines instead of ~30 lines
  of traceback through the check's own code. Outside IPython (plain Python,
  pytest) the traceback is the usual one.
* :func:`is_stub` tells the learner's own ``raise NotImplementedError(...)`` (an
  open exercise: "not implemented yet") from a NotImplementedError that PyTorch
  raises inside their code (``&`` between a float and a bool tensor, an op a
  dtype lacks): that one is a bug to report.
* :func:`where_in_learner_code` names the line of the learner's code an error
  came from, skipping PyTorch's, the standard library's and this package's frames.
* :func:`still_checking` prints a line every few seconds while a slow answer runs,
  so a long silence never looks like a hang.
"""

from __future__ import annotations

import contextlib
import contextvars
import dis
import functools
import linecache
import os
import sysconfig
import textwrap
import threading
import time
from types import TracebackType
from typing import Iterator

import torch

# ANSI colours: JupyterLab and terminals draw them in error output.
_RED, _BOLD, _RESET = "\x1b[31m", "\x1b[1m", "\x1b[0m"
_WIDTH = 100  # wrap the diagnosis so it reads in a narrow notebook column

# A check still running after this many seconds says so, then again every _SLOW_EVERY_S (tests shorten both).
_SLOW_AFTER_S = 5.0
_SLOW_EVERY_S = 15.0


def render(message: str) -> list[str]:
    """The lines shown for a failing check: ``✘ name: diagnosis``, wrapped, in red.

    ``message`` is the error's plain text, ``"<exercise>: <what is wrong, the likely
    bug, the fix>"``, possibly with indented follow-up lines (``  hint: ...``,
    ``  at line 3 of your `forward`:``); each keeps its indentation when wrapped,
    and a line indented by 4 or more (the learner's line of code) is not wrapped.
    """
    name, sep, diagnosis = message.partition(": ")
    head = f"✘ {name}: " if sep else "✘ "
    body = diagnosis if sep else message
    lines: list[str] = []
    for i, paragraph in enumerate(body.split("\n")):
        indent = " " * (len(paragraph) - len(paragraph.lstrip()))
        text = (head if i == 0 else "") + paragraph.strip()
        if len(indent) >= 4:  # code: wrapping it would break it
            lines.append(indent + text)
            continue
        wrapped = textwrap.wrap(
            text,
            _WIDTH,
            initial_indent=indent,
            subsequent_indent=indent + "  ",
            break_long_words=False,
            break_on_hyphens=False,
        ) or [indent]
        lines += wrapped
    # Bold for the exercise's name, red for every line (each line coloured on its own: a renderer may split them).
    first = lines[0]
    if first.startswith(head):
        first = f"{_BOLD}{head}{_RESET}{_RED}{first[len(head) :]}"
    return [f"{_RED}{first}{_RESET}"] + [f"{_RED}{line}{_RESET}" for line in lines[1:]]


@functools.lru_cache(maxsize=1)
def _library_dirs() -> tuple[str, ...]:
    """Folders whose code is not the learner's: PyTorch, this package, the standard library, site-packages."""
    paths = sysconfig.get_paths()
    dirs = [os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    dirs += [paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths]
    return tuple(sorted({os.path.realpath(d) + os.sep for d in dirs}))


def _is_library(filename: str) -> bool:
    if filename.startswith("<"):  # "<string>", "<ipython-input-...>": typed by someone, so the learner's
        return False
    path = os.path.realpath(filename)
    return any(path.startswith(d) for d in _library_dirs())


def _last(tb: TracebackType) -> TracebackType:
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def is_stub(error: NotImplementedError) -> bool:
    """Was ``error`` raised by a ``raise NotImplementedError`` statement in the learner's own code?

    The raising frame must be the learner's (not PyTorch's, whose C++ ops raise
    NotImplementedError for unsupported dtypes, nor nn.Module's missing ``forward``)
    and its current instruction a ``raise``, not a call or an operator.
    """
    if error.__traceback__ is None:
        return False
    tb = _last(error.__traceback__)
    code = tb.tb_frame.f_code
    if _is_library(code.co_filename):
        return False
    for instruction in dis.get_instructions(code):
        if instruction.offset == tb.tb_lasti:
            return instruction.opname == "RAISE_VARARGS"
    line = linecache.getline(code.co_filename, tb.tb_lineno).strip()  # unknown bytecode layout: read the line
    return line.startswith("raise NotImplementedError")


def is_missing_forward(error: NotImplementedError) -> bool:
    """nn.Module's placeholder raised it: the learner's class has no ``forward`` method."""
    return (
        error.__traceback__ is not None
        and _last(error.__traceback__).tb_frame.f_code.co_name == "_forward_unimplemented"
    )


def where_in_learner_code(error: BaseException) -> str:
    """Where in the learner's code ``error`` was raised (its deepest learner frame), or ``""``.

    Two lines, ready to follow a message: ``"  at line 7 of your `forward`:"`` and
    the line of code, indented by 6.
    """
    found = None
    tb = error.__traceback__
    while tb is not None:
        if not _is_library(tb.tb_frame.f_code.co_filename):
            found = tb
        tb = tb.tb_next
    if found is None:
        return ""
    code = found.tb_frame.f_code
    source = linecache.getline(code.co_filename, found.tb_lineno).strip()
    return f"  at line {found.tb_lineno} of your `{code.co_name}`" + (f":\n      {source}" if source else "")


@contextlib.contextmanager
def still_checking(name: str) -> Iterator[None]:
    """While the block runs, print ``… still checking <name> (N s)`` after a few seconds, then now and then."""
    stop = threading.Event()
    start = time.monotonic()

    def tick() -> None:
        wait = _SLOW_AFTER_S
        while not stop.wait(wait):
            print(
                f"… still checking {name} ({time.monotonic() - start:.0f} s): your code is slow, or stuck in a "
                "loop? Interrupt the kernel (■) to stop it",
                flush=True,
            )
            wait = _SLOW_EVERY_S

    # copy_context: in Jupyter the thread's prints then go to the cell that runs the check.
    thread = threading.Thread(target=contextvars.copy_context().run, args=(tick,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
