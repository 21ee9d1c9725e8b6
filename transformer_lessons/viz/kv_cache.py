"""Pictures of incremental decoding (notebook 12): what a key/value cache holds, and what it saves.

``plot_kv_cache`` draws the cache of every decoder layer after ``t`` steps: the
self-attention keys and values ``(B, H, t, Dh)``, one column per decoded position
and the next step's column dashed, beside the cross-attention keys and values
``(B, H, S, Dh)``, computed once from the encoder's output. ``plot_decode_times``
draws measured decoding times against the output length.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

_SELF_CMAP = "viridis"
_CROSS_COLOR = "#9ecae1"
_DEPTH = 0.35  # offset of the two grey slabs behind each slab, which stand for the other heads (and sentences)
_HEIGHT = 3.0  # the Dh axis, drawn this tall


def _slab(
    ax,
    x: float,
    y: float,
    colors: Sequence,
    label: str,
    dashed_next: bool = False,
    text_color: str = "white",
    shadows: bool = True,
) -> float:
    """One ``(Dh, columns)`` slab at ``(x, y)``, two shadows behind it (if ``shadows``), columns numbered; returns its right edge."""
    width = len(colors) + (1 if dashed_next else 0)
    for depth in (2, 1) if shadows else ():  # the other heads / sentences, behind
        ax.add_patch(
            Rectangle(
                (x + depth * _DEPTH, y + depth * _DEPTH),
                width,
                _HEIGHT,
                facecolor="#f0f0f0",
                edgecolor="#b0b0b0",
                lw=0.8,
                zorder=1 - depth,
            )
        )
    for i, color in enumerate(colors):
        ax.add_patch(Rectangle((x + i, y), 1, _HEIGHT, facecolor=color, edgecolor="white", lw=1.2, zorder=2))
        ax.text(x + i + 0.5, y + _HEIGHT / 2, str(i), ha="center", va="center", fontsize=8, color=text_color, zorder=3)
    if dashed_next:
        ax.add_patch(
            Rectangle(
                (x + len(colors), y), 1, _HEIGHT, facecolor="white", edgecolor="#d62728", lw=1.4, ls="--", zorder=2
            )
        )
        ax.text(x + len(colors) + 0.5, y - 0.2, "next", ha="center", va="top", fontsize=8, color="#d62728")
    ax.text(
        x + width / 2,
        y + _HEIGHT + 2.5 * _DEPTH + 0.15,
        label,
        ha="center",
        va="bottom",
        fontsize=10,
        family="monospace",
    )
    return x + width


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], label: str, below: float = 0.0, **text) -> None:
    """A double arrow from ``start`` to ``end``, labelled at its middle (``below`` lower)."""
    ax.annotate("", xy=start, xytext=end, arrowprops=dict(arrowstyle="<->", color="#444444", lw=1))
    ax.text((start[0] + end[0]) / 2, (start[1] + end[1]) / 2 - below, label, fontsize=9, **text)


def _footer(n_heads: int, batch: int) -> str:
    """What a slab is, and what the two grey slabs behind it stand for (the other heads and sentences, by number)."""
    footer = f"each slab: one head of one sentence (B = {batch}, H = {n_heads})"
    others = [
        f"{n} other {what}{'s' if n > 1 else ''}" for n, what in ((n_heads - 1, "head"), (batch - 1, "sentence")) if n
    ]
    return footer + (f"; the two grey slabs behind it stand for the {' and '.join(others)}" if others else "")


def plot_kv_cache(
    n_layers: int = 3, t: int = 4, S: int = 6, n_heads: int = 8, d_head: int = 32, batch: int = 1, rotary: bool = False
) -> Figure:
    """The key/value cache of a decoder after ``t`` steps, layer by layer.

    Each slab is one sentence and one head: ``Dh`` tall, one column per position.
    Self-attention columns are coloured by the step that wrote them, the dashed red
    column is where the next step appends; the cross-attention slabs have ``S``
    columns, fixed for the whole sentence. The two grey slabs behind each slab stand
    for the other ``H - 1`` heads (and ``B - 1`` sentences), whatever their number; the
    footer says how many.

    Args:
        n_layers: decoder layers (rows of the figure).
        t: positions decoded so far.
        S: source positions (the encoder's output).
        n_heads, d_head, batch: ``H``, ``Dh`` and ``B``, written in the labels.
        rotary: the model rotates its self-attention keys (RoFormer): the cached keys
            are the rotated ones, each for its own position, and the labels say so.

    Returns:
        The Figure.
    """
    if min(n_layers, t, S) < 1:
        raise ValueError(f"n_layers, t and S must be at least 1, got {n_layers}, {t}, {S}")
    colors = plt.get_cmap(_SELF_CMAP)(np.linspace(0.1, 0.75, t))
    gap, middle, row = 1.6, 3.5, _HEIGHT + 2.4
    self_v_x = t + 1 + gap
    cross_k_x = self_v_x + t + 1 + middle
    cross_v_x = cross_k_x + S + gap
    right = cross_v_x + S + 2 * _DEPTH
    top = (n_layers - 1) * row + _HEIGHT + 2.5 * _DEPTH + 0.8
    left, bottom = -3.6, -2.6
    fig, ax = plt.subplots(figsize=(0.4 * (right - left), 0.4 * (top + 2.2 - bottom)))
    shadows = n_heads * batch > 1  # one head of one sentence has nothing behind it
    for layer in range(n_layers):
        y = (n_layers - 1 - layer) * row
        ax.text(-1.2, y + _HEIGHT / 2, f"decoder\nlayer {layer}", ha="right", va="center", fontsize=10, weight="bold")
        _slab(ax, 0, y, colors, "self_k (rotated)" if rotary else "self_k", dashed_next=True, shadows=shadows)
        _slab(ax, self_v_x, y, colors, "self_v", dashed_next=True, shadows=shadows)
        _slab(ax, cross_k_x, y, [_CROSS_COLOR] * S, "cross_k", text_color="#333333", shadows=shadows)
        _slab(ax, cross_v_x, y, [_CROSS_COLOR] * S, "cross_v", text_color="#333333", shadows=shadows)
    ax.text(
        (self_v_x + t + 1) / 2,
        top,
        f"self-attention, per layer: (B, H, t, Dh) = ({batch}, {n_heads}, {t}, {d_head})\n"
        "one column more at every step" + ("\nkeys stored rotated, each for its own position" if rotary else ""),
        ha="center",
        va="bottom",
        fontsize=10.5,
    )
    ax.text(
        (cross_k_x + cross_v_x + S) / 2,
        top,
        f"cross-attention, per layer: (B, H, S, Dh) = ({batch}, {n_heads}, {S}, {d_head})\n"
        "computed once per sentence, from the encoder's output",
        ha="center",
        va="bottom",
        fontsize=10.5,
    )
    _arrow(ax, (0, -0.9), (t, -0.9), "t positions decoded", below=0.2, ha="center", va="top")
    _arrow(ax, (cross_k_x, -0.9), (cross_k_x + S, -0.9), "S source positions", below=0.2, ha="center", va="top")
    _arrow(ax, (-0.35, 0), (-0.35, _HEIGHT), "Dh ", ha="right", va="center")
    ax.text(right, bottom + 0.1, _footer(n_heads, batch), ha="right", va="bottom", fontsize=12.5, color="#444444")
    ax.set_xlim(left, right + 0.2)
    ax.set_ylim(bottom, top + 2.2)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    return fig


def plot_decode_times(lengths: Sequence[int], seconds: Mapping[str, Sequence[float]], title: str = "") -> Figure:
    """Decoding time against the output length: in total (left) and per generated token (right).

    Args:
        lengths: the output lengths ``L`` (tokens generated per sentence).
        seconds: ``{label: seconds to generate L tokens, one per length}``, e.g.
            ``{"recompute": [...], "cached": [...]}``.
        title: a title over both panels.

    Returns:
        The Figure.
    """
    lengths = np.asarray(lengths, dtype=float)
    fig, (total, per_token) = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    for (label, values), marker in zip(seconds.items(), "os^D"):
        values = np.asarray(values, dtype=float)
        if values.shape != lengths.shape:
            raise ValueError(f"{label}: {len(values)} times for {len(lengths)} lengths")
        total.plot(lengths, values, marker=marker, label=label)
        per_token.plot(lengths, 1000 * values / lengths, marker=marker, label=label)
    total.set(xlabel="output length L (tokens)", ylabel="seconds to generate L tokens", title="total time")
    per_token.set(xlabel="output length L (tokens)", ylabel="milliseconds per token", title="time per token")
    for ax in (total, per_token):
        ax.set_xlim(0, lengths.max() * 1.05)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    return fig
