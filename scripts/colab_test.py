"""`make colab-test`: the course with Google Colab's versions of what it uses, installed the way Colab's cell does.

Colab keeps its own preinstalled packages (ipywidgets 7.7.1, IPython 7.34, matplotlib 3.10, ...), and each
notebook's first cell adds what Colab lacks (sacreBLEU) and then the course package with ``--no-deps``
(transformer_lessons/authoring/colab.py). This script rebuilds that situation and runs the course in it:

1. ``setup``: a separate venv (``.venv-colab``) on Python 3.11 with the project's pinned CPU build of PyTorch
   (Colab's own is another version, and a CUDA build is gigabytes), then the packages of
   ``COLAB_PREINSTALLED`` at the versions of ``requirements/colab.txt`` (Colab's published ``pip freeze``;
   scripts/colab_constraints.py writes it), then the stamped setup cell of a notebook run as on Colab (its
   pip calls, with the GitHub address replaced by this checkout); ``pip check`` must pass and a dry run of
   ``pip install <the package>`` *with* its dependencies must want to install nothing but the package: its
   declared requirements admit Colab's versions.
2. ``unit``: every unit test but those marked ``pins`` (they need the exact versions of ``requirements/lock.txt``)
   and the notebook runs of nbval (JupyterLab and nbval are not on Colab); ``DESELECT`` names the others left out.
3. ``notebooks``: notebooks 01-07 and 11 executed top to bottom (nbclient, quick mode); any error output, or a
   traceback printed into a cell, fails; each explorer's outputs must hold the live widget followed by its
   static copy. Notebook 11 finds the course's model in the cache, as a Colab session does after downloading it;
   without the repository it has no course-made laptop model, and its section 5 says to train one (it trains nothing).

Usage (from the repository root; ``make colab-test`` passes the options)::

    python scripts/colab_test.py [--python python3.11] [--torch-index URL] [--data DIR] [--steps setup unit notebooks]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-colab"
COLAB = ROOT / "requirements" / "colab.txt"
LOCK = ROOT / "requirements" / "lock.txt"
NOTEBOOKS = ("01", "02", "03", "04", "05", "06", "07", "11", "14", "15")
# What Colab has preinstalled that the course or its tests use: installed at Colab's versions. The package's own
# runtime dependencies (pyproject.toml) are added to these; each must be on Colab's list (else it is not Colab's).
COLAB_PREINSTALLED = (
    "ipykernel",
    "ipython",
    "jupyter_client",
    "traitlets",  # the kernel and the widgets' comms
    "nbclient",
    "nbformat",
    "nbconvert",
    "beautifulsoup4",  # executing notebooks, HTML exports (tests)
    "pytest",
    "PyYAML",
    "pillow",
    "tensorboard",  # the unit tests; the optional TensorBoard logging
)
# Colab's own pip, setuptools and wheel stay out of the constraints: they are the venv's tools, and the project's
# torch (not Colab's) needs a newer setuptools (torch 2.13.0 asks setuptools>=77.0.3; Colab has 75.2.0).
VENV_TOOLS = ("pip", "setuptools", "wheel")
# Unit tests that are not about Colab and cannot run in its venv, with the reason.
DESELECT = {
    "tests/test_laptop.py::test_make_learn_starts_a_quiet_jupyterlab_even_as_root": "starts `make learn`, the project's own venv with JupyterLab (not a Colab package)",
}
EXPLORER_CALL = re.compile(
    r"\b(attention_explorer|positional_encoding_explorer|generation_stepper|translator|lab_explorer"
    r"|beam_tree_explorer|error_browser|head_switchboard)\("
)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _course_model_path() -> str:
    """``pretrained.COURSE_MODEL_PATH``, read from the source (this script's own venv need not import the package)."""
    source = (ROOT / "transformer_lessons" / "pretrained.py").read_text(encoding="utf-8")
    return re.search(r'^COURSE_MODEL_PATH = "([^"]+)"', source, re.M)[1]


def say(message: str) -> None:
    print(f"colab-test: {message}", flush=True)


def run(cmd: list[str], shown: str | None = None, **kwargs) -> subprocess.CompletedProcess:
    say("$ " + (shown or " ".join(str(c) for c in cmd)))
    return subprocess.run(cmd, check=True, **kwargs)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(path: Path) -> dict[str, str]:
    """``{normalised name: version}`` of a constraints file's ``name==version`` lines (markers ignored)."""
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        if match:
            pins[_normal(match[1])] = match[2]
    return pins


def _runtime_dependencies() -> list[str]:
    """The names of ``[project] dependencies`` in pyproject.toml."""
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        requirements = tomllib.load(f)["project"]["dependencies"]
    return [re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0] for r in requirements]


