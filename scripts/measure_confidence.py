"""Measure the translator's confidence signal: does it tell captions from sentences that are not captions?

The signal is :mod:`transformer_lessons.confidence`'s: the mean log-probability per token that the model
gives its own beam-4 translation. The threshold is set on the validation captions alone (their 5th
percentile: one caption in twenty is flagged), then judged on sentences it never saw: the 1,000 test
captions against the 67 sentences of :mod:`transformer_lessons.data.not_captions` (AUROC, and the share
flagged in each group and kind). Two more questions, from the same translations:

- Does the signal say anything about quality? Each test translation's sentence chrF against its reference
  (sacreBLEU), set against its signal: Spearman's correlation, and the AUROC with which the signal finds the
  translations under chrF 40.
- A near-domain test: the 461 sentences of ``test_2017_mscoco`` (captions of other photographs, MS COCO, with
  words and scenes Flickr30k has less of), against the Flickr test captions.

The record (``results.json``, and its copy ``transformer_lessons/data/confidence_record.json`` that notebook 15
reads, on Colab too) keeps every signal and chrF.

Usage (from the repository root; about 1 to 2 minutes on a 2-core CPU)::

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
from transformer_lessons.confidence import assess, auroc, spearman
from transformer_lessons.data.not_captions import NOT_CAPTIONS
from transformer_lessons.pretrained import COURSE_MODEL_PATH

PERCENTILE = 5  # of the validation captions: the share of captions the threshold flags
BAD_BELOW = 40  # sentence chrF under which a translation counts as bad, for the AUROC of the signal on quality
SHIPPED = Path(__file__).resolve().parents[1] / "transformer_lessons" / "data" / "confidence_record.json"


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` (linear interpolation between the nearest ranks)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def signals(model, sentences: list[str]) -> list[float]:
    return [c.mean_log_prob for c in assess(model, sentences, beam_size=4, device="cpu")]


def quality(model, split: str, threshold: float) -> dict:
    """The signal and the sentence chrF of each of ``split``'s translations, and what the one says of the other."""
    from sacrebleu.metrics import BLEU, CHRF

    pairs = data.load_split(split, progress=False)
    assessed = assess(model, [de for de, _ in pairs], beam_size=4, device="cpu")
    signal = [c.mean_log_prob for c in assessed]
    chrf = [CHRF().sentence_score(c.translation, [en]).score for c, (_, en) in zip(assessed, pairs)]
    flagged = [f for f, s in zip(chrf, signal) if s < threshold]
    kept = [f for f, s in zip(chrf, signal) if s >= threshold]
    bad = [s for f, s in zip(chrf, signal) if f < BAD_BELOW]
    good = [s for f, s in zip(chrf, signal) if f >= BAD_BELOW]
    return {
        "split": split,
        "n": len(pairs),
        "bleu": BLEU().corpus_score([c.translation for c in assessed], [[en for _, en in pairs]]).score,
        "flagged": len(flagged) / len(pairs),
        "spearman_signal_chrf": spearman(signal, chrf),
        f"auroc_signal_finds_chrf_below_{BAD_BELOW}": auroc(good, bad) if bad and good else None,
        f"n_chrf_below_{BAD_BELOW}": len(bad),
        "mean_chrf_flagged": statistics.mean(flagged) if flagged else None,
        "mean_chrf_not_flagged": statistics.mean(kept) if kept else None,
        "mean_signal": statistics.mean(signal),
        "signals": signal,
        "chrf": chrf,
    }


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
    flickr = quality(args.checkpoint, "test_2016_flickr", threshold)
    mscoco = quality(args.checkpoint, "test_2017_mscoco", threshold)
    test = flickr["signals"]
    kinds = {kind: signals(args.checkpoint, list(sentences)) for kind, sentences in NOT_CAPTIONS.items()}
    outside = [s for values in kinds.values() for s in values]
    record = {
        "checkpoint": args.checkpoint,
        "signal": "mean log-probability per token of the model's own beam-4 translation, scored by the model (forced decoding)",
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
        "quality": {
            "metric": "sentence chrF of each translation against its reference (sacreBLEU CHRF(), defaults)",
            "test_2016_flickr": {k: v for k, v in flickr.items() if k != "signals"},
            "test_2017_mscoco": mscoco,
            "auroc_flickr_vs_mscoco": auroc(test, mscoco["signals"]),
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(record, indent=1) + "\n"
    (args.out / "results.json").write_text(text)
    if args.out.resolve() == (SHIPPED.parents[2] / "results" / "confidence").resolve():
        SHIPPED.write_text(text)
    print(
        f"threshold {threshold:.3f} ({record['threshold_rule']}); AUROC test captions vs not captions "
        f"{record['auroc_test_captions_vs_not_captions']:.3f}"
    )
    for group, share in record["flagged"].items():
        print(f"flagged: {group:32s} {share:6.1%}")
    for split, q in (("test_2016_flickr", flickr), ("test_2017_mscoco", mscoco)):
        print(
            f"{split}: BLEU {q['bleu']:.2f}, flagged {q['flagged']:.1%}, Spearman(signal, chrF) "
            f"{q['spearman_signal_chrf']:.3f}, AUROC for chrF < {BAD_BELOW} {q[f'auroc_signal_finds_chrf_below_{BAD_BELOW}']:.3f}, "
            f"chrF flagged {q['mean_chrf_flagged']:.1f} vs {q['mean_chrf_not_flagged']:.1f}"
        )
    print(f"AUROC test_2016_flickr vs test_2017_mscoco: {record['quality']['auroc_flickr_vs_mscoco']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
