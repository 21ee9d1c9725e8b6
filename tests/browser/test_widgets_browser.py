"""The attention explorer in a real browser: JupyterLab + headless Chromium.

The unit tests check the widget's Python side (controls, the matrix on screen);
this checks what a learner actually sees. It opens the course's notebook 01 in
JupyterLab, runs every cell from the Run menu, waits for the explorer's heatmap,
picks another head in its dropdown and checks that a different heatmap arrives.
Screenshots of both states land in ``tests/browser/artifacts/``. A second test
opens the learner version of the same notebook and checks that its solution is
folded away until the learner clicks "Show a solution".

Run with ``make browser-test`` (installs Chromium and Playwright first), or
``pytest tests/browser`` once they are there; without them the test is skipped.
"""

from __future__ import annotations

import base64
import contextlib
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))  # the scripts are files, not an installed package
import build_learner  # noqa: E402

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"  # gitignored: look at these after a run

NOTEBOOK = "01_self_attention.ipynb"
PAGE_LOAD_TIMEOUT_MS = 60_000
KERNEL_READY_TIMEOUT_MS = 60_000
RUN_ALL_TIMEOUT_MS = 120_000  # quick mode: notebook 01 runs in ~15 s on 2 CPU cores
REDRAW_TIMEOUT_MS = 30_000

# The explorer: an ipywidgets VBox holding a Dropdown (the head) and an Output showing the PNG.
EXPLORER = ".widget-vbox:has(.widget-dropdown select):has(.widget-output)"
HEATMAP = f"{EXPLORER} .widget-output img"


def _fresh_copy(target_dir) -> str:
    """Notebook 01 without saved outputs or widget state: everything on screen comes from this run."""
    nb = nbformat.read(ROOT / "notebooks" / NOTEBOOK, as_version=4)
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "attention_explorer(" in source, f"{NOTEBOOK} no longer builds an attention explorer; point this test at one that does"
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, target_dir / NOTEBOOK)
    return NOTEBOOK


def _heatmap_state(page) -> dict:
    """src, rendered size and natural size of the explorer's heatmap image."""
    return page.eval_on_selector(
        HEATMAP,
        "img => ({src: img.src, width: img.clientWidth, height: img.clientHeight,"
        " naturalWidth: img.naturalWidth, complete: img.complete})",
    )


def _png(src: str) -> bytes:
    assert src.startswith("data:image/png;base64,"), f"heatmap is not an inline PNG: {src[:60]}"
    return base64.b64decode(src.split(",", 1)[1])


def _save(screenshot, name: str, tmp_path) -> None:
    (tmp_path / name).write_bytes(screenshot)
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / name).write_bytes(screenshot)


def test_attention_explorer_renders_and_follows_the_head_dropdown(browser_page, lab_server, tmp_path):
    try:
        _explore(lab_server, browser_page, tmp_path)
    except BaseException:
        # What the page looked like when it went wrong, next to the other screenshots.
        with contextlib.suppress(Exception):
            _save(browser_page.screenshot(full_page=True), "failure.png", tmp_path)
        raise


def _explore(lab_server, page, tmp_path) -> None:
    started = time.monotonic()
    name = _fresh_copy(lab_server.root_dir)
    page.goto(lab_server.lab_url(name), timeout=PAGE_LOAD_TIMEOUT_MS)

    # The notebook is loaded (all its cells, not the placeholder shown while loading) and
    # the status bar says its kernel is connected and idle: only then does Run All run.
    page.wait_for_function(
        "() => { const bar = document.querySelector('#jp-main-statusbar');"
        " return bar && /\\|\\s*Idle/.test(bar.innerText) && !/No Kernel/.test(bar.innerText)"
        " && document.querySelectorAll('.jp-Notebook .jp-Cell').length > 1; }",
        timeout=KERNEL_READY_TIMEOUT_MS,
    )

    # Run every cell the way a learner does: Run menu -> Run All Cells.
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()

    # The explorer appears with a real heatmap (a decoded PNG of some size).
    page.wait_for_selector(HEATMAP, state="visible", timeout=RUN_ALL_TIMEOUT_MS)
    page.wait_for_function(
        f"() => {{ const img = document.querySelector({HEATMAP!r});"
        " return img && img.complete && img.naturalWidth > 100 && img.clientHeight > 100; }",
        timeout=REDRAW_TIMEOUT_MS,
    )
    explorer = page.locator(EXPLORER).first
    explorer.scroll_into_view_if_needed()
    before = _heatmap_state(page)
    dropdown = explorer.locator(".widget-dropdown select").first
    options = dropdown.locator("option").all_inner_texts()
    assert before["width"] > 100 and before["height"] > 100, before
    assert dropdown.input_value() != "" and len(options) >= 2, options
    _save(explorer.screenshot(), "explorer_before.png", tmp_path)
    _save(page.screenshot(full_page=False), "page_before.png", tmp_path)

    # Pick another head: the kernel redraws and a different image arrives.
    selected = dropdown.evaluate("s => s.options[s.selectedIndex].text")
    other = next(text for text in options if text != selected)
    dropdown.select_option(label=other)
    page.wait_for_function(
        f"(old) => {{ const img = document.querySelector({HEATMAP!r});"
        " return img && img.src !== old && img.complete && img.naturalWidth > 100; }",
        arg=before["src"],
        timeout=REDRAW_TIMEOUT_MS,
    )
    after = _heatmap_state(page)
    _save(explorer.screenshot(), "explorer_after.png", tmp_path)

    assert _png(after["src"]) != _png(before["src"]), "choosing another head left the heatmap unchanged"
    assert after["width"] > 100 and after["height"] > 100, after
    assert dropdown.evaluate("s => s.options[s.selectedIndex].text") == other
    # Every cell ran without an error (tracebacks are rendered as stderr outputs).
    stderr = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").all_inner_texts()
    assert not [t for t in stderr if "Traceback" in t or "Error" in t], stderr
    elapsed = time.monotonic() - started
    print(f"browser test: heatmap {selected!r} -> {other!r} in {elapsed:.1f}s; screenshots in {ARTIFACTS}")


def test_learner_solution_is_folded_until_clicked(browser_page, lab_server, tmp_path):
    """In the learner version of notebook 01 the solution is hidden, and one click shows it."""
    source = nbformat.read(ROOT / "notebooks" / NOTEBOOK, as_version=4)
    learner = build_learner.build_notebook(source, NOTEBOOK, course=None)
    (lab_server.root_dir / NOTEBOOK).write_text(build_learner.render(learner), encoding="utf-8")
    page = browser_page
    try:
        page.goto(lab_server.lab_url(NOTEBOOK), timeout=PAGE_LOAD_TIMEOUT_MS)
        details = page.locator(".jp-MarkdownOutput details").first
        details.wait_for(state="attached", timeout=PAGE_LOAD_TIMEOUT_MS)
        details.scroll_into_view_if_needed()
        code = details.locator("pre").first
        assert details.get_attribute("open") is None and not code.is_visible(), "the solution should start folded"
        stub = page.locator(".jp-CodeCell", has_text="raise NotImplementedError").first
        assert stub.is_visible()
        _save(page.screenshot(), "learner_folded.png", tmp_path)

        details.locator("summary").click()
        code.wait_for(state="visible", timeout=REDRAW_TIMEOUT_MS)
        assert "def scaled_dot_product_attention" in code.inner_text()
        _save(page.screenshot(), "learner_unfolded.png", tmp_path)
    except BaseException:
        with contextlib.suppress(Exception):
            _save(page.screenshot(full_page=True), "failure_learner.png", tmp_path)
        raise
