"""Stubs and first failures state the goal and the bug, never the solution's code; hints come in tiers.

The rule: no run of 6 or more consecutive code tokens (Python's tokenize) of a
solution line appears in a stub's message (the ``# BEGIN SOLUTION:`` goal, a check's
"not implemented yet" line) or in a check's first-level message, that is, what a
failing check prints before the learner asks ``hint()``. Shape tuples such as
``(B, H, T, Dh)`` and runs of punctuation are not code anyone types from a message,
so they do not count. The first-level messages are collected two ways: every string
of the checks' source with its ``[[fix]]`` parts removed (the templates), and what the
checks say when fed the known-buggy answers their own tests use.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
import warnings
from pathlib import Path

import pytest
import test_check_attention
import test_check_decoder_layer
import test_check_diagnoses
import test_check_encoder_layer
import test_check_layers
import test_check_masks
import test_check_multi_head
import test_check_positional
import test_check_schedule
import test_check_tutorial_bugs

import transformer_lessons
from transformer_lessons import checks, exercises
from transformer_lessons.authoring.build_learner import BEGIN, END
from transformer_lessons.checks import ExerciseError
from transformer_lessons.checks.common import split_fix

ROOT = Path(__file__).resolve().parents[1]
CHECKS_DIR = ROOT / "transformer_lessons" / "checks"
RUN = 6  # this many consecutive code tokens of a solution line is handing over its code
SHAPE_NAMES = {
    "size",
    "d_model",
    "d_head",
    "d_ff",
    "n_heads",
    "max_len",
}  # written in shape tuples like (max_len, d_model)
CODE_TYPES = (tokenize.NAME, tokenize.OP, tokenize.NUMBER)


# --- the rule ------------------------------------------------------------------------


def code_tokens(line: str, prose: bool = False) -> list[str]:
    """The names, operators, numbers and strings of one line, by Python's tokenizer.

    In ``prose`` (a message) quotes and backticks are blanked first, so that code a
    message writes inside them is read as code (and an apostrophe opens no string).
    A line the tokenizer cannot finish (an open bracket, prose) keeps the tokens read
    before the error.
    """
    text = (re.sub(r"[`'\"]", " ", line) if prose else line).strip()
    found: list[str] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text + "\n").readline):
            if token.type in CODE_TYPES or (token.type == tokenize.STRING and not prose):
                found.append(token.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return found


def _ignored(run: tuple[str, ...]) -> bool:
    """A run of punctuation and numbers, or of a shape tuple's letters: not code handed over."""
    names = [t for t in run if t[0].isalpha() or t[0] == "_"]
    if not names:
        return True
    return "." not in run and "=" not in run and all(len(n) <= 2 or n in SHAPE_NAMES for n in names)


def solution_runs(lines: list[str]) -> set[tuple[str, ...]]:
    """Every run of RUN consecutive code tokens of each solution line (shape tuples and punctuation left out)."""
    runs = set()
    for line in lines:
        tokens = code_tokens(line)
        runs |= {run for i in range(len(tokens) - RUN + 1) if not _ignored(run := tuple(tokens[i : i + RUN]))}
    return runs


def leaked(message: str, runs: set[tuple[str, ...]]) -> list[str]:
    """The runs of solution code that ``message`` contains, as text.

    A line indented by 4 or more is the learner's own line of code that a message
    quotes ("at line 3 of your `forward`:"), not the check's words: it is skipped.
    """
    found = []
    for line in message.split("\n"):
        if line.startswith("    "):
            continue
        tokens = code_tokens(line, prose=True)
        found += [" ".join(run) for i in range(len(tokens) - RUN + 1) if (run := tuple(tokens[i : i + RUN])) in runs]
    return found


# --- what the rule reads -------------------------------------------------------------


def solution_blocks() -> list[tuple[str, str, list[str]]]:
    """(notebook, goal, the block's lines) for every exercise of the solution notebooks."""
    blocks = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            block = None
            for line in "".join(cell["source"]).split("\n"):
                if (begin := BEGIN.match(line)) is not None:
                    block = (path.stem, begin["hint"], [])
                elif END.match(line):
                    blocks.append(block)
                    block = None
                elif block is not None:
                    block[2].append(line)
    return blocks


BLOCKS = solution_blocks()
RUNS = set().union(*(solution_runs(lines) for *_, lines in BLOCKS))


