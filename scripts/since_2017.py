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
from pathlib import Path

import torch

from transformer_lessons.config import TrainConfig
from transformer_lessons.errors import DivergedError

from transformer_lessons.lab import BASE, FULL_BASE, SEEDS, VARIANTS, Variant, config_of  # noqa: F401


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
    for name in ("metrics.json", "history.json", "test_hypotheses.txt"):
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


SAMPLES = (0, 3, 8, 9, 18, 20, 32, 40)  # test_2016_flickr sentences whose translations the summary keeps, per run
HISTORY_KEYS = ("epoch", "step", "val_loss", "val_bleu", "elapsed_s")


def _compact(run: dict, folder: Path | None) -> dict:
    """One run of a record, with its validation curve and its translations of :data:`SAMPLES` when ``folder`` has them."""
    row = {k: v for k, v in run.items() if k not in ("history", "signature")}
    history_file = folder / "history.json" if folder else None
    history = json.loads(history_file.read_text()) if history_file and history_file.is_file() else run.get("history")
    if history:
        row["history"] = [{k: h.get(k) for k in HISTORY_KEYS} for h in history]
    metrics = folder / "metrics.json" if folder else None
    if metrics and metrics.is_file() and "averaged" in (averaged := json.loads(metrics.read_text())):
        row["averaged"] = averaged["averaged"]  # the tested model's own validation numbers (not the last epoch's)
    hypotheses = folder / "test_hypotheses.txt" if folder else None
    if hypotheses and hypotheses.is_file():
        lines = hypotheses.read_text(encoding="utf-8").splitlines()
        row["samples"] = [lines[i] for i in SAMPLES]
    return row


def summarize(cpu: Path, gpu: Path | None) -> dict:
    """The lab's record in one small file, for notebook 14 (``transformer_lessons/data/lab_since_2017.json``).

    ``cpu``: the CPU lab's record folder (``results/since_2017``); ``gpu``: the GPU lab's
    (``results/since_2017_full``, with ``solo/``), or None.
    """
    record = json.loads((cpu / "results.json").read_text())
    out = {
        "cpu": {k: v for k, v in record.items() if k != "runs"}
        | {
            "record": f"results/{cpu.name}",
            "sample_indices": list(SAMPLES),
            "runs": [_compact(r, cpu / r["name"]) for r in record["runs"]],
        }
    }
    if gpu is not None and (gpu / "results.json").is_file():
        grid = json.loads((gpu / "results.json").read_text())
        solo = json.loads((gpu / "solo" / "results.json").read_text())
        out["gpu"] = {k: v for k, v in grid.items() if k != "runs"} | {
            "record": f"results/{gpu.name}",
            "runs": [_compact(r, None) for r in grid["runs"]],
            "solo": [_compact(r, gpu / "solo" / r["name"]) for r in solo["runs"]],
        }
    return out


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


def base_differences(recorded: dict, base: TrainConfig) -> list[str]:
    """How ``base`` differs from the settings the recorded runs used (``results.json``'s ``base``).

    A setting the record does not name (it was added to TrainConfig later) counts as its default.
    A new run on another base would not be comparable with the recorded ones: issue 31 moved the cpu
    preset to the to_end schedule and bfloat16, and the lab's base, made from it, silently followed.
    """
    now = json.loads(json.dumps(base.to_dict()))
    defaults = json.loads(json.dumps(TrainConfig().to_dict()))
    return [
        f"{key}: the record's {recorded.get(key, defaults.get(key))!r}, now {value!r}"
        for key, value in now.items()
        if key not in ("name", "max_minutes") and recorded.get(key, defaults.get(key)) != value
    ]


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
    parser.add_argument(
        "--summarize",
        type=Path,
        metavar="FILE",
        help="write the records of --out and of its GPU twin (<out>_full) into FILE for notebook 14, and exit",
    )
    args = parser.parse_args(argv)
    chosen = [v for v in VARIANTS if not args.only or v.name in args.only]
    unknown = sorted(set(args.only or ()) - {v.name for v in VARIANTS})
    if unknown:
        parser.error(f"no run called {', '.join(unknown)}; --list shows them")
    if args.summarize:
        gpu = args.out.with_name(args.out.name + "_full")
        args.summarize.write_text(json.dumps(summarize(args.out, gpu if gpu.is_dir() else None), indent=1) + "\n")
        print(f"wrote {args.summarize}")
        return 0
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
    changed = base_differences(record["base"], base) if "base" in record else []
    if changed:
        parser.error(
            f"the lab's base is not the one its {len(record['runs'])} recorded runs used ({'; '.join(changed)}): "
            f"new runs would not compare with them. Restore it in transformer_lessons/lab.py, or record into a "
            f"new --out"
        )
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
            **record,  # what else the record holds (the long-sentence experiment) stays
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
