"""No exercise's answer is on screen above it: what a learner sees before an exercise never hands over its code.

A learner works down a notebook. Above each exercise they have read the markdown, the code cells (with the
earlier exercises as stubs: their solutions are folded away) and, in the solved notebook, those cells' outputs.
If any of that holds a run of 6 or more consecutive code tokens of the exercise's solution (the rule of
tests/test_hints.py: Python's tokenizer, shape tuples and punctuation left out), the exercise can be done by
copying, for example a reference class printed with ``inspect.getsource`` just above its own exercise.
The exercise cell's own lines before its solution block (the given ``def`` line, the docstring) count as seen.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from test_hints import RUN, _ignored, code_tokens, solution_runs

from transformer_lessons.authoring.build_learner import BEGIN, END

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
OUTPUT_TYPES = ("text/plain", "text/markdown")  # what a reader of the outputs reads as text


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _outputs(cell) -> list[str]:
    texts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            texts.append(_text(out.get("text", "")))
        for kind in OUTPUT_TYPES:
            if kind in out.get("data", {}):
                texts.append(_text(out["data"][kind]))
    return texts


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else value


def split_blocks(source: str) -> tuple[list[str], list[tuple[str, list[str], list[str]]]]:
    """(the lines a learner sees, [(goal, the block's lines, the cell's lines seen before the block)]).

    The lines seen are the cell without its solution blocks (the learner's stub).
    """
    seen: list[str] = []
    blocks = []
    block = None
    for line in source.split("\n"):
        if (begin := BEGIN.match(line)) is not None:
            block = (begin["hint"] or "", [], list(seen))
        elif END.match(line) and block is not None:
            blocks.append(block)
            block = None
        elif block is not None:
            block[1].append(line)
        else:
            seen.append(line)
    return seen, blocks


def exercises_and_views(nb: dict, name: str) -> list[tuple[str, list[str], list[tuple[str, str]]]]:
    """For each exercise of a solution notebook: (where, its solution lines, [(kind, text) seen above it])."""
    found = []
    seen: list[tuple[str, str]] = []
    for index, cell in enumerate(nb["cells"]):
        source = _source(cell)
        if cell["cell_type"] == "code":
            stub_lines, blocks = split_blocks(source)
            for goal, lines, before in blocks:
                where = f"{name}, cell {index} (id {cell.get('id')}): {goal}"
                found.append((where, lines, seen + [("code", "\n".join(before))]))
            seen.append(("code", "\n".join(stub_lines)))
            seen += [("output", text) for text in _outputs(cell)]
        elif cell["cell_type"] == "markdown":
            seen.append(("markdown", source))
    return found


def handed_over(seen: list[tuple[str, str]], runs: set[tuple[str, ...]]) -> list[tuple[str, str]]:
    """(the run, a description) for each line of what was seen that holds a run of the solution's code."""
    hits = []
    for kind, text in seen:
        for line in text.split("\n"):
            tokens = code_tokens(line.strip(), prose=(kind == "markdown"))
            for i in range(len(tokens) - RUN + 1):
                run = tuple(tokens[i : i + RUN])
                if run in runs and not _ignored(run):
                    hits.append((" ".join(run), f"[{kind}] {' '.join(run)!r} in {line.strip()[:120]!r}"))
                    break
    return hits


CASES = [
    case for path in NOTEBOOKS for case in exercises_and_views(json.loads(path.read_text(encoding="utf-8")), path.stem)
]


# Runs that the scan finds above an exercise and that are teaching, not the answer: the worked example the
# exercise generalises, or the paper's formula the exercise asks to implement. Each is named with its exercise
# (the cell id) and why it stays; test_accepted_runs_are_still_there keeps this list from going stale.
ACCEPTED: dict[str, dict[str, str]] = {
    # 01 `scaled_dot_product_attention`: the toy dictionary works Eq. 1 by hand on one query, then on three, and the
    # saturation measurement takes softmaxes; the exercise generalises them to batch axes and a mask.
    "c15": {
        ". size ( - 1 )": "the toy reads d_k off its keys",
        "/ math . sqrt ( d_k": "the toy computes Eq. 1 on one query and on three",
        "weights = scores . softmax (": "the toy's worked example of Eq. 1",
        "= scores . softmax ( dim": "the saturation measurement's softmax",
        "( dim = - 1 )": "sums and softmaxes over the last axis, an idiom, not the answer",
    },
}


def _cell_id(where: str) -> str:
    return where.split("(id ", 1)[1].split(")", 1)[0]


def test_every_exercise_is_scanned():
    assert len(CASES) >= 27  # every exercise of exercises.EXERCISES has a solution block or more
    assert all(lines for _, lines, _ in CASES)


@pytest.mark.parametrize("where, lines, seen", CASES, ids=[where.split(":")[0] for where, *_ in CASES])
def test_nothing_above_an_exercise_hands_over_its_code(where, lines, seen):
    accepted = ACCEPTED.get(_cell_id(where), {})
    hits = [text for run, text in handed_over(seen, solution_runs(lines)) if run not in accepted]
    assert not hits, f"{where}\n  " + "\n  ".join(hits)


def test_accepted_runs_are_still_there():
    found = {
        (_cell_id(where), run) for where, lines, seen in CASES for run, _ in handed_over(seen, solution_runs(lines))
    }
    stale = [(cell, run) for cell, runs in ACCEPTED.items() for run in runs if (cell, run) not in found]
    assert not stale, f"accepted runs no longer found above their exercise (remove them from ACCEPTED): {stale}"


# --- the scan itself catches what it is for ------------------------------------------------------------


def _notebook(*cells):
    return {"cells": [dict(cell, id=f"c{i}") for i, cell in enumerate(cells)]}


EXERCISE = {
    "cell_type": "code",
    "source": (
        "def causal_mask(size):\n"
        "    # BEGIN SOLUTION: return a (size, size) bool mask, True = may attend\n"
        "    return torch.ones(size, size, dtype=torch.bool).tril()\n"
        "    # END SOLUTION\n"
    ),
    "outputs": [],
}


@pytest.mark.parametrize(
    "above",
    [
        {"cell_type": "markdown", "source": "Tip: `torch.ones(size, size, dtype=torch.bool).tril()` does it."},
        {
            "cell_type": "code",
            "source": "print(inspect.getsource(masks.causal_mask))",
            "outputs": [
                {
                    "output_type": "stream",
                    "text": "def causal_mask(size):\n    return torch.ones(size, size, dtype=torch.bool).tril()\n",
                }
            ],
        },
        {"cell_type": "code", "source": "m = torch.ones(size, size, dtype=torch.bool).tril()", "outputs": []},
    ],
    ids=["markdown", "printed source", "code"],
)
def test_the_scan_catches_an_answer_above_its_exercise(above):
    [(where, lines, seen)] = exercises_and_views(_notebook(above, EXERCISE), "toy")
    assert handed_over(seen, solution_runs(lines))


def test_the_scan_passes_a_goal_and_an_earlier_stub():
    earlier = copy.deepcopy(EXERCISE)  # an earlier exercise with the same solution: the learner sees its stub only
    goal = {"cell_type": "markdown", "source": "Write `causal_mask(size)`: True where a query may attend (§3.2.3)."}
    cases = exercises_and_views(_notebook(earlier, goal, EXERCISE), "toy")
    assert len(cases) == 2
    assert not handed_over(cases[1][2], solution_runs(cases[1][1]))


def test_the_scan_reads_outputs_below_the_exercise_as_not_seen():
    check = {
        "cell_type": "code",
        "source": "check_causal_mask(causal_mask)",
        "outputs": [{"output_type": "stream", "text": "return torch.ones(size, size, dtype=torch.bool).tril()\n"}],
    }
    [(where, lines, seen)] = exercises_and_views(_notebook(EXERCISE, check), "toy")
    assert not handed_over(seen, solution_runs(lines))
