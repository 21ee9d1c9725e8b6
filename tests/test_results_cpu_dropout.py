"""The course's translator (results/cpu_dropout/): the record is true and beats the bar of issue 31.

- its folder holds the command, log, history, metrics, test translations, model and paired test;
- the committed hypotheses re-score, with sacreBLEU, to the BLEU metrics.json records (>= 43.0: issue 31's bar);
- the run is the cpu preset with dropout 0.2 and the to_end schedule, 90 minutes of training on 2 CPU threads, the
  mean of its last 5 epochs tested, as command.txt says;
- the paired test re-computes from the two committed hypothesis files;
- the committed fp16 model loads with weights_only, has the recorded checksum and translates as the run did;
- what results/README.md quotes comes from these files.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import sacrebleu

from transformer_lessons import data
from transformer_lessons.config import TRAIN_PRESETS

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "results" / "cpu_dropout"
OLD = ROOT / "results" / "cpu_rotary"
SAMPLE = 30


def read(name: str, run: Path = RUN):
    text = (run / name).read_text(encoding="utf-8")
    return json.loads(text) if name.endswith(".json") else text


@pytest.fixture(scope="module")
def references() -> list[str]:
    return [en for _, en in data.load_split("test_2016_flickr", progress=False)]


def test_the_record_is_whole():
    for name in (
        "command.txt",
        "train.log",
        "metrics.json",
        "history.json",
        "test_hypotheses.txt",
        "model_fp16.pt",
        "model_fp16.pt.sha256",
        "other_tests.json",
        "paired_test.json",
        "paired_test_full.json",
    ):
        assert (RUN / name).is_file(), f"results/cpu_dropout/{name} is missing"
    command = read("command.txt")
    assert "train --preset cpu --dropout 0.2 --schedule to_end --precision bfloat16 --average-last 5" in command
    assert "commit 6c942e5" in command


def test_the_run_is_the_recipe_it_says():
    metrics = read("metrics.json")
    config = TRAIN_PRESETS["cpu"]
    # the cpu preset is this run now: `train --preset cpu` on a CPU with bfloat16 instructions ("native")
    assert config.precision == "native"
    expected = config.replace(precision="bfloat16").to_dict()
    expected["betas"] = list(expected["betas"])
    assert metrics["train_config"] == expected
    assert (config.model.dropout, config.schedule, config.average_last, config.epochs) == (0.2, "to_end", 5, 100)
    assert metrics["stopped"] == "time_limit" and 5400.0 <= metrics["train_time_s"] <= 5400.0 + 5.0
    assert (
        metrics["device"].startswith("cpu") and "2 threads" in metrics["device"] and metrics["autocast"] == "bfloat16"
    )
    assert metrics["tested"] == "averaged.pt" and metrics["averaged"]["epochs"] == [34, 35, 36, 37, 38]
    history = read("history.json")
    assert history[-1]["lr"] < 0.7 * (256 * 800) ** -0.5 / 1000  # the to_end rate had reached ~0 at the limit
    assert min(history, key=lambda h: h["val_loss"])["epoch"] == 36


def test_committed_hypotheses_rescore_to_the_recorded_bleu_above_the_bar(references):
    test = read("metrics.json")["test_2016_flickr"]
    hypotheses = read("test_hypotheses.txt").split("\n")[:-1]
    assert len(hypotheses) == len(references) == test["n"] == 1000
    metric = sacrebleu.BLEU()
    assert metric.corpus_score(hypotheses, [references]).score == pytest.approx(test["bleu"], abs=1e-9)
    assert str(metric.get_signature()) == test["signature"] and test["beam_size"] == 4
    assert test["bleu"] >= 43.0, "issue 31: the course's model at >= 43.0 in 90 minutes on 2 cores"
    assert test["bleu"] > read("metrics.json", OLD)["test_2016_flickr"]["bleu"]


def test_the_paired_test_recomputes_from_the_two_hypothesis_files(references):
    import importlib.util

    spec = importlib.util.spec_from_file_location("paired_test", ROOT / "scripts" / "paired_test.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    recorded = read("paired_test.json")
    old = read("test_hypotheses.txt", OLD).split("\n")[:-1]
    new = read("test_hypotheses.txt").split("\n")[:-1]
    again = module.paired_test(old, new, references, trials=1000)
    assert again["baseline_bleu"] == pytest.approx(recorded["baseline_bleu"], abs=1e-9)
    # the previous course model's committed translations re-score to its recorded BLEU
    assert again["baseline_bleu"] == pytest.approx(read("metrics.json", OLD)["test_2016_flickr"]["bleu"], abs=1e-9)
    assert again["system_bleu"] == pytest.approx(recorded["system_bleu"], abs=1e-9)
    assert recorded["p_value"] <= 1e-4 + 1e-12 and again["p_value"] <= 1 / 1001 + 1e-12
    # against the full preset's GPU model: the record recomputes, and its p-value is near what 1,000 trials give
    full = read("paired_test_full.json")
    versus_full = module.paired_test(
        read("test_hypotheses.txt", ROOT / "results" / "full").split("\n")[:-1], new, references, trials=1000
    )
    assert versus_full["baseline_bleu"] == pytest.approx(full["baseline_bleu"], abs=1e-9)
    assert versus_full["difference"] == pytest.approx(full["difference"], abs=1e-9)
    assert abs(versus_full["p_value"] - full["p_value"]) < 0.03 and full["p_value"] < 0.05


def test_the_model_file_is_the_recorded_one_and_translates_as_the_run_did(references):
    import torch

    from transformer_lessons.checkpoint import load_checkpoint
    from transformer_lessons.translation import translate

    digest = hashlib.sha256((RUN / "model_fp16.pt").read_bytes()).hexdigest()
    assert read("model_fp16.pt.sha256").split()[0] == digest
    model, src_vocab, tgt_vocab, _ = load_checkpoint(RUN / "model_fp16.pt", device="cpu")
    german = [de for de, _ in data.load_split("test_2016_flickr", progress=False)][:SAMPLE]
    with torch.no_grad():
        ours = translate(model, german, src_vocab=src_vocab, tgt_vocab=tgt_vocab, beam_size=4)
    recorded = read("test_hypotheses.txt").split("\n")[:SAMPLE]
    same = sum(a == b for a, b in zip(ours, recorded))
    assert same >= SAMPLE - 2, f"{same} of {SAMPLE} translations as recorded (fp16 weights may change a rare one)"


def test_the_readme_quotes_the_record():
    text = (ROOT / "results" / "README.md").read_text(encoding="utf-8")
    metrics, paired, other = read("metrics.json"), read("paired_test.json"), read("other_tests.json")
    assert (
        f"**{metrics['test_2016_flickr']['bleu']:.2f}** (the fp16 file: {other['scores']['test_2016_flickr']['bleu']:.2f})"
        in text
    )
    assert f"+{paired['difference']:.2f} BLEU with p ≤ 0.0001" in text
    for split, scores in other["scores"].items():
        assert re.search(rf"\| {split} \| [\d,]+ \| \*\*{scores['bleu']:.2f}\*\* \|", text), split
    averaged = metrics["averaged"]
    assert f"| {averaged['val_loss']:.3f}, {averaged['val_bleu']:.2f} |" in text


def test_the_repository_readme_row_quotes_the_record():
    metrics = read("metrics.json")
    row = next(
        line
        for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("|") and "results/cpu_dropout/" in line
    )
    test = metrics["test_2016_flickr"]
    assert (
        f"{metrics['steps']:,} updates, {metrics['epochs']:.1f} epochs" in row and f"{metrics['parameters']:,}" in row
    )
    assert f"**{test['bleu']:.2f}**" in row and f"| {test['tutorial_bleu']:.2f} |" in row
