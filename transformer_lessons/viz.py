"""Every plot and widget of the course: attention heatmaps, masks, positional
encodings, training curves and step-by-step generation.

This is the only module of the package that imports matplotlib, seaborn and
ipywidgets; notebooks import it by name (``from transformer_lessons import viz``)
so that ``import transformer_lessons`` stays cheap.

Plot functions (``plot_*``) draw with pyplot and return the Axes or Figure, so
a notebook shows them inline. Widgets (``attention_explorer``,
``positional_encoding_explorer``, ``generation_stepper``) return a ``VBox`` of
controls over an ``Output`` showing a PNG of the current figure, and expose:

* ``.controls``: ``{name: widget}`` for the controls that have more than one choice;
* ``.current_matrix()`` (and friends): the numbers on screen, as numpy arrays;
* ``.figure``: the last matplotlib Figure drawn.

Why the widgets set ``Output.outputs`` instead of ``with out: display(fig)``:
output captured by an ``Output`` context reaches the kernel's iopub channel as
ordinary ``display_data`` (the *frontend* redirects it). ``nbconvert --execute``
files it inside the widget state while nbval counts it as cell output, so the
two disagree and a notebook could never pass nbval. Setting the ``outputs``
trait travels as widget state only, so both see the same thing. The widget's
own display also carries the PNG (``image/png``) and a short stable text: a
notebook viewer without live widgets (GitHub, nbviewer) still shows the
heatmap, and nbval compares only the text.
"""

from __future__ import annotations

import base64
import html
import io
import math
import warnings
from typing import Callable, Mapping, Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
import torch
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from transformer_lessons.decode import translate as _translate
from transformer_lessons.layers import sinusoidal_positional_encoding

__all__ = [
    "attention_explorer",
    "generation_stepper",
    "plot_attention",
    "plot_heads",
    "plot_history",
    "plot_label_smoothing",
    "plot_learning_rate",
    "plot_mask",
    "plot_positional_encoding",
    "positional_encoding_explorer",
    "translator",
]

ATTENTION_CMAP = "viridis"  # perceptually uniform: equal steps in weight look like equal steps in colour
PE_CMAP = "RdBu_r"  # diverging: sin/cos values are signed, 0 is white
ALLOWED_COLOR = "#2a7f62"  # mask cells that may attend (dark, so the pattern reads in grey-scale too)
BLOCKED_COLOR = "#e4e4e4"
HIGHLIGHT_COLOR = "#e8590c"  # the selected row/column/step in widgets
MEAN_OF_HEADS = "mean"  # value of the head control that averages the heads
MAX_WIDGET_BEAM = 8  # the translator's beam slider: beyond ~8 beams Multi30k gains nothing and a CPU waits
WIDGET_DPI = 80  # PNGs shown by widgets: sharp enough on screen, small in the .ipynb

KIND_LABELS = {
    "encoder": "encoder self-attention",
    "decoder_self": "decoder masked self-attention",
    "cross": "cross-attention (decoder → encoder)",
}


# --- small helpers --------------------------------------------------------------


def _to_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float32).numpy()
    return np.asarray(x)


def _squeeze_leading(a: np.ndarray, ndim: int, name: str) -> np.ndarray:
    """Drop leading size-1 axes (a batch of one, one head) until ``a`` has ``ndim`` axes."""
    while a.ndim > ndim and a.shape[0] == 1:
        a = a[0]
    if a.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions (after dropping leading size-1 axes), got shape {tuple(a.shape)}")
    return a


def _check_labels(labels, size: int, name: str) -> list[str] | None:
    if labels is None:
        return None
    labels = [str(t) for t in labels]
    if len(labels) != size:
        raise ValueError(f"{name} has {len(labels)} labels but the data has {size} positions on that axis")
    return labels


def _heatmap_size(rows: int, cols: int) -> tuple[float, float]:
    """Figure size giving roughly square cells of ~0.4 inch, within readable limits."""
    cell = 0.42 if max(rows, cols) <= 20 else max(0.18, 8.0 / max(rows, cols))
    width = min(14.0, max(4.0, cols * cell + 2.2))  # + room for y labels and colorbar
    height = min(12.0, max(3.0, rows * cell + 1.6))  # + room for rotated x labels and title
    return width, height


def _tick_fontsize(n: int) -> float:
    return 11 if n <= 15 else 9 if n <= 30 else 7


def _label_axes(ax: Axes, x_labels, y_labels) -> None:
    """Token labels: keys along x (rotated so long words fit), queries along y."""
    if x_labels is not None:
        ax.set_xticks(np.arange(len(x_labels)) + 0.5)
        ax.set_xticklabels(x_labels, rotation=45, ha="right", rotation_mode="anchor", fontsize=_tick_fontsize(len(x_labels)))
    if y_labels is not None:
        ax.set_yticks(np.arange(len(y_labels)) + 0.5)
        ax.set_yticklabels(y_labels, rotation=0, fontsize=_tick_fontsize(len(y_labels)))


