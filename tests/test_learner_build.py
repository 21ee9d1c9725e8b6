"""Learner notebooks from the solution notebooks, and the Colab cells (transformer_lessons.authoring).

The first part builds small synthetic notebooks in a temporary directory; the
second looks at the real course: ``learner/`` must match a fresh build, and every
learner notebook must run top to bottom with all its exercises still stubs
(marker ``learner_exec``: it executes every notebook once more, so it is slow).
"""

from __future__ import annotations

import ast
import base64
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import nbformat
import pytest

from transformer_lessons.authoring import build_learner, colab

ROOT = Path(__file__).resolve().parent.parent
AUTHORING = ROOT / "transformer_lessons" / "authoring"

URL = "https://github.com/example-owner/example-course"
PYPROJECT = f"""
[project]
name = "example"
dependencies = ["torch==2.13.0", "sacrebleu==2.6.0"]

[project.urls]
Repository = "{URL}"
"""

FUNCTION_EXERCISE = '''\
def causal_mask(size):
    """Docstring stays."""
    # BEGIN SOLUTION: return a (size, size) bool tensor, True on and below the diagonal
    return SOLUTION_ONE(size)
    # END SOLUTION
'''

CLASS_EXERCISE = """\
class Layer(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        # BEGIN SOLUTION: make self.w = nn.Linear(d_model, d_model)
        self.w = SOLUTION_INIT(d_model)
        # END SOLUTION

    def forward(self, x):
        if x is None:
            # BEGIN SOLUTION: say "why" with quotes and a back\\slash
            return SOLUTION_NESTED(x)
            # END SOLUTION
        # BEGIN SOLUTION: return self.w(x)
        y = SOLUTION_FORWARD(x)
        return y
        # END SOLUTION
"""


# --- helpers -----------------------------------------------------------------------


def _code(source: str, outputs: bool = True):
    cell = nbformat.v4.new_code_cell(source)
    if outputs:
        cell.execution_count = 3
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="an old output\n")]
    return cell


def _write_notebook(root: Path, name: str, cells: list) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    nb.cells = [nbformat.v4.new_markdown_cell("# Title\n\n10 minutes, CPU fine, no GPU needed"), *cells]
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"c{i:02d}"
    path = root / "notebooks" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


