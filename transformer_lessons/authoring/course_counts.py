"""The course's counts and totals, computed from the notebooks and the exercises, and written into its text.

A count typed by hand goes stale the day a notebook or an exercise is added ("twelve notebooks and two bonus
ones" when there were four; "7 h 35 min" when the stated times added up to 8 h 55 min). So no text of the course
types them: each place that gives them holds a block between two HTML comments (invisible in a rendered page,
in a Markdown file or a notebook's markdown cell, on lines of their own or inside a sentence),

    <!-- course counts: NAME -->...<!-- end of course counts -->

whose text this module writes (NAME says which text, :data:`RENDERERS`) from what is there: the notebooks ``NN_*.ipynb`` in ``notebooks/``, each one's
"**Time:** about N minutes" (its introduction; tests/test_notebook_hygiene.py keeps the tables equal to it), and
:data:`transformer_lessons.exercises.EXERCISES`. Notebooks 00-11 are the path to the translator
(:data:`LAST_MAIN`); those after it are bonus notebooks. It also writes each notebook's time into the tables that
list them (:data:`TIME_COLUMNS`). tests/test_course_counts.py fails when a block or a time is stale.

Usage (from the repository root)::

    python -m transformer_lessons.authoring.course_counts            # rewrite every block
    python -m transformer_lessons.authoring.course_counts --check    # exit 1 and name the stale files
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import nbformat

from transformer_lessons import exercises

ROOT = Path(__file__).resolve().parents[2]
LAST_MAIN = 11  # notebook 11, the trained translator, ends the course's path; later notebooks are bonus ones
END = "<!-- end of course counts -->"
BLOCK = re.compile(r"<!-- course counts: (?P<name>[\w-]+) -->(?P<nl>\n?)(?P<body>.*?)\n?" + re.escape(END), re.S)
TEXTS = (Path("README.md"), Path("notebooks/README.md"), Path("docs/teaching.md"))  # and every notebook
TIME = re.compile(r"\*\*Time:\*\*\s*about (\d+) minutes")
WORDS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen".split()
WORDS += "seventeen eighteen nineteen twenty".split()


@dataclass(frozen=True)
class Counts:
    numbers: tuple[str, ...]  # the notebooks' two-digit numbers, in order
    minutes: dict[str, int]  # each notebook's stated study time
    exercises: dict[str, int]  # exercises per notebook number (only notebooks that have some)

    @property
    def main(self) -> tuple[str, ...]:
        return tuple(n for n in self.numbers if int(n) <= LAST_MAIN)

    @property
    def bonus(self) -> tuple[str, ...]:
        return tuple(n for n in self.numbers if int(n) > LAST_MAIN)

    def total(self, numbers: tuple[str, ...]) -> int:
        return sum(self.minutes[n] for n in numbers)


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def notebook_paths(root: Path = ROOT) -> list[Path]:
    return sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def count(root: Path = ROOT) -> Counts:
    """What the course holds now."""
    numbers, minutes = [], {}
    for path in notebook_paths(root):
        stated = next((m for c in _cells(path) if c["cell_type"] == "markdown" if (m := TIME.search(_source(c)))), None)
        if stated is None:
            raise ValueError(f"{path.name}: its introduction gives no '**Time:** about N minutes'")
        numbers.append(path.name[:2])
        minutes[path.name[:2]] = int(stated[1])
    per_notebook = Counter(e.notebook[:2] for e in exercises.EXERCISES)
    return Counts(tuple(numbers), minutes, dict(per_notebook))


def word(n: int) -> str:
    return WORDS[n] if n < len(WORDS) else str(n)


def hours(minutes: int) -> str:
    """455 -> '7 h 35 min'."""
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes % 60 else f"{minutes // 60} h"


def span(numbers: tuple[str, ...]) -> str:
    """('12', '13', '14', '15') -> '12–15'; one notebook -> '12'."""
    return numbers[0] if len(numbers) == 1 else f"{numbers[0]}–{numbers[-1]}"


def _notebooks_readme(c: Counts) -> str:
    return (
        f"{word(len(c.numbers)).capitalize()} notebooks. Notebook 00 sets up your machine and maps the route; "
        f"{span(c.main[1:])} rebuild the Transformer of *Attention Is All You Need* (Vaswani et al., 2017) one piece "
        f"at a time and end with a German→English translator. The {word(len(c.bonus))} bonus notebooks "
        f"({span(c.bonus)}) go further. The course has {sum(c.exercises.values())} exercises, each with a check. "
        f"The times below are the ones each notebook gives in its introduction: about {hours(c.total(c.numbers))} "
        f"in all, {hours(c.total(c.main))} for notebooks {span(c.main)} without the bonus notebooks."
    )


def _teaching(c: Counts) -> str:
    return (
        f"Times are the ones each notebook states in its introduction: about {hours(c.total(c.numbers))} for all "
        f"{word(len(c.numbers))} notebooks ({c.total(c.numbers)} min), {hours(c.total(c.main))} for notebooks "
        f"{span(c.main)} without the {word(len(c.bonus))} bonus notebooks ({span(c.bonus)}). The course has "
        f'{sum(c.exercises.values())} exercises. "CPU" means every cell runs on a laptop.'
    )


def _readme(c: Counts) -> str:
    without = [n for n in c.numbers if not c.exercises.get(n)]
    where = f"every notebook but {' and '.join(without)}" if without else "every notebook"
    return f"The course has {sum(c.exercises.values())} exercises, in {where}."


def _route(c: Counts) -> str:
    return (
        f"{word(len(c.numbers))} notebooks: {span(c.main)} lead to the translator, "
        f"then {word(len(c.bonus))} bonus ones ({span(c.bonus)})"
    )


RENDERERS = {
    "notebooks-readme": _notebooks_readme,
    "teaching": _teaching,
    "readme-exercises": _readme,
    "route": _route,
}


def render(text: str, c: Counts, where: str = "text") -> str:
    """``text`` with every course-counts block holding what its renderer writes now."""

    def fill(match: re.Match) -> str:
        name, nl = match["name"], match["nl"]
        if name not in RENDERERS:
            raise ValueError(f"{where}: unknown course-counts block {name!r} (known: {', '.join(RENDERERS)})")
        return f"<!-- course counts: {name} -->{nl}{RENDERERS[name](c)}{nl}{END}"

    return BLOCK.sub(fill, text)


# The tables that give each notebook's time, and how to find it in a row (tests/test_notebook_hygiene.py reads
# them the same way): the time is written from the notebook's introduction.
TIME_COLUMNS = {
    Path("README.md"): re.compile(r"^(?P<head>\| `(?P<nn>\d\d)_\w+` \|.*\| )(?P<min>\d+)(?P<tail> min)", re.M),
    Path("notebooks/README.md"): re.compile(r"^(?P<head>\| (?P<nn>\d\d) \|.*\| )(?P<min>\d+)(?P<tail> min)", re.M),
    Path("docs/teaching.md"): re.compile(
        r"^(?P<head>(?:### (?P<nn>\d\d) · .*\(|\| (?P<nn2>\d\d) \| [^|]+ \| ))(?P<min>\d+)(?P<tail> min)", re.M
    ),
}


def with_times(text: str, path: Path, c: Counts) -> str:
    """``text`` with each notebook's time in its tables set to the notebook's own."""
    pattern = TIME_COLUMNS.get(path)
    if pattern is None:
        return text

    def fill(match: re.Match) -> str:
        number = match["nn"] or match.groupdict().get("nn2")
        minutes = c.minutes.get(number, int(match["min"]))
        return f"{match['head']}{minutes}{match['tail']}"

    return pattern.sub(fill, text)


def _files(root: Path) -> list[Path]:
    return [*TEXTS, *(p.relative_to(root) for p in notebook_paths(root))]


def _render_file(root: Path, path: Path, c: Counts) -> tuple[str, str]:
    """(the file's text now, as it should read)."""
    text = (root / path).read_text(encoding="utf-8")
    if path.suffix != ".ipynb":
        return text, with_times(render(text, c, str(path)), path, c)
    nb = nbformat.reads(text, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown" and BLOCK.search(cell.source):
            cell.source = render(cell.source, c, f"{path}, cell {cell.get('id')}")
    return text, nbformat.writes(nb) + "\n" if BLOCK.search(text) else text


def expected(root: Path = ROOT) -> dict[Path, str]:
    """Each file with a block, as it should read."""
    c = count(root)
    found = {}
    for path in _files(root):
        now, should = _render_file(root, path, c)
        if BLOCK.search(now) or path in TIME_COLUMNS:
            found[path] = should
    return found


def stale_files(root: Path = ROOT) -> list[Path]:
    return [path for path, text in expected(root).items() if (root / path).read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a block is stale; change nothing")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this one)")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.root)
        for path in stale:
            print(f"{path}: its course counts are stale (python -m transformer_lessons.authoring.course_counts)")
        return 1 if stale else 0
    for path, text in expected(args.root).items():
        if (args.root / path).read_text(encoding="utf-8") != text:
            (args.root / path).write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
