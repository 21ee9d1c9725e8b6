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

from transformer_lessons.lab_stats import common_step, compare_options, holm, options, val_loss_at
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
    """The runs of one group (``"options"``, with the options' extra seeds, or ``"warmup"``), each with ``vs_base``:
    its test BLEU minus the baselines' mean."""
    mean, _, _ = baseline_noise(part)
    groups = ("options", "seeds") if group == "options" else (group,)
    rows = []
    for run in part["runs"]:
        if run.get("group", "options") not in groups:
            continue
        diverged = bool(run.get("diverged"))
        rows.append(run | {"vs_base": None if diverged else run["test_bleu"] - mean})
    return rows


def _usual_of(rows: list[dict], name: str) -> dict | None:
    """A warm-up run's control: the run of the same norm with the usual schedule over the same time."""
    return next((r for r in rows if r["name"] == f"{name.split('_')[0]}_usual"), None)


def lab_table(part: dict, group: str = "options") -> str:
    """The runs as a plain-text table: what a learner reads before the plots.

    ``loss@N``: the validation loss after the same N updates for every run of the table (the
    most that all reached), where runs compare at equal work; ``test BLEU`` is after equal time.
    The options are set against the baseline seeds' mean (``vs base``); a warm-up run against the
    run of its own norm with the usual schedule and the same 2.5 minutes (``vs usual``).
    """
    rows = lab_rows(part, group)
    try:
        step = common_step(rows)
    except ValueError:  # no evaluations in common (the GPU lab's record keeps no curves): each run's own best
        step = None
    warmup = group == "warmup" and all(_usual_of(rows, r["name"]) for r in rows)
    if warmup:
        usual = [r for r in rows if r["name"].endswith("_usual")]
        head = "the usual schedule over the same time: " + ", ".join(f"{r['name']} {r['test_bleu']:.2f}" for r in usual)
    else:
        mean, spread, n = baseline_noise(part)
        head = (
            f"the paper's model, {n} seeds: test BLEU {mean:.2f} ± {spread:.2f} (mean ± standard deviation of {n} runs)"
        )
    against = "vs usual" if warmup else "vs base"
    lines = [
        head,
        f"{'run':20s} {'parameters':>10s} {'tokens/s':>9s} {'updates':>7s} {f'loss@{step}' if step else 'val loss':>9s} {'test BLEU':>9s} "
        f"{against:>8s}",
    ]
    for r in rows:
        if r.get("diverged"):
            lines.append(f"{r['name']:20s} diverged: {r['diverged']}")
            continue
        gap = r["test_bleu"] - _usual_of(rows, r["name"])["test_bleu"] if warmup else r["vs_base"]
        lines.append(
            f"{r['name']:20s} {r['parameters']:>10,d} {r['tokens_per_s']:>9,.0f} {r['steps']:>7,d} "
            f"{val_loss_at(r, step) if step else r['val_loss']:>9.3f} {r['test_bleu']:>9.2f} {gap:>+8.2f}"
        )
    for r in rows:
        averaged, last = r.get("averaged"), (r.get("history") or [{}])[-1]
        if averaged and last.get("val_loss") is not None:
            epochs = " and ".join(str(e) for e in averaged["epochs"])
            lines.append(
                f"{r['name']}: the tested model is the mean of epochs {epochs}: validation loss {averaged['val_loss']:.3f}, "
                f"BLEU {averaged['val_bleu']:.2f}; its last epoch alone: {last['val_loss']:.3f}, {last['val_bleu']:.2f}"
            )
    return "\n".join(lines)