def _draw_attention(
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
    _label_axes(ax, x_labels, y_labels)
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    return ax


def _png_bytes(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=WIDGET_DPI, bbox_inches="tight")
    return buffer.getvalue()


def _widget_figure(width: float, height: float) -> Figure:
    # A Figure outside pyplot: the inline backend does not show it a second time
    # at the end of the cell, and it is freed with the widget (no plt.close needed).
    return Figure(figsize=(width, height), layout="constrained")


class _FigureWidget(widgets.VBox):
    """Controls above an ``Output`` that shows the current figure as a PNG."""

    _kind_name = "figure widget"

    def __init__(self, controls: dict[str, widgets.Widget], extra: Sequence[widgets.Widget] = ()):
        super().__init__()
        self.controls = dict(controls)
        self.output = widgets.Output()
        self.figure: Figure | None = None
        self._png = b""
        self._busy = False  # set while one change adjusts other controls: draw once
        self.children = [*self.controls.values(), *extra, self.output]
        for control in self.controls.values():
            control.observe(self._on_change, names="value")

    def _on_change(self, _change=None) -> None:
        if not self._busy:
            self._update()

    def _update(self) -> None:
        self._before_draw()
        fig = self._draw()
        self.figure = fig
        self._png = _png_bytes(fig)
        self.output.outputs = (
            {
                "output_type": "display_data",
                "data": {"image/png": base64.b64encode(self._png).decode("ascii"), "text/plain": self.describe()},
                "metadata": {},
            },
        )

    def _before_draw(self) -> None:  # hook: update labels etc.
        pass

    def _draw(self) -> Figure:  # pragma: no cover - every subclass draws
        raise NotImplementedError

    def describe(self) -> str:
        """One line saying what is shown (also the widget's plain-text display)."""
        return self._kind_name

    def _repr_mimebundle_(self, **kwargs):
        data = super()._repr_mimebundle_(**kwargs) or {}
        # Stable text for nbval and text-only viewers; the PNG for viewers without
        # live widgets. Frontends with widgets rank the widget view above both.
        data["text/plain"] = self.describe()
        if self._png:
            data["image/png"] = base64.b64encode(self._png).decode("ascii")
        return data


def _head_options(n_heads: int) -> list[tuple[str, object]]:
    return [("mean of heads", MEAN_OF_HEADS)] + [(f"head {h}", h) for h in range(n_heads)]


def _head_label(head) -> str:
    return "mean of heads" if head == MEAN_OF_HEADS else f"head {head}"


def _select_head(weights: np.ndarray, head) -> np.ndarray:
    """``(H, T, S)`` -> ``(T, S)``: one head, or the average over heads."""
    return weights.mean(axis=0) if head == MEAN_OF_HEADS else weights[head]


# --- static plots ------------------------------------------------------------------


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
    matrix = _squeeze_leading(_to_numpy(weights).astype(float), 2, "weights")
    T, S = matrix.shape
    x_labels = _check_labels(x_labels, S, "x_labels (keys)")
    y_labels = _check_labels(y_labels, T, "y_labels (queries)")
    if ax is None:
        _, ax = plt.subplots(figsize=_heatmap_size(T, S), layout="constrained")
    _draw_attention(ax, matrix, x_labels, y_labels, annot=annot, xlabel=xlabel, ylabel=ylabel)
    if title:
        ax.set_title(title)
    return ax


def plot_heads(weights, x_labels=None, y_labels=None, title: str | None = None, *,
               xlabel: str = "keys", ylabel: str = "queries") -> Figure:
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
    heads = _squeeze_leading(_to_numpy(weights).astype(float), 3, "weights")
    H, T, S = heads.shape
    x_labels = _check_labels(x_labels, S, "x_labels (keys)")
    y_labels = _check_labels(y_labels, T, "y_labels (queries)")
    ncols = min(H, 4)
    nrows = math.ceil(H / ncols)
    cell = 0.42 if max(T, S) <= 20 else max(0.15, 6.0 / max(T, S))
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(min(18.0, ncols * (S * cell + 0.6) + 1.8), min(16.0, nrows * (T * cell + 1.1) + 0.5)),
        layout="constrained", squeeze=False,
    )
    for h, ax in enumerate(axes.flat):
        if h >= H:
            ax.set_visible(False)
            continue
        row, col = divmod(h, ncols)
        _draw_attention(
            ax, heads[h], x_labels, y_labels, cbar=False,
            xlabel=xlabel if row == nrows - 1 else None, ylabel=ylabel if col == 0 else None,
        )
        if col > 0:  # the tokens are the same in every panel: label the first column only
            ax.set_yticklabels([])
        ax.set_title(f"head {h}")
    fig.colorbar(axes.flat[0].collections[0], ax=axes[:, -1].tolist(), shrink=0.8, label="attention weight")
    if title:
        fig.suptitle(title)
    return fig


def plot_mask(mask, x_labels=None, y_labels=None, ax: Axes | None = None, title: str | None = None) -> Axes:
    """Draw a bool mask: which query (row) may attend to which key (column).

    Args:
        mask: BoolTensor or array ``(T, S)`` with ``True`` = may attend (the
            course's convention); leading size-1 axes are dropped, so a
            ``(1, 1, T, S)`` mask works, and a key mask ``(S,)`` is one row.
        x_labels: ``S`` key tokens; y_labels: ``T`` query tokens.
        ax: Axes to draw into; a new figure by default.
        title: optional title.

    Returns:
        The Axes, with a legend naming the two colours.
    """
    m = _to_numpy(mask)
    if m.ndim == 1:
        m = m[None, :]  # a key mask (S,) is one row
    m = _squeeze_leading(m, 2, "mask").astype(bool)
    T, S = m.shape
    x_labels = _check_labels(x_labels, S, "x_labels (keys)")
    y_labels = _check_labels(y_labels, T, "y_labels (queries)")
    if ax is None:
        width, height = _heatmap_size(T, S)
        _, ax = plt.subplots(figsize=(width + 1.2, height), layout="constrained")  # + room for the legend
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
    _label_axes(ax, x_labels, y_labels)
    ax.set_xlabel("keys")
    ax.set_ylabel("queries")
    ax.legend(
        handles=[Patch(color=ALLOWED_COLOR, label="True: may attend"), Patch(color=BLOCKED_COLOR, label="False: blocked")],
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        frameon=False,
    )
    if title:
        ax.set_title(title)
    return ax


