"""Beam search drawn as a tree: every hypothesis it weighed for one sentence, and what became of it.

``plot_beam_tree`` draws a :class:`~transformer_lessons.beam_tree.BeamTree`, steps from left to
right. Each column holds the ``2K`` candidates beam search looked at in that step, best first from
the top; each is labelled with its word, the log-probability the model gave that word, and the summed
log-probability of its whole prefix, and a line joins it to the prefix it extends. Kept candidates
are blue, finished ones green with their length-penalised score, dropped ones grey and dashed. The
winner's path is bold orange, greedy decoding's path dashed purple, and greedy's words run along
the bottom, so where the two part ways is in plain sight (paper §6.1: beam 4, ``α = 0.6``).

``beam_tree_explorer`` is the widget: type a German sentence, choose the beam size and the length
penalty ``α``, and the model searches again and the tree is redrawn.
"""

from __future__ import annotations

import html
from typing import Callable

import ipywidgets as widgets
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from transformer_lessons.beam_tree import DROPPED, FINISHED, KEPT, BeamNode, BeamTree, sentence_beam_tree
from transformer_lessons.notes import collect_notes
from transformer_lessons.translation import _check_vocab_fits, _english
from transformer_lessons.viz import html_style
from transformer_lessons.viz.translator import MAX_WIDGET_BEAM
from transformer_lessons.viz.widgets import HIGHLIGHT_COLOR, PALETTE, FigureWidget, number_box, widget_figure

#: How each kind of candidate is drawn: the box around its label.
NODE_STYLES = {
    KEPT: {"facecolor": "#d0ebff", "edgecolor": "#1971c2", "linestyle": "-", "linewidth": 1.2},
    FINISHED: {"facecolor": "#d3f9d8", "edgecolor": "#2b8a3e", "linestyle": "-", "linewidth": 2.4},
    DROPPED: {"facecolor": "#f8f9fa", "edgecolor": "#adb5bd", "linestyle": "--", "linewidth": 1.0},
}
WINNER_COLOR = HIGHLIGHT_COLOR  # the winning hypothesis's path
GREEDY_COLOR = "#7048e8"  # greedy decoding's path and words
MAX_WIDGET_ALPHA = 2.0  # the widget's α box: beyond 2 long outputs win whatever their probability
_ROW = 0.9  # inches per candidate row: three lines of text, four once scored
_COLUMN = 1.0  # inches per step
TREE_COLORS = 32  # the tree's PNGs keep 32 colours: flat boxes and text lose no shade (widgets.compact_png)
NODE_FONT = 11  # points: 12 px at the widgets' 80 dpi, the smallest text a widget shows
_MIN_WIDTH = 7.5  # inches: room for the title and the legend
_MAX_WIDTH = 30.0  # inches: a long sentence's tree is squeezed rather than drawn wider


def tree_figure_size(tree: BeamTree) -> tuple[float, float]:
    """``(width, height)`` in inches: one column per step, one row per candidate, room for titles and legend."""
    rows = max(len(tree.at_step(step)) for step in range(1, tree.n_steps + 1)) + 1  # + greedy's lane
    width = max(_MIN_WIDTH, min(_MAX_WIDTH, _COLUMN * (_columns(tree) + 1) + 1.0))
    return width, _ROW * rows + 2.6


def _columns(tree: BeamTree) -> int:
    """How many steps the picture shows: the search's, or greedy's when it wrote more."""
    return max(tree.n_steps, len(tree.greedy))


def _word_of(vocab, tree: BeamTree) -> Callable[[int], str]:
    """A function from token id to the word drawn: the vocabulary's token (``vocab.itos``), or the id itself."""
    if vocab is None:
        return str
    itos = getattr(vocab, "itos", vocab)
    largest = max(max(node.token for node in tree.nodes), max(tree.greedy, default=0))
    if not hasattr(itos, "__getitem__") or len(itos) <= largest:
        raise ValueError(
            f"vocab must be the target Vocab (or its list of tokens, index = id) holding every id the tree writes, "
            f"up to {largest}: pass the vocabulary the model was trained with"
        )
    return lambda token: str(itos[token])


def _positions(tree: BeamTree) -> dict[int, tuple[float, float]]:
    """Where each node sits: ``x`` its step, ``y`` minus its rank (best at the top); the root halfway down."""
    first = len(tree.at_step(1))
    pos = {node.id: (float(node.step), -float(node.rank)) for node in tree.nodes[1:]}
    pos[0] = (0.0, -(first - 1) / 2)
    return pos


def _label(node: BeamNode, word: Callable[[int], str]) -> str:
    """The word, then ``log p(word)`` and ``Σ log p`` of its prefix, a line each; a finished one's score below."""
    text = word(node.token)
    text = text if len(text) <= 10 else text[:9] + "…"
    if node.parent is None:
        return text
    text += f"\n{node.token_logp:.2f}\nΣ {node.cum_logp:.2f}"
    return text + (f"\nscore {node.score:.2f}" if node.score is not None else "")


