"""Measure the translator's confidence signal: does it tell captions from sentences that are not captions?

The signal is :mod:`transformer_lessons.confidence`'s: the mean log-probability per token that the model
gives its own beam-4 translation. The threshold is set on the validation captions alone (their 5th
percentile: one caption in twenty is flagged), then judged on sentences it never saw: the 1,000 test
captions against the 67 sentences of :mod:`transformer_lessons.data.not_captions` (AUROC, and the share
flagged in each group and kind).

Usage (from the repository root; about 6 minutes on a 2-core CPU)::

    python scripts/measure_confidence.py --out results/confidence [--checkpoint PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from transformer_lessons import data
from transformer_lessons.confidence import assess, auroc
from transformer_lessons.data.not_captions import NOT_CAPTIONS
from transformer_lessons.pretrained import COURSE_MODEL_PATH

PERCENTILE = 5  # of the validation captions: the share of captions the threshold flags


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` (linear interpolation between the nearest ranks)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def signals(model, sentences: list[str]) -> list[float]:
    return [c.mean_log_prob for c in assess(model, sentences, beam_size=4, device="cpu")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("results/confidence"))
    parser.add_argument(
        "--checkpoint", default=COURSE_MODEL_PATH, help=f"the model (default: the course's, {COURSE_MODEL_PATH})"
    )
    args = parser.parse_args(argv)
    start = time.perf_counter()
    val = signals(args.checkpoint, [de for de, _ in data.load_split("val", progress=False)])
    threshold = percentile(val, PERCENTILE)
    test = signals(args.checkpoint, [de for de, _ in data.load_split("test_2016_flickr", progress=False)])
    kinds = {kind: signals(args.checkpoint, list(sentences)) for kind, sentences in NOT_CAPTIONS.items()}
    outside = [s for values in kinds.values() for s in values]
    record = {
        "checkpoint": args.checkpoint,
        "signal": "mean log-probability per token of the model's own beam-4 translation (teacher forcing)",
        "threshold": threshold,
        "threshold_rule": f"the {PERCENTILE}th percentile of the {len(val)} validation captions",
        "auroc_test_captions_vs_not_captions": auroc(test, outside),
        "flagged": {
            "validation captions": sum(s < threshold for s in val) / len(val),
            "test captions": sum(s < threshold for s in test) / len(test),
            "not captions": sum(s < threshold for s in outside) / len(outside),
        }
        | {f"not captions: {kind}": sum(s < threshold for s in values) / len(values) for kind, values in kinds.items()},
        "mean_signal": {
            "validation": statistics.mean(val),
            "test": statistics.mean(test),
            "not captions": statistics.mean(outside),
        },
        "n": {"validation": len(val), "test": len(test), "not captions": len(outside)},
        "device": f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)",
        "torch": torch.__version__,
        "seconds": round(time.perf_counter() - start),
        "signals": {"test": test, "not captions": kinds},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(record, indent=1) + "\n")
    print(
        f"threshold {threshold:.3f} ({record['threshold_rule']}); AUROC test captions vs not captions "
        f"{record['auroc_test_captions_vs_not_captions']:.3f}"
    )
    for group, share in record["flagged"].items():
        print(f"flagged: {group:32s} {share:6.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
