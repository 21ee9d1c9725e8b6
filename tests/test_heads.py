"""Switching attention heads off: none off changes nothing, a head off is its slice of W^O zeroed, the masks come
back; each head's importance and the pruning curve are BLEU measured with those heads off."""

from __future__ import annotations

import copy
import json
import random
import re

import pytest
import torch

from transformer_lessons.attention import MultiHeadAttention
from transformer_lessons.beam import beam_search
from transformer_lessons.decode import fused_attention, greedy_decode
from transformer_lessons.heads import (
    KINDS,
    HeadImportance,
    PruningCurve,
    all_heads,
    attention_layers,
    bleu_with_heads_off,
    head_importance,
    heads_off,
    prune_by_importance,
    prune_in_order,
)
from transformer_lessons.masks import causal_mask, padding_mask
from transformer_lessons.model import Transformer, make_model
from transformer_lessons.translation import bleu_scores, translate

from test_train import TOY_MODEL, toy_corpus

PAD, BOS, EOS, V = 0, 1, 2, 23
LAYERS, HEADS = 2, 4


def _model(**options) -> Transformer:
    torch.manual_seed(0)
    return make_model(V, V, n_layers=LAYERS, d_model=32, d_ff=64, n_heads=HEADS, max_len=48, **options).eval()


def _batch():
    torch.manual_seed(1)
    src = torch.randint(3, V, (4, 7))  # (B, S)
    src[1, 4:] = PAD
    tgt = torch.cat([torch.full((4, 1), BOS), torch.randint(3, V, (4, 6))], dim=1)  # (B, T)
    return src, padding_mask(src, PAD), tgt, causal_mask(tgt.size(1))


def _masks(model: Transformer) -> list:
    return [m.head_mask for m in model.modules() if isinstance(m, MultiHeadAttention)]


def _outputs(model: Transformer) -> dict[str, torch.Tensor]:
    """Every path through attention: training (dropout, fused kernel), eval (recorded weights, and fused), decoding."""
    src, src_mask, tgt, tgt_mask = _batch()
    out = {}
    model.train()
    torch.manual_seed(3)  # the same dropout masks in both runs
    out["train"] = model(src, tgt, src_mask, tgt_mask)
    model.eval()
    with torch.no_grad():
        out["eval"] = model(src, tgt, src_mask, tgt_mask)
        with fused_attention(model):
            out["eval fused"] = model(src, tgt, src_mask, tgt_mask)
    out["greedy cached"] = greedy_decode(model, src, src_mask, 12, BOS, EOS, PAD, use_cache=True)
    out["greedy"] = greedy_decode(model, src, src_mask, 12, BOS, EOS, PAD)
    out["beam cached"] = beam_search(model, src, src_mask, 12, BOS, EOS, 3, 0.6, PAD, use_cache=True)
    return out


OPTIONS = [
    pytest.param({}, id="paper"),
    pytest.param(dict(n_kv_heads=2, norm_first=True, positional="rotary"), id="gqa-prenorm-rotary"),
]


@pytest.mark.parametrize("options", OPTIONS)
def test_no_head_off_changes_nothing_bit_for_bit(options):
    model = _model(**options)
    plain = _outputs(model)
    with heads_off(model, {}):
        assert all(mask is None for mask in _masks(model))  # nothing named: the paper's path, no mask at all
    every_layer = {(kind, layer): [] for kind in KINDS for layer in range(LAYERS)}
    with heads_off(model, every_layer):  # a mask on every module, every head on
        assert all(mask is not None and bool(mask.all()) for mask in _masks(model))
        masked = _outputs(model)
    for name, value in plain.items():
        assert torch.equal(masked[name], value), name


@pytest.mark.parametrize("kind", KINDS)
def test_switching_off_every_head_of_a_layer_changes_the_output(kind):
    model = _model()
    src, src_mask, tgt, tgt_mask = _batch()
    with torch.no_grad():
        before = model(src, tgt, src_mask, tgt_mask)
        with heads_off(model, {(kind, 0): range(HEADS)}):
            after = model(src, tgt, src_mask, tgt_mask)
    assert not torch.allclose(after, before, atol=1e-3)


