"""What the widgets share: a figure shown as a PNG under the controls, its static copy, and the head choice.

A widget (``attention_explorer``, ``positional_encoding_explorer``,
``generation_stepper``) is a ``FigureWidget``: a ``VBox`` of controls over an
``Output`` showing a PNG of the current figure; a change of any control redraws.

Why the widgets set ``Output.outputs`` instead of ``with out: display(fig)``:
output captured by an ``Output`` context reaches the kernel's iopub channel as
ordinary ``display_data`` (the *frontend* redirects it). ``nbconvert --execute``
files it inside the widget state while nbval counts it as cell output, so the
two disagree and a notebook could never pass nbval. Setting the ``outputs``
trait travels as widget state only, so both see the same thing.

Why a widget leaves two outputs, itself and a static copy of its picture: where
no live widget can run (an HTML export, GitHub, nbviewer) the picture must
still be there. Inside the widget's own output it cannot be: an HTML export
(``jupyter nbconvert --to html``) prefers the widget view to every other entry
of that output whenever the notebook saved the widget's state (``nbconvert
--execute`` does), and that view is an empty box until a script from a CDN
draws it, which offline never happens. So :meth:`StaticCopies.show` displays
the PNG once more as an output of its own, marked (a PNG text chunk) so that its
bytes differ from the live picture's, and puts a CSS rule inside the widget that
hides exactly that image (``img[src$="<the end of its data: URL>"]``). The rule
exists only where the widget is drawn live, so in JupyterLab the learner sees
the picture once, live, while every static view shows the copy. (A front end
that shows PNGs other than as ``data:`` URLs, as VS Code may, shows the copy
under the live widget.) The widget's own output keeps only a short stable text
(nbval compares it); the copy holds only ``image/png``, which nbval does not
compare, so saved notebooks and fresh runs still agree.

Why the widgets build their display bundle themselves: ipywidgets 8 builds a
widget's bundle (its live view, ``application/vnd.jupyter.widget-view+json``,
and a text) in ``Widget._repr_mimebundle_``, but Colab ships ipywidgets 7.7.1,
where that method does not exist: 7.x displays a widget in
``Widget._ipython_display_``, which builds the same bundle, displays it and then
calls ``_handle_displayed`` (the ``on_displayed`` callbacks). A widget that
called ``super()._repr_mimebundle_()`` failed on Colab with ``AttributeError``.
:class:`LiveWithStaticCopy` makes the bundle on both (ipywidgets' own method
where there is one) and does what 7.x does after displaying it.
"""

from __future__ import annotations

import base64
import hashlib
import io
import struct
import zlib
from typing import Sequence

import ipywidgets as widgets
import numpy as np
from IPython.display import display
from matplotlib.figure import Figure

HIGHLIGHT_COLOR = "#e8590c"  # the selected row/column/step in widgets
MEAN_OF_HEADS = "mean"  # value of the head control that averages the heads
WIDGET_DPI = 80  # PNGs shown by widgets: sharp enough on screen, small in the .ipynb
STATIC_COPY_NOTE = "transformer_lessons static copy"  # the text chunk that marks a widget's static copy
_PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"  # the IEND chunk every PNG ends with
_TAIL_CHARS = 64  # the static copy's base64 ends with these: its text chunk (with the hash) and IEND
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"  # the MIME type of a live widget's output
# ipywidgets 7.x (Colab's 7.7.1) has no Widget._repr_mimebundle_: it displays in Widget._ipython_display_.
_IPYWIDGETS_7 = not hasattr(widgets.Widget, "_repr_mimebundle_")


def _png_bytes(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=WIDGET_DPI, bbox_inches="tight")
    return buffer.getvalue()


def widget_figure(width: float, height: float) -> Figure:
    # A Figure outside pyplot: the inline backend does not show it a second time
    # at the end of the cell, and it is freed with the widget (no plt.close needed).
    return Figure(figsize=(width, height), layout="constrained")


