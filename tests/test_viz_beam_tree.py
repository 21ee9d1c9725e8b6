"""The beam tree drawn (viz/beam_tree.py): every candidate in its style, and a widget that searches again on change.

As in test_viz.py, no browser: the picture's artists are read back from the figure, and setting a
control's ``value`` runs the observer a click or Enter runs in JupyterLab.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import re  # noqa: E402

import ipywidgets  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402

from test_beam_tree import A, B, BOS, EOS, TABLE_WORDS, TableModel  # noqa: E402
from test_viz import _displayed, _ipywidgets_own_bundle, _static_copy_shown_and_hidden  # noqa: E402
from transformer_lessons import viz  # noqa: E402
from transformer_lessons.beam_tree import DROPPED, FINISHED, KEPT, beam_tree  # noqa: E402
from transformer_lessons.config import PRESETS  # noqa: E402
from transformer_lessons.model import Transformer  # noqa: E402
from transformer_lessons.translation import translate  # noqa: E402
from transformer_lessons.viz.beam_tree import GREEDY_COLOR, NODE_STYLES, WINNER_COLOR, finished_table  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def hand_made_tree():
    """The tree of test_beam_tree.py worked out by hand: beam 2 finds "b <eos>", greedy writes "a a <eos>"."""
    return beam_tree(TableModel().eval(), [7, 8, 3], BOS, EOS, beam_size=2, length_penalty=0.0, max_new_tokens=6)


def _node_texts(ax) -> dict[int, matplotlib.text.Text]:
    return {int(t.get_gid().split()[1]): t for t in ax.texts if (t.get_gid() or "").startswith("node ")}


def _lines(ax, color, style="-") -> list:
    return [line for line in ax.lines if to_rgba(line.get_color()) == to_rgba(color) and line.get_linestyle() == style]


def test_plot_beam_tree_draws_each_candidate_in_the_style_of_its_fate(hand_made_tree):
    tree = hand_made_tree
    ax = viz.plot_beam_tree(tree, TABLE_WORDS)
    texts = _node_texts(ax)
    assert sorted(texts) == [node.id for node in tree.nodes], "one labelled box per candidate, and the root"
    for node in tree.nodes:
        label = texts[node.id].get_text().split("\n")
        assert label[0] == TABLE_WORDS[node.token]  # the word first
        box = texts[node.id].get_bbox_patch()
        assert box.get_edgecolor() == to_rgba(NODE_STYLES[node.status]["edgecolor"]), node
        assert (box.get_linestyle() == "--") == (node.status == DROPPED), node
        if node.parent is not None:
            assert label[1:3] == [f"{node.token_logp:.2f}", f"Σ {node.cum_logp:.2f}"]
            assert label[3:] == ([f"score {node.score:.2f}"] if node.status == FINISHED else [])
    winner = {n.id for n in tree.path(tree.winner)}
    assert {i for i, t in texts.items() if t.get_fontweight() == "bold"} == winner | {0}
    assert len(_lines(ax, WINNER_COLOR)) == len(winner) == 2  # <bos> -> b -> <eos>
    assert len(_lines(ax, GREEDY_COLOR, "--")) == 3  # greedy's a, a, <eos>: all three in the tree
    lane = sorted((t.get_gid(), t.get_text()) for t in ax.texts if (t.get_gid() or "").startswith("greedy "))
    assert lane == [("greedy 1", "a"), ("greedy 2", "a"), ("greedy 3", "<eos>")]
    assert any(t.get_text() == "beam and greedy part" and t.get_position()[0] == 0.5 for t in ax.texts)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(legend) == 5 and legend[0].startswith("kept") and "greedy" in legend[-1]
    assert "α = 0" in ax.get_title() and "beam 2" in ax.get_title()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["<bos>", "1", "2", "3"]


def test_every_text_of_the_tree_reads_at_the_widgets_resolution(hand_made_tree):
    """Issue 28: node labels were 7.5 pt, 8 px in the widget's 80-dpi PNG; every text is now at least 12 px,
    and a dropped candidate's text is dark enough to read on its pale box (WCAG's 4.5:1)."""
    from test_html_style import contrast

    from transformer_lessons.viz.widgets import WIDGET_DPI

    ax = viz.plot_beam_tree(hand_made_tree, TABLE_WORDS)
    texts = [*ax.texts, *ax.get_xticklabels(), *ax.get_legend().get_texts(), ax.title]
    smallest = min(t.get_fontsize() for t in texts if t.get_text())
    assert smallest * WIDGET_DPI / 72 >= 12, f"{smallest} pt is {smallest * WIDGET_DPI / 72:.1f} px in the widget"
    dropped = [t for i, t in _node_texts(ax).items() if hand_made_tree.nodes[i].status == DROPPED]
    assert dropped
    for text in dropped:
        ink, paper = matplotlib.colors.to_hex(text.get_color()), NODE_STYLES[DROPPED]["facecolor"]
        assert contrast(ink, paper) >= 4.5, (ink, paper)


def test_plot_beam_tree_writes_ids_without_a_vocabulary_and_refuses_a_wrong_one(hand_made_tree):
    ax = viz.plot_beam_tree(hand_made_tree)
    assert _node_texts(ax)[hand_made_tree.winner].get_text().startswith(str(EOS))
    with pytest.raises(ValueError, match="target Vocab"):
        viz.plot_beam_tree(hand_made_tree, TABLE_WORDS[:4])  # too short for the ids 4 and 5
    with pytest.raises(TypeError, match="BeamTree"):
        viz.plot_beam_tree([A, B])


def test_the_finished_table_ranks_the_hypotheses_by_their_score(hand_made_tree):
    from transformer_lessons.data import Vocab

    table = finished_table(hand_made_tree, Vocab(TABLE_WORDS))
    rows = re.findall(r"<tr( style='font-weight:bold')?>(.*?)</tr>", table)[1:]  # the header row first
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for _, row in rows]
    assert cells == [["b", "-1.02", "2", "-1.02"], ["a a", "-2.41", "3", "-2.41"]]  # α = 0: score = Σ log p
    assert [bool(bold) for bold, _ in rows] == [True, False], "the winner's row is bold"
    longer = beam_tree(TableModel().eval(), [7, 3], BOS, EOS, beam_size=2, length_penalty=2.0, max_new_tokens=6)
    assert "score (α = 2)" in finished_table(longer, Vocab(TABLE_WORDS))


def test_statuses_have_distinct_styles():
    styles = {status: tuple(sorted(style.items())) for status, style in NODE_STYLES.items()}
    assert set(styles) == {KEPT, FINISHED, DROPPED} and len(set(styles.values())) == 3
    assert len({style["edgecolor"] for style in NODE_STYLES.values()}) == 3


# --------------------------------------------------------------------------------------
# The widget
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def parts():
    from transformer_lessons.data import SPECIALS, Vocab

    torch.manual_seed(0)
    src_vocab = Vocab([*SPECIALS, "Ein", "Mann", "fährt", "Fahrrad", ".", "Zwei", "Hunde", "spielen"])
    tgt_vocab = Vocab([*SPECIALS, "A", "man", "rides", "a", "bike", ".", "Two", "dogs", "play"])
    model = Transformer(PRESETS["tiny"].replace(max_len=10), len(src_vocab), len(tgt_vocab)).eval()
    return model, src_vocab, tgt_vocab


def _translated(parts, sentence: str, beam_size: int, alpha: float) -> str:
    model, src_vocab, tgt_vocab = parts
    return translate(
        model,
        sentence,
        beam_size=beam_size,
        length_penalty=alpha,
        src_vocab=src_vocab,
        tgt_vocab=tgt_vocab,
        use_cache=False,
    )


def test_the_explorer_searches_the_text_box_and_redraws_on_every_change(parts):
    model, src_vocab, tgt_vocab = parts
    explorer = viz.beam_tree_explorer(model, src_vocab, tgt_vocab, sentence="Ein Mann fährt Fahrrad.", beam_size=2)
    assert explorer.translation == _translated(parts, "Ein Mann fährt Fahrrad.", 2, 0.6)
    assert explorer.tree.beam_size == 2 and explorer.figure is not None and explorer._png
    words = {t.get_text().split("\n")[0] for t in _node_texts(explorer.figure.axes[0]).values()}
    assert words == {tgt_vocab.itos[node.token] for node in explorer.tree.nodes}, "the words are the labels"
    assert "greedy" in explorer.html.value and "beam 2" in explorer.html.value
    # The finished hypotheses under the translations, the winner first and bold.
    assert explorer.html.value.count("<tr") == len(explorer.tree.finished) + 1
    shown = explorer.translation or "(nothing)"  # this random model's beam 2 ends at once: "<eos>" alone wins
    assert f"<tr style='font-weight:bold'><td style='padding:0 0.6em;text-align:left'>{shown}<" in explorer.html.value

    seen = [explorer._png]
    explorer.controls["text"].value = "Zwei Hunde spielen."  # what typing and Enter do in the browser
    seen.append(explorer._png)
    assert explorer.tree.src_ids == src_vocab.encode(["Zwei", "Hunde", "spielen", "."]) + [src_vocab.eos_id]
    assert explorer.translation == _translated(parts, "Zwei Hunde spielen.", 2, 0.6)
    explorer.controls["beam"].value = 5
    seen.append(explorer._png)
    assert explorer.tree.beam_size == 5 and explorer.translation == _translated(parts, "Zwei Hunde spielen.", 5, 0.6)
    assert max(len(explorer.tree.at_step(t)) for t in range(1, explorer.tree.n_steps + 1)) > 4  # up to 2K = 10
    explorer.controls["alpha"].value = 1.5
    seen.append(explorer._png)
    assert explorer.tree.alpha == 1.5 and "α = 1.5" in explorer.figure.axes[0].get_title()
    explorer.controls["beam"].value = 1
    seen.append(explorer._png)
    assert explorer.translation == explorer.greedy_translation == _translated(parts, "Zwei Hunde spielen.", 1, 1.5)
    assert "write the same" in explorer.html.value
    assert len(set(seen)) == len(seen) == 5, "every change redraws"
    assert "Zwei Hunde spielen." in explorer.describe() and "beam 1" in explorer.describe()


def test_the_explorer_answers_awkward_input_in_the_widget(parts, monkeypatch):
    model, src_vocab, tgt_vocab = parts
    explorer = viz.beam_tree_explorer(model, src_vocab, tgt_vocab, sentence="   ")
    assert explorer.tree is None and explorer.figure is None and "Type a German sentence" in explorer.html.value
    assert len(_displayed(explorer, monkeypatch)) == 1  # nothing searched, no picture to copy
    explorer.controls["text"].value = " ".join(["Ein Mann ."] * 6)  # 18 tokens, more than max_len 10
    assert "only their first 9 tokens" in explorer.html.value and explorer.tree is not None
    explorer.model = "not a model"  # anything that fails inside the search is shown, never raised
    explorer.controls["text"].value = "Ein Mann ."
    assert "could not search" in explorer.html.value and explorer.tree is None and not explorer.picture.value
    for bad, error in [
        ({"beam_size": 0}, ValueError),
        ({"beam_size": 9}, ValueError),
        ({"length_penalty": 2.5}, ValueError),
        ({"sentence": 42}, TypeError),
    ]:
        with pytest.raises(error):
            viz.beam_tree_explorer(model, src_vocab, tgt_vocab, **bad)


def test_the_explorer_displays_as_the_other_widgets_do(parts, monkeypatch):
    model, src_vocab, tgt_vocab = parts
    explorer = viz.beam_tree_explorer(model, src_vocab, tgt_vocab, sentence="Ein Mann .", beam_size=2)
    own = _static_copy_shown_and_hidden(explorer, explorer._png, monkeypatch)
    assert own["text/plain"] == explorer.describe() and "Ein Mann ." in own["text/plain"]
    if not hasattr(ipywidgets.Widget, "_repr_mimebundle_"):  # 7.x tells the widget it was displayed
        monkeypatch.setattr(explorer, "_handle_displayed", lambda **kwargs: None)
    expected = {**_ipywidgets_own_bundle(explorer, monkeypatch), "text/plain": explorer.describe()}
    assert explorer._repr_mimebundle_() == expected


def test_the_course_model_beam_tree_is_its_beam_search():
    from transformer_lessons import pretrained

    course = pretrained.load_course_model(device="cpu", progress=False)
    sentence = "Zwei Hunde spielen im Schnee."
    explorer = viz.beam_tree_explorer(course.model, course.src_vocab, course.tgt_vocab, sentence=sentence)
    assert explorer.translation == course.translate(sentence, beam_size=4, use_cache=False)
    assert explorer.greedy_translation == course.translate(sentence, beam_size=1, use_cache=False)
    tree = explorer.tree
    assert len(tree.finished) == 4 and tree.score == max(node.score for node in tree.finished)
    assert explorer.figure is not None and len(_node_texts(explorer.figure.axes[0])) == len(tree.nodes)


def test_the_trees_pictures_keep_32_colours_and_other_figures_256(hand_made_tree):
    """A beam tree is flat boxes and text: its PNGs (inline, widget) keep 32 colours, a quarter fewer bytes."""
    import io

    from PIL import Image

    from transformer_lessons.viz.widgets import PALETTE, compact_png, figure_png, palette_of

    ax = viz.plot_beam_tree(hand_made_tree, TABLE_WORDS)
    assert palette_of(ax.figure) == getattr(ax.figure, PALETTE) == 32
    colours = Image.open(io.BytesIO(figure_png(ax.figure))).convert("RGB").getcolors(maxcolors=10_000)
    assert len(colours) <= 32
    other, _ = plt.subplots()
    assert palette_of(other) == 256
    shared, shared_ax = plt.subplots()  # drawn into the learner's own axes: their figure keeps its 256 colours
    viz.plot_beam_tree(hand_made_tree, TABLE_WORDS, ax=shared_ax)
    assert palette_of(shared) == 256
    buffer = io.BytesIO()
    ax.figure.savefig(buffer, format="png")
    assert len(Image.open(io.BytesIO(compact_png(buffer.getvalue(), 8))).convert("RGB").getcolors()) <= 8
