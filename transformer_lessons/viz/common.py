"""What every plot and widget shares: tensors to arrays, token labels, figure sizes.

A plot accepts a tensor or an array, with or without leading size-1 axes (a batch
of one, one head), and optional token labels. These helpers turn that into the
numpy array it draws, check that the labels fit it, and size the figure so each
cell stays readable.
"""

from __future__ import annotations

import numpy as np
import torch
from matplotlib.axes import Axes


def to_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float32).numpy()
    return np.asarray(x)


def squeeze_leading(a: np.ndarray, ndim: int, name: str) -> np.ndarray:
    """Drop leading size-1 axes (a batch of one, one head) until ``a`` has ``ndim`` axes."""
    while a.ndim > ndim and a.shape[0] == 1:
        a = a[0]
    if a.ndim != ndim:
        raise ValueError(
            f"{name} must have {ndim} dimensions (after dropping leading size-1 axes), got shape {tuple(a.shape)}"
        )
    return a


def check_labels(labels, size: int, name: str) -> list[str] | None:
    if labels is None:
        return None
    labels = [str(t) for t in labels]
    if len(labels) != size:
        raise ValueError(f"{name} has {len(labels)} labels but the data has {size} positions on that axis")
    return labels


def heatmap_size(rows: int, cols: int) -> tuple[float, float]:
    """Figure size giving roughly square cells of ~0.4 inch, within readable limits."""
    cell = 0.42 if max(rows, cols) <= 20 else max(0.18, 8.0 / max(rows, cols))
    width = min(14.0, max(4.0, cols * cell + 2.2))  # + room for y labels and colorbar
    height = min(12.0, max(3.0, rows * cell + 1.6))  # + room for rotated x labels and title
    return width, height


def _tick_fontsize(n: int) -> float:
    return 11 if n <= 15 else 9 if n <= 30 else 7


def label_axes(ax: Axes, x_labels, y_labels) -> None:
    """Token labels: keys along x (rotated so long words fit), queries along y."""
    if x_labels is not None:
        ax.set_xticks(np.arange(len(x_labels)) + 0.5)
        ax.set_xticklabels(
            x_labels, rotation=45, ha="right", rotation_mode="anchor", fontsize=_tick_fontsize(len(x_labels))
        )
    if y_labels is not None:
        ax.set_yticks(np.arange(len(y_labels)) + 0.5)
        ax.set_yticklabels(y_labels, rotation=0, fontsize=_tick_fontsize(len(y_labels)))


def is_one_sentence(tokens) -> bool:
    return len(tokens) == 0 or isinstance(tokens[0], str)
