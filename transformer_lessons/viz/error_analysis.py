"""Pictures of the translator's errors: BLEU by source length, beam against greedy, and a browser of sentences.

The numbers come from :mod:`transformer_lessons.error_analysis`; this file only draws them.

* ``plot_bleu_by_length``: corpus BLEU of each bucket of source length, beam and greedy side by
  side, with each bucket's sentence count above its bars (a bucket of 20 sentences is noisy).
* ``plot_beam_vs_greedy``: a histogram of beam chrF minus greedy chrF over the sentences where the
  two differ, with the counts of helps, hurts and ties in the title.
* ``error_browser``: the sentences ranked from worst to best (a number box over the ranking): source,
  reference, the beam and greedy outputs with their scores, and the cross-attention of the beam
  output, to see where the model looked when it went wrong.
"""

from __future__ import annotations

import html
from typing import Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from transformer_lessons.error_analysis import (
    BeamVsGreedy,
    ErrorAnalysis,
    LengthBucket,
    SentenceScore,
    bleu_by_length,
    greedy_vs_beam,
    ranked,
)
from transformer_lessons.notes import collect_notes
from transformer_lessons.translation import translate
from transformer_lessons.viz import html_style
from transformer_lessons.viz.common import heatmap_size, to_numpy
from transformer_lessons.viz.heatmaps import draw_attention
from transformer_lessons.viz.widgets import (
    MEAN_OF_HEADS,
    FigureWidget,
    head_label,
    head_options,
    number_box,
    select_head,
    widget_figure,
)

BEAM_COLOR = "#1c7ed6"  # beam search, in every chart of this file
GREEDY_COLOR = "#adb5bd"  # greedy decoding
WORSE_COLOR = "#e8590c"  # sentences where beam search did worse than greedy
RANKINGS = {"chrf": "beam chrF", "bleu": "beam BLEU"}  # the browser's orderings, worst first


