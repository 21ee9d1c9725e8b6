"""Tests of transformer_lessons.decode: greedy, beam search, translate, evaluate."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest
import torch

from test_train import TOY_CONFIG, toy_corpus
from transformer_lessons.config import ModelConfig
from transformer_lessons.decode import (
    beam_search,
    evaluate,
    greedy_decode,
    length_penalty,
    sequence_log_prob,
    translate,
)
from transformer_lessons.masks import padding_mask
from transformer_lessons.model import Transformer
from transformer_lessons.train import train

BOS, EOS, PAD = 2, 3, 1
DATA_DIR = Path(os.environ.get("TRANSFORMER_LESSONS_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k")


class ScriptedModel(torch.nn.Module):
    """A stand-in decoder that always prefers the next token of a fixed script, then <eos>."""

    def __init__(self, script: list[int], vocab_size: int = 10):
        super().__init__()
        self.script, self.vocab_size = script, vocab_size

    def encode(self, src, src_mask=None):
        return torch.zeros(src.size(0), src.size(1), 4)  # (B, S, D)

    def decode(self, memory, src_mask, tgt, tgt_mask=None):
        B, T = tgt.shape
        logits = torch.zeros(B, T, self.vocab_size)
        for t in range(T):
            nxt = self.script[t] if t < len(self.script) else EOS
            logits[:, t, nxt] = 5.0
        return logits  # (B, T, V)


def random_model(vocab_size: int = 16, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    config = ModelConfig(n_layers=2, d_model=32, n_heads=4, d_ff=64, dropout=0.0, max_len=40)
    return Transformer(config, vocab_size, vocab_size).eval()


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """A toy model trained for a few seconds, its checkpoint and corpus."""
    corpus = toy_corpus()
    out = tmp_path_factory.mktemp("decode_run")
    train(TOY_CONFIG.replace(epochs=2), corpus, out_dir=out, device="cpu", progress=False, evaluate_test=False)
    return out / "best.pt", corpus


# --------------------------------------------------------------------------------------
# Greedy and beam search
# --------------------------------------------------------------------------------------


def test_greedy_stops_at_eos_and_pads_after_it():
    model = ScriptedModel([5, 6, 7])
    src = torch.ones(2, 4, dtype=torch.long)
    ys = greedy_decode(model, src, None, max_new_tokens=10, bos_id=BOS, eos_id=EOS, pad_id=PAD)
    assert ys.tolist() == [[BOS, 5, 6, 7, EOS]] * 2, "stops as soon as every sentence has ended"
    ys = greedy_decode(model, src, None, max_new_tokens=2, bos_id=BOS, eos_id=EOS)
    assert ys.tolist() == [[BOS, 5, 6]] * 2, "max_new_tokens caps the output"


def test_beam_follows_the_script_and_pads():
    model = ScriptedModel([5, 6, 7])
    ys, scores = beam_search(model, torch.ones(3, 4, dtype=torch.long), None, 10, BOS, EOS, beam_size=3, pad_id=PAD, return_scores=True)
    assert ys.tolist() == [[BOS, 5, 6, 7, EOS]] * 3
    assert scores.shape == (3,) and (scores < 0).all()


def test_beam_of_one_is_greedy():
    model = random_model()
    src = torch.randint(4, 16, (6, 7))
    src[2, 4:] = PAD
    mask = padding_mask(src, PAD)
    greedy = greedy_decode(model, src, mask, 12, BOS, EOS, PAD)
    beam = beam_search(model, src, mask, 12, BOS, EOS, beam_size=1, length_penalty=0.6, pad_id=PAD)
    assert torch.equal(beam, greedy)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_scores_at_least_as_well_as_greedy(alpha):
    model = random_model(vocab_size=12, seed=1)
    with torch.no_grad():
        model.generator.bias[EOS] += 2.0  # let sentences end, so lengths (and α) matter
    src = torch.randint(4, 12, (8, 6))
    mask = padding_mask(src, PAD)
    greedy = greedy_decode(model, src, mask, 15, BOS, EOS, PAD)
    beam, scores = beam_search(model, src, mask, 15, BOS, EOS, beam_size=4, length_penalty=alpha, pad_id=PAD, return_scores=True)
    g_logp, g_len = sequence_log_prob(model, src, mask, greedy, EOS)
    b_logp, b_len = sequence_log_prob(model, src, mask, beam, EOS)
    assert torch.allclose(scores, b_logp / length_penalty(b_len.float(), alpha), atol=1e-4), "reported score = log P / lp"
    assert (scores >= g_logp / length_penalty(g_len.float(), alpha) - 1e-4).all()
    assert (beam[:, 0] == BOS).all()


def test_length_penalty_is_gnmt():
    assert length_penalty(1, 0.6) == 1.0
    assert abs(length_penalty(10, 0.6) - (15 / 6) ** 0.6) < 1e-12
    assert length_penalty(25, 0.0) == 1.0


# --------------------------------------------------------------------------------------
# translate
# --------------------------------------------------------------------------------------


def test_translate_learned_toy_mapping(toy):
    checkpoint, _ = toy
    out = translate(checkpoint, ["ein hund läuft .", "eine frau sitzt im park ."], device="cpu")
    assert isinstance(out, list) and len(out) == 2 and all(isinstance(s, str) for s in out)
    assert out[0].endswith(".") and not out[0].endswith(" ."), "detokenized: no space before the full stop"
    single = translate(checkpoint, "ein hund läuft .", beam_size=3, device="cpu")
    assert isinstance(single, str), "a str in gives a str out"


def test_translate_awkward_input(toy):
    checkpoint, _ = toy
    assert translate(checkpoint, ["", "   ", "ein hund ."], device="cpu")[:2] == ["", ""]
    assert translate(checkpoint, "", device="cpu") == ""
    assert translate(checkpoint, [], device="cpu") == []
    unknown = translate(checkpoint, ["Quantenchromodynamik zwitschert fröhlich !"], device="cpu")
    assert isinstance(unknown[0], str), "unknown words become <unk>, never an error"
    for bad in (None, 42, [b"bytes"], ["ok", 3]):
        with pytest.raises(TypeError, match="str"):
            translate(checkpoint, bad, device="cpu")
    with pytest.raises(TypeError, match="checkpoint path or a Transformer"):
        translate(123, ["x"])
    long = " ".join(["hund"] * 100)  # the toy model's max_len is 32
    with pytest.warns(UserWarning, match="only their first 31 tokens"):
        out = translate(checkpoint, [long], device="cpu")
    assert isinstance(out[0], str)


def test_translate_with_a_model_and_vocabularies(toy):
    checkpoint, corpus = toy
    from transformer_lessons.train import load_checkpoint

    model, src_vocab, tgt_vocab, _ = load_checkpoint(checkpoint, "cpu")
    assert translate(model, ["ein mann ."], src_vocab=src_vocab, tgt_vocab=tgt_vocab) == translate(checkpoint, ["ein mann ."], device="cpu")
    with pytest.raises(TypeError, match="src_vocab"):
        translate(model, ["ein mann ."])


def test_translate_returns_attention_for_the_widgets(toy):
    checkpoint, _ = toy
    text, details = translate(checkpoint, "ein kind springt .", return_attention=True, device="cpu")
    assert isinstance(text, str)
    assert details["src_tokens"] == ["ein", "kind", "springt", ".", "<eos>"]
    cross = details["cross_attention"]
    T, S = len(details["tgt_tokens"]), len(details["src_tokens"])
    assert len(cross) == TOY_CONFIG.model.n_layers
    for layer in cross:
        assert layer.shape == (TOY_CONFIG.model.n_heads, T, S)
        assert torch.allclose(layer.sum(-1), torch.ones(layer.shape[:-1]), atol=1e-5)
    # What translate returns goes straight into the step-by-step widget.
    from transformer_lessons.viz import generation_stepper

    stepper = generation_stepper(details["src_tokens"], details["tgt_tokens"], cross)
    assert stepper.current_matrix().shape == (T, S)
    texts, many = translate(checkpoint, ["", "ein hund ."], return_attention=True, device="cpu")
    assert many[0]["cross_attention"] is None and many[1]["cross_attention"] is not None


def test_translate_without_spacy_says_it_needs_it_and_what_works_instead(toy, monkeypatch):
    from transformer_lessons import data
    from transformer_lessons.data import DataError

    data._load_spacy_tokenizer.cache_clear()
    monkeypatch.setitem(sys.modules, "spacy", None)  # import spacy now raises ImportError
    try:
        with pytest.raises(DataError) as info:
            translate(toy[0], "Ein Hund läuft.", device="cpu")
    finally:
        data._load_spacy_tokenizer.cache_clear()
    message = str(info.value)
    assert "pip install spacy" in message and "translate() always needs it" in message
    assert "evaluate --corpus" in message, "scoring a saved corpus needs no spaCy"
    assert "Corpus.load(path) here" not in message, "a saved corpus cannot help translate new sentences"


@pytest.mark.parametrize("beam_size", [1, 3])
def test_outputs_are_the_same_with_attention_recorded_or_fused(toy, beam_size):
    # train() decodes with recording off (the fused kernel); notebooks record for the plots. Same outputs.
    from transformer_lessons.decode import decode_token_lists
    from transformer_lessons.train import load_checkpoint

    checkpoint, corpus = toy
    model, src_vocab, tgt_vocab, _ = load_checkpoint(checkpoint, "cpu")
    sources = [s for s, _ in corpus.tokens["test_2016_flickr"]]
    outputs = {}
    for record in (True, False):
        model.set_record_attention(record)
        outputs[record] = decode_token_lists(model, sources, src_vocab, tgt_vocab, beam_size=beam_size, max_extra=5)
    model.set_record_attention(None)
    assert outputs[True] == outputs[False]
    assert any(len(out) > 1 for out in outputs[True]), "the model says something"


def test_subword_model_translates_whole_words(tmp_path):
    # 15 merges leave most toy words in pieces, so every step below crosses the BPE path.
    corpus = toy_corpus(bpe_merges=15)
    assert any(u.endswith("@@") for u in corpus.tgt_vocab.itos) and any(u.endswith("@@") for u in corpus.src_vocab.itos)
    config = TOY_CONFIG.replace(epochs=2, bpe_merges=15, model=dataclasses.replace(TOY_CONFIG.model, max_len=64))  # pieces: longer sentences
    result = train(config, corpus, out_dir=tmp_path, device="cpu", progress=False)
    checkpoint = tmp_path / "best.pt"
    from transformer_lessons.train import load_checkpoint

    _, src_vocab, tgt_vocab, _ = load_checkpoint(checkpoint, "cpu")
    assert src_vocab == corpus.src_vocab and src_vocab.bpe is not None, "the checkpoint carries the merges"
    texts = translate(checkpoint, ["ein hund läuft .", "ein unbekanntes wort ."], device="cpu")
    assert all(isinstance(t, str) and "@@" not in t for t in texts), texts
    from transformer_lessons.train import export_for_inference

    assert export_for_inference(checkpoint, tmp_path / "model_fp16.pt") > 0  # what a GPU run commits
    assert load_checkpoint(tmp_path / "model_fp16.pt", "cpu")[2] == tgt_vocab, "the fp16 export keeps the merges too"
    # evaluate joins pieces into words before scoring: its hypotheses hold no "@@" either.
    hypotheses = (tmp_path / "test_hypotheses.txt").read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == len(corpus.text["test_2016_flickr"]) and not any("@@" in h for h in hypotheses)
    assert result["test"]["bleu"] >= 0
    _, details = translate(checkpoint, "ein hund läuft .", return_attention=True, device="cpu")
    assert details["src_tokens"] == [*src_vocab.segment(["ein", "hund", "läuft", "."]), "<eos>"]
    assert len(details["src_tokens"]) > 5, "the attention widgets label the pieces the model read"
    assert details["cross_attention"][0].shape[-1] == len(details["src_tokens"])


def test_subword_sentence_too_long_is_cut_by_pieces(tmp_path):
    corpus = toy_corpus(bpe_merges=15)
    assert corpus.too_long("train", TOY_CONFIG.model.max_len) == 1
    with pytest.warns(UserWarning, match="1 train pair.* left out of training"):  # not a crash inside the model
        train(TOY_CONFIG.replace(epochs=1, bpe_merges=15), corpus, out_dir=tmp_path, device="cpu", progress=False, evaluate_test=False)
    words = ["schläft"] * 12  # 12 words, but more pieces than max_len=32 allows
    assert len(corpus.src_vocab.segment(words)) > TOY_CONFIG.model.max_len
    with pytest.warns(UserWarning, match="more than 31 tokens"):
        text, details = translate(tmp_path / "best.pt", " ".join(words), return_attention=True, device="cpu")
    assert isinstance(text, str) and len(details["src_tokens"]) == 32


# --------------------------------------------------------------------------------------
# evaluate
# --------------------------------------------------------------------------------------


def test_evaluate_reports_sacrebleu_and_tutorial_bleu(toy):
    checkpoint, corpus = toy
    result = evaluate(checkpoint, "test_2016_flickr", corpus=corpus, beam_size=2, device="cpu")
    assert result["n"] == len(corpus.text["test_2016_flickr"]) == len(result["hypotheses"])
    assert "case:mixed" in result["signature"] and "tok:13a" in result["signature"]
    assert "case:lc" in result["tutorial_signature"] and "tok:none" in result["tutorial_signature"]
    assert 0.0 <= result["bleu"] <= 100.0 and 0.0 <= result["tutorial_bleu"] <= 100.0
    assert result["hypotheses"][0] == translate(checkpoint, corpus.text["test_2016_flickr"][0][0], beam_size=2, device="cpu")
    assert result["bleu_text"].startswith("BLEU")


@pytest.mark.skipif(not DATA_DIR.is_dir(), reason="Multi30k files not available")
def test_evaluate_on_raw_multi30k_files(toy):
    # No corpus: evaluate reads and tokenizes the split itself (the toy model scores ~0, that is fine).
    checkpoint, _ = toy
    result = evaluate(checkpoint, "val", data_dir=DATA_DIR, beam_size=1, device="cpu", limit=8)
    assert result["n"] == 8 and result["references"][0][0].isupper(), "references are the raw cased text"
