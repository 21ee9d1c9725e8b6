"""Static rules every course notebook keeps (nbval executes them; this reads them).

These catch what execution alone does not: a notebook saved with an error, a
path of the author's machine in an output, an exercise without its check, or a
lesson that forgets to tell the learner what they will get out of it.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

from transformer_lessons.viz.widgets import STATIC_COPY_NOTE

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# Notebooks whose lesson includes an interactive attention explorer (issue: foundation, §4).
WITH_EXPLORER = ("01", "02", "03", "06", "07")
# The roadmap has nothing to build yet; the finale (11) and "Inside the translator" (15) explore the trained model.
NO_EXERCISE = ("00", "11")


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def test_notebooks_are_numbered_without_gaps():
    numbers = [int(p.name[:2]) for p in NOTEBOOKS]
    assert numbers, "no notebooks found"
    assert numbers == list(range(len(numbers))), f"notebook numbers must run 00, 01, … without gaps: {numbers}"


@pytest.fixture(params=NOTEBOOKS, ids=lambda p: p.stem)
def notebook(request):
    return request.param, _load(request.param)


def test_kernel_is_python3(notebook):
    path, nb = notebook
    assert nb["metadata"].get("kernelspec", {}).get("name") == "python3", f"{path.name}: kernelspec must be python3"


def test_nbval_markers_are_cell_tags_not_comments(notebook):
    # A learner reads every comment of a cell; nbval reads the same markers from the cell's tags (issue 28: newcomer
    # noise). Only nbval's own tags are allowed, spelled as nbval spells them, so that a typo cannot switch one off.
    path, nb = notebook
    nbval_tags = {"nbval-ignore-output", "nbval-check-output", "nbval-raises-exception", "nbval-skip"}
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        markers = [line for line in _source(cell).splitlines() if re.match(r"\s*#+\s*(NBVAL|PYTEST_VALIDATE)_", line)]
        assert not markers, f"{path.name}, cell {index}: `{markers[0].strip()}`: make it the cell tag nbval-... instead"
        for tag in cell.get("metadata", {}).get("tags", []):
            if tag.lower().startswith("nbval"):
                assert tag in nbval_tags, f"{path.name}, cell {index}: tag {tag!r} is not one nbval reads"


def test_cells_whose_output_differs_by_machine_are_still_ignored():
    """The move from comments to tags kept every marker: the cells that train, time or print versions."""
    counts = {
        path.name[:2]: sum("nbval-ignore-output" in c.get("metadata", {}).get("tags", []) for c in _load(path)["cells"])
        for path in NOTEBOOKS
    }
    assert sum(counts.values()) >= 79, counts
    assert counts["00"] >= 2 and counts["09"] >= 4 and counts["10"] >= 19 and counts["15"] >= 14, counts


def test_saved_with_outputs_and_no_errors(notebook):
    path, nb = notebook
    code = [c for c in nb["cells"] if c["cell_type"] == "code" and _source(c).strip()]
    assert code, f"{path.name} has no code"
    errors = [_source(c)[:60] for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{path.name} is saved with error outputs in cells starting: {errors}"
    unexecuted = [_source(c)[:60] for c in code if c.get("execution_count") is None]
    assert not unexecuted, f"{path.name} has cells that were never run: {unexecuted}"


def test_no_machine_paths(notebook):
    path, _ = notebook
    text = path.read_text(encoding="utf-8")
    hits = sorted(set(re.findall(r"/(?:work|tmp|root|home)/[A-Za-z][\w./-]*", text)))
    assert not hits, f"{path.name} contains paths of the machine it was run on: {hits[:5]}"


def test_opens_with_goals_and_time(notebook):
    path, nb = notebook
    # The "Open in Colab" badge (transformer_lessons.authoring.colab) comes first; the lesson opens right after it.
    first = next(c for c in nb["cells"] if "colab-badge" not in c.get("metadata", {}).get("tags", []))
    assert first["cell_type"] == "markdown", f"{path.name} must open with a markdown cell"
    text = _source(first)
    assert text.lstrip().startswith("#"), f"{path.name}: the first cell should start with a title"
    assert re.search(r"\d+\s*(min|minutes|hour)", text), f"{path.name}: say how long the notebook takes"
    assert re.search(r"GPU", text), f"{path.name}: say whether a GPU helps"


def test_exercises_have_checks(notebook):
    path, nb = notebook
    if path.name[:2] in NO_EXERCISE:
        return
    sources = [_source(c) for c in nb["cells"] if c["cell_type"] == "code"]
    exercise_cells = [i for i, s in enumerate(sources) if "# BEGIN SOLUTION" in s]
    assert exercise_cells, f"{path.name} has no exercise (# BEGIN SOLUTION … # END SOLUTION)"
    for i in exercise_cells:
        s = sources[i]
        assert s.count("# BEGIN SOLUTION") == s.count("# END SOLUTION"), f"{path.name}: unbalanced solution markers"
        assert re.search(r"# BEGIN SOLUTION:\s*\S", s), (
            f"{path.name}: the BEGIN SOLUTION line must carry the stub's hint"
        )
        later = "\n".join(sources[i + 1 : i + 3])
        assert re.search(r"check_\w+\(", later), (
            f"{path.name}: the exercise in code cell {i} is not followed by a check"
        )


def test_hint_and_progress_are_imported_before_the_first_check(notebook):
    """A failing check ends "more help: hint('…')": the name must be defined wherever a check can fail (issue 28)."""
    path, nb = notebook
    sources = [_source(c) for c in nb["cells"] if c["cell_type"] == "code"]
    calls = [i for i, s in enumerate(sources) if re.search(r"^check_\w+\(", s, re.M)]
    if not calls:
        return
    imported = {
        name
        for s in sources[: calls[0] + 1]
        for m in re.finditer(r"^from transformer_lessons import ([\w, ]+)$", s, re.M)
        for name in (n.strip() for n in m[1].split(","))
    }
    assert {"hint", "progress"} <= imported, (
        f"{path.name}: its first check (code cell {calls[0]}) can fail with 'more help: hint(...)', "
        "but hint and progress are not imported above it"
    )


def test_explorer_notebooks_have_an_attention_widget(notebook):
    path, nb = notebook
    if path.name[:2] not in WITH_EXPLORER:
        return
    code = "\n".join(_source(c) for c in nb["cells"] if c["cell_type"] == "code")
    assert "attention_explorer(" in code, (
        f"{path.name} should let the learner explore attention with viz.attention_explorer"
    )


def test_no_path_hacks(notebook):
    path, nb = notebook
    code = "\n".join(_source(c) for c in nb["cells"] if c["cell_type"] == "code")
    assert "sys.path" not in code and "os.chdir" not in code, (
        f"{path.name}: import the installed package, no sys.path/os.chdir hacks"
    )


def test_ends_with_a_summary_and_a_link_to_the_next_notebook(notebook):
    path, nb = notebook
    markdown = [_source(c) for c in nb["cells"] if c["cell_type"] == "markdown"]
    assert any(re.search(r"^## Summary", m, re.M) for m in markdown[-2:]), f"{path.name} should end with a '## Summary'"
    links = re.findall(r"\*\*Next:\*\*\s*\[[^\]]+\]\(([^)]+)\)", markdown[-1])
    following = [p.name for p in NOTEBOOKS if int(p.name[:2]) == int(path.name[:2]) + 1]
    if following:
        assert links == following, f"{path.name} should end with **Next:** [...]({following[0]}), found {links}"
    else:
        assert not links, f"{path.name} is the last notebook, yet links to {links}"


ROOT = NOTEBOOKS[0].parent.parent


def _minutes(text: str, row_pattern: str, what: str) -> dict[str, int]:
    found = {m["nn"]: int(m["min"]) for m in re.finditer(row_pattern, text, re.M)}
    assert sorted(found) == [p.name[:2] for p in NOTEBOOKS], (
        f"{what} should give a time for every notebook, found {sorted(found)}"
    )
    return found


def test_every_list_of_the_course_gives_the_durations_the_notebooks_give():
    intros = {}
    for path in NOTEBOOKS:
        first = next(c for c in _load(path)["cells"] if "colab-badge" not in c.get("metadata", {}).get("tags", []))
        time = re.search(r"\*\*Time:\*\*\s*about (\d+) minutes", _source(first))
        assert time, f"{path.name}: the introduction should say '**Time:** about N minutes'"
        intros[path.name[:2]] = int(time[1])
    lists = {
        "README.md": _minutes(
            (ROOT / "README.md").read_text(encoding="utf-8"),
            r"^\| `(?P<nn>\d\d)_\w+` \|.*\| (?P<min>\d+) min",
            "README.md's table",
        ),
        "notebooks/README.md": _minutes(
            (ROOT / "notebooks" / "README.md").read_text(encoding="utf-8"),
            r"^\| (?P<nn>\d\d) \|.*\| (?P<min>\d+) min",
            "notebooks/README.md",
        ),
        "docs/teaching.md": _minutes(
            (ROOT / "docs" / "teaching.md").read_text(encoding="utf-8"),
            r"^### (?P<nn>\d\d) · .*\((?P<min>\d+) min\)",
            "the teacher's guide",
        ),
    }
    for where, minutes in lists.items():
        assert minutes == intros, f"{where} disagrees with the notebooks' introductions: {minutes} vs {intros}"


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _is_static_copy(output: dict) -> bool:
    """An output holding only a PNG marked as a widget's static copy (``viz.widgets.static_copy``)."""
    data = output.get("data", {})
    if set(data) != {"image/png"}:
        return False
    png = base64.b64decode("".join(data["image/png"]))
    return png.startswith(b"\x89PNG") and STATIC_COPY_NOTE.encode() in png


