"""The `full` preset's GPU run (results/full/): its record is true, and its model works on a CPU.

- the record holds what results/README.md lists, from the command it names;
- the committed hypotheses re-score, with sacreBLEU, to the BLEU recorded in metrics.json;
- the fp16 export loads with ``torch.load(weights_only=True)`` and is small enough to commit;
- decoded here, on a CPU in float32, it gives the GPU's translations of the first test sentences
  (bf16 autocast there, float32 here: a near-tie between two beams may fall the other way, so a
  few differences are allowed; measured on all 1,000: 999 identical, BLEU 43.03 both ways).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sacrebleu
import torch

from transformer_lessons import data
from transformer_lessons.translation import translate

RUN = Path(__file__).resolve().parent.parent / "results" / "full"
MODEL = RUN / "model_fp16.pt"
MAX_BYTES = 16 * 1024 * 1024
SAMPLE = 40


@pytest.fixture(scope="module")
def metrics() -> dict:
    return json.loads((RUN / "metrics.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def hypotheses() -> list[str]:
    return (RUN / "test_hypotheses.txt").read_text(encoding="utf-8").split("\n")[:-1]  # one per line, final newline


@pytest.fixture(scope="module")
def test_pairs() -> list[tuple[str, str]]:
    return data.load_split("test_2016_flickr", progress=False)


def test_the_record_is_complete(metrics):
    for name in (
        "command.txt",
        "train.log",
        "metrics.json",
        "history.json",
        "test_hypotheses.txt",
        "model_fp16.pt",
        "bench_train.txt",
    ):
        assert (RUN / name).is_file(), f"results/full/{name} is missing"
    command = (RUN / "command.txt").read_text(encoding="utf-8")
    assert "--preset full" in command and "commit: " in command
    assert metrics["train_config"]["name"] == "full" and metrics["device"].startswith("NVIDIA")
    history = json.loads((RUN / "history.json").read_text(encoding="utf-8"))
    assert len(history) == metrics["epochs_completed"]
    assert max(h["val_bleu"] for h in history if h["val_bleu"] is not None) == pytest.approx(metrics["best_val_bleu"])


def test_committed_hypotheses_rescore_to_the_recorded_bleu(metrics, hypotheses, test_pairs):
    test = metrics["test_2016_flickr"]
    references = [en for _, en in test_pairs]
    assert len(hypotheses) == len(references) == test["n"]
    metric = sacrebleu.BLEU()  # the defaults: cased, 13a tokenizer, exp smoothing
    assert metric.corpus_score(hypotheses, [references]).score == pytest.approx(test["bleu"], abs=1e-9)
    assert str(metric.get_signature()) == test["signature"]


def test_the_model_file_is_small_and_loads_with_weights_only():
    assert MODEL.stat().st_size <= MAX_BYTES, f"{MODEL.name} is more than the 16 MiB we commit"
    state = torch.load(MODEL, map_location="cpu", weights_only=True)  # no pickled code: safe to open anywhere
    weights = [t for t in state["model"].values() if torch.is_floating_point(t)]
    assert weights and all(t.dtype == torch.float16 for t in weights)


def test_on_a_cpu_it_translates_as_it_did_on_the_gpu(metrics, hypotheses, test_pairs):
    german = [de for de, _ in test_pairs[:SAMPLE]]
    outputs = translate(
        str(MODEL),
        german,
        beam_size=metrics["test_2016_flickr"]["beam_size"],
        length_penalty=metrics["test_2016_flickr"]["length_penalty"],
        device="cpu",
    )
    same = sum(a == b for a, b in zip(outputs, hypotheses[:SAMPLE]))
    assert same >= SAMPLE - 2, f"only {same} of {SAMPLE} translations match the GPU run's"
