"""Which heads matter, drawn: the importance heatmap and the pruning curve show the numbers they are given; the
switchboard translates again with the heads switched off, as heads_off does, and leaves the model as it was."""

from __future__ import annotations

import matplotlib

matplotlib.use("agg")

import html  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from transformer_lessons import PRESETS, Transformer, viz  # noqa: E402
from transformer_lessons.attention import MultiHeadAttention  # noqa: E402
from transformer_lessons.heads import KINDS, HeadImportance, PruningCurve, all_heads, heads_off  # noqa: E402
from transformer_lessons.translation import translate  # noqa: E402
from transformer_lessons.viz.heads import importance_matrix, marked_changes  # noqa: E402

from test_viz import _displayed, _ipywidgets_own_bundle, _static_copy_shown_and_hidden, _word_vocab  # noqa: E402

ROWS = [(kind, layer) for kind in KINDS for layer in range(2)]  # 2 layers of each kind, 4 heads each
SENTENCE = "Ein Mann fährt Fahrrad."


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _importance() -> HeadImportance:
    bleu = {(kind, layer, head): 30.0 - (3 * r + head) % 7 for r, (kind, layer) in enumerate(ROWS) for head in range(4)}
    bleu[("cross", 1, 3)] = 31.5  # BLEU rose with this head off: a negative drop
    return HeadImportance(baseline=30.0, bleu=bleu, n_sentences=100, beam_size=1, seconds=12.0)


def test_plot_head_importance_puts_each_drop_in_its_row_and_column():
    importance = _importance()
    ax = viz.plot_head_importance(importance)
    shown = np.asarray(ax.collections[0].get_array()).reshape(len(ROWS), 4)
    expected = np.array([[importance.drop[(kind, layer, h)] for h in range(4)] for kind, layer in ROWS])
    np.testing.assert_allclose(shown, expected)
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "encoder self · layer 0",
        "encoder self · layer 1",
        "decoder self · layer 0",
        "decoder self · layer 1",
        "cross · layer 0",
        "cross · layer 1",
    ]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2", "3"]
    assert sorted(t.get_text() for t in ax.texts) == sorted(f"{d:.1f}" for d in expected.ravel())  # each number
    limit = np.abs(expected).max()
    assert ax.collections[0].get_clim() == pytest.approx((-limit, limit))  # 0 in the middle of the scale
    assert "30.0 BLEU" in ax.get_title() and "100 sentences" in ax.get_title() and "greedy" in ax.get_title()


def test_the_importance_matrix_leaves_heads_not_measured_empty():
    importance = HeadImportance(20.0, {("cross", 1, 2): 18.0, ("encoder", 0, 0): 20.5}, 10, 4, 1.0)
    rows, matrix = importance_matrix(importance)
    assert rows == [("encoder", 0), ("cross", 1)] and matrix.shape == (2, 3)
    assert matrix[0, 0] == pytest.approx(-0.5) and matrix[1, 2] == pytest.approx(2.0)
    assert int(np.isnan(matrix).sum()) == 4
    assert "beam 4" in viz.plot_head_importance(importance).get_title()
    with pytest.raises(ValueError, match="holds no head"):
        importance_matrix(HeadImportance(20.0, {}, 10, 1, 0.0))


def test_plot_pruning_curve_draws_bleu_against_the_heads_off():
    order = [(kind, layer, h) for kind, layer in ROWS for h in range(4)]
    curve = PruningCurve(order, [0, 8, 16, 24], [30.0, 29.0, 20.0, 1.0], n_sentences=100, beam_size=1, seconds=5.0)
    ax = viz.plot_pruning_curve(curve)
    x, y = ax.lines[0].get_data()
    assert list(x) == [0, 8, 16, 24] and list(y) == [30.0, 29.0, 20.0, 1.0]
    assert list(ax.lines[1].get_ydata()) == [30.0, 30.0]  # every head on, as a dotted line
    assert "of 24" in ax.get_xlabel() and ax.get_ylabel() == "BLEU" and ax.get_xlim() == (0, 24)
    assert any(child.get_xlabel() == "% of heads off" for child in ax.child_axes)


