"""What the widgets share: a figure shown as a PNG under the controls, and the head choice.

A widget (``attention_explorer``, ``positional_encoding_explorer``,
``generation_stepper``) is a ``_FigureWidget``: a ``VBox`` of controls over an
``Output`` showing a PNG of the current figure; a change of any control redraws.

Why the widgets set ``Output.outputs`` instead of ``with out: display(fig)``:
output captured by an ``Output`` context reaches the kernel's iopub channel as
ordinary ``display_data`` (the *frontend* redirects it). ``nbconvert --execute``
files it inside the widget state while nbval counts it as cell output, so the
two disagree and a notebook could never pass nbval. Setting the ``outputs``
trait travels as widget state only, so both see the same thing. The widget's
own display also carries the PNG (``image/png``) and a short stable text: a
notebook viewer without live widgets (GitHub, nbviewer) still shows the
heatmap, and nbval compares only the text.
"""

from __future__ import annotations

import base64
import io
from typing import Sequence

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

HIGHLIGHT_COLOR = "#e8590c"  # the selected row/column/step in widgets
MEAN_OF_HEADS = "mean"  # value of the head control that averages the heads
WIDGET_DPI = 80  # PNGs shown by widgets: sharp enough on screen, small in the .ipynb


def _png_bytes(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=WIDGET_DPI, bbox_inches="tight")
    return buffer.getvalue()


def _widget_figure(width: float, height: float) -> Figure:
    # A Figure outside pyplot: the inline backend does not show it a second time
    # at the end of the cell, and it is freed with the widget (no plt.close needed).
    return Figure(figsize=(width, height), layout="constrained")


class _FigureWidget(widgets.VBox):
    """Controls above an ``Output`` that shows the current figure as a PNG."""

    _kind_name = "figure widget"

    def __init__(self, controls: dict[str, widgets.Widget], extra: Sequence[widgets.Widget] = ()):
        super().__init__()
        self.controls = dict(controls)
        self.output = widgets.Output()
        self.figure: Figure | None = None
        self._png = b""
        self._busy = False  # set while one change adjusts other controls: draw once
        self.children = [*self.controls.values(), *extra, self.output]
        for control in self.controls.values():
            control.observe(self._on_change, names="value")

    def _on_change(self, _change=None) -> None:
        if not self._busy:
            self._update()

    def _update(self) -> None:
        self._before_draw()
        fig = self._draw()
        self.figure = fig
        self._png = _png_bytes(fig)
        self.output.outputs = (
            {
                "output_type": "display_data",
                "data": {"image/png": base64.b64encode(self._png).decode("ascii"), "text/plain": self.describe()},
                "metadata": {},
            },
        )

    def _before_draw(self) -> None:  # hook: update labels etc.
        pass

    def _draw(self) -> Figure:  # pragma: no cover - every subclass draws
        raise NotImplementedError

    def describe(self) -> str:
        """One line saying what is shown (also the widget's plain-text display)."""
        return self._kind_name

    def _repr_mimebundle_(self, **kwargs):
        data = super()._repr_mimebundle_(**kwargs) or {}
        # Stable text for nbval and text-only viewers; the PNG for viewers without
        # live widgets. Frontends with widgets rank the widget view above both.
        data["text/plain"] = self.describe()
        if self._png:
            data["image/png"] = base64.b64encode(self._png).decode("ascii")
        return data


def _head_options(n_heads: int) -> list[tuple[str, object]]:
    return [("mean of heads", MEAN_OF_HEADS)] + [(f"head {h}", h) for h in range(n_heads)]


def _head_label(head) -> str:
    return "mean of heads" if head == MEAN_OF_HEADS else f"head {head}"


def _select_head(weights: np.ndarray, head) -> np.ndarray:
    """``(H, T, S)`` -> ``(T, S)``: one head, or the average over heads."""
    return weights.mean(axis=0) if head == MEAN_OF_HEADS else weights[head]
