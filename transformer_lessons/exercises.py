"""The course's exercises, in notebook order, and the hints a learner asks for one at a time.

Every exercise has one check (``check_<name>`` in :mod:`transformer_lessons.checks`)
and three hints, written once in :mod:`transformer_lessons.exercise_hints`:

1. the concept and where to look (the paper's section, the notebook's section);
2. the approach, in words;
3. the exact fix: the lines to write.

``hint("noam_rate")`` (or ``hint(check_noam_rate)``, or ``hint()`` for the exercise
checked last) prints the next level each time it is called. A failing check names
the bug and the concept and ends with ``more help: hint('<name>')``; when it
recognised a known bug and kept its fix back, the levels keep their order, the first
two say so, and the third starts with that bug's own fix (the code the check kept back).

The stub of an exercise says what to return (its goal, from the ``# BEGIN SOLUTION:``
line of the notebook); nothing on screen shows the solution's code until the
learner asks for it here or unfolds *Show a solution*.

What :func:`transformer_lessons.progress.progress` lists comes from
:data:`EXERCISES` too; a test keeps it equal to the notebooks' stubs and checks.
This module imports nothing heavy: no torch.
"""

from __future__ import annotations

import difflib
from typing import Any, Callable

from transformer_lessons.exercise_hints import EXERCISES, Exercise  # the list, written once

_BY_NAME = {exercise.name: exercise for exercise in EXERCISES}
LEVELS = 3

# What this Python process has shown: the hint level per exercise, and each exercise's last failure.
_shown: dict[str, int] = {}
_failures: dict[str, dict[str, Any]] = {}
_last: list[str] = []  # the exercise checked last, for hint() without an argument


def exercise(name: str) -> Exercise:
    """The exercise called ``name`` (``"noam_rate"``); KeyError naming the closest ones (or all) otherwise.

    A name typed with other case, spaces, quotes, ``check_`` in front or ``()`` behind is found.
    """
    typed = name.strip().strip("'\"`").strip().lower().replace(" ", "_").replace("-", "_")
    typed = typed.removeprefix("check_").removesuffix("()")
    if (found := _BY_NAME.get(name) or _BY_NAME.get(typed)) is not None:
        return found
    if close := difflib.get_close_matches(typed, list(_BY_NAME), n=3, cutoff=0.6):
        raise KeyError(f"no exercise called {name!r}; did you mean {' or '.join(repr(c) for c in close)}?")
    raise KeyError(f"no exercise called {name!r}; the exercises are: {', '.join(_BY_NAME)}")


def more_help(name: str) -> str:
    """The line a failing check ends with."""
    return f"  more help: hint('{name}')"


def checked(name: str, failure: str | None = None, fixes: tuple[str, ...] = ()) -> None:
    """Remember that ``name`` was just checked, and how it failed (the message and the fixes kept back), if it did."""
    _last[:] = [name]
    if failure is None:
        _failures.pop(name, None)
    else:
        _failures[name] = {"message": failure, "fixes": tuple(fixes), "shown": False}


def _name_of(what: str | Callable[..., Any] | None) -> str:
    if what is None:
        if not _last:
            raise ValueError("hint() needs the exercise's name until a check has run, e.g. hint('noam_rate')")
        return _last[0]
    if callable(what):
        what = getattr(what, "__name__", "")
    return exercise(str(what).removeprefix("check_")).name  # a name that is no exercise says so


def hint_text(what: str | Callable[..., Any] | None = None) -> str:
    """The next hint for an exercise, as :func:`hint` prints it (and advance to the one after).

    After a failing check that kept a known bug's fix back, levels 1-2 add a line saying so,
    and level 3 gives that fix before the exercise's whole line."""
    name = _name_of(what)
    failure = _failures.get(name)
    pending = bool(failure and failure["fixes"] and not failure["shown"])
    level = min(_shown.get(name, 0) + 1, LEVELS)
    _shown[name] = level
    label = ("where to look", "the approach", "the exact fix")[level - 1]
    lines = [f"{name}, hint {level} of {LEVELS} ({label}): {exercise(name).hints[level - 1]}"]
    if pending and level < LEVELS:
        lines.append(f"  your last check named the bug; hint {LEVELS} gives its fix")
    elif pending:
        failure["shown"] = True
        fixes = failure["fixes"]
        lines.insert(0, f"{name}, hint {level} of {LEVELS} (the exact fix), for what your last check found:")
        lines[1:] = (
            [f"  {fix}" for fix in fixes] if len(fixes) == 1 else [f"  {i}. {fix}" for i, fix in enumerate(fixes, 1)]
        )
        lines.append(f"  and the exercise's whole line: {exercise(name).hints[-1]}")
    if level == LEVELS:
        lines.append("  that was the last hint; a whole solution is folded under the exercise (Show a solution)")
    return "\n".join(lines)


def hint(what: str | Callable[..., Any] | None = None) -> None:
    """Print the next hint for an exercise: where to look, then the approach, then the exact fix.

    Args:
        what: the exercise's name (``"noam_rate"``), its check (``check_noam_rate``),
            or nothing for the exercise checked last.

    After a failing check that recognised a known bug, the levels keep their order and
    the third gives that bug's own fix (at once, if the third was reached before). A name
    that is no exercise (or no name before any check ran) gets one line saying so.
    """
    try:
        print(hint_text(what))
    except (KeyError, ValueError) as error:
        print(f"hint: {error.args[0]}")


def reset_hints() -> None:
    """Forget the hints shown and the failures seen in this process (start every exercise at hint 1)."""
    _shown.clear()
    _failures.clear()
    _last.clear()


__all__ = ["EXERCISES", "Exercise", "exercise", "hint", "hint_text", "more_help", "reset_hints"]