def test_saved_widgets_carry_a_picture_for_viewers_without_widgets(notebook):
    # GitHub, nbviewer and HTML exports cannot run ipywidgets, and an HTML export shows a widget's own output as an
    # empty box when the notebook saved the widget state: each explorer leaves a static copy of its picture, an
    # output of its own right after the widget (transformer_lessons/viz/widgets.py says why).
    path, nb = notebook
    explorers = [
        c
        for c in nb["cells"]
        if re.search(r"\b(attention_explorer|positional_encoding_explorer|generation_stepper|translator)\(", _source(c))
    ]
    for c in explorers:  # (tqdm's progress bars are widgets too, and need no picture)
        outputs = c.get("outputs", [])
        assert outputs, f"{path.name}: the explorer in cell {c.get('id')} is saved without its output"
        copies = [i for i, o in enumerate(outputs) if _is_static_copy(o)]
        assert copies, (
            f"{path.name}: the explorer in cell {c.get('id')} is saved without a static copy of its picture "
            "(saved by an older version of the package?): re-run the notebook, e.g. `make execute`"
        )
        for i in copies:
            assert i > 0 and WIDGET_VIEW in outputs[i - 1].get("data", {}), (
                f"{path.name}: a static copy in cell {c.get('id')} follows no widget"
            )