def _setup_cell() -> str:
    """The source of the Colab setup cell of notebook 01, as stamped (json: no package needed to read it)."""
    path = next((ROOT / "notebooks").glob("01_*.ipynb"))
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if "colab-setup" in cell.get("metadata", {}).get("tags", []):
            return "".join(cell["source"])
    raise SystemExit(f"colab-test: {path.name} has no colab-setup cell (run make learner)")


# What runs inside the venv: the setup cell as on Colab, with the package's GitHub address replaced by this checkout.
REPLAY = """
import subprocess, sys, types
colab = types.ModuleType("google.colab")
colab.output = types.SimpleNamespace(enable_custom_widget_manager=lambda: print("(Colab's widget manager turned on)"))
sys.modules["google"] = types.ModuleType("google"); sys.modules["google.colab"] = colab
real_run = subprocess.run
def local_run(args, **kwargs):
    args = [{root!r} if str(a).startswith("git+https://github.com/") else a for a in args]
    print("setup cell: $", " ".join(map(str, args)), flush=True)
    return real_run(args, **kwargs)
subprocess.run = local_run
exec(compile({cell!r}, "<colab-setup cell>", "exec"))
"""


def setup(
    python: str, torch_index: str | None, venv: Path = VENV, colab: Path = COLAB, torch: str | None = None
) -> Path:
    """Build (or bring up to date) the venv ``venv`` with the constraints ``colab``; return its python.

    ``torch``: the version to install (default the lock's); by hand, Colab's own (PyPI's CUDA build).
    """
    bin_python = venv / "bin" / "python"
    colab_pins = _pins(colab)
    wanted = [*dict.fromkeys([*(d for d in _runtime_dependencies() if _normal(d) in colab_pins), *COLAB_PREINSTALLED])]
    missing = [name for name in wanted if _normal(name) not in colab_pins]
    if missing:
        raise SystemExit(f"colab-test: not on Colab's list (requirements/colab.txt): {missing}")
    torch = torch or _pins(LOCK)["torch"]
    kept = "".join(
        line + "\n"
        for line in colab.read_text(encoding="utf-8").splitlines()
        if not re.match(rf"({'|'.join(VENV_TOOLS)})==", line)
    )
    stamp = hashlib.sha256("\n".join([kept, torch, str(torch_index), python, *wanted]).encode()).hexdigest()
    stamp_file, constraints = venv / ".colab-installed", venv / "colab-constraints.txt"
    if not (bin_python.exists() and stamp_file.exists() and stamp_file.read_text() == stamp):
        shutil.rmtree(venv, ignore_errors=True)
        run([python, "-m", "venv", str(venv)])
        constraints.write_text(kept, encoding="utf-8")
        pip = [str(bin_python), "-m", "pip", "install", "--quiet"]
        run([*pip, f"torch=={torch}", *(["--index-url", torch_index] if torch_index else [])])
        run([*pip, "-c", str(constraints), *wanted])  # Colab's preinstalled packages, at Colab's versions
        stamp_file.write_text(stamp)
    # Every run: the notebooks' first cell, as Colab runs it. Packages it pulls in that Colab already has
    # (sacreBLEU's numpy, regex, lxml, ...) come at Colab's versions, as they would be found there.
    cell = _setup_cell()
    env = {**os.environ, "PIP_CONSTRAINT": str(constraints)}
    run(
        [str(bin_python), "-c", REPLAY.format(root=str(ROOT), cell=cell)],
        env=env,
        cwd=tempfile.gettempdir(),
        shown=f"{bin_python} -c <notebook 01's Colab setup cell, as on Colab, this checkout for GitHub>",
    )
    run([str(bin_python), "-m", "pip", "check"])
    _nothing_of_colabs_replaced(bin_python)
    versions = run([str(bin_python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True).stdout
    shown = {_normal(p["name"]): p["version"] for p in json.loads(versions)}
    say(
        "versions: "
        + ", ".join(
            f"{n} {shown[_normal(n)]}"
            for n in (
                "torch",
                "ipywidgets",
                "ipython",
                "ipykernel",
                "jupyter_client",
                "matplotlib",
                "numpy",
                "spacy",
                "sacrebleu",
                "pytest",
                "transformer-lessons",
            )
        )
    )
    return bin_python


def _nothing_of_colabs_replaced(bin_python: Path) -> None:
    """A dry run of ``pip install <package>`` with its dependencies wants to install the package alone."""
    done = run(
        [str(bin_python), "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-", str(ROOT)],
        capture_output=True,
        text=True,
    )
    report = json.loads(done.stdout)
    extra = [
        f"{i['metadata']['name']} {i['metadata']['version']}"
        for i in report["install"]
        if _normal(i["metadata"]["name"]) != "transformer-lessons"
    ]
    if extra:
        raise SystemExit(
            "colab-test: `pip install` of the package would install or replace, beside Colab's packages: "
            + ", ".join(extra)
            + " (pyproject.toml's ranges must admit Colab's versions)"
        )
    say("pip install of the package beside Colab's versions would install the package alone")


def unit(bin_python: Path, env: dict) -> int:
    # The tests import the checkout's package (pytest puts the repository first on the path); PYTHONPATH does the
    # same for the scripts they start (benchmarks/), so that those find the course's model in the checkout.
    env = {**env, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)}
    say(
        "left out: tests/browser (JupyterLab in Chromium, not Colab's front end), marker learner_exec (every learner "
        "notebook with its exercises open: make learner-test), marker pins (the lock's exact versions)"
    )
    for test, reason in DESELECT.items():
        say(f"deselected {test}: {reason}")
    cmd = [
        str(bin_python),
        "-m",
        "pytest",
        "tests",
        "-m",
        "not pins and not learner_exec",
        "--ignore=tests/browser",
        "-p",
        "no:cacheprovider",
        "--durations=10",
        *(f"--deselect={t}" for t in DESELECT),
    ]
    say("$ " + " ".join(cmd))
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


def notebooks(bin_python: Path, env: dict) -> int:
    """Execute the notebooks inside the venv (this script again, with ``--execute``); 0 if all passed."""
    cmd = [str(bin_python), str(Path(__file__).resolve()), "--execute"]
    say("$ " + " ".join(cmd))
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


# --- inside the venv -------------------------------------------------------------------------------------------


def _static_copy(output: dict) -> bool:
    """An output holding only a PNG marked as a widget's static copy (the package's ``viz.widgets._static_copy``)."""
    from transformer_lessons.viz.widgets import STATIC_COPY_NOTE

    data = output.get("data", {})
    return set(data) == {"image/png"} and STATIC_COPY_NOTE.encode() in base64.b64decode("".join(data["image/png"]))


#: Widgets shown only when there is a model to show: notebook 11's section 5 opens the course-made laptop model from
#: the repository, which a Colab session has not got; until the learner trains one, the cell that loads it prints
#: NO_LAPTOP_MODEL and these cells show nothing (checked: only then may they be empty).
WIDGETS_WITHOUT_A_MODEL = {"own-translator", "own-explorer"}
NO_LAPTOP_MODEL = "no laptop run here: set TRAIN_OWN = True"


def problems(nb) -> list[str]:
    """What is wrong in the executed notebook ``nb``: errors, tracebacks, explorers without widget and picture."""
    found = []
    printed = "".join(
        "".join(o.get("text", "")) for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        source, outputs = "".join(cell.source), cell.get("outputs", [])
        where = f"cell {cell.get('id')} ({source.strip().splitlines()[0][:60] if source.strip() else ''})"
        for out in outputs:
            if out.output_type == "error":
                found.append(f"{where}: {out.ename}: {out.evalue}")
            elif out.output_type == "stream" and "Traceback (most recent call last)" in out.text:
                found.append(f"{where}: a traceback printed: {out.text[-300:]}")
        if cell.get("id") in WIDGETS_WITHOUT_A_MODEL and not outputs and NO_LAPTOP_MODEL in printed:
            continue
        if EXPLORER_CALL.search(source):
            pairs = [
                i
                for i in range(1, len(outputs))
                if _static_copy(outputs[i]) and WIDGET_VIEW in outputs[i - 1].get("data", {})
            ]
            if not pairs:
                kinds = [sorted(o.get("data", {})) or o.output_type for o in outputs]
                found.append(f"{where}: no live widget followed by its static copy; outputs: {kinds}")
    return found


def execute() -> int:
    """Run each notebook with nbclient in this interpreter's kernel; print a line per notebook and a summary."""
    import nbformat
    from nbclient import NotebookClient

    cache = Path(tempfile.mkdtemp(prefix="colab-test-"))
    models = cache / "models"  # the course's model where a Colab session keeps it after downloading it
    models.mkdir()
    record = (ROOT / _course_model_path()).parent  # the committed course model's folder
    for name in ("model_fp16.pt", "metrics.json", "history.json"):
        shutil.copy(record / name, models / name)
    # The package is installed as on Colab (not from the checkout): its model comes from the cache.
    os.environ.update({"TRANSFORMER_LESSONS_CACHE": str(cache), "PYDEVD_DISABLE_FILE_VALIDATION": "1"})
    out_dir = Path(sys.executable).parents[1] / "executed"  # in the venv
    out_dir.mkdir(exist_ok=True)
    passed, failed = 0, 0
    for number in NOTEBOOKS:
        path = next((ROOT / "notebooks").glob(f"{number}_*.ipynb"))
        nb = nbformat.read(path, as_version=4)
        start = time.monotonic()
        try:
            NotebookClient(
                nb,
                timeout=1200,
                kernel_name="python3",
                allow_errors=True,
                resources={"metadata": {"path": str(path.parent)}},
            ).execute()
            found = problems(nb)
        except Exception as error:  # the kernel died, a cell timed out, ...
            found = [f"{type(error).__name__}: {str(error)[-500:]}"]
        nbformat.write(nb, out_dir / path.name)  # to read after a failure
        status = "ok" if not found else "FAILED"
        say(f"{path.name}: {status} ({time.monotonic() - start:.0f} s)" + "".join(f"\n    {p}" for p in found))
        passed, failed = passed + (not found), failed + bool(found)
    shutil.rmtree(cache, ignore_errors=True)
    print(f"notebooks: {passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default="python3.11", help="the Python of the venv (default python3.11)")
    parser.add_argument("--torch-index", default=None, help="where pip takes torch from (as make's TORCH_INDEX)")
    parser.add_argument("--data", default="", help="Multi30k's raw files, as make test's DATA")
    parser.add_argument(
        "--steps", nargs="+", default=["setup", "unit", "notebooks"], choices=["setup", "unit", "notebooks"]
    )
    # By hand, to run the same checks with Colab's own Python and PyTorch (README, "The Colab test"):
    parser.add_argument("--venv", type=Path, default=VENV, help="where the venv goes (default .venv-colab)")
    parser.add_argument(
        "--constraints", type=Path, default=COLAB, help="Colab's versions (default requirements/colab.txt)"
    )
    parser.add_argument("--torch", default=None, help="the torch release to install (default the lock's)")
    parser.add_argument("--execute", action="store_true", help=argparse.SUPPRESS)  # inside the venv: run the notebooks
    args = parser.parse_args(argv)
    if args.execute:
        return execute()
    start = time.monotonic()
    venv = args.venv.resolve()
    bin_python = (
        setup(args.python, args.torch_index, venv, args.constraints.resolve(), args.torch)
        if "setup" in args.steps
        else venv / "bin" / "python"
    )
    env = {**os.environ, "TRANSFORMER_LESSONS_MODE": "quick", "MPLBACKEND": "agg", "TQDM_MININTERVAL": "5"}
    if args.data:
        env["TRANSFORMER_LESSONS_DATA"] = args.data
    results = {}
    if "unit" in args.steps:
        results["unit tests"] = unit(bin_python, env)
    if "notebooks" in args.steps:
        results["notebooks"] = notebooks(bin_python, env)
    failed = [name for name, code in results.items() if code != 0]
    say(f"{'FAILED: ' + ', '.join(failed) if failed else 'passed'} in {time.monotonic() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