@pytest.fixture
def course_root(tmp_path: Path) -> Path:
    """A tiny course: one notebook with a function exercise, one with a class, one without exercise."""
    (tmp_path / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    _write_notebook(tmp_path, "00_intro.ipynb", [_code("print('hello')")])
    _write_notebook(
        tmp_path,
        "01_function.ipynb",
        [
            _code("import torch"),
            _code(FUNCTION_EXERCISE),
            _code("check_causal_mask(causal_mask)"),
        ],
    )
    _write_notebook(
        tmp_path,
        "02_class.ipynb",
        [
            _code("from torch import nn"),
            _code(CLASS_EXERCISE),
            _code("check_layer(Layer)"),
        ],
    )
    return tmp_path


def _build(root: Path, name: str):
    course = colab.read_course(root / "pyproject.toml")
    build_learner.write_all(root, course)
    return nbformat.read(root / "learner" / name, as_version=4)


def _code_sources(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def _cell(nb, cell_id: str):
    return next(c for c in nb.cells if c.get("id") == cell_id)


# --- the stubs ---------------------------------------------------------------------


def test_function_block_becomes_stub_at_its_indentation(course_root):
    nb = _build(course_root, "01_function.ipynb")
    assert _cell(nb, "c02-learner").source == textwrap.dedent('''\
        def causal_mask(size):
            """Docstring stays."""
            # YOUR CODE HERE
            raise NotImplementedError("return a (size, size) bool tensor, True on and below the diagonal")
        ''')


def test_class_methods_and_nested_blocks(course_root):
    nb = _build(course_root, "02_class.ipynb")
    source = _cell(nb, "c02-learner").source
    assert (
        '        super().__init__()\n        # YOUR CODE HERE\n        raise NotImplementedError("make self.w = nn.Linear(d_model, d_model)")'
        in source
    )
    assert "            # YOUR CODE HERE\n            raise NotImplementedError(" in source  # inside the if
    assert '        raise NotImplementedError("return self.w(x)")' in source
    assert source.count("raise NotImplementedError") == 3
    assert "if x is None:" in source and "def forward(self, x):" in source  # code outside the blocks stays


def test_stub_is_valid_python_and_raises_with_the_hint(course_root):
    nb = _build(course_root, "02_class.ipynb")
    source = _cell(nb, "c02-learner").source
    ast.parse(source)
    namespace = {"nn": type("nn", (), {"Module": object})}
    exec(source, namespace)  # noqa: S102 - our own generated code
    with pytest.raises(NotImplementedError, match=r"make self.w = nn.Linear"):
        namespace["Layer"](4)
    layer = object.__new__(namespace["Layer"])
    with pytest.raises(NotImplementedError) as info:
        layer.forward(None)
    assert str(info.value) == 'say "why" with quotes and a back\\slash'  # quotes and backslashes survive


def test_no_solution_code_left_in_learner_code_cells(course_root):
    for name in ("01_function.ipynb", "02_class.ipynb"):
        nb = _build(course_root, name)
        code = "\n".join(_code_sources(nb))
        assert "SOLUTION_" not in code and "BEGIN SOLUTION" not in code and "END SOLUTION" not in code


def test_solution_one_click_away_right_after_the_exercise(course_root):
    nb = _build(course_root, "02_class.ipynb")
    ids = [c.id for c in nb.cells]
    exercise = ids.index("c02-learner")
    details = nb.cells[exercise + 1]
    assert details.cell_type == "markdown" and details.id == "c02-solution"
    text = details.source
    assert text.startswith("<details><summary>Show a solution</summary>") and text.rstrip().endswith("</details>")
    assert "```python\n" in text
    for line in (
        "self.w = SOLUTION_INIT(d_model)",
        "return SOLUTION_NESTED(x)",
        "y = SOLUTION_FORWARD(x)",
        "def forward(self, x):",
    ):
        assert line in text
    assert "BEGIN SOLUTION" not in text  # the markers are build instructions, not part of the answer
    assert sum(c.source.startswith("<details>") for c in nb.cells) == 1  # one per exercise cell, not per block


def test_outputs_cleared_and_run_metadata_dropped(course_root):
    for name in ("00_intro.ipynb", "01_function.ipynb"):
        nb = _build(course_root, name)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None
        assert "widgets" not in nb.metadata
        assert nb.metadata["kernelspec"]["name"] == "python3"


def test_banner_on_top_and_notebook_without_exercise_copied(course_root):
    nb = _build(course_root, "00_intro.ipynb")
    kinds = [(c.cell_type, c.id) for c in nb.cells]
    assert kinds[:3] == [("markdown", "colab-badge"), ("markdown", "learner-banner"), ("markdown", "c00-learner")]
    assert "Learner version" in nb.cells[1].source and "../notebooks/00_intro.ipynb" in nb.cells[1].source
    assert "print('hello')" in _code_sources(nb)
    assert not any(c.source.startswith("<details>") for c in nb.cells)
    # No exercise here: the banner does not talk of stubs and folded solutions that are not there.
    assert "no exercise" in nb.cells[1].source and "NotImplementedError" not in nb.cells[1].source
    assert "NotImplementedError" in _build(course_root, "01_function.ipynb").cells[1].source


def test_build_twice_gives_identical_bytes(course_root):
    course = colab.read_course(course_root / "pyproject.toml")
    build_learner.write_all(course_root, course)
    first = {p.name: p.read_bytes() for p in (course_root / "learner").iterdir()}
    assert build_learner.write_all(course_root, course) == []
    assert {p.name: p.read_bytes() for p in (course_root / "learner").iterdir()} == first
    assert build_learner.stale_files(course_root, course) == []
    assert build_learner.main(["--root", str(course_root), "--check"]) == 0


def test_check_lists_stale_missing_and_orphaned_files_without_writing(course_root, capsys):
    course = colab.read_course(course_root / "pyproject.toml")
    build_learner.write_all(course_root, course)
    learner = course_root / "learner"
    source = course_root / "notebooks" / "01_function.ipynb"
    source.write_text(
        source.read_text(encoding="utf-8").replace("Docstring stays.", "Docstring changed."), encoding="utf-8"
    )
    (learner / "00_intro.ipynb").unlink()
    (learner / "09_orphan.ipynb").write_text("{}", encoding="utf-8")
    before = {p.name: p.read_bytes() for p in learner.iterdir()}

    assert build_learner.main(["--root", str(course_root), "--check"]) == 1
    out = capsys.readouterr().out
    for name in ("learner/00_intro.ipynb", "learner/01_function.ipynb", "learner/09_orphan.ipynb"):
        assert name in out
    assert "learner/02_class.ipynb" not in out
    assert {p.name: p.read_bytes() for p in learner.iterdir()} == before  # --check writes nothing

    assert build_learner.main(["--root", str(course_root)]) == 0
    assert not (learner / "09_orphan.ipynb").exists()
    assert build_learner.main(["--root", str(course_root), "--check"]) == 0


@pytest.mark.parametrize("tool", ["colab", "build_learner"])
def test_the_tools_run_as_modules_of_the_installed_package(course_root, tool):
    """``make learner`` runs ``python -m transformer_lessons.authoring.<tool>``: from any folder, no sys.path edit."""
    run = subprocess.run(
        [sys.executable, "-m", f"transformer_lessons.authoring.{tool}", "--root", str(course_root)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=course_root,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"{tool}: "), run.stdout  # its own report, not another program's


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f():\n    # BEGIN SOLUTION: do it\n    return 1\n", r"line 2 has no '# END SOLUTION'"),
        ("def f():\n    return 1\n    # END SOLUTION\n", r"'# END SOLUTION' on line 3 without"),
        ("# BEGIN SOLUTION: a\n# BEGIN SOLUTION: b\n# END SOLUTION\n", r"line 2 inside the block opened on line 1"),
        ("def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION\n", r"has no hint"),
    ],
    ids=["begin-without-end", "end-without-begin", "nested", "no-hint"],
)
def test_bad_markers_are_a_clear_error(course_root, source, message, capsys):
    _write_notebook(course_root, "03_broken.ipynb", [_code("x = 1"), _code(source)])
    with pytest.raises(build_learner.MarkerError, match=message) as info:
        build_learner.build_all(course_root)
    assert "03_broken.ipynb, cell 2 (id c02)" in str(info.value)
    assert build_learner.main(["--root", str(course_root)]) == 2
    assert "03_broken.ipynb" in capsys.readouterr().err


def test_learner_build_works_without_a_repository_address(course_root):
    (course_root / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = []\n', encoding="utf-8")
    assert colab.try_read_course(course_root / "pyproject.toml") is None
    assert build_learner.main(["--root", str(course_root)]) == 0
    nb = nbformat.read(course_root / "learner" / "01_function.ipynb", as_version=4)
    assert nb.cells[0].id == "learner-banner" and not any(colab.is_colab_cell(c) for c in nb.cells)


# --- Colab cells -------------------------------------------------------------------


def test_stamp_is_idempotent_and_points_each_notebook_at_itself(course_root):
    course = colab.read_course(course_root / "pyproject.toml")
    build_learner.write_all(course_root, course)
    paths = colab.notebook_paths(course_root)
    assert len(paths) == 6
    stale = colab.run(course_root, course, check=False)
    assert stale == paths[:3]  # the learner files were stamped by the build already
    after_first = {p: p.read_bytes() for p in paths}
    assert colab.run(course_root, course, check=False) == []
    assert {p: p.read_bytes() for p in paths} == after_first
    assert colab.main(["--root", str(course_root), "--check"]) == 0

    for path in paths:
        nb = nbformat.read(path, as_version=4)
        rel = path.relative_to(course_root).as_posix()
        tags = [t for c in nb.cells for t in c.metadata.get("tags", []) if t in colab.COLAB_TAGS]
        assert sorted(tags) == ["colab-badge", "colab-setup"]
        assert nb.cells[0].id == "colab-badge"
        assert f"colab.research.google.com/github/example-owner/example-course/blob/main/{rel})" in nb.cells[0].source
        first_code = next(c for c in nb.cells if c.cell_type == "code")
        assert first_code.id == "colab-setup"


def test_stamp_keeps_an_executed_setup_cell_and_check_sees_changes(course_root, capsys):
    course = colab.read_course(course_root / "pyproject.toml")
    colab.run(course_root, course, check=False, dirs=("notebooks",))
    path = course_root / "notebooks" / "01_function.ipynb"
    nb = nbformat.read(path, as_version=4)
    setup = _cell(nb, "colab-setup")
    setup.execution_count = 1  # as after a real run: stamping again must not undo it
    nbformat.write(nb, path)
    assert colab.run(course_root, course, check=False, dirs=("notebooks",)) == []
    assert _cell(nbformat.read(path, as_version=4), "colab-setup").execution_count == 1

    moved = colab.Course(repository="https://github.com/someone-else/fork", pins=course.pins)
    assert colab.run(course_root, moved, check=True, dirs=("notebooks",)) == colab.notebook_paths(
        course_root, ("notebooks",)
    )
    assert colab.run(course_root, course, check=True, dirs=("notebooks",)) == []


def test_a_comment_change_keeps_the_setup_cells_run_and_a_code_change_does_not(course_root, monkeypatch):
    course = colab.read_course(course_root / "pyproject.toml")
    nb = colab.stamp(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), "notebooks/x.ipynb", course)
    _cell(nb, "colab-setup").execution_count = 1
    real = colab.setup_source
    monkeypatch.setattr(colab, "setup_source", lambda *a: real(*a).replace("# Keep Colab's", "# Still keep Colab's"))
    assert _cell(colab.stamp(nb, "notebooks/x.ipynb", course), "colab-setup").execution_count == 1
    monkeypatch.setattr(colab, "setup_source", lambda *a: real(*a) + "\nprint('more')")
    assert _cell(colab.stamp(nb, "notebooks/x.ipynb", course), "colab-setup").execution_count is None
    assert colab.same_code("a = 1  # one", "a = 1  # the first") and not colab.same_code("a = 1", "a = 2")


# Other projects whose address a script may name: Colab's published list of its packages (scripts/colab_constraints.py).
OTHER_PROJECTS = {"googlecolab/backend-info"}
# Where an owner/repo can hide in a notebook: github.com/<o>/<r>, Colab's github/<o>/<r>, raw files.
OWNER_REPO = re.compile(r"(?:github(?:\.com)?|raw\.githubusercontent\.com)/([\w.-]+/[\w.-]+)")


def test_the_repository_address_has_one_source(course_root):
    course = colab.read_course(course_root / "pyproject.toml")
    build_learner.write_all(course_root, course)
    colab.run(course_root, course, check=False)
    for path in colab.notebook_paths(course_root):
        text = path.read_text(encoding="utf-8")
        for owner_repo in OWNER_REPO.findall(text):
            assert owner_repo == "example-owner/example-course", f"{path.name}: {owner_repo}"
    # ... and no tool or script spells out an address of its own (other projects' published data may be named).
    for script in [*AUTHORING.glob("*.py"), *(ROOT / "scripts").glob("*.py")]:
        named = re.findall(r"github\.com/([\w-][\w.-]*(?:/[\w.-]+)?)", script.read_text(encoding="utf-8"))
        assert set(named) <= OTHER_PROJECTS, f"{script.name}: {sorted(set(named) - OTHER_PROJECTS)}"
    (course_root / "pyproject.toml").write_text('[project]\nname = "x"\n', encoding="utf-8")
    with pytest.raises(colab.CourseConfigError, match=r"\[project.urls\] Repository"):
        colab.read_course(course_root / "pyproject.toml")
    assert colab.main(["--root", str(course_root), "--check"]) == 2


DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "notebooks" / "README.md",
    ROOT / "learner" / "README.md",
]


