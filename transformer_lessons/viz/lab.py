"""Notebook 14's lab, read from its record: the table, each change against the baseline's noise, curves, a widget.

The record is ``transformer_lessons/data/lab_since_2017.json``, written by
``scripts/since_2017.py --summarize`` from ``results/since_2017/`` (the CPU lab) and
``results/since_2017_full/`` (the GPU lab). It ships with the package, so the notebook
reads it on Colab and offline alike. Its two parts, ``"cpu"`` and ``"gpu"``, each hold
``runs``: per run its name, what it changes, the parameters, updates, target tokens/s,
best validation loss and BLEU, test BLEU (beam 4, α 0.6), the validation curve
(``history``), and for the CPU runs their translations of a few test sentences
(``samples``, of the test sentences ``sample_indices``).
"""

from __future__ import annotations

import html
import json
import statistics
from pathlib import Path
from typing import Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from transformer_lessons.viz.widgets import HIGHLIGHT_COLOR, FigureWidget, widget_figure

LAB_FILE = Path(__file__).resolve().parents[1] / "data" / "lab_since_2017.json"
BASELINE_COLOR = "#4a4a4a"
OTHER_COLOR = "#1c7ed6"
WORSE_COLOR = "#c92a2a"


def lab_record(path: str | Path | None = None) -> dict:
    """The lab's record (:data:`LAB_FILE` by default), as a dict with the parts ``"cpu"`` and (if run) ``"gpu"``."""
    path = Path(path) if path is not None else LAB_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"no lab record at {path}: reinstall the package, or write it with "
            "python scripts/since_2017.py --summarize transformer_lessons/data/lab_since_2017.json"
        ) from None


def baseline_noise(part: dict) -> tuple[float, float, int]:
    """The baseline seeds' test BLEU: mean, standard deviation (0 for one seed) and how many seeds."""
    scores = [r["test_bleu"] for r in part["runs"] if r["name"].startswith("baseline") and not r.get("diverged")]
    if not scores:
        raise ValueError("the record has no baseline run: the lab compares every change with the paper's model")
    return statistics.mean(scores), (statistics.stdev(scores) if len(scores) > 1 else 0.0), len(scores)


def lab_rows(part: dict, group: str = "options") -> list[dict]:
    """The runs of one group (``"options"`` or ``"warmup"``), each with ``vs_base``: its test BLEU minus the baselines' mean."""
    mean, _, _ = baseline_noise(part)
    rows = []
    for run in part["runs"]:
        if run.get("group", "options") != group:
            continue
        diverged = bool(run.get("diverged"))
        rows.append(run | {"vs_base": None if diverged else run["test_bleu"] - mean})
    return rows


def lab_table(part: dict, group: str = "options") -> str:
    """The runs as a plain-text table: what a learner reads before the plots."""
    mean, spread, n = baseline_noise(part)
    lines = [
        f"the paper's model, {n} seeds: test BLEU {mean:.2f} ± {spread:.2f} (mean ± standard deviation)",
        f"{'run':20s} {'parameters':>10s} {'tokens/s':>9s} {'updates':>7s} {'val loss':>8s} {'test BLEU':>9s} {'vs base':>7s}",
    ]
    for r in lab_rows(part, group):
        if r.get("diverged"):
            lines.append(f"{r['name']:20s} diverged: {r['diverged']}")
            continue
        lines.append(
            f"{r['name']:20s} {r['parameters']:>10,d} {r['tokens_per_s']:>9,.0f} {r['steps']:>7,d} "
            f"{r['val_loss']:>8.3f} {r['test_bleu']:>9.2f} {r['vs_base']:>+7.2f}"
        )
    return "\n".join(lines)