def _draw_edges(ax: Axes, tree: BeamTree, pos, winner: set[int], greedy: set[int]) -> None:
    """A line from each candidate back to the prefix it extends: the winner's bold, greedy's dashed."""
    for node in tree.nodes[1:]:
        (x0, y0), (x1, y1) = pos[node.parent], pos[node.id]
        faint = node.status == DROPPED
        ax.plot([x0, x1], [y0, y1], color="#ced4da" if faint else "#868e96", lw=0.8 if faint else 1.1, zorder=1)
        if node.id in winner:
            ax.plot([x0, x1], [y0, y1], color=WINNER_COLOR, lw=3.4, solid_capstyle="round", zorder=2)
        if node.id in greedy:
            ax.plot([x0, x1], [y0, y1], color=GREEDY_COLOR, lw=1.6, ls="--", zorder=2.5)


def _draw_nodes(ax: Axes, tree: BeamTree, pos, winner: set[int], word: Callable[[int], str]) -> None:
    """One box per candidate, styled by what became of it; the winner's words bold. Each text's gid is ``node <id>``."""
    for node in tree.nodes:
        x, y = pos[node.id]
        style = NODE_STYLES[node.status]
        bold = node.id in winner or node.parent is None
        text = ax.text(
            x,
            y,
            _label(node, word),
            ha="center",
            va="center",
            fontsize=NODE_FONT,
            fontweight="bold" if bold else "normal",
            color="#495057" if node.status == DROPPED else "#212529",  # 8:1 on the dropped grey: readable
            bbox={"boxstyle": "round,pad=0.3", **style},
            zorder=3,
        )
        text.set_gid(f"node {node.id}")


def _draw_greedy_lane(ax: Axes, tree: BeamTree, word: Callable[[int], str], y: float) -> None:
    """Greedy decoding's words along the bottom, one per step, where it can be compared with the tree above."""
    ax.text(0, y, "greedy", ha="center", va="center", fontsize=NODE_FONT, fontweight="bold", color=GREEDY_COLOR)
    for step, token in enumerate(tree.greedy, start=1):
        ax.text(
            step,
            y,
            word(token),
            ha="center",
            va="center",
            fontsize=NODE_FONT,
            color=GREEDY_COLOR,
            bbox={"boxstyle": "round,pad=0.25", "facecolor": "white", "edgecolor": GREEDY_COLOR, "linestyle": ":"},
            gid=f"greedy {step}",
        )


def _legend_handles() -> list:
    return [
        Patch(**NODE_STYLES[KEPT], label="kept: extended at the next step"),
        Patch(**NODE_STYLES[FINISHED], label="finished: ended with <eos> (or cut off) and scored"),
        Patch(**NODE_STYLES[DROPPED], label="dropped"),
        Line2D([], [], color=WINNER_COLOR, lw=3.4, label="the winner's path (beam search's output)"),
        Line2D([], [], color=GREEDY_COLOR, lw=1.6, ls="--", label="greedy decoding's path"),
    ]


def draw_beam_tree(ax: Axes, tree: BeamTree, vocab=None, title: str | None = None) -> Axes:
    """Draw ``tree`` into ``ax`` (see :func:`plot_beam_tree`)."""
    word = _word_of(vocab, tree)
    pos = _positions(tree)
    winner = {node.id for node in tree.path(tree.winner)}
    greedy = {node.id for node in tree.greedy_nodes()}
    lane = min(y for _, y in pos.values()) - 1.2
    _draw_edges(ax, tree, pos, winner, greedy)
    _draw_nodes(ax, tree, pos, winner, word)
    _draw_greedy_lane(ax, tree, word, lane)
    part = tree.parting_step
    if part is not None:
        ax.axvline(part - 0.5, color=GREEDY_COLOR, ls=":", lw=1.2, zorder=0)
        ax.text(part - 0.5, 0.75, "beam and greedy part", ha="center", fontsize=NODE_FONT, color=GREEDY_COLOR)
    columns = _columns(tree)
    ax.set_xlim(-0.6, columns + 0.6)
    ax.set_ylim(lane - 0.7, 1.1)
    ax.xaxis.tick_top()
    ax.set_xticks(range(columns + 1))
    ax.set_xticklabels(["<bos>"] + [str(step) for step in range(1, columns + 1)], fontsize=NODE_FONT)
    ax.set_yticks([])
    for side in ("left", "right", "bottom", "top"):
        ax.spines[side].set_visible(False)
    heading = f"beam search, beam {tree.beam_size}: {len(tree.nodes) - 1} candidates in {tree.n_steps} steps"
    ax.set_title(
        (f"{title}: " if title else "")
        + heading
        + "\nunder each word: its log p, then Σ log p of the prefix it ends"
        + f"\nfinished: score = Σ log p / ((5 + length) / 6)^α, α = {tree.alpha:g} (length penalty of Wu et al. 2016; paper: 0.6)",
        fontsize=NODE_FONT,
    )
    ax.legend(handles=_legend_handles(), loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, fontsize=NODE_FONT)
    return ax


