"""The attention explorer: one heatmap, with controls for kind, layer, head and sentence.

``attention_explorer`` takes what ``Transformer.attention_weights()`` returns (or
a single tensor) and the tokens, and shows one attention matrix at a time with
the tokens on its axes: encoder self-attention, decoder masked self-attention or
cross-attention, any layer, any head or their mean, any sentence of the batch.
"""

from __future__ import annotations

from typing import Mapping

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from transformer_lessons.viz.common import heatmap_size, is_one_sentence, to_numpy
from transformer_lessons.viz.widgets import (
    MEAN_OF_HEADS,
    FigureWidget,
    head_label,
    head_options,
    number_box,
    select_head,
    widget_figure,
)
from transformer_lessons.viz.heatmaps import draw_attention

KIND_LABELS = {
    "encoder": "encoder self-attention",
    "decoder_self": "decoder masked self-attention",
    "cross": "cross-attention (decoder → encoder)",
}


def _token_batch(tokens, batch: int, name: str) -> list[list[str]] | None:
    """A list (over the batch) of token lists; a single list is one sentence."""
    if tokens is None:
        return None
    if is_one_sentence(tokens):
        if batch != 1:
            raise ValueError(
                f"{name} is one sentence but the attention holds a batch of {batch}: pass a list of {batch} token lists"
            )
        return [[str(t) for t in tokens]]
    if len(tokens) != batch:
        raise ValueError(f"{name} has {len(tokens)} sentences but the attention holds a batch of {batch}")
    return [[str(t) for t in sentence] for sentence in tokens]


def _attention_layers(attention) -> dict[str, list[np.ndarray]]:
    """Normalise the accepted inputs to ``{kind: [(B, H, T, S) per layer]}``."""
    if isinstance(attention, Mapping):
        items = list(attention.items())
    elif isinstance(attention, (list, tuple)):
        items = [("attention", attention)]  # one kind, a list over layers
    else:
        items = [("attention", [attention])]  # one kind, one layer
    layers = {}
    for kind, per_layer in items:
        if not isinstance(per_layer, (list, tuple)):
            per_layer = [per_layer]
        if not per_layer:
            raise ValueError(f"attention[{kind!r}] has no layers")
        arrays = []
        for w in per_layer:
            a = to_numpy(w).astype(float)
            while a.ndim < 4:
                a = a[None]  # (H, T, S) -> (1, H, T, S); (T, S) -> (1, 1, T, S)
            if a.ndim != 4:
                raise ValueError(f"attention weights must be (B, H, T, S) or (H, T, S), got shape {tuple(a.shape)}")
            arrays.append(a)
        layers[kind] = arrays
    batches = {a.shape[0] for arrays in layers.values() for a in arrays}
    if len(batches) != 1:
        raise ValueError(f"every attention tensor must hold the same batch, got batch sizes {sorted(batches)}")
    return layers


