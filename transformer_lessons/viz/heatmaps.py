"""Heatmaps of attention weights and pictures of masks.

``plot_attention`` draws one ``(T, S)`` matrix, ``plot_heads`` one per head side
by side, ``plot_mask`` a bool mask as a grid of yes/no cells. Attention weights
are probabilities, so every heatmap uses the same fixed 0..1 colour scale and two
plots can be compared by eye. The widgets (``explorer.py``, ``stepper.py``) draw
their heatmaps with the same ``draw_attention``.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from transformer_lessons.viz.common import check_labels, heatmap_size, label_axes, squeeze_leading, to_numpy

ATTENTION_CMAP = "viridis"  # perceptually uniform: equal steps in weight look like equal steps in colour
ALLOWED_COLOR = "#2a7f62"  # mask cells that may attend (dark, so the pattern reads in grey-scale too)
BLOCKED_COLOR = "#e4e4e4"


def draw_attention(
    ax: Axes,
    matrix: np.ndarray,
    x_labels,
    y_labels,
    annot: bool = False,
    cbar: bool = True,
    xlabel: str | None = "keys",
    ylabel: str | None = "queries",
) -> Axes:
    sns.heatmap(
        matrix,
        ax=ax,
        vmin=0.0,
        vmax=1.0,  # weights are probabilities: a fixed scale makes plots comparable
        cmap=ATTENTION_CMAP,
        square=True,
        cbar=cbar,
        cbar_kws={"label": "attention weight", "shrink": 0.8} if cbar else None,
        annot=annot,
        fmt=".2f",
        annot_kws={"fontsize": 8},
        xticklabels="auto" if x_labels is None else x_labels,
        yticklabels="auto" if y_labels is None else y_labels,
    )
    label_axes(ax, x_labels, y_labels)
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    return ax


def plot_attention(
    weights,
    x_labels=None,
    y_labels=None,
    ax: Axes | None = None,
    title: str | None = None,
    annot: bool = False,
    *,
    xlabel: str | None = "keys",
    ylabel: str | None = "queries",
) -> Axes:
    """Heatmap of one attention matrix, tokens on both axes.

    Args:
        weights: tensor or array ``(T, S)`` (leading size-1 axes are dropped,
            so ``(1, 1, T, S)`` works): row ``t`` is how query ``t`` spreads its
            attention over the keys.
        x_labels: ``S`` key tokens (columns).
        y_labels: ``T`` query tokens (rows).
        ax: Axes to draw into; a new figure by default.
        title: optional title.
        annot: write each weight in its cell (readable up to ~12 tokens).
        xlabel, ylabel: axis titles.

    Returns:
        The Axes. The colour scale is fixed to 0..1 so plots compare.
    """
    matrix = squeeze_leading(to_numpy(weights).astype(float), 2, "weights")
    T, S = matrix.shape
    x_labels = check_labels(x_labels, S, "x_labels (keys)")
    y_labels = check_labels(y_labels, T, "y_labels (queries)")
    if ax is None:
        _, ax = plt.subplots(figsize=heatmap_size(T, S), layout="constrained")
    draw_attention(ax, matrix, x_labels, y_labels, annot=annot, xlabel=xlabel, ylabel=ylabel)
    if title:
        ax.set_title(title)
    return ax


def plot_heads(
    weights, x_labels=None, y_labels=None, title: str | None = None, *, xlabel: str = "keys", ylabel: str = "queries"
) -> Figure:
    """One heatmap per head, side by side, on one shared 0..1 colour scale.

    Args:
        weights: ``(H, T, S)`` (or ``(1, H, T, S)``), one matrix per head.
        x_labels: ``S`` key tokens; y_labels: ``T`` query tokens.
        title: optional figure title.
        xlabel, ylabel: the axis titles, e.g. ``ylabel="step: the word it writes"``
            for a translation's cross-attention.

    Returns:
        The Figure; its first ``H`` axes are the heads, in order.
    """
    heads = squeeze_leading(to_numpy(weights).astype(float), 3, "weights")
    H, T, S = heads.shape
    x_labels = check_labels(x_labels, S, "x_labels (keys)")
    y_labels = check_labels(y_labels, T, "y_labels (queries)")
    ncols = min(H, 4)
    nrows = math.ceil(H / ncols)
    cell = 0.42 if max(T, S) <= 20 else max(0.15, 6.0 / max(T, S))
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(min(18.0, ncols * (S * cell + 0.6) + 1.8), min(16.0, nrows * (T * cell + 1.1) + 0.5)),
        layout="constrained",
        squeeze=False,
    )
    for h, ax in enumerate(axes.flat):
        if h >= H:
            ax.set_visible(False)
            continue
        row, col = divmod(h, ncols)
        draw_attention(
            ax,
            heads[h],
            x_labels,
            y_labels,
            cbar=False,
            xlabel=xlabel if row == nrows - 1 else None,
            ylabel=ylabel if col == 0 else None,
        )
        if col > 0:  # the tokens are the same in every panel: label the first column only
            ax.set_yticklabels([])
        ax.set_title(f"head {h}")
    fig.colorbar(axes.flat[0].collections[0], ax=axes[:, -1].tolist(), shrink=0.8, label="attention weight")
    if title:
        fig.suptitle(title)
    return fig


def mask_legend_handles() -> list[Patch]:
    """The two colours of a mask picture, named: what :func:`plot_mask` puts in its legend."""
    return [
        Patch(color=ALLOWED_COLOR, label="True: may attend"),
        Patch(color=BLOCKED_COLOR, label="False: blocked"),
    ]


def plot_mask(
    mask,
    x_labels=None,
    y_labels=None,
    ax: Axes | None = None,
    title: str | None = None,
    *,
    legend: bool = True,
) -> Axes:
    """Draw a bool mask: which query (row) may attend to which key (column).

    Args:
        mask: BoolTensor or array ``(T, S)`` with ``True`` = may attend (the
            course's convention); leading size-1 axes are dropped, so a
            ``(1, 1, T, S)`` mask works, and a key mask ``(S,)`` is one row.
        x_labels: ``S`` key tokens; y_labels: ``T`` query tokens.
        ax: Axes to draw into; a new figure by default.
        title: optional title.
        legend: give the Axes a legend naming the two colours; ``False`` when
            several masks share one (``viz.plot_masks`` does that).

    Returns:
        The Axes, with a legend naming the two colours unless ``legend=False``.
    """
    m = to_numpy(mask)
    if m.ndim == 1:
        m = m[None, :]  # a key mask (S,) is one row
    m = squeeze_leading(m, 2, "mask").astype(bool)
    T, S = m.shape
    x_labels = check_labels(x_labels, S, "x_labels (keys)")
    y_labels = check_labels(y_labels, T, "y_labels (queries)")
    if ax is None:
        width, height = heatmap_size(T, S)
        _, ax = plt.subplots(figsize=(width + (1.2 if legend else 0.0), height), layout="constrained")  # + the legend
    sns.heatmap(
        m.astype(int),
        ax=ax,
        cmap=ListedColormap([BLOCKED_COLOR, ALLOWED_COLOR]),
        vmin=0,
        vmax=1,
        cbar=False,
        square=True,
        linewidths=1.0,
        linecolor="white",  # separate cells: a mask is a grid of yes/no decisions
        xticklabels="auto" if x_labels is None else x_labels,
        yticklabels="auto" if y_labels is None else y_labels,
    )
    label_axes(ax, x_labels, y_labels)
    ax.set_xlabel("keys")
    ax.set_ylabel("queries")
    if legend:
        ax.legend(handles=mask_legend_handles(), loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    if title:
        ax.set_title(title)
    return ax
