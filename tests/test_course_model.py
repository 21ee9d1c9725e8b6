"""The course's committed translator (pretrained.COURSE_MODEL_PATH's folder): its record is true and the model works on any machine.

- the committed hypotheses re-score, with sacreBLEU, to the BLEU recorded in metrics.json;
- the model file is the one the package trusts (its SHA-256 in pretrained.py, beside it, and of its bytes),
  small enough to commit, and loads with ``torch.load(weights_only=True)``;
- it translates sentences that are in no Multi30k split adequately: the content words come out.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sacrebleu
import torch

from transformer_lessons import data, pretrained
from transformer_lessons.data import sha256_file
from transformer_lessons.translation import translate

MODEL = Path(__file__).resolve().parent.parent / pretrained.COURSE_MODEL_PATH
RUN = MODEL.parent  # the run's record: results/<run>/
MAX_BYTES = 16 * 1024 * 1024

# Sentences written for this test, in the captions' world but in no Multi30k split (asserted below), and
# the words an adequate translation must contain (any one of each group).
NEW_SENTENCES = {
    "Ein alter Mann fährt mit seinem Fahrrad durch die Stadt.": [("man",), ("bike", "bicycle")],
    "Zwei kleine Hunde spielen im Schnee.": [("two",), ("dogs",), ("snow",)],
    "Eine Frau mit einer roten Jacke liest ein Buch.": [("woman",), ("red",), ("book",)],
    "Drei Kinder springen in einen See.": [("three",), ("children", "kids"), ("lake",)],
    "Ein Mädchen isst eine Banane auf einer Bank.": [("girl",), ("banana",), ("bench",)],
}


@pytest.fixture(scope="module")
def metrics() -> dict:
    return json.loads((RUN / "metrics.json").read_text(encoding="utf-8"))


def test_the_record_is_complete():
    for name in (
        "command.txt",
        "train.log",
        "metrics.json",
        "history.json",
        "test_hypotheses.txt",
        "model_fp16.pt",
        "model_fp16.pt.sha256",
    ):
        assert (RUN / name).is_file(), f"{RUN}/{name} is missing"
    command = (RUN / "command.txt").read_text(encoding="utf-8")
    assert "--preset cpu" in command and "commit " in command


def test_committed_hypotheses_rescore_to_the_recorded_bleu(metrics):
    test = metrics["test_2016_flickr"]
    hypotheses = (
        (RUN / "test_hypotheses.txt").read_text(encoding="utf-8").split("\n")[:-1]
    )  # one per line, final newline
    references = [en for _, en in data.load_split("test_2016_flickr", progress=False)]
    assert len(hypotheses) == len(references) == test["n"]
    metric = sacrebleu.BLEU()  # the defaults: cased, 13a tokenizer, exp smoothing
    assert metric.corpus_score(hypotheses, [references]).score == pytest.approx(test["bleu"], abs=1e-9)
    assert str(metric.get_signature()) == test["signature"]
    assert metrics["device"].startswith("cpu") and metrics["train_config"]["name"] == "cpu"


def test_the_model_file_is_the_trusted_one_and_small():
    size = MODEL.stat().st_size
    assert size <= MAX_BYTES, f"{MODEL.name} is {size:,} bytes, more than the 16 MiB we commit"
    sidecar = (RUN / "model_fp16.pt.sha256").read_text(encoding="utf-8").split()
    assert sidecar == [pretrained.COURSE_MODEL_SHA256, "model_fp16.pt"]
    assert sha256_file(MODEL) == pretrained.COURSE_MODEL_SHA256
    assert pretrained.repository_copy() == MODEL


def test_the_model_loads_with_weights_only():
    state = torch.load(MODEL, map_location="cpu", weights_only=True)  # no pickled code: safe to open anywhere
    weights = [t for t in state["model"].values() if torch.is_floating_point(t)]
    assert weights and all(t.dtype == torch.float16 for t in weights)


@pytest.fixture(scope="module")
def course():
    return pretrained.load_course_model(device="cpu", progress=False)


def test_the_test_sentences_are_new():
    german = {
        de.strip()
        for split in ("train", "val", "test_2016_flickr", "test_2017_flickr", "test_2018_flickr", "test_2017_mscoco")
        for de, _ in data.load_split(split, progress=False)
    }
    assert not german & set(NEW_SENTENCES), "a test sentence is in Multi30k: write a new one"


def test_the_course_model_translates_new_sentences_adequately(course, metrics):
    assert not course.model.training and course.metrics == metrics and course.history
    outputs = translate(
        course.model, list(NEW_SENTENCES), beam_size=4, src_vocab=course.src_vocab, tgt_vocab=course.tgt_vocab
    )
    for (german, needed), english in zip(NEW_SENTENCES.items(), outputs):
        words = set(english.lower().replace(".", " ").replace(",", " ").split())
        missing = [group for group in needed if not words & set(group)]
        assert not missing, f"{german!r} -> {english!r} lacks {missing}"
