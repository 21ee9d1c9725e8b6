"""Measure the error analysis on the course's model: BLEU by source length, beam against greedy, the time taken.

:func:`transformer_lessons.error_analysis.score_sentences` decodes the sample twice (beam 4 with
α = 0.6, as the paper's §6.1, and greedy) and scores each sentence with sacreBLEU; this script runs
it on test_2016_flickr (all 1,000 sentences by default) and records the figures.

Usage (from the repository root; under a minute on a 2-core CPU)::

    python scripts/measure_errors.py --out results/error_analysis [--limit 200] [--checkpoint PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
from pathlib import Path

import torch

from transformer_lessons.error_analysis import bleu_by_length, greedy_vs_beam, score_sentences, worst_and_best
from transformer_lessons.pretrained import COURSE_MODEL_PATH


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("results/error_analysis"))
    parser.add_argument(
        "--checkpoint", default=COURSE_MODEL_PATH, help=f"the model (default: the course's, {COURSE_MODEL_PATH})"
    )
    parser.add_argument("--limit", type=int, default=None, help="the first LIMIT test sentences (default: all)")
    args = parser.parse_args(argv)
    analysis = score_sentences(args.checkpoint, "test_2016_flickr", limit=args.limit, device="cpu")
    buckets = bleu_by_length(analysis)
    cmp = greedy_vs_beam(analysis, examples=3)
    worst, best = worst_and_best(analysis, n=5)
    record = {
        "checkpoint": args.checkpoint,
        "split": analysis.split,
        "n": len(analysis.sentences),
        "beam_size": analysis.beam_size,
        "length_penalty": analysis.length_penalty,
        "bleu": analysis.bleu,
        "greedy_bleu": analysis.greedy_bleu,
        "signatures": analysis.signatures,
        "bleu_by_length": [
            {k: v for k, v in dataclasses.asdict(b).items() if k != "indices"} | {"n": b.n} for b in buckets
        ],
        "beam_vs_greedy": {
            "helps": cmp.helps,
            "hurts": cmp.hurts,
            "ties": cmp.ties,
            "same_output": cmp.same_output,
            "mean_chrf_gain": cmp.mean_gain,
            "helped": [dataclasses.asdict(s) for s in cmp.helped],
            "hurt": [dataclasses.asdict(s) for s in cmp.hurt],
        },
        "worst": [dataclasses.asdict(s) for s in worst],
        "best": [dataclasses.asdict(s) for s in best],
        "device": f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)",
        "torch": torch.__version__,
        "seconds": round(analysis.seconds, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(analysis.describe())
    for b in buckets:
        print(
            f"source {b.label:>8s} words: n={b.n:4d}  beam BLEU {b.bleu or 0:5.2f}  greedy BLEU {b.greedy_bleu or 0:5.2f}"
        )
    print(
        f"beam against greedy (chrF): helps {cmp.helps}, hurts {cmp.hurts}, ties {cmp.ties} "
        f"({cmp.same_output} with the same words); mean gain {cmp.mean_gain:+.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
