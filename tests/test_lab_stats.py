"""The lab's statistics (transformer_lessons/lab_stats.py): the t distribution written out, and tests that fit the runs.

The t distribution is checked against closed forms (1 and 2 degrees of freedom) and printed tables; the two tests
against formulas worked by hand; the comparisons against the committed lab (results/since_2017/, shipped as
transformer_lessons/data/lab_since_2017.json).
"""

from __future__ import annotations

import math
import statistics

import pytest

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
