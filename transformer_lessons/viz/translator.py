"""The translator widget: type German, read the English, see where each word looked.

``translator`` wraps :func:`transformer_lessons.translation.translate` (greedy or beam
search) in a text box and a Translate button, and shows the result word by word
with the :func:`~transformer_lessons.viz.stepper.generation_stepper` view.
"""

from __future__ import annotations

import html
import math

import ipywidgets as widgets

from transformer_lessons.confidence import UNUSUAL_BELOW, token_log_probs
from transformer_lessons.notes import collect_notes
from transformer_lessons.translation import translate as _translate
from transformer_lessons.viz import html_style
from transformer_lessons.viz.widgets import (
    WIDGET_DPI,
    LiveWithStaticCopy,
    StaticCopies,
    figure_png,
    number_box,
    stack_pngs,
    widget_figure,
)
from transformer_lessons.viz.stepper import GenerationStepper

MAX_WIDGET_BEAM = 8  # the translator's beam-size box: beyond ~8 beams Multi30k gains nothing and a CPU waits
UNUSUAL_WARNING = (
    "This sentence looks unlike the image captions the model learned from: its translation is likely a "
    "caption-shaped guess."
)


def word_probabilities(tokens: list[str], log_probs: list[float]) -> list[tuple[str, float]]:
    """``(word, probability)`` per output word: subword pieces (``"Fahr@@"``, ``"rad"``) joined, their
    probabilities combined as the geometric mean; ``<eos>`` left out."""
    words: list[tuple[str, float]] = []
    piece, logs = "", []
    for token, log_p in zip(tokens, log_probs):
        if token == "<eos>":
            break
        piece, logs = piece + token.removesuffix("@@"), logs + [log_p]
        if not token.endswith("@@"):
            words.append((piece, math.exp(sum(logs) / len(logs))))
            piece, logs = "", []
    if piece:
        words.append((piece, math.exp(sum(logs) / len(logs))))
    return words


