"""From 2017 to today, measured: each later change to the Transformer against the paper's model, on the translator.

Every run trains a small model (the ``quick`` preset's: 2+2 layers, d_model 128, 4 heads) on all of
Multi30k (4,000 BPE merges, as the course's model) for the same training time on this machine, changed in one named option
(:class:`~transformer_lessons.config.ModelConfig`, :class:`~transformer_lessons.config.TrainConfig`),
and is scored on test_2016_flickr with the paper's beam (4, α 0.6). The paper's model runs with three
seeds, so that the table shows the noise beside each difference. Two targeted experiments follow:

* ``warmup``: post-norm (the paper's) against pre-norm without warm-up, and at four times the rate:
  does one of them diverge (:class:`~transformer_lessons.errors.DivergedError`), or lag?
* ``long``: the sinusoidal and the rotary model on sentences longer than any in training (two test
  captions joined, German to German and English to English), BLEU by source length.

Each run trains into ``<runs>/<name>`` (git-ignored: checkpoints) and is recorded in
``<out>/<name>/`` (its ``metrics.json`` and ``history.json``); ``<out>/results.json`` holds every run's
numbers after each run, so an interrupted lab loses at most the run in progress, and the same command
resumes it (finished runs are not trained again). Run it on an otherwise idle machine: the runs are
compared at equal *time*, so a neighbour's load is a handicap for the run it falls on.

Usage, from the repository root (about 95 minutes on the project's 2-core CPU at 6 minutes a run)::

    python scripts/since_2017.py --minutes 6 --corpus runs/multi30k_cpu.json.gz
    python scripts/since_2017.py --only baseline_s0 rmsnorm --minutes 6     # some runs only
    python scripts/since_2017.py --list                                   # what would run
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import torch

from transformer_lessons.config import TRAIN_PRESETS, TrainConfig
from transformer_lessons.errors import DivergedError

# The lab's model is the quick preset's (2+2 layers, d_model 128, 4 heads), not the course's (3+3, 256, 8 heads):
# in 6 minutes on 2 cores the course's model makes ~490 updates (2 epochs, test BLEU ~4, nothing to compare), the
# small one ~2,900 (7 epochs of all 29,000 pairs; its 5-epoch run in results/bpe_comparison scored 31.0).
# Its data are the course's: all pairs, 4,000 BPE merges; beam 4, alpha 0.6 on the test set, as the paper's.
BASE = TRAIN_PRESETS["cpu"].replace(
    name="since_2017",
    model=TRAIN_PRESETS["quick"].model.replace(max_len=256),
    max_tokens=2048,
    lr_factor=0.3,  # peak 0.3 / sqrt(128 * 400) = 1.3e-3, as in results/bpe_comparison
    warmup=400,
    eval_every=1,
    bleu_val_limit=500,
)
# The same grid on one GPU (--preset full): the `full` preset's model, in float32 like the paper (its `auto`
# precision would already be bfloat16 on a recent GPU, and the bf16 run would then change nothing), warmed up
# over 800 updates: a run of a minute or two has only a few thousand.
FULL_BASE = TRAIN_PRESETS["full"].replace(
    name="since_2017_full", eval_every=1, bleu_val_limit=500, warmup=800, precision="float32"
)
SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class Variant:
    """One run of the lab: a name, what it changes in the paper's model or its training, and why."""

    name: str
    model: dict = field(default_factory=dict)  # ModelConfig fields
    train: dict = field(default_factory=dict)  # TrainConfig fields
    why: str = ""
    group: str = "options"  # options | warmup
    minutes: float | None = None  # None: the lab's --minutes