def message_templates() -> list[tuple[str, str]]:
    """(where, text) for every string the checks can print, docstrings aside, with the [[fix]] parts removed.

    An f-string's replacement fields read as a placeholder name.
    """
    found = []
    for path in sorted(CHECKS_DIR.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                text = "".join(v.value if isinstance(v, ast.Constant) else " X " for v in node.values)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                text = node.value
            else:
                continue
            found.append((f"{path.name}:{node.lineno}", split_fix(text)[0]))
    return found


def first_level_messages() -> list[tuple[str, str]]:
    """(case, message) of every failure the checks' own tests provoke with their known-buggy answers."""
    files = [
        test_check_attention,
        test_check_multi_head,
        test_check_masks,
        test_check_positional,
        test_check_layers,
        test_check_encoder_layer,
        test_check_decoder_layer,
        test_check_schedule,
    ]
    cases = [
        (f"{file.__name__}:{k}", getattr(checks, f"check_{name}"), answer)
        for file in files
        for k, (name, answer, _) in file.BUGS.items()
    ]
    cases += [
        (f"{file.__name__}:{k}", getattr(checks, f"check_{name}"), answer)
        for file in files
        for k, (name, answer, _) in getattr(file, "BUGS_WRITTEN_DIFFERENTLY", {}).items()
    ]
    cases += [
        (f"test_check_tutorial_bugs:{k}", getattr(checks, f"check_{name}"), answer)
        for k, (name, answer, *_) in test_check_tutorial_bugs.TUTORIAL_BUGS.items()
    ]
    cases += [
        (f"test_check_diagnoses:{k}", check, answer)
        for k, (check, answer, _) in test_check_diagnoses.TWO_AT_ONCE.items()
    ]
    messages = []
    for case, check, answer in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                check(answer)
            except ExerciseError as error:
                messages.append((case, str(error)))
    return messages


# --- the tests -----------------------------------------------------------------------


def test_the_rule_catches_a_message_that_hands_over_solution_code():
    noam = ["    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)"]
    runs = solution_runs(noam)
    assert leaked("return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)", runs)
    assert leaked("use min, not max: min(step ** -0.5, step * warmup ** -1.5)", runs)  # part of the line is enough
    assert leaked("the warm-up: `min(step ** -0.5, step * warmup ** -1.5)`", runs)  # in backticks too
    masked = solution_runs(["    scores = scores.masked_fill(~mask, float('-inf'))"])
    assert leaked("assign it: 'scores = scores.masked_fill(~mask, float(-inf))'", masked)
    assert not leaked("return the rate of §5.3, Eq. 3: a linear warm-up, then an inverse square-root decay", runs)
    causal = ["    return torch.ones(size, size, dtype=torch.bool).tril()"]
    assert leaked("True = may attend, e.g. torch.ones(size, size, dtype=torch.bool).tril()", solution_runs(causal))
    # The course's own messages that used to hand over the answer are caught.
    assert leaked(
        "cand = scores[:, None] + log_probs; top, idx = cand.view(-1).topk(K); return top, idx // V, idx % V", RUNS
    )
    assert leaked("return w_2(dropout(relu(w_1(x))))", RUNS)


def test_the_rule_ignores_shape_tuples_and_punctuation():
    runs = solution_runs(["        q = self.w_q(query).view(B, T, H, Dh).transpose(1, 2)  # (B, H, T, Dh)"])
    assert not leaked("split into heads: (B, T, H, Dh), then (B, H, T, Dh)", runs)
    assert not leaked(
        "a mask (B, 1, 1, S) broadcasts over (B, H, T, S)", solution_runs(["    return m[:, None, None, :]"])
    )


def test_there_are_33_solution_blocks_each_with_a_goal():
    assert len(BLOCKS) == 33
    assert all(goal and lines for _, goal, lines in BLOCKS)


@pytest.mark.parametrize("notebook, goal", [(nb, goal) for nb, goal, _ in BLOCKS])
def test_no_stub_goal_contains_solution_code(notebook, goal):
    assert not leaked(goal, RUNS), f"{notebook}: {goal}"


def test_no_message_template_of_the_checks_contains_solution_code():
    found = [(where, text, leak) for where, text in message_templates() if (leak := leaked(text, RUNS))]
    assert not found, "\n".join(f"{where}: {leak[0]!r} in {text!r}" for where, text, leak in found)


def test_no_first_level_diagnosis_contains_solution_code():
    messages = first_level_messages()
    assert len(messages) >= 140  # the known bugs of the checks' files, written differently, the tutorials, the pairs
    found = [(case, text, leak) for case, text in messages if (leak := leaked(text, RUNS))]
    assert not found, "\n".join(f"{case}: {leak[0]!r} in {text!r}" for case, text, leak in found)


def test_a_fix_kept_back_from_the_message_is_code_the_rule_would_catch():
    error = ExerciseError("did you forget the scale?[[ softmax(query @ key.transpose(-2, -1) / math.sqrt(d_k))]]")
    assert str(error) == "did you forget the scale?"
    assert error.fixes == ("softmax(query @ key.transpose(-2, -1) / math.sqrt(d_k))",)
    assert leaked(error.fixes[0], RUNS)


# --- hints in tiers ------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _fresh_hints():
    exercises.reset_hints()
    yield
    exercises.reset_hints()


def noam_without_warmup(step, d_model, warmup, factor=1.0):
    return factor * d_model**-0.5 * step**-0.5


def test_every_exercise_has_three_hint_levels():
    for exercise in exercises.EXERCISES:
        assert len(exercise.hints) == 3 and all(h.strip() for h in exercise.hints), exercise.name


def test_hint_reveals_one_more_level_each_call(capsys):
    transformer_lessons.hint("noam_rate")
    transformer_lessons.hint(checks.check_noam_rate)
    transformer_lessons.hint("noam_rate")
    transformer_lessons.hint("noam_rate")
    out = capsys.readouterr().out
    assert "hint 1 of 3 (where to look): Paper §5.3" in out
    assert "hint 2 of 3 (the approach)" in out
    assert out.count("hint 3 of 3 (the exact fix): return factor * d_model ** -0.5") == 2  # the last one stays
    assert "Show a solution" in out


def test_a_failure_names_the_bug_then_hints_keep_their_order_and_the_third_gives_its_fix(capsys):
    with pytest.raises(ExerciseError) as error:
        checks.check_noam_rate(noam_without_warmup)
    message = str(error.value)
    assert "the warm-up is missing" in message
    assert "warmup ** -1.5" not in message
    assert message.endswith("\n  more help: hint('noam_rate')")
    transformer_lessons.hint()  # the exercise checked last
    first = capsys.readouterr().out
    assert first.startswith("noam_rate, hint 1 of 3 (where to look): Paper §5.3")
    assert "hint 3 gives its fix" in first and "warmup ** -1.5" not in first, "where to look first, not the fix"
    transformer_lessons.hint()
    second = capsys.readouterr().out
    assert second.startswith("noam_rate, hint 2 of 3 (the approach)") and "warmup ** -1.5" not in second
    transformer_lessons.hint("noam_rate")
    third = capsys.readouterr().out
    assert third.startswith("noam_rate, hint 3 of 3 (the exact fix), for what your last check found:")
    assert third.index("  min(step ** -0.5, step * warmup ** -1.5)") < third.index("the exercise's whole line")
    transformer_lessons.hint("noam_rate")
    assert capsys.readouterr().out.startswith("noam_rate, hint 3 of 3 (the exact fix): return factor")


def test_a_failure_after_the_last_level_gives_its_fix_at_once(capsys):
    for _ in range(3):
        transformer_lessons.hint("noam_rate")
    capsys.readouterr()
    with pytest.raises(ExerciseError):
        checks.check_noam_rate(noam_without_warmup)
    transformer_lessons.hint()
    out = capsys.readouterr().out
    assert out.startswith("noam_rate, hint 3 of 3 (the exact fix), for what your last check found:")
    assert "min(step ** -0.5, step * warmup ** -1.5)" in out


def test_two_bugs_at_once_get_both_fixes(capsys):
    def noam_two(step, d_model, warmup, factor=1.0):
        return factor * d_model**0.5 * step**-0.5

    with pytest.raises(ExerciseError):
        checks.check_noam_rate(noam_two)
    for _ in range(3):
        transformer_lessons.hint("noam_rate")
    out = capsys.readouterr().out
    assert "  1. " in out and "  2. " in out and "d_model ** -0.5" in out


def test_a_pass_forgets_the_last_failure(capsys):
    with pytest.raises(ExerciseError):
        checks.check_noam_rate(noam_without_warmup)
    checks.check_noam_rate(lambda s, d, w, f=1.0: f * d**-0.5 * min(s**-0.5, s * w**-1.5))
    capsys.readouterr()
    transformer_lessons.hint("noam_rate")
    assert "hint 1 of 3" in capsys.readouterr().out


def test_hint_names_the_exercises_when_it_does_not_know_one(capsys):
    transformer_lessons.hint("noam")
    transformer_lessons.hint()  # no check has run yet
    first, second = capsys.readouterr().out.splitlines()
    assert first.startswith("hint: no exercise called 'noam'") and "noam_rate" in first
    assert second == "hint: hint() needs the exercise's name until a check has run, e.g. hint('noam_rate')"


@pytest.mark.parametrize("typed", ["Noam_Rate", "noam_rate ", " 'noam_rate'", "check_noam_rate()", "noam-rate"])
def test_a_name_typed_another_way_finds_its_exercise(typed, capsys):
    transformer_lessons.exercises.reset_hints()
    transformer_lessons.hint(typed)
    assert capsys.readouterr().out.startswith("noam_rate, hint 1 of 3 (where to look)")


@pytest.mark.parametrize(
    "typed, meant", [("noam_rte", "noam_rate"), ("beam_stp", "beam_step"), ("layernorm", "layer_norm")]
)
def test_a_misspelled_name_gets_the_close_ones_not_the_whole_list(typed, meant, capsys):
    transformer_lessons.hint(typed)
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"hint: no exercise called {typed!r}; did you mean") and repr(meant) in out
    assert "mask_inversion" not in out  # not the list of every exercise
    assert "\n" not in out


