"""Notebook 13's schematic of DDP: backward from the last layer, each bucket's all-reduce once the bucket is ready."""

from __future__ import annotations

import matplotlib

matplotlib.use("agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from transformer_lessons import viz  # noqa: E402


def _bars(ax, y: float) -> list[tuple[float, float]]:
    """(start, end) of the bars of the row at height ``y``, left to right."""
    bars = [p for p in ax.patches if isinstance(p, Rectangle) and abs(p.get_y() + p.get_height() / 2 - y) < 1e-9]
    return sorted((p.get_x(), p.get_x() + p.get_width()) for p in bars)


def test_plot_ddp_overlap_draws_and_labels_the_three_rows():
    ax = viz.plot_ddp_overlap((1, 25, 25, 25, 24), send_time=0.5)
    texts = [t.get_text() for t in ax.texts]
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "all-reduce after backward",
        "DDP: all-reduce during backward",
        "backward (compute)",
    ]
    for k in range(1, 5):
        assert texts.count(f"bucket {k}") == 3  # its backward, its all-reduce during backward, and after it
    assert texts.count("0") == 3  # the 1 MiB bucket is too narrow for its name: its number below each bar
    assert texts.count(" step") == 2
    assert "backward: from the last layer to the first" in texts
    assert "schematic" in ax.get_xlabel()
    assert "5 buckets" in ax.get_title() and "100 MiB" in ax.get_title()
    plt.close(ax.figure)


def test_each_all_reduce_starts_when_its_bucket_is_ready_and_one_at_a_time():
    sizes, send = (1, 25, 25, 25, 24), 0.5
    ax = viz.plot_ddp_overlap(sizes, send_time=send)
    backward, during, after = _bars(ax, 2.0), _bars(ax, 1.0), _bars(ax, 0.0)
    assert len(backward) == len(during) == len(after) == len(sizes)
    previous_end = 0.0
    for (_, ready), (start, end), size in zip(backward, during, sizes):
        assert start == pytest.approx(
            max(ready, previous_end)
        )  # not before its bucket is full, nor its predecessor sent
        assert end - start == pytest.approx(size * send)
        previous_end = end
    assert after[0][0] == pytest.approx(sum(sizes))  # without overlap: after the whole backward
    assert during[-1][1] < after[-1][1]  # the overlap ends the step earlier
    plt.close(ax.figure)


def test_one_bucket_overlaps_nothing():
    ax = viz.plot_ddp_overlap((22.8,))
    assert [pytest.approx(b) for b in _bars(ax, 1.0)] == _bars(ax, 0.0)
    plt.close(ax.figure)


@pytest.mark.parametrize("sizes", [(), (1, 0), (-1,)])
def test_plot_ddp_overlap_refuses_empty_or_non_positive_buckets(sizes):
    with pytest.raises(ValueError, match="positive"):
        viz.plot_ddp_overlap(sizes)


def test_plot_ddp_step_counts_the_shards_of_the_batch_it_is_given():
    from transformer_lessons import ddp_demo
    from transformer_lessons.distributed import shard_batch
    from transformer_lessons.specials import PAD_ID
    from transformer_lessons.viz.ddp import plot_ddp_step

    batch = ddp_demo.global_batch()
    ax = plot_ddp_step(batch, PAD_ID)
    texts = "\n".join(t.get_text() for t in ax.texts)
    shards = [shard_batch(batch, rank, 2, PAD_ID) for rank in range(2)]
    assert f"one batch: {len(batch)} sentences, {batch.n_tokens} target tokens" in texts
    assert f"sentences 0-{len(shards[0]) - 1}\n{shards[0].n_tokens} target tokens" in texts
    assert f"sentences {len(shards[0])}-{len(batch) - 1}\n{shards[1].n_tokens} target tokens" in texts
    assert shards[0].n_tokens + shards[1].n_tokens == batch.n_tokens
    assert texts.count("optimizer step with $(g_0 + g_1) / 2$") == 2
    plt.close(ax.figure)


def test_plot_ddp_step_names_a_one_sentence_shard_alone():
    from transformer_lessons.data import make_batch
    from transformer_lessons.specials import BOS_ID, EOS_ID, PAD_ID
    from transformer_lessons.viz.ddp import plot_ddp_step

    batch = make_batch([([5, 6], [7, 8, 9]), ([5], [7])], PAD_ID, BOS_ID, EOS_ID)
    texts = "\n".join(t.get_text() for t in plot_ddp_step(batch, PAD_ID).texts)
    assert "rank 0: its shard, sentence 0\n4 target tokens" in texts
    assert "rank 1: its shard, sentence 1\n2 target tokens" in texts
    plt.close("all")
