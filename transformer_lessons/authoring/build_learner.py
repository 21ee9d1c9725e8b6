"""Build the learner notebooks (``learner/``) from the solution notebooks (``notebooks/``).

The solution notebooks are the single source. In them every exercise's answer
sits between two marker lines, the first carrying the stub's message, the goal: what to
return, its shape, where to reread (never the solution's code; tests/test_hints.py checks)::

    # BEGIN SOLUTION: return a (size, size) bool tensor, True where a query may see the key
    return torch.ones(size, size, dtype=torch.bool).tril()
    # END SOLUTION

In the learner version each such block becomes, at the block's indentation::

    # YOUR CODE HERE
    raise NotImplementedError("return a (size, size) bool tensor, True where a query may see the key")

and right after the exercise cell a markdown cell holds the original cell in a
collapsed ``<details>`` block (one click away, never on screen by default), after two
folded hints (where to look, the approach) of the exercise whose check follows the
cell: the first two levels that ``hint()`` prints, from the same table
(:data:`transformer_lessons.exercises.EXERCISES`). All
outputs are cleared, a banner at the top says which version this is, and the
Colab cells (see :mod:`transformer_lessons.authoring.colab`) point at the learner file.

The output is deterministic (fixed cell ids derived from the source ids,
nbformat's own JSON layout), so building twice changes nothing.

Usage (from the repository root; ``make learner`` runs it after the Colab stamp)::

    python -m transformer_lessons.authoring.build_learner            # write learner/NN_*.ipynb
    python -m transformer_lessons.authoring.build_learner --check    # write nothing; exit 1 listing stale files
"""

from __future__ import annotations

import argparse
import html
import re
import sys
from pathlib import Path

import nbformat

from transformer_lessons import exercises
from transformer_lessons.authoring import colab

ROOT = colab.ROOT
SOURCE_DIR = "notebooks"
LEARNER_DIR = "learner"
NOTEBOOK_GLOB = colab.NOTEBOOK_GLOB
GENERATOR = "transformer_lessons.authoring.build_learner"  # named in each learner notebook's metadata

BEGIN = re.compile(r"^(?P<indent>[ \t]*)# BEGIN SOLUTION(?::[ \t]*(?P<hint>.*?))?[ \t]*$")
END = re.compile(r"^[ \t]*# END SOLUTION[ \t]*$")
STUB_COMMENT = "# YOUR CODE HERE"
CHECK_CALL = re.compile(r"^check_(\w+)\(", re.M)  # the check that follows an exercise names it
FOLDED_HINTS = ((1, "where to look"), (2, "the approach"))  # the third level, the exact fix, is hint()'s
BANNER_TAG = "learner-banner"
SOLUTION_TAG = "learner-solution"
# Notebook metadata that only describes a run (saved widget state); a learner file has not been run.
RUN_METADATA = ("widgets",)
# Cell metadata that only describes a run (timestamps written by nbclient).
RUN_CELL_METADATA = ("execution", "collapsed", "scrolled")


class MarkerError(ValueError):
    """Solution markers that cannot be turned into a stub (unbalanced, nested, no hint)."""


# --- one cell ----------------------------------------------------------------------


