"""The ``to_end`` schedule and the ``laptop`` preset: a run that knows its budget anneals into its end.

- :func:`to_end_rate` warms up exactly as the paper's curve, peaks at the same rate, then falls in a
  straight line to zero as the budget is spent;
- a run's :class:`Budget` is the larger of its time over ``max_minutes`` and its updates over its epochs;
- a run with a time limit ends at a rate of (nearly) zero, evaluates the part-epoch the limit stopped in
  as its last epoch (history, ``best.pt``, ``metrics.json``), and one that is given more time resumes;
- ``precision="native"`` is bfloat16 on a CPU with bfloat16 arithmetic only;
- the ``laptop`` preset is on the command line and trains end to end.
"""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

from test_train import TOY_CONFIG, StepClock, toy_corpus
from transformer_lessons import hardware
from transformer_lessons.__main__ import main
from transformer_lessons.config import TRAIN_PRESETS, TrainConfig
from transformer_lessons.run import train
from transformer_lessons.run_state import Budget, TrainState
from transformer_lessons.schedule import noam_rate, to_end_rate, to_end_scheduler


@pytest.fixture(scope="module")
def corpus():
    return toy_corpus()


def test_the_warm_up_and_the_peak_are_the_papers():
    d, w, f = 256, 300, 0.7
    for step in (1, 50, 150, 299, 300):
        assert math.isclose(to_end_rate(step, 0.0, d, w, f), noam_rate(step, d, w, f), rel_tol=1e-12)
    peak = noam_rate(w, d, w, f)
    assert math.isclose(to_end_rate(w, 0.0, d, w, f), peak)
    # after the warm-up the rate depends on the budget spent, not on the step
    assert to_end_rate(5000, 0.0, d, w, f) == pytest.approx(peak)
    assert peak > noam_rate(5000, d, w, f)


@pytest.mark.parametrize("spent", [0.0, 0.25, 0.5, 0.9, 1.0])
def test_after_the_warm_up_it_falls_in_a_straight_line_to_zero(spent):
    peak = to_end_rate(1000, 0.0, 256, 300)
    assert to_end_rate(1000, spent, 256, 300) == pytest.approx(peak * (1 - spent), abs=1e-15)


def test_a_budget_spent_beyond_its_ends_is_clipped():
    assert to_end_rate(400, 1.7, 256, 300) == 0.0
    assert to_end_rate(400, -0.5, 256, 300) == to_end_rate(400, 0.0, 256, 300)
    with pytest.raises(ValueError, match="d_model and warmup must be positive"):
        to_end_rate(1, 0.0, 256, 0)


def test_the_scheduler_asks_the_budget_at_every_update():
    weight = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    spent = [0.0]
    scheduler = to_end_scheduler(optimizer, d_model=64, warmup=2, factor=1.0, spent=lambda: spent[0])
    rates = []
    for now in (0.0, 0.0, 0.5, 0.75, 1.0):
        spent[0] = now
        optimizer.step()
        scheduler.step()
        rates.append(optimizer.param_groups[0]["lr"])
    peak = (64 * 2) ** -0.5
    assert rates == pytest.approx([peak, peak, peak / 2, peak / 4, 0.0])


def test_a_budget_is_the_larger_of_time_and_updates():
    budget = Budget(max_minutes=10.0, total_steps=1000)
    budget.update(TrainState(step=100, train_time_s=300.0))  # a tenth of the updates, half the time
    assert budget.spent == pytest.approx(0.5)
    budget.update(TrainState(step=900, train_time_s=60.0))  # a fast machine: the epochs end first
    assert budget.spent == pytest.approx(0.9)
    budget.update(TrainState(step=2000, train_time_s=9999.0))
    assert budget.spent == 1.0
    untimed = Budget(max_minutes=None, total_steps=40)
    untimed.update(TrainState(step=10, train_time_s=1e6))
    assert untimed.spent == pytest.approx(0.25)