def plot_positional_encoding(pe, ax: Axes | None = None, *, title: str | None = None) -> Axes:
    """Heatmap of a positional-encoding table, positions down, dimensions across.

    Args:
        pe: tensor or array ``(L, D)``, e.g. from
            :func:`~transformer_lessons.layers.sinusoidal_positional_encoding`.
        ax: Axes to draw into; a new figure by default.
        title: optional title.

    Returns:
        The Axes. Colours are centred on 0 (red positive, blue negative).
    """
    table = _squeeze_leading(_to_numpy(pe).astype(float), 2, "pe")
    L, D = table.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(min(12.0, 3.0 + D * 0.09), min(8.0, 2.5 + L * 0.05)), layout="constrained")
    limit = max(1.0, float(np.abs(table).max()))
    sns.heatmap(table, ax=ax, cmap=PE_CMAP, vmin=-limit, vmax=limit, cbar_kws={"label": "value"})
    ax.set_xlabel("dimension i")
    ax.set_ylabel("position pos")
    ax.set_title(title or f"positional encoding: {L} positions × {D} dimensions")
    return ax


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
    fig, axes = plt.subplots(1, len(panels), figsize=(4.8 * len(panels) + 0.4, 3.6), layout="constrained", squeeze=False)
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
    values = _to_numpy(rate).astype(float).ravel()
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
    dist = _to_numpy(distribution).astype(float)
    if dist.ndim == 1:
        dist = dist[None, :]
    dist = _squeeze_leading(dist, 2, "distribution")
    T, V = dist.shape
    labels = _check_labels(labels, V, "labels") or [str(i) for i in range(V)]
    row_labels = _check_labels(row_labels, T, "row_labels") or [f"position {t}" for t in range(T)]
    if T > 8:
        fig, ax = plt.subplots(figsize=_heatmap_size(T, V), layout="constrained")
        sns.heatmap(dist, ax=ax, cmap="Blues", vmin=0, vmax=1, xticklabels=labels, yticklabels=row_labels,
                    cbar_kws={"label": "target probability"})
        ax.set_xlabel("vocabulary")
    else:
        fig, axes = plt.subplots(T, 1, figsize=(max(5.0, 0.45 * V + 1.5), 2.3 * T + 0.6), sharex=True,
                                 layout="constrained", squeeze=False)
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
        axes[-1, 0].set_xticklabels(labels, rotation=45 if max(map(len, labels)) > 3 else 0, ha="right" if max(map(len, labels)) > 3 else "center")
        axes[-1, 0].set_xlabel("vocabulary")
    if title:
        fig.suptitle(title)
    return fig


# --- widgets -----------------------------------------------------------------------


def _is_one_sentence(tokens) -> bool:
    return len(tokens) == 0 or isinstance(tokens[0], str)


def _token_batch(tokens, batch: int, name: str) -> list[list[str]] | None:
    """A list (over the batch) of token lists; a single list is one sentence."""
    if tokens is None:
        return None
    if _is_one_sentence(tokens):
        if batch != 1:
            raise ValueError(f"{name} is one sentence but the attention holds a batch of {batch}: pass a list of {batch} token lists")
        return [[str(t) for t in tokens]]
    if len(tokens) != batch:
        raise ValueError(f"{name} has {len(tokens)} sentences but the attention holds a batch of {batch}")
    return [[str(t) for t in sentence] for sentence in tokens]


def _attention_layers(attention) -> dict[str, list[np.ndarray]]:
    """Normalise the accepted inputs to ``{kind: [(B, H, T, S) per layer]}``."""
    if isinstance(attention, Mapping):
        items = list(attention.items())
    elif isinstance(attention, (list, tuple)):
        items = [("attention", attention)]  # one kind, a list over layers
    else:
        items = [("attention", [attention])]  # one kind, one layer
    layers = {}
    for kind, per_layer in items:
        if not isinstance(per_layer, (list, tuple)):
            per_layer = [per_layer]
        if not per_layer:
            raise ValueError(f"attention[{kind!r}] has no layers")
        arrays = []
        for w in per_layer:
            a = _to_numpy(w).astype(float)
            while a.ndim < 4:
                a = a[None]  # (H, T, S) -> (1, H, T, S); (T, S) -> (1, 1, T, S)
            if a.ndim != 4:
                raise ValueError(f"attention weights must be (B, H, T, S) or (H, T, S), got shape {tuple(a.shape)}")
            arrays.append(a)
        layers[kind] = arrays
    batches = {a.shape[0] for arrays in layers.values() for a in arrays}
    if len(batches) != 1:
        raise ValueError(f"every attention tensor must hold the same batch, got batch sizes {sorted(batches)}")
    return layers


