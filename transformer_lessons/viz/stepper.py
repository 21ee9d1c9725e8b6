"""Step through a generated translation: where did each written word look in the source?

``generation_stepper`` takes the source words, the generated words and the
cross-attention that produced them; a step box walks through the steps, showing
the words written so far, the current step's weights over the source as bars,
and the whole cross-attention heatmap with the current row outlined.
"""

from __future__ import annotations

import html
from typing import Mapping

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from transformer_lessons.viz.common import is_one_sentence, to_numpy
from transformer_lessons.viz.widgets import (
    HIGHLIGHT_COLOR,
    MEAN_OF_HEADS,
    FigureWidget,
    head_label,
    head_options,
    number_box,
    select_head,
    widget_figure,
)
from transformer_lessons.viz.heatmaps import draw_attention


def _cross_layers(cross_attention) -> list[np.ndarray]:
    """Normalise to a list over layers of ``(H, T, S)``."""
    if isinstance(cross_attention, Mapping):
        cross_attention = cross_attention["cross"]  # Transformer.attention_weights()
    per_layer = cross_attention if isinstance(cross_attention, (list, tuple)) else [cross_attention]
    layers = []
    for w in per_layer:
        a = to_numpy(w).astype(float)
        if a.ndim == 4:
            if a.shape[0] != 1:
                raise ValueError(
                    f"generation_stepper shows one sentence; got a batch of {a.shape[0]} (index it, e.g. weights[i:i+1])"
                )
            a = a[0]
        while a.ndim < 3:
            a = a[None]
        if a.ndim != 3:
            raise ValueError(f"cross-attention must be (H, T, S) or (1, H, T, S), got shape {tuple(a.shape)}")
        layers.append(a)
    return layers


