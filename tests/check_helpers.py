"""What the tests of the checks share: a stub, a forward stub, and how a pass or a named bug looks.

Imported by the ``tests/test_check_*.py`` files (``from check_helpers import ...``).
"""

from __future__ import annotations

import pytest

from transformer_lessons import checks
from transformer_lessons.checks import ExerciseError


def check_named(name):
    """The exported check of an exercise: ``check_named("causal_mask")`` is ``checks.check_causal_mask``."""
    return getattr(checks, f"check_{name}")


def stub(*args, **kwargs):
    raise NotImplementedError("write this")


def _raise_not_implemented(self, *args):
    raise NotImplementedError("write forward")


def forward_stub(cls):
    """A class exercise whose __init__ is given and whose forward is still a stub."""
    return type(f"{cls.__name__}Stub", (cls,), {"forward": _raise_not_implemented})


def returns_float64(cls):
    """A module class whose output is converted to float64, as a detour through numpy leaves it."""
    return type(f"{cls.__name__}Float64", (cls,), {"forward": lambda self, *args: cls.forward(self, *args).double()})


def failure(check, answer) -> ExerciseError:
    """The error `check` raises for `answer` (the test fails if it raises none)."""
    with pytest.raises(ExerciseError) as info:
        check(answer)
    return info.value


def assert_passes(check, answer, name, capsys):
    """`answer` passes: the check returns None and prints one line, ``✔ name: correct (checked ...``."""
    assert check(answer) is None
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"✔ {name}: correct (checked "), lines


def assert_named(check, answer, name, hint, capsys=None):
    """`answer` fails with a message that starts with ``name: `` and matches the regex `hint`; returns the error.

    Given capsys, also: the check recognised a known bug, and printed nothing.
    """
    with pytest.raises(ExerciseError, match=hint) as info:
        check(answer)
    assert str(info.value).startswith(f"{name}: "), str(info.value)
    if capsys is not None:
        assert info.value.known_bug, str(info.value)
        assert capsys.readouterr().out == ""
    return info.value
