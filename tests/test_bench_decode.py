"""benchmarks/bench_decode.py runs on a few sentences and prints its table and the speedup line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_decode.py"
TINY = ["--sentences", "4", "--rounds", "1", "--beam-sizes", "1,2"]


def _run(*extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *TINY, *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ.copy(),
    )


def _check_output(stdout: str) -> None:
    assert re.search(r"^decoding\s+output len\s+sents\s+recompute s\s+cached s\s+speedup$", stdout, re.M), stdout
    for how in ("greedy", "beam 2"):
        # decoding, bucket, sentences, recompute seconds, cached seconds, speedup
        assert re.search(rf"^{how}\s+\d+(-\d+|\+)\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+x$", stdout, re.M), stdout
        assert re.search(rf"^{how}\s+all\s+4\s+[\d.]+\s+[\d.]+\s+[\d.]+x$", stdout, re.M), stdout
    assert "outputs identical with and without the cache: yes" in stdout
    assert re.search(r"^speedup cached / recompute: \d+\.\d\dx$", stdout, re.M), stdout


def test_tiny_run_on_test_sentences_prints_the_table_and_the_speedup():
    result = _run()
    assert result.returncode == 0, result.stderr
    _check_output(result.stdout)
    if "no Multi30k test sentences" not in result.stdout:
        assert "Multi30k test_2016_flickr (first 4)" in result.stdout


def test_random_sentences_say_so():
    result = _run("--random", "--beam-sizes", "1")
    assert result.returncode == 0, result.stderr
    assert "sentences: 4 random sentences" in result.stdout
    assert re.search(r"^speedup cached / recompute: \d+\.\d\dx$", result.stdout, re.M), result.stdout
