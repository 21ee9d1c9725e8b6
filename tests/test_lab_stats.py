"""The lab's statistics (transformer_lessons/lab_stats.py): the t distribution written out, and tests that fit the runs.

The t distribution is checked against closed forms (1 and 2 degrees of freedom) and printed tables; the two tests
against formulas worked by hand; the comparisons against the committed lab (results/since_2017/, shipped as
transformer_lessons/data/lab_since_2017.json).
"""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
from pathlib import Path

import pytest
import sacrebleu

from transformer_lessons import data

from transformer_lessons import lab_stats
from transformer_lessons.viz import lab_record


@pytest.mark.parametrize("t", [0.0, 0.3, 1.0, 2.81, 4.3, 12.7, 40.0])
def test_the_p_value_is_students_t_where_it_has_a_closed_form(t):
    assert lab_stats.t_p_value(t, 1) == pytest.approx(1 - 2 / math.pi * math.atan(t), abs=1e-12)
    assert lab_stats.t_p_value(t, 2) == pytest.approx(1 - t / math.sqrt(t * t + 2), abs=1e-12)
    assert lab_stats.t_p_value(-t, 2) == lab_stats.t_p_value(t, 2)


@pytest.mark.parametrize("df, table", [(1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (30, 2.042), (1000, 1.962)])
def test_the_critical_values_are_the_tables(df, table):
    assert lab_stats.t_critical(df) == pytest.approx(table, abs=5e-4)


def test_one_run_against_a_few_is_a_t_test_with_their_own_noise():
    """The review's numbers: rotary's one run (34.63) against the three baseline seeds gives t = 2.81, p = 0.11."""
    seeds, rotary = [32.07, 31.15, 29.86], 34.63
    d = lab_stats.difference(seeds, [rotary])
    s = statistics.stdev(seeds)
    assert d.df == 2 and d.n == (3, 1)
    assert d.t == pytest.approx((rotary - statistics.fmean(seeds)) / (s * math.sqrt(1 + 1 / 3)))
    assert d.t == pytest.approx(2.81, abs=0.005) and d.p == pytest.approx(0.107, abs=0.001)
    assert d.low < 0 < d.high, "with 2 degrees of freedom, +3.6 is not outside the noise"
    z = (rotary - statistics.fmean(seeds)) / s  # the old reading: "more than three standard deviations"
    assert z > 3 and d.p > 0.05


def test_runs_against_runs_pool_their_variances():
    a, b = [1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]
    d = lab_stats.difference(a, b)
    pooled = (2 * statistics.variance(a) + 3 * statistics.variance(b)) / 5
    assert d.df == 5 and d.difference == pytest.approx(3.5)
    assert d.t == pytest.approx(3.5 / math.sqrt(pooled * (1 / 3 + 1 / 4)))
    assert d.high - d.difference == pytest.approx(lab_stats.t_critical(5) * 3.5 / d.t)
    with pytest.raises(ValueError, match="two runs or more"):
        lab_stats.difference([1.0], [2.0])


def test_welch_is_the_pooled_test_when_both_sides_vary_alike():
    a, b = [1.0, 2.0, 3.0], [4.0, 5.0, 6.0]  # same size, same variance: Welch-Satterthwaite gives n_a + n_b - 2
    w, pooled = lab_stats.welch(a, b), lab_stats.difference(a, b)
    assert w.df == pytest.approx(4.0) and w.t == pytest.approx(pooled.t) and w.p == pytest.approx(pooled.p)
    assert (w.low, w.high) == (pytest.approx(pooled.low), pytest.approx(pooled.high))


def test_welch_falls_to_the_noisy_sides_degrees_of_freedom():
    """A side without spread leaves only the other's noise: df = n - 1 of that side, where t has a closed form."""
    w = lab_stats.welch([0.0, 2.0], [5.0, 5.0, 5.0])  # s_a^2 / n_a = 1, s_b = 0: se 1, df 1, t = 4
    assert w.df == pytest.approx(1.0) and w.t == pytest.approx(4.0)
    assert w.p == pytest.approx(1 - 2 / math.pi * math.atan(4.0), abs=1e-12)
    w = lab_stats.welch([5.0, 5.0], [0.0, 3.0, 6.0])  # s_b^2 / n_b = 3, df 2: p = 1 - t / sqrt(t^2 + 2)
    t = -2.0 / math.sqrt(3.0)
    assert w.df == pytest.approx(2.0) and w.t == pytest.approx(t)
    assert w.p == pytest.approx(1 - abs(t) / math.sqrt(t * t + 2), abs=1e-12)
    with pytest.raises(ValueError, match="two runs or more on each side"):
        lab_stats.welch([1.0, 2.0], [3.0])


# Computed once with SciPy 1.17.1 outside the repository (the course does not depend on it):
# scipy.stats.ttest_ind(b, a, equal_var=False), its .df and .confidence_interval(0.95).
SCIPY_WELCH = [
    (
        [1.0, 2.0, 3.0, 5.0],
        [4.0, 9.0, 6.0],
        2.1262131586668396,
        3.3534671130445237,
        0.11388175404594231,
        -1.4740278913410831,
        8.640694558007748,
    ),
    (  # rotary's validation loss after 1,250 updates against the baseline's, three seeds each
        [3.1796007104412376, 3.1882328756970706, 3.184283716037834],
        [3.002611213949627, 3.0353142426767517, 3.0347128345388517],
        -14.416250884351124,
        2.2127684150870373,
        0.0031280751053448267,
        -0.20339113209930765,
        -0.11626154190796684,
    ),
]


@pytest.mark.parametrize("a, b, t, df, p, low, high", SCIPY_WELCH)
def test_welch_agrees_with_scipy(a, b, t, df, p, low, high):
    w = lab_stats.welch(a, b)
    assert (w.t, w.df, w.p) == (pytest.approx(t, rel=1e-9), pytest.approx(df, rel=1e-9), pytest.approx(p, rel=1e-6))
    assert (w.low, w.high) == (pytest.approx(low, rel=1e-6), pytest.approx(high, rel=1e-6))


def test_names_and_steps():
    assert [lab_stats.option_of(n) for n in ("rotary_s1", "baseline_s0", "pre-norm", "gqa-2")] == [
        "rotary",
        "baseline",
        "pre-norm",
        "gqa-2",
    ]
    runs = [{"history": [{"step": s} for s in steps]} for steps in ((250, 500, 750), (250, 500))]
    assert lab_stats.common_step(runs) == 500
    assert lab_stats.val_loss_at({"history": [{"step": 500, "val_loss": 3.5}]}, 500) == 3.5
    with pytest.raises(ValueError, match="no evaluation step"):
        lab_stats.common_step([{"history": [{"step": 1}]}, {"history": [{"step": 2}]}])


def test_the_committed_lab_pools_each_options_seeds_against_the_baselines():
    compared = lab_stats.compare_options(lab_record()["cpu"])
    assert compared["rotary"]["test BLEU"].n == (3, 3) and compared["bf16"]["val loss"].n == (3, 3)
    assert compared["mqa"]["test BLEU"].n == (3, 1) and compared["mqa"]["test BLEU"].df == 2
    assert compared["average-2"]["val loss"] is None, "averaging acts after training: its loss during it is s0's"
    # what notebook 14 says of them
    assert compared["rotary"]["test BLEU"].low > 0 and compared["rotary"]["val loss"].high < 0
    assert compared["bf16"]["test BLEU"].low < 0 < compared["bf16"]["test BLEU"].high
    assert compared["mqa"]["val loss"].low > 0 and compared["gqa-2"]["val loss"].low > 0
    welch = lab_stats.compare_options(lab_record()["cpu"], test=lab_stats.welch, runs_at_least=2)
    assert set(welch) == {"rotary", "bf16"}, "Welch's t needs two runs or more a side"
    rotary, pooled = welch["rotary"]["val loss"], compared["rotary"]["val loss"]
    assert rotary.t == pytest.approx(pooled.t) and rotary.df < pooled.df and rotary.p > pooled.p
    assert rotary.high < 0 and rotary.p < 0.01, "rotary's lower loss stands without assuming equal spreads"


ROOT = Path(__file__).resolve().parents[1]


def test_the_paired_tests_record_recomputes_from_the_committed_translations():
    """results/since_2017/paired_tests.json (scripts/lab_paired_tests.py): one row per pair, each BLEU the run's own
    recorded test BLEU, re-scored from its committed translations; one pair tested again with 1,000 trials."""
    spec = importlib.util.spec_from_file_location("lab_paired_tests", ROOT / "scripts" / "lab_paired_tests.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    record = json.loads((ROOT / "results/since_2017/paired_tests.json").read_text(encoding="utf-8"))
    assert [(t["baseline"], t["system"]) for t in record["tests"]] == [(b, s) for _, b, s in script.PAIRS]
    references = [en for _, en in data.load_split(script.SPLIT, progress=False)]
    for test in record["tests"]:
        for side in ("baseline", "system"):
            lines = script.read_lines(ROOT / test[side] / "test_hypotheses.txt")
            metrics = json.loads((ROOT / test[side] / "metrics.json").read_text(encoding="utf-8"))
            recorded = metrics["test_2016_flickr"]["bleu"]
            bleu = sacrebleu.corpus_bleu(lines, [references]).score
            assert bleu == pytest.approx(test[f"{side}_bleu"], abs=1e-9) == pytest.approx(recorded, abs=1e-9)
    first = record["tests"][0]
    again = script.paired_test(
        script.read_lines(ROOT / first["baseline"] / "test_hypotheses.txt"),
        script.read_lines(ROOT / first["system"] / "test_hypotheses.txt"),
        references,
        trials=1000,
    )
    assert again["difference"] == pytest.approx(first["difference"], abs=1e-9)
    assert abs(again["p_value"] - first["p_value"]) < 0.02


def test_holm_by_hand():
    """m = 4: sorted p 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> kept rising: 0.06."""
    assert lab_stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert lab_stats.holm([0.5, 0.6]) == [1.0, 1.0]  # never above 1
    assert lab_stats.holm([0.02]) == [0.02] and lab_stats.holm([]) == []


def test_the_paired_test_by_hand():
    """Differences 1, 2, 4: mean 7/3, sd sqrt(7/3), se sqrt(7)/3, so t = sqrt(7) with 2 df, p = 1 - sqrt(7)/3."""
    d = lab_stats.paired([1.0, 2.0, 3.0], [2.0, 4.0, 7.0])
    assert d.difference == pytest.approx(7 / 3) and d.df == 2 and d.t == pytest.approx(math.sqrt(7))
    assert d.p == pytest.approx(1 - math.sqrt(7) / 3, abs=1e-12)
    with pytest.raises(ValueError, match="as many on each side"):
        lab_stats.paired([1.0, 2.0], [3.0])


def test_the_lab_paired_by_seed_and_holm_over_its_15_tests():
    """The reviewer's numbers (scipy): rotary's BLEU by seed t = 3.64, p = 0.068; Holm keeps rotary's and MQA's loss."""
    cpu = lab_record()["cpu"]
    bleu = lab_stats.paired_by_seed(cpu, "rotary", lambda r: r["test_bleu"])
    assert bleu.n == (3, 3) and bleu.t == pytest.approx(3.64, abs=0.005) and bleu.p == pytest.approx(0.068, abs=5e-4)
    loss = lab_stats.paired_by_seed(cpu, "rotary", lambda r: lab_stats.val_loss_at(r, 1250))
    assert loss.p == pytest.approx(0.0029, abs=5e-5)
    tests = {(o, m): d.p for o, ms in lab_stats.compare_options(cpu).items() for m, d in ms.items() if d}
    assert len(tests) == 15
    adjusted = dict(zip(tests, lab_stats.holm(list(tests.values()))))
    assert {k for k, p in adjusted.items() if p < 0.05} == {("rotary", "val loss"), ("mqa", "val loss")}
    assert adjusted[("gqa-2", "val loss")] == pytest.approx(0.093, abs=5e-4)
