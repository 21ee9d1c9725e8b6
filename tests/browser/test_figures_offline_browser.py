"""The course's figures in JupyterLab with the network blocked, in the light and the dark theme.

A classroom may have no network. The figures of notebooks 00-07 are embedded in the notebooks
(transformer_lessons/authoring/figures.py); here Chromium may reach only the JupyterLab server on
loopback, every other request is refused, and each figure must still load (``naturalWidth > 0``),
keep its alt text, stand out from the page in both themes (its own white background, not the
theme's), and show its smallest text at 12 px or more at the width JupyterLab gives it. The
figures' markdown cells come from the real learner notebooks; one screenshot per theme lands in ``tests/browser/artifacts/`` (``figure_<theme>.png``, and ``figure_cell_<theme>.png`` with the
text around it), to look at.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
from urllib.parse import urlparse

import nbformat
import numpy as np
from PIL import Image

from test_widgets_browser import ARTIFACTS, PAGE_LOAD_TIMEOUT_MS, ROOT, _save
from transformer_lessons.authoring import figures

FIGURES_NOTEBOOK = "figures.ipynb"
_SPEC = importlib.util.spec_from_file_location("figure_text", ROOT / "tests" / "test_figure_text.py")
figure_text = importlib.util.module_from_spec(_SPEC)  # tests/test_figure_text.py: the SVGs' text sizes
_SPEC.loader.exec_module(figure_text)
LOCAL_HOSTS = ("127.0.0.1", "localhost")
LOAD_TIMEOUT_MS = 30_000
WHITE = 235  # a pixel counts as the figure's white background when every channel is above this
MIN_WHITE_FRACTION = 0.5  # the diagrams are mostly white paper with coloured boxes and dark lines


def _figure_cells() -> list:
    """Every markdown cell of learner/ that shows one of the course's figures, in course order."""
    cells = []
    for path in sorted((ROOT / "learner").glob("[0-9][0-9]_*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown" and figures.shown_figures(cell.source, f"learner/{path.name}"):
                cells.append(nbformat.v4.new_markdown_cell(cell.source))
    return cells


def _figures_notebook(target_dir) -> tuple[str, list[str]]:
    """A notebook of those cells in ``target_dir``; its name and the alt texts of its figures."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = _figure_cells()
    nbformat.write(nb, target_dir / FIGURES_NOTEBOOK)
    alts = [m[1][2:-2] for c in nb.cells for m in figures.MARKDOWN_IMAGE.finditer(c.source)]
    return FIGURES_NOTEBOOK, alts


def _block_the_network(page) -> list[str]:
    """Let the page reach only loopback; the list fills with every URL refused."""
    refused: list[str] = []

    def handle(route):
        if urlparse(route.request.url).hostname in LOCAL_HOSTS or route.request.url.startswith("data:"):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort("internetdisconnected")

    page.route("**/*", handle)
    return refused


def _assert_text_legible(images, theme: str) -> None:
    """Each figure's smallest text, at the width JupyterLab shows the figure, is at least 12 px.

    tests/test_figure_text.py checks the same offline, assuming a 940 px notebook column; here the
    column is measured, so that assumption is checked too.
    """
    shown = images.evaluate_all("imgs => imgs.map(i => [i.title, i.naturalWidth, i.getBoundingClientRect().width])")
    smallest = {}
    for title, natural, width in shown:
        name = title.removeprefix("images/").removesuffix(".png")
        view_width, texts = figure_text.svg_texts(figure_text.IMAGES / f"{name}.svg")
        assert width >= min(natural, figure_text.NOTEBOOK_WIDTH_PX) - 1, (
            f"{title} is shown {width:.0f} px wide, narrower than the {figure_text.NOTEBOOK_WIDTH_PX} px "
            "tests/test_figure_text.py assumes"
        )
        smallest[name] = min(pt for _, pt, _ in texts) * width / view_width
    small = {name: f"{px:.1f} px" for name, px in smallest.items() if px < figure_text.MIN_TEXT_PX}
    assert not small, f"figure text under {figure_text.MIN_TEXT_PX} px in JupyterLab ({theme} theme): {small}"
    print("smallest figure text as shown: " + ", ".join(f"{n} {px:.1f} px" for n, px in smallest.items()))


def test_figures_show_offline_in_both_themes(browser_page, themed_lab_server, tmp_path):
    page, theme = browser_page, themed_lab_server.theme
    name, alts = _figures_notebook(themed_lab_server.root_dir)
    assert len(alts) >= 7, f"the course shows 7 figures in notebooks 00-07, found {len(alts)}"
    refused = _block_the_network(page)
    try:
        page.goto(themed_lab_server.lab_url(name), timeout=PAGE_LOAD_TIMEOUT_MS)
        images = page.locator(".jp-MarkdownOutput img")
        page.wait_for_function(
            "(n) => { const imgs = [...document.querySelectorAll('.jp-MarkdownOutput img')];"
            " return imgs.length >= n && imgs.every(i => i.complete); }",
            arg=len(alts),
            timeout=LOAD_TIMEOUT_MS,
        )
        is_light = page.evaluate("() => document.body.dataset.jpThemeLight")
        assert is_light == ("true" if theme == "light" else "false"), f"JupyterLab is not in the {theme} theme"
        shown = images.evaluate_all("imgs => imgs.map(i => [i.alt, i.naturalWidth, i.naturalHeight])")
        assert [alt for alt, _, _ in shown] == alts, "the figures' alt texts changed on the way"
        broken = [alt for alt, width, height in shown if not (width > 0 and height > 0)]
        assert not broken, f"figures that did not load offline ({theme} theme): {broken}; refused: {refused}"
        assert not [url for url in refused if "raw.githubusercontent" in url], "a figure still asks GitHub"
        _assert_text_legible(images, theme)

        # One figure as a learner sees it, in this theme: white paper on the page, whatever the theme.
        first = images.first
        first.scroll_into_view_if_needed()
        shot = first.screenshot()
        _save(shot, f"figure_{theme}.png", tmp_path)
        pixels = np.asarray(Image.open(io.BytesIO(shot)).convert("RGB"))
        white = float((pixels.min(axis=2) > WHITE).mean())
        assert white >= MIN_WHITE_FRACTION, (
            f"the figure is {white:.0%} white in the {theme} theme (transparent background?); "
            f"see {ARTIFACTS / f'figure_{theme}.png'}"
        )
        # The figure amid its text (notebook 01's, a wide one that fits the window with the text around it).
        cell = images.nth(1).locator("xpath=ancestor::div[contains(@class, 'jp-MarkdownCell')][1]")
        cell.scroll_into_view_if_needed()
        _save(cell.screenshot(), f"figure_cell_{theme}.png", tmp_path)
        print(f"browser test: {len(shown)} figures load offline in the {theme} theme; {len(refused)} requests refused")
    except BaseException:
        with contextlib.suppress(Exception):
            _save(page.screenshot(full_page=True), f"failure_figures_{theme}.png", tmp_path)
        raise
