"""Embeddings, positional encodings, LayerNorm, feed-forward and residual sublayers."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_lessons.layers import (
    Embeddings,
    LayerNorm,
    LearnedPositionalEmbedding,
    PositionalEncoding,
    PositionwiseFeedForward,
    SublayerConnection,
    layer_norm,
    sinusoidal_positional_encoding,
)

ATOL = 1e-5


# --- LayerNorm -------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(4, 8), (2, 3, 16), (5, 1, 7)])
def test_layer_norm_matches_torch_with_random_affine(shape) -> None:
    d = shape[-1]
    ours = LayerNorm(d)
    ref = nn.LayerNorm(d, eps=1e-5)
    with torch.no_grad():
        ours.weight.normal_()
        ours.bias.normal_()
        ref.weight.copy_(ours.weight)
        ref.bias.copy_(ours.bias)
    x = torch.randn(*shape) * 3 + 1
    xa = x.clone().requires_grad_()
    xb = x.clone().requires_grad_()
    out_a, out_b = ours(xa), ref(xb)
    torch.testing.assert_close(out_a, out_b, atol=ATOL, rtol=0)
    g = torch.randn(*shape)
    (out_a * g).sum().backward()
    (out_b * g).sum().backward()
    torch.testing.assert_close(xa.grad, xb.grad, atol=1e-4, rtol=0)
    torch.testing.assert_close(ours.weight.grad, ref.weight.grad, atol=1e-4, rtol=0)
    torch.testing.assert_close(ours.bias.grad, ref.bias.grad, atol=1e-4, rtol=0)


@pytest.mark.parametrize("scale", [1.0, 1e-3])  # ordinary rows, and rows whose variance is near eps
def test_layer_norm_module_computes_the_written_out_formula(scale) -> None:
    """LayerNorm.forward calls F.layer_norm for speed; the lesson's formula is layer_norm(): same function, same gradients."""
    torch.manual_seed(0)
    ln = LayerNorm(32)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    x = scale * torch.randn(4, 6, 32) + scale
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    fused = ln(xa)
    formula = layer_norm(xb, ln.weight, ln.bias, ln.eps)
    torch.testing.assert_close(fused, formula, atol=ATOL, rtol=0)
    g = torch.randn_like(x)
    weight_grads = []
    for out, inp in ((fused, xa), (formula, xb)):
        ln.zero_grad()
        (out * g).sum().backward()
        weight_grads.append((ln.weight.grad.clone(), ln.bias.grad.clone()))
    torch.testing.assert_close(xa.grad, xb.grad, atol=1e-4 / scale, rtol=1e-5)  # d/dx scales as 1/std
    torch.testing.assert_close(weight_grads[0], weight_grads[1], atol=1e-4, rtol=1e-5)


def test_layer_norm_eps_and_parameter_names() -> None:
    ln = LayerNorm(6, eps=0.5)
    assert {name for name, _ in ln.named_parameters()} == {"weight", "bias"}
    x = torch.randn(3, 6) * 0.1  # small variance: eps matters
    torch.testing.assert_close(ln(x), F.layer_norm(x, (6,), eps=0.5), atol=ATOL, rtol=0)


def test_layer_norm_constant_row_is_finite() -> None:
    out = LayerNorm(4)(torch.full((2, 4), 3.0))
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.zeros(2, 4))


# --- sinusoidal positional encoding ---------------------------------------------


