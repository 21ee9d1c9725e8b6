"""Naming a bug only when it explains every input the check ran (issue 29).

A check that runs the learner's answer on several inputs used to try its known bugs on
the FIRST input where the answer differed and name the first one that matched there. But
a mistake shows on every input: an answer that equals a bug's simulation on one input and
not on another did not make that mistake, and naming it sends the learner after a bug
they do not have. :class:`Inputs` keeps what each input showed, and :meth:`Inputs.verdict`
names a bug only when its simulation agrees with the answer on all of them; otherwise
the check says what differs on the first input where it does, and nothing more.

A bug is known across inputs by its hint: the checks build one list of bugs per input,
with the same hints. On an input where a bug is not simulated (a mask bug on an input
without a mask), it is taken to change nothing: the answer must be right there. An input
on which the answer raised (or failed before any comparison: a wrong shape) has no numbers
to compare, so it neither confirms nor refutes a bug: where a bug makes the answer crash
on some inputs (masks swapped, with a memory longer than the target), it is still named
from the others. When the first input that fails is such a failure, it is what the check
reports, as before.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, NamedTuple, Sequence

from transformer_lessons.checks import common
from transformer_lessons.checks.common import ATOL, Bug, ExerciseError, all_close, known_bug


_FAILED = object()  # a bug's simulation that raised on an input


class _Seen(NamedTuple):
    """What one input showed: the learner's answer, the reference and the bugs simulated on it, or an error."""

    got: Any = None
    expected: Any = None
    simulated: Sequence[tuple[str, Any]] = ()  # (hint, what that bug gives here), _FAILED if it cannot run
    same: Callable[[Any, Any], bool] = all_close
    differs: Callable[[], ExerciseError] | None = None  # the message when no bug is named
    error: ExerciseError | None = None

    @property
    def right(self) -> bool:
        return self.error is None and self.same(self.got, self.expected)


class Inputs:
    """The inputs a check ran the answer on, and what each showed: a bug is named only if it explains them all.

    Use::

        inputs = Inputs()
        for case in cases:
            with inputs.one():
                got = call_answer(fn, ...)
                inputs.compare(got, expected, bugs, "the output")
        inputs.verdict()
    """

    def __init__(self) -> None:
        self._seen: list[_Seen] = []

    @contextlib.contextmanager
    def one(self) -> Iterator[None]:
        """One input's part of the check: a failure on it is kept (the next input still runs), not raised."""
        try:
            yield
        except ExerciseError as error:
            self._seen.append(_Seen(error=error))

    def compare(
        self,
        got: Any,
        expected: Any,
        bugs: Sequence[Bug],
        what: str,
        advice: str = "",
        atol: float = ATOL,
        *,
        same: Callable[[Any, Any], bool] | None = None,
        differs: Callable[[], ExerciseError] | None = None,
    ) -> bool:
        """Keep this input's answer, reference and bug simulations (see :func:`~.common.diagnose`); True if right.

        ``same`` compares answers (default: :func:`~.common.all_close` with ``atol``); ``differs`` builds
        the error to raise when the answer is wrong here and no bug explains every input (default:
        ``diagnose``'s "``what`` differs from the reference" with ``advice``).
        """
        if same is None:
            same = lambda a, b: all_close(a, b, atol)  # noqa: E731 - one line, as diagnose compares
        if differs is None:
            differs = lambda: common.differs(got, expected, what, advice, atol)  # noqa: E731
        seen = _Seen(got, expected, [(hint, _simulate(simulate)) for hint, simulate in bugs], same, differs)
        self._seen.append(seen)
        return seen.right

    def verdict(self) -> None:
        """Return if every input was right; else raise for the first input that was not.

        A bug is named only if its simulation gives the answer on every input that was compared.
        """
        first = next((seen for seen in self._seen if not seen.right), None)
        if first is None:
            return
        if first.error is not None:
            raise first.error
        compared = [seen for seen in self._seen if seen.error is None]
        for hint, _ in first.simulated:
            if all(_agrees(seen, _parts(hint)) for seen in compared):
                raise known_bug(hint)
        assert first.differs is not None
        raise first.differs()


def _parts(hint: str) -> frozenset[str]:
    """The mistakes a hint names: two for "two things differ" (:class:`~.slips.TwoThings`), else one."""
    return frozenset(getattr(hint, "parts", (hint,)))


def _agrees(seen: _Seen, parts: frozenset[str]) -> bool:
    """Do these mistakes give the answer on this input?

    Only those simulated here count: one that cannot show on this input (a mask bug, on an input
    without a mask) changes nothing, so with none left the answer must be right here.
    """
    here = parts & frozenset().union(*(_parts(hint) for hint, _ in seen.simulated))
    if not here:
        return seen.right
    values = [value for hint, value in seen.simulated if _parts(hint) == here]
    return any(value is not _FAILED and seen.same(seen.got, value) for value in values)


def _simulate(simulate: Callable[[], Any]) -> Any:
    """What a bug gives on this input, computed now (its thunk may read a loop's variables), or _FAILED."""
    try:
        return simulate()
    except Exception:  # noqa: BLE001 - a bug that cannot even run on these shapes is not the one
        return _FAILED
