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
    greedy_decode,
    length_penalty,
    next_token_distribution,
    sample_decode,
    sequence_log_prob,
    temperature_probs,
)
from transformer_lessons.translation import evaluate, translate
from transformer_lessons.masks import causal_mask, padding_mask
from transformer_lessons.model import Transformer
from transformer_lessons.run import train
from transformer_lessons.data import tokenizer as tokenizer_module

BOS, EOS, PAD = 2, 3, 1
DATA_DIR = Path(
    os.environ.get("TRANSFORMER_LESSONS_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
)


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
    config = ModelConfig(n_layers=2, d_model=32, n_heads=4, d_ff=64, dropout=0.0, max_len=40, tie_embeddings=False)
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
    ys, scores = beam_search(
        model, torch.ones(3, 4, dtype=torch.long), None, 10, BOS, EOS, beam_size=3, pad_id=PAD, return_scores=True
    )
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
    beam, scores = beam_search(
        model, src, mask, 15, BOS, EOS, beam_size=4, length_penalty=alpha, pad_id=PAD, return_scores=True
    )
    g_logp, g_len = sequence_log_prob(model, src, mask, greedy, EOS)
    b_logp, b_len = sequence_log_prob(model, src, mask, beam, EOS)
    assert torch.allclose(scores, b_logp / length_penalty(b_len.float(), alpha), atol=1e-4), (
        "reported score = log P / lp"
    )
    assert (scores >= g_logp / length_penalty(g_len.float(), alpha) - 1e-4).all()
    assert (beam[:, 0] == BOS).all()


def test_length_penalty_is_gnmt():
    assert length_penalty(1, 0.6) == 1.0
    assert abs(length_penalty(10, 0.6) - (15 / 6) ** 0.6) < 1e-12
    assert length_penalty(25, 0.0) == 1.0


def test_beam_search_keeps_its_keyword_and_leaves_the_function_its_name():
    """beam_search(length_penalty=α), as the notebooks call it, still works; inside it the float goes by ``alpha``, so
    the module's length_penalty() is not hidden by a float of the same name anywhere but on the line that renames it."""
    import ast
    import inspect
    import textwrap

    from transformer_lessons import beam

    assert inspect.signature(beam.beam_search).parameters["length_penalty"].default == 0.6 and callable(
        beam.length_penalty
    )
    body = ast.parse(textwrap.dedent(inspect.getsource(beam.beam_search))).body[0]
    reads = [node for node in ast.walk(body) if isinstance(node, ast.Name) and node.id == "length_penalty"]
    assert len(reads) == 1, "the argument is read once, as alpha = length_penalty"
    model = random_model(vocab_size=12, seed=1)
    src = torch.randint(4, 12, (3, 6))
    _, plain = beam_search(model, src, None, 8, BOS, EOS, beam_size=3, length_penalty=0.0, return_scores=True)
    _, long = beam_search(model, src, None, 8, BOS, EOS, beam_size=3, length_penalty=1.0, return_scores=True)
    assert not torch.equal(plain, long), "the keyword reaches the scores"


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


def test_translate_names_a_sentence_that_is_not_valid_unicode(toy, monkeypatch):
    checkpoint, _ = toy
    import transformer_lessons.translation as translation

    monkeypatch.setattr(translation, "_resolve", lambda *a, **k: pytest.fail("refused before the model is loaded"))
    for sentences, index in (("Ein Mann\ud800", 0), (["ein hund .", "Ein Mann\ud800"], 1)):
        with pytest.raises(ValueError) as info:
            translate(checkpoint, sentences, device="cpu")
        message = str(info.value)
        assert message.startswith(
            f"sentence {index} ('Ein Mann\\ud800') is not valid Unicode: it holds a lone surrogate '\\ud800' at position 8"
        )
        assert "Remove it" in message and message.encode("ascii")  # says what to do; prints on any terminal
        assert info.value.__cause__ is None and info.value.__suppress_context__, (
            "spaCy's UnicodeEncodeError is not chained"
        )


def test_translate_with_a_model_and_vocabularies(toy):
    checkpoint, corpus = toy
    from transformer_lessons.checkpoint import load_checkpoint

    model, src_vocab, tgt_vocab, _ = load_checkpoint(checkpoint, "cpu")
    assert translate(model, ["ein mann ."], src_vocab=src_vocab, tgt_vocab=tgt_vocab) == translate(
        checkpoint, ["ein mann ."], device="cpu"
    )
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
    from transformer_lessons.data import DataError

    tokenizer_module._load_spacy_tokenizer.cache_clear()
    monkeypatch.setitem(sys.modules, "spacy", None)  # import spacy now raises ImportError
    try:
        with pytest.raises(DataError) as info:
            translate(toy[0], "Ein Hund läuft.", device="cpu")
    finally:
        tokenizer_module._load_spacy_tokenizer.cache_clear()
    message = str(info.value)
    assert "pip install spacy" in message and "translate() always needs it" in message
    assert "evaluate --corpus" in message, "scoring a saved corpus needs no spaCy"
    assert "Corpus.load(path) here" not in message, "a saved corpus cannot help translate new sentences"


@pytest.mark.parametrize("beam_size", [1, 3])
def test_outputs_are_the_same_with_attention_recorded_or_fused(toy, beam_size):
    # train() decodes with recording off (the fused kernel); notebooks record for the plots. Same outputs.
    from transformer_lessons.translation import decode_token_lists
    from transformer_lessons.checkpoint import load_checkpoint

    checkpoint, corpus = toy
    model, src_vocab, tgt_vocab, _ = load_checkpoint(checkpoint, "cpu")
    sources = [s for s, _ in corpus.tokens["test_2016_flickr"]]
    outputs = {}
    for record in (True, False):
        model.set_record_attention(record)
        outputs[record] = decode_token_lists(
            model, sources, src_vocab, tgt_vocab, beam_size=beam_size, max_output_extra=5
        )
    model.set_record_attention(None)
    assert outputs[True] == outputs[False]
    assert any(len(out) > 1 for out in outputs[True]), "the model says something"


def test_subword_model_translates_whole_words(tmp_path):
    # 15 merges leave most toy words in pieces, so every step below crosses the BPE path.
    corpus = toy_corpus(bpe_merges=15)
    assert any(u.endswith("@@") for u in corpus.tgt_vocab.itos) and any(u.endswith("@@") for u in corpus.src_vocab.itos)
    config = TOY_CONFIG.replace(
        epochs=2, bpe_merges=15, model=dataclasses.replace(TOY_CONFIG.model, max_len=64)
    )  # pieces: longer sentences
    result = train(config, corpus, out_dir=tmp_path, device="cpu", progress=False)
    checkpoint = tmp_path / "best.pt"
    from transformer_lessons.checkpoint import load_checkpoint

    _, src_vocab, tgt_vocab, _ = load_checkpoint(checkpoint, "cpu")
    assert src_vocab == corpus.src_vocab and src_vocab.bpe is not None, "the checkpoint carries the merges"
    texts = translate(checkpoint, ["ein hund läuft .", "ein unbekanntes wort ."], device="cpu")
    assert all(isinstance(t, str) and "@@" not in t for t in texts), texts
    from transformer_lessons.checkpoint import export_for_inference

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
        train(
            TOY_CONFIG.replace(epochs=1, bpe_merges=15),
            corpus,
            out_dir=tmp_path,
            device="cpu",
            progress=False,
            evaluate_test=False,
        )
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
    assert result["hypotheses"][0] == translate(
        checkpoint, corpus.text["test_2016_flickr"][0][0], beam_size=2, device="cpu"
    )
    assert result["bleu_text"].startswith("BLEU")


@pytest.mark.skipif(not DATA_DIR.is_dir(), reason="Multi30k files not available")
def test_evaluate_on_raw_multi30k_files(toy):
    # No corpus: evaluate reads and tokenizes the split itself (the toy model scores ~0, that is fine).
    checkpoint, _ = toy
    result = evaluate(checkpoint, "val", data_dir=DATA_DIR, beam_size=1, device="cpu", limit=8)
    assert result["n"] == 8 and result["references"][0][0].isupper(), "references are the raw cased text"


# --------------------------------------------------------------------------------------
# Sampling with a temperature
# --------------------------------------------------------------------------------------


def padded_sources(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Six sources of the random model's vocabulary, one of them padded, and their mask."""
    src = torch.randint(4, 16, (6, 7), generator=torch.Generator().manual_seed(seed))
    src[2, 4:] = PAD
    return src, padding_mask(src, PAD)


def eos_friendly_model() -> Transformer:
    """The random model with <eos> made likely, so that sampled sentences end at different steps."""
    model = random_model()
    with torch.no_grad():
        model.generator.bias[EOS] += 2.5
    return model


def test_temperature_zero_is_greedy_exactly():
    model = eos_friendly_model()
    src, mask = padded_sources()
    greedy = greedy_decode(model, src, mask, 12, BOS, EOS, PAD)
    assert torch.equal(sample_decode(model, src, mask, 12, BOS, EOS, temperature=0.0, pad_id=PAD), greedy)
    assert torch.equal(sample_decode(model, src, mask, 12, BOS, EOS, temperature=0, top_k=3, pad_id=PAD), greedy)


def test_top_k_of_one_is_greedy():
    model = random_model()
    src, mask = padded_sources()
    greedy = greedy_decode(model, src, mask, 10, BOS)  # no <eos>: every row runs all steps in both decoders
    sampled = sample_decode(
        model, src, mask, 10, BOS, temperature=1.5, top_k=1, generator=torch.Generator().manual_seed(3)
    )
    assert torch.equal(sampled, greedy), "sampling among the single likeliest token is taking the argmax"


def test_a_seeded_generator_reproduces_the_samples():
    model = eos_friendly_model()
    src, mask = padded_sources()

    def draw(seed: int) -> torch.Tensor:
        return sample_decode(
            model, src, mask, 12, BOS, EOS, temperature=1.0, generator=torch.Generator().manual_seed(seed), pad_id=PAD
        )

    assert torch.equal(draw(7), draw(7))
    assert not torch.equal(draw(7), draw(8)), "another seed draws other tokens"
    torch.manual_seed(1)
    first = sample_decode(model, src, mask, 12, BOS, EOS, pad_id=PAD)
    torch.manual_seed(1)
    assert torch.equal(first, sample_decode(model, src, mask, 12, BOS, EOS, pad_id=PAD)), (
        "without a generator: torch's global seed"
    )


@pytest.mark.parametrize("temperature", [0.5, 1.0, 3.0])
def test_sampled_outputs_keep_the_decoders_contract(temperature):
    model = eos_friendly_model()
    src, mask = padded_sources()
    ys = sample_decode(
        model, src, mask, 9, BOS, EOS, temperature, generator=torch.Generator().manual_seed(0), pad_id=PAD
    )
    assert ys.dtype == torch.long and ys.size(0) == 6 and 2 <= ys.size(1) <= 10, "(B, 1 + L), L <= max_new_tokens"
    assert (ys[:, 0] == BOS).all()
    ended = (ys == EOS).cumsum(1) > 0  # (B, 1 + L): at or after the first <eos>
    after = ended & ((ys == EOS).cumsum(1) - (ys == EOS).long() > 0)  # strictly after the first <eos>
    assert (ys[after] == PAD).all(), "a finished row receives pad_id"
    if ys.size(1) < 10:
        assert ended[:, -1].all(), "the loop stops early only when every row has ended"
    without_pad = sample_decode(model, src, mask, 9, BOS, EOS, temperature, generator=torch.Generator().manual_seed(0))
    assert (without_pad[after] == EOS).all() and torch.equal(without_pad[~after], ys[~after]), (
        "no pad_id: <eos> again, same draws"
    )


def test_a_scripted_model_sampled_cold_follows_its_script():
    ys = sample_decode(
        ScriptedModel([5, 6, 7]),
        torch.ones(3, 4, dtype=torch.long),
        None,
        10,
        BOS,
        EOS,
        temperature=0.05,
        generator=torch.Generator().manual_seed(0),
        pad_id=PAD,
    )
    assert ys.tolist() == [[BOS, 5, 6, 7, EOS]] * 3


def entropy(p: torch.Tensor) -> torch.Tensor:
    return -(p * p.clamp_min(1e-30).log()).sum(-1)


def test_a_higher_temperature_spreads_the_next_token_distribution():
    model = random_model()
    src, mask = padded_sources()
    prefix = torch.tensor([BOS, 5, 9])
    temperatures = [0.0, 0.25, 0.5, 1.0, 2.0, 4.0]
    probs = [next_token_distribution(model, src, mask, prefix, t) for t in temperatures]  # each (B, V)
    assert all(p.shape == (6, 16) and torch.allclose(p.sum(-1), torch.ones(6)) for p in probs)
    entropies = torch.stack([entropy(p) for p in probs])  # (len(temperatures), B)
    assert (entropies[1:] > entropies[:-1]).all(), f"entropy must rise with the temperature, got {entropies.T.tolist()}"
    assert torch.allclose(entropies[0], torch.zeros(6), atol=1e-6), "temperature 0 puts all the mass on the argmax"
    assert (entropies[-1] < torch.log(torch.tensor(16.0))).all(), "never beyond the uniform distribution"
    with torch.no_grad():  # at temperature 1: the model's own softmax of the last position
        logits = model(src, prefix.expand(6, -1), mask, causal_mask(3))[:, -1]  # (B, V)
    assert torch.allclose(probs[3], logits.softmax(-1), atol=1e-6)
    one = next_token_distribution(model, src[0], mask[:1], prefix, 0.5)
    assert one.shape == (16,) and torch.allclose(one, probs[2][0], atol=1e-6), "one source (S,) gives (V,)"


def test_temperature_probs_handles_the_limits_and_top_k():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0], [0.0, 3.0, 3.0, 1.0]])
    assert torch.equal(temperature_probs(logits, 0), torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0]])), (
        "ties: the first argmax"
    )
    tiny = temperature_probs(logits * 1e4, 1e-30)
    assert torch.isfinite(tiny).all() and torch.allclose(tiny[0], torch.tensor([1.0, 0, 0, 0])), "no inf - inf = NaN"
    top2 = temperature_probs(logits, 1.0, top_k=2)
    assert (top2[0, 2:] == 0).all() and torch.allclose(top2[0, :2], logits[0, :2].softmax(-1))
    assert torch.allclose(temperature_probs(logits, 1.0, top_k=99), logits.softmax(-1)), "k beyond V keeps every token"


