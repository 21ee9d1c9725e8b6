"""Cached incremental decoding gives the recomputed decoder's logits and exactly its tokens."""

from __future__ import annotations

import os

import pytest
import torch

from transformer_lessons.beam import beam_search
from transformer_lessons.decode import greedy_decode
from transformer_lessons.masks import causal_mask, padding_mask
from transformer_lessons.model import make_model

PAD, BOS, EOS, V = 0, 1, 2, 23
CONFIGS = [
    pytest.param(dict(norm_first=False, tie_embeddings=False, positional="sinusoidal"), id="post-norm"),
    pytest.param(dict(norm_first=True, tie_embeddings=False, positional="sinusoidal"), id="pre-norm"),
    pytest.param(dict(norm_first=False, tie_embeddings=True, positional="sinusoidal"), id="tied"),
    pytest.param(dict(norm_first=True, tie_embeddings=True, positional="learned"), id="pre-norm-tied-learned"),
    pytest.param(dict(norm_first=False, tie_embeddings=False, positional="learned"), id="learned"),
    # Grouped-query and multi-query attention: the cache holds the shared key/value heads only.
    pytest.param(dict(norm_first=False, tie_embeddings=False, positional="sinusoidal", n_kv_heads=2), id="gqa"),
    pytest.param(
        dict(norm_first=True, tie_embeddings=True, n_kv_heads=1, norm="rmsnorm", ffn="swiglu"), id="mqa-rmsnorm-swiglu"
    ),
    # Rotary positions: a new position's key is rotated at its absolute index before it is cached.
    pytest.param(dict(norm_first=False, tie_embeddings=False, positional="rotary"), id="rotary"),
    pytest.param(
        dict(norm_first=True, tie_embeddings=True, positional="rotary", n_kv_heads=2, norm="rmsnorm", ffn="swiglu"),
        id="rotary-gqa-all",
    ),
]


def _model(options: dict, eos_bias: float = 0.0):
    torch.manual_seed(0)
    model = make_model(V, V, n_layers=2, d_model=32, d_ff=64, n_heads=4, max_len=48, **options).eval()
    with torch.no_grad():
        model.generator.bias[EOS] += eos_bias  # only the weight is tied: a bias favours <eos> so that rows finish early
    return model


def _padded_batch():
    torch.manual_seed(1)
    src = torch.randint(3, V, (6, 9))  # (B, S)
    src[1, 5:] = PAD
    src[3, 2:] = PAD
    src[4, 7:] = PAD
    return src, padding_mask(src, PAD)  # (B, S), (B, 1, 1, S)


@pytest.mark.parametrize("options", CONFIGS)
def test_logits_match_the_recomputed_decoder_at_every_step(options):
    model = _model(options)
    src, src_mask = _padded_batch()
    torch.manual_seed(2)
    tgt = torch.cat([torch.full((src.size(0), 1), BOS), torch.randint(3, V, (src.size(0), 12))], dim=1)  # (B, 13)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        full = model.decode(memory, src_mask, tgt, causal_mask(tgt.size(1)))  # (B, T, V)
        cache = model.init_cache(memory)
        for t in range(tgt.size(1)):
            step = model.decode_step(cache, src_mask, tgt[:, t : t + 1])  # (B, V)
            torch.testing.assert_close(step, full[:, t], atol=1e-5, rtol=1e-5, msg=f"step {t}")