MAX_NOTEBOOK_BYTES = 1_000_000  # issue 30: notebook 15 weighed 2 MB, mostly RGBA pictures in two copies each


def test_every_notebook_is_at_most_a_megabyte(notebook):
    path, nb = notebook
    size = path.stat().st_size
    assert size <= MAX_NOTEBOOK_BYTES, (
        f"{path.name} is {size / 1e6:.2f} MB, over {MAX_NOTEBOOK_BYTES / 1e6:.0f} MB: widget pictures go through "
        "viz.widgets.compact_png (256 colours); look for RGBA figures or a widget drawn many times"
    )


def test_widget_pictures_are_stored_in_few_colours(notebook):
    """Every PNG a widget saved (its live picture in the widget state, its static copy) is palette-based."""
    path, nb = notebook
    state = nb["metadata"].get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    live = [
        m.group(1)
        for model in state.values()
        for m in re.finditer(r"data:image/png;base64,([A-Za-z0-9+/=]+)", str(model.get("state", {}).get("value", "")))
    ]
    copies = ["".join(o["data"]["image/png"]) for c in nb["cells"] for o in c.get("outputs", []) if _is_static_copy(o)]
    for data in live + copies:
        png = base64.b64decode(data)
        assert png[25] == 3, f"{path.name}: a widget picture saved as PNG colour type {png[25]}, not a palette"