def test_a_run_without_a_time_limit_ends_its_epochs_at_a_rate_near_zero(tmp_path, corpus):
    config = TOY_CONFIG.replace(schedule="to_end", epochs=3, warmup=5, eval_every=3)
    result = train(config, corpus, out_dir=tmp_path, device="cpu", progress=False, evaluate_test=False)
    steps, peak = result["step"], to_end_rate(5, 0.0, 32, 5, config.lr_factor)
    # the history's rate is the next update's, set after the last update from the budget spent before it
    assert result["history"][-1]["lr"] == pytest.approx(
        to_end_rate(steps + 1, (steps - 1) / steps, 32, 5, config.lr_factor)
    )
    assert 0 < result["history"][-1]["lr"] <= peak / steps + 1e-12
    paper = train(
        config.replace(schedule="noam"),
        corpus,
        out_dir=tmp_path / "noam",
        device="cpu",
        progress=False,
        evaluate_test=False,
    )
    assert paper["history"][-1]["lr"] > 0.1 * to_end_rate(5, 0.0, 32, 5, config.lr_factor), (
        "the paper's curve never ends"
    )


def test_a_time_limit_ends_the_schedule_and_its_part_epoch_is_evaluated(tmp_path, corpus, monkeypatch, capsys):
    StepClock(monkeypatch)  # one second per update
    config = TOY_CONFIG.replace(schedule="to_end", epochs=30, warmup=3, eval_every=100)
    steps_per_epoch = len(corpus.batcher("train", config.max_tokens, max_len=config.model.max_len))
    cap_s = steps_per_epoch + 4  # four updates into the second epoch
    result = train(config, corpus, out_dir=tmp_path, device="cpu", progress=False, log=True, max_minutes=cap_s / 60)
    assert result["stopped"] == "time_limit" and result["step"] == cap_s
    first, last = result["history"]
    assert "partial" not in first and last["partial"] == round(4 / steps_per_epoch, 3)
    assert last["val_bleu"] is not None and first["val_bleu"] is None  # BLEU only at the end (eval_every=100)
    # annealed: the rate after the last update is a cap_s-th of the peak (the budget one update before its end)
    assert last["lr"] == pytest.approx(to_end_rate(cap_s + 1, (cap_s - 1) / cap_s, 32, 3, config.lr_factor))
    assert result["best_epoch"] == 2  # best.pt holds the annealed weights
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["epochs"] == round(1 + 4 / steps_per_epoch, 3) and metrics["epochs_completed"] == 1
    assert metrics["tested"] == "best.pt" and metrics["train_time_s"] == cap_s
    assert "the schedule ended with it" in capsys.readouterr().out

    # given more time, the run goes on from the next epoch with the budget it has left
    more = train(
        config,
        corpus,
        out_dir=tmp_path,
        device="cpu",
        progress=False,
        max_minutes=(cap_s + 5) / 60,
        evaluate_test=False,
    )
    total = cap_s + 5
    assert more["step"] == total
    assert more["history"][-1]["lr"] == pytest.approx(
        to_end_rate(total + 1, (total - 1) / total, 32, 3, config.lr_factor)
    )


@pytest.mark.parametrize(
    "cpuinfo, expected",
    [
        ("flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_tile\n", True),
        ("flags\t\t: fpu sse2 avx2 amx_bf16\n", True),
        ("Features\t: fp asimd bf16 i8mm\n", True),  # an Arm server
        ("flags\t\t: fpu sse2 avx2 avx512f avx512bw\n", False),  # AVX-512 but no bfloat16 arithmetic
        ("", False),
    ],
)
def test_native_bfloat16_is_read_from_the_cpus_flags(cpuinfo, expected):
    assert hardware.cpu_has_native_bfloat16(cpuinfo, system="Linux") is expected


@pytest.mark.parametrize("system", ["Darwin", "Windows"])
def test_native_bfloat16_is_float32_off_linux(system):
    assert hardware.cpu_has_native_bfloat16("flags\t\t: avx512_bf16 amx_bf16\n", system=system) is False


@pytest.mark.parametrize("native, expected", [(True, torch.bfloat16), (False, None)])
def test_native_precision_is_bfloat16_only_where_the_cpu_computes_it(monkeypatch, native, expected):
    monkeypatch.setattr(hardware, "cpu_has_native_bfloat16", lambda *a, **k: native)
    assert hardware.autocast_for(torch.device("cpu"), "native")[0] is expected
    assert hardware.autocast_for(torch.device("cpu"), "auto")[0] is None  # auto stays float32 on every CPU