def test_a_stub_says_how_to_ask_for_a_hint(capsys):
    def noam_rate(step, d_model, warmup, factor=1.0):
        raise NotImplementedError("return the learning rate")

    checks.check_noam_rate(noam_rate)
    assert "hint('noam_rate')" in capsys.readouterr().out


# --- one list of exercises -----------------------------------------------------------


def notebook_exercises() -> tuple[list[tuple[str, str]], int]:
    """The (notebook, check) of every exercise, in notebook order, from the stubs and the check calls after them.

    Each stub belongs to the first ``check_<name>(`` call at or after its cell; the
    count of stubs comes back too (an exercise may have two: __init__ and forward).
    """
    found: list[tuple[str, str]] = []
    stubs = 0
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        waiting = 0
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            text = "".join(cell["source"])
            waiting += sum(1 for line in text.split("\n") if BEGIN.match(line))
            call = re.search(r"^check_(\w+)\(", text, re.M)
            if waiting and call:
                stubs += waiting
                waiting = 0
                if (path.stem, call[1]) not in found:
                    found.append((path.stem, call[1]))
        assert not waiting, f"{path.name}: a stub without a check after it"
    return found, stubs


def test_the_course_list_of_exercises_matches_the_notebooks_stubs_and_checks():
    found, stubs = notebook_exercises()
    assert stubs == 33
    assert [(e.notebook, e.name) for e in exercises.EXERCISES] == found
    exported = sorted(n.removeprefix("check_") for n in checks.__all__ if n.startswith("check_"))
    assert sorted(e.name for e in exercises.EXERCISES) == exported