VARIANTS = [
    *(
        Variant(
            f"baseline_s{seed}", train={"seed": seed}, why="the paper's model (post-norm, LayerNorm, ReLU, sinusoids)"
        )
        for seed in SEEDS
    ),
    Variant("pre-norm", model={"norm_first": True}, why="LayerNorm before each sublayer (Xiong et al. 2020)"),
    Variant("rmsnorm", model={"norm": "rmsnorm"}, why="RMSNorm (Zhang & Sennrich 2019)"),
    Variant("swiglu", model={"ffn": "swiglu"}, why="SwiGLU feed-forward at equal parameters (Shazeer 2020)"),
    Variant(
        "gqa-2",
        model={"n_kv_heads": 2},
        why="grouped-query attention, 4 query heads share 2 key/value heads (Ainslie et al. 2023)",
    ),
    Variant("mqa", model={"n_kv_heads": 1}, why="multi-query attention, one key/value head (Shazeer 2019)"),
    Variant("rotary", model={"positional": "rotary"}, why="rotary positions instead of sinusoids (Su et al. 2021)"),
    Variant("bf16", train={"precision": "bfloat16"}, why="bfloat16 autocast on the CPU: more updates in the same time"),
    # Paper §6.1 averages 5 checkpoints 10 minutes apart at the end of 12 hours; a 6-minute run has about 7 epochs.
    Variant(
        "average-2", train={"average_last": 2}, why="the mean of the last 2 epochs' weights (paper §6.1 averages 5)"
    ),
    Variant(
        "post-norm_no-warmup", train={"warmup": 1}, group="warmup", minutes=2.5, why="the paper's post-norm, no warm-up"
    ),
    Variant(
        "pre-norm_no-warmup",
        model={"norm_first": True},
        train={"warmup": 1},
        group="warmup",
        minutes=2.5,
        why="pre-norm, no warm-up",
    ),
    Variant(
        "post-norm_4x-rate",
        train={"lr_factor": 4 * BASE.lr_factor},
        group="warmup",
        minutes=2.5,
        why="post-norm, 4x the peak rate",
    ),
    Variant(
        "pre-norm_4x-rate",
        model={"norm_first": True},
        train={"lr_factor": 4 * BASE.lr_factor},
        group="warmup",
        minutes=2.5,
        why="pre-norm, 4x the peak rate",
    ),
]


def config_of(variant: Variant, base: TrainConfig, minutes: float, short: float | None = None) -> TrainConfig:
    """``base`` with the variant's changes, named after it, stopped after its training time.

    ``minutes`` is the options' time; a variant with a time of its own (the warm-up runs) takes ``short`` if given.
    """
    model = base.model.replace(**variant.model)
    time = minutes if variant.minutes is None else (short or variant.minutes)
    return base.replace(name=variant.name, model=model, max_minutes=time, **variant.train)


def merge(parts: list[Path], out: Path) -> dict:
    """One record from labs run side by side (each with ``--only`` some runs and an ``--out`` of its own)."""
    parts = [part for part in parts if (part / "results.json").is_file()]  # a part that failed left none
    if not parts:
        raise SystemExit("no results.json in any of the parts: nothing to merge")
    records = [json.loads((part / "results.json").read_text()) for part in parts]
    done = {r["name"]: r for record in records for r in record["runs"]}
    merged = {k: v for k, v in records[0].items() if k not in ("runs", "long")}
    merged["runs"] = [done[v.name] for v in VARIANTS if v.name in done]
    merged["long"] = next((record["long"] for record in records if "long" in record), {})
    merged["parts"] = [[r["name"] for r in record["runs"]] for record in records]  # which runs shared the machine
    out.mkdir(parents=True, exist_ok=True)
    for part in parts:
        for folder in part.iterdir():
            if folder.is_dir():
                shutil.copytree(folder, out / folder.name, dirs_exist_ok=True)
    (out / "results.json").write_text(json.dumps(merged, indent=1) + "\n")
    return merged


