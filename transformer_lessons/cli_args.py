"""What each option of the command line accepts: one ``type=`` check per kind of value.

``python -m transformer_lessons`` (:mod:`transformer_lessons.__main__`) answers a bad
option at once, before any data, spaCy, model or training is touched: argparse
calls these checks while it parses the arguments (:mod:`transformer_lessons.cli_parser`
names which option uses which). Each takes the text the user typed and returns the
value, or raises ``argparse.ArgumentTypeError`` with a message that says what the
option needs and what it got; argparse prefixes the option's name, so the line reads
``--limit must be a positive whole number, got 0``.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from transformer_lessons.config import MAX_BEAM_SIZE
from transformer_lessons.data import SPLITS
from transformer_lessons.hardware import resolve_device
from transformer_lessons.tensorboard import INSTALL_HINT, TensorBoardMissingError, summary_writer_class

PROG = "python -m transformer_lessons"
#: The batcher seeds with ``seed + epoch``; 32 bits leave room for that and are what every RNG accepts.
MAX_SEED = 2**32 - 1


def _whole_number(text: str, low: int, high: int | None, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
    if value < low or (high is not None and value > high):
        raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
    return value


def positive_int(text: str) -> int:
    """A count of at least 1 (``--limit``, ``--epochs``, ``--max-steps``, ...)."""
    return _whole_number(text, 1, None, "a positive whole number")


def non_negative_int(text: str) -> int:
    """0 or more (``--bpe-merges``: 0 means whole words)."""
    return _whole_number(text, 0, None, "0 or a positive whole number")


def seed_int(text: str) -> int:
    """A random seed, 0 to :data:`MAX_SEED`."""
    return _whole_number(text, 0, MAX_SEED, f"a whole number from 0 to {MAX_SEED}")


def beam_size(text: str) -> int:
    """1 (greedy) to ``config.MAX_BEAM_SIZE``: each beam multiplies the decoder's work."""
    return _whole_number(
        text, 1, MAX_BEAM_SIZE, f"a whole number from 1 (greedy) to {MAX_BEAM_SIZE} (the paper uses 4)"
    )


def finite_float(min: float, *, above: bool = False):  # noqa: A002 - reads like the option's bound
    """A ``type=`` for a finite number ``>= min`` (``> min`` when ``above``); rejects nan and inf."""
    what = f"a finite number {'>' if above else '>='} {min:g}"

    def check(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if not math.isfinite(value) or value < min or (above and value == min):
            raise argparse.ArgumentTypeError(f"must be {what}, got {value:g}")
        return value

    check.__name__ = "finite_float"  # argparse names the type in a few messages
    return check


def probability_below_one(text: str) -> float:
    """A ``type=`` for a dropout rate: a number from 0 up to (not including) 1."""
    value = finite_float(0.0)(text)
    if value >= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number from 0 up to (not including) 1, got {value:g}")
    return value


def device_arg(text: str) -> str:
    """``cpu``, ``cuda``, ``cuda:N`` or ``mps``, and only one this machine has (:func:`~transformer_lessons.hardware.resolve_device`)."""
    try:
        resolve_device(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def split_name(text: str) -> str:
    """One of the Multi30k splits, ``data.SPLITS``."""
    if text not in SPLITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a Multi30k split; choose one of {', '.join(SPLITS)}")
    return text


def _kind(path: Path, text: str) -> str | None:
    """``"dir"``, ``"file"`` or None (nothing there); a path we may not even look at (EACCES) is an error too."""
    try:
        return "dir" if path.is_dir() else "file" if path.exists() else None
    except OSError as err:
        raise argparse.ArgumentTypeError(f"{text} cannot be used: {err.strerror}") from None


def _check_writable(path: Path, text: str) -> None:
    """Fail unless ``path`` (a folder that exists, else the first existing folder above it) lets us create files."""
    folder = path if _kind(path, text) == "dir" else path.absolute().parent
    while _kind(folder, text) is None:  # the first folder that exists is the one where the rest gets created
        folder = folder.parent
    if _kind(folder, text) != "dir":
        raise argparse.ArgumentTypeError(f"{text} cannot be created: {folder} is a file")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text} cannot be written: the folder {folder} is read-only for you")


def existing_dir_or_new(text: str) -> str:
    """A folder to write into (``train --out``): one that exists, or one that can be created; never a file."""
    if _kind(Path(text), text) == "file":
        raise argparse.ArgumentTypeError(
            f"{text} is a file, not a folder; the run's checkpoints and logs go in a folder"
        )
    _check_writable(Path(text), text)
    return text


def new_file(text: str) -> str:
    """A file to write (``prepare --out``, ``--output``, ``--json``): never an existing folder."""
    if _kind(Path(text), text) == "dir":
        raise argparse.ArgumentTypeError(f"{text} is a folder; give the name of a file to write")
    _check_writable(Path(text), text)
    return text


def existing_dir(text: str) -> str:
    """``--data-dir``: a folder that exists (expanded like ``data.resolve_data_dir``; "" means unset)."""
    if text and _kind(Path(text).expanduser(), text) != "dir":
        raise argparse.ArgumentTypeError(
            f"{text} does not exist or is not a folder; it should hold the raw Multi30k .gz files"
        )
    return text


def checkpoint_file(text: str) -> str:
    """``--checkpoint``: a file that exists (whether it is a checkpoint, loading it says)."""
    if _kind(Path(text), text) != "file":
        raise argparse.ArgumentTypeError(f"finds no checkpoint at {text}; train one with: {PROG} train --preset quick")
    return text


def corpus_file(text: str) -> str:
    """``--corpus``: a file that exists, made by ``prepare``."""
    if _kind(Path(text), text) != "file":
        raise argparse.ArgumentTypeError(f"finds no corpus file at {text}; make one with: {PROG} prepare --out {text}")
    return text


class TensorBoardOption(argparse.Action):
    """``--tensorboard [DIR]``: log to DIR (alone: ``<out>/tensorboard``); refused while parsing if the extra is missing."""

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            summary_writer_class()
        except TensorBoardMissingError:
            raise argparse.ArgumentError(
                self, f"needs the tensorboard package, which is not installed: {INSTALL_HINT}"
            ) from None
        setattr(namespace, self.dest, values)
