"""Printing on any console, including one whose encoding lacks the course's marks (✔ ✘ … → ×).

A Windows console, or output redirected to a file under a Latin-1 or cp1252 locale, cannot encode
them, and Python's default is to raise ``UnicodeEncodeError`` in the middle of a report. Importing
the package (and the command line) switches such a stream to print ``?`` for what it cannot show:
the report comes out whole, every other character as it was.
"""

from __future__ import annotations

import sys

MARKS = "✔✘…→×·–"  # what the course prints beyond Latin-1


def printable_streams() -> None:
    """Make ``sys.stdout`` and ``sys.stderr`` replace what their encoding cannot show, when it cannot show the marks."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        if not encoding or not hasattr(stream, "reconfigure"):  # Jupyter's streams take any text
            continue
        try:
            MARKS.encode(encoding)
        except (UnicodeEncodeError, LookupError):
            try:
                stream.reconfigure(errors="replace")
            except (ValueError, OSError):  # a stream already written to in a way that forbids it: leave it
                pass


__all__ = ["MARKS", "printable_streams"]
