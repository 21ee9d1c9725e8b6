"""The course's counts and totals are generated (transformer_lessons/authoring/course_counts.py), never typed.

The blocks it writes must be current, the teacher's table must give each notebook's exercises as
exercises.EXERCISES has them, and no text of the course may type a count of notebooks outside a block.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from transformer_lessons import exercises
from transformer_lessons.authoring import course_counts
from transformer_lessons.authoring.course_counts import BLOCK, Counts

ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["README.md", "notebooks/README.md", "docs/teaching.md", "results/README.md", "learner/README.md"]
NOTEBOOK_MARKDOWN = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
NUMBER = r"(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen)"
TYPED_COUNT = re.compile(rf"\b{NUMBER} (?:bonus )?notebooks\b|\b{NUMBER} bonus ones\b", re.I)
TYPED_TOTAL = re.compile(r"\b\d+ h \d+ min\b")
# Totals that are not the notebooks': the full-day agenda's content time, the sum of its own rows.
NOT_NOTEBOOK_TOTALS = {"Content is about 5 h 10 min"}


def test_every_block_is_current():
    assert course_counts.stale_files() == [], "run: python -m transformer_lessons.authoring.course_counts"


def test_the_counts_are_what_the_course_holds():
    c = course_counts.count()
    assert c.numbers == tuple(p.name[:2] for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")))
    assert c.main[0] == "00" and c.main[-1] == "11" and c.bonus[0] == "12"
    assert sum(c.exercises.values()) == len(exercises.EXERCISES)


def test_a_new_notebook_makes_the_blocks_stale(tmp_path):
    for name in ("notebooks", "docs"):
        shutil.copytree(ROOT / name, tmp_path / name)
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    assert course_counts.stale_files(tmp_path) == []
    extra = json.loads((ROOT / "notebooks" / "15_inside_the_translator.ipynb").read_text(encoding="utf-8"))
    (tmp_path / "notebooks" / "16_a_new_bonus.ipynb").write_text(json.dumps(extra), encoding="utf-8")
    stale = set(course_counts.stale_files(tmp_path))
    assert {Path("notebooks/README.md"), Path("docs/teaching.md"), Path("README.md")} <= stale
    assert Path("notebooks/00_roadmap_and_setup.ipynb") in stale  # its route block counts the notebooks too


def test_the_sentences_say_the_numbers():
    c = Counts(("00", "01", "12"), {"00": 10, "01": 35, "12": 20}, {"00": 1, "12": 2})
    text = course_counts._notebooks_readme(c)
    assert text.startswith("Three notebooks.") and "The one bonus notebooks (12)" in text
    assert "about 1 h 05 min in all, 45 min" not in text  # under an hour is written in minutes below
    assert course_counts.hours(535) == "8 h 55 min" and course_counts.hours(60) == "1 h"
    assert course_counts._readme(c) == "The course has 3 exercises, in every notebook but 01."


def test_a_changed_time_is_written_into_every_table(tmp_path):
    for name in ("notebooks", "docs"):
        shutil.copytree(ROOT / name, tmp_path / name)
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    path = tmp_path / "notebooks" / "03_masks.ipynb"
    path.write_text(re.sub(r"about \d+ minutes", "about 55 minutes", path.read_text(encoding="utf-8"), count=1))
    assert set(course_counts.stale_files(tmp_path)) >= {Path("README.md"), Path("notebooks/README.md")}
    course_counts.main(["--root", str(tmp_path)])
    assert course_counts.stale_files(tmp_path) == []
    for name in ("README.md", "notebooks/README.md", "docs/teaching.md"):
        assert re.search(r"^\|[^\n]*03[^\n]*\| 55 min", (tmp_path / name).read_text(encoding="utf-8"), re.M), name


def test_the_teachers_table_gives_each_notebooks_exercises():
    text = (ROOT / "docs" / "teaching.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| (\d\d) \| [^|]+ \| \d+ min \| [^|]+ \| (\d+)\b[^|]* \|$", text, re.M))
    per_notebook = Counter(e.notebook[:2] for e in exercises.EXERCISES)
    assert sorted(rows) == list(course_counts.count().numbers)
    assert {n: int(k) for n, k in rows.items()} == {n: per_notebook.get(n, 0) for n in rows}


def _outside_blocks(text: str) -> str:
    for allowed in NOT_NOTEBOOK_TOTALS:
        text = text.replace(allowed, "")
    return BLOCK.sub("", text)


def _texts() -> list[tuple[str, str]]:
    found = [(name, (ROOT / name).read_text(encoding="utf-8")) for name in TEXTS if (ROOT / name).exists()]
    for path in NOTEBOOK_MARKDOWN:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        found += [
            (f"{path.name}, cell {c.get('id')}", "".join(c["source"])) for c in cells if c["cell_type"] == "markdown"
        ]
    return found


@pytest.mark.parametrize("pattern", [TYPED_COUNT, TYPED_TOTAL], ids=["counts of notebooks", "totals of hours"])
def test_no_text_types_a_count_outside_a_block(pattern):
    found = [f"{where}: {m[0]!r}" for where, text in _texts() for m in pattern.finditer(_outside_blocks(text))]
    assert not found, "typed counts go stale; put them in a course-counts block:\n" + "\n".join(found)


def test_the_typed_count_rule_catches_what_it_is_for():
    for text in ("twelve notebooks and two bonus ones", "about 7 h 35 min in all", "4 bonus notebooks"):
        assert TYPED_COUNT.search(text) or TYPED_TOTAL.search(text), text
    assert not TYPED_COUNT.search("notebook 12 is a bonus; notebooks 12–15 go further")