def static_copy(png: bytes) -> bytes:
    """``png`` with a text chunk saying it is a static copy, placed before ``IEND``.

    The picture is the same; the bytes, and so the end of its base64 ``data:``
    URL, differ from the live picture's (the chunk names a hash of ``png``).
    """
    if not png.endswith(_PNG_END):
        raise ValueError("expected a PNG ending with its IEND chunk")
    text = b"Comment\x00" + f"{STATIC_COPY_NOTE} {hashlib.sha256(png).hexdigest()[:16]}".encode("ascii")
    chunk = struct.pack(">I", len(text)) + b"tEXt" + text + struct.pack(">I", zlib.crc32(b"tEXt" + text))
    return png[: -len(_PNG_END)] + chunk + _PNG_END


class StaticCopies(widgets.HTML):
    """An invisible child of a widget: the CSS that hides the widget's static copies while it is drawn live."""

    def __init__(self):
        super().__init__(layout=widgets.Layout(display="none"))
        self._rules: dict[str, None] = {}  # an ordered set

    def show(self, png: bytes) -> None:
        """Display a static copy of ``png`` as an output of its own, hidden wherever this widget is live."""
        if not png:
            return
        data = base64.b64encode(static_copy(png)).decode("ascii")
        display({"image/png": data}, raw=True)
        image = f'img[src$="{data[-_TAIL_CHARS:]}"]'
        # The image itself, then (JupyterLab, and `:has` permitting) its whole output row with the prompt's space.
        self._rules[f"{image} {{display: none !important}}"] = None
        self._rules[f".jp-OutputArea-child:has(> .jp-OutputArea-output > {image}) {{display: none !important}}"] = None
        self.value = "<style>\n" + "\n".join(self._rules) + "\n</style>"


def widget_bundle(widget: widgets.Widget, text: str) -> dict:
    """What a notebook shows of ``widget``: its live view, and ``text`` for nbval and text-only viewers.

    ipywidgets 8 makes the view entry in ``Widget._repr_mimebundle_``; on 7.x it is the
    entry that 7.x's ``Widget._ipython_display_`` writes (protocol 2.0, the widget's model id).
    """
    if _IPYWIDGETS_7:
        data = {WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": widget.model_id}}
    else:
        data = dict(widgets.Widget._repr_mimebundle_(widget) or {})
    data["text/plain"] = text
    return data


class LiveWithStaticCopy:
    """How a course widget displays itself: the live widget with a stable text, then a static copy of its picture.

    A mixin, first among the bases of a ``VBox`` subclass that has a ``_static_copies``
    child (:class:`StaticCopies`), a ``describe()`` and a ``_static_png()``.
    """

    def describe(self) -> str:  # pragma: no cover - every widget says what it shows
        raise NotImplementedError

    def _static_png(self) -> bytes:  # pragma: no cover - every widget has its picture
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs):
        return widget_bundle(self, self.describe())

    def _ipython_display_(self, **kwargs) -> None:
        """The widget, then a static copy of its picture (see the module's docstring)."""
        display(self._repr_mimebundle_(), raw=True)
        if _IPYWIDGETS_7:
            self._handle_displayed(**kwargs)  # what 7.x's Widget._ipython_display_ does after displaying
        self._static_copies.show(self._static_png())


class FigureWidget(LiveWithStaticCopy, widgets.VBox):
    """Controls above an ``Output`` that shows the current figure as a PNG."""

    _kind_name = "figure widget"

    def __init__(self, controls: dict[str, widgets.Widget], extra: Sequence[widgets.Widget] = ()):
        super().__init__()
        self.controls = dict(controls)
        self.output = widgets.Output()
        self.figure: Figure | None = None
        self._png = b""
        self._busy = False  # set while one change adjusts other controls: draw once
        self._static_copies = StaticCopies()
        self.children = [*self.controls.values(), *extra, self.output, self._static_copies]
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

    def _static_png(self) -> bytes:
        return self._png


def head_options(n_heads: int) -> list[tuple[str, object]]:
    return [("mean of heads", MEAN_OF_HEADS)] + [(f"head {h}", h) for h in range(n_heads)]


def head_label(head) -> str:
    return "mean of heads" if head == MEAN_OF_HEADS else f"head {head}"


def select_head(weights: np.ndarray, head) -> np.ndarray:
    """``(H, T, S)`` -> ``(T, S)``: one head, or the average over heads."""
    return weights.mean(axis=0) if head == MEAN_OF_HEADS else weights[head]