class Translator(LiveWithStaticCopy, widgets.VBox):
    """Widget returned by :func:`translator`."""

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
        if not 1 <= beam_size <= MAX_WIDGET_BEAM:
            raise ValueError(f"beam_size must be between 1 (greedy) and {MAX_WIDGET_BEAM}, got {beam_size}")
        super().__init__()
        self.model, self.src_vocab, self.tgt_vocab = model, src_vocab, tgt_vocab
        self.length_penalty = length_penalty
        self._title = title
        style = {"description_width": "70px"}
        self.controls: dict[str, widgets.Widget] = {
            "text": widgets.Text(
                value=sentence,
                placeholder="Ein Hund rennt über eine Wiese.",
                description="German",
                continuous_update=False,
                style=style,
                layout=widgets.Layout(width="600px"),
            ),
            "decoding": widgets.ToggleButtons(
                options=[("greedy", "greedy"), ("beam search", "beam")],
                value="greedy" if beam_size == 1 else "beam",
                description="decoding",
                style=style,
            ),
            "beam": number_box(max(beam_size, 2), 2, MAX_WIDGET_BEAM, "beam size", style, disabled=beam_size == 1),
        }
        self.button = widgets.Button(description="Translate", button_style="primary", icon="language")
        self.result = widgets.HTML()
        self.view = widgets.VBox()  # the word-by-word view of the last translation
        self.stepper: GenerationStepper | None = None
        self.translation = ""
        self.details: dict | None = None
        self.word_probs: list[tuple[str, float]] = []  # (word, probability) of the last translation
        self.mean_log_prob: float | None = None  # its sentence signal (transformer_lessons.confidence)
        self._static_copies = StaticCopies()
        self.children = [
            self.controls["text"],
            widgets.HBox([self.controls["decoding"], self.controls["beam"]]),
            self.button,
            self.result,
            self.view,
            self._static_copies,
        ]
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        self.button.on_click(lambda _button: self.translate())
        self.translate()

    @property
    def beam_size(self) -> int:
        return 1 if self.controls["decoding"].value == "greedy" else self.controls["beam"].value

    def _on_change(self, _change=None) -> None:
        self.controls["beam"].disabled = self.controls["decoding"].value == "greedy"
        self.translate()

    def _show(self, message: str) -> None:
        self.result.value = html_style.block(message)

    def translate(self) -> str:
        """Translate the text box with the chosen decoding; update the translation and the views."""
        sentence = self.controls["text"].value
        self.translation, self.details, self.word_probs, self.mean_log_prob = "", None, [], None
        if not sentence.strip():
            self.stepper, self.view.children = None, ()
            self._show("Type a German sentence above and press Enter (or <b>Translate</b>).")
            return ""
        keep = self._view_choice()
        try:
            with collect_notes() as said:  # translate's own notes (input cut to fit), no other warning
                text, details = _translate(
                    self.model,
                    sentence,
                    beam_size=self.beam_size,
                    src_vocab=self.src_vocab,
                    tgt_vocab=self.tgt_vocab,
                    return_attention=True,
                    length_penalty=self.length_penalty,
                )
                log_p = self._log_probs(details)
        except Exception as error:  # a widget shows the problem; it never leaves a traceback in the notebook
            self.stepper, self.view.children = None, ()
            self._show(html_style.badge(f"could not translate: {html.escape(str(error))}"))
            return ""
        self.translation, self.details = text, details
        notes = [html.escape(message) for message in said]
        unknown = [t for t in details["src_tokens"][:-1] if t not in self.src_vocab]
        if unknown:
            notes.append("never seen in training, read as &lt;unk&gt;: " + ", ".join(html.escape(t) for t in unknown))
        method = "greedy" if self.beam_size == 1 else f"beam {self.beam_size}"
        self.word_probs = word_probabilities(details["tgt_tokens"], log_p)
        self.mean_log_prob = sum(log_p) / len(log_p) if log_p else None
        warning = ""
        if self.mean_log_prob is not None and self.mean_log_prob < UNUSUAL_BELOW:
            warning = (
                f"<div style='margin-bottom:0.3em'>{html_style.badge(f'&#9888; {UNUSUAL_WARNING}', 'warning')}</div>"
            )
        sure = " ".join(html_style.sureness_chip(w, p) for w, p in self.word_probs)
        self._show(
            warning
            + f"<b>English</b> ({method}): <span style='font-size:1.2em'><b>{html.escape(text) or '(nothing)'}</b></span>"
            + (f"<br>{sure}<br>{html_style.sureness_legend()}" if sure else "")
            + "".join(html_style.note(note) for note in notes)
        )
        if details["cross_attention"] is None:
            self.stepper, self.view.children = None, ()
        else:
            self.stepper = GenerationStepper(
                details["src_tokens"], details["tgt_tokens"], details["cross_attention"], title=self._title
            )
            self._restore_view_choice(keep)
            self.view.children = (self.stepper,)
        return text

    def _log_probs(self, details: dict) -> list[float]:
        """The log-probability the model gave each token it wrote (teacher forcing on its own output)."""
        out = self.tgt_vocab.encode(details["tgt_tokens"])
        if not out:
            return []
        src = self.src_vocab.encode(details["src_tokens"])  # the units read, <eos> included
        return token_log_probs(self.model, src, out, self.tgt_vocab.bos_id).tolist()

    def _view_choice(self) -> dict:
        if self.stepper is None:
            return {}
        return {name: self.stepper.controls[name].value for name in ("layer", "head") if name in self.stepper.controls}

    def _restore_view_choice(self, choice: dict) -> None:
        """Keep the layer and head the learner picked when the next sentence is translated."""
        for name, value in choice.items():
            control = self.stepper.controls.get(name)
            if control is not None:
                control.value = value

    def describe(self) -> str:
        sentence = self.controls["text"].value
        head = f"{self._title}: " if self._title else ""
        if not self.translation:
            return head + "translator (type a German sentence)"
        return head + f"{sentence!r} -> {self.translation!r}"

    def _static_png(self) -> bytes:
        """The static copy (``viz/widgets.py``): the translation's word chips above the word-by-word picture."""
        if self.stepper is None:
            return b""
        method = "greedy" if self.beam_size == 1 else f"beam {self.beam_size}"
        warned = self.mean_log_prob is not None and self.mean_log_prob < UNUSUAL_BELOW
        return stack_pngs([chips_png(f"English ({method}):", self.word_probs, warned), self.stepper._png])