def plot_lab(part: dict, title: str = "") -> Figure:
    """Each change's test BLEU against the baseline seeds' band (left), and its speed against theirs (right)."""
    mean, spread, n = baseline_noise(part)
    rows = [r for r in lab_rows(part) if not r["name"].startswith("baseline") and not r.get("diverged")]
    bases = [r for r in lab_rows(part) if r["name"].startswith("baseline") and not r.get("diverged")]
    base_speed = statistics.mean(r["tokens_per_s"] for r in bases)
    names = [r["name"] for r in rows]
    y = np.arange(len(rows))
    fig, (ax, ax_speed) = plt.subplots(1, 2, figsize=(12, 0.45 * len(rows) + 1.8), sharey=True, layout="constrained")
    ax.axvspan(mean - 2 * spread, mean + 2 * spread, color=BASELINE_COLOR, alpha=0.12, label="baseline ± 2 sd")
    ax.axvspan(mean - spread, mean + spread, color=BASELINE_COLOR, alpha=0.22, label="baseline ± 1 sd")
    ax.axvline(mean, color=BASELINE_COLOR, linewidth=1.5, label=f"baseline mean of {n} seeds")
    scores = [r["test_bleu"] for r in rows]
    colors = [OTHER_COLOR if s >= mean - 2 * spread else WORSE_COLOR for s in scores]
    ax.barh(y, scores, color=colors, height=0.6)
    for yi, r in zip(y, rows):
        ax.text(r["test_bleu"] + 0.3, yi, f"{r['test_bleu']:.1f} ({r['vs_base']:+.1f})", va="center", fontsize=9)
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xlabel("test sacreBLEU (beam 4, α 0.6)")
    ax.set_xlim(0, max(scores + [mean]) * 1.18)
    ax.legend(loc="lower left", fontsize=8, framealpha=0.9)  # over the bars' start: the scores' labels stay readable
    ax.grid(axis="x", alpha=0.3)
    speed = [r["tokens_per_s"] / base_speed for r in rows]
    ax_speed.barh(y, speed, color=[HIGHLIGHT_COLOR if s > 1 else BASELINE_COLOR for s in speed], height=0.6)
    ax_speed.axvline(1.0, color="black", linewidth=1)
    for yi, s, r in zip(y, speed, rows):
        ax_speed.text(s + 0.01, yi, f"{s:.2f}x, {r['steps']:,} updates", va="center", fontsize=9)
    ax_speed.set_xlabel("target tokens/s, relative to the baselines' mean")
    ax_speed.set_xlim(0, max(speed) * 1.45)
    ax_speed.grid(axis="x", alpha=0.3)
    if title:
        fig.suptitle(title)
    return fig


def _curve(run: dict, key: str) -> tuple[np.ndarray, np.ndarray]:
    """``(minutes, values)`` of a run's validation curve for ``key`` (epochs without that value left out)."""
    points = [(h["elapsed_s"] / 60, h[key]) for h in run.get("history", []) if h.get(key) is not None]
    return np.array([p[0] for p in points]), np.array([p[1] for p in points])


def draw_curves(axes: Sequence, runs: Sequence[dict], colors: Sequence[str]) -> None:
    """Validation loss (first axes) and BLEU (second) of ``runs`` against minutes of training."""
    for run, color in zip(runs, colors):
        for ax, key in zip(axes, ("val_loss", "val_bleu")):
            minutes, values = _curve(run, key)
            ax.plot(minutes, values, "o-", color=color, label=run["name"], markersize=4)
    axes[0].set_ylabel("validation loss")
    axes[1].set_ylabel("validation BLEU (greedy)")
    for ax in axes:
        ax.set_xlabel("minutes of training")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)


def run_named(part: dict, name: str) -> dict:
    """The run called ``name``; KeyError naming the runs there are."""
    for run in part["runs"]:
        if run["name"] == name:
            return run
    raise KeyError(f"no run called {name!r}; the record has {', '.join(r['name'] for r in part['runs'])}")


def plot_warmup(part: dict) -> Figure:
    """The warm-up experiment: validation loss and BLEU of post-norm and pre-norm without warm-up and at 4x the rate."""
    runs = [r for r in part["runs"] if r.get("group") == "warmup"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), layout="constrained")
    palette = ["#c92a2a", "#1c7ed6", "#e8590c", "#2f9e44"]
    draw_curves(axes, runs, [palette[i % len(palette)] for i in range(len(runs))])
    for run in runs:
        if run.get("diverged"):
            axes[0].text(0.02, 0.95, f"{run['name']}: diverged", transform=axes[0].transAxes, va="top", color="red")
    fig.suptitle("warm-up off, or 4x the peak rate: post-norm (the paper's) against pre-norm")
    return fig


def plot_long(part: dict) -> Figure:
    """BLEU by source length on joined test captions: the sinusoidal model against the rotary one."""
    long = part.get("long") or {}
    if not long:
        raise ValueError("the record has no long-sentence experiment")
    names = list(long)
    buckets = list(next(iter(long.values())))
    x = np.arange(len(buckets))
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(8, 3.6), layout="constrained")
    for i, name in enumerate(names):
        scores = [long[name].get(b, {}).get("bleu", np.nan) for b in buckets]
        bars = ax.bar(x + (i - (len(names) - 1) / 2) * width, scores, width, label=name)
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
    counts = [next(iter(long.values()))[b]["n"] for b in buckets]
    ax.set_xticks(x, [f"{b} words\n({n} sentences)" for b, n in zip(buckets, counts)])
    ax.set_ylabel("sacreBLEU")
    ax.set_title("two test captions joined into one: longer than most training sentences")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    return fig