class GenerationStepper(FigureWidget):
    """Widget returned by :func:`generation_stepper`."""

    _kind_name = "generation stepper"

    def __init__(self, src_tokens, tgt_tokens, cross_attention, title: str | None = None):
        self._layers = _cross_layers(cross_attention)
        src = src_tokens[0] if src_tokens and not is_one_sentence(src_tokens) else src_tokens
        tgt = tgt_tokens[0] if tgt_tokens and not is_one_sentence(tgt_tokens) else tgt_tokens
        self.src_tokens = [str(t) for t in src]
        self.tgt_tokens = [str(t) for t in tgt]
        _, T, S = self._layers[0].shape
        if len(self.tgt_tokens) > T or len(self.src_tokens) > S:
            raise ValueError(
                f"{len(self.tgt_tokens)} target x {len(self.src_tokens)} source tokens do not fit cross-attention "
                f"of {T} x {S}: pass the generated words (one per attention row) and the source words"
            )
        if not self.tgt_tokens:
            raise ValueError("tgt_tokens is empty: nothing to step through")
        self._title = title
        style = {"description_width": "60px"}
        controls: dict[str, widgets.Widget] = {
            "step": number_box(0, 0, len(self.tgt_tokens) - 1, "step", style, continuous_update=True),
        }
        if len(self._layers) > 1:
            controls["layer"] = number_box(
                len(self._layers) - 1, 0, len(self._layers) - 1, "layer", style, continuous_update=True
            )
        n_heads = self._layers[0].shape[0]
        if n_heads > 1:
            controls["head"] = widgets.Dropdown(
                options=head_options(n_heads), value=MEAN_OF_HEADS, description="head", style=style
            )
        self.html = widgets.HTML()
        super().__init__(controls, extra=[self.html])
        self._update()

    @property
    def step(self) -> int:
        return self.controls["step"].value

    @property
    def layer(self) -> int:
        return self.controls["layer"].value if "layer" in self.controls else 0

    @property
    def head(self):
        return self.controls["head"].value if "head" in self.controls else 0

    def current_matrix(self) -> np.ndarray:
        """The ``(T, S)`` cross-attention of the selected layer and head, trimmed to the real tokens."""
        return select_head(self._layers[self.layer], self.head)[: len(self.tgt_tokens), : len(self.src_tokens)]

    def current_weights(self) -> np.ndarray:
        """The ``(S,)`` weights over the source words at the current step."""
        return self.current_matrix()[self.step]

    def current_prefix(self) -> list[str]:
        """The target words generated up to and including the current step."""
        return self.tgt_tokens[: self.step + 1]

    def describe(self) -> str:
        word = self.tgt_tokens[self.step]
        text = f"step {self.step}: generating {word!r}, layer {self.layer}, {head_label(self.head)}"
        return (f"{self._title}: " if self._title else "") + text

    def _before_draw(self) -> None:
        done = "".join(
            f"<span style='margin-right:0.4em'>{html.escape(w)}</span>" for w in self.tgt_tokens[: self.step]
        )
        current = html.escape(self.tgt_tokens[self.step])
        self.html.value = (
            "<div style='font-size:1.15em;line-height:1.8'><b>generated so far:</b> "
            f"{done}<mark style='background:#ffd8a8;padding:0 0.25em;border-radius:3px'><b>{current}</b></mark></div>"
        )

    def _draw(self) -> Figure:
        matrix = self.current_matrix()  # (T, S)
        T, S = matrix.shape
        t = self.step
        width = min(14.0, max(5.5, 0.5 * S + 2.5))
        fig = widget_figure(width, 2.4 + min(7.0, 0.38 * T + 0.8))
        grid = fig.add_gridspec(2, 1, height_ratios=[2.0, max(1.5, 0.38 * T)])
        ax_bar = fig.add_subplot(grid[0])
        ax_heat = fig.add_subplot(grid[1], sharex=ax_bar)
        # Heatmap cells sit at integer + 0.5, so the bars line up with the columns below.
        ax_bar.bar(np.arange(S) + 0.5, matrix[t], width=0.8, color=HIGHLIGHT_COLOR)
        ax_bar.set_ylim(0, 1.05)
        ax_bar.set_ylabel("weight")
        ax_bar.set_title(self.describe(), fontsize=11)
        # The German words above the bars too: under the heatmap they can be a screen away from them.
        ax_bar.tick_params(axis="x", labelbottom=False, labeltop=True, top=True, labelrotation=45, labelsize=11)
        for label in ax_bar.get_xticklabels(which="both"):
            label.set_horizontalalignment("left")
        ax_bar.grid(alpha=0.3, axis="y")
        draw_attention(
            ax_heat,
            matrix,
            self.src_tokens,
            self.tgt_tokens,
            cbar=False,
            xlabel="source tokens (keys)",
            ylabel="step: the token it writes (queries)",
        )
        ax_heat.set_aspect("auto")
        ax_heat.add_patch(Rectangle((0, t), S, 1, fill=False, edgecolor=HIGHLIGHT_COLOR, linewidth=2.5))
        # The colour scale, taken from both panels alike so that the bars stay over their columns.
        fig.colorbar(ax_heat.collections[0], ax=[ax_bar, ax_heat], shrink=0.6, label="attention weight")
        return fig


def generation_stepper(src_tokens, tgt_tokens, cross_attention, title: str | None = None) -> GenerationStepper:
    """Step through a generated translation and see where each word looked in the source.

    Args:
        src_tokens: the source words (one list).
        tgt_tokens: the generated words, one per cross-attention row: row
            ``t`` is the decoder query that produced ``tgt_tokens[t]`` (so pass
            the output words, without ``<bos>``). Fewer words than rows trims
            the extra (padding) rows.
        cross_attention: ``(H, T, S)``, ``(1, H, T, S)``, a list over layers of
            those, or the dict of ``Transformer.attention_weights()`` (its
            ``"cross"`` entry is used).
        title: optional prefix of the figure title.

    Returns:
        A ``VBox``: a ``step`` box (plus ``layer``, default the last, and
        ``head`` with "mean of heads" when there is a choice), the target
        prefix with the current word highlighted (``.html``), and a figure:
        the current step's weights over the source words as bars above the
        whole cross-attention heatmap with the current row outlined. For tests:
        ``.controls``, ``.current_weights()``, ``.current_matrix()``,
        ``.current_prefix()``, ``.figure``.
    """
    return GenerationStepper(src_tokens, tgt_tokens, cross_attention, title)
