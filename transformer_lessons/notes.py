"""Notes: what the package says about an input it accepted anyway, as a warning or collected.

:func:`~transformer_lessons.translation.translate` cuts a sentence longer than the
model's ``max_len`` to fit, and says so. A script hears that as a Python warning
of the category :class:`CourseWarning` (``warnings.filterwarnings("ignore",
category=CourseWarning)`` silences the package's notes and nothing else). Code
that shows the notes itself, the translator widget or a notebook cell, collects
them instead::

    with collect_notes() as notes:
        translate(model, very_long_sentence, src_vocab=src_vocab, tgt_vocab=tgt_vocab)
    notes  # ['1 sentence(s) (index [0]) have more than 255 tokens, ...']

Inside ``collect_notes`` the package's notes go to the list, not to
``warnings``; every other warning goes where it would have gone.

Why not ``warnings.catch_warnings(record=True)``: its filters and its record
are the whole process's, so it records every warning raised anywhere while it
is open and hides them from everyone else. In a Jupyter kernel other packages
warn in the middle of a cell (jupyter_client 7, Colab's, warns that
``datetime.datetime.utcnow()`` is deprecated each time the kernel sends a
message on Python >= 3.12): a cell that counted the warnings it recorded
counted those too, and a widget that showed them showed them as its own notes.
A context variable that only this module writes to sees the package's notes
alone.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator


class CourseWarning(UserWarning):
    """A note of the course package about an input it accepted anyway (a sentence cut to fit, ...)."""


# The list of the innermost collect_notes() open in this context (thread, task), or None: warn.
_COLLECTING: ContextVar[list[str] | None] = ContextVar("transformer_lessons_notes", default=None)


@contextmanager
def collect_notes() -> Iterator[list[str]]:
    """Collect the package's notes in a list instead of warning; other warnings are left alone.

    Yields:
        The list that each note (a ``str``) is appended to, in order, while the block runs.
    """
    notes: list[str] = []
    token = _COLLECTING.set(notes)
    try:
        yield notes
    finally:
        _COLLECTING.reset(token)


def note(message: str, stacklevel: int = 1) -> None:
    """Say ``message``: into the innermost :func:`collect_notes` list, else as a :class:`CourseWarning`.

    Args:
        message: one sentence saying what happened to the input and what was done instead.
        stacklevel: as for ``warnings.warn`` called where ``note`` is called (1: that line;
            2: its caller, ...), so that the warning points at the learner's code.
    """
    collecting = _COLLECTING.get()
    if collecting is None:
        warnings.warn(message, CourseWarning, stacklevel=stacklevel + 1)
    else:
        collecting.append(message)
