"""The widgets' HTML reads in JupyterLab's light and dark themes: theme variables for text, badges for meaning.

The contrast rule is WCAG 2's (relative luminance, (L1 + 0.05) / (L2 + 0.05)); text needs 4.5:1. A badge brings its
own background, so its contrast must hold on that background whatever the theme; text without a badge must take
the theme's colour, never a fixed grey (a fixed #444 was dark grey on the dark theme's black).
"""

from __future__ import annotations

import html
import re

import pytest

from transformer_lessons.viz import html_style


def _luminance(colour: str) -> float:
    channels = [int(colour.lstrip("#")[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def _pairs(markup: str) -> list[tuple[str, str]]:
    return re.findall(r"background:(#[0-9a-f]{6});color:(#[0-9a-f]{6})", markup)


def test_the_contrast_rule_is_wcags():
    assert contrast("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)  # the classic just-too-light grey


@pytest.mark.parametrize("kind", ["error", "warning", "changed"])
def test_every_badge_reads_on_its_own_background(kind):
    (pair,) = _pairs(html_style.badge("x", kind))
    assert contrast(*pair) >= 4.5, pair


@pytest.mark.parametrize("p", [0.99, 0.7, 0.696, 0.69, 0.3, 0.2996, 0.29, 0.01])
def test_a_word_chip_reads_and_says_its_probability_in_words_too(p):
    chip = html_style.sureness_chip("Fahrrad", p)
    (pair,) = _pairs(chip)
    assert contrast(pair[1], pair[0]) >= 4.5
    assert f">{round(100 * p)}%<" in chip and f"({html_style.sureness(p)[1]})" in chip
    assert re.search(r"font-size:(\d+)px", chip) and int(re.search(r"font-size:(\d+)px", chip)[1]) >= 12


def _as_seen(colour: str, kind: str) -> list[float]:
    """``colour`` as a dichromat sees it (Viénot, Brettel and Mollon 1999, in linear RGB), in sRGB 0-255."""

    def linear(c):
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    def srgb(c):
        c = min(max(c, 0.0), 1.0)
        return 255 * (12.92 * c if c <= 0.0031308 else 1.055 * c ** (1 / 2.4) - 0.055)

    r, g, b = (linear(int(colour.lstrip("#")[i : i + 2], 16) / 255) for i in (0, 2, 4))
    red_green = {"deuteranopia": 0.29275 * r + 0.70725 * g, "protanopia": 0.11238 * r + 0.88762 * g}[kind]
    blue = b + {"deuteranopia": 0.02234, "protanopia": -0.00401}[kind] * (g - r)
    return [srgb(red_green), srgb(red_green), srgb(blue)]


@pytest.mark.parametrize("kind", ["deuteranopia", "protanopia"])
def test_the_sureness_colours_stay_apart_for_red_green_colour_blindness(kind):
    """Green/orange/red would merge; "sure" must stand well apart, "unsure" and "guessing" apart (the number helps)."""
    seen = {meaning: _as_seen(background, kind) for _, background, meaning in html_style.SURENESS}

    def distance(a, b):
        return sum((x - y) ** 2 for x, y in zip(seen[a], seen[b])) ** 0.5

    assert distance("sure", "unsure") > 50 and distance("sure", "guessing") > 50
    assert distance("unsure", "guessing") > 20
    # the old palette fails it: green (#2b8a3e) and red (#c92a2a) text as a deuteranope sees them
    old = {"sure": _as_seen("#2b8a3e", "deuteranopia"), "guessing": _as_seen("#c92a2a", "deuteranopia")}
    assert sum((x - y) ** 2 for x, y in zip(old["sure"], old["guessing"])) ** 0.5 < 50


def test_plain_text_takes_the_themes_colour_not_a_fixed_grey():
    for markup in (html_style.block("a translation"), html_style.note("a note"), html_style.sureness_legend()):
        colours = re.findall(r"(?<!background:)color:([^;']+)", markup)
        assert colours and all(c.startswith("var(--jp-content-font-color") for c in colours[:1]), colours
    assert "font-size:14px" in html_style.block("x")


def test_no_widget_colours_its_text_with_a_fixed_grey():
    """The widgets build their HTML with html_style: none sets a fixed text colour of its own."""
    from pathlib import Path

    viz = Path(html_style.__file__).parent
    for path in viz.glob("*.py"):
        if path.name == "html_style.py":
            continue
        fixed = re.findall(r"style='[^']*(?<!background:)color:#[0-9a-fA-F]{3,6}", path.read_text(encoding="utf-8"))
        assert not fixed, f"{path.name} colours text with a fixed colour: {fixed}; use html_style"


def test_a_widgets_picture_says_what_it_shows_to_a_screen_reader():
    """The picture is an <img> whose alt text is the widget's describe(), escaped (JupyterLab's image/png has none)."""
    import torch

    from transformer_lessons import viz

    weights = torch.softmax(torch.randn(1, 2, 3, 3, generator=torch.Generator().manual_seed(0)), dim=-1)
    explorer = viz.attention_explorer(weights, ["a", "<b>", '"c"'])
    (alt,) = re.findall(r'<img src="data:image/png;base64,[A-Za-z0-9+/=]+" alt="([^"]*)"', explorer.picture.value)
    assert alt and html.unescape(alt) == explorer.describe()
    explorer.controls["head"].value = 1  # a redraw writes the new description too
    assert html.unescape(re.search(r'alt="([^"]*)"', explorer.picture.value)[1]) == explorer.describe()
    assert "head 1" in explorer.describe()


def test_no_course_widget_uses_a_slider():
    """A slider's handle has no accessible name (axe's aria-input-field-name) and ipywidgets cannot give it one."""
    from pathlib import Path

    viz = Path(html_style.__file__).parent
    sliders = {p.name: re.findall(r"widgets\.\w*Slider\(", p.read_text(encoding="utf-8")) for p in viz.glob("*.py")}
    assert not any(sliders.values()), f"use widgets.number_box: {sliders}"


_INLINE_SCRIPT = r"""
import base64, io, json
import matplotlib
matplotlib.use("agg")
import matplotlib.pyplot as plt
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.pylabtools import select_figure_formats
from PIL import Image

shell = InteractiveShell.instance()
out = {}
for fmt in ("png", "retina"):
    select_figure_formats(shell, {fmt})  # what %matplotlib inline registers
    fig, ax = plt.subplots()
    ax.imshow([[0, 1], [2, 3]]); ax.set_title("a figure")
    before = shell.display_formatter.format(fig)[0]["image/png"]
    from transformer_lessons import viz  # importing viz wraps the formatter (once)
    assert viz.widgets.compact_inline_figures(shell) is True
    data, meta = shell.display_formatter.format(fig)
    after = data["image/png"]
    png = base64.b64decode(after)
    out[fmt] = {
        "before": len(before), "after": len(after), "colour_type": png[25],
        "same_size": Image.open(io.BytesIO(png)).size == Image.open(io.BytesIO(base64.b64decode(before))).size,
        "metadata": meta.get("image/png", {}),
    }
    viz.widgets.compact_inline_figures(shell)  # a second call wraps nothing more
    assert shell.display_formatter.format(fig)[0]["image/png"] == after
print(json.dumps(out))
"""


def test_the_notebooks_figures_are_shown_in_few_colours_too():
    """Importing viz makes the inline backend's PNGs palette-based, whatever format it was set to (png, retina)."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _INLINE_SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for fmt, seen in out.items():
        assert seen["colour_type"] == 3 and seen["same_size"] and seen["after"] < seen["before"], (fmt, seen)
    assert out["retina"]["metadata"].get("width"), "retina's width and height stay"
