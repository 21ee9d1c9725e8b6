"""Error analysis (transformer_lessons.error_analysis, viz/error_analysis.py): per-sentence scores, BLEU by length,
greedy against beam, worst and best, and the charts and browser that show them.

Most tests run a random model over the toy corpus of test_train.py (its sentences are made up, so the scores are
low, but every score must still be sacreBLEU's on the very strings shown); hand-made sentences pin the counting and
ordering rules; one test runs the course's model on the first sentences of test_2016_flickr.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import sacrebleu
import torch

from test_train import TOY_MODEL, toy_corpus
from test_viz import _displayed, _static_copy_shown_and_hidden
from transformer_lessons import viz
from transformer_lessons.error_analysis import (
    QUICK_SAMPLE,
    ErrorAnalysis,
    SentenceScore,
    bleu_by_length,
    greedy_vs_beam,
    ranked,
    sample_for,
    score_sentences,
    sentence_scores,
    worst_and_best,
)
from transformer_lessons.model import Transformer
from transformer_lessons.translation import evaluate, translate

SPLIT = "test_2016_flickr"
DATA_DIR = Path(
    os.environ.get("TRANSFORMER_LESSONS_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def toy():
    """A random model over the toy corpus, and its sentences scored with a beam of 2."""
    corpus = toy_corpus()
    torch.manual_seed(0)
    model = Transformer(TOY_MODEL, len(corpus.src_vocab), len(corpus.tgt_vocab)).eval()
    vocabs = {"src_vocab": corpus.src_vocab, "tgt_vocab": corpus.tgt_vocab}
    analysis = score_sentences(model, SPLIT, limit=30, corpus=corpus, beam_size=2, **vocabs)
    return model, corpus, vocabs, analysis


def made_up(gains_and_scores: list[tuple[float, float, float]]) -> list[SentenceScore]:
    """Sentences with chosen ``(beam chrF, greedy chrF, beam BLEU)``; the outputs say which is which."""
    return [
        SentenceScore(i, f"quelle {i}", f"reference {i}", f"beam {i}", f"greedy {i}", b, g, bleu, 0.0, 3 + i)
        for i, (b, g, bleu) in enumerate(gains_and_scores)
    ]


# --------------------------------------------------------------------------------------
# Per-sentence scores
# --------------------------------------------------------------------------------------


def test_each_sentence_is_scored_by_sacrebleu_on_the_strings_shown(toy):
    _, corpus, _, analysis = toy
    assert isinstance(analysis, ErrorAnalysis) and len(analysis.sentences) == 30 and analysis.beam_size == 2
    for i, s in enumerate(analysis.sentences):
        de, en = corpus.text[SPLIT][i]
        assert (s.index, s.source, s.reference) == (i, de, en)
        assert s.source_words == len(corpus.tokens[SPLIT][i][0])
        assert s.beam_chrf == sacrebleu.sentence_chrf(s.beam, [en]).score
        assert s.greedy_chrf == sacrebleu.sentence_chrf(s.greedy, [en]).score
        assert s.beam_bleu == sacrebleu.sentence_bleu(s.beam, [en]).score
        assert s.greedy_bleu == sacrebleu.sentence_bleu(s.greedy, [en]).score
        assert s.chrf_gain == s.beam_chrf - s.greedy_chrf
    assert "eff:yes" in analysis.signatures["sentence_bleu"] and "nc:6" in analysis.signatures["sentence_chrf"]
    assert analysis.seconds > 0 and "first 30 sentences" in analysis.describe()


def test_the_outputs_and_corpus_bleu_are_what_evaluate_gives(toy):
    model, corpus, vocabs, analysis = toy
    for beam_size, outputs, bleu in ((2, "beam", analysis.bleu), (1, "greedy", analysis.greedy_bleu)):
        reference = evaluate(model, SPLIT, corpus=corpus, beam_size=beam_size, limit=30, **vocabs)
        assert [getattr(s, outputs) for s in analysis.sentences] == reference["hypotheses"]
        assert bleu == pytest.approx(reference["bleu"], abs=1e-9)
    assert analysis.signatures["corpus_bleu"] == reference["signature"]


def test_a_perfect_output_scores_100_and_an_empty_one_0():
    reference = "A man in a red jacket rides his bike through the snow."
    assert sentence_scores(reference, reference) == pytest.approx((100.0, 100.0))  # BLEU: 100.00000000000004
    assert sentence_scores("", reference) == (0.0, 0.0)
    chrf, bleu = sentence_scores("A man in a red coat rides a bicycle in the snow.", reference)
    assert 0 < bleu < chrf < 100, "chrF gives partial credit where BLEU's n-grams miss"


def test_a_sample_limits_the_sentences_and_the_whole_split_is_there_on_request(toy):
    model, corpus, vocabs, _ = toy
    assert len(score_sentences(model, SPLIT, limit=3, corpus=corpus, **vocabs).sentences) == 3
    everything = score_sentences(model, SPLIT, limit=None, corpus=corpus, **vocabs)
    assert [s.index for s in everything.sentences] == list(range(len(corpus.text[SPLIT])))


def test_the_sample_follows_the_compute_mode(monkeypatch):
    assert sample_for("quick") == QUICK_SAMPLE == 200 and sample_for("full") is None
    monkeypatch.setenv("TRANSFORMER_LESSONS_MODE", "full")
    assert sample_for() is None
    with pytest.raises(ValueError, match="compute mode must be 'quick' or 'full'"):
        sample_for("fast")


# --------------------------------------------------------------------------------------
# BLEU by length
# --------------------------------------------------------------------------------------


def test_length_buckets_partition_the_sentences_and_score_each_as_a_corpus(toy):
    _, _, _, analysis = toy
    buckets = bleu_by_length(analysis, edges=(4, 6, 30))
    assert [b.label for b in buckets] == ["up to 3", "4-5", "6-29", "30+"]
    assert sum(b.n for b in buckets) == len(analysis.sentences)
    assert sorted(i for b in buckets for i in b.indices) == list(range(len(analysis.sentences)))
    for b in buckets:
        for i in b.indices:
            words = analysis.sentences[i].source_words
            assert b.low <= words and (b.high is None or words <= b.high)
    assert buckets[-1].n == 0 and buckets[-1].bleu is None and buckets[-1].mean_chrf is None
    for b in buckets[:-1]:
        assert b.n > 0, "the toy sources have 3 to 7 words: every bucket but the last holds some"
        chosen = [analysis.sentences[i] for i in b.indices]
        refs = [[s.reference for s in chosen]]
        assert b.bleu == pytest.approx(sacrebleu.corpus_bleu([s.beam for s in chosen], refs).score, abs=1e-9)
        assert b.greedy_bleu == pytest.approx(sacrebleu.corpus_bleu([s.greedy for s in chosen], refs).score, abs=1e-9)
        assert b.mean_chrf == pytest.approx(np.mean([s.beam_chrf for s in chosen]))


def test_one_edge_makes_two_buckets_and_bad_edges_are_refused(toy):
    _, _, _, analysis = toy
    short, long = bleu_by_length(analysis, edges=(5,))
    assert (short.label, long.label) == ("up to 4", "5+") and short.n + long.n == len(analysis.sentences)
    for bad in ((), (6, 4), (4, 4), (1,), (4.5,)):
        with pytest.raises(ValueError, match="edges must be increasing whole numbers"):
            bleu_by_length(analysis, edges=bad)


# --------------------------------------------------------------------------------------
# Greedy against beam
# --------------------------------------------------------------------------------------


def test_greedy_vs_beam_counts_helps_hurts_and_ties():
    sentences = made_up([(50, 45, 0), (30, 33, 0), (20, 20, 0), (70, 60, 0), (10, 10.5, 0)])
    cmp = greedy_vs_beam(sentences, examples=1)
    assert (cmp.helps, cmp.hurts, cmp.ties) == (2, 2, 1)
    assert cmp.gains == (5, -3, 0, 10, -0.5) and cmp.mean_gain == pytest.approx(11.5 / 5)
    assert [s.index for s in cmp.helped] == [3] and [s.index for s in cmp.hurt] == [1]
    assert cmp.same_output == 0, "made-up outputs all differ"
    loose = greedy_vs_beam(sentences, examples=5, tolerance=1.0)
    assert (loose.helps, loose.hurts, loose.ties) == (2, 1, 2), "a difference of 0.5 is a tie within 1.0"
    assert [s.index for s in loose.helped] == [3, 0]


def test_greedy_vs_beam_adds_up_on_real_outputs(toy):
    _, _, _, analysis = toy
    cmp = greedy_vs_beam(analysis, examples=100)
    n = len(analysis.sentences)
    assert cmp.helps + cmp.hurts + cmp.ties == n == len(cmp.gains)
    assert cmp.helps == sum(s.beam_chrf > s.greedy_chrf for s in analysis.sentences)
    assert cmp.hurts == sum(s.beam_chrf < s.greedy_chrf for s in analysis.sentences)
    assert cmp.same_output == sum(s.beam == s.greedy for s in analysis.sentences) <= cmp.ties
    assert len(cmp.helped) == cmp.helps and len(cmp.hurt) == cmp.hurts
    assert all(a.chrf_gain >= b.chrf_gain > 0 for a, b in zip(cmp.helped, cmp.helped[1:]))
    assert all(a.chrf_gain <= b.chrf_gain < 0 for a, b in zip(cmp.hurt, cmp.hurt[1:]))


# --------------------------------------------------------------------------------------
# Worst and best
# --------------------------------------------------------------------------------------


def test_worst_and_best_are_in_order_ties_by_position():
    sentences = made_up([(40, 0, 9), (10, 0, 50), (90, 0, 1), (10, 0, 30), (60, 0, 20)])
    worst, best = worst_and_best(sentences, n=3)
    assert [s.index for s in worst] == [1, 3, 0] and [s.index for s in best] == [2, 4, 0]
    assert [s.index for s in ranked(sentences)] == [1, 3, 0, 4, 2]
    assert [s.index for s in ranked(sentences, by="bleu")] == [2, 0, 4, 3, 1]
    worst, best = worst_and_best(sentences, n=10, by="bleu")
    assert len(worst) == len(best) == 5 and best[0].index == 1 and worst[0].index == 2


def test_ranking_the_analysis_runs_from_its_lowest_to_its_highest_chrf(toy):
    _, _, _, analysis = toy
    order = ranked(analysis)
    assert sorted(s.index for s in order) == list(range(len(analysis.sentences)))
    assert all(a.beam_chrf <= b.beam_chrf for a, b in zip(order, order[1:]))
    worst, best = worst_and_best(analysis, n=2)
    assert worst[0].beam_chrf == min(s.beam_chrf for s in analysis.sentences)
    assert best[0].beam_chrf == max(s.beam_chrf for s in analysis.sentences)


# --------------------------------------------------------------------------------------
# Bad input: one clear line
# --------------------------------------------------------------------------------------


def _one_line(info) -> str:
    message = str(info.value)
    assert "\n" not in message, message
    return message


def test_bad_requests_are_refused_before_any_model_work(toy):
    _, corpus, _, _ = toy
    not_a_model = object()  # the request is checked first: a bad one never reaches the model
    with pytest.raises(ValueError, match="unknown split 'test_2099'; choose one of train, val") as info:
        score_sentences(not_a_model, "test_2099", corpus=corpus)
    _one_line(info)
    for limit in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="limit must be a whole number of sentences >= 1") as info:
            score_sentences(not_a_model, SPLIT, limit=limit)
        _one_line(info)
    with pytest.raises(ValueError, match="beam_size must be a whole number >= 2") as info:
        score_sentences(not_a_model, SPLIT, beam_size=1)
    _one_line(info)


def test_an_empty_sample_is_refused_with_what_to_do(toy):
    model, _, vocabs, _ = toy
    empty = toy_corpus({"train": 200, "val": 5, SPLIT: 0})
    with pytest.raises(ValueError, match="holds no sentences to score") as info:
        score_sentences(model, SPLIT, corpus=empty, **vocabs)
    _one_line(info)
    for analyse in (bleu_by_length, greedy_vs_beam, ranked, worst_and_best):
        with pytest.raises(ValueError, match="no sentences to analyse: score some first") as info:
            analyse([])
        _one_line(info)
    with pytest.raises(ValueError, match="by must be one of 'chrf', 'bleu'"):
        ranked(made_up([(1, 1, 1)]), by="meteor")
    with pytest.raises(ValueError, match="n must be a whole number >= 1"):
        worst_and_best(made_up([(1, 1, 1)]), n=0)


# --------------------------------------------------------------------------------------
# Charts and the browser
# --------------------------------------------------------------------------------------


def test_bleu_by_length_chart_draws_each_buckets_bleu_and_count(toy):
    _, _, _, analysis = toy
    buckets = bleu_by_length(analysis, edges=(4, 6))
    ax = viz.plot_bleu_by_length(buckets, title="toy")
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx([b.bleu for b in buckets] + [b.greedy_bleu for b in buckets])
    counts = [int(t.get_text().removeprefix("n=")) for t in ax.texts]
    assert counts == [b.n for b in buckets] and sum(counts) == len(analysis.sentences)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["up to 3", "4-5", "6+"]
    default = viz.plot_bleu_by_length(analysis)  # an analysis is bucketed with the default edges
    assert len(default.patches) == 2 * len(bleu_by_length(analysis))
    with pytest.raises(ValueError, match="LengthBucket"):
        viz.plot_bleu_by_length([])


def test_beam_vs_greedy_chart_counts_the_sentences_that_differ():
    sentences = made_up([(50, 45, 0), (30, 33, 0), (20, 20, 0), (70, 60, 0), (10, 10.5, 0)])
    ax = viz.plot_beam_vs_greedy(greedy_vs_beam(sentences), bins=10)
    assert sum(p.get_height() for p in ax.patches) == 4, "the four sentences that differ, the tie left out"
    right = sum(p.get_height() for p in ax.patches if p.get_x() >= 0)
    assert right == 2, "two sentences where beam search helped, right of zero"
    assert "beam helps 2, hurts 2, ties 1" in ax.get_title()


def test_the_browser_moves_from_the_worst_sentence_to_the_best_and_draws_its_attention(toy, monkeypatch):
    model, _, vocabs, analysis = toy
    browser = viz.error_browser(analysis, model, **vocabs)
    order = ranked(analysis)
    assert browser.current_sentence() == order[0] and "rank 1 of 30" in browser.describe()
    first_png = browser._png
    browser.controls["rank"].value = len(order) - 1  # what dragging the slider does
    s = browser.current_sentence()
    assert s == order[-1] and browser._png != first_png
    text, details = translate(model, s.source, beam_size=2, return_attention=True, **vocabs)
    matrix = browser.current_matrix()
    expected = details["cross_attention"][0].mean(0).numpy()  # the toy model's one layer, the mean of its heads
    assert matrix.shape == (len(details["tgt_tokens"]), len(details["src_tokens"]))
    np.testing.assert_allclose(matrix, expected, atol=1e-6)
    np.testing.assert_allclose(matrix.sum(-1), 1.0, atol=1e-5)
    ax = browser.figure.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == details["src_tokens"]
    for shown in (s.source, s.reference, f"chrF {s.beam_chrf:.1f}", f"chrF {s.greedy_chrf:.1f}"):
        assert shown in browser.html.value
    browser.controls["head"].value = 1
    np.testing.assert_allclose(browser.current_matrix(), details["cross_attention"][0][1].numpy(), atol=1e-6)
    browser.controls["by"].value = "bleu"
    assert browser.current_sentence() == ranked(analysis, by="bleu")[-1]
    own = _static_copy_shown_and_hidden(browser, browser._png, monkeypatch)
    assert own["text/plain"] == browser.describe() and len(_displayed(browser, monkeypatch)) == 2


def test_the_browser_refuses_what_it_cannot_show(toy):
    model, _, vocabs, analysis = toy
    with pytest.raises(ValueError, match="rank must be a whole number from 0"):
        viz.error_browser(analysis, model, rank=len(analysis.sentences), **vocabs)
    with pytest.raises(ValueError, match="by must be one of"):
        viz.error_browser(analysis, model, by="meteor", **vocabs)
    with pytest.raises(TypeError, match="score_sentences"):
        viz.error_browser(list(analysis.sentences), model, **vocabs)


# --------------------------------------------------------------------------------------
# The course's model (the one slower test)
# --------------------------------------------------------------------------------------


@pytest.mark.skipif(not DATA_DIR.is_dir(), reason="Multi30k files not available")
def test_the_course_model_is_analysed_on_the_first_test_sentences():
    from transformer_lessons.pretrained import load_course_model

    course = load_course_model(device="cpu", progress=False)
    vocabs = {"src_vocab": course.src_vocab, "tgt_vocab": course.tgt_vocab}
    analysis = score_sentences(course.model, SPLIT, limit=24, data_dir=DATA_DIR, **vocabs)
    reference = evaluate(course.model, SPLIT, data_dir=DATA_DIR, limit=24, **vocabs)
    assert [s.beam for s in analysis.sentences] == reference["hypotheses"]
    assert analysis.bleu == pytest.approx(reference["bleu"], abs=1e-9) and analysis.bleu > 20
    worst, best = worst_and_best(analysis, n=1)
    assert worst[0].beam_chrf < best[0].beam_chrf
    buckets = bleu_by_length(analysis)
    assert sum(b.n for b in buckets) == 24
