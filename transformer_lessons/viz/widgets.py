"""What the widgets share: a figure shown as a PNG under the controls, its static copy, and the head choice.

A widget (``attention_explorer``, ``positional_encoding_explorer``,
``generation_stepper``) is a ``FigureWidget``: a ``VBox`` of controls over a
:class:`Picture` showing a PNG of the current figure; a change of any control redraws.

Why the picture is an ``<img>`` in an ``HTML`` widget, not an ``Output`` showing
``image/png``: JupyterLab draws an ``image/png`` output as an ``<img>`` with no
alt text, so a screen reader says nothing of it (axe-core's rule ``image-alt``).
The ``<img>`` written here carries the widget's ``describe()`` as its alt text.
It also keeps the picture out of the cell's outputs: output captured by an
``Output`` context reaches the kernel's iopub channel as ordinary ``display_data``,
which ``nbconvert --execute`` files inside the widget state while nbval counts
it as cell output, so the two would disagree. A widget's value travels as
widget state only, so both see the same thing.

Why the controls are number boxes (:func:`number_box`), not sliders: the handle
of an ipywidgets slider (noUiSlider) has no accessible name, and ipywidgets
gives no way to set one (axe-core's rule ``aria-input-field-name``); a number
box is an ``<input>`` with its ``<label>``, stepped with its arrows or the
keyboard's up and down keys.

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
import html
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


PALETTE = "tl_palette"  # a Figure attribute: how many colours its PNG keeps (default 256), see compact_png


def palette_of(fig: Figure) -> int:
    """How many colours ``fig``'s PNG keeps: 256, or fewer where its drawing set ``fig.tl_palette``."""
    return int(getattr(fig, PALETTE, 256))


def compact_png(png: bytes, colors: int = 256) -> bytes:
    """``png`` with at most ``colors`` colours, without dithering: a plot looks the same at a third of the bytes.

    Pictures travel in the saved widget state and in the static copies of every notebook;
    matplotlib writes RGBA, which made notebook 15 weigh 2 MB. Flat colours stay flat. A picture
    of flat boxes and text (the beam tree) keeps every shade it has in 32 colours, at 3/4 the bytes;
    a heatmap needs the 256.
    """
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    image = image.quantize(colors=colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def compact_inline_figures(shell=None) -> bool:
    """Show the notebook's matplotlib figures as :func:`compact_png` PNGs too (True if done).

    Wraps whatever PNG formatter IPython's inline backend registered for ``Figure`` (its
    ``bbox_inches``, a ``retina`` setting, all kept), so a figure looks the same and the saved
    notebook is about a third the size: notebook 15 weighed 2 MB (issue 30). Called when ``viz``
    is imported, which is after ``%matplotlib inline`` in every notebook; outside IPython, or with
    no PNG formatter for figures, it does nothing.
    """
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:  # pragma: no cover - ipywidgets needs IPython
            return False
        shell = get_ipython()
    if shell is None:
        return False
    formatter = shell.display_formatter.formatters["image/png"]
    try:
        current = formatter.lookup_by_type(Figure)
    except KeyError:
        return False
    if getattr(current, "compact", False):
        return True

    def compact(fig: Figure):
        shown = current(fig)
        data, metadata = shown if isinstance(shown, tuple) else (shown, None)  # retina adds width and height
        if not data:
            return shown
        raw = base64.b64decode(data) if isinstance(data, str) else data
        small = base64.b64encode(compact_png(raw, palette_of(fig))).decode("ascii")
        return small if metadata is None else (small, metadata)

    compact.compact = True
    formatter.for_type(Figure, compact)
    return True


def figure_png(fig: Figure, **savefig) -> bytes:
    """A widget's picture of ``fig``: at ``WIDGET_DPI``, cropped to what is drawn, in few colours."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=WIDGET_DPI, **{"bbox_inches": "tight", **savefig})
    return compact_png(buffer.getvalue(), palette_of(fig))


def stack_pngs(pngs: Sequence[bytes]) -> bytes:
    """The non-empty ``pngs`` one under the other, left-aligned on white: one picture for a static copy."""
    from PIL import Image

    images = [Image.open(io.BytesIO(png)).convert("RGB") for png in pngs if png]
    if not images:
        return b""
    stacked = Image.new("RGB", (max(i.width for i in images), sum(i.height for i in images)), "white")
    top = 0
    for image in images:
        stacked.paste(image, (0, top))
        top += image.height
    buffer = io.BytesIO()
    stacked.save(buffer, format="PNG")
    return compact_png(buffer.getvalue())


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


def png_img(png: bytes, alt: str) -> str:
    """An ``<img>`` of ``png`` with ``alt`` as its text for screen readers ('' for no picture)."""
    if not png:
        return ""
    data = base64.b64encode(png).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt, quote=True)}" style="max-width: 100%">'


class Picture(widgets.HTML):
    """A widget's current picture: a PNG with alt text (see the module's docstring)."""

    def __init__(self):
        super().__init__()
        self.add_class("tl-picture")

    def show(self, png: bytes, alt: str) -> None:
        self.value = png_img(png, alt)


def number_box(value: float, low: float, high: float, description: str, style: dict, **kwargs) -> widgets.Widget:
    """A labelled number box from ``low`` to ``high`` (a float box when ``step`` is given), instead of a slider.

    Its value changes on Enter, on leaving the box, and with the arrows, unless
    ``continuous_update=True`` makes every keystroke count.
    """
    kind = widgets.BoundedFloatText if "step" in kwargs else widgets.BoundedIntText
    kwargs.setdefault("continuous_update", False)
    label = int(str(style.get("description_width", "100px")).removesuffix("px"))
    kwargs.setdefault("layout", widgets.Layout(width=f"{label + 120}px"))  # the label and a few digits
    return kind(value=value, min=low, max=high, description=description, style=style, **kwargs)


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
    """Controls above a :class:`Picture` that shows the current figure as a PNG."""

    _kind_name = "figure widget"

    def __init__(self, controls: dict[str, widgets.Widget], extra: Sequence[widgets.Widget] = ()):
        super().__init__()
        self.controls = dict(controls)
        self.picture = Picture()
        self.figure: Figure | None = None
        self._png = b""
        self._busy = False  # set while one change adjusts other controls: draw once
        self._static_copies = StaticCopies()
        self.children = [*self.controls.values(), *extra, self.picture, self._static_copies]
        for control in self.controls.values():
            control.observe(self._on_change, names="value")

    def _on_change(self, _change=None) -> None:
        if not self._busy:
            self._update()

    def _update(self) -> None:
        self._before_draw()
        fig = self._draw()
        self.figure = fig
        self._png = figure_png(fig)
        self.picture.show(self._png, self.describe())

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
