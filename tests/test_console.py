"""Consoles a classroom meets: one that cannot encode the course's marks, and a mode set to a preset's name.

- Under a Latin-1 (or cp1252) console, importing the package makes a report print ``?`` for ✔ instead of
  ending in ``UnicodeEncodeError``; a UTF-8 console is left as it is.
- ``TRANSFORMER_LESSONS_MODE=cpu`` (a preset where a mode belongs) gives one line on the command line, naming
  ``--preset``, not a traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from transformer_lessons.config import TRAIN_PRESET_NAMES, TRAIN_PRESETS, ModeError, compute_mode
from transformer_lessons.console import MARKS

REPORT = "import sys, transformer_lessons; print('✔ passed'); print('✘ failed →', file=sys.stderr)"


def run(code_or_args: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *code_or_args], capture_output=True, timeout=120, env={**os.environ, **env})


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252"])
def test_a_console_without_the_marks_prints_question_marks_instead_of_failing(encoding):
    without = run(["-c", "print('✔ passed')"], PYTHONIOENCODING=encoding)
    assert without.returncode != 0 and b"UnicodeEncodeError" in without.stderr  # what Python does by itself
    result = run(["-c", REPORT], PYTHONIOENCODING=encoding)
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"? passed" + os.linesep.encode() and result.stderr.startswith(b"? failed ?")


def test_a_utf8_console_is_left_as_it_is():
    result = run(["-c", REPORT], PYTHONIOENCODING="utf-8")
    assert result.returncode == 0 and result.stdout.decode("utf-8").startswith("✔ passed")
    assert all(mark.encode("utf-8") for mark in MARKS)


def test_the_command_line_under_a_latin1_console_reports_whole():
    result = run(["-m", "transformer_lessons", "classroom", "--check"], PYTHONIOENCODING="latin-1")
    assert b"UnicodeEncodeError" not in result.stderr and b"Traceback" not in result.stderr
    assert b"? the course's model" in result.stdout or b"? the course's model" in result.stderr


def test_a_preset_set_as_the_mode_is_one_line_naming_the_preset_option():
    result = run(["-m", "transformer_lessons", "translate", "Ein Hund."], TRANSFORMER_LESSONS_MODE="cpu")
    err = result.stderr.decode("utf-8")
    assert result.returncode == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "'cpu' is a training preset: choose it with --preset cpu" in err
    with pytest.raises(ModeError, match="compute mode must be 'quick' or 'full', got 'slow'") as info:
        compute_mode("slow")
    assert "training preset" not in str(info.value) and isinstance(info.value, ValueError)


def test_the_preset_names_the_message_knows_are_the_presets():
    assert TRAIN_PRESET_NAMES == tuple(TRAIN_PRESETS)
