"""Which heads matter, drawn: the importance of each head, the pruning curve, and a switchboard of heads.

``plot_head_importance`` draws what :func:`transformer_lessons.heads.head_importance` measured:
one row per kind of attention and layer, one column per head, the BLEU lost when that head
alone is switched off as colour and number (red: BLEU lost; blue: BLEU rose, mostly noise).
``plot_pruning_curve`` draws :func:`transformer_lessons.heads.prune_by_importance`: BLEU
against the number of heads switched off, the least important first.
``head_switchboard`` is a widget: a toggle per head, grouped by kind and layer; each click
translates the sentence again with the heads that are off and shows it beside the full
model's translation, the words that changed marked.
"""

from __future__ import annotations

import difflib
import html
import textwrap
from typing import Mapping, Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.patches import Rectangle

from transformer_lessons.heads import KINDS, Head, HeadImportance, PruningCurve, attention_layers, heads_off
from transformer_lessons.notes import collect_notes
from transformer_lessons.translation import translate as _translate
from transformer_lessons.viz import html_style
from transformer_lessons.viz.widgets import LiveWithStaticCopy, StaticCopies, figure_png, widget_figure

ROW_LABELS = {"encoder": "encoder self", "decoder_self": "decoder self", "cross": "cross"}
IMPORTANCE_CMAP = "RdBu_r"  # diverging around 0: red where a head's loss costs BLEU, blue where BLEU rose
ON_COLOR, OFF_COLOR = "#d3f9d8", "#c92a2a"  # a head on (pale green), off (red) in the switchboard's picture


def row_label(kind: str, layer: int) -> str:
    return f"{ROW_LABELS[kind]} · layer {layer}"


def importance_matrix(importance: HeadImportance) -> tuple[list[tuple[str, int]], np.ndarray]:
    """``(rows, drops)``: the ``(kind, layer)`` of each row (encoder, decoder self, cross; layers in order) and
    the BLEU drops ``(rows, H)``, NaN for a head that was not measured."""
    if not importance.bleu:
        raise ValueError("the importance holds no head: measure some with head_importance first")
    rows = sorted({(kind, layer) for kind, layer, _ in importance.bleu}, key=lambda r: (KINDS.index(r[0]), r[1]))
    matrix = np.full((len(rows), 1 + max(head for *_, head in importance.bleu)), np.nan)  # (rows, H)
    for (kind, layer, head), drop in importance.drop.items():
        matrix[rows.index((kind, layer)), head] = drop
    return rows, matrix


def _decoding(beam_size: int) -> str:
    return "greedy" if beam_size == 1 else f"beam {beam_size}"


def plot_head_importance(
    importance: HeadImportance,
    ax: Axes | None = None,
    title: str | None = None,
    annot: bool = True,
    p_values: Mapping[Head, float] | None = None,
) -> Axes:
    """Heatmap of the BLEU each head costs when it alone is switched off.

    Args:
        importance: what :func:`~transformer_lessons.heads.head_importance` returned.
        ax: where to draw (default a new figure).
        title: the title (default: the baseline BLEU, the sample and the decoding).
        annot: write each drop in its cell.
        p_values: ``{head: p}`` of a paired test against every head on (``records.heads_record()``):
            a head with ``p < 0.05`` gets a black frame, the rest are within the sample's noise.

    Returns:
        The Axes: rows are kind and layer (encoder self-attention, decoder self-attention,
        cross-attention), columns heads; the colour scale is symmetric around 0.
    """
    rows, matrix = importance_matrix(importance)
    if ax is None:
        size = (min(14.0, 3.2 + 0.7 * matrix.shape[1]), min(12.0, 1.6 + 0.45 * len(rows)))
        _, ax = plt.subplots(figsize=size, layout="constrained")
    finite = np.abs(matrix[np.isfinite(matrix)])
    limit = float(finite.max()) if finite.size and finite.max() > 0 else 1.0  # the same scale both sides of 0
    sns.heatmap(
        matrix,
        ax=ax,
        cmap=IMPORTANCE_CMAP,
        vmin=-limit,
        vmax=limit,
        annot=np.round(matrix, 1) + 0.0 if annot else False,  # + 0.0 turns -0.0 into 0.0
        fmt=".1f",
        annot_kws={"fontsize": 8},
        linewidths=0.5,
        linecolor="white",
        cbar_kws={"label": "BLEU lost with the head off"},
        xticklabels=[str(h) for h in range(matrix.shape[1])],
        yticklabels=[row_label(kind, layer) for kind, layer in rows],
    )
    for i in range(1, len(rows)):
        if rows[i][0] != rows[i - 1][0]:  # a line between the kinds of attention
            ax.axhline(i, color="black", linewidth=1.5)
    if p_values:
        for (kind, layer, head), p in p_values.items():
            if p < 0.05 and (kind, layer) in rows:
                ax.add_patch(Rectangle((head, rows.index((kind, layer))), 1, 1, fill=False, lw=2.5, ec="black"))
        ax.set_xlabel(f"head   (framed: p < 0.05, paired bootstrap; {len(p_values)} tests)")
    else:
        ax.set_xlabel("head")
    ax.tick_params(axis="y", rotation=0)
    ax.set_title(
        title
        or f"BLEU lost when one head is switched off (every head on: {importance.baseline:.1f} BLEU, "
        f"{importance.n_sentences} sentences, {_decoding(importance.beam_size)})",
        fontsize=10,
    )
    return ax