class AttentionExplorer(_FigureWidget):
    """Widget returned by :func:`attention_explorer`."""

    _kind_name = "attention explorer"

    def __init__(self, attention, src_tokens, tgt_tokens=None, title: str | None = None, *, tgt_inputs=None,
                 kind: str | None = None, layer: int = 0, head=MEAN_OF_HEADS):
        self._layers = _attention_layers(attention)
        first = next(iter(self._layers.values()))[0]
        batch = first.shape[0]
        self._src = _token_batch(src_tokens, batch, "src_tokens")
        self._tgt = _token_batch(tgt_tokens, batch, "tgt_tokens") if tgt_tokens is not None else self._src
        self._tgt_in = _token_batch(tgt_inputs, batch, "tgt_inputs") if tgt_inputs is not None else None
        self._title = title
        kind = next(iter(self._layers)) if kind is None else kind
        if kind not in self._layers:
            raise ValueError(f"kind={kind!r} is not in the attention given; it holds {', '.join(map(repr, self._layers))}")
        n_layers = len(self._layers[kind])
        if not -n_layers <= layer < n_layers:
            raise ValueError(f"layer={layer} is out of range: {kind!r} has {n_layers} layer(s) (negative counts from the last)")
        layer %= n_layers
        n_heads0 = self._layers[kind][layer].shape[1]
        if head != MEAN_OF_HEADS and not (isinstance(head, int) and 0 <= head < n_heads0):
            raise ValueError(f"head={head!r} must be {MEAN_OF_HEADS!r} or a head index below {n_heads0}")
        self._state = {"kind": kind, "layer": layer, "head": head, "sentence": 0}
        max_heads = max(a.shape[1] for arrays in self._layers.values() for a in arrays)
        max_layers = max(len(arrays) for arrays in self._layers.values())

        controls: dict[str, widgets.Widget] = {}
        style = {"description_width": "70px"}
        if len(self._layers) > 1:
            controls["kind"] = widgets.Dropdown(
                options=[(KIND_LABELS.get(k, k), k) for k in self._layers], value=self._state["kind"],
                description="attention", style=style, layout=widgets.Layout(width="380px"),
            )
        if max_layers > 1:
            controls["layer"] = widgets.IntSlider(value=layer, min=0, max=n_layers - 1,
                                                  description="layer", style=style, continuous_update=False)
        if max_heads > 1:
            controls["head"] = widgets.Dropdown(options=_head_options(n_heads0), value=head,
                                                description="head", style=style)
        if batch > 1:
            controls["sentence"] = widgets.IntSlider(value=0, min=0, max=batch - 1, description="sentence",
                                                     style=style, continuous_update=False)
        super().__init__(controls)
        self._update()

    def _axis_tokens(self, kind: str) -> tuple[list[str], list[str]]:
        """(row tokens, column tokens) of the current sentence for this kind of attention."""
        b = self._state["sentence"]
        src = self._src[b]
        tgt = self._tgt[b]
        if kind == "encoder":
            return src, src
        if kind == "decoder_self":  # rows: the step (what it writes); columns: what each position reads
            return tgt, (self._tgt_in[b] if self._tgt_in is not None else tgt)
        return tgt, src  # cross-attention, or a single tensor: target rows over source columns

    def _before_draw(self) -> None:
        self._busy = True
        try:
            for name in ("kind", "layer", "head", "sentence"):
                if name in self.controls:
                    self._state[name] = self.controls[name].value
            arrays = self._layers[self._state["kind"]]
            if "layer" in self.controls:  # kinds may have different depths
                slider = self.controls["layer"]
                slider.max = len(arrays) - 1
                slider.disabled = len(arrays) == 1
                self._state["layer"] = slider.value
            n_heads = arrays[self._state["layer"]].shape[1]
            if "head" in self.controls:
                dropdown = self.controls["head"]
                if len(dropdown.options) != n_heads + 1:
                    keep = dropdown.value if dropdown.value == MEAN_OF_HEADS or dropdown.value < n_heads else MEAN_OF_HEADS
                    dropdown.options = _head_options(n_heads)
                    dropdown.value = keep
                self._state["head"] = dropdown.value
            elif n_heads == 1:
                self._state["head"] = 0
        finally:
            self._busy = False

    def current_matrix(self) -> np.ndarray:
        """The ``(T, S)`` weights on screen, trimmed to the sentence's real tokens."""
        s = self._state
        weights = self._layers[s["kind"]][s["layer"]][s["sentence"]]  # (H, T, S)
        rows, cols = self._axis_tokens(s["kind"])
        _, T, S = weights.shape
        if len(rows) > T or len(cols) > S:
            raise ValueError(
                f"{len(rows)} query tokens x {len(cols)} key tokens do not fit {s['kind']} weights of shape "
                f"{T} x {S} (sentence {s['sentence']}): are src_tokens and tgt_tokens swapped?"
            )
        return _select_head(weights, s["head"])[: len(rows), : len(cols)]  # drop padding rows/columns

    def current_tokens(self) -> tuple[list[str], list[str]]:
        """(query tokens down the rows, key tokens along the columns) on screen."""
        return self._axis_tokens(self._state["kind"])

    def describe(self) -> str:
        s = self._state
        parts = [KIND_LABELS.get(s["kind"], s["kind"]), f"layer {s['layer']}", _head_label(s["head"])]
        if len(self._src) > 1:
            parts.append(f"sentence {s['sentence']}")
        return (f"{self._title}: " if self._title else "") + ", ".join(parts)

    def _draw(self) -> Figure:
        matrix = self.current_matrix()
        rows, cols = self.current_tokens()
        kind = self._state["kind"]
        xlabel, ylabel = {
            "encoder": ("source tokens (keys)", "source tokens (queries)"),
            "decoder_self": ("target tokens (keys)", "target tokens (queries)"),
        }.get(kind, ("source tokens (keys)", "target tokens (queries)"))
        if self._tgt_in is not None and kind in ("decoder_self", "cross"):  # rows say which convention: what a step writes
            ylabel = "step: the token it writes (queries)"
            if kind == "decoder_self":
                xlabel = "the tokens it reads (keys)"
        if kind not in KIND_LABELS and self._tgt is self._src:
            xlabel, ylabel = "keys", "queries"
        fig = _widget_figure(*_heatmap_size(*matrix.shape))
        ax = fig.add_subplot()
        _draw_attention(ax, matrix, cols, rows, xlabel=xlabel, ylabel=ylabel)
        ax.set_title(self.describe(), fontsize=11)
        return fig


