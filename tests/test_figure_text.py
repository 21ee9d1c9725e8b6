"""Every text in the course's diagrams is legible where a learner sees it: JupyterLab, at the notebook's width.

JupyterLab shows a markdown image at its natural width, or at the notebook's width when the PNG is
wider (``max-width: 100%``): about 940 px in the browser test's 1400 px window (its screenshot
``tests/browser/artifacts/figure_light.png`` is 941 px wide; the browser test asserts the width).
A text of ``s`` points in a figure ``W`` points wide (the SVG's viewBox; 72 per inch) is then
``s * shown / W`` px tall (its font size, the em), where ``shown = min(940, PNG width)``.

images/make_figures.py writes text as paths (``svg.fonttype: path``): each text is a ``<g id="text_N">``
whose glyph group carries ``scale(size/100)`` (matplotlib's path fonts are 100 units to the point) and
whose sub- and superscripts (mathtext) scale once more, on their ``<use>``. Every glyph counts,
sub- and superscripts included: each must be at least 12 px, and every text's colour must reach WCAG
AA's 4.5:1 contrast on the white paper.
"""

from __future__ import annotations

import importlib.util
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
# FIGURE_TEXT_IMAGES: another folder of make_figures.py output to measure (e.g. older figures, to see this fail).
IMAGES = Path(os.environ.get("FIGURE_TEXT_IMAGES", ROOT / "images"))
FIGURES = sorted(p.stem for p in IMAGES.glob("*.svg"))
NOTEBOOK_WIDTH_PX = 940  # a full-width markdown image in JupyterLab (the browser test measures it)
MIN_TEXT_PX = 12
MIN_CONTRAST = 4.5  # WCAG 2 AA, normal-size text
SVG = "{http://www.w3.org/2000/svg}"
SCALE = re.compile(r"scale\(([-\d.e]+)")
FILL = re.compile(r"fill:\s*(#[0-9a-fA-F]{6})")


def _luminance(hex_colour: str) -> float:
    channels = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def svg_texts(path: Path) -> tuple[float, list[tuple[str, float, str]]]:
    """The viewBox width (pt) and, per text, (its words, its smallest glyph in pt, its fill colour)."""
    parser = ET.XMLParser(target=ET.TreeBuilder(insert_comments=True))
    root = ET.parse(path, parser=parser).getroot()
    view_width = float(root.get("viewBox").split()[2])
    texts = []
    for group in root.iter(f"{SVG}g"):
        if not (group.get("id") or "").startswith("text_"):
            continue
        words = next((c.text.strip() for c in group if c.tag is ET.Comment), "?")
        for glyphs in (g for g in group if g.tag == f"{SVG}g"):  # one per line of a multi-line text
            size = 100 * abs(float(SCALE.search(glyphs.get("transform"))[1]))
            uses = (u.get("transform") or "" for u in glyphs.iter(f"{SVG}use"))
            scripts = [float(m[1]) for t in uses if (m := SCALE.search(t))]
            fill = FILL.search(glyphs.get("style") or "")
            texts.append((words, size * min([1.0, *scripts]), fill[1] if fill else "#000000"))
    return view_width, texts


def shown_width(name: str) -> int:
    return min(NOTEBOOK_WIDTH_PX, Image.open(IMAGES / f"{name}.png").width)


def test_the_svgs_have_texts():
    assert FIGURES, "no figure in images/"
    for name in FIGURES:
        _, texts = svg_texts(IMAGES / f"{name}.svg")
        assert len(texts) >= 5, f"images/{name}.svg: found {len(texts)} texts; did make_figures.py stop writing paths?"


@pytest.mark.parametrize("name", FIGURES)
def test_every_text_is_at_least_12_px_at_the_notebooks_width(name):
    view_width, texts = svg_texts(IMAGES / f"{name}.svg")
    px_per_pt = shown_width(name) / view_width
    small = [f"{words!r}: {pt * px_per_pt:.1f} px" for words, pt, _ in texts if pt * px_per_pt < MIN_TEXT_PX]
    assert not small, (
        f"images/{name}.svg shown {shown_width(name)} px wide: texts under {MIN_TEXT_PX} px "
        f"(sub- and superscripts count): {small}"
    )


@pytest.mark.parametrize("name", FIGURES)
def test_every_text_colour_contrasts_with_white(name):
    _, texts = svg_texts(IMAGES / f"{name}.svg")
    pale = [f"{words!r} {fill}" for words, _, fill in texts if contrast(fill, "#ffffff") < MIN_CONTRAST]
    assert not pale, f"images/{name}.svg: text colours under {MIN_CONTRAST}:1 on white: {pale}"


def test_contrast_formula():
    assert contrast("#000000", "#ffffff") == pytest.approx(21)
    assert contrast("#767676", "#ffffff") == pytest.approx(4.54, abs=0.01)  # the palest grey that passes AA


def test_the_ink_contrasts_with_every_box_colour():
    """Text inside a box is INK on the box's fill: WCAG AA there too (the darkest head colour is the closest)."""
    spec = importlib.util.spec_from_file_location("make_figures", ROOT / "images" / "make_figures.py")
    make_figures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_figures)
    fills = [*make_figures.COLORS.values(), *make_figures.HEAD_COLORS]
    pale = [f for f in fills if contrast(make_figures.INK, f) < MIN_CONTRAST]
    assert not pale, f"INK {make_figures.INK} on these fills is under {MIN_CONTRAST}:1: {pale}"
