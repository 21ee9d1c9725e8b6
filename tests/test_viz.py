"""Plots and widgets: they show the data they are given, and the controls change it.

No browser here: the widgets expose what they draw (``current_matrix()``,
``.figure``), and changing a control's ``value`` runs the same observer a click
in JupyterLab runs. tests/browser/ checks rendering in a real browser.
"""

from __future__ import annotations

import math
import matplotlib

matplotlib.use("Agg")

import base64
import io
import re
import subprocess
import sys
import warnings
from pathlib import Path

import ipywidgets
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from PIL import Image

from transformer_lessons import PRESETS, Transformer, padding_mask, target_mask, viz
from transformer_lessons.layers import sinusoidal_positional_encoding
from transformer_lessons.notes import CourseWarning
from transformer_lessons.viz import html_style

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _random_attention(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g).softmax(dim=-1)


def _ticks(ax, axis):
    labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return [t.get_text() for t in labels]


# --- static plots ----------------------------------------------------------------------


def test_plot_attention_labels_both_axes_and_shows_the_weights():
    weights = _random_attention(3, 4)
    ax = viz.plot_attention(weights, x_labels=list("abcd"), y_labels=["x", "y", "z"], title="t")
    assert _ticks(ax, "x") == list("abcd")
    assert _ticks(ax, "y") == ["x", "y", "z"]
    shown = np.asarray(ax.collections[0].get_array()).reshape(3, 4)
    np.testing.assert_allclose(shown, weights.numpy(), rtol=1e-6)
    assert ax.get_title() == "t"


def test_plot_attention_rejects_labels_that_do_not_fit():
    with pytest.raises(ValueError):
        viz.plot_attention(_random_attention(3, 4), x_labels=list("abc"))


def test_plot_heads_draws_one_panel_per_head():
    fig = viz.plot_heads(_random_attention(4, 3, 5), x_labels=list("abcde"), y_labels=list("xyz"))
    heatmaps = [ax for ax in fig.axes if ax.collections]
    assert len(heatmaps) >= 4


def test_plot_mask_shows_allowed_and_blocked():
    mask = torch.ones(4, 4, dtype=torch.bool).tril()
    ax = viz.plot_mask(mask, x_labels=list("abcd"), y_labels=list("abcd"))
    shown = np.asarray(ax.collections[0].get_array()).reshape(4, 4)
    np.testing.assert_array_equal(shown.astype(bool), mask.numpy())


def test_plot_positional_encoding_shows_the_table():
    pe = sinusoidal_positional_encoding(20, 8)
    ax = viz.plot_positional_encoding(pe)
    shown = np.asarray(ax.collections[0].get_array()) if ax.collections else ax.images[0].get_array()
    np.testing.assert_allclose(np.asarray(shown).reshape(20, 8), pe.numpy(), rtol=1e-6, atol=1e-7)


def test_plot_history_plots_what_exists():
    history = [
        {"epoch": 1, "train_loss": 5.0, "val_loss": 4.5, "val_bleu": 3.0},
        {"epoch": 2, "train_loss": 4.0, "val_loss": 3.9, "val_bleu": 9.0},
    ]
    fig = viz.plot_history(history)
    plotted = [list(line.get_ydata()) for ax in fig.axes for line in ax.get_lines()]
    assert [5.0, 4.0] in plotted and [4.5, 3.9] in plotted and [3.0, 9.0] in plotted
    only_loss = viz.plot_history([{"epoch": 1, "train_loss": 2.0}])
    assert any(list(line.get_ydata()) == [2.0] for ax in only_loss.axes for line in ax.get_lines())


def test_plot_learning_rate_takes_a_function_or_values():
    rate = lambda step: min(step**-0.5, step * 10**-1.5)  # noqa: E731 - Noam shape, warmup 10
    ax = viz.plot_learning_rate(rate, steps=range(1, 51))
    ys = ax.get_lines()[0].get_ydata()
    assert int(np.argmax(ys)) + 1 == 10  # the peak sits at the warm-up step
    ax2 = viz.plot_learning_rate([0.1, 0.2, 0.3])
    np.testing.assert_allclose(ax2.get_lines()[0].get_ydata(), [0.1, 0.2, 0.3])


def test_plot_label_smoothing_draws_the_distribution():
    dist = torch.tensor([0.0, 0.9, 0.05, 0.05])
    fig = viz.plot_label_smoothing(dist, labels=["<pad>", "dog", "cat", "a"])
    heights = [p.get_height() for ax in fig.axes for p in ax.patches]
    np.testing.assert_allclose(sorted(heights)[-4:], sorted(dist.tolist()), atol=1e-7)