@pytest.mark.parametrize("path", [p for p in DOCS if p.exists()], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_docs_do_not_spell_out_the_repository_address(path):
    """The address lives in pyproject.toml only: a copy in the prose would go stale when it moves."""
    course = colab.try_read_course(ROOT / "pyproject.toml")
    if course is None:
        pytest.skip("pyproject.toml has no [project.urls] Repository yet")
    text = path.read_text(encoding="utf-8")
    owner_repo = course.github_path.lower()
    spelled = [m for m in OWNER_REPO.findall(text) if m.lower().removesuffix(".git") == owner_repo]
    assert not spelled and course.repository.lower() not in text.lower(), (
        f"{path.relative_to(ROOT)} spells out the repository address ({course.repository}); refer to "
        f"`[project.urls] Repository` in pyproject.toml or to the notebooks' Open in Colab badge instead"
    )


_RUN_SETUP = textwrap.dedent("""\
    import json, subprocess, sys, types
    calls = []
    subprocess.run = lambda args, **kw: calls.append(list(args))   # record pip, never run it
    if sys.argv[1] == "colab":                                         # pretend to be Colab
        output = types.SimpleNamespace(enable_custom_widget_manager=lambda: calls.append(["widget manager"]))
        sys.modules["google"] = types.ModuleType("google")
        sys.modules["google.colab"] = types.SimpleNamespace(output=output)
    exec(sys.stdin.read(), {"__name__": "__main__"})
    print(json.dumps(calls))
    """)


def _run_setup_cell(source: str, where: str) -> tuple[list, str]:
    proc = subprocess.run(
        [sys.executable, "-c", _RUN_SETUP, where],
        input=source,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    *printed, calls = proc.stdout.splitlines()
    return json.loads(calls), "\n".join(printed) + proc.stderr


def test_setup_cell_is_a_silent_no_op_outside_colab(course_root):
    course = colab.read_course(course_root / "pyproject.toml")
    source = colab.setup_source("notebooks/01_function.ipynb", course)
    calls, printed = _run_setup_cell(source, "elsewhere")
    assert calls == [] and printed == ""


def test_setup_cell_on_colab_installs_without_touching_torch(course_root):
    course = colab.read_course(course_root / "pyproject.toml")
    calls, _ = _run_setup_cell(colab.setup_source("notebooks/01_function.ipynb", course), "colab")
    pip_calls = [c for c in calls if "pip" in c]
    assert len(pip_calls) == 2
    extras, package = pip_calls  # what Colab lacks first, the package (without dependencies) last
    assert "--no-deps" in package and f"git+{URL}@main" in package
    assert "sacrebleu==2.6.0" in extras and "--no-deps" not in extras
    # Otherwise pip ends in a red "ERROR: ... requires torch==2.13.0, but you have torch ...".
    assert all("--no-warn-conflicts" in call for call in pip_calls), pip_calls
    assert not any("torch" in arg for call in pip_calls for arg in call)
    assert calls[-1] == ["widget manager"]


def _wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A minimal pure-Python wheel (no build tool, no network)."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{dist}/__init__.py": "",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(folder / f"{dist}-{version}-py3-none-any.whl", "w") as wheel:
        for path, text in files.items():
            wheel.writestr(path, text)


def test_setup_cell_pip_calls_print_nothing_where_the_pins_cannot_hold(course_root, tmp_path):
    """Replay the setup cell's pip calls in a venv whose torch is not the pinned one: pip stays silent.

    The package is a stand-in wheel with the course's pins (torch, JupyterLab, pytest that
    Colab lacks or has in other versions); everything comes from local wheels, offline.
    """
    wheels, venv = tmp_path / "wheels", tmp_path / "venv"
    wheels.mkdir()
    _wheel(wheels, "torch", "1.0")  # "Colab's own PyTorch"
    _wheel(wheels, "sacrebleu", "2.6.0")
    _wheel(wheels, "example", "0.1.0", ("torch==2.13.0", "jupyterlab==4.6.6", "sacrebleu==2.6.0", "pytest==9.2.0"))
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300)
    if made.returncode != 0:
        pytest.skip(f"cannot make a venv with pip here: {made.stderr.strip()[-300:]}")
    python = str(venv / ("Scripts" if os.name == "nt" else "bin") / "python")
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    offline = ["--no-index", "--find-links", str(wheels)]

    def pip(args: list[str]) -> str:
        """Run ``python -m pip <args>`` in the venv, offline; what it printed."""
        run = subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True, env=env, timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr
        return run.stdout + run.stderr

    pip(["install", "--quiet", *offline, "torch==1.0"])
    course = colab.read_course(course_root / "pyproject.toml")
    calls, _ = _run_setup_cell(colab.setup_source("notebooks/01_function.ipynb", course), "colab")
    replay = []
    for call in (c for c in calls if "pip" in c):
        args = call[call.index("install") :]  # drop [sys.executable, "-m", "pip"]
        replay.append([*args[:1], *offline, *(a.replace(f"git+{URL}@main", "example") for a in args[1:])])
    for args in replay:
        assert pip(args) == "", f"pip {' '.join(args)} printed something"
    for args in replay:  # the cell run again, with everything reinstalled (a new pin, a re-run)
        assert pip([*args, "--force-reinstall"]) == "", f"pip {' '.join(args)} --force-reinstall printed something"
    # The check would see it: without the flag, reinstalling a dependency of the package is loud.
    loud = pip(["install", "--quiet", *offline, "--force-reinstall", "sacrebleu==2.6.0"])
    assert "example 0.1.0 requires torch==2.13.0" in loud, loud


def test_translator_notebook_says_a_gpu_is_only_for_training_your_own():
    course = colab.Course(repository=URL, pins={"sacrebleu": "sacrebleu==2.6.0"})
    setup = colab.setup_source("notebooks/11_german_english_model.ipynb", course)
    assert "Change runtime type" in setup and "any runtime" in setup
    assert "print(" not in setup  # no warning on a CPU runtime: the course's model needs no GPU
    assert "Change runtime type" not in colab.setup_source("notebooks/01_self_attention.ipynb", course)


# --- figures -----------------------------------------------------------------------

RAW = "https://raw.githubusercontent.com/example-owner/example-course/main"


def _png(colour: str) -> bytes:
    """A one-pixel PNG: stands in for what images/make_figures.py writes beside fig.svg."""
    from PIL import Image  # matplotlib's own dependency

    out = io.BytesIO()
    Image.new("RGB", (1, 1), colour).save(out, format="PNG")
    return out.getvalue()


PNG = _png("white")
EMBEDDED = "data:image/png;base64," + base64.b64encode(PNG).decode("ascii")
FIGURE_CELL = """\
Some text.

![A figure, described](../images/fig.svg)

![With a title](../images/fig.svg "hover text") and [a plain link](../images/fig.svg).

[![Stamped before](https://raw.githubusercontent.com/someone/old-fork/dev/images/fig.svg)](../images/fig.svg)

![elsewhere](https://example.org/x.png) ![pasted](attachment:p.png) ![curve](../results/curve.png)
"""


@pytest.fixture
def figure_root(course_root: Path) -> Path:
    """The tiny course plus images/fig.svg (and its PNG twin) and a notebook that shows it."""
    (course_root / "images").mkdir()
    (course_root / "images" / "fig.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>", encoding="utf-8")
    (course_root / "images" / "fig.png").write_bytes(PNG)
    _write_notebook(course_root, "03_figure.ipynb", [nbformat.v4.new_markdown_cell(FIGURE_CELL), _code("x = 1")])
    return course_root


def _markdown(path: Path) -> str:
    return "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")


