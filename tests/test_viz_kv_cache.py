"""The pictures of notebook 12: the key/value cache drawn, decoding times plotted."""

from __future__ import annotations

import matplotlib

matplotlib.use("agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from transformer_lessons import viz  # noqa: E402


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_plot_kv_cache_draws_every_layer_and_labels_the_shapes():
    fig = viz.plot_kv_cache(n_layers=2, t=3, S=5, n_heads=8, d_head=32, batch=1)
    texts = _texts(fig)
    for name in ("self_k", "self_v", "cross_k", "cross_v"):
        assert texts.count(name) == 2, name  # one slab per layer
    assert any("(B, H, t, Dh) = (1, 8, 3, 32)" in t for t in texts)
    assert any("(B, H, S, Dh) = (1, 8, 5, 32)" in t for t in texts)
    assert texts.count("next") == 4  # where the next step appends, keys and values of each layer
    filled = [
        p
        for p in fig.axes[0].patches
        if isinstance(p, Rectangle) and p.zorder == 2 and p.get_facecolor() != (1.0, 1.0, 1.0, 1.0)
    ]
    assert len(filled) == 2 * (2 * 3 + 2 * 5)  # t columns in self_k, self_v; S in cross_k, cross_v; per layer
    plt.close(fig)


def test_plot_kv_cache_needs_something_to_draw():
    with pytest.raises(ValueError, match="at least 1"):
        viz.plot_kv_cache(t=0)


def test_plot_decode_times_plots_totals_and_per_token():
    fig = viz.plot_decode_times([10, 20], {"recompute": [1.0, 3.0], "cached": [0.5, 1.0]}, title="t")
    total, per_token = fig.axes
    assert [line.get_label() for line in total.lines] == ["recompute", "cached"]
    assert list(per_token.lines[0].get_ydata()) == [100.0, 150.0]  # ms per token
    plt.close(fig)
    with pytest.raises(ValueError, match="2 lengths"):
        viz.plot_decode_times([10, 20], {"cached": [1.0]})
