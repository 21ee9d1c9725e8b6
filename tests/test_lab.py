"""Notebook 14's lab: its runs (transformer_lessons.lab), its record shipped with the package, and its plots and widget."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from transformer_lessons import lab, viz  # noqa: E402
from transformer_lessons import lab_stats  # noqa: E402
from transformer_lessons.viz.lab import LAB_FILE, baseline_noise, lab_rows  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _run(name, bleu, steps=100, group="options", diverged=None, samples=None):
    history = [
        {"epoch": e, "step": 10 * e, "val_loss": 5.0 - e, "val_bleu": bleu * e / 3, "elapsed_s": 60.0 * e}
        for e in (1, 2, 3)
    ]
    row = {
        "name": name,
        "group": group,
        "why": f"why {name}",
        "changes": {},
        "diverged": diverged,
        "history": history,
    }
    if diverged:
        return row | {"epochs": 1}
    return row | {
        "parameters": 1000,
        "steps": steps,
        "epochs": 3,
        "train_time_s": 180.0,
        "tokens_per_s": 10.0 * steps,
        "val_loss": 2.0,
        "best_val_bleu": bleu,
        "test_bleu": bleu,
        "samples": samples or [f"{name} says {i}" for i in range(2)],
    }


@pytest.fixture
def part():
    return {
        "device": "cpu",
        "minutes": 6,
        "sample_indices": [0, 2],
        "runs": [
            _run("baseline_s0", 30.0),
            _run("baseline_s1", 31.0),
            _run("baseline_s2", 32.0),
            _run("rotary", 34.0, steps=90, samples=["baseline_s0 says 0", "a different sentence"]),
            _run("mqa", 20.0, steps=120),
            _run("post-norm_no-warmup", 0.0, group="warmup", diverged="the loss is nan at step 3"),
            _run("pre-norm_no-warmup", 5.0, group="warmup"),
        ],
        "long": {
            "baseline_s0": {"0-20": {"n": 3, "bleu": 30.0}, "21-30": {"n": 2, "bleu": 20.0}},
            "rotary": {"0-20": {"n": 3, "bleu": 31.0}, "21-30": {"n": 2, "bleu": 25.0}},
        },
    }


def test_the_noise_and_the_differences_are_against_the_seeds_mean(part):
    mean, spread, n = baseline_noise(part)
    assert (mean, n) == (31.0, 3) and spread == pytest.approx(statistics.stdev([30, 31, 32]))
    rows = {r["name"]: r for r in lab_rows(part)}
    assert rows["rotary"]["vs_base"] == pytest.approx(3.0) and rows["mqa"]["vs_base"] == pytest.approx(-11.0)
    assert "post-norm_no-warmup" not in rows
    warmup = {r["name"]: r for r in lab_rows(part, "warmup")}
    assert warmup["post-norm_no-warmup"]["vs_base"] is None
    with pytest.raises(ValueError, match="no baseline run"):
        baseline_noise({"runs": [_run("rotary", 1.0)]})


def test_the_table_lists_every_run_of_its_group(part):
    table = viz.lab_table(part)
    assert "31.00 ± 1.00" in table and "+3.00" in table and "-11.00" in table and "warmup" not in table
    warmup = viz.lab_table(part, group="warmup")
    assert "post-norm_no-warmup  diverged: the loss is nan at step 3" in warmup and "rotary" not in warmup


def test_the_lab_plot_draws_each_change_as_an_interval_from_the_seeds_noise(part):
    fig = viz.plot_lab(part, title="t")
    bleu_axes, loss_axes = fig.axes
    assert [t.get_text() for t in bleu_axes.get_yticklabels()] == [
        "baseline (3 seeds)",
        "rotary (1 run)",
        "mqa (1 run)",
    ]
    rotary = lab_stats.difference([30.0, 31.0, 32.0], [34.0])  # one run against three: t with 2 df
    assert rotary.df == 2 and rotary.difference == pytest.approx(3.0)
    intervals = [tuple(line.get_xdata()) for line in bleu_axes.lines if len(line.get_xdata()) == 2]
    assert (pytest.approx(rotary.low), pytest.approx(rotary.high)) in [(a, b) for a, b in intervals]
    assert "after the same number of updates" in loss_axes.get_title()
    fig = viz.plot_warmup(part)
    assert len(fig.axes[0].lines) == 1 and "diverged" in " ".join(t.get_text() for t in fig.axes[0].texts)
    assert len(fig.axes[1].lines) == 1  # pre-norm's panel: its run without warm-up
    fig = viz.plot_long(part)
    heights = sorted(round(p.get_height(), 1) for p in fig.axes[0].patches)
    assert heights == [20.0, 25.0, 30.0, 31.0]
    with pytest.raises(ValueError, match="no long-sentence experiment"):
        viz.plot_long(part | {"long": {}})


def test_a_warmup_run_is_set_against_the_usual_schedule_of_its_own_norm(part):
    runs = [
        _run("post-norm_usual", 16.0, group="warmup"),
        _run("pre-norm_usual", 15.0, group="warmup"),
        _run("post-norm_no-ramp", 20.0, group="warmup"),
        _run("pre-norm_4x-rate", 23.0, group="warmup"),
    ]
    table = viz.lab_table(part | {"runs": part["runs"][:3] + runs}, group="warmup")
    assert "the usual schedule over the same time: post-norm_usual 16.00, pre-norm_usual 15.00" in table
    rows = {line.split()[0]: line.split()[-1] for line in table.splitlines()[2:]}
    assert rows == {
        "post-norm_usual": "+0.00",
        "pre-norm_usual": "+0.00",
        "post-norm_no-ramp": "+4.00",
        "pre-norm_4x-rate": "+8.00",
    }


def test_the_explorer_compares_two_runs_and_follows_its_controls(part):
    pairs = [("ein Satz", "a sentence"), ("zwei", "two"), ("drei Wörter", "three words")]
    explorer = viz.lab_explorer({"cpu": part}, pairs=pairs, a="baseline_s0", b="rotary")
    assert explorer.describe() == "lab explorer: baseline_s0 (test BLEU 30.00) against rotary (34.00)"
    table = explorer.table.value
    assert "ein Satz" in table and "reference: three words" in table and "a different sentence" in table
    assert table.count("background:#fff4e6") == 1  # the one sample whose translations differ
    assert [line.get_label() for line in explorer.figure.axes[1].lines] == ["baseline_s0", "rotary"]
    explorer.controls["b"].value = "mqa"
    assert explorer.runs()[1]["name"] == "mqa" and "mqa says 1" in explorer.table.value
    assert [line.get_label() for line in explorer.figure.axes[0].lines] == ["baseline_s0", "mqa"]
    assert explorer.figure.get_suptitle() == "A: baseline_s0  against  B: mqa"  # named in the static picture
    assert "post-norm_no-warmup" not in explorer.controls["a"].options  # a diverged run has no test BLEU
    with pytest.raises(KeyError, match="no run called 'nope'"):
        viz.lab_explorer({"cpu": part}, b="nope")
    with pytest.raises(KeyError, match="no 'gpu' lab"):
        viz.lab_explorer({"cpu": part}, which="gpu")


def test_variants_are_found_by_name_and_the_short_runs_take_their_own_time():
    assert lab.variant("rotary").model == {"positional": "rotary"}
    with pytest.raises(KeyError, match="no lab run called 'nope'; the runs are baseline_s0"):
        lab.variant("nope")
    warm = lab.variant("pre-norm_no-warmup")
    assert lab.config_of(warm, lab.BASE, 6).max_minutes == warm.minutes
    assert lab.config_of(warm, lab.BASE, 6, short=0.5).max_minutes == 0.5
    assert lab.config_of(lab.variant("rmsnorm"), lab.BASE, 6, short=0.5).max_minutes == 6


def test_the_shipped_record_is_the_committed_results():
    """transformer_lessons/data/lab_since_2017.json is what scripts/since_2017.py --summarize makes of results/."""
    spec = importlib.util.spec_from_file_location("since_2017_summary", ROOT / "scripts" / "since_2017.py")
    script = importlib.util.module_from_spec(spec)
    sys.modules["since_2017_summary"] = script
    try:
        spec.loader.exec_module(script)
        made = script.summarize(ROOT / "results" / "since_2017", ROOT / "results" / "since_2017_full")
    finally:
        del sys.modules["since_2017_summary"]
    shipped = json.loads(LAB_FILE.read_text(encoding="utf-8"))
    assert json.loads(json.dumps(made)) == shipped, "run: python scripts/since_2017.py --summarize " + str(LAB_FILE)
    cpu = shipped["cpu"]
    names = [r["name"] for r in cpu["runs"]]
    assert names == [v.name for v in lab.VARIANTS], "every run of the lab is recorded, in the lab's order"
    assert all(len(r["samples"]) == len(cpu["sample_indices"]) for r in cpu["runs"] if not r.get("diverged"))
    assert set(cpu["long"]) == {"baseline_s0", "rotary"}
    mean, spread, n = baseline_noise(cpu)
    assert n == 3 and spread > 0