# --- widgets -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_attention():
    torch.manual_seed(0)
    model = Transformer(PRESETS["tiny"], 20, 20).eval()
    src = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 1, 1]])  # second sentence padded with pad id 1
    tgt = torch.tensor([[2, 13, 14, 15], [2, 16, 1, 1]])
    model(src, tgt, padding_mask(src, 1), target_mask(tgt, 1))
    src_tokens = [["ein", "Hund", "rennt", "schnell", "."], ["zwei", "Katzen", "."]]
    tgt_tokens = [["<bos>", "a", "dog", "runs"], ["<bos>", "two"]]
    return model.attention_weights(), src_tokens, tgt_tokens


def test_attention_explorer_controls_select_the_right_slice(model_attention):
    attention, src_tokens, tgt_tokens = model_attention
    explorer = viz.attention_explorer(attention, src_tokens, tgt_tokens)
    c = explorer.controls
    assert set(c) == {"kind", "layer", "head", "sentence"}
    c["kind"].value = "cross"
    c["layer"].value = 1
    c["head"].value = 2
    expected = attention["cross"][1][0, 2, :4, :5].numpy()
    np.testing.assert_allclose(explorer.current_matrix(), expected)
    assert explorer.current_tokens() == (tgt_tokens[0], src_tokens[0])


def test_attention_explorer_trims_padding_and_averages_heads(model_attention):
    attention, src_tokens, tgt_tokens = model_attention
    explorer = viz.attention_explorer(attention, src_tokens, tgt_tokens)
    explorer.controls["kind"].value = "encoder"
    explorer.controls["sentence"].value = 1
    shown = explorer.current_matrix()
    assert shown.shape == (3, 3)  # three real source tokens, padding trimmed
    np.testing.assert_allclose(shown, attention["encoder"][0][1, :, :3, :3].mean(dim=0).numpy(), rtol=1e-6)


def test_attention_explorer_redraws_on_change(model_attention):
    attention, src_tokens, tgt_tokens = model_attention
    explorer = viz.attention_explorer(attention, src_tokens, tgt_tokens)
    before_png, before_fig = explorer._png, explorer.figure
    explorer.controls["head"].value = 1
    assert explorer.figure is not before_fig
    assert explorer._png != before_png
    assert "data:image/png;base64," in explorer.picture.value  # the picture on screen


def test_attention_explorer_accepts_a_single_tensor():
    weights = _random_attention(1, 2, 3, 3)  # (B, H, T, S)
    explorer = viz.attention_explorer(weights, ["a", "b", "c"])
    assert "kind" not in explorer.controls and "sentence" not in explorer.controls
    explorer.controls["head"].value = 1
    np.testing.assert_allclose(explorer.current_matrix(), weights[0, 1].numpy())


def test_attention_explorer_text_display_is_stable(model_attention):
    attention, src_tokens, tgt_tokens = model_attention
    a = viz.attention_explorer(attention, src_tokens, tgt_tokens)._repr_mimebundle_()["text/plain"]
    b = viz.attention_explorer(attention, src_tokens, tgt_tokens)._repr_mimebundle_()["text/plain"]
    assert a == b and "layer 0" in a


def test_attention_explorer_opens_on_the_view_asked_for(model_attention):
    attention, src_tokens, tgt_tokens = model_attention
    explorer = viz.attention_explorer(attention, src_tokens, tgt_tokens, kind="cross", layer=-1, head=1)
    c = explorer.controls
    assert (c["kind"].value, c["layer"].value, c["head"].value) == ("cross", 1, 1)
    np.testing.assert_allclose(explorer.current_matrix(), attention["cross"][1][0, 1, :4, :5].numpy())
    assert "cross-attention" in explorer.describe() and "layer 1" in explorer.describe()
    for bad in ({"kind": "crossed"}, {"kind": "cross", "layer": 2}, {"kind": "cross", "layer": -3}, {"head": 4}):
        with pytest.raises(ValueError):
            viz.attention_explorer(attention, src_tokens, tgt_tokens, **bad)


def test_attention_explorer_labels_rows_by_what_a_step_writes(model_attention):
    attention, src_tokens, _ = model_attention
    writes = [["a", "dog", "runs", "<eos>"], ["two", "<eos>"]]
    reads = [["<bos>", "a", "dog", "runs"], ["<bos>", "two"]]
    explorer = viz.attention_explorer(attention, src_tokens, writes, tgt_inputs=reads, kind="decoder_self")
    assert explorer.current_tokens() == (writes[0], reads[0])  # rows: the word written; columns: what is read
    ax = explorer.figure.axes[0]
    assert "writes" in ax.get_ylabel() and "reads" in ax.get_xlabel()
    explorer.controls["kind"].value = "cross"
    assert explorer.current_tokens() == (writes[0], src_tokens[0])
    assert "writes" in explorer.figure.axes[0].get_ylabel()


