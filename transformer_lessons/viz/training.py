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


def plot_history(history) -> Figure:
    """Training curves: losses on one panel, BLEU on a second, learning rate on a third.

    Args:
        history: a list with one dict per epoch (or evaluation), e.g.
            ``{"epoch": 1, "train_loss": 4.1, "val_loss": 3.8, "val_bleu": 12.3}``;
            any subset of keys works, and a key missing from some records is
            skipped there. A dict of lists is accepted as well. Keys containing
            ``loss`` go on the loss panel, ``bleu`` on the BLEU panel, ``lr`` or
            ``learning_rate`` on the rate panel; other keys are ignored. The x
            axis is ``epoch`` (or ``step``) when present, else the record number.

    Returns:
        The Figure, one Axes per panel that has data.
    """
    records = _history_records(history)
    if not records:
        raise ValueError("history is empty: nothing to plot")
    x_key = "epoch" if all("epoch" in r for r in records) else "step" if all("step" in r for r in records) else None
    xs = [r[x_key] if x_key else i + 1 for i, r in enumerate(records)]
    keys = list(dict.fromkeys(k for r in records for k in r if k != x_key))
    panels = [
        ("loss", [k for k in keys if "loss" in k.lower()]),
        ("BLEU", [k for k in keys if "bleu" in k.lower()]),
        ("learning rate", [k for k in keys if k.lower() in ("lr", "learning_rate", "rate")]),
    ]
    panels = [(name, ks) for name, ks in panels if ks]
    if not panels:
        raise ValueError(f"history has no loss, BLEU or learning-rate keys to plot (keys: {keys})")
    fig, axes = plt.subplots(
        1, len(panels), figsize=(4.8 * len(panels) + 0.4, 3.6), layout="constrained", squeeze=False
    )
    marker = "o" if len(records) <= 30 else None
    for ax, (name, ks) in zip(axes.flat, panels):
        for k in ks:
            points = [(x, float(r[k])) for x, r in zip(xs, records) if r.get(k) is not None]
            ax.plot([p[0] for p in points], [p[1] for p in points], marker=marker, label=k.replace("_", " "))
        ax.set_xlabel(x_key or "evaluation")
        ax.set_ylabel(name)
        ax.set_title(name)
        ax.grid(alpha=0.3)
        if len(ks) > 1:
            ax.legend()
        if x_key == "epoch":
            ax.xaxis.get_major_locator().set_params(integer=True)
    return fig


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


def plot_label_smoothing(distribution, labels=None, title: str | None = None, *, row_labels=None) -> Figure:
    """Bar chart of a (label-smoothed) target distribution over the vocabulary.

    Args:
        distribution: ``(V,)`` one target distribution, or ``(T, V)`` one per
            position (drawn as stacked bar panels up to 8 rows, as a heatmap
            beyond).
        labels: ``V`` vocabulary tokens for the x axis (default: ids).
        title: optional figure title.
        row_labels: ``T`` names for the rows of a 2-D distribution.

    Returns:
        The Figure. The most likely token of each row (the true label) is drawn
        in a stronger colour; with up to 15 tokens every bar carries its value.
    """
    dist = to_numpy(distribution).astype(float)
    if dist.ndim == 1:
        dist = dist[None, :]
    dist = squeeze_leading(dist, 2, "distribution")
    T, V = dist.shape
    labels = check_labels(labels, V, "labels") or [str(i) for i in range(V)]
    row_labels = check_labels(row_labels, T, "row_labels") or [f"position {t}" for t in range(T)]
    if T > 8:
        fig, ax = plt.subplots(figsize=heatmap_size(T, V), layout="constrained")
        sns.heatmap(
            dist,
            ax=ax,
            cmap="Blues",
            vmin=0,
            vmax=1,
            xticklabels=labels,
            yticklabels=row_labels,
            cbar_kws={"label": "target probability"},
        )
        ax.set_xlabel("vocabulary")
    else:
        fig, axes = plt.subplots(
            T, 1, figsize=(max(5.0, 0.45 * V + 1.5), 2.3 * T + 0.6), sharex=True, layout="constrained", squeeze=False
        )
        x = np.arange(V)
        for t, ax in enumerate(axes[:, 0]):
            colors = ["#9fc5e8"] * V
            colors[int(np.argmax(dist[t]))] = "#1c5d99"
            bars = ax.bar(x, dist[t], color=colors)
            if V <= 15:
                ax.bar_label(bars, fmt="%.2f", fontsize=8, padding=2)
            ax.set_ylim(0, 1.12)
            ax.set_ylabel("probability")
            if T > 1:
                ax.set_title(row_labels[t], fontsize=10, loc="left")
        axes[-1, 0].set_xticks(x)
        axes[-1, 0].set_xticklabels(
            labels,
            rotation=45 if max(map(len, labels)) > 3 else 0,
            ha="right" if max(map(len, labels)) > 3 else "center",
        )
        axes[-1, 0].set_xlabel("vocabulary")
    if title:
        fig.suptitle(title)
    return fig