class LabExplorer(FigureWidget):
    """Widget returned by :func:`lab_explorer`: two runs' curves, numbers and translations side by side."""

    _kind_name = "lab explorer"

    def __init__(self, part: dict, pairs: Sequence[tuple[str, str]] | None, a: str, b: str):
        self.part = part
        self.pairs = list(pairs) if pairs is not None else None
        names = [r["name"] for r in part["runs"] if not r.get("diverged")]
        for name in (a, b):
            run_named(part, name)  # KeyError naming the runs
        style = {"description_width": "40px"}
        controls = {
            "a": widgets.Dropdown(options=names, value=a, description="run A", style=style),
            "b": widgets.Dropdown(options=names, value=b, description="run B", style=style),
        }
        self.table = widgets.HTML()
        super().__init__(controls, extra=[self.table])
        self._update()

    def runs(self) -> tuple[dict, dict]:
        """The two runs shown."""
        return run_named(self.part, self.controls["a"].value), run_named(self.part, self.controls["b"].value)

    def describe(self) -> str:
        a, b = self.runs()
        return f"lab explorer: {a['name']} (test BLEU {a['test_bleu']:.2f}) against {b['name']} ({b['test_bleu']:.2f})"

    def _before_draw(self) -> None:
        self.table.value = self.comparison_html()

    def comparison_html(self) -> str:
        """The two runs' numbers, then their translations of the sample sentences (with source and reference if given)."""
        a, b = self.runs()
        rows = [
            ("what it changes", a.get("why", ""), b.get("why", "")),
            ("parameters", f"{a['parameters']:,}", f"{b['parameters']:,}"),
            ("target tokens/s", f"{a['tokens_per_s']:,.0f}", f"{b['tokens_per_s']:,.0f}"),
            ("updates", f"{a['steps']:,}", f"{b['steps']:,}"),
            ("test BLEU", f"{a['test_bleu']:.2f}", f"{b['test_bleu']:.2f}"),
        ]
        cell = 'style="text-align:left;vertical-align:top;padding:2px 8px"'
        body = "".join(
            f"<tr><th {cell}>{html.escape(k)}</th><td {cell}>{html.escape(x)}</td><td {cell}>{html.escape(y)}</td></tr>"
            for k, x, y in rows
        )
        for i, (x, y) in enumerate(zip(a.get("samples", []), b.get("samples", []))):
            label = f"sentence {self.part['sample_indices'][i]}"
            if self.pairs is not None:
                de, en = self.pairs[self.part["sample_indices"][i]]
                label = f"{html.escape(de)}<br><i>reference: {html.escape(en)}</i>"
            style = "" if x == y else ' style="background:#fff4e6"'
            body += f"<tr{style}><td {cell}>{label}</td><td {cell}>{html.escape(x)}</td><td {cell}>{html.escape(y)}</td></tr>"
        head = (
            f"<tr><th></th><th {cell}>A: {html.escape(a['name'])}</th><th {cell}>B: {html.escape(b['name'])}</th></tr>"
        )
        return f'<table style="border-collapse:collapse;font-size:12px">{head}{body}</table>'

    def _draw(self) -> Figure:
        a, b = self.runs()
        fig = widget_figure(12.0, 3.8)
        axes = fig.subplots(1, 2)
        draw_curves(axes, [a, b], [BASELINE_COLOR, HIGHLIGHT_COLOR])
        return fig


def lab_explorer(
    record: dict | None = None,
    pairs: Sequence[tuple[str, str]] | None = None,
    which: str = "cpu",
    a: str = "baseline_s0",
    b: str = "rotary",
) -> LabExplorer:
    """Pick two runs of the lab: their validation curves, numbers and translations side by side.

    Args:
        record: :func:`lab_record`'s dict (read by default).
        pairs: the test set's (German, English) pairs, to show each sample's source and reference.
        which: ``"cpu"`` or ``"gpu"``: which lab.
        a, b: the runs shown first.

    Returns:
        A ``VBox`` with ``.controls`` (``a``, ``b``), ``.runs()``, ``.comparison_html()`` and ``.figure``.
    """
    record = record if record is not None else lab_record()
    if which not in record:
        raise KeyError(f"the record has no {which!r} lab; it has {', '.join(record)}")
    return LabExplorer(record[which], pairs, a, b)
