"""Mask pictures: several masks share one legend, and the causal mask stands beside the shifted-right target."""

from __future__ import annotations

import matplotlib

matplotlib.use("agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from transformer_lessons import causal_mask, padding_mask, target_mask, viz  # noqa: E402
from transformer_lessons.specials import BOS, EOS  # noqa: E402
from transformer_lessons.viz import masks as viz_masks  # noqa: E402
from transformer_lessons.viz.masks import ANSWER_COLOR  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _cells(ax) -> list[list[int]]:
    return np.asarray(ax.collections[0].get_array()).reshape(len(ax.get_yticks()), -1).astype(int).tolist()


def test_plot_masks_draws_each_mask_with_one_legend_for_all():
    tokens = torch.tensor([[4, 5, 6, 1, 1]])
    words = ["the", "cat", "sleeps", "<pad>", "<pad>"]
    shown = [padding_mask(tokens, 1)[0, 0].expand(5, 5), causal_mask(5), target_mask(tokens, 1)[0, 0]]
    fig = viz.plot_masks(shown, ["padding", "causal", "both"], words, words)
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == ["padding", "causal", "both"]
    assert [_cells(ax) for ax in axes] == [m.int().tolist() for m in shown]
    assert all(ax.get_legend() is None for ax in axes)  # no legend per panel ...
    [legend] = fig.legends  # ... one for the figure
    assert [t.get_text() for t in legend.get_texts()] == ["True: may attend", "False: blocked"]
    assert [t.get_text() for t in axes[0].get_yticklabels()] == words
    assert not any(t.get_text() for t in axes[1].get_yticklabels())  # the queries are labelled once


@pytest.mark.parametrize("size", [3, 5, 8])
def test_plot_masks_puts_the_legend_just_above_the_titles(size):
    # Square cells leave spare height; it must not open a band between the legend and the panels.
    fig = viz.plot_masks([causal_mask(size)] * 3, ["a", "b", "c"], [f"w{i}" for i in range(size)])
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    [legend] = fig.legends
    legend_bottom = legend.get_window_extent(renderer).y0
    titles_top = max(ax.title.get_window_extent(renderer).y1 for ax in fig.axes)
    assert 0 <= legend_bottom - titles_top < 0.3 * fig.dpi  # under 0.3 inch, no overlap


def test_mark_blocked_greys_the_blocked_cells_and_keeps_their_numbers_readable():
    mask = causal_mask(4)
    weights = torch.rand(4, 4).masked_fill(~mask, 0.0)
    weights = weights / weights.sum(-1, keepdim=True)
    ax = viz.plot_attention(weights, annot=True)
    before = len(ax.patches)
    viz_masks.mark_blocked(ax, mask)
    added = ax.patches[before:]
    assert sorted((round(p.get_y()), round(p.get_x())) for p in added) == [tuple(c) for c in (~mask).nonzero().tolist()]
    assert all(p.get_hatch() for p in added)
    for text in ax.texts:  # the numbers in blocked cells are drawn dark, on top of the grey
        x, y = text.get_position()
        blocked = not mask[int(y), int(x)]
        assert matplotlib.colors.same_color(text.get_color(), "#333333") == blocked


def test_plot_masks_refuses_masks_of_different_shapes_or_a_missing_title():
    with pytest.raises(ValueError, match="one shape"):
        viz.plot_masks([causal_mask(3), causal_mask(4)], ["a", "b"])
    with pytest.raises(ValueError, match="titles"):
        viz.plot_masks([causal_mask(3)], [])


def test_plot_mask_keeps_its_legend_by_default_and_drops_it_on_request():
    assert viz.plot_mask(causal_mask(3)).get_legend() is not None
    assert viz.plot_mask(causal_mask(3), legend=False).get_legend() is None


def test_plot_shifted_target_puts_each_row_beside_the_word_it_must_write():
    fig = viz.plot_shifted_target(["a", "dog", "runs"])
    [ax] = fig.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == [BOS, "a", "dog", "runs"]  # the decoder reads
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"0: {BOS}", "1: a", "2: dog", "3: runs"]
    assert _cells(ax) == causal_mask(4).int().tolist()
    written = [t.get_text() for t in ax.texts if t.get_text().startswith("→")]
    assert written == ["→ a", "→ dog", "→ runs", f"→ {EOS}"]
    # The outlined cells are (row t, key t + 1): the word row t must write, blocked by the mask.
    outlined = [p for p in ax.patches if matplotlib.colors.same_color(p.get_edgecolor(), ANSWER_COLOR)]
    corners = sorted((round(p.get_y()), round(p.get_x())) for p in outlined)
    assert corners == [(0, 1), (1, 2), (2, 3)]
    assert all(not causal_mask(4)[row, key] for row, key in corners)


def test_plot_shifted_target_needs_words():
    with pytest.raises(ValueError, match="empty"):
        viz.plot_shifted_target([])
