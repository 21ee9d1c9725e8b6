"""Words or subwords? Re-run the experiment behind the ``full`` preset's ``bpe_merges``.

The same model and seed, only ``bpe_merges`` changed, at two scales of data, each run
scored on test_2016_flickr with greedy decoding (sacreBLEU, cased and detokenized, and
the lowercased tokenized "tutorial" BLEU):

* ``small``: the ``quick`` preset as it is (first 6,000 pairs, 8 epochs), with whole
  words and 1,000, 2,000 and 4,000 merges;
* ``all``: all 29,000 pairs, the ``quick`` model for 5 epochs (warm-up 400 updates,
  2,048 tokens a batch), with whole words and 2,000, 4,000 and 8,000 merges.

Notebook 08 shows the table; ``TRAIN_PRESETS["full"]`` takes its number of merges from
the ``all`` row. Each run's checkpoints go to ``runs/bpe_comparison/<scale>_<merges>/``
(git-ignored); the scores, vocabulary sizes and times to ``<out>/results.json``.

Usage (from the repository root, where Multi30k can be found; about 25 minutes on a
2-core CPU)::

    python scripts/compare_bpe.py --out results/bpe_comparison [--scales small all]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from transformer_lessons.config import TRAIN_PRESETS
from transformer_lessons.run import prepare_corpus_for, train

QUICK = TRAIN_PRESETS["quick"]
SCALES = {
    "small": (QUICK, (None, 1000, 2000, 4000)),
    "all": (QUICK.replace(limit=None, epochs=5, warmup=400, max_tokens=2048), (None, 2000, 4000, 8000)),
}


def run(scale: str, merges: int | None, runs_dir: Path) -> dict:
    config = SCALES[scale][0].replace(name=f"bpe_{scale}_{merges or 'words'}", bpe_merges=merges)
    corpus = prepare_corpus_for(config, progress=False)
    start = time.perf_counter()
    result = train(
        config,
        corpus=corpus,
        device="cpu",
        out_dir=runs_dir / f"{scale}_{merges or 'words'}",
        resume=False,
        progress=False,
        log=True,
    )
    test = result["test"]
    return {
        "scale": scale,
        "bpe_merges": merges,
        "src_vocab": len(corpus.src_vocab),
        "tgt_vocab": len(corpus.tgt_vocab),
        "train_pairs": len(corpus.pairs["train"]),
        "steps": result["step"],
        "best_val_bleu": result["best_val_bleu"],
        "bleu": test["bleu"],
        "tutorial_bleu": test["tutorial_bleu"],
        "signature": test["signature"],
        "train_time_s": result["train_time_s"],
        "wall_time_s": time.perf_counter() - start,
        "train_config": config.to_dict(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("results/bpe_comparison"), help="where results.json goes")
    parser.add_argument("--runs", type=Path, default=Path("runs/bpe_comparison"), help="where the runs' checkpoints go")
    parser.add_argument("--scales", nargs="+", choices=tuple(SCALES), default=list(SCALES))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    rows = []
    for scale in args.scales:
        for merges in SCALES[scale][1]:
            print(f"== {scale}, {'whole words' if merges is None else f'{merges} merges'}", flush=True)
            rows.append(run(scale, merges, args.runs))
            record = {
                "device": f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)",
                "torch": torch.__version__,
                "runs": rows,
            }
            (args.out / "results.json").write_text(json.dumps(record, indent=1) + "\n")  # after every run: nothing lost

    print(
        f"\n{'scale':6s} {'merges':>7s} {'vocab de/en':>12s} {'steps':>6s} {'BLEU':>6s} {'tutorial':>9s} {'train s':>8s}"
    )
    for r in rows:
        merges = "words" if r["bpe_merges"] is None else str(r["bpe_merges"])
        print(
            f"{r['scale']:6s} {merges:>7s} {r['src_vocab']:>5d}/{r['tgt_vocab']:<6d} {r['steps']:>6d} "
            f"{r['bleu']:6.2f} {r['tutorial_bleu']:9.2f} {r['train_time_s']:8.0f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