def test_figures_are_embedded_in_both_versions(figure_root):
    course = colab.read_course(figure_root / "pyproject.toml")
    source = nbformat.read(figure_root / "notebooks" / "03_figure.ipynb", as_version=4)
    stamped = colab.stamp(source, "notebooks/03_figure.ipynb", course)
    assert _cell(source, "c01").source == FIGURE_CELL  # stamping copies; the notebook passed in stays

    text = _cell(stamped, "c01").source
    # Each figure is its PNG twin inside the notebook; the title names the file; the alt text stays.
    assert f'![A figure, described]({EMBEDDED} "images/fig.png")' in text
    assert f'![With a title]({EMBEDDED} "images/fig.png")' in text
    # An earlier stamp (a raw GitHub address, wrapped in a link to ../images) loses both: no network, no dead link.
    assert f'\n![Stamped before]({EMBEDDED} "images/fig.png")\n' in text
    assert "raw.githubusercontent" not in text and "](../images/" not in text.replace("[a plain link]", "")
    # Only images of the project's own figures change: links, other sites, attachments, other folders stay.
    assert "[a plain link](../images/fig.svg)" in text
    for kept in ("(https://example.org/x.png)", "(attachment:p.png)", "(../results/curve.png)"):
        assert kept in text
    assert (
        _cell(colab.stamp(stamped, "notebooks/03_figure.ipynb", course), "c01").source == text
    )  # stamping again: same

    build_learner.write_all(figure_root, course)
    colab.run(figure_root, course, check=False)
    for folder in ("notebooks", "learner"):
        markdown = _markdown(figure_root / folder / "03_figure.ipynb")
        assert markdown.count(EMBEDDED) == 3 and RAW not in markdown, folder
        assert not re.search(r"!\[[^\]]*\]\(\.\./images/", markdown), folder
    assert colab.run(figure_root, course, check=True) == []
    assert build_learner.stale_files(figure_root, course) == []


