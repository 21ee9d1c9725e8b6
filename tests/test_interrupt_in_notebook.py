"""Ctrl-C during training in a notebook ends with the run's one line, not 40 lines of red traceback."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

STOP = """\
import signal
from transformer_lessons.interrupt import StopRequested, quiet_in_notebooks
{setup}
print("interrupted: saved runs/x/last.pt (step 3); run again with resume to continue")
raise StopRequested(signal.SIGINT)
"""


def _run(setup: str) -> tuple[list[dict], bool]:
    """The outputs of a cell that stops a run as ``run.train`` does, and whether the cell ended as an error."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(STOP.format(setup=setup))]
    try:
        NotebookClient(nb, kernel_name="python3", timeout=120).execute()
    except CellExecutionError:
        return nb.cells[0].outputs, True
    return nb.cells[0].outputs, False


@pytest.mark.parametrize("quiet", [True, False], ids=["train() in a notebook", "IPython's default"])
def test_a_stopped_run_shows_its_line_and_no_traceback(quiet):
    outputs, errored = _run("quiet_in_notebooks()" if quiet else "")
    text = "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream")
    tracebacks = [o for o in outputs if o["output_type"] == "error"]
    assert errored  # either way the cell ends interrupted, so Run All stops there
    assert "interrupted: saved runs/x/last.pt" in text
    if quiet:
        assert not tracebacks
        assert text.splitlines()[-1] == "training stopped by SIGINT between two steps (not an error)"
    else:
        assert tracebacks and len(tracebacks[0]["traceback"]) > 1  # what a learner saw before


def test_outside_ipython_it_does_nothing():
    from transformer_lessons.interrupt import quiet_in_notebooks

    quiet_in_notebooks()  # pytest is not IPython: no error, nothing installed
