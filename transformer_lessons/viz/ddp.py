"""Notebook 13's drawings of DistributedDataParallel: one step on two ranks, and what DDP overlaps.

``plot_ddp_step`` draws one step of DDP on two ranks: the batch every rank builds,
each rank's shard (its sentences and target tokens, counted from the batch with
:func:`~transformer_lessons.distributed.shard_batch`), the backward of each copy,
the all-reduce and the equal optimizer steps.

Backward computes the gradients from the last layer to the first. DDP groups them
into *buckets* (``bucket_cap_mb``, 25 MiB by default) and starts the all-reduce of
a bucket as soon as every gradient in it is ready, while backward goes on with the
earlier layers. ``plot_ddp_overlap`` draws one backward pass that way: the
compute row, the all-reduces of the buckets one after the other, and, for
comparison, the same all-reduces started only after backward.

The times are a schematic, not a measurement: each bucket's backward takes time in
proportion to its size, and so does its all-reduce (``send_time``).
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

_COMPUTE = ("#c7e9c0", "#a1d99b")  # alternate shades, one per bucket's share of backward
_SEND = "#fcbba1"
_ROWS = {"backward": 2.0, "overlapped": 1.0, "after": 0.0}  # y of each row
_HEIGHT = 0.6


def _bar(ax: Axes, x: float, width: float, row: str, color: str, k: int, wide: bool) -> None:
    """Bucket ``k``'s bar; its label inside when the bar is ``wide``, else its number just below."""
    y = _ROWS[row] - _HEIGHT / 2
    ax.add_patch(Rectangle((x, y), width, _HEIGHT, facecolor=color, edgecolor="0.3", lw=0.8))
    if wide:
        ax.text(x + width / 2, _ROWS[row], f"bucket {k}", ha="center", va="center", fontsize=8)
    else:
        ax.text(x + width / 2, y - 0.03, str(k), ha="center", va="top", fontsize=7)


def _finish(ax: Axes, x: float, row: str) -> None:
    """A tick where the optimizer step can start: every bucket of this row has been all-reduced."""
    ax.plot([x, x], [_ROWS[row] - 0.42, _ROWS[row] + 0.42], color="black", lw=2)
    ax.text(x + 0.01, _ROWS[row] + 0.38, " step", fontsize=8, va="bottom")


def plot_ddp_overlap(
    bucket_mib: Sequence[float] = (1, 25, 25, 25, 24),
    send_time: float = 0.6,
    title: str = "",
    ax: Axes | None = None,
) -> Axes:
    """One backward pass under DDP, drawn as a timeline: compute on top, the buckets' all-reduces below.

    Args:
        bucket_mib: the size of each bucket in MiB, in the order backward fills them (the first
            holds the last layers' gradients). DDP's default: a first bucket of 1 MiB, then 25 MiB each.
        send_time: how long an all-reduce of one MiB takes, as a fraction of the backward of one
            MiB of parameters (schematic).
        title: the title (a default names the total size).
        ax: where to draw (a new figure if ``None``).

    Returns:
        The Axes. Row ``"DDP: all-reduce during backward"`` starts each bucket when its last gradient
        is ready (and the previous bucket has been sent); row ``"all-reduce after backward"`` waits for
        the whole backward.
    """
    sizes = [float(s) for s in bucket_mib]
    if not sizes or min(sizes) <= 0:
        raise ValueError(f"bucket_mib needs at least one positive size, got {list(bucket_mib)}")
    if send_time <= 0:
        raise ValueError(f"send_time must be positive, got {send_time}")
    total = sum(sizes)
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 2.8))
    ready, done = 0.0, 0.0  # when backward has filled the bucket; when the previous all-reduce ended
    for k, size in enumerate(sizes):
        wide = size / total > 0.1
        _bar(ax, ready, size, "backward", _COMPUTE[k % 2], k, wide)
        ready += size
        start = max(ready, done)
        done = start + size * send_time
        _bar(ax, start, done - start, "overlapped", _SEND, k, wide)
    _finish(ax, done, "overlapped")
    after = total
    for k, size in enumerate(sizes):
        _bar(ax, after, size * send_time, "after", _SEND, k, size / total > 0.1)
        after += size * send_time
    _finish(ax, after, "after")
    ax.annotate(
        "",
        xy=(total, _ROWS["backward"] + 0.45),
        xytext=(0, _ROWS["backward"] + 0.45),
        arrowprops={"arrowstyle": "-|>", "color": "0.4"},
    )
    ax.text(0, _ROWS["backward"] + 0.5, "backward: from the last layer to the first", fontsize=8, va="bottom")
    ax.set_yticks([_ROWS["after"], _ROWS["overlapped"], _ROWS["backward"]])
    ax.set_yticklabels(["all-reduce after backward", "DDP: all-reduce during backward", "backward (compute)"])
    ax.set_xlim(-0.01 * after, after * 1.06)
    ax.set_ylim(-0.5, 3.0)
    ax.set_xticks([])
    ax.set_xlabel("time → (schematic: each bar's length is in proportion to its bucket's size)")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    sizes_text = " + ".join(f"{s:.3g}" for s in sizes)
    ax.set_title(title or f"{len(sizes)} buckets, {sizes_text} = {total:.3g} MiB of gradients", fontsize=10)
    return ax


