"""Rotary positions as a picture (notebook 14): one pair of a query and a key, turned by their positions.

RoFormer (Su et al. 2021, §3.2) turns pair ``i`` of the query at position ``m`` by
``m·θ_i`` and of the key at position ``n`` by ``n·θ_i``. ``plot_rotary_pairs`` draws
that pair as two arrows on a circle, one panel per ``(m, n)``: the same distance
``m - n`` at two places gives the same angle between the arrows (and so the same
dot product), another distance gives another angle.

The arrows are not drawn from a formula of their own: they are the pair taken out
of :func:`~transformer_lessons.rotary.apply_rotary`'s output, so the picture shows
what the course's code does.
"""

from __future__ import annotations

import math
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Arc

from transformer_lessons.rotary import apply_rotary, rotary_angles

QUERY_COLOR = "#d62728"
KEY_COLOR = "#1f77b4"


def rotated_pair(vector: Sequence[float], position: int, d_head: int = 64, pair: int = 4) -> np.ndarray:
    """Pair ``pair`` of a ``d_head`` vector holding ``vector`` there (zeros elsewhere), after ``apply_rotary``.

    Returns:
        the 2-D pair ``(x_{2i}, x_{2i+1})`` rotated by ``position·θ_pair``, as numpy.
    """
    x = torch.zeros(1, d_head)  # (L=1, Dh)
    x[0, 2 * pair : 2 * pair + 2] = torch.tensor([float(v) for v in vector])
    return apply_rotary(x, start=position)[0, 2 * pair : 2 * pair + 2].numpy()


def pair_theta(d_head: int = 64, pair: int = 4) -> float:
    """``θ_pair`` in radians per position (``rotary_angles`` at position 1)."""
    return float(rotary_angles(1, 1, d_head)[0, pair])


def _degrees(v: np.ndarray) -> float:
    return math.degrees(math.atan2(float(v[1]), float(v[0])))


def angle_between(q: np.ndarray, k: np.ndarray) -> float:
    """The angle from ``k`` to ``q`` in degrees, in ``[0, 360)`` (counter-clockwise)."""
    return (_degrees(q) - _degrees(k)) % 360.0


def _arrow(ax, v: np.ndarray, color: str, gid: str, label: str, dashed: bool = False) -> None:
    style = dict(arrowstyle="-|>", color=color, lw=1.0 if dashed else 2.2, mutation_scale=14)
    if dashed:
        style.update(linestyle=(0, (3, 3)), alpha=0.5)
    ax.annotate("", xy=(float(v[0]), float(v[1])), xytext=(0.0, 0.0), arrowprops=style, gid=gid)
    far = v / max(np.linalg.norm(v), 1e-9) * (np.linalg.norm(v) + 0.1 + 0.035 * len(label))
    ax.text(far[0], far[1], label, color=color, ha="center", va="center", fontsize=10, alpha=0.6 if dashed else 1)


def _panel(ax, q: Sequence[float], k: Sequence[float], m: int, n: int, d_head: int, pair: int) -> None:
    qm, kn = rotated_pair(q, m, d_head, pair), rotated_pair(k, n, d_head, pair)
    ax.add_patch(plt.Circle((0, 0), 1.0, fill=False, color="0.8", lw=1))
    ax.axhline(0, color="0.9", lw=0.8, zorder=0)
    ax.axvline(0, color="0.9", lw=0.8, zorder=0)
    _arrow(ax, np.asarray(q, dtype=float), QUERY_COLOR, "query_start", "q", dashed=True)
    _arrow(ax, np.asarray(k, dtype=float), KEY_COLOR, "key_start", "k", dashed=True)
    _arrow(ax, qm, QUERY_COLOR, "query", f"q at {m}")
    _arrow(ax, kn, KEY_COLOR, "key", f"k at {n}")
    between = angle_between(qm, kn)
    start = _degrees(kn)
    ax.add_patch(Arc((0, 0), 0.7, 0.7, theta1=start, theta2=start + between, color="0.25", lw=1.3))
    mid = math.radians(start + between / 2)
    ax.text(
        0.5 * math.cos(mid),
        0.5 * math.sin(mid),
        f"{between:.0f}°",
        ha="center",
        va="center",
        fontsize=10,
        gid="angle",
        bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.8),
    )
    theta = math.degrees(pair_theta(d_head, pair))
    ax.set_title(
        f"m = {m}, n = {n}: m − n = {m - n}\nq turned {m * theta:.0f}°, k turned {n * theta:.0f}°", fontsize=10
    )
    ax.text(0, -1.42, f"q·k of this pair = {float(qm @ kn):.3f}", ha="center", fontsize=10, gid="dot")
    ax.set_xlim(-1.5, 1.5)
    ax.set_ylim(-1.55, 1.5)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])


def plot_rotary_pairs(
    positions: Sequence[tuple[int, int]] = ((3, 1), (10, 8), (7, 1)),
    q: Sequence[float] = (1.0, 0.0),
    k: Sequence[float] = (0.69, -0.4),
    d_head: int = 64,
    pair: int = 4,
) -> Figure:
    """One pair of a query and a key, rotated by ``apply_rotary`` at each ``(m, n)`` of ``positions``.

    Args:
        positions: ``(m, n)`` per panel: the query's position, the key's.
        q, k: the pair ``(x_{2i}, x_{2i+1})`` of the query and the key before rotation (dashed arrows).
        d_head, pair: which pair of which head size, and so its angle per position ``θ_pair``
            (pair 4 of 64: ``10000^(-8/64)`` ≈ 0.32 radians, 18°).

    Returns:
        the Figure; each panel's arrows carry ``gid`` ``"query"`` and ``"key"`` (``"query_start"``,
        ``"key_start"`` before rotation), the angle from key to query ``gid="angle"`` and the dot
        product ``gid="dot"``.
    """
    fig, axes = plt.subplots(1, len(positions), figsize=(3.4 * len(positions), 3.9))
    for ax, (m, n) in zip(np.atleast_1d(axes), positions):
        _panel(ax, q, k, m, n, d_head, pair)
    theta = math.degrees(pair_theta(d_head, pair))
    fig.suptitle(
        f"Pair {pair} of a head of size {d_head}, turned θ = {theta:.1f}° per position (dashed: before rotation)",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    return fig