# Learner notebooks are saved without outputs, and each learner's run prints numbers of its own: their text must not
# describe the outputs of the run saved in notebooks/. A number under discussion is printed by the learner's own run
# (the text points at it), or quoted with the file it comes from (results/...).
SAVED_RUN = re.compile(
    r"saved here|\b(?:run|outputs?|numbers?|figures?) saved\b|\bin (?:the|this) (?:saved )?run\b", re.I
)
LEARNER_NOTEBOOKS = sorted((ROOT / "learner").glob("[0-9][0-9]_*.ipynb"))


def _saved_run_mentions(nb: dict) -> list[str]:
    return [m.group(0) for c in nb["cells"] if c["cell_type"] == "markdown" for m in SAVED_RUN.finditer(_source(c))]


@pytest.mark.parametrize("path", LEARNER_NOTEBOOKS, ids=lambda p: p.name[:2])
def test_learner_text_describes_only_what_the_learners_own_run_shows(path):
    hits = _saved_run_mentions(_load(path))
    assert not hits, (
        f"learner/{path.name} describes the outputs of a saved run ({hits}), which a learner never sees: point at what "
        "their own run prints, or quote the figure with the results/ file it comes from"
    )


def test_the_saved_run_rule_catches_the_phrasings_it_is_for():
    for text in (
        "In the run saved here the best head",
        "(all but one of the 200 in the run saved\nhere)",
        "the numbers saved here",
        "in this run, greedy wins",
    ):
        assert _saved_run_mentions({"cells": [{"cell_type": "markdown", "source": text}]}), text
    assert not _saved_run_mentions(
        {"cells": [{"cell_type": "markdown", "source": "run it again: it resumes where it stopped"}]}
    )


def test_every_introduction_says_how_long_the_notebook_runs_as_the_table_does():
    # scripts/write_run_times.py writes both from results/notebook_times.json (make execute measures it).
    table = {
        m["nn"]: m["text"]
        for m in re.finditer(
            r"^\| (?P<nn>\d\d) \| `\d\d_\w+\.ipynb` \| (?P<text>[^|]+) \|$",
            (ROOT / "notebooks" / "README.md").read_text(encoding="utf-8"),
            re.M,
        )
    }
    assert sorted(table) == [p.name[:2] for p in NOTEBOOKS], (
        f"notebooks/README.md's run-time table lists {sorted(table)}"
    )
    for path in NOTEBOOKS:
        first = next(c for c in _load(path)["cells"] if "colab-badge" not in c.get("metadata", {}).get("tags", []))
        said = re.search(
            r"^\*\*Running it:\*\* (.+?), top to bottom in the quick mode, on a 2-core laptop CPU", _source(first), re.M
        )
        assert said, f"{path.name}: the introduction should say '**Running it:** ...' (scripts/write_run_times.py)"
        assert said[1].replace(" of computing", "") == table[path.name[:2]], (
            f"{path.name} and notebooks/README.md disagree"
        )


def test_the_saved_progress_table_is_what_a_new_learner_sees():
    # `make execute` gives the checks a progress file of its own: the table saved in notebook 00 lists every
    # exercise of the course, with notebook 00's warm-up passed (its check ran just above) and nothing else
    # started, not the build machine's own record.
    from transformer_lessons import exercises

    nb = _load(NOTEBOOKS[0])
    [cell] = [c for c in nb["cells"] if c["cell_type"] == "code" and "progress()" in _source(c)]
    text = "".join("".join(o.get("text", o.get("data", {}).get("text/plain", ""))) for o in cell["outputs"])
    rows = {line.split()[1]: line for line in text.splitlines()[1:-1]}
    assert sorted(rows) == sorted(e.name for e in exercises.EXERCISES)
    started = {name for name, row in rows.items() if "not started" not in row}
    assert started == {e.name for e in exercises.EXERCISES if e.notebook == NOTEBOOKS[0].stem}, started
    assert text.splitlines()[-1].endswith(f"{len(exercises.EXERCISES) - 1} not started")