def test_several_new_positions_at_once_match_one_at_a_time():
    model = _model(dict(norm_first=False, tie_embeddings=False, positional="sinusoidal"))
    src, src_mask = _padded_batch()
    tgt = torch.cat([torch.full((src.size(0), 1), BOS), torch.randint(3, V, (src.size(0), 6))], dim=1)  # (B, 7)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        full = model.decode(memory, src_mask, tgt, causal_mask(tgt.size(1)))[:, -1]  # (B, V)
        cache = model.init_cache(memory)
        model.decode_step(cache, src_mask, tgt[:, :4])  # a prefix of 4 positions in one call
        step = model.decode_step(cache, src_mask, tgt[:, 4:])  # then the other 3
    assert cache.length == tgt.size(1)
    torch.testing.assert_close(step, full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("options", CONFIGS)
@pytest.mark.parametrize("eos_bias", [0.0, 0.5, 1.0])  # more <eos>: rows finish at different steps
def test_greedy_outputs_are_identical(options, eos_bias):
    model = _model(options, eos_bias)
    src, src_mask = _padded_batch()
    recomputed = greedy_decode(model, src, src_mask, 30, BOS, EOS, PAD)
    cached = greedy_decode(model, src, src_mask, 30, BOS, EOS, PAD, use_cache=True)
    assert torch.equal(cached, recomputed)
    no_eos = greedy_decode(model, src, None, 10, BOS)
    assert torch.equal(greedy_decode(model, src, None, 10, BOS, use_cache=True), no_eos)


@pytest.mark.parametrize("options", CONFIGS)
@pytest.mark.parametrize("eos_bias", [0.0, 0.5, 1.0])  # more <eos>: rows finish at different steps
@pytest.mark.parametrize("beam_size", [1, 2, 4])
def test_beam_outputs_and_scores_are_identical(options, eos_bias, beam_size):
    model = _model(options, eos_bias)
    src, src_mask = _padded_batch()
    ys, scores = beam_search(model, src, src_mask, 25, BOS, EOS, beam_size, 0.6, PAD, return_scores=True)
    ys_c, scores_c = beam_search(
        model, src, src_mask, 25, BOS, EOS, beam_size, 0.6, PAD, return_scores=True, use_cache=True
    )
    assert torch.equal(ys_c, ys)
    torch.testing.assert_close(scores_c, scores, atol=1e-5, rtol=1e-5)


def test_the_cache_grows_by_one_position_per_step_and_reorders_rows():
    model = _model(dict(norm_first=False, tie_embeddings=False, positional="sinusoidal"))
    src, src_mask = _padded_batch()
    B, S, H, Dh = src.size(0), src.size(1), 4, 8
    with torch.no_grad():
        cache = model.init_cache(model.encode(src, src_mask))
        assert cache.length == 0 and cache.batch_size == B
        assert all(k.shape == (B, H, S, Dh) for k in cache.cross_k + cache.cross_v)
        tokens = torch.full((B, 1), BOS)
        for t in range(1, 6):
            tokens = model.decode_step(cache, src_mask, tokens).argmax(-1, keepdim=True)  # (B, 1)
            assert cache.length == t
            assert all(k.shape == (B, H, t, Dh) for k in cache.self_k + cache.self_v)
    before = [k.clone() for k in cache.self_k]
    cache.reorder(torch.tensor([3, 3, 0]))
    assert cache.batch_size == 3 and all(k.shape == (3, H, 5, Dh) for k in cache.self_k + cache.self_v)
    assert all(k.shape == (3, H, S, Dh) for k in cache.cross_k + cache.cross_v)
    assert torch.equal(cache.self_k[1][0], before[1][3]) and torch.equal(cache.self_k[1][2], before[1][0])


def test_positions_past_max_len_are_refused():
    model = _model(dict(norm_first=False, tie_embeddings=False, positional="learned"))
    src, src_mask = _padded_batch()
    with torch.no_grad():
        cache = model.init_cache(model.encode(src, src_mask))
        model.decode_step(cache, src_mask, torch.full((src.size(0), 48), BOS))
        with pytest.raises(ValueError, match="max_len"):
            model.decode_step(cache, src_mask, torch.full((src.size(0), 1), BOS))


# --- the course model on real test sentences ---------------------------------------


@pytest.fixture(scope="module")
def course_and_sentences():
    from transformer_lessons import pretrained
    from transformer_lessons.data import load_split

    try:
        pairs = load_split("test_2016_flickr", data_dir=os.environ.get("TRANSFORMER_LESSONS_DATA"), progress=False)
    except Exception as error:  # no data here and no network: nothing to translate
        pytest.skip(f"Multi30k test_2016_flickr not available: {error}")
    course = pretrained.load_course_model(device="cpu", progress=False)
    return course, [de for de, _ in pairs[:20]]


@pytest.mark.parametrize("beam_size", [1, 4])
def test_the_course_model_translates_identically_with_the_cache(course_and_sentences, beam_size):
    from transformer_lessons.translation import translate

    course, sentences = course_and_sentences
    kwargs = dict(beam_size=beam_size, src_vocab=course.src_vocab, tgt_vocab=course.tgt_vocab)
    recomputed = translate(course.model, sentences, **kwargs)
    cached = translate(course.model, sentences, use_cache=True, **kwargs)
    assert cached == recomputed
    assert len(set(recomputed)) > 10  # real, different translations, not one repeated output


def _textbook_attention(attn, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Self-attention written out in the course's order (Q, then K, then V), for the regression test below."""
    B, T, D = x.shape
    q = attn.w_q(x).view(B, T, attn.n_heads, -1).transpose(1, 2)
    k = attn.w_k(x).view(B, T, attn.n_heads, -1).transpose(1, 2)
    v = attn.w_v(x).view(B, T, attn.n_heads, -1).transpose(1, 2)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return attn.w_o(out.transpose(1, 2).reshape(B, T, D))


def test_training_gradients_are_those_of_the_textbook_order():
    """The cache split attention into project_q / project_kv / attend; training must not notice.

    Until the fused projections, this test asked for bitwise equality: autograd
    sums the three projections' input gradients in the order they were recorded,
    so computing K and V before Q changed the gradient's last bits (an earlier
    version of the cache did exactly this and changed notebook 10's quick model).
    Self-attention now projects Q, K and V in one matmul
    (:meth:`~transformer_lessons.attention.MultiHeadAttention.project_qkv`), whose
    input gradient is one matmul over the three stacked weights instead of a sum
    of three: it changes the last bits on purpose (faster training), so the
    gradient must equal the textbook order's to float rounding, a few ulp.
    """
    from transformer_lessons.attention import MultiHeadAttention

    torch.manual_seed(0)
    attn = MultiHeadAttention(32, 4, dropout=0.0).train()
    x = torch.randn(3, 7, 32)
    mask = causal_mask(7)
    grads = []
    for fn in (lambda y: attn(y, y, y, mask), lambda y: _textbook_attention(attn, y, mask)):
        y = x.clone().requires_grad_()
        (fn(y) * torch.linspace(-1, 1, 32)).sum().backward()
        grads.append(y.grad)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6 * grads[1].abs().max().item(), rtol=1e-6)