def _word_vocab(words):
    from transformer_lessons.data import SPECIALS, Vocab

    return Vocab([*SPECIALS, *words])


@pytest.fixture(scope="module")
def random_translator_parts():
    torch.manual_seed(0)
    src_vocab = _word_vocab(["Ein", "Mann", "fährt", "Fahrrad", ".", "Zwei", "Hunde", "spielen"])
    tgt_vocab = _word_vocab(["A", "man", "rides", "a", "bike", ".", "Two", "dogs", "play"])
    config = PRESETS["tiny"].replace(max_len=32)
    model = Transformer(config, len(src_vocab), len(tgt_vocab)).eval()
    return model, src_vocab, tgt_vocab


def test_translator_translates_the_text_box_and_follows_it(random_translator_parts):
    from transformer_lessons.translation import translate

    model, src_vocab, tgt_vocab = random_translator_parts
    t = viz.translator(model, src_vocab, tgt_vocab, sentence="Ein Mann fährt Fahrrad.", beam_size=1)
    expected = translate(model, "Ein Mann fährt Fahrrad.", src_vocab=src_vocab, tgt_vocab=tgt_vocab)
    assert t.translation == expected and t.beam_size == 1 and t.controls["beam"].disabled
    assert t.stepper is not None and t.stepper.src_tokens == ["Ein", "Mann", "fährt", "Fahrrad", ".", "<eos>"]
    first_png = t.stepper._png
    t.controls["text"].value = "Zwei Hunde spielen."  # what typing and Enter do in the browser
    assert t.translation == translate(model, "Zwei Hunde spielen.", src_vocab=src_vocab, tgt_vocab=tgt_vocab)
    assert t.stepper.src_tokens == ["Zwei", "Hunde", "spielen", ".", "<eos>"] and t.stepper._png != first_png
    assert t.stepper.layer == model.config.n_layers - 1  # the word-by-word view opens on the last layer
    assert "Zwei Hunde spielen." in t.describe()
    assert "English" in t.result.value


def test_translator_switches_to_beam_search_and_keeps_the_chosen_head(random_translator_parts):
    from transformer_lessons.translation import translate

    model, src_vocab, tgt_vocab = random_translator_parts
    t = viz.translator(model, src_vocab, tgt_vocab, sentence="Zwei Hunde spielen.", beam_size=1)
    t.stepper.controls["head"].value = 2
    t.controls["decoding"].value = "beam"
    t.controls["beam"].value = 3
    assert t.beam_size == 3 and not t.controls["beam"].disabled
    assert t.translation == translate(
        model, "Zwei Hunde spielen.", beam_size=3, src_vocab=src_vocab, tgt_vocab=tgt_vocab
    )
    assert t.stepper.head == 2  # a new sentence or decoding keeps the learner's view
    assert "beam 3" in t.result.value


def test_translator_answers_awkward_input_in_the_widget(random_translator_parts):
    model, src_vocab, tgt_vocab = random_translator_parts
    t = viz.translator(model, src_vocab, tgt_vocab, sentence="   ")
    assert t.translation == "" and t.stepper is None and "Type a German sentence" in t.result.value
    t.controls["text"].value = "Ein Xylophon ."
    assert "never seen" in t.result.value and "Xylophon" in t.result.value
    t.controls["text"].value = " ".join(["Ein Mann ."] * 20)  # 60 tokens, more than max_len 32
    assert "only their first" in t.result.value and t.translation is not None
    t.model = "not a model"  # anything that fails inside translate is shown, never raised
    t.controls["text"].value = "Ein Mann ."
    assert "could not translate" in t.result.value and t.stepper is None
    with pytest.raises(ValueError, match="beam_size"):
        viz.translator(model, src_vocab, tgt_vocab, beam_size=0)
    with pytest.raises(TypeError):
        viz.translator(model, src_vocab, tgt_vocab, sentence=42)


def _displayed(widget, monkeypatch) -> list[dict]:
    """The outputs ``widget`` leaves when a notebook displays it (what IPython's ``display`` receives)."""
    shown = []
    monkeypatch.setattr(viz.widgets, "display", lambda bundle, raw=False: shown.append(bundle))
    widget._ipython_display_()
    return shown