def test_a_changed_figure_is_embedded_afresh(figure_root):
    course = colab.read_course(figure_root / "pyproject.toml")
    path = figure_root / "notebooks" / "03_figure.ipynb"
    colab.run(figure_root, course, check=False, dirs=("notebooks",))
    assert colab.run(figure_root, course, check=True, dirs=("notebooks",)) == []
    redrawn = _png("black")  # images/make_figures.py drew the figure again, differently
    (figure_root / "images" / "fig.png").write_bytes(redrawn)
    assert colab.run(figure_root, course, check=True, dirs=("notebooks",)) == [path]
    colab.run(figure_root, course, check=False, dirs=("notebooks",))
    assert base64.b64encode(redrawn).decode("ascii") in _markdown(path)
    assert base64.b64encode(PNG).decode("ascii") not in _markdown(path)


def test_a_missing_figure_stops_stamping_before_anything_is_written(figure_root, capsys):
    path = figure_root / "notebooks" / "03_figure.ipynb"
    path.write_text(
        path.read_text(encoding="utf-8").replace("../images/fig.svg)", "../images/nope.svg)"), encoding="utf-8"
    )
    before = {p: p.read_bytes() for p in colab.notebook_paths(figure_root)}
    assert colab.main(["--root", str(figure_root)]) == 2
    assert "notebooks/03_figure.ipynb shows images/nope.png" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in colab.notebook_paths(figure_root)} == before
    assert colab.main(["--root", str(figure_root), "--check"]) == 2