def test_without_any_cross_attention_head_the_output_ignores_the_source():
    model = _model()
    torch.manual_seed(4)
    src_a, src_b = torch.randint(3, V, (1, 7)), torch.randint(3, V, (1, 7))  # two different sentences
    tgt = torch.cat([torch.full((1, 1), BOS), torch.randint(3, V, (1, 5))], dim=1)
    with torch.no_grad():
        with_source = [model(src, tgt, None, causal_mask(tgt.size(1))) for src in (src_a, src_b)]
        with heads_off(model, {("cross", layer): range(HEADS) for layer in range(LAYERS)}):
            without = [model(src, tgt, None, causal_mask(tgt.size(1))) for src in (src_a, src_b)]
    assert not torch.allclose(with_source[0], with_source[1], atol=1e-3)
    torch.testing.assert_close(without[0], without[1])


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_one_head_off_equals_its_columns_of_w_o_set_to_zero(kind, options):
    model = _model(**options)
    layer, head = 1, 2
    zeroed = copy.deepcopy(model)
    w_o = attention_layers(zeroed, kind)[layer].w_o
    d_head = 32 // HEADS
    with torch.no_grad():  # W^O is (D, H * Dh): the input columns of head h are h * Dh ... (h + 1) * Dh - 1
        w_o.weight[:, head * d_head : (head + 1) * d_head] = 0.0
    src, src_mask, tgt, tgt_mask = _batch()
    close = dict(atol=1e-5, rtol=1e-5)
    with torch.no_grad(), heads_off(model, [(kind, layer, head)]):
        torch.testing.assert_close(model(src, tgt, src_mask, tgt_mask), zeroed(src, tgt, src_mask, tgt_mask), **close)
        with fused_attention(model), fused_attention(zeroed):
            torch.testing.assert_close(
                model(src, tgt, src_mask, tgt_mask), zeroed(src, tgt, src_mask, tgt_mask), **close
            )
        cache, cache_zeroed = (
            model.init_cache(model.encode(src, src_mask)),
            zeroed.init_cache(zeroed.encode(src, src_mask)),
        )
        for t in range(tgt.size(1)):  # the key/value cache's path, one position at a time
            step = model.decode_step(cache, src_mask, tgt[:, t : t + 1])
            torch.testing.assert_close(step, zeroed.decode_step(cache_zeroed, src_mask, tgt[:, t : t + 1]), **close)
    with torch.no_grad():  # outside the block the head is back, and it mattered
        assert not torch.allclose(model(src, tgt, src_mask, tgt_mask), zeroed(src, tgt, src_mask, tgt_mask), atol=1e-4)


def test_the_masks_come_back_after_the_block_nested_or_after_an_error():
    model = _model()
    cross = attention_layers(model, "cross")[1]
    with heads_off(model, {("cross", 1): [0]}):
        assert cross.head_mask.tolist() == [False, True, True, True]
        with heads_off(model, [("cross", 1, 3), ("encoder", 0, 1)]):  # an inner block adds to the outer one
            assert cross.head_mask.tolist() == [False, True, True, False]
            assert attention_layers(model, "encoder")[0].head_mask.tolist() == [True, False, True, True]
        assert cross.head_mask.tolist() == [False, True, True, True]
        assert attention_layers(model, "encoder")[0].head_mask is None
    assert all(mask is None for mask in _masks(model))
    with pytest.raises(RuntimeError, match="boom"):
        with heads_off(model, {("cross", 1): [0], ("decoder_self", 0): [2]}):
            raise RuntimeError("boom")
    assert all(mask is None for mask in _masks(model))
    cross.head_mask = torch.tensor([1.0, 0.5, 1.0, 1.0])  # a mask of one's own, a head at half strength
    with heads_off(model, [("cross", 1, 0)]):
        assert cross.head_mask.tolist() == [0.0, 0.5, 1.0, 1.0]
    assert cross.head_mask.tolist() == [1.0, 0.5, 1.0, 1.0]