def _ipywidgets_own_bundle(widget, monkeypatch) -> dict:
    """What ipywidgets itself displays for ``widget``: 8.x's ``Widget._repr_mimebundle_``, 7.x's ``_ipython_display_``."""
    if hasattr(ipywidgets.Widget, "_repr_mimebundle_"):
        return ipywidgets.Widget._repr_mimebundle_(widget)
    shown = []
    monkeypatch.setattr(
        sys.modules["ipywidgets.widgets.widget"], "display", lambda bundle, raw=False: shown.append(bundle)
    )
    monkeypatch.setattr(widget, "_handle_displayed", lambda **kwargs: None)
    ipywidgets.Widget._ipython_display_(widget)
    return shown[0]


def _pixels(png_base64: str) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(png_base64))).convert("RGBA"))


def _static_copy_shown_and_hidden(widget, live_png: bytes, monkeypatch) -> dict:
    """Display ``widget``; check its two outputs and the CSS that hides the copy. Returns the widget's own output."""
    own, copy = _displayed(widget, monkeypatch)
    assert sorted(own) == ["application/vnd.jupyter.widget-view+json", "text/plain"]  # the live widget, a stable text
    assert sorted(copy) == ["image/png"]  # nbval compares no image: the copy changes no saved comparison
    live = base64.b64encode(live_png).decode("ascii")
    assert copy["image/png"] != live and viz.widgets.STATIC_COPY_NOTE.encode() in base64.b64decode(copy["image/png"])
    np.testing.assert_array_equal(_pixels(copy["image/png"]), _pixels(live))  # the same picture
    # The widget carries the rule that hides the copy where it is drawn live; the rule spares the live picture.
    style = widget._static_copies.value
    tails = re.findall(r'img\[src\$="([A-Za-z0-9+/=]+)"\]', style)
    assert tails and all(copy["image/png"].endswith(t) and not live.endswith(t) for t in tails), style
    assert widget._static_copies in widget.children and widget._static_copies.layout.display == "none"
    return own


@pytest.mark.parametrize("make", ["attention", "positional", "stepper"])
def test_figure_widgets_display_a_static_copy_only_their_live_view_hides(make, model_attention, monkeypatch):
    attention, src_tokens, tgt_tokens = model_attention
    widget = {
        "attention": lambda: viz.attention_explorer(attention, src_tokens, tgt_tokens),
        "positional": lambda: viz.positional_encoding_explorer(max_len=12, d_model=8),
        "stepper": lambda: viz.generation_stepper(
            src_tokens[0], ["a", "dog", "runs", "<eos>"], [w[0] for w in attention["cross"]]
        ),
    }[make]()
    own = _static_copy_shown_and_hidden(widget, widget._png, monkeypatch)
    assert own["text/plain"] == widget.describe()


def test_widgets_display_as_ipywidgets_7_and_8_do(model_attention, random_translator_parts, monkeypatch):
    # Colab ships ipywidgets 7.7.1, which has no Widget._repr_mimebundle_ (8.0 added it): there a widget that asked
    # super() for its bundle printed an AttributeError and a text dump instead of itself. Whichever version is
    # installed, each widget shows what ipywidgets itself would (the live view), with its own text.
    attention, src_tokens, tgt_tokens = model_attention
    model, src_vocab, tgt_vocab = random_translator_parts
    made = {
        "attention": viz.attention_explorer(attention, src_tokens, tgt_tokens),
        "positional": viz.positional_encoding_explorer(max_len=12, d_model=8),
        "stepper": viz.generation_stepper(
            src_tokens[0], ["a", "dog", "runs", "<eos>"], [w[0] for w in attention["cross"]]
        ),
        "translator": viz.translator(model, src_vocab, tgt_vocab, sentence="Ein Mann .", beam_size=1),
    }
    for name, widget in made.items():
        ipywidgets_7 = not hasattr(ipywidgets.Widget, "_repr_mimebundle_")
        handled = []
        if ipywidgets_7:  # 7.x tells the widget it was displayed (its on_displayed callbacks)
            monkeypatch.setattr(widget, "_handle_displayed", lambda **kwargs: handled.append(kwargs))
        own = _displayed(widget, monkeypatch)[0]
        expected = {**_ipywidgets_own_bundle(widget, monkeypatch), "text/plain": widget.describe()}
        assert own == expected, name
        assert own["application/vnd.jupyter.widget-view+json"]["model_id"] == widget.model_id, name
        assert widget._repr_mimebundle_() == expected, name
        assert len(handled) == (1 if ipywidgets_7 else 0), name