def attention_explorer(attention, src_tokens, tgt_tokens=None, title: str | None = None, *, tgt_inputs=None,
                       kind: str | None = None, layer: int = 0, head=MEAN_OF_HEADS) -> AttentionExplorer:
    """Interactive heatmap of attention weights: pick kind, layer, head and sentence.

    Args:
        attention: ``Transformer.attention_weights()`` (a dict ``kind -> list
            over layers of (B, H, T, S)`` with kinds ``encoder``,
            ``decoder_self``, ``cross``), or one tensor ``(B, H, T, S)`` /
            ``(H, T, S)``, or a list over layers of such tensors.
        src_tokens: the source tokens: a list over the batch of token lists,
            or one token list when ``B == 1``. Shorter lists than the tensor
            (padded batches) trim the padding rows and columns away.
        tgt_tokens: the target tokens, same form; they label the queries of
            ``decoder_self`` and ``cross`` (and the rows of a single tensor).
            Default: ``src_tokens``.
        title: optional prefix of the heatmap title.
        tgt_inputs: for a translation, the tokens the decoder *reads* at each
            step (``<bos>`` and the words so far), while ``tgt_tokens`` are the
            words each step *writes*. Given, the rows of ``decoder_self`` and
            ``cross`` are labelled by what the step writes (the convention of
            :func:`generation_stepper` and :func:`translator`), the columns of
            ``decoder_self`` by what the positions read, and the axis labels say so.
        kind, layer, head: the view to open on (default: the first kind,
            layer 0, mean of heads); ``layer=-1`` is the last layer. A trained
            translator is best met on ``kind="cross", layer=-1``.

    Returns:
        A ``VBox``: controls (``attention`` kind, ``layer``, ``head`` with
        "mean of heads", ``sentence``; only those with more than one choice)
        over the heatmap. Axes: encoder source x source, decoder
        self-attention target x target, cross-attention target rows x source
        columns. For tests and scripts: ``.controls`` (name -> widget),
        ``.current_matrix()`` (the 2-D array shown), ``.current_tokens()``,
        ``.figure``.
    """
    return AttentionExplorer(attention, src_tokens, tgt_tokens, title, tgt_inputs=tgt_inputs, kind=kind, layer=layer, head=head)


class PositionalEncodingExplorer(_FigureWidget):
    """Widget returned by :func:`positional_encoding_explorer`."""

    _kind_name = "positional encoding explorer"

    def __init__(self, max_len: int = 100, d_model: int = 64, base: float = 10000.0):
        self.table = sinusoidal_positional_encoding(max_len, d_model, base).numpy()  # (L, D)
        self.base = base
        style = {"description_width": "80px"}
        controls = {
            "position": widgets.IntSlider(value=min(10, max_len - 1), min=0, max=max_len - 1, description="position", style=style),
            "dimension": widgets.IntSlider(value=min(4, d_model - 1), min=0, max=d_model - 1, description="dimension", style=style),
        }
        super().__init__(controls)
        self._update()

    @property
    def position(self) -> int:
        return self.controls["position"].value

    @property
    def dimension(self) -> int:
        return self.controls["dimension"].value

    def current_matrix(self) -> np.ndarray:
        """The whole table ``(max_len, d_model)``."""
        return self.table

    def current_row(self) -> np.ndarray:
        """The selected position's encoding vector ``(d_model,)``."""
        return self.table[self.position]

    def current_column(self) -> np.ndarray:
        """The selected dimension over all positions ``(max_len,)``."""
        return self.table[:, self.dimension]

    def wavelength(self) -> float:
        """Wavelength in positions of the selected dimension: 2π · base^(2i/d_model)."""
        two_i = self.dimension - self.dimension % 2
        return 2 * math.pi * self.base ** (two_i / self.table.shape[1])

    def describe(self) -> str:
        return f"positional encoding explorer: position {self.position}, dimension {self.dimension}"

    def _draw(self) -> Figure:
        L, D = self.table.shape
        p, i = self.position, self.dimension
        fig = _widget_figure(12.0, 5.0)
        grid = fig.add_gridspec(2, 2, width_ratios=[1.0, 1.25])
        ax_table = fig.add_subplot(grid[:, 0])
        image = ax_table.imshow(self.table, aspect="auto", cmap=PE_CMAP, vmin=-1, vmax=1, interpolation="nearest")
        fig.colorbar(image, ax=ax_table, shrink=0.8)
        # Outline the selected row and column on the table.
        ax_table.add_patch(Rectangle((-0.5, p - 0.5), D, 1, fill=False, edgecolor="black", linewidth=1.6))
        ax_table.add_patch(Rectangle((i - 0.5, -0.5), 1, L, fill=False, edgecolor="black", linewidth=1.6, linestyle="--"))
        ax_table.set_xlabel("dimension i")
        ax_table.set_ylabel("position pos")
        ax_table.set_title(f"table {L} × {D}")

        ax_col = fig.add_subplot(grid[0, 1])
        ax_col.plot(np.arange(L), self.current_column(), color=HIGHLIGHT_COLOR)
        ax_col.plot([p], [self.table[p, i]], "o", color="black")
        fn = "sin" if i % 2 == 0 else "cos"
        ax_col.set_title(f"dimension {i} = {fn}(pos / {self.base:g}^({i - i % 2}/{D})), wavelength {self.wavelength():.1f} positions", fontsize=10)
        ax_col.set_xlabel("position pos")
        ax_col.set_ylim(-1.15, 1.15)
        ax_col.grid(alpha=0.3)

        ax_row = fig.add_subplot(grid[1, 1])
        ax_row.bar(np.arange(D), self.current_row(), color="#4a4a4a", width=0.8)
        ax_row.bar([i], [self.table[p, i]], color=HIGHLIGHT_COLOR, width=0.8)
        ax_row.set_title(f"encoding of position {p} (one vector of {D} numbers)", fontsize=10)
        ax_row.set_xlabel("dimension i")
        ax_row.set_ylim(-1.15, 1.15)
        ax_row.grid(alpha=0.3, axis="y")
        return fig


