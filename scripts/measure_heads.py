"""Measure which attention heads the course's translator needs: each head off on its own, then many pruned together.

:func:`transformer_lessons.heads.head_importance` scores a fixed sample of test sentences (the first ``--n`` of
the split) with every head on, then with each of the 72 heads off on its own; then
:func:`transformer_lessons.heads.prune_by_importance` switches them off together, the least important first,
every ``--step`` heads, and in ``--random`` random orders beside it (what the importance order is worth).
Each head's drop is tested against the noise of the sample with sacreBLEU's own paired bootstrap
(``sacrebleu.significance.PairedTest``, 1,000 resamples of the sentences, its fixed seed): the same sentences
translated with every head on and with that head off. The record (``results.json``, and its copy
``transformer_lessons/data/heads_record.json`` that notebook 15 reads, on Colab too) holds all of it, ready
for ``HeadImportance.from_dict`` and ``PruningCurve.from_dict``.

Usage (from the repository root)::

    python scripts/measure_heads.py --out results/heads [--n 100] [--beam 1] [--step 8] [--random 5]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
from pathlib import Path

import torch
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from transformer_lessons import data
from transformer_lessons.heads import (
    KINDS,
    all_heads,
    head_importance,
    prune_by_importance,
    prune_in_order,
    translations_with_heads_off,
)
from transformer_lessons.pretrained import load_course_model

SHIPPED = Path(__file__).resolve().parents[1] / "transformer_lessons" / "data" / "heads_record.json"


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
    text = json.dumps(record, indent=1) + "\n"
    (out / "results.json").write_text(text)
    if out.resolve() == (SHIPPED.parents[2] / "results" / "heads").resolve():
        SHIPPED.write_text(text)


def bootstrap(systems: list[tuple[str, list[str]]], references: list[str]) -> list:
    """sacreBLEU's paired bootstrap (1,000 resamples) of each system against the first: its ``Result`` for each, baseline first."""
    _, scores = PairedTest(systems, {"BLEU": BLEU()}, [references], test_type="bs", n_samples=1000)()
    return scores["BLEU"]


def layer_tests(model, samples: dict, beam: int, vocab: dict) -> dict:
    """Each attention layer's 8 heads off together, on each sample, tested against every head on (paired bootstrap)."""
    layers = sorted({(kind, layer) for kind, layer, _ in all_heads(model)}, key=lambda r: (KINDS.index(r[0]), r[1]))
    record = {}
    for name, (sources, references) in samples.items():
        on = translations_with_heads_off(model, sources, [], beam_size=beam, **vocab)
        systems = [("every head on", on)]
        for kind, layer in layers:
            heads = [h for h in all_heads(model) if h[:2] == (kind, layer)]
            systems.append(
                (f"{kind}/{layer}", translations_with_heads_off(model, sources, heads, beam_size=beam, **vocab))
            )
        results = bootstrap(systems, references)
        record[name] = {"every head on": results[0].score} | {
            system: {"bleu": result.score, "p": result.p_value} for (system, _), result in zip(systems[1:], results[1:])
        }
    return record


def paired_tests(importance, references: list[str]) -> dict:
    """sacreBLEU's paired bootstrap of each head off against every head on: ``{head: {"p": p, "ci": half-width}}``."""
    names = ["/".join(map(str, head)) for head in importance.bleu]
    systems = [("every head on", importance.translations[None])]
    systems += [(name, importance.translations[head]) for name, head in zip(names, importance.bleu)]
    results = bootstrap(systems, references)[1:]  # the first is the baseline itself
    return {name: {"p": result.p_value, "ci": result.ci} for name, result in zip(names, results)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("results/heads"))
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--n", type=int, default=100, help="the first N sentences of the split (default 100)")
    parser.add_argument("--beam", type=int, default=1, help="1 = greedy (default), more = beam search")
    parser.add_argument("--step", type=int, default=8, help="measure the pruning curve every STEP heads (default 8)")
    parser.add_argument("--random", type=int, default=5, help="random orders pruned beside the importance order")
    parser.add_argument("--layers-only", action="store_true", help="add only the whole-layer tests to the record")
    args = parser.parse_args(argv)
    course = load_course_model(device="cpu", progress=False)
    pairs = data.load_split(args.split, progress=False)[: 2 * args.n]
    sources, references = [de for de, _ in pairs[: args.n]], [en for _, en in pairs[: args.n]]
    vocab = dict(src_vocab=course.src_vocab, tgt_vocab=course.tgt_vocab)
    if args.layers_only:
        record = json.loads((args.out / "results.json").read_text())
        held = pairs[args.n :]
        samples = {"chosen": (sources, references), "held_out": ([de for de, _ in held], [en for _, en in held])}
        record["layers"] = {
            "test": "each layer's heads all off, against every head on, sacreBLEU's paired bootstrap (1,000 resamples)",
            "samples": {
                "chosen": f"the first {args.n} sentences",
                "held_out": f"sentences {args.n + 1} to {2 * args.n}",
            },
        } | layer_tests(course.model, samples, args.beam, vocab)
        _write(args.out, record)
        print(json.dumps(record["layers"], indent=1))
        return 0
    importance = head_importance(
        course.model, sources, references, n=args.n, beam_size=args.beam, keep_translations=True, **vocab
    )
    tests = paired_tests(importance, references)
    record = {
        "checkpoint": course.describe(),
        "split": args.split,
        "sample": f"the first {len(sources)} sentences",
        "decoding": "greedy" if args.beam == 1 else f"beam {args.beam}",
        "bleu": "sacreBLEU corpus BLEU, defaults (nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp)",
        "importance": importance.to_dict(),
        "paired_bootstrap": {
            "test": "sacreBLEU's paired bootstrap (sacrebleu.significance.PairedTest, test_type='bs', 1,000 "
            "resamples, its default seed 12345): each head off against every head on, on the same sentences",
            "heads": tests,
            "below_0.05": sum(t["p"] < 0.05 for t in tests.values()),
        },
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
    print(f"pruning: {curve.seconds:.0f} s", flush=True)
    heads = all_heads(course.model)
    record["random_pruning"] = random_curves(course.model, sources, references, heads, counts, args, vocab)
    _write(args.out, record)
    # The importance order was chosen on the sample it is measured on: the next N sentences, which chose nothing.
    held = data.load_split(args.split, progress=False)[args.n : 2 * args.n]
    held_src, held_ref = [de for de, _ in held], [en for _, en in held]
    in_order = prune_in_order(
        course.model, held_src, held_ref, order=curve.order, counts=counts, n=None, beam_size=args.beam, **vocab
    )
    record["held_out"] = {
        "sample": f"sentences {args.n + 1} to {args.n + len(held)} of the split, which chose nothing",
        "importance_order": in_order.to_dict(),
        "random": random_curves(course.model, held_src, held_ref, heads, counts, args, vocab),
    }
    _write(args.out, record)
    return 0


def random_curves(model, sources, references, heads, counts, args, vocab) -> list[dict]:
    """The pruning curve in ``args.random`` random orders (seeds 0, 1, ...): what any order of the heads gives."""
    return [
        prune_in_order(
            model,
            sources,
            references,
            order=random.Random(seed).sample(heads, len(heads)),
            counts=counts,
            n=args.n,
            beam_size=args.beam,
            **vocab,
        ).to_dict()
        | {"seed": seed}
        for seed in range(args.random)
    ]


if __name__ == "__main__":
    raise SystemExit(main())