def test_translator_displays_a_static_copy_of_its_word_by_word_picture(random_translator_parts, monkeypatch):
    model, src_vocab, tgt_vocab = random_translator_parts
    t = viz.translator(model, src_vocab, tgt_vocab, sentence="Ein Mann .", beam_size=1)
    own = _static_copy_shown_and_hidden(t, t._static_png(), monkeypatch)
    assert "Ein Mann ." in own["text/plain"]
    # The copy is the word chips above the word-by-word picture: a static view shows the words' colours too.
    copy = np.asarray(Image.open(io.BytesIO(t._static_png())).convert("RGB"))
    stepper = np.asarray(Image.open(io.BytesIO(t.stepper._png)).convert("RGB"))
    top = copy.shape[0] - stepper.shape[0]
    # Both parts are stored in at most 256 colours (compact_png), so "the same" is within a few levels.
    assert np.abs(copy[top:, : stepper.shape[1]].astype(int) - stepper).mean() < 2
    band = np.unique(copy[:top].reshape(-1, 3), axis=0).astype(int)
    for _, p in t.word_probs:
        colour = np.array([int(html_style.sureness(p)[0][i : i + 2], 16) for i in (1, 3, 5)])
        assert np.abs(band - colour).max(axis=1).min() <= 4, (p, html_style.sureness(p))
    empty = viz.translator(model, src_vocab, tgt_vocab, sentence="")
    assert len(_displayed(empty, monkeypatch)) == 1  # nothing translated, no picture to copy


def _foreign_warning() -> None:
    """A warning of another package, as Colab's jupyter_client 7 raises it on Python >= 3.12 while a kernel sends."""
    warnings.warn_explicit(
        "datetime.datetime.utcnow() is deprecated",
        DeprecationWarning,
        filename="jupyter_client/session.py",
        lineno=1,
        module="jupyter_client.session",
    )


def test_translator_notes_only_its_own_and_lets_other_warnings_pass(random_translator_parts, monkeypatch):
    # The translator used to record every warning of the process while it translated: it showed another package's
    # warning as a note under the translation, and swallowed it. Now it shows translate's notes alone.
    from transformer_lessons import translation

    model, src_vocab, tgt_vocab = random_translator_parts
    real = translation.decode_token_lists

    def noisy(*args, **kwargs):
        _foreign_warning()
        return real(*args, **kwargs)

    monkeypatch.setattr(translation, "decode_token_lists", noisy)
    t = viz.translator(model, src_vocab, tgt_vocab, sentence="", beam_size=1)
    with warnings.catch_warnings(record=True) as caught:  # the test's own record: what reaches the process
        warnings.simplefilter("always")
        t.controls["text"].value = " ".join(["Ein Mann ."] * 20)  # 60 tokens, more than max_len 32: a note
    assert "only their first 31 tokens" in t.result.value  # the package's note, under the translation
    assert "utcnow" not in t.result.value  # not the foreign warning ...
    assert [str(w.message) for w in caught if "utcnow" in str(w.message)] == [
        "datetime.datetime.utcnow() is deprecated"
    ]  # ... which is not swallowed
    assert not [w for w in caught if issubclass(w.category, CourseWarning)]  # and the shown note is no warning as well


def test_positional_encoding_explorer_follows_its_sliders():
    explorer = viz.positional_encoding_explorer(max_len=30, d_model=16)
    pe = sinusoidal_positional_encoding(30, 16).numpy()
    explorer.controls["position"].value = 7
    explorer.controls["dimension"].value = 5
    np.testing.assert_allclose(explorer.current_row(), pe[7], atol=1e-6)
    np.testing.assert_allclose(explorer.current_column(), pe[:, 5], atol=1e-6)


def test_generation_stepper_shows_each_step(model_attention):
    attention, src_tokens, tgt_tokens = model_attention
    cross = [w[0] for w in attention["cross"]]  # layers of (H, T, S) for sentence 0
    stepper = viz.generation_stepper(src_tokens[0], ["a", "dog", "runs", "<eos>"], cross)
    stepper.controls["step"].value = 2
    stepper.controls["layer"].value = 0
    stepper.controls["head"].value = 3
    np.testing.assert_allclose(stepper.current_weights(), attention["cross"][0][0, 3, 2, :5].numpy())
    assert stepper.current_prefix() == ["a", "dog", "runs"]
    assert "runs" in stepper.html.value


# --- the figures in images/ ---------------------------------------------------------------


FIGURES = ("encoder_decoder", "encoder_layer", "decoder_layer", "qkv", "multi_head")


@pytest.mark.parametrize("name", FIGURES)
def test_committed_figures_exist(name):
    path = ROOT / "images" / f"{name}.svg"
    assert path.exists() and path.stat().st_size > 1000, f"{path.name} missing: run images/make_figures.py"