def plot_pruning_curve(
    curve: PruningCurve,
    ax: Axes | None = None,
    title: str | None = None,
    random_orders: Sequence[PruningCurve] = (),
) -> Axes:
    """BLEU against the number of heads switched off together, the least important first.

    Args:
        curve: what :func:`~transformer_lessons.heads.prune_by_importance` returned.
        ax: where to draw (default a new figure).
        title: the title (default: the sample and the decoding).
        random_orders: the same sentences pruned in random orders
            (:func:`~transformer_lessons.heads.prune_in_order`), drawn as thin grey lines.

    Returns:
        The Axes: the curve, a dotted line at the BLEU of every head on (when measured), and
        the share of heads off along the top.
    """
    total = max(1, len(curve.order))
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
    for i, other in enumerate(random_orders):
        label = f"random orders ({len(random_orders)})" if i == 0 else None
        ax.plot(other.counts, other.bleu, color="#868e96", linewidth=1, marker="s", markersize=2, label=label)
    ax.plot(curve.counts, curve.bleu, marker="o", markersize=3, label="heads off, least important first")
    if curve.counts and curve.counts[0] == 0:
        ax.axhline(curve.bleu[0], color="#888888", linestyle=":", label=f"every head on: {curve.bleu[0]:.1f}")
    ax.set(xlabel=f"heads switched off (of {len(curve.order)})", ylabel="BLEU", xlim=(0, total))
    highest = max([*curve.bleu, *(bleu for other in random_orders for bleu in other.bleu)], default=1.0)
    ax.set_ylim(0, 1.08 * highest)  # room above every point, the all-on line included
    top = ax.secondary_xaxis("top", functions=(lambda k: 100 * k / total, lambda share: share * total / 100))
    top.set_xlabel("% of heads off")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left")
    ax.set_title(
        title or f"Pruning heads by importance ({curve.n_sentences} sentences, {_decoding(curve.beam_size)})",
        fontsize=10,
    )
    return ax


def marked_changes(before: str, after: str) -> str:
    """``after`` as HTML, its words that are not in ``before`` at that place in bold orange (a word diff)."""
    old, new = before.split(), after.split()
    kept: set[int] = set()
    for block in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_matching_blocks():
        kept.update(range(block.b, block.b + block.size))
    return " ".join(
        html.escape(word) if i in kept else html_style.badge(html.escape(word), "changed") for i, word in enumerate(new)
    )