def run_variant(
    variant: Variant, config: TrainConfig, corpus, runs: Path, out: Path, train, device: str = "cpu"
) -> dict:
    """Train (or resume) one variant and record it; a run that diverges is recorded as such, not raised."""
    folder = runs / variant.name
    row = {
        "name": variant.name,
        "group": variant.group,
        "why": variant.why,
        "changes": {**variant.model, **variant.train},
    }
    try:
        result = train(config, corpus=corpus, device=device, out_dir=folder, progress=False, log=True)
    except DivergedError as err:
        history = json.loads((folder / "history.json").read_text()) if (folder / "history.json").is_file() else []
        return row | {"diverged": str(err), "epochs": len(history), "history": history}
    metrics = result["metrics"]
    (out / variant.name).mkdir(parents=True, exist_ok=True)
    for name in ("metrics.json", "history.json"):
        shutil.copy(folder / name, out / variant.name / name)
    history = result["history"]
    return row | {
        "diverged": None,
        "parameters": metrics["parameters"],
        "steps": metrics["steps"],
        "epochs": metrics["epochs"],
        "train_time_s": metrics["train_time_s"],
        "tokens_per_s": metrics["train_tokens_per_s"],
        "val_loss": min((h["val_loss"] for h in history), default=math.nan),  # nan: stopped before an epoch ended
        "best_val_bleu": metrics["best_val_bleu"],
        "test_bleu": metrics["test_2016_flickr"]["bleu"],
        "signature": metrics["test_2016_flickr"]["signature"],
    }