def positional_encoding_explorer(max_len: int = 100, d_model: int = 64, base: float = 10000.0) -> PositionalEncodingExplorer:
    """Sliders over position and dimension of the sinusoidal table (paper §3.5).

    Shows the table with the selected position (row, solid black) and dimension
    (column, dashed black) outlined, the selected dimension as an orange curve
    over positions, and the selected position's vector as bars.

    Returns:
        A ``VBox`` with ``.controls`` (``position``, ``dimension``),
        ``.current_row()``, ``.current_column()``, ``.current_matrix()``,
        ``.wavelength()`` and ``.figure``.
    """
    return PositionalEncodingExplorer(max_len, d_model, base)


def _cross_layers(cross_attention) -> list[np.ndarray]:
    """Normalise to a list over layers of ``(H, T, S)``."""
    if isinstance(cross_attention, Mapping):
        cross_attention = cross_attention["cross"]  # Transformer.attention_weights()
    per_layer = cross_attention if isinstance(cross_attention, (list, tuple)) else [cross_attention]
    layers = []
    for w in per_layer:
        a = _to_numpy(w).astype(float)
        if a.ndim == 4:
            if a.shape[0] != 1:
                raise ValueError(f"generation_stepper shows one sentence; got a batch of {a.shape[0]} (index it, e.g. weights[i:i+1])")
            a = a[0]
        while a.ndim < 3:
            a = a[None]
        if a.ndim != 3:
            raise ValueError(f"cross-attention must be (H, T, S) or (1, H, T, S), got shape {tuple(a.shape)}")
        layers.append(a)
    return layers