@pytest.mark.parametrize(
    "bad, message",
    [
        ({("encoder", 2): [0]}, "'encoder' attention has layers 0 to 1; there is no layer 2"),
        ({("cross", 0): [4]}, "('cross', 0) has heads 0 to 3; there is no head 4"),
        ({("cross", 0): [-1]}, "there is no head -1"),
        ({("cross", False): [0]}, "there is no layer False"),  # not True: ("cross", True) == ("cross", 1)
        ({("self", 0): [0]}, "the kind of attention must be one of ('encoder', 'decoder_self', 'cross')"),
        ({("encoder", 0, 1): [0]}, "keys are (kind, layer) pairs"),
        ({("cross", 0): None}, "as whole numbers"),
        ([("cross", 0)], "list each head as (kind, layer, head)"),
        ([("decoder_self", 1, 9)], "('decoder_self', 1) has heads 0 to 3; there is no head 9"),
    ],
)
def test_a_layer_or_head_that_does_not_exist_is_refused_in_one_line_and_changes_nothing(bad, message):
    model = _model()
    good = {("cross", 1): [0]} if isinstance(bad, dict) else [("cross", 1, 0)]
    heads = {**good, **bad} if isinstance(bad, dict) else [*good, *bad]  # a good entry first: it is not set either
    with pytest.raises(ValueError, match=re.escape(message)) as caught:
        with heads_off(model, heads):
            pytest.fail("the block must not run")
    assert "\n" not in str(caught.value)
    assert all(mask is None for mask in _masks(model))


def test_a_head_mask_of_the_wrong_shape_or_type_is_refused():
    module = MultiHeadAttention(32, 4)
    for bad in (torch.ones(3), torch.ones(4, dtype=torch.long), [True] * 4):
        with pytest.raises(ValueError, match=re.escape("shape (4,), one entry per head")):
            module.head_mask = bad
    assert module.head_mask is None
    with pytest.raises(TypeError, match="course.model"):
        with heads_off("a model", {}):
            pass


# --- importance and pruning, on a random toy translator -----------------------------------


@pytest.fixture(scope="module")
def toy():
    corpus = toy_corpus()
    torch.manual_seed(0)
    model = Transformer(TOY_MODEL, len(corpus.src_vocab), len(corpus.tgt_vocab)).eval()
    vocab = dict(src_vocab=corpus.src_vocab, tgt_vocab=corpus.tgt_vocab)
    sources = [de for de, _ in corpus.text["test_2016_flickr"][:6]]
    references = translate(model, sources, **vocab)  # the model's own output: BLEU 100 with every head on
    return model, vocab, sources, references


def _bleu(hypotheses: list[str], references: list[str]) -> float:
    """The comparable BLEU of the course, as translation.bleu_scores computes it (the token lists feed only its other score)."""
    return bleu_scores(hypotheses, references, [h.split() for h in hypotheses], [r.split() for r in references])["bleu"]


@pytest.fixture(scope="module")
def importance(toy):
    model, vocab, sources, references = toy
    return head_importance(model, sources + ["Ein Mann ."], references + ["A man ."], n=6, progress=False, **vocab)


def test_head_importance_measures_each_head_off_against_every_head_on(toy, importance):
    model, vocab, sources, references = toy
    heads = all_heads(model)
    assert len(heads) == 3 * TOY_MODEL.n_layers * TOY_MODEL.n_heads
    assert importance.baseline == pytest.approx(100.0) and importance.n_sentences == 6 and importance.beam_size == 1
    assert list(importance.bleu) == heads and list(importance.drop) == heads
    assert importance.drop == {h: pytest.approx(100.0 - importance.bleu[h]) for h in heads}
    assert max(importance.drop.values()) > 0, "switching one head off changed no translation of the toy model"
    for head in (("encoder", 0, 1), ("cross", 0, 0)):  # each entry is BLEU with that head off, measured here again
        with heads_off(model, [head]):
            again = translate(model, sources, **vocab)
        assert importance.bleu[head] == pytest.approx(_bleu(again, references))
    ranked = importance.ranked()
    assert sorted(ranked) == sorted(heads)
    assert [importance.drop[h] for h in ranked] == sorted(importance.drop.values())
    assert HeadImportance.from_dict(json.loads(json.dumps(importance.to_dict()))) == importance
    assert all(mask is None for mask in _masks(model))


