"""The package's own errors (errors.py): in IPython and Jupyter each shows as its message alone, never a chained traceback.

The command line prints the same message as one line (tests/test_cli.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from transformer_lessons import data
from transformer_lessons.errors import CheckpointError, DataError

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_a_data_error_draws_itself_as_its_message_alone(tmp_path, monkeypatch, no_network):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(data.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(data.DATA_ENV, raising=False)
    with pytest.raises(DataError) as info:
        data.fetch("val", "de", progress=False)
    assert info.value.__cause__ is not None  # the chain is kept for plain Python and pytest
    lines = info.value._render_traceback_()
    text = ANSI.sub("", "\n".join(lines))
    assert text.startswith(
        "DataError: val.de.gz (Multi30k) is not on this machine, and the course could not download it"
    )
    assert "(make classroom)" in " ".join(text.split()) and data.DATA_ENV in text
    assert all(len(ANSI.sub("", line)) <= 100 for line in lines) and all("\x1b[31m" in line for line in lines)
    assert "Traceback" not in text and "urllib" not in text and "File " not in text
    assert (
        ANSI.sub("", "\n".join(CheckpointError("no checkpoint at x.pt")._render_traceback_()))
        == "CheckpointError: no checkpoint at x.pt"
    )


def test_in_ipython_a_missing_test_set_offline_is_one_red_message(tmp_path):
    # A real IPython shell (no kernel), in a fresh process, outside any course folder, with an empty cache and no network.
    script = textwrap.dedent(
        """
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.run_cell("import socket\\ndef off(*args, **kwargs):\\n    raise OSError(101, 'Network is unreachable')\\n"
                       "socket.getaddrinfo = off")
        print("=== cell")
        shell.run_cell("from transformer_lessons import data\\ntest_pairs = data.load_split('test_2016_flickr', progress=False)")
        print("=== end")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != data.DATA_ENV} | {data.CACHE_ENV: str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    shown = ANSI.sub("", result.stdout).split("=== cell\n", 1)[1].split("=== end", 1)[0].strip()
    assert shown.startswith("DataError: test_2016_flickr.de.gz (Multi30k) is not on this machine"), shown
    assert "(make classroom)" in " ".join(shown.split()) and 2 <= len(shown.splitlines()) <= 8, shown
    for frame_marker in ("Traceback", "urllib", "File ", "URLError", "direct cause"):
        assert frame_marker not in shown, shown