@pytest.mark.pins  # the same bytes need the locked matplotlib (Colab's 3.10 writes other SVG bytes)
def test_figure_script_reproduces_the_committed_svgs(tmp_path):
    run = subprocess.run(
        [sys.executable, str(ROOT / "images" / "make_figures.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    for name in FIGURES:
        fresh = (tmp_path / f"{name}.svg").read_bytes()
        committed = (ROOT / "images" / f"{name}.svg").read_bytes()
        assert fresh == committed, f"images/{name}.svg is stale: run images/make_figures.py"


# --- edge cases: scales, legends, padding, errors -------------------------------------------


def test_attention_heatmaps_use_a_fixed_zero_to_one_scale():
    weights = _random_attention(1, 1, 3, 4).requires_grad_()  # leading size-1 axes; a tensor that needs detaching
    mesh = viz.plot_attention(weights).collections[0]
    assert (mesh.norm.vmin, mesh.norm.vmax) == (0.0, 1.0)
    fig = viz.plot_heads(_random_attention(3, 2, 2), title="heads")
    assert {
        (ax.collections[0].norm.vmin, ax.collections[0].norm.vmax)
        for ax in fig.axes
        if ax.get_title().startswith("head")
    } == {(0.0, 1.0)}


def test_plot_mask_legend_and_key_mask_row():
    ax = viz.plot_mask(target_mask(torch.tensor([[2, 3, 1]]), pad_id=1))  # (1, 1, T, T)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["True: may attend", "False: blocked"]
    row = viz.plot_mask(padding_mask(torch.tensor([[4, 5, 1]]), 1)[0, 0, 0])  # a key mask (S,) is one row
    assert np.asarray(row.collections[0].get_array()).ravel().tolist() == [1, 1, 0]


def test_plot_history_skips_missing_values_and_needs_something_to_plot():
    history = [
        {"epoch": 1, "train_loss": 4.0, "val_bleu": 5.0},
        {"epoch": 2, "train_loss": 3.0},
        {"epoch": 3, "train_loss": 2.5, "val_bleu": 12.0},
    ]
    bleu_ax = viz.plot_history(history).axes[1]
    assert list(bleu_ax.lines[0].get_xdata()) == [1, 3]
    assert len(viz.plot_history({"train_loss": [3.0, 2.0]}).axes) == 1  # a dict of lists works too
    with pytest.raises(ValueError):
        viz.plot_history([{"epoch": 1, "seconds": 3.0}])


def test_plot_history_picks_markers_per_curve():
    # 38 epochs, BLEU every fourth: the dense loss is a plain line, the 9 BLEU points keep their dots
    history = [
        {"epoch": e, "val_loss": 3.0 - e / 100, "val_bleu": 30.0 + e / 4 if e % 4 == 0 else None} for e in range(1, 39)
    ]
    loss_ax, bleu_ax = viz.plot_history(history).axes
    assert loss_ax.lines[0].get_marker() in ("None", None, "")
    assert bleu_ax.lines[0].get_marker() == "o" and len(bleu_ax.lines[0].get_xdata()) == 9


def test_plot_history_titles_labels_and_marks():
    # Notebook 11 names what its curves are and points at the epochs its text talks about.
    history = [{"epoch": e, "train_loss": 5.0 - e, "val_loss": 4.0 - e / 2, "val_bleu": 10.0 * e} for e in range(1, 6)]
    fig = viz.plot_history(
        history,
        titles={"BLEU": "greedy, first 500 sentences"},
        ylabels={"loss": "label-smoothed loss"},
        marks={"lowest val loss": 2, "averaged": (4, 5)},
    )
    loss_ax, bleu_ax = fig.axes[:2]
    assert loss_ax.get_ylabel() == "label-smoothed loss" and loss_ax.get_title() == "loss"
    assert bleu_ax.get_title() == "greedy, first 500 sentences" and bleu_ax.get_ylabel() == "BLEU"
    for ax in fig.axes[:2]:  # the line at epoch 2 and the span 4-5 on every panel
        assert any(list(line.get_xdata()) == [2, 2] for line in ax.get_lines())
        assert len(ax.patches) == 1
    assert [t.get_text() for t in loss_ax.get_legend().get_texts()][-2:] == ["lowest val loss", "averaged"]
    plain = viz.plot_history(history)  # without the options: as before
    assert plain.axes[0].get_ylabel() == "loss" and not plain.axes[1].patches
    with pytest.raises(ValueError, match="panel name"):
        viz.plot_history(history, titles={"bleu": "lowercase is not a panel"})


def test_plot_learning_rate_compares_schedules_and_needs_steps_for_a_function():
    def noam(warmup):
        return lambda step: min(step**-0.5, step * warmup**-1.5)

    ax = viz.plot_learning_rate({"warmup 5": noam(5), "warmup 20": noam(20)}, 40)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["warmup 5", "warmup 20"]
    assert list(ax.get_lines()[0].get_xdata()) == list(range(1, 41))
    with pytest.raises(ValueError, match="steps"):
        viz.plot_learning_rate(noam(5))


def test_plot_label_smoothing_draws_rows_as_one_annotated_heatmap():
    dist = torch.tensor([[0.9, 0.1 / 6, 0.0], [0.0, 0.0, 0.0]])
    fig = viz.plot_label_smoothing(dist, labels=["a", "b", "c"], row_labels=["target a", "target <pad>"])
    ax = fig.axes[0]  # the heatmap (the colour bar is the second Axes)
    shown = np.asarray(ax.collections[0].get_array()).reshape(2, 3)
    np.testing.assert_allclose(shown, dist.numpy(), rtol=1e-6)
    # each cell says its value as the text does: 0.9, 0.017 (not a rounded 0.02), 0
    assert [t.get_text() for t in ax.texts] == ["0.9", "0.017", "0", "0", "0", "0"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["target a", "target <pad>"]


def test_plot_history_leaves_out_a_panel_of_one_point_and_draws_the_panels_asked():
    history = [  # two epochs, BLEU measured once (eval_every=2): one dot is not a chart
        {"epoch": 1, "train_loss": 6.4, "val_loss": 5.3, "val_bleu": None, "lr": 9e-4},
        {"epoch": 2, "train_loss": 5.1, "val_loss": 4.7, "val_bleu": 0.9, "lr": 1.8e-3},
    ]
    assert [ax.get_title() for ax in viz.plot_history(history).axes] == ["loss", "learning rate"]
    only = viz.plot_history(history, panels=["loss"])
    assert [ax.get_title() for ax in only.axes] == ["loss"]
    assert [list(line.get_ydata()) for line in only.axes[0].get_lines()] == [[6.4, 5.1], [5.3, 4.7]]
    # a record may carry a value only some curves have: epoch 0, the untrained model's validation loss
    with_start = viz.plot_history([{"epoch": 0, "train_loss": None, "val_loss": 7.3}, *history], panels=["loss"])
    assert [list(line.get_xdata()) for line in with_start.axes[0].get_lines()] == [[1, 2], [0, 1, 2]]
    # with nothing longer than one point (a one-epoch run) the panels still draw their dots
    assert len(viz.plot_history(history[1:]).axes) == 3
    with pytest.raises(ValueError, match="unknown panels"):
        viz.plot_history(history, panels=["bleu"])


def test_attention_explorer_rejects_tokens_that_do_not_fit(model_attention):
    attention, src_tokens, _ = model_attention
    with pytest.raises(ValueError, match="batch of 2"):
        viz.attention_explorer(attention, src_tokens[0])  # one sentence for a batch of two
    with pytest.raises(ValueError, match="do not fit"):
        viz.attention_explorer(_random_attention(1, 3, 3), list("abcd"))


def test_attention_explorer_without_choices_has_no_controls():
    explorer = viz.attention_explorer(_random_attention(1, 1, 3, 3), list("abc"))
    assert explorer.controls == {}
    assert explorer._png.startswith(b"\x89PNG")  # still draws its heatmap


def test_generation_stepper_escapes_tokens_and_lines_bars_up_with_the_heatmap():
    cross = _random_attention(1, 2, 3, 4)  # (1, H, T, S)
    stepper = viz.generation_stepper(list("wxy"), ["a", "b", "<eos>"], cross)  # 3 of 4 source columns
    assert "layer" not in stepper.controls
    stepper.controls["step"].value = 2
    assert "&lt;eos&gt;</b></mark>" in stepper.html.value
    bars = stepper.figure.axes[0].patches
    np.testing.assert_allclose([b.get_height() for b in bars], stepper.current_weights())
    np.testing.assert_allclose([b.get_x() + b.get_width() / 2 for b in bars], [0.5, 1.5, 2.5])  # heatmap column centres
    # Each bar carries its source word above it, not only under the heatmap a screen lower (issue 28).
    ticks = stepper.figure.axes[0].xaxis.get_major_ticks()
    assert [t.label2.get_text() for t in ticks if t.label2.get_visible()] == list("wxy")
    with pytest.raises(ValueError, match="one sentence"):
        viz.generation_stepper(list("wxy"), list("abc"), _random_attention(2, 2, 3, 4))


def test_plot_heads_names_its_axes_as_asked():
    weights = _random_attention(2, 3, 4)
    fig = viz.plot_heads(
        weights, x_labels=list("abcd"), y_labels=list("xyz"), ylabel="step: the word it writes", xlabel="source"
    )
    assert fig.axes[0].get_ylabel() == "step: the word it writes" and fig.axes[0].get_xlabel() == "source"
    assert viz.plot_heads(weights).axes[0].get_ylabel() == "queries"


# --- the package: one file per picture, the old names kept -----------------------------------


def test_every_viz_name_the_notebooks_use_is_there():
    """viz is a folder of modules; the names notebooks call (``viz.x(`` or ``from ...viz import x``) stay in viz."""
    used = set()
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        text = path.read_text(encoding="utf-8")
        used.update(re.findall(r"\bviz\.([A-Za-z_]\w*)\(", text))
        for names in re.findall(r"from transformer_lessons\.viz import ([\w, ]+)", text):
            used.update(name.strip() for name in names.split(","))
    assert {"attention_explorer", "plot_attention", "translator"} <= used, sorted(used)
    missing = sorted(name for name in used | set(viz.__all__) if not hasattr(viz, name))
    assert not missing, f"transformer_lessons.viz no longer has {missing}: re-export them in viz/__init__.py"


def test_word_probabilities_join_subword_pieces_and_stop_at_eos():
    from transformer_lessons.viz.translator import word_probabilities

    words = word_probabilities(
        ["A", "Fahr@@", "rad", ".", "<eos>", "x"], [math.log(0.9), math.log(0.4), math.log(0.1), 0.0, 0.0, 0.0]
    )
    assert [w for w, _ in words] == ["A", "Fahrrad", "."]
    assert words[0][1] == pytest.approx(0.9) and words[1][1] == pytest.approx(0.2) and words[2][1] == pytest.approx(1.0)


def test_translator_colours_each_word_and_warns_on_an_unusual_sentence(random_translator_parts, monkeypatch):
    import importlib

    translator_module = importlib.import_module("transformer_lessons.viz.translator")  # viz.translator is the function
    from transformer_lessons.confidence import token_log_probs

    model, src_vocab, tgt_vocab = random_translator_parts
    monkeypatch.setattr(translator_module, "UNUSUAL_BELOW", -math.inf)  # nothing is unusual
    t = viz.translator(model, src_vocab, tgt_vocab, sentence="Ein Mann fährt Fahrrad.", beam_size=1)
    out = tgt_vocab.encode(t.details["tgt_tokens"])
    expected = token_log_probs(model, src_vocab.encode(t.details["src_tokens"]), out, tgt_vocab.bos_id)
    assert t.mean_log_prob == pytest.approx(expected.mean().item(), abs=1e-6)
    assert len(t.word_probs) == sum(tok != "<eos>" for tok in t.details["tgt_tokens"])
    assert "the probability the model gave each word" in t.result.value and "title='probability" in t.result.value
    # not colour alone: each word carries its probability in per cent, as its chip's colour says
    shown = re.findall(r"title='probability ([\d.]+) \((\w+)\)'>[^<]*<span[^>]*>(\d+)%</span>", t.result.value)
    assert len(shown) == len(t.word_probs)
    for (p, meaning, percent), (_, q) in zip(shown, t.word_probs):
        shown_percent = round(100 * q)  # the colour follows the number shown
        assert int(percent) == shown_percent
        assert meaning == ("sure" if shown_percent >= 70 else "unsure" if shown_percent >= 30 else "guessing")
    assert translator_module.UNUSUAL_WARNING not in t.result.value
    monkeypatch.setattr(translator_module, "UNUSUAL_BELOW", math.inf)  # everything is
    t.controls["text"].value = "Zwei Hunde spielen."
    assert translator_module.UNUSUAL_WARNING in t.result.value


def test_the_explorer_title_names_only_what_can_change():
    # One unnamed tensor of one layer: "attention, layer 0" would name a choice the learner does not have.
    import torch

    from transformer_lessons.viz import attention_explorer

    one = attention_explorer(torch.rand(3, 6, 6).softmax(-1), list("abcdef"), title="T", head=1)
    assert one.describe() == "T: head 1"
    two_layers = attention_explorer([torch.rand(3, 6, 6).softmax(-1)] * 2, list("abcdef"), title="T", head=1)
    assert "layer 0" in two_layers.describe()


def test_the_stepper_heatmap_has_its_colour_scale_and_the_bars_stay_over_their_columns():
    stepper = viz.generation_stepper(["Ein", "Mann", "."], ["A", "man", "."], torch.rand(1, 3, 3).softmax(-1))
    fig = stepper.figure
    assert any(ax.get_ylabel() == "attention weight" for ax in fig.axes)  # the colorbar
    fig.canvas.draw() if hasattr(fig.canvas, "draw") else None
    bar, heat = fig.axes[0].get_position(), fig.axes[1].get_position()
    assert bar.x0 == pytest.approx(heat.x0) and bar.x1 == pytest.approx(heat.x1)