def test_head_importance_with_beam_search_and_chosen_heads(toy):
    model, vocab, sources, references = toy
    result = head_importance(
        model, sources, references, n=4, beam_size=2, heads=[("decoder_self", 0, 1)], progress=False, **vocab
    )
    assert list(result.bleu) == [("decoder_self", 0, 1)] and result.n_sentences == 4 and result.beam_size == 2
    assert result.baseline == pytest.approx(_bleu(translate(model, sources[:4], beam_size=2, **vocab), references[:4]))
    with pytest.raises(ValueError, match="there is no head 5"):
        head_importance(model, sources, references, heads=[("cross", 0, 5)], progress=False, **vocab)
    with pytest.raises(ValueError, match="one reference per source"):
        head_importance(model, sources, references[:2], progress=False, **vocab)
    with pytest.raises(ValueError, match="n, the number of sentences"):
        head_importance(model, sources, references, n=0, progress=False, **vocab)


def test_pruning_switches_heads_off_in_the_order_of_importance(toy, importance):
    model, vocab, sources, references = toy
    curve = prune_by_importance(model, sources, references, importance=importance, progress=False, **vocab)
    n_heads = len(all_heads(model))
    assert curve.order == importance.ranked() and curve.counts == list(range(n_heads + 1))
    assert curve.bleu[0] == pytest.approx(100.0) and curve.n_sentences == 6
    assert PruningCurve.from_dict(json.loads(json.dumps(curve.to_dict()))) == curve
    for k in (1, 3, n_heads):
        assert curve.bleu[k] == pytest.approx(bleu_with_heads_off(model, sources, references, curve.order[:k], **vocab))
    some = prune_by_importance(
        model, sources, references, importance=importance, counts=[3, 0, 3], progress=False, **vocab
    )
    assert some.counts == [0, 3] and some.bleu == pytest.approx([curve.bleu[0], curve.bleu[3]])
    with pytest.raises(ValueError, match=f"each from 0 to {n_heads}"):
        prune_by_importance(model, sources, references, importance=importance, counts=[n_heads + 1], **vocab)
    measured = prune_by_importance(model, sources, references, counts=[0], n=3, progress=False, **vocab)
    assert measured.counts == [0] and len(measured.order) == n_heads and measured.n_sentences == 3
    assert all(mask is None for mask in _masks(model))


def test_pruning_in_any_order_switches_off_the_first_k_of_that_order(toy):
    model, vocab, sources, references = toy
    heads = all_heads(model)
    order = random.Random(3).sample(heads, len(heads))
    curve = prune_in_order(model, sources, references, order=order, counts=[0, 2, len(heads)], progress=False, **vocab)
    assert curve.order == order and curve.counts == [0, 2, len(heads)]
    for k, bleu in zip(curve.counts, curve.bleu):
        assert bleu == pytest.approx(bleu_with_heads_off(model, sources, references, order[:k], **vocab))
    with pytest.raises(ValueError, match="names a head twice"):
        prune_in_order(model, sources, references, order=[heads[0], heads[0]], progress=False, **vocab)
    with pytest.raises(ValueError, match="there is no head 5"):
        prune_in_order(model, sources, references, order=[("cross", 0, 5)], progress=False, **vocab)
    assert all(mask is None for mask in _masks(model))


def test_head_importance_keeps_the_translations_a_paired_test_needs(toy):
    model, vocab, sources, references = toy
    head = ("encoder", 0, 1)
    kept = head_importance(
        model, sources, references, n=4, heads=[head], progress=False, keep_translations=True, **vocab
    )
    assert kept.translations[None] == translate(model, sources[:4], **vocab)
    with heads_off(model, [head]):
        assert kept.translations[head] == translate(model, sources[:4], **vocab)
    assert kept.bleu[head] == pytest.approx(_bleu(kept.translations[head], references[:4]))
    assert "translations" not in kept.to_dict()
    assert head_importance(model, sources, references, n=4, heads=[head], progress=False, **vocab).translations is None
