"""The code has one format, ruff's (pyproject.toml's [tool.ruff]): written by `make format`, checked here.

Hand-packed lines, and lines the formatter is told to skip, read differently in every file; a formatter makes every file read
the same and ends arguments about it. Marked ``pins``: another ruff release may format a line
differently, so the check holds for the lock's version (requirements/lock.txt), the one `make setup` installs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE = ["transformer_lessons", "tests", "scripts", "benchmarks", "images"]
OFF = ("fmt" + ": skip", "fmt" + ": off")  # spelled in two halves, so that this file holds neither

pytestmark = pytest.mark.pins


def _ruff(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=120
    )


def test_the_code_is_formatted():
    result = _ruff("format", "--check", *CODE)
    assert result.returncode == 0, f"not in ruff's format (run `make format`):\n{result.stdout}{result.stderr}"


def test_the_code_passes_the_lint():
    result = _ruff("check", *CODE)
    assert result.returncode == 0, (
        f"ruff check (pyproject.toml's [tool.ruff.lint]) finds:\n{result.stdout}{result.stderr}"
    )


def test_the_check_finds_a_hand_packed_line():
    packed = "def f(a,b):  return {'a':a,\n 'b':b}\n"
    assert _ruff("format", "--check", "--stdin-filename", "packed.py", "-", stdin=packed).returncode == 1
    assert (
        _ruff(
            "format", "--check", "--stdin-filename", "neat.py", "-", stdin='def f(a, b):\n    return {"a": a, "b": b}\n'
        ).returncode
        == 0
    )


def test_nothing_switches_the_formatter_off():
    marks = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in CODE
        for path in sorted((ROOT / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if any(mark in line for mark in OFF)
    ]
    assert not marks, f"the formatter is switched off by hand in {marks}"
