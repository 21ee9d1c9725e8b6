"""Properties of the whole model, and layers compared with torch.nn's Transformer layers."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_lessons import PRESETS, ModelConfig, Transformer, make_model
from transformer_lessons.layers import LayerNorm, LearnedPositionalEmbedding, PositionalEncoding
from transformer_lessons.masks import causal_mask, padding_mask, target_mask
from transformer_lessons.model import DecoderLayer, EncoderLayer

PAD = 0
SRC_V, TGT_V = 23, 29
ATOL = 1e-5


def small_model(**overrides) -> Transformer:
    kwargs = dict(n_layers=2, d_model=32, d_ff=64, n_heads=4, dropout=0.1, max_len=40, tie_embeddings=False)
    kwargs.update(overrides)
    return make_model(SRC_V, TGT_V, **kwargs)


def tokens(B: int, L: int, vocab: int) -> torch.Tensor:
    return torch.randint(1, vocab, (B, L))  # ids >= 1: never the padding id


def pad_right(x: torch.Tensor, extra: int) -> torch.Tensor:
    return torch.cat([x, torch.full((x.size(0), extra), PAD, dtype=x.dtype)], dim=1)


def run(model: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    return model(src, tgt, padding_mask(src, PAD), target_mask(tgt, PAD))


# --- shapes and causality ----------------------------------------------------------------


def test_output_shape() -> None:
    model = small_model().eval()
    logits = run(model, tokens(3, 7, SRC_V), tokens(3, 5, TGT_V))
    assert logits.shape == (3, 5, TGT_V)
    assert torch.isfinite(logits).all()


def test_forward_equals_encode_then_decode() -> None:
    model = small_model().eval()
    src, tgt = tokens(2, 6, SRC_V), tokens(2, 4, TGT_V)
    sm, tm = padding_mask(src, PAD), target_mask(tgt, PAD)
    memory = model.encode(src, sm)
    assert memory.shape == (2, 6, 32)
    torch.testing.assert_close(model.decode(memory, sm, tgt, tm), model(src, tgt, sm, tm))


def test_works_without_masks() -> None:
    model = small_model().eval()
    assert model(tokens(2, 6, SRC_V), tokens(2, 4, TGT_V)).shape == (2, 4, TGT_V)


@pytest.mark.parametrize("cut", [1, 3, 5])
def test_future_target_tokens_do_not_change_earlier_logits(cut: int) -> None:
    model = small_model().eval()
    src, tgt = tokens(2, 6, SRC_V), tokens(2, 6, TGT_V)
    changed = tgt.clone()
    changed[:, cut:] = tokens(2, 6 - cut, TGT_V)
    assert not torch.equal(changed, tgt)
    a, b = run(model, src, tgt), run(model, src, changed)
    torch.testing.assert_close(a[:, :cut], b[:, :cut], atol=ATOL, rtol=0)
    assert not torch.allclose(a[:, cut:], b[:, cut:], atol=1e-3)  # later positions do see the change


def test_without_causal_mask_the_future_leaks() -> None:
    # The opposite of the test above: it shows the causality test can fail.
    model = small_model().eval()
    src, tgt = tokens(1, 5, SRC_V), tokens(1, 5, TGT_V)
    changed = tgt.clone()
    changed[:, -1] = (tgt[:, -1] % (TGT_V - 1)) + 1
    a = model(src, tgt, None, None)
    b = model(src, changed, None, None)
    assert not torch.allclose(a[:, 0], b[:, 0], atol=1e-4)


# --- padding invariance ---------------------------------------------------------------------


def test_extra_source_padding_leaves_outputs_unchanged() -> None:
    model = small_model().eval()
    src, tgt = tokens(3, 6, SRC_V), tokens(3, 5, TGT_V)
    src[1, 4:] = PAD  # already padded in the batch
    a = run(model, src, tgt)
    b = run(model, pad_right(src, 7), tgt)
    torch.testing.assert_close(a, b, atol=ATOL, rtol=0)


def test_extra_target_padding_leaves_real_positions_unchanged() -> None:
    model = small_model().eval()
    src, tgt = tokens(2, 6, SRC_V), tokens(2, 5, TGT_V)
    a = run(model, src, tgt)
    b = run(model, src, pad_right(tgt, 4))
    assert b.shape == (2, 9, TGT_V)
    torch.testing.assert_close(a, b[:, :5], atol=ATOL, rtol=0)


def test_sentence_alone_equals_sentence_in_padded_batch() -> None:
    model = small_model().eval()
    short_src, short_tgt = tokens(1, 3, SRC_V), tokens(1, 2, TGT_V)
    long_src, long_tgt = tokens(1, 8, SRC_V), tokens(1, 6, TGT_V)
    src = torch.cat([pad_right(short_src, 5), long_src])
    tgt = torch.cat([pad_right(short_tgt, 4), long_tgt])
    batch = run(model, src, tgt)
    torch.testing.assert_close(batch[0, :2], run(model, short_src, short_tgt)[0], atol=ATOL, rtol=0)
    torch.testing.assert_close(batch[1], run(model, long_src, long_tgt)[0], atol=ATOL, rtol=0)


def test_source_padding_without_mask_does_change_outputs() -> None:
    # Control: the invariance above is due to the mask, so the test can fail.
    model = small_model().eval()
    src, tgt = tokens(1, 4, SRC_V), tokens(1, 3, TGT_V)
    a = model(src, tgt, None, target_mask(tgt, PAD))
    b = model(pad_right(src, 3), tgt, None, target_mask(tgt, PAD))
    assert not torch.allclose(a, b, atol=1e-4)


# --- recorded attention -----------------------------------------------------------------------


def test_masked_positions_get_zero_attention_everywhere() -> None:
    model = small_model(n_layers=3).eval()
    B, S, T = 3, 7, 6
    src, tgt = tokens(B, S, SRC_V), tokens(B, T, TGT_V)
    src_len = [7, 4, 2]
    tgt_len = [6, 3, 5]
    for b in range(B):
        src[b, src_len[b] :] = PAD
        tgt[b, tgt_len[b] :] = PAD
    run(model, src, tgt)
    w = model.attention_weights()
    assert set(w) == {"encoder", "decoder_self", "cross"}
    for kind, shape in (("encoder", (B, 4, S, S)), ("decoder_self", (B, 4, T, T)), ("cross", (B, 4, T, S))):
        assert len(w[kind]) == 3
        for layer in w[kind]:
            assert layer.shape == shape
            torch.testing.assert_close(layer.sum(-1), torch.ones(shape[:-1]), atol=ATOL, rtol=0)
            assert (layer >= 0).all()
    for b in range(B):
        for layer in w["encoder"] + w["cross"]:
            assert (layer[b, :, :, src_len[b] :] == 0).all()  # padding keys of the source
            assert (layer[b, :, :, : src_len[b]] > 0).all()  # and nothing else is blocked
        for layer in w["decoder_self"]:
            assert (layer[b].triu(diagonal=1) == 0).all()  # future keys
            assert (layer[b, :, :, tgt_len[b] :] == 0).all()  # padding keys of the target
            assert (layer[b].tril()[:, : tgt_len[b], : tgt_len[b]] > 0).sum() == 4 * tgt_len[b] * (tgt_len[b] + 1) // 2


def test_attention_weights_before_eval_forward_raises_with_hint() -> None:
    model = small_model()
    with pytest.raises(RuntimeError, match="eval"):
        model.attention_weights()  # nothing run yet
    model.train()
    run(model, tokens(1, 4, SRC_V), tokens(1, 3, TGT_V))  # training uses the fused path: no weights
    with pytest.raises(RuntimeError, match=r"model\.eval\(\)|set_record_attention"):
        model.attention_weights()


def test_set_record_attention() -> None:
    model = small_model(dropout=0.0)
    src, tgt = tokens(2, 4, SRC_V), tokens(2, 3, TGT_V)
    model.train()
    model.set_record_attention(True)
    logits_recorded = run(model, src, tgt)
    assert model.attention_weights()["cross"][0].shape == (2, 4, 3, 4)
    model.set_record_attention(False)
    model.eval()
    logits_fused = run(model, src, tgt)
    with pytest.raises(RuntimeError):
        model.attention_weights()
    torch.testing.assert_close(logits_recorded, logits_fused, atol=ATOL, rtol=0)  # same function either way
    model.set_record_attention(None)  # back to the default: eval records
    run(model, src, tgt)
    assert len(model.attention_weights()["encoder"]) == 2


# --- options ------------------------------------------------------------------------------------


def test_learned_positions_option() -> None:
    model = small_model(positional="learned").eval()
    assert isinstance(model.src_pos, LearnedPositionalEmbedding)
    assert isinstance(model.tgt_pos, LearnedPositionalEmbedding)
    assert run(model, tokens(2, 5, SRC_V), tokens(2, 4, TGT_V)).shape == (2, 4, TGT_V)
    sinusoidal = small_model()
    assert isinstance(sinusoidal.src_pos, PositionalEncoding)
    # Two trained tables of max_len x d_model; the sinusoid has none.
    assert model.num_parameters() - sinusoidal.num_parameters() == 2 * 40 * 32


def test_unknown_positional_raises() -> None:
    with pytest.raises(ValueError, match="positional"):
        small_model(positional="banana")


def test_norm_first_builds_final_layer_norms_and_runs() -> None:
    post = small_model()
    assert isinstance(post.encoder.norm, nn.Identity) and isinstance(post.decoder.norm, nn.Identity)
    pre = small_model(norm_first=True).eval()
    assert isinstance(pre.encoder.norm, LayerNorm) and isinstance(pre.decoder.norm, LayerNorm)
    assert all(s.norm_first for s in pre.modules() if hasattr(s, "norm_first"))
    logits = run(pre, tokens(2, 5, SRC_V), tokens(2, 4, TGT_V))
    assert logits.shape == (2, 4, TGT_V) and torch.isfinite(logits).all()
    assert pre.num_parameters() - post.num_parameters() == 2 * 2 * 32


def test_tie_embeddings_shares_one_parameter() -> None:
    tied = small_model(tie_embeddings=True)
    assert tied.generator.weight is tied.tgt_embed.table.weight
    untied = small_model(tie_embeddings=False)
    assert untied.generator.weight is not untied.tgt_embed.table.weight
    assert untied.num_parameters() - tied.num_parameters() == TGT_V * 32
    tied.train()
    loss = run(tied, tokens(2, 4, SRC_V), tokens(2, 3, TGT_V)).logsumexp(-1).mean()
    loss.backward()
    assert tied.tgt_embed.table.weight.grad is not None


def test_the_defaults_tie_as_the_paper_does() -> None:
    # §3.4: the target embedding and the pre-softmax projection share one matrix; ModelConfig and make_model
    # promise the paper's choices by default.
    assert ModelConfig().tie_embeddings is True
    model = make_model(SRC_V, TGT_V, n_layers=1, d_model=32, d_ff=64, n_heads=4)
    assert model.generator.weight is model.tgt_embed.table.weight


def test_preset_tiny_builds() -> None:
    model = Transformer(PRESETS["tiny"], SRC_V, TGT_V).eval()
    assert model.config is PRESETS["tiny"]
    assert run(model, tokens(2, 5, SRC_V), tokens(2, 4, TGT_V)).shape == (2, 4, TGT_V)


# --- initialisation and sizes -----------------------------------------------------------------


def test_weight_matrices_are_xavier_uniform() -> None:
    model = make_model(300, 400, n_layers=1, d_model=64, d_ff=256, n_heads=4, max_len=100, positional="learned")
    matrices = [(n, p) for n, p in model.named_parameters() if p.dim() > 1]
    assert len(matrices) >= 14  # 4+4+4 attention, 2+2 FFN, 2 embeddings, 2 positions, generator
    for name, p in matrices:
        fan_out, fan_in = p.shape  # nn.Linear and nn.Embedding store (out, in)
        bound = math.sqrt(6.0 / (fan_in + fan_out))  # Glorot & Bengio (2010), uniform
        std = bound / math.sqrt(3.0)
        assert p.abs().max() <= bound + 1e-6, name
        assert abs(p.std().item() - std) < 0.05 * std, (name, p.std().item(), std)
        assert abs(p.mean().item()) < 0.05 * std, name


def test_make_model_defaults_are_the_paper_base_model() -> None:
    # Paper Table 3, base: N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1.
    defaults = {k: v.default for k, v in inspect.signature(make_model).parameters.items()}
    paper = dict(n_layers=6, d_model=512, d_ff=2048, n_heads=8, dropout=0.1, pe_base=10000.0)
    assert {k: defaults[k] for k in paper} == paper
    assert defaults["norm_first"] is False and defaults["positional"] == "sinusoidal"
    assert defaults["tie_embeddings"] is True  # §3.4: the output projection shares the target embedding
    base = ModelConfig()
    assert (base.n_layers, base.d_model, base.d_ff, base.n_heads, base.dropout) == (6, 512, 2048, 8, 0.1)
    assert base.d_head == 64  # d_k = d_v = 64
    assert PRESETS["base"] == base


def _expected_parameter_count(src_v: int, tgt_v: int, n: int, d: int, d_ff: int, tied: bool = True) -> int:
    """Count of Figure 1 by hand: weights + biases of every Linear, gain + bias of every LayerNorm.

    ``tied`` (§3.4): the generator reuses the target embedding's matrix and adds only its bias.
    """
    attention = 4 * (d * d + d)  # W^Q, W^K, W^V, W^O with biases
    ffn = (d * d_ff + d_ff) + (d_ff * d + d)
    norm = 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    embeddings = src_v * d + tgt_v * d  # the sinusoid has no parameters
    generator = (0 if tied else d * tgt_v) + tgt_v
    return embeddings + n * (encoder_layer + decoder_layer) + generator


def test_base_model_parameter_count_matches_hand_count() -> None:
    src_v, tgt_v = 8000, 6000
    with torch.device("meta"):  # shapes only: no memory, no time
        model = make_model(src_v, tgt_v)
        reference_stack = nn.Transformer(
            d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6, dim_feedforward=2048, batch_first=True
        )
    assert model.num_parameters() == _expected_parameter_count(src_v, tgt_v, 6, 512, 2048)
    with torch.device("meta"):
        untied = make_model(src_v, tgt_v, tie_embeddings=False)
    assert untied.num_parameters() == _expected_parameter_count(src_v, tgt_v, 6, 512, 2048, tied=False)
    # Independent cross-check: nn.Transformer's stacks hold the same layers plus a final
    # LayerNorm after the encoder and after the decoder (4 * d_model parameters).
    ours_stack = sum(p.numel() for p in model.encoder.parameters()) + sum(p.numel() for p in model.decoder.parameters())
    assert ours_stack == sum(p.numel() for p in reference_stack.parameters()) - 4 * 512
    # The layers alone are the ~44M of the paper's 65M base model; the rest is the 37k vocabulary.
    assert ours_stack == 44_138_496


@pytest.mark.parametrize("options", [{}, {"norm_first": True}, {"positional": "learned"}, {"tie_embeddings": True}])
def test_gradients_reach_every_parameter(options) -> None:
    model = small_model(**options).train()
    src, tgt = tokens(3, 6, SRC_V), tokens(3, 5, TGT_V)
    src[0, 4:] = PAD
    logits = run(model, src, tgt)
    loss = F.cross_entropy(logits.reshape(-1, TGT_V), tokens(3, 5, TGT_V).reshape(-1))
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"no gradient reached {name}"
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, f"zero gradient at {name}"


# --- against torch.nn's layers ----------------------------------------------------------------


def _copy_attention(ours, ref: nn.MultiheadAttention) -> None:
    ref.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
    ref.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
    ref.out_proj.weight.copy_(ours.w_o.weight)
    ref.out_proj.bias.copy_(ours.w_o.bias)


def _copy_norm(ours: LayerNorm, ref: nn.LayerNorm) -> None:
    ref.weight.copy_(ours.weight)
    ref.bias.copy_(ours.bias)


def _randomise(module: nn.Module) -> None:
    with torch.no_grad():  # random biases and gains too, so a swapped one would show
        for p in module.parameters():
            p.normal_(0.0, 0.3)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_torch(norm_first: bool) -> None:
    D, H, F_, B, S = 16, 4, 32, 3, 6
    ours = EncoderLayer(D, H, F_, dropout=0.0, norm_first=norm_first).eval()
    _randomise(ours)
    ref = nn.TransformerEncoderLayer(
        D, H, F_, dropout=0.0, activation="relu", layer_norm_eps=1e-5, batch_first=True, norm_first=norm_first
    ).eval()
    with torch.no_grad():
        _copy_attention(ours.self_attn, ref.self_attn)
        ref.linear1.load_state_dict(ours.feed_forward.w_1.state_dict())
        ref.linear2.load_state_dict(ours.feed_forward.w_2.state_dict())
        _copy_norm(ours.sublayers[0].norm, ref.norm1)
        _copy_norm(ours.sublayers[1].norm, ref.norm2)
    x = torch.randn(B, S, D)
    src = torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]])
    mask = padding_mask(src, PAD)
    # Gradients on (requires_grad input) keep nn's layer off its inference fast path.
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = ours(xa, mask)
    expected = ref(xb, src_key_padding_mask=~mask[:, 0, 0, :])  # nn.Transformer*: True = blocked, so invert ours
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    out.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(xa.grad, xb.grad, atol=1e-4, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(norm_first: bool) -> None:
    D, H, F_, B, S, T = 16, 4, 32, 2, 7, 5
    ours = DecoderLayer(D, H, F_, dropout=0.0, norm_first=norm_first).eval()
    _randomise(ours)
    ref = nn.TransformerDecoderLayer(
        D, H, F_, dropout=0.0, activation="relu", layer_norm_eps=1e-5, batch_first=True, norm_first=norm_first
    ).eval()
    with torch.no_grad():
        _copy_attention(ours.self_attn, ref.self_attn)
        _copy_attention(ours.cross_attn, ref.multihead_attn)
        ref.linear1.load_state_dict(ours.feed_forward.w_1.state_dict())
        ref.linear2.load_state_dict(ours.feed_forward.w_2.state_dict())
        for i, ref_norm in enumerate((ref.norm1, ref.norm2, ref.norm3)):
            _copy_norm(ours.sublayers[i].norm, ref_norm)
    x = torch.randn(B, T, D)
    memory = torch.randn(B, S, D)
    src = torch.tensor([[1] * 7, [1, 1, 1, 0, 0, 0, 0]])
    tgt = torch.tensor([[1] * 5, [1, 1, 1, 1, 0]])
    src_mask, tgt_mask = padding_mask(src, PAD), target_mask(tgt, PAD)
    out = ours(x, memory, src_mask, tgt_mask)
    # nn.Transformer*: True = blocked, so each of our masks is inverted.
    expected = ref(
        x,
        memory,
        tgt_mask=~causal_mask(T),
        tgt_key_padding_mask=~padding_mask(tgt, PAD)[:, 0, 0, :],
        memory_key_padding_mask=~src_mask[:, 0, 0, :],
    )
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
