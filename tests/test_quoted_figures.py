"""Every figure the course's text quotes from a run or a record is checked against that record here.

A number typed into prose goes stale when the run behind it changes (teaching.md's copy-task numbers, the quick
run's BLEU, "a minute or two" for a run the record says took five). So each quoted figure has a row: where it is
(a file, or one markdown cell of a notebook: ``notebooks/NN_name.ipynb#cell-id``), the words as they stand there
with the figures as format fields, and the record that fills them in: a run's ``metrics.json`` or ``history.json``
(:func:`metrics`, :func:`history`), or the saved output of a notebook's cell (:func:`output`, by a regular
expression with named groups). The test formats the words from the record and looks for them in the text: if the
record changes, or the text is edited, the row fails and names both.

Figures a notebook prints in the cell beside its text need no row; this file is for the rest. Add rows in the
section of the file or notebook that quotes them.
"""

from __future__ import annotations

import importlib.util
import json
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from functools import cache
from pathlib import Path

import pytest
import torch

from transformer_lessons import distributed, pretrained

ROOT = Path(__file__).resolve().parents[1]
COURSE_RUN = Path(pretrained.COURSE_MODEL_PATH).parent.name  # the course's model's run folder (cpu_dropout)
BEFORE = "cpu_rotary"  # the course's model until issue 31


# --- where figures come from -----------------------------------------------------------------------------


@cache
def _json(path: str) -> dict:
    return json.loads((ROOT / path).read_text(encoding="utf-8"))


def metrics(run: str) -> Callable[[], dict]:
    """results/<run>/metrics.json, with its test split's fields also at the top (``bleu``, ``tutorial_bleu``)."""

    def read() -> dict:
        m = dict(_json(f"results/{run}/metrics.json"))
        m.update(m.get("test_2016_flickr", {}))
        m["train_minutes"] = m["train_time_s"] / 60
        m["wall_minutes"] = m.get("wall_time_s", 0) / 60
        for key, value in m.get("averaged", {}).items():
            m[f"averaged_{key}"] = value
        if m.get("averaged"):
            m["averaged_first"], m["averaged_last"] = m["averaged"]["epochs"][0], m["averaged"]["epochs"][-1]
        other = ROOT / "results" / run / "other_tests.json"
        if other.exists():
            for split, score in json.loads(other.read_text(encoding="utf-8"))["scores"].items():
                m[f"fp16_{split}"] = score["bleu"]
        return m

    return read


def history(run: str) -> Callable[[], dict]:
    """results/<run>/history.json (one entry an epoch): ``lowest_val_loss_epoch``, ``lowest_val_loss``, ``epochs``."""

    def read() -> dict:
        epochs = _json(f"results/{run}/history.json")
        lowest = min(epochs, key=lambda e: e["val_loss"])
        return {"lowest_val_loss_epoch": lowest["epoch"], "lowest_val_loss": lowest["val_loss"], "epochs": len(epochs)}

    return read


def error_buckets() -> dict:
    """results/error_analysis/: the range of BLEU below 20 words, and the 20+ bucket."""
    buckets = _json("results/error_analysis/results.json")["bleu_by_length"]
    shorter = [b["bleu"] for b in buckets[:-1]]
    return {
        "low": min(shorter),
        "high": max(shorter),
        "long": buckets[-1]["bleu"],
        "n_long": buckets[-1]["n"],
    }


def laptop_seeds() -> dict:
    """The laptop preset's three seeds (results/laptop/seed0-2): each one's test BLEU, their mean, spread and range."""
    runs = [_json(f"results/laptop/seed{seed}/metrics.json") for seed in (0, 1, 2)]
    bleu = [m["test_2016_flickr"]["bleu"] for m in runs]
    tutorial = [m["test_2016_flickr"]["tutorial_bleu"] for m in runs]
    steps = [m["steps"] for m in runs]
    return {
        **{f"s{i}": b for i, b in enumerate(bleu)},
        **{f"t{i}": b for i, b in enumerate(tutorial)},
        "mean": statistics.mean(bleu),
        "sd": statistics.stdev(bleu),
        "low": min(bleu),
        "steps_low": min(steps),
        "steps_high": max(steps),
        "parameters": runs[0]["parameters"],
    }


def laptop_pilots() -> dict:
    """The laptop preset's GPU pilots (results/laptop/pilots_gpu.json): each one's last validation BLEU, by name."""
    pilots = _json("results/laptop/pilots_gpu.json")["pilots"]
    return {name: run["history"][-1]["val_bleu"] for name, run in pilots.items() if name.startswith("L")}


def record_text(path: str, pattern: str) -> Callable[[], dict]:
    """The named groups of ``pattern`` in a text file of the record (a benchmark's saved output)."""

    def read() -> dict:
        match = re.search(pattern, (ROOT / path).read_text(encoding="utf-8"))
        if match is None:
            raise LookupError(f"{path}: no {pattern!r} in it")
        return match.groupdict()

    return read