def _pe_by_loop(max_len: int, d_model: int, base: float) -> torch.Tensor:
    """Paper §3.5, one entry at a time with math.sin/math.cos."""
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    for pos in range(max_len):
        for i in range(d_model // 2):
            angle = pos / base ** (2 * i / d_model)
            pe[pos, 2 * i] = math.sin(angle)
            pe[pos, 2 * i + 1] = math.cos(angle)
    return pe


@pytest.mark.parametrize(
    "max_len, d_model, base", [(10, 8, 10000.0), (7, 6, 10000.0), (12, 4, 100.0), (50, 16, 1000.0)]
)
def test_sinusoidal_matches_formula(max_len, d_model, base) -> None:
    pe = sinusoidal_positional_encoding(max_len, d_model, base=base)
    assert pe.shape == (max_len, d_model)
    assert pe.dtype == torch.float32
    # float32 angles up to ~50 rad lose about 4e-6 of absolute precision.
    torch.testing.assert_close(pe.double(), _pe_by_loop(max_len, d_model, base), atol=2e-5, rtol=0)


def test_sinusoidal_default_base_is_papers() -> None:
    torch.testing.assert_close(
        sinusoidal_positional_encoding(20, 8).double(), _pe_by_loop(20, 8, 10000.0), atol=1e-5, rtol=0
    )


def test_sinusoidal_base_changes_all_but_first_pair() -> None:
    a = sinusoidal_positional_encoding(20, 8, base=10000.0)
    b = sinusoidal_positional_encoding(20, 8, base=1000.0)
    # Column pair i = 0 has wavelength 2π whatever the base; the others depend on it.
    torch.testing.assert_close(a[:, :2], b[:, :2])
    assert not torch.allclose(a[1:, 2:], b[1:, 2:])


def test_sinusoidal_rejects_odd_width() -> None:
    with pytest.raises(ValueError):
        sinusoidal_positional_encoding(5, 7)


def test_positional_encoding_adds_table_in_eval() -> None:
    pe = PositionalEncoding(8, dropout=0.5, max_len=12).eval()
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(pe(x), x + sinusoidal_positional_encoding(12, 8)[:5])
    # The table is recomputed, so it stays out of checkpoints.
    assert "pe" not in pe.state_dict()
    assert list(pe.parameters()) == []


def test_positional_encoding_base_argument_reaches_table() -> None:
    pe = PositionalEncoding(8, dropout=0.0, max_len=12, base=100.0)
    torch.testing.assert_close(pe.pe.double(), _pe_by_loop(12, 8, 100.0), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "module", [PositionalEncoding(8, 0.0, max_len=4), LearnedPositionalEmbedding(8, 0.0, max_len=4)]
)
def test_positions_beyond_max_len_raise_clear_error(module) -> None:
    module(torch.zeros(1, 4, 8))  # exactly max_len is fine
    with pytest.raises(ValueError, match="max_len"):
        module(torch.zeros(1, 5, 8))


def test_learned_positional_embedding_adds_one_vector_per_position() -> None:
    lpe = LearnedPositionalEmbedding(6, dropout=0.0, max_len=10).eval()
    x = torch.randn(3, 4, 6)
    torch.testing.assert_close(lpe(x), x + lpe.table.weight[:4])
    assert lpe.table.weight.requires_grad


# --- Embeddings -------------------------------------------------------------------


@pytest.mark.parametrize("d_model", [4, 16, 512])
def test_embeddings_scale_by_sqrt_d_model(d_model) -> None:
    emb = Embeddings(11, d_model)
    tokens = torch.tensor([[1, 2, 10], [0, 0, 5]])
    out = emb(tokens)
    assert out.shape == (2, 3, d_model)
    torch.testing.assert_close(out, emb.table.weight[tokens] * d_model**0.5)


# --- Feed-forward -----------------------------------------------------------------


def test_feed_forward_matches_manual_formula() -> None:
    ffn = PositionwiseFeedForward(6, 10, dropout=0.0)
    x = torch.randn(2, 3, 6)
    w1, b1, w2, b2 = ffn.w_1.weight, ffn.w_1.bias, ffn.w_2.weight, ffn.w_2.bias
    assert w1.shape == (10, 6) and w2.shape == (6, 10)
    # Eq. 2: max(0, x W1 + b1) W2 + b2, W stored transposed by nn.Linear.
    expected = torch.maximum(x @ w1.T + b1, torch.zeros(())) @ w2.T + b2
    torch.testing.assert_close(ffn(x), expected, atol=ATOL, rtol=0)


def test_feed_forward_is_position_wise() -> None:
    ffn = PositionwiseFeedForward(6, 10, dropout=0.0)
    x = torch.randn(1, 4, 6)
    full = ffn(x)
    for t in range(4):
        torch.testing.assert_close(full[:, t], ffn(x[:, t]), atol=ATOL, rtol=0)


# --- SublayerConnection -------------------------------------------------------------


def _randomise_norm(block: SublayerConnection) -> None:
    with torch.no_grad():
        block.norm.weight.normal_()
        block.norm.bias.normal_()


def test_sublayer_post_norm_formula() -> None:
    block = SublayerConnection(8, dropout=0.0, norm_first=False)
    _randomise_norm(block)
    lin = nn.Linear(8, 8)
    x = torch.randn(2, 3, 8)
    expected = F.layer_norm(x + lin(x), (8,), block.norm.weight, block.norm.bias, 1e-5)  # LayerNorm(x + Sublayer(x))
    torch.testing.assert_close(block(x, lin), expected, atol=ATOL, rtol=0)


def test_sublayer_pre_norm_formula() -> None:
    block = SublayerConnection(8, dropout=0.0, norm_first=True)
    _randomise_norm(block)
    lin = nn.Linear(8, 8)
    x = torch.randn(2, 3, 8)
    expected = x + lin(F.layer_norm(x, (8,), block.norm.weight, block.norm.bias, 1e-5))  # x + Sublayer(LayerNorm(x))
    torch.testing.assert_close(block(x, lin), expected, atol=ATOL, rtol=0)


def test_sublayer_dropout_hits_the_branch_not_the_residual() -> None:
    block = SublayerConnection(8, dropout=0.9, norm_first=True).train()
    x = torch.randn(4, 5, 8)
    # A branch that adds nothing: whatever dropout does, the residual passes through untouched.
    torch.testing.assert_close(block(x, torch.zeros_like), x)
    out_a, out_b = block(x, lambda y: y), block(x, lambda y: y)
    assert not torch.allclose(out_a, out_b)  # the branch is dropped at random
