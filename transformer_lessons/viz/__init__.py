"""Every plot and widget of the course: attention heatmaps, masks, positional
encodings, training curves and step-by-step generation.

This is the only part of the package that imports matplotlib, seaborn and
ipywidgets; notebooks import it by name (``from transformer_lessons import viz``)
so that ``import transformer_lessons`` stays cheap (the package's ``__init__``
never imports ``viz``).

One file per thing you look at; every name below is also ``viz.<name>``:

* ``heatmaps.py``: ``plot_attention``, ``plot_heads``, ``plot_mask``;
* ``masks.py``: ``plot_masks`` (masks side by side, one legend), ``plot_shifted_target`` (the causal mask beside
  the shifted-right target);
* ``positional.py``: ``plot_positional_encoding``, ``positional_encoding_explorer``;
* ``training.py``: ``plot_history``, ``plot_learning_rate``, ``plot_label_smoothing``;
* ``explorer.py``: ``attention_explorer`` (pick kind, layer, head, sentence), and
  ``translation_explorer`` (translate sentences, then explore their attention);
* ``stepper.py``: ``generation_stepper`` (where each generated word looked);
* ``translator.py``: ``translator`` (type German, read English, step through it);
* ``kv_cache.py``: ``plot_kv_cache`` (what a key/value cache holds), ``plot_decode_times``;
* ``lab.py``: notebook 14's lab of later changes: ``lab_record``, ``lab_table``, ``plot_lab``, ``plot_warmup``,
  ``plot_long``, ``lab_explorer`` (two runs side by side);
* ``beam_tree.py``: ``plot_beam_tree`` (beam search as a tree: kept, finished, dropped, beside greedy),
  ``beam_tree_explorer`` (type German, choose the beam and α, see the tree);
* ``error_analysis.py``: ``plot_bleu_by_length``, ``plot_beam_vs_greedy``, ``error_browser`` (the
  test sentences from worst to best, with their attention);
* ``rotary.py``: ``plot_rotary_pairs`` (a query and a key turned by their positions: the angle depends on m - n);
* ``ddp.py``: ``plot_ddp_step`` (one batch split over ranks), ``plot_ddp_overlap`` (a schematic of DDP's buckets
  being all-reduced while backward goes on);
* ``confidence.py``: ``plot_signal_vs_quality`` (the confidence signal against chrF, and on MS COCO);
* ``heads.py``: ``plot_head_importance``, ``plot_pruning_curve`` (which heads matter),
  ``head_switchboard`` (switch heads off, read the translation again);
* ``widgets.py`` and ``common.py``: what the widgets and the plots share, public so that each picture
  (and a new one) imports them by name.

Plot functions (``plot_*``) draw with pyplot and return the Axes or Figure, so
a notebook shows them inline. Widgets (``attention_explorer``,
``positional_encoding_explorer``, ``generation_stepper``) return a ``VBox`` of
controls over an ``Output`` showing a PNG of the current figure, and expose:

* ``.controls``: ``{name: widget}`` for the controls that have more than one choice;
* ``.current_matrix()`` (and friends): the numbers on screen, as numpy arrays;
* ``.figure``: the last matplotlib Figure drawn.

Displayed in a notebook, a widget also leaves a static copy of its picture, an
output of its own that HTML exports, GitHub and nbviewer show and that is hidden
wherever the widget runs live. ``widgets.py`` says why a widget shows its figure
the way it does (so that nbval and ``nbconvert --execute`` agree on a notebook's
outputs, and an export is never an empty box).
"""

from __future__ import annotations

from transformer_lessons.viz.widgets import HIGHLIGHT_COLOR, MEAN_OF_HEADS, WIDGET_DPI
from transformer_lessons.viz.explorer import (
    KIND_LABELS,
    AttentionExplorer,
    attention_explorer,
    translation_attention,
    translation_explorer,
)
from transformer_lessons.viz.beam_tree import BeamTreeExplorer, beam_tree_explorer, plot_beam_tree
from transformer_lessons.viz.confidence import plot_signal_vs_quality
from transformer_lessons.viz.ddp import plot_ddp_overlap, plot_ddp_step
from transformer_lessons.viz.rotary import plot_rotary_pairs
from transformer_lessons.viz.error_analysis import (
    ErrorBrowser,
    error_browser,
    plot_beam_vs_greedy,
    plot_bleu_by_length,
)
from transformer_lessons.viz.kv_cache import plot_decode_times, plot_kv_cache
from transformer_lessons.viz.masks import plot_masks, plot_shifted_target
from transformer_lessons.viz.lab import (
    LabExplorer,
    lab_explorer,
    lab_record,
    lab_table,
    plot_lab,
    plot_long,
    plot_warmup,
)
from transformer_lessons.viz.heads import HeadSwitchboard, head_switchboard, plot_head_importance, plot_pruning_curve
from transformer_lessons.viz.heatmaps import (
    ALLOWED_COLOR,
    ATTENTION_CMAP,
    BLOCKED_COLOR,
    plot_attention,
    plot_heads,
    plot_mask,
)
from transformer_lessons.viz.positional import (
    PE_CMAP,
    PositionalEncodingExplorer,
    plot_positional_encoding,
    positional_encoding_explorer,
)
from transformer_lessons.viz.stepper import GenerationStepper, generation_stepper
from transformer_lessons.viz.training import plot_history, plot_label_smoothing, plot_learning_rate
from transformer_lessons.viz.translator import MAX_WIDGET_BEAM, Translator, translator

__all__ = [
    "attention_explorer",
    "translation_attention",
    "translation_explorer",
    "beam_tree_explorer",
    "error_browser",
    "generation_stepper",
    "lab_explorer",
    "lab_record",
    "lab_table",
    "head_switchboard",
    "plot_attention",
    "plot_beam_tree",
    "plot_beam_vs_greedy",
    "plot_bleu_by_length",
    "plot_ddp_overlap",
    "plot_ddp_step",
    "plot_decode_times",
    "plot_head_importance",
    "plot_signal_vs_quality",
    "plot_heads",
    "plot_history",
    "plot_kv_cache",
    "plot_lab",
    "plot_label_smoothing",
    "plot_learning_rate",
    "plot_long",
    "plot_mask",
    "plot_masks",
    "plot_positional_encoding",
    "plot_shifted_target",
    "plot_warmup",
    "plot_pruning_curve",
    "plot_rotary_pairs",
    "positional_encoding_explorer",
    "translator",
]
# Stay importable as viz.<name> (isinstance, type hints, the colours), as they were from the single viz.py:
__all__ += [
    "ALLOWED_COLOR",
    "ATTENTION_CMAP",
    "BLOCKED_COLOR",
    "HIGHLIGHT_COLOR",
    "KIND_LABELS",
    "MAX_WIDGET_BEAM",
    "MEAN_OF_HEADS",
    "PE_CMAP",
    "WIDGET_DPI",
    "AttentionExplorer",
    "BeamTreeExplorer",
    "ErrorBrowser",
    "GenerationStepper",
    "LabExplorer",
    "HeadSwitchboard",
    "PositionalEncodingExplorer",
    "Translator",
]

from transformer_lessons.viz.widgets import compact_inline_figures  # noqa: E402

compact_inline_figures()  # the notebooks' figures in 256 colours: a third of the bytes, the same picture
