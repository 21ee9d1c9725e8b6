"""Embed the course's own figures in the notebooks, so that they show wherever a notebook is opened.

A markdown image of one of the project's figures becomes

    ![alt](data:image/png;base64,... "images/qkv.png")

the PNG that ``images/make_figures.py`` draws beside each SVG, inside the notebook itself. The title
names the file the bytes come from: embedding again refreshes them from ``images/``, and
``tests/test_figures_offline.py`` checks that the two are equal. What counts as one of the project's
figures: a target in ``images/`` written relative to the notebook (``../images/qkv.svg``, how an author
writes it), a raw GitHub address of such a file (how notebooks showed figures before), or an earlier
embedding. An SVG target takes its PNG twin. The alt text stays as it was.

Why a PNG inside the notebook, and not a link or an SVG:

* JupyterLab without network (a classroom) cannot load a raw GitHub address, and a relative
  ``../images/`` path holds only while the notebook stays in the checkout, under JupyterLab's root.
* Colab copies only the notebook, so no relative path resolves. It renders neither cell attachments
  (googlecolab/colabtools#3836) nor SVG ``data:`` URLs (#2092), but it does render PNG ``data:`` URLs:
  it writes one itself for an image pasted into a text cell.
* GitHub's notebook view shows a PNG ``data:`` URL in markdown where it shows no cell attachment
  (ajwdewit/pcse_notebooks#8 moved to one for that reason; not checked from here, which has no
  network). nbval does not look at markdown cells at all.

A link the author wrapped around a figure is kept, except the one to ``../images/`` that older stamps
added (the figure is in the notebook now).

``python -m transformer_lessons.authoring.colab`` (``make learner``) embeds the figures of every notebook,
with the rest of its stamping. To refresh only the figures of some notebooks (after ``images/make_figures.py``
redrew them, while others edit the rest of the course):

    python -m transformer_lessons.authoring.figures notebooks/0[0-8]_*.ipynb learner/0[0-8]_*.ipynb
"""

from __future__ import annotations

import argparse
import base64
import posixpath
import re
import sys
from pathlib import Path

import nbformat

FIGURES_DIR = "images"  # the project's own figures, drawn by images/make_figures.py
RAW_HOST = "https://raw.githubusercontent.com"
DATA_PNG = "data:image/png;base64,"

# A markdown image, ![alt](target) or ![alt](target "title"): groups head (`![alt](`), target, title, `)`.
_IMAGE = r'(!\[[^\]]*\]\()([^)\s]+)(?:\s+"([^"]*)")?(\))'
MARKDOWN_IMAGE = re.compile(_IMAGE)
# The same image, possibly wrapped in a link, [![alt](target)](link): the link is group 5 (or None).
FIGURE = re.compile(rf"\[{_IMAGE}\]\(([^)\s]+)\)|{_IMAGE}")
# A figure at a raw GitHub address of any repository and branch: group 1 is images/<file>.
RAW_FIGURE = re.compile(rf"{re.escape(RAW_HOST)}/[\w.-]+/[\w.-]+/[\w.-]+/({FIGURES_DIR}/[\w./-]+)")


def figure_path(target: str, title: str | None, rel_path: str) -> str | None:
    """``images/<file>`` when the image (``target``, ``title``) is one of the project's figures, else ``None``.

    A relative target is resolved from the folder of the notebook ``rel_path``; an embedded
    figure is named by its title.
    """
    if target.startswith(DATA_PNG):
        return title if title and title.startswith(f"{FIGURES_DIR}/") else None
    raw = RAW_FIGURE.fullmatch(target)
    if raw:
        return raw[1]
    if re.match(r"^[a-z][a-z0-9+.-]*:|^/|^#", target, re.I):  # https:, data:, attachment:, /abs, #anchor
        return None
    path = posixpath.normpath(posixpath.join(posixpath.dirname(rel_path), target))
    return path if path.startswith(f"{FIGURES_DIR}/") else None


def png_twin(path: str) -> str:
    """The file the notebooks embed for the figure ``path``: ``images/qkv.svg`` -> ``images/qkv.png``."""
    return posixpath.splitext(path)[0] + ".png"


def data_url(root: Path, png: str) -> str:
    return DATA_PNG + base64.b64encode((root / png).read_bytes()).decode("ascii")


def _image_groups(match: re.Match) -> tuple[str, str, str | None, str | None]:
    """(head, target, title, link) of a FIGURE match, wrapped in a link or not."""
    if match[1] is not None:
        return match[1], match[2], match[3], match[5]
    return match[6], match[7], match[8], None


def embed_figures(source: str, rel_path: str, root: Path) -> str:
    """``source`` (a markdown cell of the notebook ``rel_path``) with the project's figures embedded."""

    def embed(match: re.Match) -> str:
        head, target, title, link = _image_groups(match)
        path = figure_path(target, title, rel_path)
        if path is None:
            return match[0]
        png = png_twin(path)
        image = f'{head}{data_url(root, png)} "{png}")'
        if link is not None and figure_path(link, None, rel_path) is None:
            return f"[{image}]({link})"  # the author's own link
        return image

    return FIGURE.sub(embed, source)


def shown_figures(source: str, rel_path: str) -> list[str]:
    """The PNG files (``images/...``) that the markdown ``source`` shows, embedded or not yet."""
    paths = (figure_path(m[2], m[3], rel_path) for m in MARKDOWN_IMAGE.finditer(source))
    return [png_twin(p) for p in paths if p]


def embedded_figures(source: str) -> list[tuple[str, bytes]]:
    """(title, PNG bytes) of every embedded figure in the markdown ``source``."""
    return [
        (m[3] or "", base64.b64decode(m[2][len(DATA_PNG) :], validate=True))
        for m in MARKDOWN_IMAGE.finditer(source)
        if m[2].startswith(DATA_PNG)
    ]


def embed_in_notebook(path: Path, root: Path) -> list[str]:
    """Embed the figures of the notebook ``path`` afresh (only its markdown); the ids of the cells changed."""
    rel = path.resolve().relative_to(root.resolve()).as_posix()
    nb = nbformat.read(path, as_version=4)
    changed = []
    for cell in nb.cells:
        if cell.cell_type == "markdown" and (new := embed_figures(cell.source, rel, root)) != cell.source:
            cell.source = new
            changed.append(cell.get("id", "?"))
    if changed:
        nbformat.write(nb, path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Embed images/*.png afresh in the given notebooks only.")
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2], help="repository root")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        changed = embed_in_notebook(path, args.root)
        print(f"{path}: " + (f"re-embedded in cells {', '.join(changed)}" if changed else "up to date"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