def plot_beam_tree(tree: BeamTree, vocab=None, ax: Axes | None = None, title: str | None = None) -> Axes:
    """Beam search as a tree: what it kept, finished and dropped at each step, and where greedy went instead.

    Args:
        tree: a :class:`~transformer_lessons.beam_tree.BeamTree` (:func:`~transformer_lessons.beam_tree.beam_tree`
            or :func:`~transformer_lessons.beam_tree.sentence_beam_tree`).
        vocab: the target vocabulary (or its list of tokens) to write words; ``None`` writes the ids.
        ax: Axes to draw into; a new figure by default.
        title: optional prefix of the title.

    Returns:
        The Axes: one column per step (``<bos>`` first), the step's candidates best first from the top,
        each box labelled ``word``, ``log p``, ``Σ log p`` (and ``score`` once finished), a line each; blue kept, green
        finished, grey dashed dropped; the winner's path bold orange, greedy's dashed purple with its
        words along the bottom; a dotted line where the two part; a legend below; ``α`` in the title.
        Each node's text has the gid ``"node <id>"``.
    """
    if not isinstance(tree, BeamTree):
        raise TypeError(f"plot_beam_tree draws a BeamTree (from beam_tree(...)), got {type(tree).__name__}")
    if ax is None:
        fig, ax = plt.subplots(figsize=tree_figure_size(tree), layout="constrained")
        setattr(fig, PALETTE, TREE_COLORS)
    return draw_beam_tree(ax, tree, vocab, title)


class BeamTreeExplorer(FigureWidget):
    """Widget returned by :func:`beam_tree_explorer`."""

    _kind_name = "beam tree"

    def __init__(
        self,
        model,
        src_vocab,
        tgt_vocab,
        sentence: str = "",
        beam_size: int = 4,
        length_penalty: float = 0.6,
        title: str | None = None,
    ):
        if not isinstance(sentence, str):
            raise TypeError(f"sentence must be a str, got {type(sentence).__name__}")
        if isinstance(beam_size, bool) or not isinstance(beam_size, int) or not 1 <= beam_size <= MAX_WIDGET_BEAM:
            raise ValueError(f"beam_size must be between 1 (greedy) and {MAX_WIDGET_BEAM}, got {beam_size!r}")
        if isinstance(length_penalty, bool) or not 0 <= length_penalty <= MAX_WIDGET_ALPHA:
            raise ValueError(f"length_penalty (α) must be between 0 and {MAX_WIDGET_ALPHA:g}, got {length_penalty!r}")
        _check_vocab_fits(model, src_vocab, tgt_vocab)
        self.model, self.src_vocab, self.tgt_vocab, self._title = model, src_vocab, tgt_vocab, title
        self.tree: BeamTree | None = None
        self.translation = self.greedy_translation = ""
        style = {"description_width": "110px"}
        controls = {
            "text": widgets.Text(
                value=sentence,
                placeholder="Ein Hund rennt über eine Wiese.",
                description="German",
                continuous_update=False,
                style=style,
                layout=widgets.Layout(width="600px"),
            ),
            "beam": number_box(beam_size, 1, MAX_WIDGET_BEAM, "beam size", style),
            "alpha": number_box(length_penalty, 0.0, MAX_WIDGET_ALPHA, "length penalty α", style, step=0.1),
        }
        self.html = widgets.HTML()
        super().__init__(controls, extra=[self.html])
        self._update()

    @property
    def beam_size(self) -> int:
        return self.controls["beam"].value

    @property
    def alpha(self) -> float:
        return self.controls["alpha"].value

    def _update(self) -> None:
        """Search again, then draw the tree; with nothing to draw (no sentence, an error) show the message alone."""
        self.tree, self.translation, self.greedy_translation = None, "", ""
        self.html.value = self._search()
        if self.tree is None:
            self.figure, self._png = None, b""
            self.picture.show(b"", "")
            return
        super()._update()

    def _search(self) -> str:
        """Run the search on the text box's sentence; returns the HTML shown above the tree."""
        sentence = self.controls["text"].value
        try:
            with collect_notes() as said:  # the sentence cut to fit the model: said under the result
                tree = sentence_beam_tree(
                    self.model, sentence, self.src_vocab, self.tgt_vocab, self.beam_size, self.alpha
                )
        except Exception as error:  # a widget shows the problem; it never leaves a traceback in the notebook
            return _message(html_style.badge(f"could not search: {html.escape(str(error))}"))
        if tree is None:
            return _message("Type a German sentence above and press Enter.")
        self.tree = tree
        (self.translation, self.greedy_translation), _ = _english([tree.winner_tokens, tree.greedy], self.tgt_vocab)
        part = tree.parting_step
        where = "beam search and greedy decoding write the same" if part is None else f"they part at step {part}"
        return _message(
            f"<b>beam {tree.beam_size}</b>: {html.escape(self.translation) or '(nothing)'} "
            f"<small>(score {tree.score:.2f})</small><br>"
            f"<b>greedy</b>: {html.escape(self.greedy_translation) or '(nothing)'}"
            f"<br><small>{where}</small>"
            + "".join(html_style.note(html.escape(note)) for note in said)
            + finished_table(tree, self.tgt_vocab)
        )

    def describe(self) -> str:
        head = f"{self._title}: " if self._title else ""
        if self.tree is None:
            return head + "beam tree (type a German sentence)"
        sentence = self.controls["text"].value
        return head + f"beam tree of {sentence!r}, beam {self.beam_size}, α={self.alpha:g}: {self.translation!r}"

    def _draw(self) -> Figure:
        fig = widget_figure(*tree_figure_size(self.tree))
        setattr(fig, PALETTE, TREE_COLORS)
        draw_beam_tree(fig.add_subplot(), self.tree, self.tgt_vocab, title=self._title)
        return fig


