"""Plots of training: loss and BLEU curves, learning-rate schedules, label smoothing.

``plot_history`` draws what a training run records per epoch,
``plot_learning_rate`` one or more schedules against the step, and
``plot_label_smoothing`` the target distribution the loss compares against.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from transformer_lessons.viz.common import check_labels, heatmap_size, squeeze_leading, to_numpy


def _history_records(history) -> list[dict]:
    if isinstance(history, Mapping):  # {"train_loss": [...], ...} -> one dict per epoch
        n = max(len(v) for v in history.values())
        return [{k: v[i] for k, v in history.items() if i < len(v)} for i in range(n)]
    return [dict(r) for r in history]


PANELS = ("loss", "BLEU", "learning rate")  # the panels plot_history can draw, in this order


def plot_history(
    history,
    panels: Sequence[str] | None = None,
    *,
    titles: Mapping[str, str] | None = None,
    ylabels: Mapping[str, str] | None = None,
    marks: Mapping[str, float | tuple[float, float]] | None = None,
) -> Figure:
    """Training curves: losses on one panel, BLEU on a second, learning rate on a third.

    Args:
        history: a list with one dict per epoch (or evaluation), e.g.
            ``{"epoch": 1, "train_loss": 4.1, "val_loss": 3.8, "val_bleu": 12.3}``;
            any subset of keys works, and a key missing from some records is
            skipped there. A dict of lists is accepted as well. Keys containing
            ``loss`` go on the loss panel, ``bleu`` on the BLEU panel, ``lr`` or
            ``learning_rate`` on the rate panel; other keys are ignored. The x
            axis is ``epoch`` (or ``step``) when present, else the record number.
        panels: the panels to draw, some of ``"loss"``, ``"BLEU"``, ``"learning rate"``
            (default: all three).
        titles: a panel's title by panel name, e.g. ``{"BLEU": "greedy, first 500 sentences"}``
            (default: the panel's name).
        ylabels: a panel's y-axis label by panel name, e.g. ``{"loss": "label-smoothed loss"}``.
        marks: epochs (or steps) to point out, ``{label: x}`` for a dashed line or
            ``{label: (first, last)}`` for a shaded span, drawn on every panel and
            named in the first panel's legend.

    Returns:
        The Figure, one Axes per panel that has data. A panel whose every curve
        has fewer than two points (a BLEU measured once) is left out when another
        panel has a longer one: one dot is not a chart (print its number instead).
    """
    records = _history_records(history)
    if not records:
        raise ValueError("history is empty: nothing to plot")
    titles, ylabels, marks = dict(titles or {}), dict(ylabels or {}), dict(marks or {})
    misnamed = [name for name in [*titles, *ylabels] if name not in PANELS]
    if misnamed:
        raise ValueError(f"titles and ylabels are keyed by panel name, one of {list(PANELS)}; got {misnamed}")
    x_key = "epoch" if all("epoch" in r for r in records) else "step" if all("step" in r for r in records) else None
    xs = [r[x_key] if x_key else i + 1 for i, r in enumerate(records)]
    keys = list(dict.fromkeys(k for r in records for k in r if k != x_key))
    wanted = PANELS if panels is None else tuple(panels)
    unknown = [name for name in wanted if name not in PANELS]
    if unknown:
        raise ValueError(f"unknown panels {unknown}; choose from {list(PANELS)}")
    found = {
        "loss": [k for k in keys if "loss" in k.lower()],
        "BLEU": [k for k in keys if "bleu" in k.lower()],
        "learning rate": [k for k in keys if k.lower() in ("lr", "learning_rate", "rate")],
    }
    panels = [(name, found[name]) for name in PANELS if name in wanted and found[name]]
    if not panels:
        raise ValueError(f"history has no {', '.join(wanted)} keys to plot (keys: {keys})")

    def longest(ks: list[str]) -> int:  # the most points any curve of a panel has
        return max(sum(r.get(k) is not None for r in records) for k in ks)

    if any(longest(ks) >= 2 for _, ks in panels):
        panels = [(name, ks) for name, ks in panels if longest(ks) >= 2]
    fig, axes = plt.subplots(
        1, len(panels), figsize=(4.8 * len(panels) + 0.4, 3.6), layout="constrained", squeeze=False
    )
    for ax, (name, ks) in zip(axes.flat, panels):
        for k in ks:
            points = [(x, float(r[k])) for x, r in zip(xs, records) if r.get(k) is not None]
            marker = "o" if len(points) <= 30 else None  # each curve's own points: a sparse BLEU keeps its dots
            ax.plot([p[0] for p in points], [p[1] for p in points], marker=marker, label=k.replace("_", " "))
        ax.set_xlabel(x_key or "evaluation")
        ax.set_ylabel(ylabels.get(name, name))
        ax.set_title(titles.get(name, name))
        ax.grid(alpha=0.3)
        first = ax is axes.flat[0]
        _draw_marks(ax, marks, named=first)
        if len(ks) > 1 or (marks and first):
            ax.legend(fontsize=8 if marks else None)
        if x_key == "epoch":
            ax.xaxis.get_major_locator().set_params(integer=True)
    return fig


def _draw_marks(ax, marks: Mapping[str, float | tuple[float, float]], named: bool) -> None:
    """A dashed line at each single x, a shaded span for each (first, last); their labels only where ``named``."""
    for i, (label, where) in enumerate(marks.items()):
        style = {"color": f"C{i + 2}", "label": label if named else None}
        if isinstance(where, (tuple, list)):
            ax.axvspan(where[0], where[1], alpha=0.2, linewidth=0, **style)
        else:
            ax.axvline(where, linestyle="--", linewidth=1.2, **style)


def _rate_curve(rate, steps) -> tuple[np.ndarray, np.ndarray]:
    if callable(rate):
        if steps is None:
            raise ValueError("with a rate function, pass steps: the last step (an int) or the steps to evaluate")
        step_values = np.arange(1, int(steps) + 1) if np.isscalar(steps) else np.asarray(list(steps))
        return step_values, np.array([float(rate(int(s))) for s in step_values])
    values = to_numpy(rate).astype(float).ravel()
    step_values = np.arange(1, len(values) + 1) if steps is None else np.asarray(list(steps))
    if len(step_values) != len(values):
        raise ValueError(f"{len(values)} rates but {len(step_values)} steps")
    return step_values, values


def plot_learning_rate(
    rate: Callable[[int], float] | Sequence[float] | Mapping[str, Callable[[int], float] | Sequence[float]],
    steps: int | Sequence[int] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    *,
    label: str | None = None,
) -> Axes:
    """Learning rate against training step.

    Args:
        rate: a function ``rate(step) -> float`` (steps start at 1), or the
            rates themselves (a sequence/tensor), or a dict ``{label: either}``
            to compare several schedules on one plot.
        steps: for a function, the last step (``int``, plots ``1..steps``) or
            the steps to evaluate; for a sequence of rates, their steps
            (default ``1..len(rates)``).
        ax: Axes to draw into; a new figure by default.
        title: optional title.
        label: legend label for a single curve.

    Returns:
        The Axes, one line per schedule, the peak of each marked with a dot.
    """
    curves = dict(rate) if isinstance(rate, Mapping) else {label: rate}
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.8), layout="constrained")
    for name, r in curves.items():
        xs, ys = _rate_curve(r, steps)
        (line,) = ax.plot(xs, ys, label=name)
        peak = int(np.argmax(ys))
        ax.plot([xs[peak]], [ys[peak]], "o", color=line.get_color(), markersize=5)
    ax.set_xlabel("step")
    ax.set_ylabel("learning rate")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    ax.grid(alpha=0.3)
    if any(name is not None for name in curves):
        ax.legend()
    if title:
        ax.set_title(title)
    return ax


def _short(value: float) -> str:
    """0.9, 0.017, 0: three decimals without trailing zeros."""
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def plot_label_smoothing(distribution, labels=None, title: str | None = None, *, row_labels=None) -> Figure:
    """A (label-smoothed) target distribution over the vocabulary.

    Args:
        distribution: ``(V,)`` one target distribution (drawn as bars), or ``(T, V)``
            one per position (drawn as a heatmap, one row per position).
        labels: ``V`` vocabulary tokens for the x axis (default: ids).
        title: optional figure title.
        row_labels: ``T`` names for the rows of a 2-D distribution.

    Returns:
        The Figure. With up to 15 tokens every bar or cell carries its value
        (three decimals at most: 0.9, 0.017, 0); in the bar chart the most
        likely token (the true label) is drawn in a stronger colour.
    """
    dist = to_numpy(distribution).astype(float)
    one_row = dist.ndim == 1
    dist = squeeze_leading(dist[None, :] if one_row else dist, 2, "distribution")
    T, V = dist.shape
    labels = check_labels(labels, V, "labels") or [str(i) for i in range(V)]
    row_labels = check_labels(row_labels, T, "row_labels") or [f"position {t}" for t in range(T)]
    rotate = max(map(len, labels)) > 3
    if one_row:
        fig, ax = plt.subplots(figsize=(max(5.0, 0.45 * V + 1.5), 2.9), layout="constrained")
        x = np.arange(V)
        colors = ["#9fc5e8"] * V
        colors[int(np.argmax(dist[0]))] = "#1c5d99"
        bars = ax.bar(x, dist[0], color=colors)
        if V <= 15:
            ax.bar_label(bars, labels=[_short(v) for v in dist[0]], fontsize=8, padding=2)
        ax.set_ylim(0, 1.12)
        ax.set_ylabel("probability")
        ax.set_xticks(x)
        ax.set_xticklabels(labels, rotation=45 if rotate else 0, ha="right" if rotate else "center")
    else:
        annotate = V <= 15 and T <= 15
        width, height = heatmap_size(T, V)
        width = max(width, 0.6 * V + 2.8) if annotate else width  # room for "0.017" in a cell
        fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
        sns.heatmap(
            dist,
            ax=ax,
            cmap="Blues",
            vmin=0,
            vmax=1,
            annot=np.vectorize(_short)(dist) if annotate else False,
            fmt="",
            annot_kws={"fontsize": 9},
            linewidths=0.5,
            linecolor="white",
            xticklabels=labels,
            yticklabels=row_labels,
            cbar_kws={"label": "target probability"},
        )
        ax.set_xticklabels(labels, rotation=45 if rotate else 0, ha="right" if rotate else "center")
        ax.set_yticklabels(row_labels, rotation=0)
    ax.set_xlabel("vocabulary")
    if title:
        fig.suptitle(title)
    return fig
