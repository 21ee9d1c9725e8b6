"""The records notebook 15 reads from the package: the same files as results/, whole, and their figures recomputable.

A summary figure in a record (a Spearman, an AUROC, a share flagged, a count of framed heads) is computed here again
from the per-sentence and per-head numbers the same record keeps, so a record cannot quote what its own data does
not give.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from transformer_lessons import records
from transformer_lessons.confidence import auroc, spearman
from transformer_lessons.heads import KINDS

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "shipped, measured",
    [(records.HEADS_FILE, "results/heads/results.json"), (records.CONFIDENCE_FILE, "results/confidence/results.json")],
)
def test_the_package_ships_the_committed_record_unchanged(shipped, measured):
    assert shipped.read_bytes() == (ROOT / measured).read_bytes(), f"copy {measured} to {shipped} (the script does)"


def test_the_heads_record_has_every_head_tested_and_every_curve():
    measured = records.heads_record()
    heads = set(measured.importance.bleu)
    assert len(heads) == 72 and {kind for kind, _, _ in heads} == set(KINDS)
    assert set(measured.p_values) == heads and all(0 < p <= 1 for p in measured.p_values.values())
    below = sum(p < 0.05 for p in measured.p_values.values())
    assert measured.record["paired_bootstrap"]["below_0.05"] == below
    assert measured.pruning.order == measured.importance.ranked()
    assert measured.held_out_pruning.order == measured.pruning.order  # the same order, on other sentences
    for curve in [*measured.random, *measured.held_out_random]:
        assert sorted(curve.order) == sorted(heads) and curve.counts == measured.pruning.counts
    assert len({tuple(curve.order) for curve in measured.random}) == len(measured.random)  # different orders
    assert [c.order for c in measured.random] == [c.order for c in measured.held_out_random]
    # every head on: the same BLEU in the importance and in each curve of its sample
    assert all(c.bleu[0] == pytest.approx(measured.importance.baseline) for c in [measured.pruning, *measured.random])
    held_on = measured.held_out_pruning.bleu[0]
    assert all(c.bleu[0] == pytest.approx(held_on) for c in measured.held_out_random)
    assert held_on != pytest.approx(measured.importance.baseline)  # another sample


def test_the_confidence_record_recomputes_from_its_own_numbers():
    record = records.confidence_record()
    threshold, quality = record["threshold"], record["quality"]
    for split, n in (("test_2016_flickr", 1000), ("test_2017_mscoco", 461)):
        q = quality[split]
        signal = record["signals"]["test"] if split == "test_2016_flickr" else q["signals"]
        chrf = q["chrf"]
        assert q["n"] == n == len(signal) == len(chrf)
        assert q["spearman_signal_chrf"] == pytest.approx(spearman(signal, chrf))
        assert q["flagged"] == pytest.approx(sum(s < threshold for s in signal) / n)
        bad = [s for s, f in zip(signal, chrf) if f < 40]
        good = [s for s, f in zip(signal, chrf) if f >= 40]
        assert q["n_chrf_below_40"] == len(bad)
        assert q["auroc_signal_finds_chrf_below_40"] == pytest.approx(auroc(good, bad))
        flagged = [f for s, f in zip(signal, chrf) if s < threshold]
        assert q["mean_chrf_flagged"] == pytest.approx(sum(flagged) / len(flagged))
    assert quality["test_2016_flickr"]["bleu"] == pytest.approx(44.06, abs=0.005)  # the course's test BLEU
    assert quality["auroc_flickr_vs_mscoco"] == pytest.approx(
        auroc(record["signals"]["test"], quality["test_2017_mscoco"]["signals"])
    )
    assert not any(math.isnan(v) for v in quality["test_2016_flickr"]["chrf"])
