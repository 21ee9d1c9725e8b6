"""The course's figures show offline, on Colab and on GitHub: each notebook carries them itself.

images/make_figures.py draws every figure twice, SVG and PNG; the notebooks embed the PNG as a
``data:`` URL (transformer_lessons/authoring/figures.py says why). These tests keep the embedded
copies equal to images/, and images/ equal to a fresh drawing, so that they cannot drift.
tests/browser/ checks that JupyterLab shows them with the network blocked.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
from PIL import Image

from transformer_lessons.authoring import colab, figures

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "images"
NOTEBOOKS = colab.notebook_paths(ROOT)  # notebooks/ and learner/
# Where the course shows each figure (images/README.md has the same table, for people).
SHOWN_IN = {
    "encoder_decoder": ("00", "02", "07"),
    "qkv": ("01",),
    "multi_head": ("02",),
    "encoder_layer": ("05",),
    "decoder_layer": ("06",),
}


def _markdown(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "markdown"]


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_every_svg_has_an_opaque_png_twin():
    svgs = sorted(p.stem for p in IMAGES.glob("*.svg"))
    assert svgs == sorted(SHOWN_IN), "a figure was added or removed: update SHOWN_IN and images/README.md"
    for name in svgs:
        image = Image.open(IMAGES / f"{name}.png")
        alpha = np.asarray(image.convert("RGBA"))[..., 3]
        # A transparent background would show JupyterLab's dark theme through it: black lines on near-black.
        assert alpha.min() == 255, f"images/{name}.png has transparent pixels"
        assert image.width >= 700, f"images/{name}.png is {image.width} px wide: blurry at a notebook's width"


@pytest.mark.pins  # the same bytes need the locked matplotlib, as for the SVGs (tests/test_viz.py)
def test_the_pngs_are_what_make_figures_draws(tmp_path):
    subprocess.run(
        [sys.executable, str(IMAGES / "make_figures.py"), str(tmp_path)],
        check=True,
        capture_output=True,
        env={**os.environ, "MPLBACKEND": "agg", "OMP_NUM_THREADS": "1"},
    )
    for name in SHOWN_IN:
        fresh = (tmp_path / f"{name}.png").read_bytes()
        assert fresh == (IMAGES / f"{name}.png").read_bytes(), f"images/{name}.png is stale: run images/make_figures.py"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_rel)
def test_embedded_figures_equal_images(path):
    for source in _markdown(path):
        for title, data in figures.embedded_figures(source):
            assert title.startswith("images/") and (ROOT / title).is_file(), f"{_rel(path)}: embeds {title!r}"
            assert data == (ROOT / title).read_bytes(), (
                f"{_rel(path)}: its copy of {title} differs from images/: "
                "run `python -m transformer_lessons.authoring.colab` (make learner)"
            )
            assert Image.open(io.BytesIO(data)).format == "PNG"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_rel)
def test_no_figure_needs_the_network_or_the_checkout(path):
    """No markdown image loads from GitHub (offline) or from ../images (Colab has only the notebook)."""
    for source in _markdown(path):
        for match in figures.MARKDOWN_IMAGE.finditer(source):
            target = match[2]
            assert "raw.githubusercontent.com" not in target, f"{_rel(path)}: {target}"
            if figures.figure_path(target, match[3], _rel(path)) is not None:
                assert target.startswith(figures.DATA_PNG), f"{_rel(path)}: shows {target} from the checkout"
                assert match[1][2:-2].strip(), f"{_rel(path)}: a figure without alt text"


def test_each_figure_is_shown_where_the_course_says():
    for folder in ("notebooks", "learner"):
        if not list((ROOT / folder).glob(colab.NOTEBOOK_GLOB)):
            continue
        for name, numbers in SHOWN_IN.items():
            for number in numbers:
                (path,) = (ROOT / folder).glob(f"{number}_*.ipynb")
                titles = [t for s in _markdown(path) for t, _ in figures.embedded_figures(s)]
                assert f"images/{name}.png" in titles, f"{_rel(path)} no longer shows images/{name}.png"


def test_embedding_some_notebooks_only_touches_their_figures(tmp_path):
    """`python -m transformer_lessons.authoring.figures NB...` refreshes the figures of those notebooks, nothing else."""
    (tmp_path / "images").mkdir()
    png = (IMAGES / "qkv.png").read_bytes()
    (tmp_path / "images" / "fig.png").write_bytes(png)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("![A figure](../images/fig.svg)\n\nText stays."),
        nbformat.v4.new_markdown_cell("![elsewhere](https://example.org/x.png)"),
        nbformat.v4.new_code_cell("x = 1"),
    ]
    (tmp_path / "notebooks").mkdir()
    shown, other = tmp_path / "notebooks" / "01_a.ipynb", tmp_path / "notebooks" / "02_b.ipynb"
    nbformat.write(nb, shown)
    nbformat.write(nb, other)
    assert figures.main([str(shown), "--root", str(tmp_path)]) == 0
    cells = nbformat.read(shown, as_version=4).cells
    assert figures.embedded_figures(cells[0].source) == [("images/fig.png", png)]
    assert cells[0].source.endswith("\n\nText stays.")
    assert [c.source for c in cells[1:]] == [c.source for c in nb.cells[1:]]
    assert nbformat.read(other, as_version=4).cells[0].source == nb.cells[0].source, "a notebook not named changed"
    assert figures.embed_in_notebook(shown, tmp_path) == [], "embedding twice changes nothing"
