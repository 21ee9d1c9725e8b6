"""Stamp Google Colab support into the course notebooks: a badge, a setup cell, embedded figures.

Every notebook (solution versions in ``notebooks/``, learner versions in
``learner/``) gets two cells, recognised by their metadata tag so that stamping
again replaces them instead of adding more:

* ``colab-badge``: a markdown cell at the very top with an "Open in Colab"
  badge for this very file;
* ``colab-setup``: a code cell just before the first code cell. On Colab
  (``"google.colab" in sys.modules``) it installs the few dependencies Colab
  lacks, then the course package with ``--no-deps``, so Colab's own PyTorch build
  (the one matching its GPU drivers) is kept, and turns on Colab's widget manager
  for the attention explorers. The package's requirements are ranges that admit
  Colab's versions (``make colab-test`` checks), so nothing conflicts today; both
  pip calls pass ``--no-warn-conflicts`` all the same: should Colab ship a version
  outside a range, pip would end in a red "ERROR: pip's dependency resolver ...
  requires ..., but you have ..." that would invite learners to replace Colab's
  packages, its PyTorch included. Anywhere else the cell does nothing and
  prints nothing, so nbval sees the same (empty) output on every machine.

Stamping also embeds the project's figures in the markdown cells, as PNG
``data:`` URLs made from ``images/`` (see :mod:`transformer_lessons.authoring.figures`):
Colab copies only the notebook, and JupyterLab in a classroom has no network, so
neither a relative path nor a GitHub address would show them everywhere.

The repository address has one home: ``[project.urls] Repository`` in
``pyproject.toml``; what the setup cell installs is the version of
``requirements/lock.txt`` (the one the notebooks were executed with) of each
``[project] dependency`` that Colab lacks.

Usage (from the repository root; ``make learner`` runs it)::

    python -m transformer_lessons.authoring.colab            # stamp notebooks/*.ipynb and learner/*.ipynb
    python -m transformer_lessons.authoring.colab --check    # exit 1 and list the notebooks out of sync
                                                             # (exit 2: no repository address, or a figure missing)
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

import nbformat

from transformer_lessons.authoring import figures

# The checkout this package lives in (the course is installed editable, ``pip install -e .``):
# transformer_lessons/authoring/colab.py -> the repository root.
ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIRS = ("notebooks", "learner")
NOTEBOOK_GLOB = "[0-9][0-9]_*.ipynb"

BADGE_TAG = "colab-badge"
SETUP_TAG = "colab-setup"
COLAB_TAGS = (BADGE_TAG, SETUP_TAG)
BRANCH = "main"
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"

# Colab ships torch, numpy, matplotlib, seaborn, IPython, ipywidgets, spacy and tqdm (requirements/colab.txt);
# these are the course's dependencies it does not ship (installed at the locked version).
MISSING_ON_COLAB = ("sacrebleu",)
LOCK = "requirements/lock.txt"  # beside pyproject.toml: the exact versions the notebooks were executed with
# Notebooks that can train a real model but open on the course's trained one: their setup cell
# says that any runtime works and a GPU only speeds up training your own.
GPU_OPTIONAL = ("11_",)


class CourseConfigError(RuntimeError):
    """pyproject.toml lacks what stamping needs (the repository address, a pin)."""


@dataclass(frozen=True)
class Course:
    """What the stamped cells need to know about the project."""

    repository: str  # https://github.com/<owner>/<repo>, from [project.urls] Repository
    pins: dict[
        str, str
    ]  # package name -> what to install: name==<locked version>, else the requirement of pyproject.toml
    root: Path = ROOT  # the checkout whose images/ the notebooks embed

    @property
    def github_path(self) -> str:
        """``owner/repo`` of the repository."""
        match = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?/?", self.repository)
        if not match:
            raise CourseConfigError(
                f"Colab opens notebooks from GitHub; [project.urls] Repository must look like "
                f"https://github.com/<owner>/<repo>, not {self.repository!r}"
            )
        return f"{match[1]}/{match[2]}"

    def colab_url(self, rel_path: str) -> str:
        return f"https://colab.research.google.com/github/{self.github_path}/blob/{BRANCH}/{rel_path}"

    def github_url(self, rel_path: str) -> str:
        return f"https://github.com/{self.github_path}/blob/{BRANCH}/{rel_path}"

    def pip_source(self) -> str:
        return f"git+https://github.com/{self.github_path}@{BRANCH}"


def _parse_pyproject(text: str) -> dict:
    try:
        import tomllib  # Python >= 3.11
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10: read only the two entries used here
        urls = re.search(r"^\[project\.urls\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
        repo = re.search(r'^Repository\s*=\s*"([^"]+)"', urls[1], re.M) if urls else None
        deps = re.search(r"^dependencies\s*=\s*\[(.*?)\]", text, re.M | re.S)
        return {
            "project": {
                "urls": {"Repository": repo[1]} if repo else {},
                "dependencies": re.findall(r'"([^"]+)"', deps[1]) if deps else [],
            }
        }
    return tomllib.loads(text)


def _locked_versions(lock: Path) -> dict[str, str]:
    """``{lower-case name: version}`` of the ``name==version`` lines of ``lock`` (none if it does not exist)."""
    if not lock.is_file():
        return {}
    found = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", lock.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in found}


def read_course(pyproject: Path = ROOT / "pyproject.toml") -> Course:
    """The repository address (``pyproject.toml``) and each dependency at its version of ``requirements/lock.txt``."""
    project = _parse_pyproject(pyproject.read_text(encoding="utf-8")).get("project", {})
    repository = project.get("urls", {}).get("Repository")
    if not repository:
        raise CourseConfigError(
            f"{pyproject.name} has no [project.urls] Repository; add the GitHub address there "
            f"(it is the one place the notebooks' Colab links and install command come from)"
        )
    locked = _locked_versions(pyproject.parent / LOCK)
    pins = {}
    for requirement in project.get("dependencies", []):
        name = re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower()
        version = locked.get(re.sub(r"[-_.]+", "-", name))
        pins[name] = f"{name}=={version}" if version else requirement.replace(" ", "")
    return Course(repository=repository.rstrip("/"), pins=pins, root=pyproject.resolve().parent)


def try_read_course(pyproject: Path = ROOT / "pyproject.toml") -> Course | None:
    """:func:`read_course`, or ``None`` while the project has no repository address yet."""
    try:
        return read_course(pyproject)
    except CourseConfigError:
        return None


# --- the two cells -----------------------------------------------------------------


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def is_colab_cell(cell) -> bool:
    return any(tag in COLAB_TAGS for tag in _tags(cell))


def badge_source(rel_path: str, course: Course) -> str:
    return f"[![Open In Colab]({BADGE_IMAGE})]({course.colab_url(rel_path)})"


def setup_source(rel_path: str, course: Course) -> str:
    extras = []
    for name in MISSING_ON_COLAB:
        if name not in course.pins:
            raise CourseConfigError(f"{name} is not among the [project] dependencies of pyproject.toml")
        extras.append(course.pins[name])
    quoted = ", ".join(f'"{e}"' for e in extras)
    gpu = Path(rel_path).name.startswith(GPU_OPTIONAL)
    lines = [
        "# On Google Colab this cell installs the course package; anywhere else it does nothing.",
    ]
    if gpu:
        lines.append("# The course's trained model runs on any runtime; to train the full preset yourself (section 5),")
        lines.append("# pick a GPU first (Runtime → Change runtime type).")
    lines += [
        "import sys",
        "",
        'if "google.colab" in sys.modules:',
        "    import subprocess",
        "",
        "    # Keep Colab's own PyTorch (built for its GPUs): first what Colab lacks, then the course package",
        "    # without its pinned dependencies; --no-warn-conflicts stops pip listing those pins as errors.",
        '    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-warn-conflicts"]',
        f"    subprocess.run([*pip, {quoted}], check=True)",
        f'    subprocess.run([*pip, "--no-deps", "{course.pip_source()}"], check=True)',
        "    from google.colab import output",
        "",
        "    output.enable_custom_widget_manager()  # for the widgets of the notebooks that have them; harmless elsewhere",
    ]
    return "\n".join(lines)


# --- figures -----------------------------------------------------------------------


def missing_figures(nb, rel_path: str, course: Course) -> list[str]:
    """The ``images/...`` files that ``nb``'s markdown shows (or would embed) but that are not in the checkout."""
    missing = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            shown = figures.shown_figures(_text(cell), rel_path)
            missing += [path for path in shown if not (course.root / path).is_file()]
    return missing


