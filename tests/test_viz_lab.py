"""Notebook 14's lab figures drawn from the committed record: what they plot, their names, and that no words collide.

tests/test_lab.py checks the plots on a made-up record; this file checks the pictures the notebook shows.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from transformer_lessons import lab_stats, viz  # noqa: E402
from transformer_lessons.viz.lab import BASELINE_COLOR, run_named  # noqa: E402


@pytest.fixture(scope="module")
def cpu():
    return viz.lab_record()["cpu"]


def _texts(fig):
    """Every piece of text drawn on the figure (titles, labels, tick labels, notes, legends) with its box on screen."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    hidden = set()  # tick labels of ticks outside the axes' limits: matplotlib keeps them but does not draw them
    for ax in fig.axes:
        for axis, (lo, hi) in ((ax.xaxis, sorted(ax.get_xlim())), (ax.yaxis, sorted(ax.get_ylim()))):
            hidden |= {id(t.label1) for t in axis.get_major_ticks() if not lo <= t.get_loc() <= hi}
    texts = [
        t for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text().strip() and id(t) not in hidden
    ]
    return [(t.get_text(), t.get_window_extent(renderer)) for t in texts]


def test_the_lab_figures_words_stay_apart_and_inside_it(cpu):
    fig = viz.plot_lab(cpu, title="the lab on a 2-core CPU: 6 minutes of training per run")
    texts = _texts(fig)
    figure_box = fig.bbox
    for text, box in texts:
        assert figure_box.x0 <= box.x0 and box.x1 <= figure_box.x1, f"{text!r} runs off the figure"
    for i, (a, box_a) in enumerate(texts):
        for b, box_b in texts[i + 1 :]:
            assert not box_a.overlaps(box_b), f"{a!r} overlaps {b!r}"
    notes = [t for t in fig.axes[0].texts + fig.axes[1].texts]
    for note in notes:  # each note stays inside its own panel
        box, panel = note.get_window_extent(), note.axes.get_window_extent()
        assert panel.x0 <= box.x0 and box.x1 <= panel.x1, f"{note.get_text()!r} leaves its panel"
    title = fig.get_suptitle()
    assert "own noise" not in title and "spread between" in title and "95% interval" in title
    assert "Holm" in title, "the colours follow Holm's adjusted p, and the title says so"


def test_the_lab_figure_colours_only_what_holm_keeps(cpu):
    """Over the 15 tests, Holm keeps rotary's and MQA's validation loss: only those two lines are coloured."""
    import matplotlib.colors as mcolors

    fig = viz.plot_lab(cpu)
    grey = mcolors.to_rgba(BASELINE_COLOR)
    coloured = [
        (ax_i, round(line.get_ydata()[0]))
        for ax_i, ax in enumerate(fig.axes[:2])
        for line in ax.get_lines()
        if len(line.get_ydata()) == 2 and mcolors.to_rgba(line.get_color()) != grey
    ]
    names = list(lab_stats.compare_options(cpu))
    assert sorted((i, names[y]) for i, y in coloured) == [(1, "mqa"), (1, "rotary")]


def test_the_warmup_figure_plots_validation_loss_with_the_seeds_band(cpu):
    fig = viz.plot_warmup(cpu)
    table = viz.lab_table(cpu, group="warmup")
    names_in_table = {line.split()[0] for line in table.splitlines()[2:]}
    seeds = lab_stats.options(cpu)["baseline"]
    for ax in fig.axes:
        assert "validation loss" in fig.axes[0].get_ylabel()
        runs = [line.get_label().split(":")[0] for line in ax.get_lines()]
        assert len(runs) == 4 and set(runs) <= names_in_table, "the legend names the runs as the table does"
        for line in ax.get_lines():
            run = run_named(cpu, line.get_label().split(":")[0])
            assert list(line.get_ydata()) == [h["val_loss"] for h in run["history"]]
        (band,) = ax.collections[:1]
        ys = band.get_paths()[0].vertices[:, 1]
        for step in (250, 500):
            losses = [lab_stats.val_loss_at(r, step) for r in seeds]
            assert all(any(abs(y - v) < 1e-12 for y in ys) for v in (min(losses), max(losses)))
        assert ax.get_legend().get_texts()[0].get_text().startswith("baseline_s0 to s2")
    texts = _texts(fig)
    for i, (a, box_a) in enumerate(texts):
        for b, box_b in texts[i + 1 :]:
            assert not box_a.overlaps(box_b), f"{a!r} overlaps {b!r}"
