"""benchmarks/bench_model.py runs on the smallest settings, and fails when the two stacks differ."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_model.py"
TINY = [
    "--preset",
    "tiny",
    "--batch",
    "2",
    "--src-len",
    "6",
    "--tgt-len",
    "5",
    "--iters",
    "1",
    "--warmup",
    "0",
    "--modes",
    "train,infer",
    "--device",
    "cpu",
]


def test_tiny_run_prints_the_comparison_and_the_ratios():
    result = subprocess.run([sys.executable, str(SCRIPT), *TINY], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert re.search(r"^same function: max \|ours - nn.Transformer\| = \S+ \(float32", result.stdout, re.M), (
        result.stdout
    )
    for mode in ("train", "infer"):
        # mode, ours ms, nn ms, ours/nn
        assert re.search(rf"^{mode}\s+[\d.]+\s+[\d.]+\s+[\d.]+\s", result.stdout, re.M), result.stdout


def test_different_functions_exit_with_an_error():
    # The script as a module, with the weight copy skipped: the two stacks then hold different random weights.
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('bench_model', {str(SCRIPT)!r})\n"
        "bench = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(bench)\n"
        "bench.copy_weights = lambda *args: None\n"
        f"sys.argv = ['bench_model.py', *{TINY!r}]\n"
        "bench.main()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "not the same function" in result.stderr
    assert "ours/nn" not in result.stdout  # nothing was timed
