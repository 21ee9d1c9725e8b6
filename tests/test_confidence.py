"""The translator's confidence: per-token probabilities, the sentence signal, AUROC, and the sentences that are not captions."""

from __future__ import annotations

import math

import pytest
import torch

from transformer_lessons import data
from transformer_lessons.confidence import assess, auroc, token_log_probs
from transformer_lessons.data.not_captions import NOT_CAPTIONS, not_captions
from transformer_lessons.decode import sequence_log_prob
from transformer_lessons.model import Transformer

from test_train import TOY_MODEL, toy_corpus


@pytest.fixture(scope="module")
def toy():
    corpus = toy_corpus()
    torch.manual_seed(0)
    return Transformer(TOY_MODEL, len(corpus.src_vocab), len(corpus.tgt_vocab)).eval(), corpus


def test_token_log_probs_sum_to_the_sequence_log_prob(toy):
    model, corpus = toy
    src_ids = [5, 6, 7, corpus.src_vocab.eos_id]
    out = [8, 9, corpus.tgt_vocab.eos_id]
    per_token = token_log_probs(model, src_ids, out, corpus.tgt_vocab.bos_id)
    assert per_token.shape == (3,) and bool((per_token <= 0).all())
    total, length = sequence_log_prob(
        model, torch.tensor([src_ids]), None, torch.tensor([[corpus.tgt_vocab.bos_id, *out]]), corpus.tgt_vocab.eos_id
    )
    assert length.item() == 3 and per_token.sum().item() == pytest.approx(total.item(), abs=1e-5)
    assert token_log_probs(model, src_ids, [], corpus.tgt_vocab.bos_id).numel() == 0


def test_assess_gives_each_token_its_probability_and_flags_by_the_threshold(toy):
    model, corpus = toy
    sentences = [" ".join(corpus.text["train"][0][0].split()[:4]), "", corpus.text["train"][1][0]]
    kw = dict(src_vocab=corpus.src_vocab, tgt_vocab=corpus.tgt_vocab, beam_size=2)
    results = assess(model, sentences, **kw)
    assert len(results) == 3 and results[1].translation == "" and results[1].tokens == [] and not results[1].unusual
    for r in (results[0], results[2]):
        assert len(r.tokens) == len(r.probs) > 0 and all(0 < p <= 1 for p in r.probs)
        assert r.mean_log_prob == pytest.approx(sum(math.log(p) for p in r.probs) / len(r.probs), abs=1e-5)
    assert [r.unusual for r in assess(model, sentences, threshold=math.inf, **kw)] == [True, False, True]
    assert not any(r.unusual for r in assess(model, sentences, threshold=-math.inf, **kw))


def test_auroc_is_the_share_of_pairs_in_order():
    assert auroc([2.0, 3.0], [1.0]) == 1.0 and auroc([1.0], [2.0, 3.0]) == 0.0
    assert auroc([1.0, 3.0], [2.0]) == 0.5 and auroc([1.0], [1.0]) == 0.5
    with pytest.raises(ValueError, match="both groups"):
        auroc([], [1.0])


def test_the_sentences_that_are_not_captions_are_many_kinds_and_in_no_split():
    sentences = not_captions()
    assert len(sentences) >= 50 and len(set(sentences)) == len(sentences)
    assert {"questions", "instructions", "news", "English"} <= set(NOT_CAPTIONS) and all(NOT_CAPTIONS.values())
    multi30k = {
        de.strip()
        for split in ("train", "val", "test_2016_flickr", "test_2017_flickr", "test_2018_flickr", "test_2017_mscoco")
        for de, _ in data.load_split(split, progress=False)
    }
    assert not multi30k & set(sentences), "a sentence is a Multi30k caption: write another"


def test_the_threshold_is_the_committed_measurement_of_the_course_model():
    """UNUSUAL_BELOW is results/confidence/'s 5th percentile, measured on the course's model, not a typed guess."""
    import json
    from pathlib import Path

    from transformer_lessons import pretrained
    from transformer_lessons.confidence import UNUSUAL_BELOW

    record = json.loads((Path(__file__).resolve().parents[1] / "results/confidence/results.json").read_text("utf-8"))
    assert record["checkpoint"] == pretrained.COURSE_MODEL_PATH, "measure the course's model again"
    assert UNUSUAL_BELOW == round(record["threshold"], 3)


def test_spearman_is_the_correlation_of_the_ranks():
    from transformer_lessons.confidence import spearman

    assert spearman([1.0, 2.0, 3.0], [10.0, 20.0, 40.0]) == pytest.approx(1.0)  # any rising relation: 1
    assert spearman([1.0, 2.0, 3.0], [5.0, 4.0, -9.0]) == pytest.approx(-1.0)
    # ties share the mean of their ranks: x ranks (1.5, 1.5, 3, 4), y (1, 2.5, 2.5, 4); SciPy's spearmanr gives 5/6
    assert spearman([1, 1, 2, 3], [1, 2, 2, 3]) == pytest.approx(5 / 6)
    x = [0.3, -1.2, 0.8, 2.0, -0.1, 0.5]
    assert spearman(x, [v**3 for v in x]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="same length"):
        spearman([1.0, 2.0], [1.0])
