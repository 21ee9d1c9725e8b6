"""Naming what the learner built: mistakes one and two at a time, and their own hyper-parameters.

A check lists the independent mistakes it knows (:class:`Slip`: a hint and the knobs of
its simulator that reproduce it); :func:`slip_bugs` turns them into the bugs that
:func:`~transformer_lessons.checks.common.diagnose` tries, each alone and then two at a
time, so that an answer with two bugs is named as such ("two things differ") instead of
only "differs". What the learner's module holds of its own (an epsilon, a default) is read
with :func:`own_number` and :func:`own_default`, so that a simulation can use it.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import numbers
from typing import Any, Callable, NamedTuple, Sequence

from transformer_lessons.checks.common import Bug


class Slip(NamedTuple):
    """One mistake a check simulates on its own: the hint naming it, and the knobs of the check's simulator
    that reproduce it. Slips setting different knobs are independent, so :func:`slip_bugs` also tries
    them two at a time."""

    hint: str
    knobs: dict[str, Any]


class TwoThings(str):
    """The message for an answer that two known mistakes explain together, only together.

    A str, that keeps the two hints it names (``parts``): on an input where one of the two cannot
    show (the default epsilon, when the check passes eps), the other alone must explain the answer
    (:mod:`.evidence`).
    """

    parts: tuple[str, str]

    def __new__(cls, first: str, second: str) -> TwoThings:
        message = super().__new__(cls, f"two things differ, fix both:\n  1. {first}\n  2. {second}")
        message.parts = (first, second)
        return message


def two_things(first: str, second: str) -> str:
    """The message for an answer that two known mistakes explain together, only together (:class:`TwoThings`)."""
    return TwoThings(first, second)


def slip_bugs(
    simulate: Callable[..., Any],
    slips: Sequence[Slip],
    partners: Sequence[Slip] = (),
    among: bool = True,
    others: Sequence[Bug] = (),
) -> list[Bug]:
    """The bugs of :func:`diagnose` from slips: each alone, then each two at once ("two things differ").

    ``partners`` are differences the check found in what the learner built (their own
    epsilon, their own sub-modules) that may come on top of any slip: each is tried
    alone, with every slip, and with the other partners. With ``among`` the slips are
    also paired with each other (leave it off where there are dozens of them). Two
    slips that set the same knob are never a pair. ``others``: bugs the simulator has
    no knob for, tried alone after the single slips and before any pair.
    """
    singles = [(s.hint, functools.partial(simulate, **s.knobs)) for s in (*slips, *partners)] + list(others)
    doubles = [(s.hint, functools.partial(simulate, **s.knobs)) for s in slip_pairs(slips, partners, among)]
    return singles + doubles


def slip_pairs(slips: Sequence[Slip], partners: Sequence[Slip] = (), among: bool = True) -> list[Slip]:
    """Every two slips at once, as one slip: both hints ("two things differ") and both knobs (see :func:`slip_bugs`).

    For checks that compare numbers rather than tensors and run their own loop over slips.
    """
    pairs = [
        *(itertools.combinations(slips, 2) if among else ()),
        *itertools.product(slips, partners),
        *itertools.combinations(partners, 2),
    ]
    return [
        Slip(two_things(a.hint, b.hint), {**a.knobs, **b.knobs})
        for a, b in pairs
        if not a.knobs.keys() & b.knobs.keys()
    ]


def own_number(module: Any, names: Sequence[str]) -> float | None:
    """A hyper-parameter as the learner's module holds it (its epsilon, say), found under its usual names."""
    for name in names:
        value = getattr(module, name, None)
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return float(value)
    return None


def own_default(cls: Callable[..., Any], argument: str) -> float | None:
    """The default the learner's constructor gives ``argument`` (``eps=1e-6``), or None."""
    try:
        parameter = inspect.signature(cls).parameters.get(argument)
    except (TypeError, ValueError):
        return None
    default = getattr(parameter, "default", None)
    return float(default) if isinstance(default, numbers.Real) and not isinstance(default, bool) else None