def finished_table(tree: BeamTree, tgt_vocab) -> str:
    """The finished hypotheses as an HTML table, best score first: the length penalty's effect at the end.

    Each row: the sentence, ``Σ log p``, its length ``|Y|`` (``<eos>`` included) and its score
    ``Σ log p / ((5 + |Y|) / 6)^α``; the winner's row is bold. With ``α = 0`` the ranking is by ``Σ log p``
    alone, which favours short hypotheses (each word only lowers it); a larger ``α`` lifts the longer ones.
    """
    finished = sorted(tree.finished, key=lambda node: -node.score)  # a stable sort: ties keep the search's order
    texts, _ = _english([tree.tokens(node.id) for node in finished], tgt_vocab)
    cell = "<td style='padding:0 0.6em;text-align:{}'>{}</td>"
    rows = [
        ("<tr style='font-weight:bold'>" if node.id == tree.winner else "<tr>")
        + cell.format("left", html.escape(text) or "(nothing)")
        + "".join(cell.format("right", v) for v in (f"{node.cum_logp:.2f}", node.step, f"{node.score:.2f}"))
        + "</tr>"
        for node, text in zip(finished, texts)
    ]
    head = "".join(cell.format("right", h) for h in ("Σ log p", "length", f"score (α = {tree.alpha:g})"))
    return (
        "<table style='font-size:13px;margin-top:0.4em'><tr><td><i>finished hypotheses, best score first</i></td>"
        + head
        + "</tr>"
        + "".join(rows)
        + "</table>"
    )


def _message(text: str) -> str:
    return html_style.block(text)


def beam_tree_explorer(
    model,
    src_vocab,
    tgt_vocab,
    sentence: str = "Ein Mann fährt Fahrrad.",
    beam_size: int = 4,
    length_penalty: float = 0.6,
    title: str | None = None,
) -> BeamTreeExplorer:
    """Type a German sentence and watch beam search translate it: every hypothesis, kept, finished or dropped.

    Args:
        model: a trained :class:`~transformer_lessons.model.Transformer`.
        src_vocab, tgt_vocab: its vocabularies.
        sentence: the sentence in the text box at first.
        beam_size: ``K`` at first (1 to ``MAX_WIDGET_BEAM``; 1 is greedy decoding).
        length_penalty: ``α`` at first (0 to 2; paper §6.1: 0.6).
        title: optional prefix of the figure title.

    Returns:
        A ``VBox``: a text box (``Enter`` searches), a beam-size box and an ``α`` box, then
        beam search's and greedy decoding's translations, the step where they part and the finished
        hypotheses with their scores (:func:`finished_table`), over the tree
        of :func:`plot_beam_tree`; every change searches again (:func:`~transformer_lessons.beam_tree.sentence_beam_tree`)
        and redraws. For tests: ``.controls`` (``text``, ``beam``, ``alpha``), ``.tree``, ``.translation``,
        ``.greedy_translation``, ``.html``, ``.figure``.
    """
    return BeamTreeExplorer(model, src_vocab, tgt_vocab, sentence, beam_size, length_penalty, title)


__all__ = [
    "GREEDY_COLOR",
    "MAX_WIDGET_ALPHA",
    "NODE_STYLES",
    "WINNER_COLOR",
    "BeamTreeExplorer",
    "beam_tree_explorer",
    "draw_beam_tree",
    "finished_table",
    "plot_beam_tree",
    "tree_figure_size",
]
