"""benchmarks/bench_profile.py takes a training step apart and rates it against this machine's matmul peak;
and the attention's kernel rule it led to (bfloat16 on a CPU takes PyTorch's plain kernel) changes no number.

The speed itself is measured by the benchmark (results/laptop/bench_profile.txt), never asserted here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import transformer_lessons.attention as attention
from test_train import toy_corpus

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_profile.py"


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("profile") / "toy.json.gz"
    toy_corpus().save(path)
    return path


def test_the_profile_names_every_part_and_rates_the_step_against_the_peak(corpus_file):
    command = [
        sys.executable,
        str(BENCH),
        "--preset",
        "quick",
        "--corpus",
        str(corpus_file),
        "--steps",
        "2",
        "--repeats",
        "1",
        "--precision",
        "bfloat16",
        "--compare-attention",
        "--compare-adam",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    out = result.stdout
    for part in (
        "attention",
        "  SDPA",
        "  rotary",
        "feed-forward",
        "output + loss",
        "optimizer",
        "the rest",
        "data (apart)",
    ):
        assert re.search(rf"^{re.escape(part)}\s+\d", out, re.M), f"no row {part!r} in:\n{out}"
    peak = re.search(r"float32 (\d+) GFLOP/s, bfloat16 (\d+) GFLOP/s", out)
    rate = re.search(r"= ([\d.]+) GFLOP/s", out)
    ratio = re.search(r"utilisation \(the step's rate / the bfloat16 peak\): ([\d.]+)", out)
    assert peak and rate and ratio
    assert float(ratio[1]) == pytest.approx(float(rate[1]) / float(peak[2]), rel=0.02)
    assert re.search(r"ratio \(fused always\) / \(the course's rule\): [\d.]+", out)
    assert all(f"Adam, {name}" in out for name in ("loop", "foreach", "fused"))


@contextmanager
def recording(calls: list):
    @contextmanager
    def kernel(backend):
        calls.append(backend)
        yield

    yield kernel


@pytest.mark.parametrize("dtype, math", [(torch.bfloat16, True), (torch.float32, False)])
def test_the_rule_takes_the_plain_kernel_for_bfloat16_on_a_cpu_only(monkeypatch, dtype, math):
    calls: list = []
    with recording(calls) as kernel:
        monkeypatch.setattr(attention, "sdpa_kernel", kernel)
        q, k, v = (torch.randn(2, 4, 5, 8, dtype=dtype) for _ in range(3))
        attention.fused_sdpa(q, k, v, None)
    assert calls == ([attention.SDPBackend.MATH] if math else [])


def test_the_plain_kernel_gives_the_fused_kernels_numbers_gradients_included():
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 4, 6, 8, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    mask = torch.ones(3, 1, 6, 6, dtype=torch.bool).tril()
    mask[0, :, :, 4:] = False  # a padded sentence
    ours = attention.fused_sdpa(q, k, v, mask)
    grads = torch.autograd.grad(ours.float().sum(), (q, k, v))
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    their_grads = torch.autograd.grad(theirs.float().sum(), (q, k, v))
    assert torch.allclose(ours.float(), theirs.float(), atol=2e-2)
    assert all(torch.allclose(a.float(), b.float(), atol=5e-2) for a, b in zip(grads, their_grads))