def chips_png(heading: str, word_probs: list[tuple[str, float]], warned: bool = False) -> bytes:
    """The translator's words as a picture: each on its sureness colour with its per cent, as the widget shows them.

    What a static view (GitHub, an HTML export) shows of the live chips; the warning above them when ``warned``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = widget_figure(9.0, 1.3 if warned else 0.95)
    fig.set_dpi(WIDGET_DPI)  # text placed in pixels: the same pixels as the saved PNG's
    canvas = FigureCanvasAgg(fig)
    renderer = canvas.get_renderer()
    x, y = 6.0, fig.bbox.height - 10.0  # pixels from the bottom left
    if warned:
        fig.text(
            x,
            y,
            "\u26a0 " + UNUSUAL_WARNING,
            transform=None,
            va="top",
            fontsize=10,
            wrap=False,
            bbox={"boxstyle": "round,pad=0.25", "facecolor": "#fdebc8", "edgecolor": "none"},
            color="#5c3b00",
        )
        y -= 28.0
    label = fig.text(x, y, heading, transform=None, va="top", fontsize=11, fontweight="bold")
    x += label.get_window_extent(renderer).width + 10
    for word, p in word_probs:
        background, _ = html_style.sureness(p)
        chip = fig.text(
            x,
            y,
            f"{word} {round(100 * p)}%",
            transform=None,
            va="top",
            fontsize=11,
            color="#1f1f1f",
            bbox={"boxstyle": "round,pad=0.2", "facecolor": background, "edgecolor": "none"},
        )
        x += chip.get_window_extent(renderer).width + 12
    legend = "the probability the model gave each word: blue 70% or more, orange 30-70%, red under 30%"
    fig.text(6.0, y - 26.0, legend, transform=None, va="top", fontsize=10, color="#555555")
    fig.set_size_inches(max(fig.get_figwidth(), (x + 6) / fig.dpi), fig.get_figheight())
    return figure_png(fig, bbox_inches=None)


def translator(
    model,
    src_vocab,
    tgt_vocab,
    sentence: str = "Ein Mann fährt Fahrrad.",
    beam_size: int = 4,
    length_penalty: float = 0.6,
    title: str | None = None,
) -> Translator:
    """Type a German sentence, get its English translation and see where each word looked.

    Args:
        model: a trained :class:`~transformer_lessons.model.Transformer` (eval mode).
        src_vocab, tgt_vocab: its vocabularies.
        sentence: the sentence in the text box at first.
        beam_size: 1 for greedy decoding, else beam search with this many beams
            (at most ``MAX_WIDGET_BEAM``); the learner can change both.
        length_penalty: GNMT ``α`` for beam search (paper §6.1: 0.6).
        title: optional prefix of the figure title.

    Returns:
        A ``VBox``: a text box (``Enter`` translates), greedy or beam search
        and the beam size, a Translate button, the English translation (with a
        note for words the model never saw and for over-long input), each word of
        it on a colour for the probability the model gave it (blue sure, orange
        unsure, red guessing; the probability in per cent beside it), a warning above it when the sentence looks
        unlike the training captions (:mod:`transformer_lessons.confidence`), and the
        word-by-word view of :func:`generation_stepper`: for each written word,
        where the cross-attention of the chosen layer (default the last) and
        head looked in the German, above the whole cross-attention heatmap.
        Rows are the words each step *writes*. For tests: ``.controls`` (``text``,
        ``decoding``, ``beam``), ``.translate()``, ``.translation``,
        ``.details`` (what ``translate(..., return_attention=True)`` returned),
        ``.word_probs``, ``.mean_log_prob``, ``.stepper``.
    """
    return Translator(model, src_vocab, tgt_vocab, sentence, beam_size, length_penalty, title)