def run_time(notebook: str) -> Callable[[], dict]:
    """A notebook's measured run time (results/notebook_times.json) in scripts/write_run_times.py's words."""

    def read() -> dict:
        spec = importlib.util.spec_from_file_location("write_run_times", ROOT / "scripts" / "write_run_times.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        seconds = _json("results/notebook_times.json")["seconds"][f"{notebook}.ipynb"]
        time = module.describe(seconds)  # "about 30 seconds"
        return {"time": time, "Time": time[0].upper() + time[1:]}

    return read


def full_gradients() -> dict:
    """What one all-reduce of the `full` model's float32 gradients sends per rank on 8 GPUs (a ring: 2(N-1)/N)."""
    m = metrics("full")()
    n = 8
    ratio = 2 * (n - 1) / n
    return {"n": n, "ratio": ratio, "millions": m["parameters"] / 1e6, "mb": ratio * 4 * m["parameters"] / 1e6}


SPEED_UP = record_text(
    "results/laptop/bench_profile.txt", r"ratio \(fused always\) / \(the course's rule\): (?P<x>\d\.\d)"
)


def _outputs_text(cell: dict) -> str:
    texts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            texts.append("".join(out.get("text", "")))
        elif "text/plain" in out.get("data", {}):
            texts.append("".join(out["data"]["text/plain"]))
    return "".join(texts)


def _cell(notebook: str, cell_id: str) -> dict:
    cells = _json(f"notebooks/{notebook}.ipynb")["cells"]
    found = [c for c in cells if c.get("id") == cell_id]
    if not found:
        raise LookupError(f"notebooks/{notebook}.ipynb has no cell with id {cell_id!r}")
    return found[0]


def output(notebook: str, cell_id: str, pattern: str) -> Callable[[], dict]:
    """The named groups of ``pattern`` in the saved output of one cell of a solution notebook."""

    def read() -> dict:
        text = _outputs_text(_cell(notebook, cell_id))
        match = re.search(pattern, text)
        if match is None:
            raise LookupError(f"{notebook} cell {cell_id}: no {pattern!r} in its saved output:\n{text[:2000]}")
        return match.groupdict()

    return read


NB14 = "14_from_2017_to_today"


def nb14_bfloat16() -> dict:
    """Notebook 14's bfloat16 demo (cell 4a076697): what each number became, and whether the text's reading holds."""
    r = output(
        NB14,
        "4a076697",
        r"(?P<pi>[\d.]+) in bfloat16: (?P<pi_bf>[\d.]+)\n\s*(?P<a>[\d.]+) in bfloat16: (?P<a_bf>\S+)\n"
        r"\s*(?P<b>[\d.]+) in bfloat16: (?P<b_bf>\S+)\n\s*1e\+30 in bfloat16: (?P<big>\S+)",
    )()
    return {
        **r,
        "a": r["a"] if r["a_bf"] == "1" else "(not rounded to 1)",  # the text: 1 + 2^-8 rounds to 1
        "b": r["b"] if r["b_bf"] == r["b"] else "(not kept)",  # the text: 1 + 2^-7 is kept exactly
    }


def nb14_long() -> dict:
    """The lab's joined test captions (``long`` in results/since_2017/results.json): each length bucket's size, BLEU."""
    long = _json("results/since_2017/results.json")["long"]
    base, rotary = long["baseline_s0"], long["rotary"]
    assert {k: v["n"] for k, v in base.items()} == {k: v["n"] for k, v in rotary.items()}
    total = sum(b["n"] for b in base.values())
    return {
        "total": total,
        "over_20": total - base["0-20"]["n"],
        **{f"b{i}": base[k]["bleu"] for i, k in enumerate(("0-20", "21-30", "31-40"))},
        **{f"r{i}": rotary[k]["bleu"] for i, k in enumerate(("0-20", "21-30", "31-40"))},
    }


def nb14_lead() -> dict:
    """Rotary's test BLEU against baseline_s0's, the run the long-sentence experiment used (results/since_2017/)."""
    runs = {r["name"]: r for r in _json("results/since_2017/results.json")["runs"]}
    rotary, base = runs["rotary"]["test_bleu"], runs["baseline_s0"]["test_bleu"]
    return {"rotary": rotary, "base": base, "lead": rotary - base}


def nb14_quick_updates() -> dict:
    """Notebook 14's quick rerun (cell c523947e): the baseline's updates, rounded to tens."""
    steps = int(output(NB14, "c523947e", r"baseline_s0\s+(?P<steps>[\d,]+) updates")()["steps"].replace(",", ""))
    return {"about": round(steps, -1)}


def nb14_lab() -> dict:
    """Notebook 14's lab, compared as its section 7 does (transformer_lessons.lab_stats on the shipped record), and
    rotary's first run alone against the three baseline seeds (what the first version of the notebook quoted)."""
    from transformer_lessons import lab_stats
    from transformer_lessons.viz import lab_record

    cpu = lab_record()["cpu"]
    compared = lab_stats.compare_options(cpu)
    runs = {r["name"]: r for r in cpu["runs"]}
    first = lab_stats.difference([runs[f"baseline_s{i}"]["test_bleu"] for i in range(3)], [runs["rotary"]["test_bleu"]])
    rotary, bf16 = compared["rotary"]["test BLEU"], compared["bf16"]["test BLEU"]
    base, new = [runs[f"baseline_s{i}"] for i in range(3)], [runs["rotary_s1"], runs["rotary_s2"]]
    fresh = lab_stats.difference([r["test_bleu"] for r in base], [r["test_bleu"] for r in new])
    fresh_loss = lab_stats.welch(  # the text quotes Welch's t: rotary's losses spread more than the baseline's
        [lab_stats.val_loss_at(r, 1250) for r in base], [lab_stats.val_loss_at(r, 1250) for r in new]
    )
    return {
        "fresh": fresh.difference,
        "fresh_p": fresh.p,
        "fresh_loss": f"{fresh_loss.difference:.3f}".replace("-", "\u2212"),  # the text's minus sign
        "fresh_loss_p": fresh_loss.p,
        "sds": (runs["rotary"]["test_bleu"] - statistics.fmean(r["test_bleu"] for r in base))
        / statistics.stdev(r["test_bleu"] for r in base),
        "first_t": first.t,
        "first_p": first.p,
        "first_df": first.df,
        "rotary": rotary.difference,
        "rotary_p": rotary.p,
        "bf16": bf16.difference,
    }


def nb14_paired() -> dict:
    """sacreBLEU's paired tests of notebook 14's BLEU comparisons (results/since_2017/paired_tests.json), by the
    system's run folder: ``<name>`` its difference (the text's minus sign), ``<name>_p`` its p as the text gives it."""
    record = _json("results/since_2017/paired_tests.json")
    floor = 1 / (record["trials"] + 1)  # the smallest p the trials can give

    def p(value: float) -> str:
        return "≤ 0.0001" if value <= floor * 1.0001 else f"= {value:.2g}"

    out = {}
    for test in record["tests"]:
        name = Path(test["system"]).name.replace("-", "_")
        out[name] = f"{test['difference']:+.2f}".replace("-", "\u2212")
        out[f"{name}_p"] = p(test["p_value"])
        out[f"{name}_bleu"], out[f"{name}_base"] = test["system_bleu"], test["baseline_bleu"]
    rotary = [t for t in record["tests"] if Path(t["system"]).name.startswith("rotary")]
    out["rotary_all_p"] = p(max(t["p_value"] for t in rotary)) if len(rotary) == 3 else "(not three tests)"
    warmup = [t for t in record["tests"] if t["question"].startswith("warm-up")]
    out["warmup_all_p"] = p(max(t["p_value"] for t in warmup)) if len(warmup) == 6 else "(not six tests)"
    return out


def nb14_post_norm_4x() -> dict:
    """The warm-up experiment's post-norm run at four times the peak against the three baseline seeds, validation loss
    after 500 updates (one run against three: t with 2 degrees of freedom)."""
    from transformer_lessons import lab_stats
    from transformer_lessons.viz import lab_record

    runs = {r["name"]: r for r in lab_record()["cpu"]["runs"]}
    seeds = [lab_stats.val_loss_at(runs[f"baseline_s{i}"], 500) for i in range(3)]
    return {"p": lab_stats.difference(seeds, [lab_stats.val_loss_at(runs["post-norm_4x-rate"], 500)]).p}


def nb14_epochs() -> dict:
    """baseline_s0's validation BLEU after its 4th and 5th epochs (the lab's record), and bf16's first three epochs'
    speed in the GPU grid (results/since_2017_full/part_3.log)."""
    import re

    from transformer_lessons.viz import lab_record

    history = next(r for r in lab_record()["cpu"]["runs"] if r["name"] == "baseline_s0")["history"]
    log = (ROOT / "results/since_2017_full/part_3.log").read_text().split("== bf16")[1].split("==")[0]
    speeds = [int(v.replace(",", "")) for v in re.findall(r"([\d,]+) tok/s", log)]
    return {
        "e4": history[3]["val_bleu"],
        "e5": history[4]["val_bleu"],
        "s1": speeds[0],
        "s2": speeds[1],
        "s3": speeds[2],
    }


NB14_SOLO = output(
    NB14,
    "a04d61c6",
    r"baseline_s0\s+(?P<base_steps>[\d,]+) updates,\s+(?P<base_tps>[\d,]+) tokens/s(?s:.*?)\n"
    r"rotary\s+(?P<rotary_steps>[\d,]+) updates,\s+(?P<rotary_tps>[\d,]+) tokens/s",
)


def _bpe_run(scale: str, merges: int | None) -> dict:
    """One run of results/bpe_comparison/ (notebook 08's table): its scale ("small" or "all") and merges."""
    runs = _json("results/bpe_comparison/results.json")["runs"]
    return next(r for r in runs if r["scale"] == scale and r["bpe_merges"] == merges)


def _bpe_rows() -> dict:
    """Notebook 08's comparison table, one run a row: the row's cells keyed like "small_1000" or "all_words"."""
    labels = {
        "small": "`quick` preset: first 6,000 pairs, 8 epochs",
        "all": "all 29,000 pairs, 5 epochs, warm-up 400, 2,048 tokens a batch",
    }
    rows = {}
    for run in _json("results/bpe_comparison/results.json")["runs"]:
        merges = run["bpe_merges"]
        first = merges is None  # the whole-word run opens each scale's rows
        rows[f"{run['scale']}_{merges or 'words'}"] = (
            f"| {labels[run['scale']] if first else ''} | {'whole words' if first else f'BPE {merges:,}'} | {run['steps']:,} | "
            f"{run['bleu']:.1f} | {run['tutorial_bleu']:.1f} | {run['best_val_bleu']:.1f} |"
        )
    return rows


def _bpe_gains() -> dict:
    """Gains over whole words on the comparison's test scores (cased, tutorial), and its updates and validation BLEU."""
    g = {}
    for scale, merges in (("small", (1000, 2000)), ("all", (2000, 4000, 8000))):
        words = _bpe_run(scale, None)
        for m in merges:
            run = _bpe_run(scale, m)
            g[f"{scale}_{m}_cased"] = run["bleu"] - words["bleu"]
            g[f"{scale}_{m}_tut"] = run["tutorial_bleu"] - words["tutorial_bleu"]
            g[f"{scale}_{m}_steps"], g[f"{scale}_{m}_val"] = run["steps"], run["best_val_bleu"]
        g[f"{scale}_words_steps"] = words["steps"]
    g["small_4000_steps"] = _bpe_run("small", 4000)["steps"]
    return g


def _same_setting_spread() -> dict:
    """The quick preset's runs at an earlier commit (results/quick_cpu_*) against the same settings in the table."""
    words, bpe = metrics("quick_cpu_words")(), metrics("quick_cpu_bpe1000")()
    ratio = lambda m: float(re.search(r"ratio = ([\d.]+)", m["bleu_text"]).group(1))  # noqa: E731
    return {
        "words": words["bleu"],
        "words_table": _bpe_run("small", None)["bleu"],
        "words_ratio": ratio(words),
        "bpe": bpe["bleu"],
        "bpe_table": _bpe_run("small", 1000)["bleu"],
        "bpe_ratio": ratio(bpe),
        "spread": max(
            abs(words["bleu"] - _bpe_run("small", None)["bleu"]), abs(bpe["bleu"] - _bpe_run("small", 1000)["bleu"])
        ),
    }


def _min_freq_row(min_freq: int) -> dict:
    """Notebook 08's min_freq table (cell 87d65b2b): vocabulary sizes and validation <unk> rates of one row."""
    row = output(
        "08_data",
        "87d65b2b",
        rf"\n\s+{min_freq}\s+(?P<vde>[\d,]+)\s+(?P<ven>[\d,]+)\s+(?P<ude>[\d.]+)%\s+(?P<uen>[\d.]+)%",
    )()
    one_decimal = {k: Decimal(row[k]).quantize(Decimal("0.1"), ROUND_HALF_UP) for k in ("ude", "uen")}  # 2.05 -> 2.1
    return {**row, **{k: float(v) for k, v in one_decimal.items()}}


# --- the rows ------------------------------------------------------------------------------------------


def heads_figures() -> dict:
    """What notebook 15 and heads.py quote of results/heads/: framed heads, the curves on both samples."""
    h = _json("results/heads/results.json")
    base, bleu, tests = h["importance"]["baseline"], h["importance"]["bleu"], h["paired_bootstrap"]["heads"]
    drop = {head: base - b for head, b in bleu.items()}
    framed = sorted((drop[head], head) for head, t in tests.items() if t["p"] < 0.05)
    top = max(drop, key=drop.get)
    at = lambda curve, k: curve["bleu"][curve["counts"].index(k)]  # noqa: E731
    held, random40 = h["held_out"], [at(c, 40) for c in h["held_out"]["random"]]
    by_drop = sorted(drop, key=drop.get, reverse=True)  # the largest drop first
    framed_ranks = sorted(1 + by_drop.index(head) for _, head in framed)[:-1]  # the three largest framed; the 4th small
    return {
        "baseline": base,
        "framed": len(framed),
        "ranks": ", ".join(f"{n}{'st' if n == 1 else 'nd' if n == 2 else 'th'}" for n in framed_ranks[:-1])
        + f" and {framed_ranks[-1]}th",
        "third": drop[by_drop[2]],
        "fourth": drop[by_drop[3]],
        "small_framed": framed[0][0],
        "raising": sum(d < 0 for d in drop.values()),
        "top": drop[top],  # 1.96, quoted as 2.0
        "top_p": tests[top]["p"],
        "b8": at(h["pruning"], 8),
        "b40": at(h["pruning"], 40),
        "b48": at(h["pruning"], 48),
        "b72": at(h["pruning"], 72),
        "on": h["layers"]["chosen"]["every head on"],
        "cross2": h["layers"]["chosen"]["cross/2"]["bleu"],
        "held_on": at(held["importance_order"], 0),
        "held_8": at(held["importance_order"], 8),
        "held_cost8": at(held["importance_order"], 0) - at(held["importance_order"], 8),
        "held_40": at(held["importance_order"], 40),
        "held_48": at(held["importance_order"], 48),
        "rand_40_low": min(random40),
        "rand_40_high": max(random40),
    }


def confidence_figures() -> dict:
    """What notebook 15 and confidence.py quote of results/confidence/ beyond what the notebook prints."""
    c = _json("results/confidence/results.json")
    q, signal = c["quality"], c["signals"]["test"]
    mid = sorted(f for s, f in zip(signal, q["test_2016_flickr"]["chrf"]) if -0.35 < s < -0.25)
    rank = lambda share: mid[round(share * (len(mid) - 1))]  # noqa: E731 - the nearest rank
    flickr = q["test_2016_flickr"]
    return {
        "n_mid": len(mid),
        "p5": rank(0.05),
        "p95": rank(0.95),
        "auroc": c["auroc_test_captions_vs_not_captions"],
        "spearman": flickr["spearman_signal_chrf"],
        "auroc_bad": flickr["auroc_signal_finds_chrf_below_40"],
        "chrf_flagged": flickr["mean_chrf_flagged"],
        "chrf_kept": flickr["mean_chrf_not_flagged"],
        "coco_flagged": q["test_2017_mscoco"]["flagged"],
        "flickr_flagged": flickr["flagged"],
        "coco_auroc": q["auroc_flickr_vs_mscoco"],
        "stairs": signal[789],  # "Fünf Personen, angeführt von einer Frau ...", the 790th test caption
    }


# Notebook 13's measured DDP buckets: the gradients' size and the second bucket's, from its saved output.
NB13_BUCKETS = output(
    "13_many_processes",
    "n13-buckets",
    r"(?P<total>[\d.]+) MiB of float32 gradients[\s\S]*backward 3: 2 bucket\(s\) of [\d.]+ \+ "
    r"(?P<second>\d+\.\d)\d MiB",
)


@dataclass(frozen=True)
class Quote:
    where: str  # a file of the repository, or notebooks/NN_name.ipynb#cell-id for one markdown cell
    words: str  # the words as they stand in the text, figures as format fields: "{bleu:.2f} sacreBLEU"
    record: Callable[[], dict]  # what fills the fields in


QUOTES: list[Quote] = [
    # --- README.md: the committed runs -----------------------------------------------------------------
    Quote(
        "README.md",
        "| 90 min, {steps:,} updates, {epochs:.1f} epochs | {parameters:,} | **{bleu:.2f}** |",
        metrics(COURSE_RUN),
    ),
    Quote("README.md", "| {tutorial_bleu:.2f} |", metrics(COURSE_RUN)),
    Quote(
        "README.md", "| 90 min, {steps:,} updates, {epochs:.1f} epochs | {parameters:,} | {bleu:.2f} |", metrics(BEFORE)
    ),
    Quote("README.md", "| {tutorial_bleu:.2f} |", metrics(BEFORE)),
    Quote(
        "README.md", "| 90 min, {steps:,} updates, {epochs:.1f} epochs | {parameters:,} | {bleu:.2f} |", metrics("cpu")
    ),
    Quote(
        "README.md",
        "| {train_time_s:.0f} s, {steps} updates | {parameters:,} | {bleu:.2f} | greedy | {tutorial_bleu:.2f} |",
        metrics("quick_cpu_words"),
    ),
    Quote(
        "README.md",
        "| {train_minutes:.0f} min, {steps:,} updates, {epochs:.1f} epochs | {parameters:,} | **{bleu:.2f}** |",
        metrics("full"),
    ),
    # the laptop preset's three seeds
    Quote("README.md", "10 min of training on a CPU (test BLEU {mean:.1f}, 3 seeds)", laptop_seeds),
    Quote(
        "README.md",
        "| 10 min, {steps_low:,}–{steps_high:,} updates | {parameters:,} | {s0:.2f}, {s1:.2f}, {s2:.2f} (mean **{mean:.2f}**) "
        "| beam 4, α 0.6 | {t0:.2f}, {t1:.2f}, {t2:.2f} |",
        laptop_seeds,
    ),
    Quote("results/laptop/README.md", "Mean of the three: **{mean:.2f}** sacreBLEU", laptop_seeds),
    Quote("docs/teaching.md", "scored {s0:.2f}, {s1:.2f} and {s2:.2f} in three runs", laptop_seeds),
    Quote("results/laptop/README.md", "sample standard deviation {sd:.2f}; lowest {low:.2f}", laptop_seeds),
    Quote("results/README.md", "mean **{mean:.2f}** sacreBLEU over 3 seeds, none below {low:.2f}", laptop_seeds),
    Quote("README.md", "The course's model reaches {bleu:.2f}\nsacreBLEU after 90 minutes", metrics(COURSE_RUN)),
    Quote(
        "README.md",
        "Its validation loss was lowest at epoch {lowest_val_loss_epoch}\n({lowest_val_loss:.2f})",
        history(COURSE_RUN),
    ),
    Quote(
        "README.md",
        "a wider model given {steps:,} updates\nin {train_minutes:.0f} minutes on one H100, reaches {bleu:.2f}",
        metrics("full"),
    ),
    # --- results/README.md ---------------------------------------------------------------------------
    Quote("results/README.md", "**{bleu:.2f}** sacreBLEU, beam 4; notebook 11", metrics(COURSE_RUN)),
    Quote(
        "results/README.md",
        "committed in `full/` with the model (see the section after the next): **{bleu:.2f}**",
        metrics("full"),
    ),
    Quote("results/README.md", "| **{bleu:.2f}** (the fp16 file: {fp16_test_2016_flickr:.2f}) |", metrics(BEFORE)),
    Quote("results/README.md", "| {tutorial_bleu:.2f} |", metrics(BEFORE)),
    Quote(
        "results/README.md",
        "the averaged model (epochs {averaged_first}–{averaged_last}): validation loss, greedy validation BLEU (first 500 "
        "sentences) | {averaged_val_loss:.3f}, {averaged_val_bleu:.2f} |",
        metrics(BEFORE),
    ),
    Quote("results/README.md", "| {best_val_bleu:.2f} at epoch {best_epoch} |", metrics(BEFORE)),
    Quote("results/README.md", "| {train_minutes:.1f} min / {wall_minutes:.1f} min |", metrics(BEFORE)),
    Quote("results/README.md", "| {steps:,}, {epochs:.2f}, `{stopped}` |", metrics(BEFORE)),
    Quote("results/README.md", "| {train_tokens_per_s:,.0f} (the first run: 874", metrics(BEFORE)),
    Quote("results/README.md", "| test_2017_flickr | 1,000 | **{fp16_test_2017_flickr:.2f}** |", metrics(BEFORE)),
    Quote("results/README.md", "| test_2018_flickr | 1,071 | **{fp16_test_2018_flickr:.2f}** |", metrics(BEFORE)),
    Quote("results/README.md", "| test_2017_mscoco | 461 | **{fp16_test_2017_mscoco:.2f}** |", metrics(BEFORE)),
    Quote(
        "results/README.md",
        "The validation loss was lowest at epoch {lowest_val_loss_epoch} ({lowest_val_loss:.3f})",
        history(BEFORE),
    ),
    Quote("README.md", "(its fp16 file: {fp16_test_2016_flickr:.2f})", metrics(COURSE_RUN)),
    Quote(
        "README.md",
        "bfloat16 autocast\n({train_tokens_per_s:,.0f} target tokens/s on an idle machine, where the first run shared\n"
        "its machine and got 874)",
        metrics(COURSE_RUN),
    ),
    Quote(
        "README.md",
        "gave {bleu:.2f} (`results/cpu_rotary/`). That run's validation loss was lowest at epoch {lowest_val_loss_epoch} "
        "of {epochs}",
        lambda: {**metrics(BEFORE)(), **history(BEFORE)()},
    ),
    Quote(
        "README.md",
        "gave {system_bleu:.2f}: +{difference:.2f} on the same {sentences:,} test\nsentences, beyond the test set's noise "
        "(paired approximate randomization, p ≤ 0.0001",
        lambda: _json(f"results/{COURSE_RUN}/paired_test.json"),
    ),
    Quote(
        "results/README.md",
        "scores {gap:.1f} BLEU more in cased 13a BLEU but only {tutorial_gap:.1f} more",
        lambda: {
            "gap": metrics("quick_cpu_bpe1000")()["bleu"] - metrics("quick_cpu_words")()["bleu"],
            "tutorial_gap": metrics("quick_cpu_bpe1000")()["tutorial_bleu"]
            - metrics("quick_cpu_words")()["tutorial_bleu"],
        },
    ),
    Quote("results/README.md", "(1,048 against {steps})", metrics("quick_cpu_words")),
    Quote("docs/teaching.md", "runs/quick (test BLEU {bleu:.2f}): notebook 10 loads it", metrics("quick_cpu_words")),
    # the analyses of the course's model (results/confidence/, error_analysis/, heads/)
    Quote(
        "results/README.md",
        "| -{threshold:.3f} (`confidence.UNUSUAL_BELOW`) |\n| AUROC, test captions against sentences that are not "
        "captions | **{auroc:.3f}** |\n| flagged: validation captions / test captions | {val:.1%} / {test:.1%} |\n"
        "| flagged: sentences that are not captions | **{nc:.1%}** ({nc_n} of {n}) |",
        lambda: {
            "threshold": -(c := _json("results/confidence/results.json"))["threshold"],
            "auroc": c["auroc_test_captions_vs_not_captions"],
            "val": c["flagged"]["validation captions"],
            "test": c["flagged"]["test captions"],
            "nc": c["flagged"]["not captions"],
            "nc_n": round(c["flagged"]["not captions"] * c["n"]["not captions"]),
            "n": c["n"]["not captions"],
        },
    ),
    Quote(
        "results/README.md",
        "| mean signal: validation / test / not captions | {validation:.2f} / {test:.2f} / {nc:.2f} |",
        lambda: {**(m := _json("results/confidence/results.json")["mean_signal"]), "nc": m["not captions"]},
    ),
    Quote(
        "results/README.md",
        "| all | 1,000 | {bleu:.2f} | {greedy_bleu:.2f} |",
        lambda: _json("results/error_analysis/results.json"),
    ),
    Quote(
        "results/README.md",
        "By\nsentence chrF it helps {helps} sentences, hurts {hurts}, and ties {ties}",
        lambda: _json("results/error_analysis/results.json")["beam_vs_greedy"],
    ),
    Quote(
        "results/README.md",
        "gain is +{mean_chrf_gain:.2f} chrF",
        lambda: _json("results/error_analysis/results.json")["beam_vs_greedy"],
    ),
    Quote(
        "results/README.md",
        "greedy decoding with this model: +{gain:.1f} BLEU",
        lambda: {"gain": (e := _json("results/error_analysis/results.json"))["bleu"] - e["greedy_bleu"]},
    ),
    Quote(
        "results/README.md",
        "| BLEU with every head on (100 sentences, greedy) | {baseline:.2f} |",
        lambda: _json("results/heads/results.json")["importance"],
    ),
    Quote(
        "results/README.md",
        "| pruning curve (heads off: BLEU) | {curve} |",
        lambda: {
            "curve": ", ".join(
                f"{n}: {b:.2f}"
                for n, b in zip(
                    _json("results/heads/results.json")["pruning"]["counts"],
                    _json("results/heads/results.json")["pruning"]["bleu"],
                )
            )
        },
    ),
    Quote(
        "results/README.md",
        "| heads costing less than 0.5 / raising BLEU when off | {heads_costing_under_0_5_bleu} / {heads_raising_bleu} of 72 |",
        lambda: {k.replace(".", "_"): v for k, v in _json("results/heads/results.json")["summary"].items()},
    ),
    Quote(
        "results/README.md",
        "| first below 90% of all-on | {heads_off_when_bleu_first_fell_below_90pct} heads off |",
        lambda: _json("results/heads/results.json")["summary"],
    ),
    # notebook 15 quotes the full measurements of results/ beside its quick-mode samples
    Quote(
        "notebooks/15_inside_the_translator.ipynb#6ddbac02",
        "BLEU stays between {low:.1f} and {high:.1f} up to 19 words and\nfalls to {long:.1f} on the {n_long} sentences of 20 words or more",
        error_buckets,
    ),
    Quote(
        "notebooks/15_inside_the_translator.ipynb#7ddb81cc",
        "beam search is {gain:.1f} BLEU better than greedy decoding\n({bleu:.2f} against {greedy_bleu:.2f}); it helps {helps} sentences and hurts {hurts}",
        lambda: {
            **(e := _json("results/error_analysis/results.json")),
            **e["beam_vs_greedy"],
            "gain": e["bleu"] - e["greedy_bleu"],
        },
    ),
    Quote(
        "notebooks/15_inside_the_translator.ipynb#65e4cd8a",
        "Four are framed: the {ranks} largest drops, all in the last\nlayer, and one of only {small_framed:.2f}. The 3rd "
        "and 4th largest ({third:.2f} and {fourth:.2f}) are not",
        heads_figures,
    ),
    Quote(
        "notebooks/15_inside_the_translator.ipynb#65e4cd8a",
        "the {raising} heads whose removal\nraised BLEU",
        heads_figures,
    ),
    Quote(
        "notebooks/15_inside_the_translator.ipynb#e15a0c05",
        "of the {n_mid} translations with a signal between $-0.35$ and $-0.25$, the middle 90% run from chrF {p5:.0f}\nto "
        "{p95:.0f}",
        confidence_figures,
    ),
    Quote(
        "notebooks/15_inside_the_translator.ipynb#e15a0c05",
        "(The 67 sentences that are not captions gave {auroc:.2f}\nagainst all 1,000 test captions.)",
        confidence_figures,
    ),
    Quote(
        "notebooks/15_inside_the_translator.ipynb#e15a0c05",
        'brown skirt, walk up a staircase.", signal ${stairs:.2f}$, far from the threshold',
        confidence_figures,
    ),
    Quote(
        "notebooks/15_inside_the_translator.ipynb#fe20481e",
        "(Spearman {spearman:.2f} with chrF; flagged translations average chrF {chrf_flagged:.1f} against "
        "{chrf_kept:.1f})",
        confidence_figures,
    ),
    Quote(
        "notebooks/15_inside_the_translator.ipynb#fe20481e",
        "as often ({coco_flagged:.1%} against {flickr_flagged:.1%}), but are hard to tell apart one at a time "
        "(AUROC {coco_auroc:.2f})",
        confidence_figures,
    ),
    Quote(
        "notebooks/15_inside_the_translator.ipynb#fe20481e",
        "One head alone costs at most {top:.1f} BLEU on 100 sentences, and no single drop survives a correction for "
        "72 tests\n  (sacreBLEU's paired bootstrap); whole layers do, the last cross-attention layer most ({on:.1f} to "
        "{cross2:.1f})",
        heads_figures,
    ),
    Quote(
        "notebooks/15_inside_the_translator.ipynb#fe20481e",
        "BLEU falls from {held_on:.1f} to {held_48:.1f} on sentences that did not choose the order",
        heads_figures,
    ),
    Quote(
        "notebooks/15_inside_the_translator.ipynb#fe20481e",
        "(AUROC {auroc:.3f} on all 1,000 test captions against 67 other sentences",
        lambda: {"auroc": _json("results/confidence/results.json")["auroc_test_captions_vs_not_captions"]},
    ),
    Quote(
        "docs/teaching.md",
        "No head of the course's model costs more than {words} BLEU points alone",
        lambda: {
            "words": {1: "one", 2: "two", 3: "three"}[
                -int(-_json("results/heads/results.json")["summary"]["most_important"][0][1] // 1)
            ]
        },
    ),
    # the modules' docstrings quote the same measurements
    Quote(
        "transformer_lessons/heads.py",
        "the first 100 sentences of test_2016_flickr, greedy, {baseline:.1f} BLEU with every head on): no head is",
        heads_figures,
    ),
    Quote(
        "transformer_lessons/heads.py",
        "sacreBLEU's paired bootstrap puts {framed} of the 72 drops below p = 0.05, about what chance alone gives\nin 72 "
        "tests (3.6); only cross-attention head 1 of the last layer stands out (p = {top_p:.3f})",
        heads_figures,
    ),
    Quote(
        "transformer_lessons/heads.py",
        "importance order, BLEU first rises ({b8:.1f} with 8 off: heads whose loss helped on these sentences),\nthen "
        "falls: {b40:.1f} with 40 off, {b48:.1f} with 48, {b72:.1f} with all 72. On the next 100 sentences, which did\n"
        "not choose the order, the same 8 heads cost {held_cost8:.1f} BLEU ({held_on:.1f} to {held_8:.1f}), and 40 off "
        "keep {held_40:.1f}, where\nfive random orders keep {rand_40_low:.1f} to {rand_40_high:.1f}",
        heads_figures,
    ),
    Quote(
        "transformer_lessons/confidence.py",
        "captions the signal and each translation's chrF against the reference have a Spearman correlation of\n"
        "{spearman:.2f}, and the signal finds the translations with chrF under 40 with an AUROC of {auroc_bad:.2f}",
        confidence_figures,
    ),
    Quote(
        "transformer_lessons/confidence.py",
        "with an AUROC of {auroc:.3f}. The threshold,\nset on the validation captions alone (their 5th percentile, "
        "{threshold:.3f}), flags {test:.1%} of the test captions",
        lambda: {
            "auroc": (c := _json("results/confidence/results.json"))["auroc_test_captions_vs_not_captions"],
            "threshold": c["threshold"],
            "test": c["flagged"]["test captions"],
        },
    ),
    Quote(
        "transformer_lessons/error_analysis.py",
        "corpus BLEU {bleu:.2f} with the beam, {greedy_bleu:.2f} greedy",
        lambda: _json("results/error_analysis/results.json"),
    ),
    Quote(
        "transformer_lessons/error_analysis.py",
        "Beam search helps {helps}\nsentences, hurts {hurts} and ties {ties}",
        lambda: _json("results/error_analysis/results.json")["beam_vs_greedy"],
    ),
    # notebooks 12 and 13, and the teacher's guide's run times for them
    Quote(
        "notebooks/12_incremental_decoding.ipynb#kv26",
        "outputs of {lo} to {hi}\ntokens, {mean} on average",
        output(
            "12_incremental_decoding", "kv27", r"outputs of (?P<lo>\d+)-(?P<hi>\d+) tokens \(mean (?P<mean>[\d.]+)\)"
        ),
    ),
    Quote(
        "docs/teaching.md",
        "every measurement takes seconds, {time} in all",
        run_time("12_incremental_decoding"),
    ),
    Quote(
        "docs/teaching.md",
        "The whole notebook runs in {time} on a CPU (quick mode)",
        run_time("12_incremental_decoding"),
    ),
    # notebook 13's guide rows say "under two minutes" while the measured run time is under two minutes
    *(
        Quote(
            "docs/teaching.md",
            text,
            lambda: (
                {"time": "under two minutes", "Time": "Under two minutes"}
                if _json("results/notebook_times.json")["seconds"]["13_many_processes.ipynb"] < 120
                else run_time("13_many_processes")()
            ),
        )
        for text in ("two processes with `torchrun`, {time} in all", "{Time} of CPU in all (quick mode)")
    ),
    Quote(
        "notebooks/13_many_processes.ipynb#f63bfafe",
        "One GPU (an {gpu}) trained the course's `full` preset in {train_minutes:.0f} minutes, to {bleu:.2f} test BLEU "
        "(`results/full/`)",
        lambda: {**metrics("full")(), "gpu": metrics("full")()["device"].split()[1]},
    ),
    Quote(
        "notebooks/13_many_processes.ipynb#dfbb9eff",
        "Each rank sends $2(N-1)/N$ times the gradients' size, {ratio:.2f} times for $N = {n}$. The `full` model has "
        "{millions:.1f} million parameters of 4 bytes each, so that is some {mb:.0f} MB per rank and step.",
        full_gradients,
    ),
    *(
        Quote(
            where,
            text,
            output(
                "13_many_processes",
                "n13-real-shards",
                r"2 ranks[^\n]*\n[^\n]*weighs (?P<m2>\d+%) more[\s\S]*8 ranks[^\n]*\n[^\n]*weighs (?P<m8>\d+%) more",
            ),
        )
        for where, text in (
            ("docs/teaching.md", "over-weights a token by {m2} at the median on 2 ranks, {m8} on 8"),
            (
                "notebooks/13_many_processes.ipynb#905ee9eb",
                "gives a token of the smallest shard {m2} more weight than it should in the median batch on 2\nranks, {m8} on 8",
            ),
        )
    ),
    Quote(
        "notebooks/13_many_processes.ipynb#a4bf7047",
        "until the timeout (after {minutes:.0f} minutes here, `distributed.TIMEOUT`)",
        lambda: {"minutes": distributed.TIMEOUT.total_seconds() / 60},
    ),
    # notebook 13's PyTorch facts, read from the installed PyTorch (its docstrings and constants), and the package's
    Quote(
        "notebooks/13_many_processes.ipynb#n13-api-calls",
        "PyTorch's default is {nccl} minutes for `nccl` and {other} for the others",
        lambda: re.search(
            r"Default value is (?P<nccl>\d+) minutes for NCCL and (?P<other>\d+) minutes for other backends",
            torch.distributed.init_process_group.__doc__,
        ).groupdict(),
    ),
    Quote(
        "notebooks/13_many_processes.ipynb#n13-api-calls",
        "the package allows {minutes:.0f} (`distributed.TIMEOUT`)",
        lambda: {"minutes": distributed.TIMEOUT.total_seconds() / 60},
    ),
    Quote(
        "notebooks/13_many_processes.ipynb#n13-buckets-md",
        "A bucket holds about `bucket_cap_mb` MiB, {cap} MiB by default",
        lambda: re.search(
            r"a default size of (?P<cap>\d+) MiB", torch.nn.parallel.DistributedDataParallel.__doc__
        ).groupdict(),
    ),
    Quote(
        "docs/teaching.md",
        "(two: about 1 MiB, then {second} of its {total} MiB)",
        NB13_BUCKETS,
    ),
    Quote(
        "docs/teaching.md",
        "the second, {second} of its\n  {total} MiB, is full only at the end of backward",
        NB13_BUCKETS,
    ),
    Quote(
        "notebooks/13_many_processes.ipynb#n13-buckets-md",
        "PyTorch {version}'s source also gives the first bucket only {first:.0f} MiB by default",
        lambda: {
            "version": ".".join(torch.__version__.split(".")[:2]),
            "first": torch.distributed._DEFAULT_FIRST_BUCKET_BYTES / 2**20,
        },
    ),
    # notebook 14's last words: the course's models since its lab
    Quote(
        "notebooks/14_from_2017_to_today.ipynb#ee462bd8",
        "retrained with: {before:.2f} sacreBLEU against the first model's {first:.2f}",
        lambda: {"before": metrics(BEFORE)()["bleu"], "first": metrics("cpu")()["bleu"]},
    ),
    Quote(
        "notebooks/14_from_2017_to_today.ipynb#ee462bd8",
        "(its validation loss was lowest at epoch {lowest_val_loss_epoch} of {epochs})",
        history(BEFORE),
    ),
    Quote(
        "notebooks/14_from_2017_to_today.ipynb#ee462bd8",
        "fall to 0 at the end of the run:\n{bleu:.2f}, with its lowest validation loss at epoch {lowest_val_loss_epoch} of {epochs}",
        lambda: {**metrics(COURSE_RUN)(), **history(COURSE_RUN)()},
    ),
    Quote(
        "notebooks/14_from_2017_to_today.ipynb#ee462bd8",
        "with {ratio:.1f} times the updates",
        lambda: {"ratio": metrics(BEFORE)()["steps"] / metrics("cpu")()["steps"]},
    ),
    # notebook 14, sections 6, 9, 11 and 12: figures read from a cell's output or a record beside the text
    Quote(
        f"notebooks/{NB14}.ipynb#32dc2bcb",
        "What the cell shows: π became {pi_bf}, so only its first three digits are right.",
        nb14_bfloat16,
    ),
    Quote(
        f"notebooks/{NB14}.ipynb#32dc2bcb",
        "So $1 + 2^{{-8}}$ ({a}) lies halfway between 1 and the next number, and it rounds to 1 (a tie goes to the "
        "neighbour whose last bit is 0), while $1 + 2^{{-7}}$ ({b}) is kept exactly. $10^{{30}}$ survives, as {big}:",
        nb14_bfloat16,
    ),
    Quote(
        f"notebooks/{NB14}.ipynb#32dc2bcb",
        "its largest number is {max:,.0f}, and very small gradients round to zero",
        lambda: {"max": torch.finfo(torch.float16).max},
    ),
    Quote(
        f"notebooks/{NB14}.ipynb#43dde0fa",
        "into {total} longer sentences, and translated them with the baseline (`baseline_s0`) and the rotary model. Of "
        "the {total}, {over_20} have more than 20 German words",
        nb14_long,
    ),
    Quote(
        f"notebooks/{NB14}.ipynb#b7367232",
        "{b0:.1f} against {r0:.1f} for joined captions of up to 20 words, {b1:.1f} against {r1:.1f} for 21 to 30, "
        "{b2:.1f} against {r2:.1f} for 31 to 40",
        nb14_long,
    ),
    Quote(
        f"notebooks/{NB14}.ipynb#b7367232",
        "rotary led this same baseline run by {lead:.2f} points ({rotary:.2f} against {base:.2f}, "
        "`results/since_2017/results.json`)",
        nb14_lead,
    ),
    Quote(
        f"notebooks/{NB14}.ipynb#6f65991b",
        "rotary's first run, +3.6 against the baseline's mean, is a t of {first_t:.2f} with {first_df} degrees of "
        "freedom, p = {first_p:.2f}",
        nb14_lab,
    ),
    Quote(
        f"notebooks/{NB14}.ipynb#6f65991b",
        "the two new seeds against the baseline's three give +{fresh:.2f}, p = {fresh_p:.3f} (their validation loss "
        "alone, by Welch's t: {fresh_loss}, p = {fresh_loss_p:.5f})",
        nb14_lab,
    ),
    Quote(f"notebooks/{NB14}.ipynb#6f65991b", "although it is {sds:.1f} of the baselines'", nb14_lab),
    Quote(f"notebooks/{NB14}.ipynb#ee462bd8", "(the new seeds alone: +{fresh:.2f}, p = {fresh_p:.3f})", nb14_lab),
    Quote(f"notebooks/{NB14}.ipynb#ee462bd8", "but its BLEU gain (+{bf16:.2f}) is not shown at three seeds", nb14_lab),
    Quote("results/README.md", "rotary, 3 runs against 3: test BLEU +{rotary:.2f} (95% interval", nb14_lab),
    Quote("results/README.md", "test BLEU +{bf16:.2f} (interval", nb14_lab),
    # sacreBLEU's paired tests (scripts/lab_paired_tests.py)
    Quote(
        f"notebooks/{NB14}.ipynb#6f65991b",
        "the averaged model scored {average_2_bleu:.2f} against `baseline_s0`'s {average_2_base:.2f} ({average_2}, "
        "p {average_2_p} by\n  the paired test below)",
        nb14_paired,
    ),
    Quote(
        f"notebooks/{NB14}.ipynb#6f65991b",
        "Rotary beat its seed's baseline in all three pairs: {rotary},\n{rotary_s1} and {rotary_s2}, p {rotary_all_p} each. "
        "bfloat16's three pairs gave {bf16} (p {bf16_p}), {bf16_s1} (p {bf16_s1_p}) and {bf16_s2}\n(p {bf16_s2_p}).",
        nb14_paired,
    ),
    Quote(
        f"notebooks/{NB14}.ipynb#6f65991b",
        "single runs of pre-norm\n({pre_norm}, p {pre_norm_p}) and grouped-query attention ({gqa_2}, p {gqa_2_p}) lost",
        nb14_paired,
    ),
    Quote(
        f"notebooks/{NB14}.ipynb#8cad70a2",
        "one run against the three seeds' losses after 500 updates gives p = {p:.2g}, so this lab cannot tell",
        nb14_post_norm_4x,
    ),
    Quote(
        f"notebooks/{NB14}.ipynb#8cad70a2",
        "gives p {warmup_all_p} for this difference and for\n  each of the other five",
        nb14_paired,
    ),
    Quote(
        f"notebooks/{NB14}.ipynb#b7367232",
        "beyond the noise of the test sentences (p {rotary_p} by sacreBLEU's paired\ntest, section 7)",
        nb14_paired,
    ),
    Quote(
        f"notebooks/{NB14}.ipynb#ee462bd8",
        "noise ({cpu_rotary} on the same sentences, p {cpu_rotary_p} by sacreBLEU's paired test,\n"
        "`results/since_2017/paired_tests.json`)",
        nb14_paired,
    ),
    Quote(
        f"notebooks/{NB14}.ipynb#ee462bd8",
        "(bfloat16's three seed pairs:\n  p = {bf16_p}, {bf16_s1_p} and {bf16_s2_p})",
        lambda: {k: v.removeprefix("= ") for k, v in nb14_paired().items() if isinstance(v, str)},
    ),
    Quote(
        "docs/teaching.md",
        "bfloat16's three seed pairs gave p = {bf16_p}, {bf16_s1_p} and {bf16_s2_p}\n  "
        "(`results/since_2017/paired_tests.json`)",
        lambda: {k: v.removeprefix("= ") for k, v in nb14_paired().items() if isinstance(v, str)},
    ),
    Quote(f"notebooks/{NB14}.ipynb#14e667b5", "(about {about} updates; the lab's runs made", nb14_quick_updates),
    Quote(
        f"notebooks/{NB14}.ipynb#c523947e",
        "greedy: the same number of updates (about {about}) on any machine",
        nb14_quick_updates,
    ),
    Quote(
        f"notebooks/{NB14}.ipynb#6f65991b",
        "`baseline_s0`'s validation BLEU rose from {e4:.2f} to {e5:.2f} between its 4th and 5th epoch",
        nb14_epochs,
    ),
    Quote(
        f"notebooks/{NB14}.ipynb#35711bd4",
        "In the grid, its first epoch ran at\n  {s1:,} tokens a second, the next two at {s2:,} and {s3:,}",
        nb14_epochs,
    ),
    Quote(
        f"notebooks/{NB14}.ipynb#35711bd4",
        "its steps were slower, {rotary_tps} tokens a second against the baseline's {base_tps}, so in the same 1.2 "
        "minutes it made {rotary_steps} updates to the baseline's {base_steps}",
        NB14_SOLO,
    ),
    Quote(
        "notebooks/09_training.ipynb#n09-14",
        "course_run_updates = {steps}  # the course's cpu run",
        metrics(COURSE_RUN),
    ),
    Quote("notebooks/09_training.ipynb#n09-13", "which made {steps:,} updates in its 90\nminutes", metrics(COURSE_RUN)),
    Quote(
        "results/README.md",
        "+{difference:.2f} on the same test\nsentences, p = {p_value:.3f} by the same paired test (`paired_test_full.json`)",
        lambda: _json(f"results/{COURSE_RUN}/paired_test_full.json"),
    ),
    # --- docs/teaching.md ----------------------------------------------------------------------------
    # §11 (the course's model)
    Quote("docs/teaching.md", "Test score {bleu:.2f} sacreBLEU (cased", metrics(COURSE_RUN)),
    Quote("docs/teaching.md", "Its test score is {bleu:.2f} sacreBLEU (cased", metrics(COURSE_RUN)),
    Quote(
        "docs/teaching.md",
        "({steps:,} updates; its validation loss fell to the end, lowest at epoch {lowest_val_loss_epoch} of {epochs})",
        lambda: {**metrics(COURSE_RUN)(), **history(COURSE_RUN)()},
    ),
    Quote("docs/teaching.md", "It scores {bleu:.2f} sacreBLEU, above", metrics(COURSE_RUN)),
    Quote(
        "docs/teaching.md",
        "dropout 0.1 and the paper's schedule, scored {bleu:.2f} (`results/cpu_rotary/`): its validation loss was lowest\n"
        "  at epoch {lowest_val_loss_epoch} and rose after",
        lambda: {**metrics(BEFORE)(), **history(BEFORE)()},
    ),
    Quote("docs/teaching.md", "`results/cpu_rotary/`, {bleu:.2f})", metrics(BEFORE)),
    Quote("docs/teaching.md", "({steps:,} updates), scored {bleu:.2f} (`results/cpu/`)", metrics("cpu")),
    Quote(
        "docs/teaching.md",
        "given {steps:,} updates in {autocast} on one GPU in {train_minutes:.0f} minutes, scores {bleu:.2f}",
        metrics("full"),
    ),
    Quote(
        "docs/teaching.md",
        "about {gap:.1f} points below the course's model",
        lambda: {"gap": metrics(COURSE_RUN)()["bleu"] - laptop_seeds()["mean"]},
    ),
    Quote(
        "docs/teaching.md",
        "the validation loss was lowest at epoch {lowest_val_loss_epoch}, and greedy",
        history(COURSE_RUN),
    ),
    Quote(
        "docs/teaching.md",
        "highest at epoch {best_epoch} ({best_val_bleu:.2f}), the best of {n} noisy scores. A run without",
        lambda: {
            **metrics(COURSE_RUN)(),
            "n": sum(e["val_bleu"] is not None for e in _json(f"results/{COURSE_RUN}/history.json")),
        },
    ),
    Quote(
        "docs/teaching.md",
        "{averaged[val_loss]:.3f} for the mean, against {low:.3f}–{high:.3f} for the five\n  epochs",
        lambda: {
            **metrics(COURSE_RUN)(),
            "low": min(e["val_loss"] for e in _json(f"results/{COURSE_RUN}/history.json") if e["epoch"] >= 34),
            "high": max(e["val_loss"] for e in _json(f"results/{COURSE_RUN}/history.json") if e["epoch"] >= 34),
        },
    ),
    Quote(
        "docs/teaching.md",
        "the mean of epochs {averaged[epochs][0]}–{averaged[epochs][4]} (validation BLEU {averaged[val_bleu]:.2f})",
        metrics(COURSE_RUN),
    ),
    Quote(
        "docs/teaching.md",
        "validation loss (dropout 0.1, `results/cpu_rotary/`) was lowest at\n   epoch {lowest_val_loss_epoch} of {epochs} "
        "and rose slowly after",
        history(BEFORE),
    ),
    Quote(
        "docs/teaching.md",
        "and gained {difference:.1f} BLEU",
        lambda: _json(f"results/{COURSE_RUN}/paired_test.json"),
    ),
    # --- notebook 00 ---------------------------------------------------------------------------------
    # --- notebook 01 ---------------------------------------------------------------------------------
    # teaching.md §01 quotes the d_k = 1024 row of the scaling table (cell c12) and the timing's work ratio (c25-timing).
    Quote(
        "docs/teaching.md",
        "at d_k = 1024 the largest weight averages {top} ({top_s} with the scaling) and the softmax Jacobian's norm "
        "is {jac} ({jac_s} with it).",
        output(
            "01_self_attention",
            "c12",
            r"\n\s*1024 \|\s+(?P<top>[\d.]+)\s+(?P<top_s>[\d.]+)\s+\|\s+(?P<jac>[\d.]+)\s+(?P<jac_s>[\d.]+)",
        ),
    ),
    Quote(
        "docs/teaching.md",
        "({few} of queries get less than 0.01)",
        output(
            "01_self_attention",
            "c12",
            r"\n\s*1024 \|(?:\s+[\d.]+){2}\s+\|(?:\s+[\d.]+){2}\s+\|(?:\s+[\d.]+){2}\s+\|\s+(?P<few>\d+%)",
        ),
    ),
    Quote(
        "docs/teaching.md",
        "attention still wins at n = 256, where it does {times} times the RNN's multiply-adds.",
        output(
            "01_self_attention", "c25-timing", r"n = 256: attention does (?P<times>\d+) times the RNN's multiply-adds"
        ),
    ),
    # --- notebook 02 ---------------------------------------------------------------------------------
    # The untrained heads' figure (cell c16): cell c15 prints the mean of the rows' largest weights, each head's
    # largest weight and how many rows are nearly one-hot; the text (c17) reads them.
    Quote(
        "notebooks/02_multi_head_attention.ipynb#c17",
        "a row's largest weight averages {mean}, halfway",
        output("02_multi_head_attention", "c15", r"mean over all rows: (?P<mean>[\d.]+)"),
    ),
    Quote(
        "notebooks/02_multi_head_attention.ipynb#c17",
        "Only {n} of the {total} rows are nearly one-hot",
        output("02_multi_head_attention", "c15", r"above 0\.9: (?P<n>\d+) of (?P<total>\d+)"),
    ),
    Quote(
        "notebooks/02_multi_head_attention.ipynb#c17",
        "put {h2} on *red*. The heads differ, because each has its own projections. In head 0 most words look most at "
        "themselves (*red* with {h0}); head 1 sends both rows of *a* to *ball* ({h1})",
        output(
            "02_multi_head_attention",
            "c15",
            r"largest weight in each head: \[(?P<h0>[\d.]+), (?P<h1>[\d.]+), (?P<h2>[\d.]+), (?P<h3>[\d.]+)\]",
        ),
    ),
    # teaching.md §02 quotes the same mean, to one decimal.
    Quote(
        "docs/teaching.md",
        "a row's largest weight averages about {mean:.1f}",
        lambda: {
            "mean": float(output("02_multi_head_attention", "c15", r"mean over all rows: (?P<mean>[\d.]+)")()["mean"])
        },
    ),
    # --- notebook 03 ---------------------------------------------------------------------------------
    # --- notebook 04 ---------------------------------------------------------------------------------
    # Section 1's norms (cell 521c455a prints four of each; the text quotes their mean) and section 3's similarities
    # (cell 45fb1263), quoted in the summary and in teaching.md §04.
    Quote(
        "notebooks/04_embeddings_and_positional_encoding.ipynb#a68659f7",
        "lifts the token vectors from norm {raw:.2f} to {scaled:.1f}, next to the positions' {pe:.0f}",
        lambda: {
            name: sum(map(float, norms.split(","))) / len(norms.split(","))  # the mean of the four printed norms
            for name, norms in output(
                "04_embeddings_and_positional_encoding",
                "521c455a",
                r"raw lookup\s*: tensor\(\[(?P<raw>[^\]]+)\]\)[\s\S]*?"
                r"× √d_model\s*: tensor\(\[(?P<scaled>[^\]]+)\]\)[\s\S]*?"
                r"positional encodings\s*: tensor\(\[(?P<pe>[^\]]+)\]\)",
            )().items()
        },
    ),
    Quote(
        "docs/teaching.md",
        "(norm ≈ {raw:.2f}) would be about 100 times smaller than the positional ones",
        lambda: {
            name: sum(map(float, norms.split(","))) / len(norms.split(","))
            for name, norms in output(
                "04_embeddings_and_positional_encoding", "521c455a", r"raw lookup\s*: tensor\(\[(?P<raw>[^\]]+)\]\)"
            )().items()
        },
    ),
    *(
        Quote(
            where,
            "first drops below 0.5 at distance {b1000} instead of {b10000}",
            output(
                "04_embeddings_and_positional_encoding",
                "45fb1263",
                r"base 10000: first below 0.5 at distance (?P<b10000>\d+)[\s\S]*base\s+1000: first below 0.5 at "
                r"distance (?P<b1000>\d+)",
            ),
        )
        for where in ("notebooks/04_embeddings_and_positional_encoding.ipynb#a68659f7", "docs/teaching.md")
    ),
    Quote(
        "docs/teaching.md",
        "positions 100 apart look more alike ({s100}) than positions 40 apart ({s40})",
        output(
            "04_embeddings_and_positional_encoding",
            "45fb1263",
            r"base 10000: .*?distance 40: (?P<s40>[\d.]+), at distance 100: (?P<s100>[\d.]+)",
        ),
    ),
    # The summary's longest wavelength at d_model = 64, as a share of 10000·2π: base^((D-2)/D) / base.
    Quote(
        "notebooks/04_embeddings_and_positional_encoding.ipynb#a68659f7",
        "just under $10000\\cdot2\\pi$ (${share:.2f} \\cdot 10000\\cdot2\\pi$ at $d_{{model}}=64$)",
        lambda: {"share": 10000.0 ** (62 / 64) / 10000.0},
    ),
    # --- notebook 05 ---------------------------------------------------------------------------------
    # --- notebook 06 ---------------------------------------------------------------------------------
    # --- notebook 07 ---------------------------------------------------------------------------------
    # Section 8's unrelated source: a uniform guess among the ten symbols, and that guess at the last position alone,
    # averaged over the ten positions.
    Quote(
        "notebooks/07_full_model_copy_task.ipynb#eb1facad",
        "$\\ln 10 \\approx {guess:.2f}$, a uniform guess among ten symbols",
        lambda: {"guess": float(Decimal(10).ln())},  # ln 10
    ),
    Quote(
        "notebooks/07_full_model_copy_task.ipynb#3cb010bc",
        "which costs $\\ln 10 / 10 \\approx {last:.2f}$ on average over the ten positions",
        lambda: {"last": float(Decimal(10).ln()) / 10},
    ),
    # teaching.md §07 quotes the saved notebook: the ablation (cell ablation), the sharpest head of the last layer's
    # cross-attention (38132c7c) and the masked and mask-free models after 400 steps (58cf6340).
    Quote(
        "docs/teaching.md",
        "({acc}% in the saved run), and its loss at steps 181–200 is lower than the full model's ({without} against {full})",
        output(
            "07_full_model_copy_task",
            "ablation",
            r"steps 181-200: without self-attention (?P<without>[\d.]+), full model (?P<full>[\d.]+)[\s\S]*?"
            r"after 200 steps: (?P<acc>[\d.]+)%",
        ),
    ),
    Quote(
        "docs/teaching.md",
        "the sharpest head of the last layer (head {best}) peaks on the diagonal in {peak}% of the rows, with {weight}% "
        "of its weight there on average",
        output(
            "07_full_model_copy_task",
            "38132c7c",
            r"head (?P<best>\d) \(drawn below\): peaks on the diagonal in (?P<peak>\d+)% of the rows, puts "
            r"(?P<weight>\d+)% of its weight",
        ),
    ),
    Quote(
        "docs/teaching.md",
        "as a masked model's after the same 400 steps ({cl} against {hl} in the saved run; which is lower depends on "
        "the processor), and teacher-forced accuracy is as high ({ctf}% against {htf}%), but the model gets only "
        "{cg}% of the symbols right when it has to generate, against {hg}%.",
        output(
            "07_full_model_copy_task",
            "58cf6340",
            r"with mask\s+(?P<hl>[\d.]+)\s+(?P<htf>[\d.]+)%\s+(?P<hg>[\d.]+)%\s*without mask\s+(?P<cl>[\d.]+)\s+"
            r"(?P<ctf>[\d.]+)%\s+(?P<cg>[\d.]+)%",
        ),
    ),
    # --- notebook 08 ---------------------------------------------------------------------------------
    # The BPE comparison (results/bpe_comparison/results.json): its table, one row per run, and the figures the text
    # reads from it; the same settings at an earlier commit (results/quick_cpu_words, quick_cpu_bpe1000) for the spread.
    *[
        Quote("notebooks/08_data.ipynb#bpe-choice", "{%s}" % key, _bpe_rows)
        for key in (
            "small_words",
            "small_1000",
            "small_2000",
            "small_4000",
            "all_words",
            "all_2000",
            "all_4000",
            "all_8000",
        )
    ],
    Quote(
        "notebooks/08_data.ipynb#bpe-choice",
        "+{small_1000_cased:.1f} and +{small_2000_cased:.1f} at 6,000 pairs, +{all_4000_cased:.1f} with 4,000 merges",
        _bpe_gains,
    ),
    Quote(
        "notebooks/08_data.ipynb#bpe-choice",
        "gains shrink to +{small_1000_tut:.1f} and +{small_2000_tut:.1f}, and on all the data only 4,000 merges beat "
        "whole words (+{all_4000_tut:.1f})",
        _bpe_gains,
    ),
    Quote(
        "notebooks/08_data.ipynb#bpe-verdict",
        "{small_words_steps:,} updates for whole words against {small_4000_steps:,} to {small_1000_steps:,} for subwords "
        "at 6,000 pairs, and {all_words_steps:,} against {all_8000_steps:,} to {all_2000_steps:,} on all the data",
        _bpe_gains,
    ),
    Quote(
        "notebooks/08_data.ipynb#bpe-verdict",
        "({all_4000_val:.1f}, against {all_2000_val:.1f} and {all_8000_val:.1f})",
        _bpe_gains,
    ),
    Quote(
        "notebooks/08_data.ipynb#bpe-verdict",
        "output is {words_ratio:.2f} times as long as the references in `13a` tokens, while the subword run beside it "
        "(`results/quick_cpu_bpe1000/`) writes {bpe_ratio:.2f} times their length",
        _same_setting_spread,
    ),
    Quote(
        "notebooks/08_data.ipynb#bpe-verdict",
        "scored {words:.1f} with whole words (`results/quick_cpu_words/`; {words_table:.1f} in the table) and {bpe:.1f} "
        "with 1,000 merges (`results/quick_cpu_bpe1000/`; {bpe_table:.1f} in the table): {spread:.1f} points apart",
        _same_setting_spread,
    ),
    Quote(
        "notebooks/08_data.ipynb#bpe-verdict",
        "as large as the table's cased gaps ({small_1000_cased:.1f}–{small_2000_cased:.1f} and {all_4000_cased:.1f})",
        _bpe_gains,
    ),
    Quote(
        "notebooks/08_data.ipynb#ed66e874",
        "subwords gained {all_4000_cased:.1f} cased BLEU on all the data",
        _bpe_gains,
    ),
    Quote("notebooks/08_data.ipynb#ed66e874", "the gain was {all_4000_tut:.1f}: within the", _bpe_gains),
    Quote("notebooks/08_data.ipynb#ed66e874", "within the {spread:.1f} points one setting moved", _same_setting_spread),
    Quote("docs/teaching.md", "the same setting moved {spread:.1f} BLEU between two commits", _same_setting_spread),
    Quote("docs/teaching.md", "4,000 merges gained {all_4000_tut:.1f}", _bpe_gains),
    Quote(
        "notebooks/08_data.ipynb#440ca3fb",
        "the {random:.0f}% above is over all random batches",
        lambda: {
            "random": float(
                output("08_data", "32788906", r"random batches of \d+ pairs: (?P<random>[\d.]+)%")()["random"]
            )
        },
    ),
    # results/README.md's "Words or subwords" section says the same as the notebook, to two decimals where it can.
    Quote(
        "results/README.md",
        "subwords gain {small_1000_cased:.1f}-{small_2000_cased:.1f} at 6,000 pairs and {all_4000_cased:.1f} with 4,000 "
        "merges on all the data",
        _bpe_gains,
    ),
    Quote(
        "results/README.md",
        "the gains are {small_1000_tut:.1f}-{small_2000_tut:.1f} at 6,000 pairs, and on all the data only 4,000 merges "
        "beat words (+{all_4000_tut:.1f})",
        _bpe_gains,
    ),
    Quote(
        "results/README.md",
        "({small_words_steps:,} against {small_4000_steps:,}-{small_1000_steps:,}; {all_words_steps:,} against "
        "{all_8000_steps:,}-{all_2000_steps:,})",
        _bpe_gains,
    ),
    Quote(
        "results/README.md",
        "scored {words:.2f} with words (`quick_cpu_words/`) and {bpe:.2f} with 1,000 merges (`quick_cpu_bpe1000/`), "
        "against {words_table:.2f} and {bpe_table:.2f} here: {spread:.1f} BLEU for one setting",
        _same_setting_spread,
    ),
    Quote(
        "results/README.md",
        "({all_4000_val:.2f}, against {all_2000_val:.2f} with 2,000 and {all_8000_val:.2f} with 8,000)",
        _bpe_gains,
    ),
    # teaching.md §08 quotes the notebook's vocabulary table (cell 87d65b2b), padding (32788906) and round trip (068e79b9).
    Quote(
        "docs/teaching.md",
        "(`min_freq = 2`: {vde} German, {ven} English entries; {ude:.1f}% and {uen:.1f}% `<unk>` on validation)",
        lambda: _min_freq_row(2),
    ),
    Quote("docs/teaching.md", "text still has some ({ude:.1f}% of German validation tokens)", lambda: _min_freq_row(1)),
    Quote(
        "docs/teaching.md",
        "({random:.0f}% padding with random batches, {bucketed:.0f}% with `TokenBatcher`)",
        lambda: {
            k: float(v)
            for k, v in output(
                "08_data",
                "32788906",
                r"random batches of \d+ pairs: (?P<random>[\d.]+)%\s+padding with TokenBatcher:\s+(?P<bucketed>[\d.]+)%",
            )().items()
        },
    ),
    Quote(
        "docs/teaching.md",
        "they are rare ({n} of {total} sentences)",
        output(
            "08_data", "068e79b9", r"of the (?P<n>\d+) differing sentences[\s\S]*?BLEU of all (?P<total>[\d,]+) round"
        ),
    ),
    # --- notebook 09 ---------------------------------------------------------------------------------
    # teaching.md §09 quotes the quick preset's peak rate, printed by the schedule figure's cell (n09-14).
    Quote(
        "docs/teaching.md",
        "the `quick` preset peaks at step {step}, at 0.3/√(128·100) ≈ {peak}·10⁻³",
        output("09_training", "n09-14", r"quick: peak (?P<peak>[\d.]+)e-03 at step (?P<step>\d+)"),
    ),
    # --- notebook 10 ---------------------------------------------------------------------------------
    # The quick run's history (cell n10-05) and size (n10-06); teaching.md §10 and "The quick model" quote its test
    # scores, greedy (n10-04, printed by train()) and beam 4 (n10-20), to the nearest whole point ("about 14").
    Quote(
        "notebooks/10_decoding_and_bleu.ipynb#n10-t7",
        "reached after 300 of its {steps} updates",
        output("10_decoding_and_bleu", "n10-05", r"epoch 8: step\s+(?P<steps>\d+)"),
    ),
    Quote(
        "notebooks/10_decoding_and_bleu.ipynb#n10-12",
        "This is a {millions:.2f}M-parameter model",
        lambda: {
            "millions": int(
                output("10_decoding_and_bleu", "n10-06", r"(?P<n>[\d,]+) parameters")()["n"].replace(",", "")
            )
            / 1e6
        },
    ),
    *(
        Quote(
            "docs/teaching.md",
            words,
            lambda: {
                name: round(float(value))  # whole points, to the nearest
                for name, value in {
                    **output(
                        "10_decoding_and_bleu",
                        "n10-04",
                        r"sacreBLEU (?P<greedy>[\d.]+) .*tutorial BLEU \(lowercased, tokenized\) (?P<tutorial>[\d.]+)",
                    )(),
                    **output("10_decoding_and_bleu", "n10-20", r"beam 4: BLEU = (?P<beam>[\d.]+)")(),
                }.items()
            },
        )
        for words in (
            "(saved notebook: about {greedy} greedy, about {beam} beam 4)",
            "a different, higher number: about {tutorial} against about {greedy} for the same greedy output",
            "Expect a test score of\nabout {greedy} sacreBLEU, greedy",
            'about {tutorial} "tutorial" BLEU)',
        )
    ),
    Quote("docs/teaching.md", "{bleu:.2f} in\n`results/quick_cpu_words/` from another CPU", metrics("quick_cpu_words")),
    # --- notebook 11 ---------------------------------------------------------------------------------
    # Section 1 (its cell 5 prints the model, the run and the averaging; cell 7 the curves' epochs).
    Quote(
        "notebooks/11_german_english_model.ipynb#134c5a16",
        "for {train_minutes:.0f} minutes on a 2-core CPU",
        metrics(COURSE_RUN),
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#134c5a16", "all {corpus[train]:,} training pairs", metrics(COURSE_RUN)
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#134c5a16",
        "Its weights (about {mb} MB)",
        lambda: {"mb": round((ROOT / pretrained.COURSE_MODEL_PATH).stat().st_size / 1e6)},
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#134c5a16",
        "`results/cpu/model_fp16.pt` (test BLEU {bleu:.2f})",
        metrics("cpu"),
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#134c5a16",
        "made {steps:,} updates in its {train_minutes:.0f} minutes",
        metrics("cpu"),
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#134c5a16",
        "updates in its 90 minutes, against {steps:,}",
        metrics(COURSE_RUN),
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#134c5a16",
        "course's previous model (`results/cpu_rotary/`, test BLEU {bleu:.2f}) had its lowest validation loss at epoch "
        "{lowest_val_loss_epoch} of {epochs}",
        lambda: {**metrics(BEFORE)(), **history(BEFORE)()},
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#134c5a16",
        "Its batches hold up to {train_config[max_tokens]:,} tokens of each language",
        metrics(COURSE_RUN),
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#134c5a16",
        "Its warm-up is {train_config[warmup]} steps, with the learning rate scaled by {train_config[lr_factor]}",
        metrics(COURSE_RUN),
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#134c5a16",
        "It clips the gradient norm at {train_config[clip_norm]}",
        metrics(COURSE_RUN),
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#134c5a16",
        "the mean of the last {train_config[average_last]} epochs' weights",
        metrics(COURSE_RUN),
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#bbe6804a",
        "on the first {train_config[bleu_val_limit]} validation sentences",
        metrics(COURSE_RUN),
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#2260fe36",
        "Until epoch {above} the training loss sits above the validation loss",
        lambda: {
            "above": max(
                e["epoch"] for e in _json(f"results/{COURSE_RUN}/history.json") if e["train_loss"] > e["val_loss"]
            )
        },
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#2260fe36",
        "The validation\nBLEU climbs to {best_val_bleu:.2f} at epoch {best_epoch} and stays between {low:.1f} and {high:.1f} after",
        lambda: {
            **metrics(COURSE_RUN)(),
            "low": min(
                e["val_bleu"] for e in _json(f"results/{COURSE_RUN}/history.json") if e["epoch"] > 28 and e["val_bleu"]
            ),
            "high": max(
                e["val_bleu"] for e in _json(f"results/{COURSE_RUN}/history.json") if e["epoch"] > 28 and e["val_bleu"]
            ),
        },
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#2260fe36",
        "it is lowest at epoch {lowest_val_loss_epoch} of {epochs}",
        history(COURSE_RUN),
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#2260fe36",
        "the best of {n} noisy scores",
        lambda: {"n": sum(e["val_bleu"] is not None for e in _json(f"results/{COURSE_RUN}/history.json"))},
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#2260fe36",
        "The five epochs it averages have losses from {low:.3f} to {high:.3f}",
        lambda: {
            "low": min(e["val_loss"] for e in _json(f"results/{COURSE_RUN}/history.json") if e["epoch"] >= 34),
            "high": max(e["val_loss"] for e in _json(f"results/{COURSE_RUN}/history.json") if e["epoch"] >= 34),
        },
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#2260fe36",
        "the mean of their weights has a loss of {averaged[val_loss]:.3f} (the star in the figure)",
        metrics(COURSE_RUN),
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#2260fe36",
        "the mean of epochs {averaged[epochs][0]} to {averaged[epochs][4]}",
        metrics(COURSE_RUN),
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#2260fe36",
        "the mean scored {averaged[val_bleu]:.2f}, and the best single epoch, {best_epoch}, scored {best_val_bleu:.2f}",
        metrics(COURSE_RUN),
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#2260fe36",
        "on {train_config[bleu_val_limit]} sentences says little",
        metrics(COURSE_RUN),
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#2260fe36",
        "(greedy, the first {train_config[bleu_val_limit]} sentences)",
        metrics(COURSE_RUN),
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#2260fe36",
        "The run made {steps:,} updates in {train_minutes:.0f} minutes of training",
        metrics(COURSE_RUN),
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#2260fe36",
        "in {autocast}, for {steps:,} updates in {train_minutes:.0f} minutes (`results/full/`, test BLEU {bleu:.2f})",
        metrics("full"),
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#2260fe36",
        "(d_ff {d_ff}), the same dropout ({dropout})",
        lambda: {
            "d_ff": metrics("full")()["train_config"]["model"]["d_ff"],
            "dropout": full_dropout
            if (full_dropout := metrics("full")()["train_config"]["model"]["dropout"])
            == metrics(COURSE_RUN)()["train_config"]["model"]["dropout"]
            else "not the same",
        },
    ),
    # Section 5
    Quote(
        "notebooks/11_german_english_model.ipynb#own-compare-after",
        "{laptop} against {course} sacreBLEU",
        output(
            "11_german_english_model",
            "own-train",
            r"test sacreBLEU (?P<laptop>[\d.]+) \(beam 4\)\nthe course's model: .* test sacreBLEU (?P<course>[\d.]+)",
        ),
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#own-compare-after",
        "so the gap of about {gap:.1f} points",
        lambda: {"gap": metrics(COURSE_RUN)()["bleu"] - laptop_seeds()["mean"]},
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#try-warning-after",
        "it warned on\n{not_captions:.0%} and missed the rest; it also warned on {test:.0%} of the test captions",
        lambda: {
            "not_captions": _json("results/confidence/results.json")["flagged"]["not captions"],
            "test": _json("results/confidence/results.json")["flagged"]["test captions"],
        },
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#own-intro",
        "in the pilots {L8_2layers:.1f} validation BLEU, against {L3_end_w300:.1f} for 3 layers and {L9_4layers:.1f} for 4",
        laptop_pilots,
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#own-intro",
        "reached {L5_end_w300_drop0:.1f} validation BLEU without it, against {L3_end_w300:.1f} with it",
        laptop_pilots,
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#own-intro",
        "the two schedules scored alike ({L3_end_w300:.1f} and {L1_noam:.1f} validation BLEU)",
        laptop_pilots,
    ),
    Quote("notebooks/11_german_english_model.ipynb#own-intro", "a step is {x} times faster now", SPEED_UP),
    Quote("results/laptop/README.md", "a step is {x} times faster in the same run", SPEED_UP),
    Quote(
        "notebooks/11_german_english_model.ipynb#own-compare-after",
        "the three laptop runs scored {s0:.2f}, {s1:.2f} and {s2:.2f} (mean {mean:.2f})",
        laptop_seeds,
    ),
    Quote(
        "notebooks/11_german_english_model.ipynb#296f5268",
        "{train_config[max_minutes]:.0f} minutes of training on a CPU, or less if a fast machine finishes its "
        "{train_config[epochs]} epochs first",
        metrics(COURSE_RUN),
    ),
]


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _text(where: str) -> str:
    if "#" in where:
        path, cell_id = where.split("#", 1)
        return "".join(_cell(Path(path).stem, cell_id)["source"])
    return (ROOT / where).read_text(encoding="utf-8")


@pytest.mark.parametrize("quote", QUOTES, ids=[f"{q.where}: {q.words[:50]}" for q in QUOTES])
def test_the_text_quotes_the_record(quote):
    words = quote.words.format(**quote.record())
    assert _normalise(words) in _normalise(_text(quote.where)), (
        f"{quote.where} should say {words!r} (from its record); the text or the record changed"
    )


def test_a_drifted_figure_fails(monkeypatch):
    quote = QUOTES[0]
    drifted = dict(quote.record())
    drifted["bleu"] += 0.01  # the record moves, the text does not
    words = quote.words.format(**drifted)
    assert _normalise(words) not in _normalise(_text(quote.where))


def test_a_notebook_output_can_be_read():
    read = output("00_roadmap_and_setup", _first_code_cell_with_output("00_roadmap_and_setup"), r"(?P<any>\S+)")
    assert read()["any"]


def _first_code_cell_with_output(notebook: str) -> str:
    cells = _json(f"notebooks/{notebook}.ipynb")["cells"]
    return next(c["id"] for c in cells if c["cell_type"] == "code" and _outputs_text(c).strip())