def test_marked_changes_marks_the_words_that_changed():
    marked = marked_changes("a man rides a bike .", "a woman rides a bike <b> .")
    assert marked.startswith("a <span") and marked.count("<span") == 2
    assert ">woman</span>" in marked and ">&lt;b&gt;</span>" in marked and "rides a bike" in marked


@pytest.fixture(scope="module")
def parts():
    torch.manual_seed(0)
    src_vocab = _word_vocab(["Ein", "Mann", "fährt", "Fahrrad", ".", "Zwei", "Hunde", "spielen"])
    tgt_vocab = _word_vocab(["A", "man", "rides", "a", "bike", ".", "Two", "dogs", "play"])
    model = Transformer(PRESETS["tiny"].replace(max_len=32), len(src_vocab), len(tgt_vocab)).eval()
    return model, src_vocab, tgt_vocab


def _no_mask_left(model) -> bool:
    return all(m.head_mask is None for m in model.modules() if isinstance(m, MultiHeadAttention))


def test_the_switchboard_translates_again_with_the_heads_switched_off(parts):
    model, src_vocab, tgt_vocab = parts
    vocab = dict(src_vocab=src_vocab, tgt_vocab=tgt_vocab)
    board = viz.head_switchboard(model, src_vocab, tgt_vocab, sentence=SENTENCE)
    full = translate(model, SENTENCE, **vocab)
    assert list(board.toggles) == all_heads(model) and len(board.toggles) == 24 and board.switched_off() == []
    assert board.translation == board.full_translation == full and "the same translation" in board.result.value
    off = [("cross", 1, h) for h in range(4)] + [("encoder", 0, 2)]
    for head in off:
        board.toggles[head].value = False  # what a click does
    with heads_off(model, off):
        expected = translate(model, SENTENCE, **vocab)
    assert board.translation == expected and board.full_translation == full
    assert board.switched_off() == sorted(off, key=all_heads(model).index)
    assert board.toggles[off[0]].button_style == "danger" and board.toggles[("cross", 0, 0)].button_style == ""
    assert "5 of 24 heads off" in board.result.value and html.escape(full) in board.result.value
    assert _no_mask_left(model)  # the heads are off only while it translates
    board.controls["text"].value = "Zwei Hunde spielen."  # a new sentence, the same heads off
    with heads_off(model, off):
        assert board.translation == translate(model, "Zwei Hunde spielen.", **vocab)
    assert board.full_translation == translate(model, "Zwei Hunde spielen.", **vocab)
    board.all_on.click()
    assert board.switched_off() == [] and board.translation == board.full_translation
    assert "0 of 24 heads off" in board.describe() and "Zwei Hunde spielen." in board.describe()


def test_switch_off_sets_every_toggle_and_translates_once(parts, monkeypatch):
    model, src_vocab, tgt_vocab = parts
    board = viz.head_switchboard(model, src_vocab, tgt_vocab, sentence=SENTENCE)
    calls = []
    real = board._translate_one
    monkeypatch.setattr(board, "_translate_one", lambda sentence: calls.append(sentence) or real(sentence))
    every_cross = [("cross", layer, h) for layer in range(2) for h in range(4)]
    board.switch_off(every_cross)
    assert board.switched_off() == every_cross and calls == [SENTENCE]  # the full translation is kept
    with heads_off(model, every_cross):
        assert board.translation == translate(model, SENTENCE, src_vocab=src_vocab, tgt_vocab=tgt_vocab)
    with pytest.raises(ValueError, match="no head"):
        board.switch_off([("cross", 2, 0)])


def test_the_switchboard_answers_awkward_input_in_the_widget(parts):
    model, src_vocab, tgt_vocab = parts
    board = viz.head_switchboard(model, src_vocab, tgt_vocab, sentence="  ")
    assert board.translation == "" and "Type a German sentence" in board.result.value
    board.model = "not a model"  # anything that fails while translating is shown, never raised
    board.controls["text"].value = "Ein Mann ."
    assert "could not translate" in board.result.value and board.translation == ""
    with pytest.raises(TypeError):
        viz.head_switchboard(model, src_vocab, tgt_vocab, sentence=42)
    with pytest.raises(ValueError, match="beam_size"):
        viz.head_switchboard(model, src_vocab, tgt_vocab, beam_size=0)