def test_the_laptop_preset_is_what_its_comment_says():
    laptop, cpu = TRAIN_PRESETS["laptop"], TRAIN_PRESETS["cpu"]
    assert laptop.schedule == "to_end" and laptop.max_minutes == 10.0 and laptop.precision == "native"
    # the cpu preset's data, so the course's cache serves both
    assert (laptop.bpe_merges, laptop.min_freq, laptop.limit, laptop.drop_longer_than) == (
        cpu.bpe_merges,
        cpu.min_freq,
        cpu.limit,
        cpu.drop_longer_than,
    )
    assert laptop.model.n_layers == 2 and laptop.model.dropout == 0.0 and laptop.average_last == 1
    assert TrainConfig.from_dict(laptop.to_dict()) == laptop


def test_train_laptop_runs_end_to_end_from_the_command_line(tmp_path, monkeypatch, capsys):
    corpus_file = tmp_path / "toy.json.gz"
    corpus = toy_corpus()
    # the laptop preset's data settings, so that train takes the toy corpus without a warning
    corpus.info.update(min_freq=2, drop_longer_than=None, limit=None, bpe_merges=4000)
    corpus.save(corpus_file)
    StepClock(monkeypatch)
    main(
        [
            "train",
            "--preset",
            "laptop",
            "--corpus",
            str(corpus_file),
            "--out",
            str(tmp_path / "run"),
            "--max-minutes",
            str(7 / 60),
            "--device",
            "cpu",
            "--quiet",
            "--bleu-val-limit",
            "5",
            "--beam",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert re.search(
        r"time limit: 0\.1 min of training \(max_minutes=0\.11666\d+\) used up in epoch \d+ \(\d+% of it\), step 7; "
        "the schedule ended with it",
        out,
    ), out
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["preset"] == "laptop" and metrics["steps"] == 7 and metrics["train_config"]["schedule"] == "to_end"


def test_the_progress_bar_shows_the_minutes_left_and_the_last_validation_bleu():
    from types import SimpleNamespace

    from transformer_lessons.progress_bar import bar_extras

    run = SimpleNamespace(config=TRAIN_PRESETS["laptop"])
    state = TrainState(train_time_s=150.0, history=[{"val_bleu": None}, {"val_bleu": 32.09}, {"val_bleu": None}])
    assert bar_extras(run, state) == {"val_BLEU": "32.1", "left": "7.5 min"}
    assert bar_extras(SimpleNamespace(config=TRAIN_PRESETS["quick"]), TrainState()) == {}  # no limit, no BLEU yet


# --- noam_no_ramp: the control of notebook 14's warm-up runs ----------------------------------------------------------


def test_without_the_ramp_the_peak_comes_first_and_the_decay_is_the_papers():
    """No warm-up at the same peak: the peak from update 1 to `warmup`, then Eq. 3 exactly. (warmup=1, the lab's
    'no warm-up', starts at sqrt(warmup) times that peak instead: two changes at once.)"""
    d, w, f = 128, 400, 0.3
    peak = noam_rate(w, d, w, f)
    for step in (1, 2, 100, 399, 400):
        assert noam_rate(step, d, w, f, ramp=False) == pytest.approx(peak, rel=1e-12)
    for step in (401, 1000, 5000):
        assert noam_rate(step, d, w, f, ramp=False) == noam_rate(step, d, w, f)
    assert noam_rate(1, d, w, f) == pytest.approx(peak / w)  # the ramp's first update
    assert noam_rate(1, d, 1, f) == pytest.approx(peak * math.sqrt(w))  # warmup=1: 20x the peak at first


def test_a_run_with_the_noam_no_ramp_schedule_starts_at_its_peak(tmp_path, corpus):
    config = TOY_CONFIG.replace(schedule="noam_no_ramp", epochs=1, warmup=50)
    result = train(config, corpus, out_dir=tmp_path, device="cpu", progress=False, evaluate_test=False)
    steps = result["step"]
    assert steps < 50 and result["history"][-1]["lr"] == pytest.approx(noam_rate(50, 32, 50, config.lr_factor))
