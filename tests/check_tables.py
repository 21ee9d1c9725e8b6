"""The table-driven tests that every check's test file runs on its own tables, written once.

A ``tests/test_check_<module>.py`` file holds tables of answers for its checks (``REFERENCES``:
``{name: (check, reference answer)}``, ``BUGS``: ``{case: (name, buggy answer, hint)}``, ...) and
imports from here the tests its tables feed: pytest collects an imported test as the importing
file's own, and ``conftest.py``'s ``pytest_generate_tests`` parametrizes it over that file's table
(the one :func:`table` names), with the table's keys as the test ids.
"""

from __future__ import annotations

import pytest

from check_helpers import check_named, stub
from transformer_lessons import checks
from transformer_lessons.checks import ExerciseError


def table(name: str, argument: str):
    """Mark a test as run once per key of the importing file's table ``name``, the key passed as ``argument``."""

    def mark(test):
        test.table = (name, argument)
        return test

    return mark


@table("REFERENCES", "name")
def test_reference_passes_with_one_line(name, capsys, request):
    check, reference = request.module.REFERENCES[name]
    assert check(reference) is None
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"✔ {name}: correct")


@table("PACKAGE_REFERENCES", "name")
def test_package_reference_passes(name, capsys, request):
    check = getattr(checks, f"check_{name}")
    assert check(request.module.PACKAGE_REFERENCES[name]) is None
    assert capsys.readouterr().out.startswith(f"✔ {name}: correct")


@table("ALTERNATIVES", "case")
def test_other_correct_answers_pass(case, capsys, request):
    name, answer = request.module.ALTERNATIVES[case]
    assert request.module.REFERENCES[name][0](answer) is None
    assert capsys.readouterr().out.startswith(f"✔ {name}: correct")


@table("WRITTEN_DIFFERENTLY", "case")
def test_correct_answer_written_differently_passes(case, capsys, request):
    name, answer = request.module.WRITTEN_DIFFERENTLY[case]
    assert check_named(name)(answer) is None
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"✔ {name}: correct"), lines


@table("BUGS", "case")
def test_known_bug_is_named(case, capsys, request):
    name, buggy, hint = request.module.BUGS[case]
    with pytest.raises(ExerciseError) as error:
        request.module.REFERENCES[name][0](buggy)
    message = str(error.value)
    assert message.startswith(f"{name}: ")
    assert hint in message, message
    assert capsys.readouterr().out == ""


@table("BUGS_WRITTEN_DIFFERENTLY", "case")
def test_bug_written_differently_is_named(case, capsys, request):
    name, buggy, hint = request.module.BUGS_WRITTEN_DIFFERENTLY[case]
    with pytest.raises(ExerciseError) as error:
        check_named(name)(buggy)
    message = str(error.value)
    assert message.startswith(f"{name}: ") and hint in message, message
    assert capsys.readouterr().out == ""


@table("REFERENCES", "name")
def test_stub_returns_none_and_says_so(name, capsys, request):
    assert request.module.REFERENCES[name][0](stub) is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert out.startswith(f"{name}: not implemented yet — ")


@table("WRONG_SHAPES", "name")
def test_wrong_shape_is_reported(name, request):
    with pytest.raises(ExerciseError, match="shape"):
        request.module.REFERENCES[name][0](request.module.WRONG_SHAPES[name])


@table("WRONG_DTYPES", "name")
def test_wrong_dtype_is_reported(name, request):
    with pytest.raises(ExerciseError, match="wrong dtype torch.float64: the inputs are torch.float32") as error:
        request.module.REFERENCES[name][0](request.module.WRONG_DTYPES[name])
    assert "numpy" in str(error.value)


@table("REFERENCES", "name")
def test_learner_exception_is_reported_and_chained(name, request):
    def broken(*args, **kwargs):
        raise ValueError("oops")

    with pytest.raises(ExerciseError, match="your code raised ValueError: oops") as error:
        request.module.REFERENCES[name][0](broken)
    assert isinstance(error.value.__cause__, ValueError)
