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


def test_plot_kv_cache_footer_says_what_the_grey_slabs_stand_for():
    fig = viz.plot_kv_cache(n_layers=1, t=2, S=3, n_heads=8, d_head=32, batch=1)
    [footer] = [t for t in _texts(fig) if t.startswith("each slab")]
    assert "B = 1, H = 8" in footer and "the 7 other heads" in footer and "sentence" not in footer.split(";")[1]
    plt.close(fig)
    fig = viz.plot_kv_cache(n_layers=1, t=2, S=3, n_heads=4, d_head=32, batch=2)
    [footer] = [t for t in _texts(fig) if t.startswith("each slab")]
    assert "the 3 other heads and 1 other sentence" in footer
    plt.close(fig)
    fig = viz.plot_kv_cache(n_layers=1, t=2, S=3, n_heads=1, d_head=32, batch=1)  # nothing behind: no grey slabs
    assert "grey" not in " ".join(_texts(fig))
    assert not [p for p in fig.axes[0].patches if p.zorder < 1]
    plt.close(fig)


def test_plot_kv_cache_names_rotated_keys_for_a_rotary_model():
    plain = _texts(viz.plot_kv_cache(n_layers=1, t=2, S=3))
    rotary = _texts(viz.plot_kv_cache(n_layers=1, t=2, S=3, rotary=True))
    assert "self_k" in plain and "self_k (rotated)" in rotary and "self_k" not in rotary
    assert any("keys stored rotated" in t for t in rotary) and not any("rotated" in t for t in plain)
    plt.close("all")


def test_plot_kv_cache_footer_is_readable_at_the_notebooks_width():
    # At least 12 px when the figure is shown 940 px wide (tests/test_figure_text.py's rule), dark enough on white.
    fig = viz.plot_kv_cache(n_layers=3, t=4, S=6, n_heads=8, d_head=32, batch=1, rotary=True)
    [footer] = [t for ax in fig.axes for t in ax.texts if t.get_text().startswith("each slab")]
    width_pt = fig.get_figwidth() * 72
    assert footer.get_fontsize() * min(940, fig.get_figwidth() * fig.dpi) / width_pt >= 12
    r, g, b, _ = matplotlib.colors.to_rgba(footer.get_color())
    lum = sum(
        w * (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4)
        for w, c in zip((0.2126, 0.7152, 0.0722), (r, g, b))
    )
    assert 1.05 / (lum + 0.05) >= 4.5
    plt.close(fig)