def plot_bleu_by_length(
    buckets: ErrorAnalysis | Sequence[LengthBucket], ax: Axes | None = None, title: str | None = None
) -> Axes:
    """Corpus BLEU per bucket of source length, beam and greedy side by side, each bucket's count above it.

    Args:
        buckets: what :func:`~transformer_lessons.error_analysis.bleu_by_length` returned, or an
            ``ErrorAnalysis`` (bucketed with the default edges).
        ax: Axes to draw into; a new figure by default.
        title: optional title.

    Returns:
        The Axes: its first bars are the beam's (one per bucket), then greedy's; an empty bucket has
        bars of height 0 and the count ``n=0``.
    """
    buckets = bleu_by_length(buckets) if isinstance(buckets, ErrorAnalysis) else list(buckets)
    if not buckets or not all(isinstance(b, LengthBucket) for b in buckets):
        raise ValueError("plot_bleu_by_length draws what bleu_by_length(analysis) returns: a list of LengthBucket")
    if ax is None:
        _, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(buckets) + 2.0), 3.8), layout="constrained")
    x = np.arange(len(buckets))
    beam = [b.bleu or 0.0 for b in buckets]
    greedy = [b.greedy_bleu or 0.0 for b in buckets]
    ax.bar(x - 0.2, beam, width=0.4, color=BEAM_COLOR, label="beam search")
    ax.bar(x + 0.2, greedy, width=0.4, color=GREEDY_COLOR, label="greedy")
    top = max([*beam, *greedy, 1.0])
    for xi, bucket, height in zip(x, buckets, np.maximum(beam, greedy)):
        ax.text(xi, height + 0.02 * top, f"n={bucket.n}", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(x)
    ax.set_xticklabels([b.label for b in buckets])
    ax.set_xlabel("source length (German words)")
    ax.set_ylabel("corpus BLEU (sacreBLEU)")
    ax.set_ylim(0, top * 1.2)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper right", frameon=False)
    if title:
        ax.set_title(title)
    return ax


def plot_beam_vs_greedy(
    comparison: ErrorAnalysis | BeamVsGreedy, ax: Axes | None = None, bins: int = 20, title: str | None = None
) -> Axes:
    """Histogram of beam chrF minus greedy chrF over the sentences where they differ; ties counted in the title.

    Args:
        comparison: what :func:`~transformer_lessons.error_analysis.greedy_vs_beam` returned, or an ``ErrorAnalysis``.
        ax: Axes to draw into; a new figure by default.
        bins: the histogram's bins, spread evenly around 0.
        title: optional title (the counts are added below it).

    Returns:
        The Axes: bars right of 0 (blue) are sentences beam search improved, left of 0 (orange) worse.
    """
    if isinstance(comparison, ErrorAnalysis):
        comparison = greedy_vs_beam(comparison)
    if not isinstance(comparison, BeamVsGreedy):
        raise TypeError("plot_beam_vs_greedy draws what greedy_vs_beam(analysis) returns (or an ErrorAnalysis)")
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 2:
        raise ValueError(f"bins must be a whole number >= 2; got {bins!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.8), layout="constrained")
    gains = np.asarray(comparison.gains, dtype=float)
    tol = comparison.tolerance
    better, worse = gains[gains > tol], gains[gains < -tol]  # the helps and the hurts; ties are left out
    reach = max(1.0, float(np.abs(gains).max()))
    edges = np.linspace(-reach, reach, bins + 1)
    ax.hist(better, bins=edges, color=BEAM_COLOR, label=f"beam better ({len(better)})")
    ax.hist(worse, bins=edges, color=WORSE_COLOR, label=f"greedy better ({len(worse)})")
    ax.axvline(0.0, color="#444444", linewidth=1)
    ax.set_xlabel("beam chrF − greedy chrF (per sentence)")
    ax.set_ylabel("sentences")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # a count of sentences
    ax.legend(loc="upper left", frameon=False)
    ax.grid(axis="y", alpha=0.3)
    counts = (
        f"beam helps {comparison.helps}, hurts {comparison.hurts}, ties {comparison.ties} "
        f"({comparison.same_output} with the same words); mean {comparison.mean_gain:+.2f}"
    )
    ax.set_title(f"{title}\n{counts}" if title else counts, fontsize=10)
    return ax


class ErrorBrowser(FigureWidget):
    """Widget returned by :func:`error_browser`."""

    _kind_name = "error browser"

    def __init__(self, analysis: ErrorAnalysis, model, src_vocab, tgt_vocab, by: str = "chrf", rank: int = 0):
        if not isinstance(analysis, ErrorAnalysis):
            raise TypeError(f"error_browser shows what score_sentences returns, got {type(analysis).__name__}")
        self._ranked = {key: ranked(analysis, key) for key in RANKINGS}  # refuses an empty analysis
        if by not in RANKINGS:
            raise ValueError(f"by must be one of {', '.join(map(repr, RANKINGS))}; got {by!r}")
        n = len(analysis.sentences)
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < n:
            raise ValueError(f"rank must be a whole number from 0 (the worst) to {n - 1} (the best); got {rank!r}")
        self.analysis = analysis
        self.model, self.src_vocab, self.tgt_vocab = model, src_vocab, tgt_vocab
        self._decoded: dict[int, tuple[str, dict]] = {}  # sentence index -> translate(..., return_attention=True)
        style = {"description_width": "70px"}
        controls: dict[str, widgets.Widget] = {
            "rank": number_box(rank, 0, n - 1, "rank", style),
            "by": widgets.Dropdown(
                options=[(label, key) for key, label in RANKINGS.items()], value=by, description="worst by", style=style
            ),
        }
        n_layers, n_heads = model.config.n_layers, model.config.n_heads
        if n_layers > 1:
            controls["layer"] = number_box(n_layers - 1, 0, n_layers - 1, "layer", style)
        if n_heads > 1:
            controls["head"] = widgets.Dropdown(
                options=head_options(n_heads), value=MEAN_OF_HEADS, description="head", style=style
            )
        self.html = widgets.HTML()
        super().__init__(controls, extra=[self.html])
        self._update()

    @property
    def layer(self) -> int:
        return self.controls["layer"].value if "layer" in self.controls else 0

    @property
    def head(self):
        return self.controls["head"].value if "head" in self.controls else 0

    def current_sentence(self) -> SentenceScore:
        """The sentence at the rank box's rank (0: the worst) in the chosen ordering."""
        return self._ranked[self.controls["by"].value][self.controls["rank"].value]

    def current_details(self) -> tuple[str, dict]:
        """The current sentence translated again with the analysis' beam, with its attention (cached)."""
        s = self.current_sentence()
        if s.index not in self._decoded:
            with collect_notes():  # a note (a source cut to fit) is the analysis' business, not the browser's
                self._decoded[s.index] = translate(
                    self.model,
                    s.source,
                    beam_size=self.analysis.beam_size,
                    length_penalty=self.analysis.length_penalty,
                    src_vocab=self.src_vocab,
                    tgt_vocab=self.tgt_vocab,
                    return_attention=True,
                )
        return self._decoded[s.index]

    def current_matrix(self) -> np.ndarray | None:
        """The beam output's ``(T, S)`` cross-attention at the chosen layer and head; ``None`` for an empty output."""
        _, details = self.current_details()
        if details["cross_attention"] is None:
            return None
        return select_head(to_numpy(details["cross_attention"][self.layer]).astype(float), self.head)

    def describe(self) -> str:
        s = self.current_sentence()
        rank, n = self.controls["rank"].value, len(self.analysis.sentences)
        how = RANKINGS[self.controls["by"].value]
        return f"rank {rank + 1} of {n} by {how}, worst first: sentence {s.index}, chrF {s.beam_chrf:.1f}, BLEU {s.beam_bleu:.1f}"

    def _before_draw(self) -> None:
        s = self.current_sentence()
        text, _ = self.current_details()
        rows = [
            ("source", s.source, f"{s.source_words} words"),
            ("reference", s.reference, ""),
            (f"beam {self.analysis.beam_size}", s.beam, f"chrF {s.beam_chrf:.1f} · BLEU {s.beam_bleu:.1f}"),
            ("greedy", s.greedy, f"chrF {s.greedy_chrf:.1f} · BLEU {s.greedy_bleu:.1f}"),
        ]
        cells = "".join(
            f"<tr><td style='padding-right:1em;color:{html_style.MUTED}'>{name}</td>"
            f"<td><b>{html.escape(sentence) or '(nothing)'}</b></td>"
            f"<td style='padding-left:1em;color:{html_style.MUTED};white-space:nowrap'>{score}</td></tr>"
            for name, sentence, score in rows
        )
        note = ""
        if text != s.beam:  # decoded alone instead of in a batch: a near-tie may come out another way
            note = html_style.note(f"decoded alone for the picture: {html.escape(text)}")
        self.html.value = html_style.block(
            f"{html.escape(self.describe())}<table style='color:inherit'>{cells}</table>{note}"
        )

    def _draw(self) -> Figure:
        matrix = self.current_matrix()
        if matrix is None:
            fig = widget_figure(6.0, 1.2)
            ax = fig.add_subplot()
            ax.text(0.5, 0.5, "no output to draw: the translation is empty", ha="center", va="center")
            ax.axis("off")
            return fig
        _, details = self.current_details()
        fig = widget_figure(*heatmap_size(*matrix.shape))
        ax = fig.add_subplot()
        draw_attention(
            ax,
            matrix,
            details["src_tokens"],
            details["tgt_tokens"],
            xlabel="source (what the model read)",
            ylabel="the word each step writes",
        )
        ax.set_title(f"cross-attention of the beam output: layer {self.layer}, {head_label(self.head)}", fontsize=10)
        return fig


def error_browser(
    analysis: ErrorAnalysis, model, src_vocab, tgt_vocab, by: str = "chrf", rank: int = 0
) -> ErrorBrowser:
    """Browse the scored sentences from worst to best, with where the model looked while translating each.

    Args:
        analysis: what :func:`~transformer_lessons.error_analysis.score_sentences` returned.
        model, src_vocab, tgt_vocab: the model it scored, and its vocabularies (to draw the attention).
        by: the ordering: ``"chrf"`` (the beam output's sentence chrF, the default) or ``"bleu"``.
        rank: where the rank box starts: 0 is the worst sentence, ``len(analysis.sentences) - 1`` the best.

    Returns:
        A ``VBox``: a ``rank`` box over the ranking (0 the worst), the ordering, ``layer`` (default
        the last) and ``head`` (default the mean of heads) when there is a choice; the sentence's source,
        reference, beam and greedy outputs with their sentence chrF and BLEU; and the cross-attention
        heatmap of the beam output (the sentence translated again with the analysis' beam, rows are the
        words it writes). For tests: ``.controls``, ``.current_sentence()``, ``.current_matrix()``,
        ``.current_details()``, ``.figure``.
    """
    return ErrorBrowser(analysis, model, src_vocab, tgt_vocab, by, rank)