# --- the real course ---------------------------------------------------------------

LEARNER = ROOT / "learner"
LEARNER_NOTEBOOKS = sorted(LEARNER.glob(build_learner.NOTEBOOK_GLOB))
NO_LEARNER = "learner/ has no notebooks yet: build them with `make learner`"


def test_every_course_notebook_builds():
    course = colab.try_read_course(ROOT / "pyproject.toml")
    built = build_learner.build_all(ROOT, course)
    assert built, "no notebooks found in notebooks/"
    for path, text in built.items():
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
        for source in _code_sources(nb):
            assert "BEGIN SOLUTION" not in source and "END SOLUTION" not in source, path.name
            # Valid Python once IPython's magics (%matplotlib, !pip) are set aside.
            ast.parse(re.sub(r"^([ \t]*)[%!].*$", r"\1pass", source, flags=re.M))


@pytest.mark.skipif(not LEARNER_NOTEBOOKS, reason=NO_LEARNER)
def test_learner_notebooks_are_up_to_date():
    course = colab.try_read_course(ROOT / "pyproject.toml")
    stale = [p.relative_to(ROOT).as_posix() for p in build_learner.stale_files(ROOT, course)]
    assert not stale, f"learner notebooks differ from a fresh build; run `make learner`: {stale}"


@pytest.mark.skipif(
    colab.try_read_course(ROOT / "pyproject.toml") is None,
    reason="pyproject.toml has no [project.urls] Repository yet, so no Colab cells to check",
)
def test_colab_cells_are_in_sync():
    course = colab.read_course(ROOT / "pyproject.toml")
    stale = [p.relative_to(ROOT).as_posix() for p in colab.run(ROOT, course, check=True)]
    assert not stale, f"Colab cells missing or out of date; run `make learner`: {stale}"