BAD_TEMPERATURES = [-0.5, float("nan"), float("inf"), "1.0", True, None]


@pytest.mark.parametrize("bad", BAD_TEMPERATURES, ids=[repr(b) for b in BAD_TEMPERATURES])
def test_invalid_temperatures_are_refused(bad):
    model = random_model()
    src, mask = padded_sources()
    with pytest.raises(ValueError, match=r"temperature must be a finite number >= 0 \(0 = greedy"):
        sample_decode(model, src, mask, 5, BOS, EOS, temperature=bad)
    with pytest.raises(ValueError, match="temperature must be"):
        next_token_distribution(model, src, mask, torch.tensor([BOS]), bad)
    with pytest.raises(ValueError, match="top_k must be a whole number >= 1"):
        sample_decode(model, src, mask, 5, BOS, EOS, temperature=1.0, top_k=0)


def test_translate_samples_with_a_temperature(toy):
    checkpoint, _ = toy
    sentences = ["ein hund läuft .", "eine frau sitzt im park .", "ein kind springt ."]
    greedy = translate(checkpoint, sentences, device="cpu")
    assert translate(checkpoint, sentences, device="cpu", temperature=0.0) == greedy, "temperature 0 is greedy"
    hot = translate(checkpoint, sentences * 4, device="cpu", temperature=1.5, seed=1)
    assert hot == translate(checkpoint, sentences * 4, device="cpu", temperature=1.5, seed=1), (
        "a seed repeats the draws"
    )
    assert hot != greedy * 4, "a hot model says something else at least once in 12 sentences"
    assert all(isinstance(s, str) for s in hot)
    assert isinstance(translate(checkpoint, "ein hund .", device="cpu", temperature=0.7, top_k=5, seed=0), str)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"temperature": 1.0, "beam_size": 4}, "choose one"),
        ({"seed": 3}, "give a temperature"),
        ({"top_k": 5}, "give a temperature"),
        ({"temperature": -1.0}, "temperature must be"),
        ({"temperature": 1.0, "seed": -2}, "seed must be"),
        ({"temperature": 1.0, "top_k": 0}, "top_k must be"),
    ],
)
def test_translate_refuses_sampling_options_it_would_ignore(toy, options, message, monkeypatch):
    import transformer_lessons.translation as translation

    checkpoint, _ = toy
    monkeypatch.setattr(translation, "_resolve", lambda *a: pytest.fail("refused before the checkpoint is loaded"))
    with pytest.raises(ValueError, match=message):
        translate(checkpoint, "ein hund .", device="cpu", **options)
