"""Measure which attention heads the course's translator needs: each head off on its own, then many pruned together.

:func:`transformer_lessons.heads.head_importance` scores a fixed sample of test sentences (the first ``--n`` of
the split) with every head on, then with each of the 72 heads off on its own; then
:func:`transformer_lessons.heads.prune_by_importance` switches them off together, the least important first,
every ``--step`` heads. The record (``results.json``) holds both, ready for
``HeadImportance.from_dict`` and ``PruningCurve.from_dict`` (notebook 15 draws them without measuring again).

Usage (from the repository root)::

    python scripts/measure_heads.py --out results/heads [--n 100] [--beam 1] [--step 8]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from pathlib import Path

import torch

from transformer_lessons import data
from transformer_lessons.heads import KINDS, head_importance, prune_by_importance
from transformer_lessons.pretrained import load_course_model


def summary(importance, curve) -> dict:
    """What the numbers say, in a few lines: the heads that matter most, each kind's mean, where pruning hurts."""
    drop = importance.drop
    ranked = importance.ranked()
    below_90 = [k for k, bleu in zip(curve.counts, curve.bleu) if bleu < 0.9 * importance.baseline]
    return {
        "most_important": [["/".join(map(str, head)), round(drop[head], 2)] for head in reversed(ranked[-8:])],
        "mean_drop_by_kind": {kind: statistics.mean(d for h, d in drop.items() if h[0] == kind) for kind in KINDS},
        "max_drop_by_kind": {kind: max(d for h, d in drop.items() if h[0] == kind) for kind in KINDS},
        "heads_costing_under_0.5_bleu": sum(d < 0.5 for d in drop.values()),
        "heads_raising_bleu": sum(d < 0 for d in drop.values()),
        "heads_off_when_bleu_first_fell_below_90pct": below_90[0] if below_90 else None,
    }


def _write(out: Path, record: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(record, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("results/heads"))
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--n", type=int, default=100, help="the first N sentences of the split (default 100)")
    parser.add_argument("--beam", type=int, default=1, help="1 = greedy (default), more = beam search")
    parser.add_argument("--step", type=int, default=8, help="measure the pruning curve every STEP heads (default 8)")
    args = parser.parse_args(argv)
    course = load_course_model(device="cpu", progress=False)
    pairs = data.load_split(args.split, progress=False)[: args.n]
    sources, references = [de for de, _ in pairs], [en for _, en in pairs]
    vocab = dict(src_vocab=course.src_vocab, tgt_vocab=course.tgt_vocab)
    importance = head_importance(course.model, sources, references, n=args.n, beam_size=args.beam, **vocab)
    record = {
        "checkpoint": course.describe(),
        "split": args.split,
        "sample": f"the first {len(sources)} sentences",
        "decoding": "greedy" if args.beam == 1 else f"beam {args.beam}",
        "bleu": "sacreBLEU corpus BLEU, defaults (nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp)",
        "importance": importance.to_dict(),
        "pruning": None,  # written once measured: the importance is kept even if pruning is stopped
        "device": f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)",
        "torch": torch.__version__,
    }
    _write(args.out, record)
    print(f"every head on: {importance.baseline:.2f} BLEU on {len(sources)} sentences ({record['decoding']})")
    print(f"each head off: {importance.seconds:.0f} s", flush=True)
    counts = sorted(set(range(0, len(importance.bleu) + 1, args.step)) | {len(importance.bleu)})
    curve = prune_by_importance(
        course.model, sources, references, importance=importance, counts=counts, n=args.n, beam_size=args.beam, **vocab
    )
    record |= {"pruning": curve.to_dict(), "summary": summary(importance, curve)}
    _write(args.out, record)
    print(json.dumps(record["summary"], indent=1))
    print(f"pruning: {curve.seconds:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