class AttentionExplorer(FigureWidget):
    """Widget returned by :func:`attention_explorer`."""

    _kind_name = "attention explorer"

    def __init__(
        self,
        attention,
        src_tokens,
        tgt_tokens=None,
        title: str | None = None,
        *,
        tgt_inputs=None,
        kind: str | None = None,
        layer: int = 0,
        head=MEAN_OF_HEADS,
    ):
        self._layers = _attention_layers(attention)
        first = next(iter(self._layers.values()))[0]
        batch = first.shape[0]
        self._src = _token_batch(src_tokens, batch, "src_tokens")
        self._tgt = _token_batch(tgt_tokens, batch, "tgt_tokens") if tgt_tokens is not None else self._src
        self._tgt_in = _token_batch(tgt_inputs, batch, "tgt_inputs") if tgt_inputs is not None else None
        self._title = title
        kind = next(iter(self._layers)) if kind is None else kind
        if kind not in self._layers:
            raise ValueError(
                f"kind={kind!r} is not in the attention given; it holds {', '.join(map(repr, self._layers))}"
            )
        n_layers = len(self._layers[kind])
        if not -n_layers <= layer < n_layers:
            raise ValueError(
                f"layer={layer} is out of range: {kind!r} has {n_layers} layer(s) (negative counts from the last)"
            )
        layer %= n_layers
        n_heads0 = self._layers[kind][layer].shape[1]
        if head != MEAN_OF_HEADS and not (isinstance(head, int) and 0 <= head < n_heads0):
            raise ValueError(f"head={head!r} must be {MEAN_OF_HEADS!r} or a head index below {n_heads0}")
        self._state = {"kind": kind, "layer": layer, "head": head, "sentence": 0}
        max_heads = max(a.shape[1] for arrays in self._layers.values() for a in arrays)
        max_layers = max(len(arrays) for arrays in self._layers.values())

        controls: dict[str, widgets.Widget] = {}
        style = {"description_width": "70px"}
        if len(self._layers) > 1:
            controls["kind"] = widgets.Dropdown(
                options=[(KIND_LABELS.get(k, k), k) for k in self._layers],
                value=self._state["kind"],
                description="attention",
                style=style,
                layout=widgets.Layout(width="380px"),
            )
        if max_layers > 1:
            controls["layer"] = number_box(layer, 0, n_layers - 1, "layer", style)
        if max_heads > 1:
            controls["head"] = widgets.Dropdown(
                options=head_options(n_heads0), value=head, description="head", style=style
            )
        if batch > 1:
            controls["sentence"] = number_box(0, 0, batch - 1, "sentence", style)
        super().__init__(controls)
        self._update()

    def _axis_tokens(self, kind: str) -> tuple[list[str], list[str]]:
        """(row tokens, column tokens) of the current sentence for this kind of attention."""
        b = self._state["sentence"]
        src = self._src[b]
        tgt = self._tgt[b]
        if kind == "encoder":
            return src, src
        if kind == "decoder_self":  # rows: the step (what it writes); columns: what each position reads
            return tgt, (self._tgt_in[b] if self._tgt_in is not None else tgt)
        return tgt, src  # cross-attention, or a single tensor: target rows over source columns

    def _before_draw(self) -> None:
        self._busy = True
        try:
            for name in ("kind", "layer", "head", "sentence"):
                if name in self.controls:
                    self._state[name] = self.controls[name].value
            arrays = self._layers[self._state["kind"]]
            if "layer" in self.controls:  # kinds may have different depths
                box = self.controls["layer"]
                box.max = len(arrays) - 1
                box.disabled = len(arrays) == 1
                self._state["layer"] = box.value
            n_heads = arrays[self._state["layer"]].shape[1]
            if "head" in self.controls:
                dropdown = self.controls["head"]
                if len(dropdown.options) != n_heads + 1:
                    keep = (
                        dropdown.value if dropdown.value == MEAN_OF_HEADS or dropdown.value < n_heads else MEAN_OF_HEADS
                    )
                    dropdown.options = head_options(n_heads)
                    dropdown.value = keep
                self._state["head"] = dropdown.value
            elif n_heads == 1:
                self._state["head"] = 0
        finally:
            self._busy = False

    def current_matrix(self) -> np.ndarray:
        """The ``(T, S)`` weights on screen, trimmed to the sentence's real tokens."""
        s = self._state
        weights = self._layers[s["kind"]][s["layer"]][s["sentence"]]  # (H, T, S)
        rows, cols = self._axis_tokens(s["kind"])
        _, T, S = weights.shape
        if len(rows) > T or len(cols) > S:
            raise ValueError(
                f"{len(rows)} query tokens x {len(cols)} key tokens do not fit {s['kind']} weights of shape "
                f"{T} x {S} (sentence {s['sentence']}): are src_tokens and tgt_tokens swapped?"
            )
        return select_head(weights, s["head"])[: len(rows), : len(cols)]  # drop padding rows/columns

    def current_tokens(self) -> tuple[list[str], list[str]]:
        """(query tokens down the rows, key tokens along the columns) on screen."""
        return self._axis_tokens(self._state["kind"])

    def describe(self) -> str:
        s = self._state
        parts = []
        if len(self._layers) > 1 or s["kind"] in KIND_LABELS:  # a lone unnamed tensor has no kind worth naming
            parts.append(KIND_LABELS.get(s["kind"], s["kind"]))
        if max(len(arrays) for arrays in self._layers.values()) > 1:  # "layer 0" means nothing with one layer
            parts.append(f"layer {s['layer']}")
        parts.append(head_label(s["head"]))
        if len(self._src) > 1:
            parts.append(f"sentence {s['sentence']}")
        return (f"{self._title}: " if self._title else "") + ", ".join(parts)

    def _draw(self) -> Figure:
        matrix = self.current_matrix()
        rows, cols = self.current_tokens()
        kind = self._state["kind"]
        xlabel, ylabel = {
            "encoder": ("source tokens (keys)", "source tokens (queries)"),
            "decoder_self": ("target tokens (keys)", "target tokens (queries)"),
        }.get(kind, ("source tokens (keys)", "target tokens (queries)"))
        if self._tgt_in is not None and kind in (
            "decoder_self",
            "cross",
        ):  # rows say which convention: what a step writes
            ylabel = "step: the token it writes (queries)"
            if kind == "decoder_self":
                xlabel = "the tokens it reads (keys)"
        if kind not in KIND_LABELS and self._tgt is self._src:
            xlabel, ylabel = "keys", "queries"
        fig = widget_figure(*heatmap_size(*matrix.shape))
        ax = fig.add_subplot()
        draw_attention(ax, matrix, cols, rows, xlabel=xlabel, ylabel=ylabel)
        ax.set_title(self.describe(), fontsize=11)
        return fig


