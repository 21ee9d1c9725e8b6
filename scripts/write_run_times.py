"""Write the measured run times (results/notebook_times.json, from ``make execute``) into the course's text.

Each notebook's introduction gets one line, ``**Running it:** <time> of computing, top to bottom in the quick
mode, on a 2-core laptop CPU``, and ``notebooks/README.md`` a table with the same words, so the two cannot
disagree (tests/test_notebook_hygiene.py checks it). Times are rounded so that a re-run on the same machine
rarely changes the text: under 10 s "a few seconds", under a minute to 10 s, then to half a minute.

Usage (from the repository root, after ``make execute`` on an otherwise idle machine)::

    .venv/bin/python scripts/write_run_times.py

Run ``make learner`` afterwards.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "results" / "notebook_times.json"
README = ROOT / "notebooks" / "README.md"
LABEL = "**Running it:**"
TABLE_START = "<!-- run times: scripts/write_run_times.py -->"
TABLE_END = "<!-- end of run times -->"


def describe(seconds: float) -> str:
    """A time a reader can take in: 'a few seconds', 'about 30 seconds', 'about 4 minutes'."""
    if seconds < 10:
        return "a few seconds"
    if seconds < 55:
        return f"about {round(seconds / 10) * 10} seconds"
    minutes = round(seconds / 30) / 2
    return f"about {minutes:g} minute{'s' if minutes != 1 else ''}"


def phrase(seconds: float) -> str:
    return f"{describe(seconds)} of computing"


def intro_line(text: str) -> str:
    return f"{LABEL} {text}, top to bottom in the quick mode, on a 2-core laptop CPU."


def update_notebook(path: Path, text: str) -> None:
    nb = nbformat.read(path, as_version=4)
    intro = next(c for c in nb.cells if "colab-badge" not in c.metadata.get("tags", []))
    lines = [line for line in intro.source.split("\n") if not line.startswith(LABEL)]
    at = next(i for i, line in enumerate(lines) if line.startswith("**Time:**"))
    while at + 1 < len(lines) and lines[at + 1].strip():  # the Time paragraph may wrap
        at += 1
    lines[at + 1 : at + 1] = ["", intro_line(text)]
    source = re.sub(r"\n{3,}", "\n\n", "\n".join(lines))
    if source != intro.source:
        intro.source = source
        nbformat.write(nb, path)


def table(record: dict, phrases: dict[str, str]) -> str:
    rows = [
        TABLE_START,
        "",
        f"Measured on {record['machine']}, {record['date']} (`make execute`, in order, from a fresh checkout):",
        "",
        "| # | notebook | computing, quick mode, 2-core CPU |",
        "|---|---|---|",
    ]
    rows += [f"| {name[:2]} | `{name}` | {phrases[name].replace(' of computing', '')} |" for name in sorted(phrases)]
    rows += ["", TABLE_END]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    record = json.loads(RECORD.read_text())
    phrases = {name: phrase(s) for name, s in record["seconds"].items()}
    for name, text in phrases.items():
        update_notebook(ROOT / "notebooks" / name, text)
    readme = README.read_text(encoding="utf-8")
    block = table(record, phrases)
    if TABLE_START in readme:
        readme = readme[: readme.index(TABLE_START)] + block + readme[readme.index(TABLE_END) + len(TABLE_END) :]
    else:
        raise SystemExit(f"{README} has no '{TABLE_START}' line: put it where the table goes")
    README.write_text(readme, encoding="utf-8")
    print("\n".join(f"{n}: {t}" for n, t in sorted(phrases.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