def test_the_switchboard_says_what_each_head_cost_when_it_knows(parts):
    model, src_vocab, tgt_vocab = parts
    importance = HeadImportance(10.0, {("cross", 0, 1): 8.5}, 5, 1, 1.0)
    board = viz.head_switchboard(model, src_vocab, tgt_vocab, sentence="", importance=importance)
    assert "cost 1.5 BLEU" in board.toggles[("cross", 0, 1)].tooltip
    assert "cost" not in board.toggles[("cross", 0, 0)].tooltip


def test_the_switchboard_displays_as_the_other_widgets_do(parts, monkeypatch):
    model, src_vocab, tgt_vocab = parts
    board = viz.head_switchboard(model, src_vocab, tgt_vocab, sentence=SENTENCE)
    board.switch_off([("encoder", 1, 0), ("cross", 0, 3)])
    own = _static_copy_shown_and_hidden(board, board._static_png(), monkeypatch)
    assert own == {**_ipywidgets_own_bundle(board, monkeypatch), "text/plain": board.describe()}
    assert "2 of 24 heads off" in own["text/plain"]
    empty = viz.head_switchboard(model, src_vocab, tgt_vocab, sentence="")
    assert len(_displayed(empty, monkeypatch)) == 1  # nothing translated, no picture to copy


def test_the_heatmap_frames_exactly_the_heads_that_beat_the_noise():
    importance = _importance()
    p_values = {head: 0.5 for head in importance.bleu}
    p_values[("encoder", 1, 2)] = 0.01
    p_values[("cross", 0, 0)] = 0.049
    ax = viz.plot_head_importance(importance, p_values=p_values)
    frames = sorted((int(p.get_x()), int(p.get_y())) for p in ax.patches if not p.get_fill())
    assert frames == sorted([(2, ROWS.index(("encoder", 1))), (0, ROWS.index(("cross", 0)))])
    assert "p < 0.05" in ax.get_xlabel() and "24 tests" in ax.get_xlabel()


def test_the_pruning_curve_draws_the_random_orders_beside_it():
    order = [(kind, layer, head) for kind, layer in ROWS for head in range(4)]
    curve = PruningCurve(order, [0, 8, 24], [30.0, 28.0, 3.0], 100, 1, 1.0)
    shuffled = [PruningCurve(order[::-1], [0, 8, 24], [30.0, 20.0 - i, 1.0], 100, 1, 1.0) for i in range(3)]
    ax = viz.plot_pruning_curve(curve, random_orders=shuffled, title="held out")
    lines = [line for line in ax.get_lines() if len(line.get_xdata()) == 3]
    assert len(lines) == 4 and [list(line.get_ydata()) for line in lines[:3]] == [c.bleu for c in shuffled]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "random orders (3)" in labels and ax.get_title() == "held out"


def test_the_signal_against_quality_draws_every_translation_of_the_record():
    from transformer_lessons import records

    record = records.confidence_record()
    fig = viz.plot_signal_vs_quality(record)
    left, right = fig.axes
    assert sum(len(c.get_offsets()) for c in left.collections) == len(record["signals"]["test"])
    assert f"Spearman {record['quality']['test_2016_flickr']['spearman_signal_chrf']:.2f}" in left.get_title()
    assert f"AUROC {record['quality']['auroc_flickr_vs_mscoco']:.2f}" in right.get_title()
    assert any(line.get_xdata()[0] == pytest.approx(record["threshold"]) for line in left.get_lines())


def test_a_drop_that_rounds_to_zero_is_written_0_0_not_minus_0_0():
    importance = HeadImportance(30.0, {("cross", 0, 0): 30.04, ("cross", 0, 1): 29.0}, 100, 1, 1.0)
    texts = sorted(t.get_text() for t in viz.plot_head_importance(importance).texts)
    assert texts == ["0.0", "1.0"]
