"""Pictures of masks: several masks side by side, and the causal mask beside the shifted-right target.

``plot_masks`` draws masks of one sentence next to each other (notebook 03's padding,
causal and decoder masks), with one legend for all of them.

``mark_blocked`` greys and hatches the blocked cells of an attention heatmap, so that a
weight of exactly 0 on a blocked key does not look like a small weight on an allowed one.

``plot_shifted_target`` shows why the decoder needs the causal mask (paper §3.1 and
§3.2.3). In training the decoder reads the target shifted right by one position
(``<bos>`` first) and must write the target itself (``<eos>`` last). So the word
that position ``t`` must write is the key at position ``t + 1``, just above the
diagonal: the causal mask blocks exactly that cell and every later one.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from transformer_lessons.specials import BOS, EOS
from transformer_lessons.viz.common import squeeze_leading, to_numpy
from transformer_lessons.viz.heatmaps import BLOCKED_COLOR, mask_legend_handles, plot_mask

ANSWER_COLOR = "#c0392b"  # the outline of the blocked cell that holds the word a row must write


def plot_masks(masks: Sequence, titles: Sequence[str], x_labels=None, y_labels=None, *, cell: float = 0.6) -> Figure:
    """Several bool masks side by side, on cells of one size, with one legend below them.

    Args:
        masks: ``(T, S)`` masks (True = may attend; leading size-1 axes are dropped),
            all of the same shape, e.g. the padding, causal and decoder masks of one sentence.
        titles: one title per mask.
        x_labels: ``S`` key tokens; y_labels: ``T`` query tokens (shared by all panels).
        cell: the side of one cell, in inches.

    Returns:
        The Figure; its axes are the masks, in order.
    """
    if len(masks) != len(titles):
        raise ValueError(f"{len(masks)} masks but {len(titles)} titles")
    shapes = {squeeze_leading(to_numpy(m), 2, "mask").shape for m in masks}
    if len(shapes) != 1:
        raise ValueError(f"the masks must have one shape, got {sorted(shapes)}")
    [(T, S)] = shapes
    fig, axes = plt.subplots(
        1,
        len(masks),
        figsize=(len(masks) * (S * cell + 1.0) + 0.6, T * cell + 2.6),  # + the legend, titles and key labels
        layout="constrained",
        squeeze=False,
    )
    for i, (ax, mask, title) in enumerate(zip(axes[0], masks, titles)):
        plot_mask(mask, x_labels=x_labels, y_labels=y_labels, ax=ax, title=title, legend=False)
        ax.set_anchor("N")  # square cells leave spare height: put it below the panels, not under the legend
        if i > 0:  # the same query tokens in every panel: label the first only
            ax.set_ylabel("")
            ax.set_yticklabels([])
            ax.tick_params(left=False)
    fig.legend(handles=mask_legend_handles(), loc="outside upper center", ncols=2, frameon=False, fontsize=11)
    return fig


def mark_blocked(ax, mask, *, hatch: str = "///") -> None:
    """Grey and hatch the blocked cells of an attention heatmap drawn on ``ax``.

    A blocked key gets a weight of exactly 0, which on the colour scale looks the
    same as a small weight such as 0.01 on an allowed key. Covering the blocked cells
    with the masks' grey, hatched, tells the two apart; the numbers written in those
    cells (``annot=True``) stay readable, in dark ink.

    Args:
        ax: the Axes of a heatmap with one cell per (query, key), e.g. from ``plot_attention``.
        mask: ``(T, S)`` bool mask of that heatmap, True = may attend (leading size-1 axes are dropped).
        hatch: the hatch pattern of the blocked cells.
    """
    m = squeeze_leading(to_numpy(mask), 2, "mask").astype(bool)
    for query, key in zip(*(~m).nonzero()):
        ax.add_patch(Rectangle((key, query), 1, 1, facecolor=BLOCKED_COLOR, edgecolor="#9a9a9a", hatch=hatch, lw=0))
    for text in ax.texts:  # the numbers of annot=True sit at the cell centres
        x, y = text.get_position()
        if 0 <= int(y) < m.shape[0] and 0 <= int(x) < m.shape[1] and not m[int(y), int(x)]:
            text.set_color("#333333")
            text.set_zorder(3)


def plot_shifted_target(words: Sequence[str], *, bos: str = BOS, eos: str = EOS, cell: float = 0.7) -> Figure:
    """The causal mask of a target sentence, each row beside the word that position must write.

    The decoder reads ``bos, w1 … wn`` (the target shifted right, paper §3.1) and must
    write ``w1 … wn, eos``. Row ``t`` is position ``t``: its green cells are the keys
    it may see, and the outlined cell (key ``t + 1``) is the very word it must write,
    blocked by the mask. The last row writes ``eos``, which is not in the input at all.

    Args:
        words: the target sentence, without special tokens, e.g. ``["a", "dog", "runs"]``.
        bos, eos: the special tokens (the package's ``<bos>`` and ``<eos>``).
        cell: the side of one cell, in inches.

    Returns:
        The Figure: the mask on the left, the words written on the right.
    """
    words = [str(w) for w in words]
    if not words:
        raise ValueError("words is empty: give the target sentence, e.g. ['a', 'dog', 'runs']")
    reads = [bos, *words]  # the decoder's input: the target shifted right by one position
    writes = [*words, eos]  # what each position must predict
    n = len(reads)
    causal = [[key <= query for key in range(n)] for query in range(n)]  # (T, T), True on and below the diagonal
    fig, ax = plt.subplots(figsize=(n * cell + 3.8, n * cell + 2.0), layout="constrained")
    plot_mask(causal, x_labels=reads, y_labels=[f"{t}: {w}" for t, w in enumerate(reads)], ax=ax, legend=False)
    ax.set_xlabel("keys: the words the decoder reads")
    ax.set_ylabel("queries: position t reads")
    for t in range(n - 1):  # key t + 1 holds the word that row t must write
        ax.add_patch(Rectangle((t + 1.06, t + 0.06), 0.88, 0.88, fill=False, edgecolor=ANSWER_COLOR, linewidth=2.5))
    ax.text(n + 0.25, -0.15, "must write", fontsize=11, fontweight="bold", va="bottom", clip_on=False)
    for t, word in enumerate(writes):
        ax.text(n + 0.25, t + 0.5, f"→ {word}", fontsize=12, va="center", clip_on=False)
    handles = [
        *mask_legend_handles(),
        Line2D(
            [],
            [],
            marker="s",
            linestyle="",
            markersize=12,
            markerfacecolor="none",
            markeredgecolor=ANSWER_COLOR,
            markeredgewidth=2.5,
            label="the word this row must write",
        ),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=1, frameon=False)
    ax.set_title(f"The decoder reads the target shifted right ({bos} first)", pad=22)
    return fig


__all__ = ["ANSWER_COLOR", "mark_blocked", "plot_masks", "plot_shifted_target"]
