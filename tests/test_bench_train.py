"""Tests of benchmarks/bench_train.py: it runs on a saved corpus, as on the GPU machine (no spaCy, no raw data)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from test_train import toy_corpus

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_train.py"

# Runs the benchmark with spaCy unimportable (None in sys.modules makes `import spacy` raise ImportError).
NO_SPACY = """
import runpy, sys
sys.modules["spacy"] = None
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bench") / "toy.json.gz"
    toy_corpus().save(path)  # the format `python -m transformer_lessons prepare` writes
    return path


def run_bench(*args: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-c",
        NO_SPACY,
        str(BENCH),
        "--device",
        "cpu",
        "--steps",
        "2",
        "--warmup-steps",
        "1",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_bench_train_times_both_models_on_a_saved_corpus(corpus_file):
    result = run_bench("--corpus", str(corpus_file), "--limit", "100")
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    out = result.stdout
    assert f"batches: Multi30k from {corpus_file} (first 100 training pairs" in out
    assert "random batches" not in out and "autocast off (float32)" in out
    rates = [line for line in out.splitlines() if "target tokens/s" in line]
    assert len(rates) == 2 and all(float(line.split(":")[1].split()[0].replace(",", "")) > 0 for line in rates)
    assert "ratio ours / nn.Transformer" in out
    assert "best of 2 rounds per batch" in out and "compile" not in out  # the default run stays eager


def test_bench_train_refuses_a_missing_corpus_instead_of_random_batches(tmp_path):
    result = run_bench("--corpus", str(tmp_path / "missing.json.gz"))
    assert result.returncode != 0 and "missing.json.gz" in result.stderr
    assert "random batches" not in result.stdout


def _rates(out: str) -> dict[str, float]:
    """The 'NAME : RATE target tokens/s' lines, by name."""
    return {
        line.split(":")[0].strip(): float(line.split(":")[1].split()[0].replace(",", ""))
        for line in out.splitlines()
        if "target tokens/s" in line
    }


def test_bench_train_times_compiled_models_with_compile(corpus_file):
    # The 'eager' backend runs the torch.compile machinery (Dynamo tracing, guards, recompiles
    # on new shapes) without generating code, so the test needs no C++ compiler and little time.
    result = run_bench(
        "--corpus", str(corpus_file), "--limit", "100", "--compile", "--compile-backend", "eager", "--rounds", "1"
    )
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    out = result.stdout
    assert "torch.compile failed" not in out
    assert "torch.compile(backend='eager', dynamic=True)" in out and "best of 1 rounds per batch" in out
    rates = _rates(out)
    assert set(rates) == {
        "transformer_lessons.Transformer",
        "torch.nn.Transformer",
        "transformer_lessons.Transformer compiled",
        "torch.nn.Transformer compiled",
    }
    assert all(rate > 0 for rate in rates.values())
    assert "ratio ours / nn.Transformer     :" in out and "ratio ours / nn.Transformer compiled     :" in out
    speedups = [line for line in out.splitlines() if line.startswith("speedup compiled / eager")]
    assert len(speedups) == 2 and all(float(line.split(":")[1].strip().rstrip("x")) > 0 for line in speedups)


def test_bench_train_reports_a_failed_compile_and_keeps_the_eager_figures(corpus_file):
    result = run_bench(
        "--corpus", str(corpus_file), "--limit", "100", "--compile", "--compile-backend", "no_such_backend"
    )
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    out = result.stdout
    assert "torch.compile failed for ours on cpu, so no compiled figures" in out and "no_such_backend" in out
    assert set(_rates(out)) == {"transformer_lessons.Transformer", "torch.nn.Transformer"}
    assert "ratio ours / nn.Transformer" in out


def test_bench_train_compares_float32_with_bfloat16_autocast(corpus_file):
    result = run_bench("--corpus", str(corpus_file), "--limit", "100", "--compare-precision")
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    rates = _rates(result.stdout)
    assert rates["ours in float32"] > 0 and rates["ours under bfloat16 autocast"] > 0
    ratio = float(result.stdout.split("ratio bfloat16 / float32")[1].split(":")[1].split()[0])
    assert ratio == pytest.approx(rates["ours under bfloat16 autocast"] / rates["ours in float32"], abs=0.01)


def test_bench_train_precision_sets_both_models_autocast(corpus_file):
    result = run_bench("--corpus", str(corpus_file), "--limit", "100", "--precision", "bfloat16")
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    assert "autocast bfloat16" in result.stdout and "ratio ours / nn.Transformer" in result.stdout