class GenerationStepper(_FigureWidget):
    """Widget returned by :func:`generation_stepper`."""

    _kind_name = "generation stepper"

    def __init__(self, src_tokens, tgt_tokens, cross_attention, title: str | None = None):
        self._layers = _cross_layers(cross_attention)
        src = src_tokens[0] if src_tokens and not _is_one_sentence(src_tokens) else src_tokens
        tgt = tgt_tokens[0] if tgt_tokens and not _is_one_sentence(tgt_tokens) else tgt_tokens
        self.src_tokens = [str(t) for t in src]
        self.tgt_tokens = [str(t) for t in tgt]
        _, T, S = self._layers[0].shape
        if len(self.tgt_tokens) > T or len(self.src_tokens) > S:
            raise ValueError(
                f"{len(self.tgt_tokens)} target x {len(self.src_tokens)} source tokens do not fit cross-attention "
                f"of {T} x {S}: pass the generated words (one per attention row) and the source words"
            )
        if not self.tgt_tokens:
            raise ValueError("tgt_tokens is empty: nothing to step through")
        self._title = title
        style = {"description_width": "60px"}
        controls: dict[str, widgets.Widget] = {
            "step": widgets.IntSlider(value=0, min=0, max=len(self.tgt_tokens) - 1, description="step", style=style),
        }
        if len(self._layers) > 1:
            controls["layer"] = widgets.IntSlider(value=len(self._layers) - 1, min=0, max=len(self._layers) - 1,
                                                  description="layer", style=style)
        n_heads = self._layers[0].shape[0]
        if n_heads > 1:
            controls["head"] = widgets.Dropdown(options=_head_options(n_heads), value=MEAN_OF_HEADS, description="head", style=style)
        self.html = widgets.HTML()
        super().__init__(controls, extra=[self.html])
        self._update()

    @property
    def step(self) -> int:
        return self.controls["step"].value

    @property
    def layer(self) -> int:
        return self.controls["layer"].value if "layer" in self.controls else 0

    @property
    def head(self):
        return self.controls["head"].value if "head" in self.controls else 0

    def current_matrix(self) -> np.ndarray:
        """The ``(T, S)`` cross-attention of the selected layer and head, trimmed to the real tokens."""
        return _select_head(self._layers[self.layer], self.head)[: len(self.tgt_tokens), : len(self.src_tokens)]

    def current_weights(self) -> np.ndarray:
        """The ``(S,)`` weights over the source words at the current step."""
        return self.current_matrix()[self.step]

    def current_prefix(self) -> list[str]:
        """The target words generated up to and including the current step."""
        return self.tgt_tokens[: self.step + 1]

    def describe(self) -> str:
        word = self.tgt_tokens[self.step]
        text = f"step {self.step}: generating {word!r}, layer {self.layer}, {_head_label(self.head)}"
        return (f"{self._title}: " if self._title else "") + text

    def _before_draw(self) -> None:
        done = "".join(f"<span style='margin-right:0.4em'>{html.escape(w)}</span>" for w in self.tgt_tokens[: self.step])
        current = html.escape(self.tgt_tokens[self.step])
        self.html.value = (
            "<div style='font-size:1.15em;line-height:1.8'><b>generated so far:</b> "
            f"{done}<mark style='background:#ffd8a8;padding:0 0.25em;border-radius:3px'><b>{current}</b></mark></div>"
        )

    def _draw(self) -> Figure:
        matrix = self.current_matrix()  # (T, S)
        T, S = matrix.shape
        t = self.step
        width = min(14.0, max(5.5, 0.5 * S + 2.5))
        fig = _widget_figure(width, 2.4 + min(7.0, 0.38 * T + 0.8))
        grid = fig.add_gridspec(2, 1, height_ratios=[2.0, max(1.5, 0.38 * T)])
        ax_bar = fig.add_subplot(grid[0])
        ax_heat = fig.add_subplot(grid[1], sharex=ax_bar)
        # Heatmap cells sit at integer + 0.5, so the bars line up with the columns below.
        ax_bar.bar(np.arange(S) + 0.5, matrix[t], width=0.8, color=HIGHLIGHT_COLOR)
        ax_bar.set_ylim(0, 1.05)
        ax_bar.set_ylabel("weight")
        ax_bar.set_title(self.describe(), fontsize=11)
        ax_bar.tick_params(labelbottom=False)
        ax_bar.grid(alpha=0.3, axis="y")
        _draw_attention(ax_heat, matrix, self.src_tokens, self.tgt_tokens, cbar=False,
                        xlabel="source words (keys)", ylabel="step: the word it writes")
        ax_heat.set_aspect("auto")
        ax_heat.add_patch(Rectangle((0, t), S, 1, fill=False, edgecolor=HIGHLIGHT_COLOR, linewidth=2.5))
        return fig


def generation_stepper(src_tokens, tgt_tokens, cross_attention, title: str | None = None) -> GenerationStepper:
    """Step through a generated translation and see where each word looked in the source.

    Args:
        src_tokens: the source words (one list).
        tgt_tokens: the generated words, one per cross-attention row: row
            ``t`` is the decoder query that produced ``tgt_tokens[t]`` (so pass
            the output words, without ``<bos>``). Fewer words than rows trims
            the extra (padding) rows.
        cross_attention: ``(H, T, S)``, ``(1, H, T, S)``, a list over layers of
            those, or the dict of ``Transformer.attention_weights()`` (its
            ``"cross"`` entry is used).
        title: optional prefix of the figure title.

    Returns:
        A ``VBox``: a ``step`` slider (plus ``layer``, default the last, and
        ``head`` with "mean of heads" when there is a choice), the target
        prefix with the current word highlighted (``.html``), and a figure:
        the current step's weights over the source words as bars above the
        whole cross-attention heatmap with the current row outlined. For tests:
        ``.controls``, ``.current_weights()``, ``.current_matrix()``,
        ``.current_prefix()``, ``.figure``.
    """
    return GenerationStepper(src_tokens, tgt_tokens, cross_attention, title)