def same_code(a: str, b: str) -> bool:
    """Do two Python sources differ at most in their comments (and the blank space around them)?"""

    def tokens(text: str) -> list[tuple[int, str]]:
        skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
        try:
            return [
                (t.type, t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type not in skip
            ]
        except (tokenize.TokenError, SyntaxError):
            return [(-1, text)]

    return tokens(a) == tokens(b)


def _cell(kind: str, tag: str, source: str):
    make = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
    cell = make(source=source, metadata={"tags": [tag]})
    cell["id"] = tag  # fixed ids: stamping twice writes the same bytes
    return cell


def strip(nb):
    """A copy of ``nb`` without its Colab cells."""
    out = nbformat.from_dict(nb)
    out.cells = [c for c in nb.cells if not is_colab_cell(c)]
    return out


def stamp(nb, rel_path: str, course: Course):
    """A copy of ``nb`` with up-to-date Colab cells (badge first, setup before the first code cell).

    The project's figures in its markdown cells are embedded from ``images/`` (see
    :func:`figures.embed_figures`). A Colab cell whose source is already right is kept as
    it is (outputs and execution count included), so stamping an executed
    notebook that is in sync changes nothing.
    """
    old = {tag: c for c in nb.cells for tag in _tags(c) if tag in COLAB_TAGS}

    def fresh(kind: str, tag: str, source: str):
        cell = old.get(tag)
        if cell is not None and cell.cell_type == kind and _text(cell) == source:
            return cell
        new = _cell(kind, tag, source)
        if cell is not None and kind == "code" and cell.cell_type == kind and same_code(_text(cell), source):
            # Only a comment changed: the cell runs as before, so its run (count, outputs) still stands.
            new["execution_count"], new["outputs"] = cell.get("execution_count"), cell.get("outputs", [])
        return new

    out = strip(nb)
    out.nbformat_minor = max(5, out.get("nbformat_minor", 5))  # nbformat 4.5: cells carry ids
    cells = [_with_figures(c, rel_path, course) for c in out.cells]
    first_code = next((i for i, c in enumerate(cells) if c.cell_type == "code"), len(cells))
    cells.insert(first_code, fresh("code", SETUP_TAG, setup_source(rel_path, course)))
    cells.insert(0, fresh("markdown", BADGE_TAG, badge_source(rel_path, course)))
    out.cells = cells
    return out


def _with_figures(cell, rel_path: str, course: Course):
    """``cell`` itself, or for a markdown cell whose figures change, a copy with them embedded afresh."""
    if cell.cell_type != "markdown":
        return cell
    text = _text(cell)
    linked = figures.embed_figures(text, rel_path, course.root)
    if linked == text:
        return cell
    moved = nbformat.from_dict(cell)  # a copy: the notebook passed in stays as it was
    moved.source = linked
    return moved


def _text(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def in_sync(nb, rel_path: str, course: Course) -> bool:
    """Whether ``nb`` already carries exactly the cells :func:`stamp` would give it."""
    key = lambda c: (c.cell_type, c.get("id"), _text(c), tuple(_tags(c)))  # noqa: E731
    return [key(c) for c in stamp(nb, rel_path, course).cells] == [key(c) for c in nb.cells]


# --- command line ------------------------------------------------------------------


def notebook_paths(root: Path, dirs=NOTEBOOK_DIRS) -> list[Path]:
    return [p for d in dirs for p in sorted((root / d).glob(NOTEBOOK_GLOB))]


def run(root: Path, course: Course, check: bool, dirs=NOTEBOOK_DIRS) -> list[Path]:
    """Stamp (or with ``check`` only list) the notebooks under ``root`` that are out of sync.

    Raises:
        CourseConfigError: a notebook shows a figure that ``images/`` does not have
            (before anything is written).
    """
    notebooks = []
    for path in notebook_paths(root, dirs):
        rel = path.relative_to(root).as_posix()
        notebooks.append((path, rel, nbformat.read(path, as_version=4)))
    missing = [f"{rel} shows {figure}" for _, rel, nb in notebooks for figure in missing_figures(nb, rel, course)]
    if missing:
        raise CourseConfigError("figures missing from the checkout: " + "; ".join(missing))
    stale = []
    for path, rel, nb in notebooks:
        if in_sync(nb, rel, course):
            continue
        stale.append(path)
        if not check:
            nbformat.write(stamp(nb, rel, course), path)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a notebook is out of sync")
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    try:
        course = read_course(args.root / "pyproject.toml")
        stale = run(args.root, course, args.check)
    except CourseConfigError as error:
        print(f"colab: {error}", file=sys.stderr)
        return 2
    rels = [p.relative_to(args.root).as_posix() for p in stale]
    if args.check:
        if rels:
            print(
                "Colab cells out of sync (run python -m transformer_lessons.authoring.colab):\n  " + "\n  ".join(rels)
            )
            return 1
        print("colab: every notebook is in sync")
        return 0
    print("colab: stamped " + (", ".join(rels) if rels else "nothing (all in sync)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