def _box(ax: Axes, x: float, y: float, w: float, h: float, text: str, color: str) -> None:
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08", fc=color, ec="0.3", lw=1))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9.5)


def _arrow(ax: Axes, start: tuple[float, float], end: tuple[float, float]) -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12, color="0.35", lw=1.2))


def plot_ddp_step(batch, pad_id: int, ax: Axes | None = None) -> Axes:
    """One step of DDP on two ranks, with the sentence and token counts of ``batch``'s two shards.

    Args:
        batch: a :class:`~transformer_lessons.data.Batch` (notebook 13 passes ``ddp_demo.global_batch()``).
        pad_id: the padding id, which the shards' token counts leave out.
        ax: where to draw (a new figure if ``None``).

    Returns:
        The Axes: the batch on top, then per rank its shard, its forward and backward, the
        all-reduce of the two gradients in the middle, and the two equal optimizer steps.
    """
    from transformer_lessons.distributed import shard_batch

    if ax is None:
        _, ax = plt.subplots(figsize=(11, 5.2))
    text = f"one batch: {len(batch)} sentences, {batch.n_tokens} target tokens"
    _box(ax, 3.0, 6.1, 5.0, 0.7, text + "\n(every rank builds it, same seed, same epoch)", "#e8eef7")
    first = 0
    for rank, x in enumerate((0.6, 6.4)):
        shard = shard_batch(batch, rank, 2, pad_id)
        last = first + len(shard) - 1
        rows = f"sentence {first}" if last == first else f"sentences {first}-{last}"
        first = last + 1
        _arrow(ax, (5.5, 6.1), (x + 2.0, 5.35))
        _box(ax, x, 4.55, 4.0, 0.75, f"rank {rank}: its shard, {rows}\n{shard.n_tokens} target tokens", "#fdf0d5")
        _arrow(ax, (x + 2.0, 4.55), (x + 2.0, 3.85))
        text = f"model copy {rank}: forward, loss, backward\ngradient $g_{rank}$ of its own shard"
        _box(ax, x, 3.05, 4.0, 0.75, text, "#e3f1e3")
        _arrow(ax, (x + 2.0, 3.05), (5.5 + (x - 3.5) * 0.25, 2.3))
        _arrow(ax, (5.5 + (x - 3.5) * 0.25, 1.55), (x + 2.0, 0.85))
        text = f"rank {rank}: optimizer step with $(g_0 + g_1) / 2$\nweights stay equal to rank {1 - rank}'s"
        _box(ax, x, 0.1, 4.0, 0.7, text, "#e3f1e3")
    _box(ax, 3.6, 1.55, 3.8, 0.75, "all-reduce: every rank gets\nthe mean gradient $(g_0 + g_1) / 2$", "#f6dede")
    ax.set_xlim(0, 11)
    ax.set_ylim(-0.1, 7.0)
    ax.axis("off")
    ax.set_title("One step of DistributedDataParallel on 2 ranks", fontsize=12)
    return ax


__all__ = ["plot_ddp_overlap", "plot_ddp_step"]