def plot_lab(part: dict, title: str = "") -> Figure:
    """Each option's difference from the baseline seeds, with its 95% interval: test BLEU after equal time (left),
    validation loss after equal updates (right). A dot per run; an interval that crosses 0 is not a finding."""
    compared = compare_options(part)
    names = list(compared)
    runs = options(part)
    base = runs["baseline"]
    step = common_step([r for its in runs.values() for r in its])
    y = np.arange(len(names))
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.55 * len(names) + 2.4), sharey=True, layout="constrained")
    measures = (
        ("test BLEU", lambda r: r["test_bleu"], "test BLEU minus the baselines' mean (higher is better)"),
        (
            "val loss",
            lambda r: val_loss_at(r, step),
            f"validation loss at {step:,} updates minus the baselines' mean (lower is better)",
        ),
    )
    tested = [(name, key) for name in names for key, _, _ in measures if compared[name][key] is not None]
    adjusted = dict(zip(tested, holm([compared[name][key].p for name, key in tested])))
    for ax, (key, value, label) in zip(axes, measures):
        ax.axvline(0.0, color=BASELINE_COLOR, linewidth=1.2)
        centre = statistics.fmean(value(r) for r in base)
        ax.scatter([value(r) - centre for r in base], [-1] * len(base), color=BASELINE_COLOR, s=18, zorder=3)
        for yi, name in zip(y, names):
            d = compared[name][key]
            if d is None:
                ax.text(
                    0.0,
                    yi,
                    "does not apply: averaging acts after training",
                    ha="center",
                    va="center",
                    fontsize=9,
                    bbox={"facecolor": "white", "edgecolor": "none"},
                )
                continue
            found = adjusted[(name, key)] < 0.05  # Holm over all the figure's tests: a finding among them all
            better = found and (d.difference > 0) == (key == "test BLEU")
            colour = OTHER_COLOR if better else WORSE_COLOR if found else BASELINE_COLOR
            ax.plot([d.low, d.high], [yi, yi], color=colour, linewidth=2.5, solid_capstyle="butt")
            ax.scatter(
                [value(r) - centre for r in runs[name]],
                [yi] * len(runs[name]),
                facecolors="white",
                edgecolors=colour,
                s=30,
                zorder=3,
            )
            # the numbers sit on the row, above the middle of its own line: they cannot reach another row or panel
            ax.text(
                d.difference,
                yi - 0.22,
                f"{d.difference:+.3g}, p = {d.p:.2g}\nHolm {adjusted[(name, key)]:.2g}",
                fontsize=8.5,
                color=colour,
                ha="center",
                va="bottom",
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5},
                zorder=4,
            )
        ax.margins(x=0.15)
        ax.set_xlabel(label, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(
        [-1, *y],
        [f"baseline ({len(base)} seeds)", *[f"{n} ({len(runs[n])} run{'s' * (len(runs[n]) > 1)})" for n in names]],
    )
    axes[0].set_ylim(len(names) - 0.5, -1.7)  # top to bottom, with room for the numbers above the first row
    axes[0].set_title("after the same training time", fontsize=10)
    axes[1].set_title("after the same number of updates", fontsize=10)
    fig.suptitle(
        (title + "\n" if title else "")
        + "each change minus the paper's model. A dot is one run. A line is the 95% interval of the difference: "
        "a t-test, with the spread between\nthe baseline's seeds as the noise. Blue: better, red: worse, grey: "
        f"not told apart from the noise, by Holm's p\n(each p adjusted for the {len(tested)} tests made together; "
        "the p beside it is the test's own).",
        fontsize=10,
    )
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


WARMUP_SCHEDULES = {  # the warm-up runs' name endings (as in the table): what their schedule does, and its colour
    "usual": ("the usual warm-up and peak", BASELINE_COLOR),
    "no-ramp": ("no ramp: the usual peak from update 1", OTHER_COLOR),
    "no-warmup": ("no warm-up (warmup=1): 20x the peak at first", WORSE_COLOR),
    "4x-rate": ("warm-up, four times the peak", HIGHLIGHT_COLOR),
}


def plot_warmup(part: dict) -> Figure:
    """The warm-up experiment: validation loss against updates, post-norm (left) and pre-norm (right), one line per
    schedule (:data:`WARMUP_SCHEDULES`, labelled with the run names of the table), each run of 2.5 minutes. The grey
    band is the noise: the range of the baseline's seeds (post-norm, the usual schedule) at the same updates."""
    runs = [r for r in part["runs"] if r.get("group") == "warmup"]
    seeds = options(part)["baseline"]
    steps = sorted({h["step"] for r in runs for h in r.get("history", [])})
    band = [(s, [val_loss_at(r, s) for r in seeds]) for s in steps]
    band = [(s, losses) for s, losses in band if None not in losses]
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.4), sharey=True, layout="constrained")
    for ax, norm in zip(axes, ("post-norm", "pre-norm")):
        if band:
            at = [s for s, _ in band]
            ax.fill_between(
                at,
                [min(v) for _, v in band],
                [max(v) for _, v in band],
                color=BASELINE_COLOR,
                alpha=0.25,
                linewidth=0,
                label=f"baseline_s0 to s{len(seeds) - 1} (post-norm, usual): their range, the noise",
            )
            ax.scatter([s for s, v in band for _ in v], [x for _, v in band for x in v], color=BASELINE_COLOR, s=6)
        for ending, (label, colour) in WARMUP_SCHEDULES.items():
            run = next((r for r in runs if r["name"] == f"{norm}_{ending}"), None)
            if run is None:
                continue
            points = [(h["step"], h["val_loss"]) for h in run.get("history", []) if h.get("val_loss") is not None]
            ax.plot(*zip(*points), "o-", color=colour, label=f"{run['name']}: {label}", markersize=5)
            if run.get("diverged"):
                ax.text(0.02, 0.95, f"{run['name']}: diverged", transform=ax.transAxes, va="top", color=WORSE_COLOR)
        ax.set_title(f"{norm}" + (" (the paper's)" if norm == "post-norm" else ""), fontsize=10)
        ax.set_xlabel("updates")
        ax.set_xticks(steps)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
    axes[0].set_ylabel("validation loss (lower is better)")
    fig.suptitle(
        "the learning rate's start, 2.5 minutes a run: validation loss after the same updates.\n"
        "The ramp taken away, the peak rate changed: each apart."
    )
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
    ax.set_title(
        "two test captions joined into one, by source length\n(few training sentences have more than 20 words)"
    )
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
        fig.suptitle(f"A: {a['name']}  against  B: {b['name']}", fontsize=11)  # named in the static copy too
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