def _text(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _python_string(text: str) -> str:
    """``text`` as a double-quoted Python literal (non-ASCII kept readable)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def stub_source(source: str, where: str = "cell") -> tuple[str, int]:
    """Replace every solution block of ``source`` by a stub; return (new source, number of blocks).

    Raises:
        MarkerError: a BEGIN without its END (or the reverse), a BEGIN inside a
            block, or a BEGIN line without a hint. ``where`` names the cell in the message.
    """
    out: list[str] = []
    blocks = 0
    open_at: int | None = None  # line number of the BEGIN of the block being skipped
    for number, line in enumerate(source.split("\n"), start=1):
        begin, end = BEGIN.match(line), END.match(line)
        if begin:
            if open_at is not None:
                raise MarkerError(
                    f"{where}: '# BEGIN SOLUTION' on line {number} inside the block opened on line {open_at}"
                )
            hint = (begin["hint"] or "").strip()
            if not hint:
                raise MarkerError(
                    f"{where}: the '# BEGIN SOLUTION' on line {number} has no hint ('# BEGIN SOLUTION: <what to do>')"
                )
            indent = begin["indent"]
            out += [f"{indent}{STUB_COMMENT}", f"{indent}raise NotImplementedError({_python_string(hint)})"]
            open_at = number
            blocks += 1
        elif end:
            if open_at is None:
                raise MarkerError(f"{where}: '# END SOLUTION' on line {number} without a '# BEGIN SOLUTION' before it")
            open_at = None
        elif open_at is None:
            out.append(line)
    if open_at is not None:
        raise MarkerError(f"{where}: '# BEGIN SOLUTION' on line {open_at} has no '# END SOLUTION'")
    return "\n".join(out), blocks


def _fence(code: str) -> str:
    """A backtick fence longer than any run of backticks inside ``code``."""
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    return "`" * max(3, longest + 1)


def solution_code(source: str) -> str:
    """The exercise cell as solved, without the marker lines."""
    return "\n".join(line for line in source.split("\n") if not (BEGIN.match(line) or END.match(line)))


def solution_markdown(source: str) -> str:
    """A collapsed ``<details>`` block holding the solved cell (``source``, markers dropped)."""
    source = solution_code(source)
    fence = _fence(source)
    return "\n".join(
        [
            "<details><summary>Show a solution</summary>",
            "",
            f"{fence}python",
            source.rstrip("\n"),
            fence,
            "",
            "</details>",
        ]
    )


def exercise_after(cells, index: int) -> str | None:
    """The exercise of the stub in ``cells[index]``: the first check called in that cell or a later one."""
    for cell in cells[index:]:
        if cell.cell_type == "code" and (call := CHECK_CALL.search(_text(cell))):
            return call[1]
    return None


def hints_markdown(name: str) -> str:
    """The first hints of exercise ``name``, each folded in its own ``<details>`` block."""
    exercise = exercises.exercise(name)
    parts = []
    for level, label in FOLDED_HINTS:
        parts += [
            f"<details><summary>Hint {level}: {label}</summary>",
            "",
            html.escape(exercise.hints[level - 1], quote=False),
            "",
            "</details>",
        ]
    return "\n".join(parts)


def banner_markdown(name: str, course: colab.Course | None, exercises_here: bool = True) -> str:
    """The learner version's first cell; a notebook without exercises (an exploration) says only where it comes from."""
    solution = f"{SOURCE_DIR}/{name}"
    about = (
        "> **Learner version.** Each exercise is a stub that raises `NotImplementedError`: replace "
        f"`{STUB_COMMENT}` and the `raise` line with your code, then run the check below it. "
        "A solution sits under each exercise, folded (*Show a solution*), after two folded hints; "
        '`hint("<exercise>")` also gives them, one per call.'
        if exercises_here
        else "> **Learner version.** This notebook has no exercise: nothing in it is yours to write, run it and explore."
    )
    lines = [
        about,
        ">",
        f"> The complete notebook, with every answer and output, is [`{solution}`](../{solution})"
        + (f" ([open it in Colab]({course.colab_url(solution)}))" if course else "")
        + ".",  # that this file is generated is said in its metadata and learner/README.md, for the authors
    ]
    return "\n".join(lines)


# --- one notebook ------------------------------------------------------------------


def _cell_id(cell, index: int) -> str:
    return cell.get("id") or f"cell-{index}"


def _clean_metadata(metadata) -> dict:
    return {k: v for k, v in dict(metadata).items() if k not in RUN_CELL_METADATA}


def build_notebook(source_nb, name: str, course: colab.Course | None):
    """The learner version of one solution notebook (``name`` is its file name)."""
    source_nb = colab.strip(source_nb)
    nb = nbformat.v4.new_notebook()
    nb.metadata = nbformat.from_dict({k: v for k, v in source_nb.metadata.items() if k not in RUN_METADATA})
    nb.nbformat, nb.nbformat_minor = 4, max(5, source_nb.get("nbformat_minor", 5))  # 4.5: cells have ids
    learner_nb_meta = {"generated_from": f"{SOURCE_DIR}/{name}", "generator": GENERATOR}
    nb.metadata["transformer_lessons"] = learner_nb_meta

    exercises_here = any(
        BEGIN.match(line) for c in source_nb.cells if c.cell_type == "code" for line in _text(c).split("\n")
    )
    banner = nbformat.v4.new_markdown_cell(
        banner_markdown(name, course, exercises_here), metadata={"tags": [BANNER_TAG]}
    )
    banner["id"] = BANNER_TAG
    cells = [banner]
    for index, cell in enumerate(source_nb.cells):
        cid = _cell_id(cell, index)
        text = _text(cell)
        metadata = _clean_metadata(cell.get("metadata", {}))
        if cell.cell_type == "code":
            stubbed, blocks = stub_source(text, where=f"{name}, cell {index} (id {cid})")
            new = nbformat.v4.new_code_cell(stubbed, metadata=metadata)
        elif cell.cell_type == "markdown":
            blocks = 0
            new = nbformat.v4.new_markdown_cell(text, metadata=metadata)
            if "attachments" in cell:
                new["attachments"] = cell["attachments"]
        else:
            blocks = 0
            new = nbformat.v4.new_raw_cell(text, metadata=metadata)
        new["id"] = f"{cid}-learner"
        cells.append(new)
        if blocks:
            folded = solution_markdown(text)
            checked = exercise_after(source_nb.cells, index)
            if checked is not None and checked in {e.name for e in exercises.EXERCISES}:
                folded = hints_markdown(checked) + "\n\n" + folded
            solution = nbformat.v4.new_markdown_cell(folded, metadata={"tags": [SOLUTION_TAG]})
            solution["id"] = f"{cid}-solution"
            cells.append(solution)
    nb.cells = cells
    if course is not None:
        nb = colab.stamp(nb, f"{LEARNER_DIR}/{name}", course)
    return nb


def render(nb) -> str:
    """The exact text ``nbformat.write`` puts in a file (with its final newline)."""
    text = nbformat.writes(nb, version=4)
    return text if text.endswith("\n") else text + "\n"


# --- the whole course --------------------------------------------------------------


def build_all(root: Path = ROOT, course: colab.Course | None = None) -> dict[Path, str]:
    """{learner path: file text} for every solution notebook under ``root``."""
    built = {}
    for path in sorted((root / SOURCE_DIR).glob(NOTEBOOK_GLOB)):
        source_nb = nbformat.read(path, as_version=4)
        built[root / LEARNER_DIR / path.name] = render(build_notebook(source_nb, path.name, course))
    return built


def stale_files(root: Path = ROOT, course: colab.Course | None = None) -> list[Path]:
    """Learner files that differ from a fresh build, are missing, or have no source any more."""
    built = build_all(root, course)
    stale = [p for p, text in built.items() if not p.exists() or p.read_text(encoding="utf-8") != text]
    stale += [p for p in sorted((root / LEARNER_DIR).glob(NOTEBOOK_GLOB)) if p not in built]
    return sorted(stale)


def write_all(root: Path = ROOT, course: colab.Course | None = None) -> list[Path]:
    """Write every learner notebook that changed, delete those without a source; return what changed."""
    built = build_all(root, course)
    (root / LEARNER_DIR).mkdir(exist_ok=True)
    changed = []
    for path, text in built.items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    for path in sorted((root / LEARNER_DIR).glob(NOTEBOOK_GLOB)):
        if path not in built:
            path.unlink()
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 listing learner files that are stale"
    )
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    course = colab.try_read_course(args.root / "pyproject.toml")
    if course is None:
        print("build_learner: pyproject.toml has no [project.urls] Repository yet: no Colab cells", file=sys.stderr)
    try:
        if args.check:
            stale = stale_files(args.root, course)
            if stale:
                rels = [p.relative_to(args.root).as_posix() for p in stale]
                print(
                    "learner notebooks out of date (run python -m transformer_lessons.authoring.build_learner):\n  "
                    + "\n  ".join(rels)
                )
                return 1
            print("build_learner: learner/ is up to date")
            return 0
        changed = write_all(args.root, course)
    except MarkerError as error:
        print(f"build_learner: {error}", file=sys.stderr)
        return 2
    rels = [p.relative_to(args.root).as_posix() for p in changed]
    print("build_learner: wrote " + (", ".join(rels) if rels else "nothing (up to date)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