class HeadSwitchboard(LiveWithStaticCopy, widgets.VBox):
    """Widget returned by :func:`head_switchboard`."""

    def __init__(
        self,
        model,
        src_vocab,
        tgt_vocab,
        sentence: str = "",
        beam_size: int = 1,
        length_penalty: float = 0.6,
        importance: HeadImportance | None = None,
        title: str | None = None,
    ):
        if not isinstance(sentence, str):
            raise TypeError(f"sentence must be a str, got {type(sentence).__name__}")
        if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
            raise ValueError(f"beam_size must be a whole number >= 1 (1 = greedy), got {beam_size!r}")
        super().__init__()
        self._busy = False  # set while one action flips many toggles: translate once
        self.model, self.src_vocab, self.tgt_vocab = model, src_vocab, tgt_vocab
        self.beam_size, self.length_penalty, self._title = beam_size, length_penalty, title
        self._rows = [
            (kind, layer, m.n_heads) for kind in KINDS for layer, m in enumerate(attention_layers(model, kind))
        ]
        self.controls: dict[str, widgets.Widget] = {
            "text": widgets.Text(
                value=sentence,
                placeholder="Ein Hund rennt über eine Wiese.",
                description="German",
                continuous_update=False,
                style={"description_width": "70px"},
                layout=widgets.Layout(width="600px"),
            )
        }
        self.toggles: dict[Head, widgets.ToggleButton] = {}
        rows = [self._toggle_row(kind, layer, n_heads, importance) for kind, layer, n_heads in self._rows]
        self.all_on = widgets.Button(description="every head on", icon="undo")
        self.result = widgets.HTML()
        self.translation = ""  # with the heads that are off
        self.full_translation = ""  # with every head on
        self._full_for: str | None = None  # the sentence full_translation is of
        self._notes: list[str] = []
        self._static_copies = StaticCopies()
        hint = "Click a head to switch it off (red) or on again; the sentence is translated again each time."
        self.children = [
            self.controls["text"],
            widgets.HTML(f"<small>{hint}</small>"),
            *rows,
            self.all_on,
            self.result,
            self._static_copies,
        ]
        self.controls["text"].observe(lambda _change: self.translate(), names="value")
        self.all_on.on_click(lambda _button: self.switch_off([]))
        self.translate()

    def _toggle_row(self, kind: str, layer: int, n_heads: int, importance: HeadImportance | None) -> widgets.HBox:
        """A label and one toggle per head (pressed = on) for one attention layer."""
        buttons = []
        for head in range(n_heads):
            tip = f"{row_label(kind, layer)}, head {head}: click to switch it off or on"
            if importance is not None and (kind, layer, head) in importance.bleu:
                tip += f" (off on its own it cost {importance.drop[(kind, layer, head)]:.1f} BLEU)"
            # One layout and one style model shared by all the buttons (72 for the course model): a smaller notebook.
            look = getattr(self, "_button_look", None) or {"layout": widgets.Layout(width="44px")}
            button = widgets.ToggleButton(value=True, description=str(head), tooltip=tip, **look)
            self._button_look = {"layout": button.layout, "style": button.style}
            button.observe(self._on_toggle, names="value")
            self.toggles[(kind, layer, head)] = button
            buttons.append(button)
        return widgets.HBox([widgets.Label(row_label(kind, layer), layout=widgets.Layout(width="170px")), *buttons])

    def _on_toggle(self, change) -> None:
        change["owner"].button_style = "" if change["new"] else "danger"
        if not self._busy:
            self.translate()

    def switched_off(self) -> list[Head]:
        """The heads switched off now, as ``(kind, layer, head)``."""
        return [head for head, button in self.toggles.items() if not button.value]

    def switch_off(self, heads) -> str:
        """Switch exactly ``heads`` (a list of ``(kind, layer, head)``) off and every other head on; translate once."""
        heads = set(heads)
        unknown = heads - set(self.toggles)
        if unknown:
            raise ValueError(
                f"this model has no head {sorted(unknown)[0]!r}: heads are (kind, layer, head), e.g. ('cross', 0, 1)"
            )
        self._busy = True
        try:
            for head, button in self.toggles.items():
                button.value = head not in heads
        finally:
            self._busy = False
        return self.translate()

    def _show(self, message: str) -> None:
        self.result.value = html_style.block(message)

    def _translate_one(self, sentence: str) -> str:
        return _translate(
            self.model,
            sentence,
            beam_size=self.beam_size,
            src_vocab=self.src_vocab,
            tgt_vocab=self.tgt_vocab,
            length_penalty=self.length_penalty,
        )

    def translate(self) -> str:
        """Translate the text box with every head on (once per sentence) and with the heads that are off."""
        sentence = self.controls["text"].value
        self.translation = ""
        if not sentence.strip():
            self.full_translation, self._full_for, self._notes = "", None, []
            self._show("Type a German sentence above and press Enter.")
            return ""
        off = self.switched_off()
        try:
            with collect_notes() as said:  # translate's own notes (input cut to fit)
                if sentence != self._full_for:
                    self.full_translation, self._full_for = self._translate_one(sentence), sentence
                    self._notes = list(said)
                with heads_off(self.model, off):
                    text = self._translate_one(sentence)
        except Exception as error:  # a widget shows the problem; it never leaves a traceback in the notebook
            self.full_translation, self._full_for = "", None
            self._show(html_style.badge(f"could not translate: {html.escape(str(error))}"))
            return ""
        self.translation = text
        self._show(self._comparison(len(off)))
        return text

    def _comparison(self, n_off: int) -> str:
        """The two translations side by side, the words that changed marked, and translate's notes."""
        cell = "padding:0.2em 2em 0.2em 0;text-align:left;vertical-align:top"
        full = html.escape(self.full_translation) or "(nothing)"
        pruned = marked_changes(self.full_translation, self.translation) or "(nothing)"
        same = self.translation == self.full_translation
        verdict = "the same translation" if same else "a different translation: the words that changed are marked"
        return (
            "<table style='border-collapse:collapse'>"
            f"<tr><th style='{cell}'>every head on ({_decoding(self.beam_size)})</th>"
            f"<th style='{cell}'>{n_off} of {len(self.toggles)} heads off</th></tr>"
            f"<tr><td style='{cell};font-size:1.15em'>{full}</td><td style='{cell};font-size:1.15em'>{pruned}</td></tr>"
            f"</table><span style='font-size:13px;color:{html_style.MUTED}'>{verdict}</span>"
            + "".join(html_style.note(html.escape(note)) for note in self._notes)
        )

    def describe(self) -> str:
        head = f"{self._title}: " if self._title else ""
        off = f"{len(self.switched_off())} of {len(self.toggles)} heads off"
        if self._full_for is None:  # nothing translated (yet)
            return head + f"head switchboard, {off} (nothing translated)"
        sentence = self.controls["text"].value
        return (
            head
            + f"head switchboard, {off}: {sentence!r} -> {self.translation!r} (every head on: {self.full_translation!r})"
        )

    def _static_png(self) -> bytes:
        """The heads on and off as a grid, the two translations above it: the static copy (``viz/widgets.py``)."""
        if self._full_for is None:
            return b""
        n_heads = max(n for *_, n in self._rows)
        grid = np.full((len(self._rows), n_heads), np.nan)  # (rows, H): 1 on, 0 off
        for i, (kind, layer, n) in enumerate(self._rows):
            grid[i, :n] = [float(self.toggles[(kind, layer, h)].value) for h in range(n)]
        fig = widget_figure(3.0 + 0.5 * n_heads, 2.0 + 0.3 * len(self._rows))
        ax = fig.add_subplot()
        ax.imshow(grid, cmap=ListedColormap([OFF_COLOR, ON_COLOR]), vmin=0, vmax=1, aspect="auto")
        for i, h in zip(*np.nonzero(~np.isnan(grid))):  # each head a button of the grid: "on" or "off" written on it
            off = grid[i, h] == 0
            ax.text(
                h, i, "off" if off else "on", ha="center", va="center", color="white" if off else "#2b5d34", fontsize=8
            )
        ax.set_xticks(np.arange(n_heads + 1) - 0.5, minor=True)
        ax.set_yticks(np.arange(len(self._rows) + 1) - 0.5, minor=True)
        ax.grid(which="minor", color="white", linewidth=2)  # gaps between the buttons
        ax.tick_params(which="minor", length=0)
        ax.set_xticks(range(n_heads), [str(h) for h in range(n_heads)])
        ax.set_yticks(range(len(self._rows)), [row_label(kind, layer) for kind, layer, _ in self._rows])
        ax.set_xlabel("head")
        wrap = 70 + 6 * n_heads
        lines = [
            textwrap.shorten(f"every head on: {self.full_translation}", wrap),
            textwrap.shorten(f"{len(self.switched_off())} of {len(self.toggles)} heads off: {self.translation}", wrap),
        ]
        ax.set_title("\n".join(lines).replace("$", r"\$"), fontsize=9, loc="left")  # a $ is text, not mathtext
        return figure_png(fig)


