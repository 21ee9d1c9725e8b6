"""The options of "from 2017 to today", each against an independent formula or an equivalence.

Every option is a named field of :class:`~transformer_lessons.config.ModelConfig`
that defaults to the paper's choice: RMSNorm (``norm``), SwiGLU (``ffn``),
grouped-query / multi-query attention (``n_kv_heads``) and rotary positions
(``positional="rotary"``).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from transformer_lessons import ModelConfig, make_model
from transformer_lessons.attention import MultiHeadAttention
from transformer_lessons.beam import beam_search
from transformer_lessons.decode import greedy_decode
from transformer_lessons.layers import (
    EmbeddingDropout,
    LayerNorm,
    PositionwiseFeedForward,
    RMSNorm,
    SublayerConnection,
    SwiGLUFeedForward,
    rms_norm,
    swiglu_hidden_width,
)
from transformer_lessons.masks import causal_mask, padding_mask, target_mask
from transformer_lessons.rotary import apply_rotary

PAD = 0
SRC_V, TGT_V = 23, 29


def small_model(**overrides):
    kwargs = dict(n_layers=2, d_model=32, d_ff=64, n_heads=4, dropout=0.0, max_len=40, tie_embeddings=False)
    kwargs.update(overrides)
    torch.manual_seed(0)
    return make_model(SRC_V, TGT_V, **kwargs)


def run(model, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    return model(src, tgt, padding_mask(src, PAD), target_mask(tgt, PAD))


def batch():
    torch.manual_seed(1)
    src, tgt = torch.randint(1, SRC_V, (3, 7)), torch.randint(1, TGT_V, (3, 5))
    src[1, 4:] = PAD
    return src, tgt


#: Each option's field and the paper's choice, its default.
PAPER_DEFAULTS = {"norm": "layernorm", "ffn": "relu", "n_kv_heads": None, "positional": "sinusoidal"}


def test_defaults_are_the_paper():
    c = ModelConfig()
    assert {name: getattr(c, name) for name in PAPER_DEFAULTS} == PAPER_DEFAULTS
    model = make_model(SRC_V, TGT_V, n_layers=1, d_model=32, d_ff=64, n_heads=4)
    assert {name: getattr(model.config, name) for name in PAPER_DEFAULTS} == PAPER_DEFAULTS


def test_an_old_config_without_the_new_fields_still_builds():
    old = {k: v for k, v in ModelConfig().to_dict().items() if k not in PAPER_DEFAULTS or k == "positional"}
    assert ModelConfig(**old) == ModelConfig()


# --- RMSNorm (Zhang & Sennrich 2019) --------------------------------------------------------------


def test_rms_norm_matches_the_formula_written_here():
    torch.manual_seed(0)
    x, g = torch.randn(3, 5, 16) * 3 + 1, torch.randn(16)
    eps = 1e-5
    expected = x / torch.sqrt((x * x).sum(-1, keepdim=True) / 16 + eps) * g  # Zhang & Sennrich Eq. 4, no mean, no bias
    torch.testing.assert_close(rms_norm(x, g, eps), expected)
    norm = RMSNorm(16)
    with torch.no_grad():
        norm.weight.copy_(g)
    torch.testing.assert_close(norm(x), expected)
    assert [name for name, _ in norm.named_parameters()] == ["weight"]  # a gain, no bias


@pytest.mark.skipif(not hasattr(nn, "RMSNorm"), reason="torch.nn.RMSNorm needs torch >= 2.4")
def test_rms_norm_matches_torch_outputs_and_gradients():
    torch.manual_seed(0)
    ours, ref = RMSNorm(16), nn.RMSNorm(16, eps=1e-5)
    with torch.no_grad():
        ours.weight.normal_()
        ref.weight.copy_(ours.weight)
    x = torch.randn(4, 6, 16) * 2 - 1
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    out, expected = ours(xa), ref(xb)
    torch.testing.assert_close(out, expected)
    (out * torch.linspace(-1, 1, 16)).sum().backward()
    (expected * torch.linspace(-1, 1, 16)).sum().backward()
    torch.testing.assert_close(xa.grad, xb.grad)
    torch.testing.assert_close(ours.weight.grad, ref.weight.grad)


@pytest.mark.parametrize("norm_first", [False, True])
def test_rmsnorm_everywhere_a_layernorm_was(norm_first):
    model = small_model(norm="rmsnorm", norm_first=norm_first).eval()
    paper = small_model(norm_first=norm_first)
    assert not any(isinstance(m, (LayerNorm, nn.LayerNorm)) for m in model.modules())
    n_norms = sum(isinstance(m, LayerNorm) for m in paper.modules())
    assert sum(isinstance(m, RMSNorm) for m in model.modules()) == n_norms == 2 * 2 + 2 * 3 + (2 if norm_first else 0)
    assert paper.num_parameters() - model.num_parameters() == n_norms * 32  # no biases
    src, tgt = batch()
    logits = run(model, src, tgt)
    assert logits.shape == (3, 5, TGT_V) and torch.isfinite(logits).all()


@pytest.mark.parametrize("norm_first", [False, True])
def test_sublayer_with_rmsnorm_is_the_written_out_function(norm_first):
    torch.manual_seed(0)
    block = SublayerConnection(8, dropout=0.0, norm_first=norm_first, norm="rmsnorm")
    lin = nn.Linear(8, 8)
    x = torch.randn(2, 3, 8)

    def rms(y):  # the formula again, with the block's gain
        return y / y.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt() * block.norm.weight

    expected = x + lin(rms(x)) if norm_first else rms(x + lin(x))
    torch.testing.assert_close(block(x, lin), expected)


def test_unknown_norm_raises():
    with pytest.raises(ValueError, match="norm must be one of"):
        small_model(norm="batchnorm")


# --- SwiGLU feed-forward (Shazeer 2020) ---------------------------------------------------------


def test_swiglu_matches_the_formula_written_here():
    torch.manual_seed(0)
    ffn = SwiGLUFeedForward(16, 48, dropout=0.0)
    x = torch.randn(2, 5, 16)
    W1, W3, W2 = ffn.w_1.weight.T, ffn.w_3.weight.T, ffn.w_2.weight.T  # (D, h), (D, h), (h, D)
    a = x @ W1
    swish = a / (1 + torch.exp(-a))  # Swish_1(a) = a * sigmoid(a)
    expected = (swish * (x @ W3)) @ W2  # Shazeer 2020, Eq. 6: FFN_SwiGLU = (Swish_1(xW) ⊗ xV) W2, no biases
    torch.testing.assert_close(ffn(x), expected)
    assert W1.shape == (16, 32) and all(lin.bias is None for lin in (ffn.w_1, ffn.w_2, ffn.w_3))


@pytest.mark.parametrize("d_model, d_ff", [(512, 2048), (256, 1024), (128, 256), (256, 512)])
def test_swiglu_has_the_parameters_of_the_relu_network_within_one_percent(d_model, d_ff):
    relu = sum(p.numel() for p in PositionwiseFeedForward(d_model, d_ff).parameters())
    swiglu = sum(p.numel() for p in SwiGLUFeedForward(d_model, d_ff).parameters())
    assert relu == 2 * d_model * d_ff + d_ff + d_model
    assert swiglu == 3 * d_model * swiglu_hidden_width(d_ff)
    assert abs(swiglu - relu) / relu < 0.01, (swiglu, relu)


def test_swiglu_hidden_width_rounds_to_the_nearest_whole_number():
    assert [swiglu_hidden_width(d) for d in (2048, 1024, 3072, 64, 1)] == [1365, 683, 2048, 43, 1]


def test_swiglu_model_uses_it_everywhere_and_trains():
    model = small_model(ffn="swiglu").train()
    ffns = [layer.feed_forward for layer in [*model.encoder.layers, *model.decoder.layers]]
    assert all(isinstance(f, SwiGLUFeedForward) for f in ffns) and len(ffns) == 4
    src, tgt = batch()
    run(model, src, tgt).logsumexp(-1).mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    assert model.eval()(src, tgt).shape == (3, 5, TGT_V)


def test_unknown_ffn_raises():
    with pytest.raises(ValueError, match="ffn must be one of"):
        small_model(ffn="gelu")


# --- grouped-query and multi-query attention (Ainslie et al. 2023; Shazeer 2019) ------------------


def _attention_inputs():
    torch.manual_seed(3)
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    src_mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])[:, None, None, :]  # (B, 1, 1, S)
    return x, memory, src_mask, causal_mask(5)


def _each_way(attn, x, memory, src_mask, tgt_mask):
    """Self-attention (fused Q/K/V), cross-attention (fused K/V), separate key and value tensors: outputs and weights."""
    outs = [attn(x, x, x, tgt_mask), attn(x, memory, memory, src_mask), attn(x, memory, memory.clone(), src_mask)]
    return outs, attn.attn_weights


def _plain_with_repeated_kv(gqa: MultiHeadAttention) -> MultiHeadAttention:
    """A paper multi-head attention whose W^K, W^V repeat each shared head for its group of query heads."""
    H, Hkv, Dh, D = gqa.n_heads, gqa.n_kv_heads, gqa.d_head, gqa.d_model
    plain = MultiHeadAttention(D, H, dropout=0.0)
    state = dict(gqa.state_dict())
    for name in ("w_k", "w_v"):
        w = state[f"{name}.weight"].view(Hkv, Dh, D).repeat_interleave(H // Hkv, dim=0)  # (Hkv, Dh, D) -> (H, Dh, D)
        state[f"{name}.weight"] = w.reshape(H * Dh, D)  # (D, D) as (out, in)
        state[f"{name}.bias"] = state[f"{name}.bias"].view(Hkv, Dh).repeat_interleave(H // Hkv, dim=0).reshape(H * Dh)
    plain.load_state_dict(state)
    return plain


@pytest.mark.parametrize("record", [True, False])
def test_n_kv_heads_equal_to_n_heads_is_the_plain_module(record):
    torch.manual_seed(0)
    plain, same = MultiHeadAttention(32, 4, dropout=0.0), MultiHeadAttention(32, 4, dropout=0.0, n_kv_heads=4)
    same.load_state_dict(plain.state_dict())  # the same names and shapes
    for module in (plain, same):
        module.eval().record_weights = record
    inputs = _attention_inputs()
    for a, b in zip(_each_way(plain, *inputs)[0], _each_way(same, *inputs)[0]):
        assert torch.equal(a, b)


@pytest.mark.parametrize("n_kv_heads", [1, 2])
@pytest.mark.parametrize("record", [True, False])
def test_grouped_query_equals_multi_head_with_repeated_kv_weights(n_kv_heads, record):
    torch.manual_seed(0)
    gqa = MultiHeadAttention(32, 4, dropout=0.0, n_kv_heads=n_kv_heads)
    assert gqa.w_k.weight.shape == gqa.w_v.weight.shape == (n_kv_heads * 8, 32)
    plain = _plain_with_repeated_kv(gqa)
    for module in (gqa, plain):
        module.eval().record_weights = record
    inputs = _attention_inputs()
    (ours, weights), (expected, expected_weights) = _each_way(gqa, *inputs), _each_way(plain, *inputs)
    for a, b in zip(ours, expected):
        torch.testing.assert_close(a, b)
    if record:
        assert weights.shape == (2, 4, 5, 7)  # one map per query head, for the plots
        torch.testing.assert_close(weights, expected_weights)


def test_grouped_query_heads_by_the_formula_written_here():
    torch.manual_seed(0)
    attn = MultiHeadAttention(32, 4, dropout=0.0, n_kv_heads=2).eval()
    x = torch.randn(2, 5, 32)
    B, T, H, Dh = 2, 5, 4, 8
    q = attn.w_q(x).view(B, T, H, Dh)
    k, v = attn.w_k(x).view(B, T, 2, Dh), attn.w_v(x).view(B, T, 2, Dh)
    heads = []
    for i in range(H):
        g = i // 2  # query heads 0, 1 read key/value head 0; heads 2, 3 read head 1
        scores = q[:, :, i] @ k[:, :, g].transpose(1, 2) / Dh**0.5  # (B, T, T)
        heads.append(scores.softmax(-1) @ v[:, :, g])  # (B, T, Dh)
    expected = attn.w_o(torch.cat(heads, dim=-1))
    torch.testing.assert_close(attn(x, x, x), expected)


@pytest.mark.parametrize("n_kv_heads", [0, 3, 8, 2.0, True])
def test_n_kv_heads_must_divide_n_heads(n_kv_heads):
    with pytest.raises(ValueError, match="n_kv_heads must be a whole number >= 1 that divides n_heads"):
        small_model(n_kv_heads=n_kv_heads)


@pytest.mark.parametrize("n_kv_heads", [None, 4, 2, 1])
def test_grouped_query_parameters_and_state_dict_names(n_kv_heads):
    model, paper = small_model(n_kv_heads=n_kv_heads), small_model()
    assert list(model.state_dict()) == list(paper.state_dict())  # the same names: old checkpoints still load
    Hkv = n_kv_heads or 4
    fewer_per_attention = 2 * (32 * 32 + 32) - 2 * (32 * Hkv * 8 + Hkv * 8)  # W^K, W^V and their biases
    assert paper.num_parameters() - model.num_parameters() == 3 * 2 * fewer_per_attention  # 3 attentions per layer pair


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_the_cache_holds_only_the_shared_heads(n_kv_heads):
    model = small_model(n_kv_heads=n_kv_heads).eval()
    src, _ = batch()
    with torch.no_grad():
        cache = model.init_cache(model.encode(src, padding_mask(src, PAD)))
        tokens = torch.ones(3, 1, dtype=torch.long)
        for _ in range(6):
            tokens = model.decode_step(cache, padding_mask(src, PAD), tokens).argmax(-1, keepdim=True)
    assert all(x.shape == (3, n_kv_heads, 6, 8) for x in cache.self_k + cache.self_v)
    assert all(x.shape == (3, n_kv_heads, 7, 8) for x in cache.cross_k + cache.cross_v)
    assert cache.nbytes == 2 * 2 * 3 * n_kv_heads * (6 + 7) * 8 * 4  # k and v, 2 layers, B, Hkv, t + S, Dh, float32


# --- rotary position embeddings (Su et al. 2021, RoFormer) --------------------------------------


def _rotate_by_complex_numbers(x: torch.Tensor, start: int, base: float = 10000.0) -> torch.Tensor:
    """RoFormer Eq. 15 written independently: pairs as complex numbers, times e^{i m θ_j}, θ_j = base^(-2j/Dh)."""
    L, Dh = x.shape[-2:]
    theta = torch.tensor([base ** (-2 * j / Dh) for j in range(Dh // 2)], dtype=torch.float64)
    m = torch.arange(start, start + L, dtype=torch.float64)[:, None]
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], Dh // 2, 2).contiguous())  # x_{2j} + i x_{2j+1}
    turned = z * torch.polar(torch.ones_like(m * theta), m * theta)
    return torch.view_as_real(turned).reshape(x.shape).to(x.dtype)


@pytest.mark.parametrize("start", [0, 5, 300])
def test_rotary_is_the_complex_multiplication_written_here(start):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 16)  # (B, H, L, Dh)
    rotated = apply_rotary(x, start)
    torch.testing.assert_close(rotated, _rotate_by_complex_numbers(x, start), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))  # a rotation keeps lengths
    assert torch.equal(apply_rotary(x, 0)[..., 0, :], x[..., 0, :])  # position 0 is not turned


def test_rotated_scores_depend_only_on_the_distance():
    torch.manual_seed(0)
    q, k = torch.randn(2, 4, 6, 16), torch.randn(2, 4, 6, 16)  # (B, H, L, Dh)
    scores = apply_rotary(q, 0) @ apply_rotary(k, 0).transpose(-2, -1)  # q_m · k_n for m, n in 0..5
    for shift in (1, 17, 250):
        shifted = apply_rotary(q, shift) @ apply_rotary(k, shift).transpose(-2, -1)  # m + shift, n + shift
        torch.testing.assert_close(shifted, scores, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(
        apply_rotary(q, 3) @ apply_rotary(k, 0).transpose(-2, -1), scores, atol=1e-2
    )  # m - n changed


def test_rotary_attention_is_attention_over_rotated_queries_and_keys():
    torch.manual_seed(0)
    attn = MultiHeadAttention(32, 4, dropout=0.0, n_kv_heads=2, rotary_base=10000.0).eval()
    x, mask = torch.randn(2, 6, 32), causal_mask(6)
    q = _rotate_by_complex_numbers(attn.w_q(x).view(2, 6, 4, 8).transpose(1, 2), 0)  # (B, H, T, Dh)
    k = _rotate_by_complex_numbers(attn.w_k(x).view(2, 6, 2, 8).transpose(1, 2), 0).repeat_interleave(2, dim=1)
    v = attn.w_v(x).view(2, 6, 2, 8).transpose(1, 2).repeat_interleave(2, dim=1)  # values are not rotated
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, T, Dh)
    expected = attn.w_o(out.transpose(1, 2).reshape(2, 6, 32))
    torch.testing.assert_close(attn(x, x, x, mask), expected, atol=1e-5, rtol=1e-5)  # fused Q/K/V
    torch.testing.assert_close(attn(x, x.clone(), x.clone(), mask), expected, atol=1e-5, rtol=1e-5)  # separate


def test_rotary_model_adds_nothing_and_rotates_self_attention_only():
    model, paper = small_model(positional="rotary"), small_model()
    assert isinstance(model.src_pos, EmbeddingDropout) and isinstance(model.tgt_pos, EmbeddingDropout)
    assert model.num_parameters() == paper.num_parameters() and list(model.state_dict()) == list(paper.state_dict())
    assert all(layer.self_attn.rotary_base == 10000.0 for layer in [*model.encoder.layers, *model.decoder.layers])
    assert all(layer.cross_attn.rotary_base is None for layer in model.decoder.layers)
    assert all(layer.self_attn.rotary_base is None for layer in paper.encoder.layers)
    model.train()
    src, tgt = batch()
    run(model, src, tgt).logsumexp(-1).mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_rotary_encoder_sees_order_without_any_added_position():
    # Without positions self-attention is permutation-equivariant; the rotation is what breaks it.
    model = small_model(positional="rotary").eval()
    src = torch.randint(1, SRC_V, (1, 6))
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    with torch.no_grad():
        assert not torch.allclose(model.encode(src)[:, perm], model.encode(src[:, perm]), atol=1e-3)


def test_rotary_decodes_past_max_len_identically_with_the_cache():
    model = small_model(positional="rotary", max_len=8).eval()
    src, _ = batch()
    src_mask = padding_mask(src, PAD)
    recomputed = greedy_decode(model, src, src_mask, 20, 1)  # 21 positions > max_len: no table to run out of
    assert recomputed.shape == (3, 21)
    assert torch.equal(greedy_decode(model, src, src_mask, 20, 1, use_cache=True), recomputed)
    ys = beam_search(model, src, src_mask, 20, 1, 2, beam_size=3)
    assert torch.equal(beam_search(model, src, src_mask, 20, 1, 2, beam_size=3, use_cache=True), ys)


# --- every option at once, through a checkpoint ---------------------------------------------------


def test_a_checkpoint_of_every_option_loads_back_and_exports(tmp_path):
    from transformer_lessons.checkpoint import (
        CHECKPOINT_FORMAT,
        CHECKPOINT_VERSION,
        export_for_inference,
        load_checkpoint,
        save_checkpoint,
    )
    from transformer_lessons.data import Vocab
    from transformer_lessons.specials import SPECIALS

    options = dict(
        norm="rmsnorm", ffn="swiglu", n_kv_heads=2, positional="rotary", norm_first=True, tie_embeddings=True
    )
    model = small_model(**options).eval()
    src_vocab = Vocab([*SPECIALS, *(f"s{i}" for i in range(SRC_V - len(SPECIALS)))])
    tgt_vocab = Vocab([*SPECIALS, *(f"t{i}" for i in range(TGT_V - len(SPECIALS)))])
    assert (len(src_vocab), len(tgt_vocab)) == (SRC_V, TGT_V)
    ckpt = dict(
        format=CHECKPOINT_FORMAT,
        version=CHECKPOINT_VERSION,
        model=model.state_dict(),
        model_config=model.config.to_dict(),
        src_vocab=src_vocab.to_dict(),
        tgt_vocab=tgt_vocab.to_dict(),
    )
    save_checkpoint(ckpt, tmp_path / "best.pt")
    src, tgt = batch()
    for path in (tmp_path / "best.pt", tmp_path / "small.pt"):
        if path.name == "small.pt":
            export_for_inference(tmp_path / "best.pt", path, dtype=torch.float32)
        loaded, *_ = load_checkpoint(path, "cpu")
        assert loaded.config == model.config
        assert torch.equal(run(loaded, src, tgt), run(model, src, tgt))