def joined_pairs(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Consecutive test pairs joined into one, German with German and English with English: longer than training's."""
    return [(f"{a[0]} {b[0]}", f"{a[1]} {b[1]}") for a, b in zip(pairs[0::2], pairs[1::2])]


BUCKETS = ((0, 20), (21, 30), (31, 40), (41, 1000))  # source words


def bleu_by_length(hypotheses: list[str], pairs: list[tuple[str, str]]) -> dict[str, dict]:
    """sacreBLEU of the hypotheses in each bucket of source length (words), with the bucket's size."""
    import sacrebleu

    out = {}
    for low, high in BUCKETS:
        rows = [(h, en) for h, (de, en) in zip(hypotheses, pairs) if low <= len(de.split()) <= high]
        if rows:
            score = sacrebleu.corpus_bleu([h for h, _ in rows], [[en for _, en in rows]]).score
            out[f"{low}-{high if high < 1000 else ''}"] = {"n": len(rows), "bleu": score}
    return out


def long_sentences(names: list[str], runs: Path, pairs: list[tuple[str, str]], device: str = "cpu") -> dict[str, dict]:
    """Each named run's best model on the joined test captions: BLEU by source length."""
    from transformer_lessons.translation import translate

    joined = joined_pairs(pairs)
    results = {}
    for name in names:
        checkpoint = runs / name / "best.pt"
        if not checkpoint.is_file():
            print(f"(no {checkpoint}: train {name} first)")
            continue
        hypotheses = translate(str(checkpoint), [de for de, _ in joined], beam_size=4, device=device)
        results[name] = bleu_by_length(hypotheses, joined)
    return results


def summary(rows: list[dict]) -> list[str]:
    """The table: each run's numbers, and its test BLEU minus the baseline seeds' mean (their spread beside it)."""
    base = [r["test_bleu"] for r in rows if r["name"].startswith("baseline") and not r.get("diverged")]
    mean = statistics.mean(base) if base else math.nan
    spread = statistics.stdev(base) if len(base) > 1 else math.nan
    lines = [
        f"baseline test BLEU: mean {mean:.2f}, standard deviation {spread:.2f} over {len(base)} seeds",
        f"{'run':22s} {'params':>10s} {'tok/s':>7s} {'steps':>6s} {'val loss':>8s} {'val BLEU':>8s} {'test BLEU':>9s} {'vs base':>7s}",
    ]
    for r in rows:
        if r.get("diverged"):
            lines.append(f"{r['name']:22s} diverged after {r['epochs']} epochs: {r['diverged']}")
            continue
        lines.append(
            f"{r['name']:22s} {r['parameters']:>10,d} {r['tokens_per_s']:>7,.0f} {r['steps']:>6d} {r['val_loss']:>8.3f} "
            f"{r['best_val_bleu'] if r['best_val_bleu'] is not None else math.nan:>8.2f} {r['test_bleu']:>9.2f} {r['test_bleu'] - mean:>+7.2f}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--minutes", type=float, default=6.0, help="training time of each run of the options (default 6)"
    )
    parser.add_argument("--only", nargs="+", metavar="NAME", help="these runs only (see --list)")
    parser.add_argument("--corpus", type=Path, help="a corpus saved by 'prepare --preset cpu' (default: prepared here)")
    parser.add_argument(
        "--out", type=Path, default=Path("results/since_2017"), help="the record (default results/since_2017)"
    )
    parser.add_argument(
        "--runs", type=Path, default=Path("runs/since_2017"), help="the checkpoints (default runs/since_2017)"
    )
    parser.add_argument(
        "--preset",
        choices=("cpu", "full"),
        default="cpu",
        help="cpu: the course's model on this CPU (default); full: the GPU preset's model, in float32",
    )
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--warmup-minutes", type=float, help="training time of each warm-up run (default: 2.5, theirs)")
    parser.add_argument("--no-long", action="store_true", help="skip the long-sentence experiment")
    parser.add_argument(
        "--merge", nargs="+", type=Path, metavar="DIR", help="merge these labs' records into --out, and exit"
    )
    parser.add_argument("--list", action="store_true", help="print the runs and exit")
    args = parser.parse_args(argv)
    chosen = [v for v in VARIANTS if not args.only or v.name in args.only]
    unknown = sorted(set(args.only or ()) - {v.name for v in VARIANTS})
    if unknown:
        parser.error(f"no run called {', '.join(unknown)}; --list shows them")
    if args.merge:
        record = merge(args.merge, args.out)
        print("\n".join(summary(record["runs"])))
        return 0
    if args.list:
        for v in chosen:
            print(f"{v.name:22s} {v.minutes or args.minutes:>4.1f} min  {v.why}")
        return 0
    from transformer_lessons.data import Corpus
    from transformer_lessons.run import prepare_corpus_for, train

    base = BASE if args.preset == "cpu" else FULL_BASE
    corpus = Corpus.load(args.corpus) if args.corpus else prepare_corpus_for(base, progress=False)
    if args.device == "cpu":
        device = f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)"
    else:
        device = f"{args.device} ({torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'unavailable'})"
    args.out.mkdir(parents=True, exist_ok=True)
    record_path = args.out / "results.json"
    record = json.loads(record_path.read_text()) if record_path.is_file() else {"runs": []}
    done = {r["name"]: r for r in record["runs"]}
    for variant in chosen:
        if variant.name in done:
            print(f"== {variant.name}: recorded already", flush=True)
            continue
        print(f"== {variant.name}: {variant.why}", flush=True)
        done[variant.name] = run_variant(
            variant,
            config_of(variant, base, args.minutes, args.warmup_minutes),
            corpus,
            args.runs,
            args.out,
            train,
            args.device,
        )
        record = {
            "device": device,
            "torch": torch.__version__,
            "minutes": args.minutes,
            "base": base.to_dict(),
            "runs": [done[v.name] for v in VARIANTS if v.name in done],
        }
        record_path.write_text(json.dumps(record, indent=1) + "\n")  # after every run: nothing lost
    long_names = ["baseline_s0", "rotary"]
    if not args.no_long and "test_2016_flickr" in corpus.text and all(n in done for n in long_names):
        pairs = list(corpus.text["test_2016_flickr"])
        record["long"] = long_sentences(long_names, args.runs, pairs, args.device)
        record_path.write_text(json.dumps(record, indent=1) + "\n")
    print("\n".join(summary(record["runs"])))
    for name, buckets in record.get("long", {}).items():
        print(
            f"long sentences, {name}: "
            + ", ".join(f"{k} words: {v['bleu']:.1f} ({v['n']})" for k, v in buckets.items())
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
