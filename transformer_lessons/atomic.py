"""Writing a file so that it is either all there or not there: the one atomic writer of the package.

A file is written under a temporary name beside its final one, then renamed
(``os.replace`` is atomic on one file system). An interruption, a full disk or a
crash mid-write never leaves half a file under the final name, and the temporary
file is removed on every failure. The temporary name holds the process id and a
random part, so two processes writing the same file never share it.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any, Callable


#: What a write to a file fails with when the disk (not the caller) is the problem: full, over quota, too big, broken, read-only.
WRITE_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG, errno.EIO, errno.EROFS})


#: The names :func:`temporary_name` makes, and only those: ``.<name>.<pid>.<8 hex digits>.tmp``.
TEMPORARY_NAME = re.compile(r"\.(?P<name>.+)\.(?P<pid>[0-9]+)\.(?P<random>[0-9a-f]{8})\.tmp")


def temporary_name(path: Path) -> Path:
    """A name beside ``path`` that no other writer uses: ``.<name>.<pid>.<random>.tmp``."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def temporary_writer(path: Path) -> int | None:
    """The process id in ``path``'s name if :func:`temporary_name` made it, else None."""
    match = TEMPORARY_NAME.fullmatch(Path(path).name)
    return int(match["pid"]) if match else None


def atomic_write(path: str | os.PathLike, write: Callable[[Path], Any]) -> Path:
    """Call ``write(tmp)`` to fill a temporary file, then move it to ``path`` in one step.

    The folder is created if needed. On any failure (an ``OSError`` such as a full
    disk, an exception from ``write``, Ctrl-C) the temporary file is deleted and
    the exception goes on; ``path`` keeps whatever it held before. An ``OSError``
    of the file system names ``path`` (its ``filename``), not the temporary file
    nobody asked for: a failed ``write()`` names no file at all, and "No space
    left on device" alone does not say which file was not written. (Other
    errors, such as a network reset inside ``write``, are left as they are.)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        if (err.filename is None and err.errno in WRITE_ERRNOS) or str(err.filename) == str(tmp):
            err.filename, err.filename2 = str(path), None
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """:func:`atomic_write` of UTF-8 text."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_json(path: str | os.PathLike, data: Any, indent: int | None = 1) -> Path:
    """:func:`atomic_write` of ``data`` as JSON (UTF-8, non-ASCII kept as it is)."""
    return atomic_write_text(path, json.dumps(data, indent=indent, ensure_ascii=False))


__all__ = [
    "TEMPORARY_NAME",
    "WRITE_ERRNOS",
    "atomic_write",
    "atomic_write_json",
    "atomic_write_text",
    "temporary_name",
    "temporary_writer",
]