@pytest.mark.skipif(
    colab.try_read_course(ROOT / "pyproject.toml") is None,
    reason="pyproject.toml has no [project.urls] Repository yet",
)
def test_every_figure_the_course_shows_is_in_images():
    course = colab.read_course(ROOT / "pyproject.toml")
    missing = []
    for path in colab.notebook_paths(ROOT):
        rel = path.relative_to(ROOT).as_posix()
        missing += [
            f"{rel}: {figure}" for figure in colab.missing_figures(nbformat.read(path, as_version=4), rel, course)
        ]
    assert not missing, "figures shown but not in images/ (run images/make_figures.py?):\n" + "\n".join(missing)


def _outputs_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("execute_result", "display_data"):
            parts.append(str(out.get("data", {}).get("text/plain", "")))
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}")
    return "".join(parts)


@pytest.mark.learner_exec
@pytest.mark.skipif(not LEARNER_NOTEBOOKS, reason=NO_LEARNER)
@pytest.mark.parametrize("path", LEARNER_NOTEBOOKS, ids=lambda p: p.stem)
def test_learner_notebook_runs_with_every_exercise_open(path, monkeypatch, tmp_path):
    from nbclient import NotebookClient

    monkeypatch.setenv("TRANSFORMER_LESSONS_MODE", "quick")
    monkeypatch.setenv("MPLBACKEND", "agg")
    monkeypatch.setenv("TRANSFORMER_LESSONS_PROGRESS", str(tmp_path / "progress.json"))  # this notebook's checks alone
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(LEARNER)}},
    )
    client.execute()  # in memory: the learner file on disk stays clean

    errors = [
        f"cell {i} ({c.id}): {o.ename}: {o.evalue}"
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "error"
    ]
    assert not errors, f"{path.name} fails while its exercises are stubs:\n" + "\n".join(errors)

    exercises = [i for i, c in enumerate(nb.cells) if build_learner.SOLUTION_TAG in c.metadata.get("tags", [])]
    for i in exercises:
        check = next(
            (c for c in nb.cells[i + 1 :] if c.cell_type == "code" and re.search(r"check_\w+\(", c.source)),
            None,
        )
        assert check is not None, f"{path.name}: no check after the exercise {nb.cells[i - 1].id}"
        assert "not implemented yet" in _outputs_text(check), (
            f"{path.name}: the check {check.id} after exercise {nb.cells[i - 1].id} should say "
            f"'not implemented yet', printed: {_outputs_text(check)[:300]!r}"
        )
    # The checks noted their verdicts: a progress() table shows this notebook's exercises as stubs.
    for cell in nb.cells:
        if cell.cell_type == "code" and re.search(r"^progress\(\)", cell.source, re.M):
            shown = _outputs_text(cell)
            assert "… stub" in shown and "not started" in shown, f"{path.name}: progress() printed {shown[:300]!r}"