def attention_explorer(
    attention,
    src_tokens,
    tgt_tokens=None,
    title: str | None = None,
    *,
    tgt_inputs=None,
    kind: str | None = None,
    layer: int = 0,
    head=MEAN_OF_HEADS,
) -> AttentionExplorer:
    """Interactive heatmap of attention weights: pick kind, layer, head and sentence.

    Args:
        attention: ``Transformer.attention_weights()`` (a dict ``kind -> list
            over layers of (B, H, T, S)`` with kinds ``encoder``,
            ``decoder_self``, ``cross``), or one tensor ``(B, H, T, S)`` /
            ``(H, T, S)``, or a list over layers of such tensors.
        src_tokens: the source tokens: a list over the batch of token lists,
            or one token list when ``B == 1``. Shorter lists than the tensor
            (padded batches) trim the padding rows and columns away.
        tgt_tokens: the target tokens, same form; they label the queries of
            ``decoder_self`` and ``cross`` (and the rows of a single tensor).
            Default: ``src_tokens``.
        title: optional prefix of the heatmap title.
        tgt_inputs: for a translation, the tokens the decoder *reads* at each
            step (``<bos>`` and the words so far), while ``tgt_tokens`` are the
            words each step *writes*. Given, the rows of ``decoder_self`` and
            ``cross`` are labelled by what the step writes (the convention of
            :func:`generation_stepper` and :func:`translator`), the columns of
            ``decoder_self`` by what the positions read, and the axis labels say so.
        kind, layer, head: the view to open on (default: the first kind,
            layer 0, mean of heads); ``layer=-1`` is the last layer. A trained
            translator is best met on ``kind="cross", layer=-1``.

    Returns:
        A ``VBox``: controls (``attention`` kind, ``layer``, ``head`` with
        "mean of heads", ``sentence``; only those with more than one choice)
        over the heatmap. Axes: encoder source x source, decoder
        self-attention target x target, cross-attention target rows x source
        columns. For tests and scripts: ``.controls`` (name -> widget),
        ``.current_matrix()`` (the 2-D array shown), ``.current_tokens()``,
        ``.figure``.
    """
    return AttentionExplorer(
        attention, src_tokens, tgt_tokens, title, tgt_inputs=tgt_inputs, kind=kind, layer=layer, head=head
    )


def translation_attention(details: list[dict]) -> tuple[dict, list, list, list]:
    """What :func:`attention_explorer` takes, from ``translate(..., return_attention=True)``'s details.

    Sentences of different lengths share one tensor per kind and layer, padded with zeros (the
    explorer trims them away again). Returns ``(attention, src_tokens, writes, reads)``:
    ``attention`` maps a kind to a list over layers of ``(B, H, T, S)``; row ``t`` of the decoder's
    kinds is the step that *writes* ``writes[b][t]`` while it *reads* ``reads[b][t]`` (``<bos>``,
    then the words written so far).
    """
    import torch
    import torch.nn.functional as F

    n_layers = len(details[0]["attention"]["cross"])
    S = max(len(d["src_tokens"]) for d in details)
    T = max(len(d["tgt_tokens"]) for d in details)
    size = {"encoder": (S, S), "decoder_self": (T, T), "cross": (T, S)}

    def pad_to(w, rows, cols):  # (1, H, t, s) -> (1, H, rows, cols)
        return F.pad(w, (0, cols - w.size(-1), 0, rows - w.size(-2)))

    attention = {
        kind: [
            torch.cat([pad_to(d["attention"][kind][layer], *size[kind]) for d in details]) for layer in range(n_layers)
        ]
        for kind in size
    }
    src_tokens = [d["src_tokens"] for d in details]
    writes = [d["tgt_tokens"] for d in details]
    reads = [["<bos>", *d["tgt_tokens"][:-1]] for d in details]
    return attention, src_tokens, writes, reads


def translation_explorer(model, sentences, src_vocab, tgt_vocab, beam_size: int = 4, title: str | None = None):
    """Translate ``sentences`` and open :func:`attention_explorer` on the attention of each translation.

    The explorer opens on the last layer's cross-attention (the view closest to a word alignment).
    Returns ``(texts, details, explorer)``: the translations, ``translate``'s details (tokens and
    every attention weight), and the widget.
    """
    from transformer_lessons import translation

    texts, details = translation.translate(
        model, list(sentences), beam_size=beam_size, src_vocab=src_vocab, tgt_vocab=tgt_vocab, return_attention=True
    )
    attention, src_tokens, writes, reads = translation_attention(details)
    explorer = attention_explorer(attention, src_tokens, writes, tgt_inputs=reads, kind="cross", layer=-1, title=title)
    return texts, details, explorer
