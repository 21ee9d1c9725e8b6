"""scripts/compare_bpe.py, the words-vs-subwords experiment, on a toy scale (its real runs take ~25 minutes)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from test_train import TOY_CONFIG, toy_corpus

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "compare_bpe.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("compare_bpe", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_run_is_recorded_with_its_vocabulary_and_scores(tmp_path, monkeypatch, capsys):
    compare = _load_script()
    # The script's own scales, shrunk: the toy model for one epoch, on toy pairs with and without subwords.
    monkeypatch.setattr(compare, "SCALES", {"toy": (TOY_CONFIG.replace(epochs=1), (None, 30))})
    monkeypatch.setattr(
        compare, "prepare_corpus_for", lambda config, progress=True: toy_corpus(bpe_merges=config.bpe_merges)
    )

    assert compare.main(["--out", str(tmp_path / "out"), "--runs", str(tmp_path / "runs"), "--scales", "toy"]) == 0

    record = json.loads((tmp_path / "out" / "results.json").read_text())
    runs = record["runs"]
    assert [r["bpe_merges"] for r in runs] == [None, 30]
    words, pieces = runs
    assert pieces["train_config"]["bpe_merges"] == 30 and words["train_config"]["bpe_merges"] is None
    assert pieces["src_vocab"] != words["src_vocab"], "the subword run must train on another vocabulary"
    for r in runs:
        assert 0.0 <= r["bleu"] <= 100.0 and r["signature"].startswith("nrefs:1|case:mixed")
        assert r["steps"] > 0 and r["train_time_s"] > 0
    assert (tmp_path / "runs" / "toy_30" / "best.pt").is_file() and (
        tmp_path / "runs" / "toy_words" / "metrics.json"
    ).is_file()
    table = capsys.readouterr().out.splitlines()[-2:]
    assert table[0].split()[:2] == ["toy", "words"] and table[1].split()[:2] == ["toy", "30"]
