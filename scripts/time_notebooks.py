"""How long each notebook takes to run, top to bottom, in the quick mode on this machine.

Runs the solution notebooks in order, as a learner would (notebook 10 trains the quick model; a second run
reuses it), each in a fresh kernel from the notebooks' own folder, without saving anything back, and
prints a Markdown table of wall-clock times. Start it on an otherwise idle machine: a test run beside
it slows every figure. The runs the notebooks train are removed first, so the times are those of a
fresh checkout. With ``--inplace`` it saves each executed notebook with its outputs: ``make execute``
runs it that way, so every re-execution of the course also measures it.

Usage (from the repository root)::

    .venv/bin/python scripts/time_notebooks.py                 # every notebook
    .venv/bin/python scripts/time_notebooks.py 10 11           # some of them
    .venv/bin/python scripts/time_notebooks.py --json out.json # also write the times as JSON
    .venv/bin/python scripts/time_notebooks.py --inplace       # save the outputs too (make execute)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_RUNS = (
    "runs/quick",
    "runs/quick_scheduled_sampling",
    "runs/09_resume_demo",
)  # what the notebooks train (Makefile: NOTEBOOK_RUNS)


def run_notebook(path: Path, inplace: bool = False) -> tuple[float, int]:
    """Seconds to execute ``path`` in a fresh kernel, and the number of error outputs (0 when it ran through).

    With ``inplace`` the executed notebook is written back to ``path`` (as ``jupyter nbconvert --execute --inplace``).
    """
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=1800,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        allow_errors=not inplace,
    )  # saving: stop at the first error, save nothing
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    errors = sum(
        o.get("output_type") == "error" for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    if inplace:
        nbformat.write(nb, path)
    return seconds, errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("numbers", nargs="*", help="two-digit notebook numbers (default: all)")
    parser.add_argument("--folder", default="notebooks", help="notebooks/ (default) or learner/")
    parser.add_argument("--json", type=Path, help="also write the machine, the date and {notebook: seconds} here")
    parser.add_argument("--inplace", action="store_true", help="save each executed notebook with its outputs")
    parser.add_argument("--keep-runs", action="store_true", help="do not remove the runs the notebooks train first")
    args = parser.parse_args(argv)
    os.environ.setdefault("TRANSFORMER_LESSONS_MODE", "quick")
    os.environ.setdefault("MPLBACKEND", "agg")
    os.environ.setdefault("TQDM_MININTERVAL", "5")
    paths = sorted((ROOT / args.folder).glob("[0-9][0-9]_*.ipynb"))
    if args.numbers:
        paths = [p for p in paths if p.name[:2] in args.numbers]
    if not args.keep_runs:
        for run in NOTEBOOK_RUNS:
            shutil.rmtree(ROOT / run, ignore_errors=True)
    machine = (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"mode {os.environ['TRANSFORMER_LESSONS_MODE']}"
    )
    print(machine, flush=True)
    times: dict[str, float] = {}
    failed = []
    print("| notebook | run time | errors |\n|---|---|---|", flush=True)
    for path in paths:
        seconds, errors = run_notebook(path, args.inplace)
        times[path.name] = round(seconds, 1)
        if errors:
            failed.append(path.name)
        print(f"| {path.name} | {seconds / 60:.1f} min ({seconds:.0f} s) | {errors} |", flush=True)
    print(f"total: {sum(times.values()) / 60:.1f} min", flush=True)
    if args.json:
        record = {"machine": machine, "date": time.strftime("%Y-%m-%d"), "seconds": times}
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