def head_switchboard(
    model,
    src_vocab,
    tgt_vocab,
    sentence: str = "Ein Mann fährt Fahrrad.",
    beam_size: int = 1,
    length_penalty: float = 0.6,
    importance: HeadImportance | None = None,
    title: str | None = None,
) -> HeadSwitchboard:
    """Switch attention heads off one click at a time and read what the translation becomes.

    Args:
        model: a trained :class:`~transformer_lessons.model.Transformer`; its weights are never changed
            (:func:`~transformer_lessons.heads.heads_off` masks the heads for each translation).
        src_vocab, tgt_vocab: its vocabularies.
        sentence: the German sentence in the text box at first.
        beam_size: 1 for greedy decoding (the default: fast), more for beam search.
        length_penalty: GNMT ``α`` for beam search.
        importance: a :class:`~transformer_lessons.heads.HeadImportance`: each toggle's tooltip
            then says what that head cost when it alone was off.
        title: optional prefix of the widget's text.

    Returns:
        A ``VBox``: a text box, one row of toggles per kind and layer (encoder self-attention,
        decoder self-attention, cross-attention; pressed = on, red = off), an "every head on"
        button, and the translation with every head on beside the one with the chosen heads off,
        the words that changed marked. For tests: ``.controls["text"]``, ``.toggles``
        (``{(kind, layer, head): ToggleButton}``), ``.switched_off()``, ``.switch_off(heads)``,
        ``.translate()``, ``.translation``, ``.full_translation``.
    """
    return HeadSwitchboard(model, src_vocab, tgt_vocab, sentence, beam_size, length_penalty, importance, title)