class Translator(widgets.VBox):
    """Widget returned by :func:`translator`."""

    def __init__(self, model, src_vocab, tgt_vocab, sentence: str = "", beam_size: int = 4,
                 length_penalty: float = 0.6, title: str | None = None):
        if not isinstance(sentence, str):
            raise TypeError(f"sentence must be a str, got {type(sentence).__name__}")
        if not 1 <= beam_size <= MAX_WIDGET_BEAM:
            raise ValueError(f"beam_size must be between 1 (greedy) and {MAX_WIDGET_BEAM}, got {beam_size}")
        super().__init__()
        self.model, self.src_vocab, self.tgt_vocab = model, src_vocab, tgt_vocab
        self.length_penalty = length_penalty
        self._title = title
        style = {"description_width": "70px"}
        self.controls: dict[str, widgets.Widget] = {
            "text": widgets.Text(value=sentence, placeholder="Ein Hund rennt über eine Wiese.", description="German",
                                 continuous_update=False, style=style, layout=widgets.Layout(width="600px")),
            "decoding": widgets.ToggleButtons(options=[("greedy", "greedy"), ("beam search", "beam")],
                                              value="greedy" if beam_size == 1 else "beam", description="decoding", style=style),
            "beam": widgets.IntSlider(value=max(beam_size, 2), min=2, max=MAX_WIDGET_BEAM, description="beam size",
                                      style=style, continuous_update=False, disabled=beam_size == 1),
        }
        self.button = widgets.Button(description="Translate", button_style="primary", icon="language")
        self.result = widgets.HTML()
        self.view = widgets.VBox()  # the word-by-word view of the last translation
        self.stepper: GenerationStepper | None = None
        self.translation = ""
        self.details: dict | None = None
        self.children = [self.controls["text"], widgets.HBox([self.controls["decoding"], self.controls["beam"]]),
                         self.button, self.result, self.view]
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        self.button.on_click(lambda _button: self.translate())
        self.translate()

    @property
    def beam_size(self) -> int:
        return 1 if self.controls["decoding"].value == "greedy" else self.controls["beam"].value

    def _on_change(self, _change=None) -> None:
        self.controls["beam"].disabled = self.controls["decoding"].value == "greedy"
        self.translate()

    def _show(self, message: str, color: str = "#444") -> None:
        self.result.value = f"<div style='font-size:1.05em;color:{color};margin:0.4em 0'>{message}</div>"

    def translate(self) -> str:
        """Translate the text box with the chosen decoding; update the translation and the views."""
        sentence = self.controls["text"].value
        self.translation, self.details = "", None
        if not sentence.strip():
            self.stepper, self.view.children = None, ()
            self._show("Type a German sentence above and press Enter (or <b>Translate</b>).")
            return ""
        keep = self._view_choice()
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                text, details = _translate(self.model, sentence, beam_size=self.beam_size, src_vocab=self.src_vocab,
                                          tgt_vocab=self.tgt_vocab, return_attention=True, length_penalty=self.length_penalty)
        except Exception as error:  # a widget shows the problem; it never leaves a traceback in the notebook
            self.stepper, self.view.children = None, ()
            self._show(f"could not translate: {html.escape(str(error))}", color="#c92a2a")
            return ""
        self.translation, self.details = text, details
        notes = [html.escape(str(w.message)) for w in caught]
        unknown = [t for t in details["src_tokens"][:-1] if t not in self.src_vocab]
        if unknown:
            notes.append("never seen in training, read as &lt;unk&gt;: " + ", ".join(html.escape(t) for t in unknown))
        method = "greedy" if self.beam_size == 1 else f"beam {self.beam_size}"
        self._show(f"<b>English</b> ({method}): <span style='font-size:1.2em'><b>{html.escape(text) or '(nothing)'}</b></span>"
                   + "".join(f"<br><small style='color:#9c5700'>{note}</small>" for note in notes))
        if details["cross_attention"] is None:
            self.stepper, self.view.children = None, ()
        else:
            self.stepper = GenerationStepper(details["src_tokens"], details["tgt_tokens"], details["cross_attention"], title=self._title)
            self._restore_view_choice(keep)
            self.view.children = (self.stepper,)
        return text

    def _view_choice(self) -> dict:
        if self.stepper is None:
            return {}
        return {name: self.stepper.controls[name].value for name in ("layer", "head") if name in self.stepper.controls}

    def _restore_view_choice(self, choice: dict) -> None:
        """Keep the layer and head the learner picked when the next sentence is translated."""
        for name, value in choice.items():
            control = self.stepper.controls.get(name)
            if control is not None:
                control.value = value

    def describe(self) -> str:
        sentence = self.controls["text"].value
        head = f"{self._title}: " if self._title else ""
        if not self.translation:
            return head + "translator (type a German sentence)"
        return head + f"{sentence!r} -> {self.translation!r}"

    def _repr_mimebundle_(self, **kwargs):
        data = super()._repr_mimebundle_(**kwargs) or {}
        data["text/plain"] = self.describe()  # stable text for nbval; the picture for viewers without live widgets
        if self.stepper is not None and self.stepper._png:
            data["image/png"] = base64.b64encode(self.stepper._png).decode("ascii")
        return data


def translator(model, src_vocab, tgt_vocab, sentence: str = "Ein Mann fährt Fahrrad.", beam_size: int = 4,
               length_penalty: float = 0.6, title: str | None = None) -> Translator:
    """Type a German sentence, get its English translation and see where each word looked.

    Args:
        model: a trained :class:`~transformer_lessons.model.Transformer` (eval mode).
        src_vocab, tgt_vocab: its vocabularies.
        sentence: the sentence in the text box at first.
        beam_size: 1 for greedy decoding, else beam search with this many beams
            (at most ``MAX_WIDGET_BEAM``); the learner can change both.
        length_penalty: GNMT ``α`` for beam search (paper §6.1: 0.6).
        title: optional prefix of the figure title.

    Returns:
        A ``VBox``: a text box (``Enter`` translates), greedy or beam search
        and the beam size, a Translate button, the English translation (with a
        note for words the model never saw and for over-long input), and the
        word-by-word view of :func:`generation_stepper`: for each written word,
        where the cross-attention of the chosen layer (default the last) and
        head looked in the German, above the whole cross-attention heatmap.
        Rows are the words each step *writes*. For tests: ``.controls`` (``text``,
        ``decoding``, ``beam``), ``.translate()``, ``.translation``,
        ``.details`` (what ``translate(..., return_attention=True)`` returned),
        ``.stepper``.
    """
    return Translator(model, src_vocab, tgt_vocab, sentence, beam_size, length_penalty, title)