def test_every_learner_solution_cell_folds_the_first_two_hints_of_its_exercise():
    import nbformat

    from transformer_lessons.authoring import build_learner

    folded = 0
    for path in sorted((ROOT / "learner").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for i, cell in enumerate(nb.cells):
            if build_learner.SOLUTION_TAG not in cell.metadata.get("tags", []):
                continue
            name = build_learner.exercise_after(nb.cells, i - 1)
            hints = exercises.exercise(name).hints
            text = cell.source
            first, second, solution = (
                text.index(s)
                for s in ("Hint 1: where to look", "Hint 2: the approach", "<summary>Show a solution</summary>")
            )
            assert first < second < solution, path.name
            assert build_learner.hints_markdown(name) in text
            assert hints[2] not in text[:solution]  # the third level, the exact fix, is hint()'s
            folded += 1
    assert folded == 30  # one solution cell per exercise cell (multi-head attention's two blocks share one)


@pytest.mark.parametrize("answer", [lambda b: b.clone(), lambda b: 1 - b.int()], ids=["unchanged", "arithmetic"])
def test_the_warm_ups_diagnoses_keep_the_operator_for_the_third_hint(answer, capsys):
    with pytest.raises(ExerciseError) as error:
        checks.check_mask_inversion(answer)
    assert "~blocked" not in str(error.value) and "logical_not" not in str(error.value)
    for _ in range(3):
        transformer_lessons.hint()
    out = capsys.readouterr().out
    third = out[out.index("hint 3 of 3") :]
    assert third.startswith("hint 3 of 3 (the exact fix), for what your last check found:") and "~blocked" in third
