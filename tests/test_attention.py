"""Attention against PyTorch's own implementations.

References: ``F.scaled_dot_product_attention`` for Eq. 1 and
``nn.MultiheadAttention`` (with our weights copied in) for §3.2.2.
``nn.MultiheadAttention`` reads ``True`` in a mask as *blocked*, the opposite of
our convention, so every mask handed to it is inverted on one commented line.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_lessons.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_lessons.masks import causal_mask, padding_mask

ATOL = 1e-5


def _random_bool_mask(*shape: int) -> torch.Tensor:
    """A random mask with at least one visible key in every row."""
    mask = torch.rand(*shape) > 0.4
    mask[..., 0] = True
    return mask


# --- scaled_dot_product_attention --------------------------------------------


@pytest.mark.parametrize(
    "batch_shape, T, S, Dh, Dv",
    [((2, 3), 4, 4, 8, 8), ((2, 3), 5, 7, 8, 6), ((3,), 6, 2, 4, 4), ((3,), 1, 9, 16, 5)],
)
def test_sdpa_matches_torch_without_mask(batch_shape, T, S, Dh, Dv) -> None:
    q = torch.randn(*batch_shape, T, Dh)
    k = torch.randn(*batch_shape, S, Dh)
    v = torch.randn(*batch_shape, S, Dv)
    out, weights = scaled_dot_product_attention(q, k, v)
    assert out.shape == (*batch_shape, T, Dv)
    assert weights.shape == (*batch_shape, T, S)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=ATOL, rtol=0)
    # Weights against the formula written independently with an explicit exp/sum.
    scores = torch.einsum("...td,...sd->...ts", q, k) / math.sqrt(Dh)
    e = torch.exp(scores - scores.amax(-1, keepdim=True))
    torch.testing.assert_close(weights, e / e.sum(-1, keepdim=True), atol=ATOL, rtol=0)


@pytest.mark.parametrize(
    "batch_shape, mask_shape, T, S",
    [
        ((2, 3), (2, 3, 4, 6), 4, 6),  # full mask
        ((2, 3), (2, 1, 1, 6), 4, 6),  # padding-style, broadcast over heads and queries
        ((2, 3), (5, 5), 5, 5),  # causal-style, broadcast over batch and heads
        ((3,), (3, 4, 7), 4, 7),  # 3-D inputs
        ((3,), (1, 7), 4, 7),
    ],
)
def test_sdpa_matches_torch_with_bool_mask(batch_shape, mask_shape, T, S) -> None:
    q = torch.randn(*batch_shape, T, 8)
    k = torch.randn(*batch_shape, S, 8)
    v = torch.randn(*batch_shape, S, 8)
    mask = _random_bool_mask(*mask_shape)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # same convention: True = may attend
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    full = mask.expand_as(weights)
    assert (weights[~full] == 0).all(), "masked keys must get exactly zero weight"
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=ATOL, rtol=0)


def test_sdpa_causal_matches_is_causal() -> None:
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
    out, weights = scaled_dot_product_attention(q, k, v, causal_mask(6))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=ATOL, rtol=0)
    assert (weights.triu(diagonal=1) == 0).all()


def test_sdpa_fully_masked_row_gives_zeros_not_nan() -> None:
    q = torch.randn(2, 3, 8)
    k = torch.randn(2, 4, 8)
    v = torch.randn(2, 4, 8)
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[0, 1] = False  # query 1 of batch 0 sees nothing
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert not torch.isnan(out).any() and not torch.isnan(weights).any()
    assert (weights[0, 1] == 0).all()
    assert (out[0, 1] == 0).all()
    torch.testing.assert_close(weights[1].sum(-1), torch.ones(3))


def test_sdpa_fully_masked_row_gradients_are_finite() -> None:
    q = torch.randn(1, 2, 4, requires_grad=True)
    k = torch.randn(1, 3, 4, requires_grad=True)
    v = torch.randn(1, 3, 4, requires_grad=True)
    mask = torch.tensor([[[True, True, False], [False, False, False]]])
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_sdpa_rejects_non_bool_masks(dtype) -> None:
    q = k = v = torch.randn(1, 3, 4)
    mask = torch.ones(3, 3, dtype=dtype)
    with pytest.raises(TypeError, match="bool"):
        scaled_dot_product_attention(q, k, v, mask)


def test_sdpa_dropout_applies_to_mixing_not_to_returned_weights() -> None:
    q = k = v = torch.randn(2, 3, 4)
    out, weights = scaled_dot_product_attention(q, k, v, dropout=lambda w: torch.zeros_like(w))
    assert (out == 0).all()  # the dropped weights mixed the values
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3))  # the returned ones are pre-dropout


def test_sdpa_does_not_modify_inputs() -> None:
    q, k, v = (torch.randn(2, 3, 4) for _ in range(3))
    mask = _random_bool_mask(3, 3)
    copies = [t.clone() for t in (q, k, v, mask)]
    scaled_dot_product_attention(q, k, v, mask)
    for before, after in zip(copies, (q, k, v, mask)):
        assert torch.equal(before, after)


# --- MultiHeadAttention --------------------------------------------------------


def _torch_mha_like(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    """An nn.MultiheadAttention holding exactly our weights."""
    ref = nn.MultiheadAttention(ours.d_model, ours.n_heads, dropout=0.0, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
        ref.out_proj.weight.copy_(ours.w_o.weight)
        ref.out_proj.bias.copy_(ours.w_o.bias)
    return ref.eval()


def _mha(d_model: int = 16, n_heads: int = 4) -> MultiHeadAttention:
    mha = MultiHeadAttention(d_model, n_heads, dropout=0.0)
    with torch.no_grad():  # non-zero biases, so a missing bias would show
        for lin in (mha.w_q, mha.w_k, mha.w_v, mha.w_o):
            lin.bias.normal_()
    return mha.eval()


def test_mha_rejects_indivisible_heads() -> None:
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 3)


def test_mha_has_four_square_projections() -> None:
    mha = MultiHeadAttention(24, 6)
    assert mha.d_head == 4
    for name in ("w_q", "w_k", "w_v", "w_o"):
        lin = getattr(mha, name)
        assert isinstance(lin, nn.Linear) and lin.weight.shape == (24, 24)


@pytest.mark.parametrize("record", [None, False])  # eval recording path, and the fused path
def test_mha_self_attention_matches_torch(record) -> None:
    ours = _mha()
    ours.record_weights = record
    ref = _torch_mha_like(ours)
    x = torch.randn(3, 5, 16)
    with torch.no_grad():
        expected, ref_w = ref(x, x, x, average_attn_weights=False)
        out = ours(x, x, x)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    if record is None:
        assert ours.attn_weights.shape == (3, 4, 5, 5)
        torch.testing.assert_close(ours.attn_weights, ref_w, atol=ATOL, rtol=0)
    else:
        assert ours.attn_weights is None


@pytest.mark.parametrize("record", [None, False])
def test_mha_cross_attention_with_padding_matches_torch(record) -> None:
    ours = _mha()
    ours.record_weights = record
    ref = _torch_mha_like(ours)
    B, T, S = 3, 4, 7
    x = torch.randn(B, T, 16)
    memory = torch.randn(B, S, 16)
    src = torch.tensor([[1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 0, 0, 0, 0], [1, 2, 3, 4, 5, 0, 0]])
    mask = padding_mask(src, 0)  # (B, 1, 1, S)
    key_padding_mask = ~mask[:, 0, 0, :]  # nn.MultiheadAttention: True = blocked, so invert ours
    with torch.no_grad():
        expected, ref_w = ref(x, memory, memory, key_padding_mask=key_padding_mask, average_attn_weights=False)
        out = ours(x, memory, memory, mask)
    assert out.shape == (B, T, 16)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    if record is None:
        w = ours.attn_weights
        assert w.shape == (B, 4, T, S)
        torch.testing.assert_close(w, ref_w, atol=ATOL, rtol=0)
        assert (w[1, :, :, 3:] == 0).all() and (w[2, :, :, 5:] == 0).all()
        torch.testing.assert_close(w.sum(-1), torch.ones(B, 4, T), atol=ATOL, rtol=0)


def test_mha_causal_and_padding_mask_matches_torch() -> None:
    ours = _mha(d_model=12, n_heads=3)
    ref = _torch_mha_like(ours)
    B, T = 2, 6
    x = torch.randn(B, T, 12)
    tokens = torch.tensor([[5, 5, 5, 5, 5, 5], [5, 5, 5, 5, 0, 0]])
    pad = padding_mask(tokens, 0)
    causal = causal_mask(T)
    with torch.no_grad():
        expected, _ = ref(
            x,
            x,
            x,
            attn_mask=~causal,  # nn.MultiheadAttention: True = blocked, so invert ours
            key_padding_mask=~pad[:, 0, 0, :],
        )
        out = ours(x, x, x, pad & causal)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    assert (ours.attn_weights.triu(diagonal=1) == 0).all()


def test_mha_recorded_and_fused_paths_agree_with_grads() -> None:
    recorded = _mha()
    fused = _mha()
    fused.load_state_dict(recorded.state_dict())
    recorded.record_weights = True
    fused.record_weights = False
    x = torch.randn(2, 5, 16)
    mask = _random_bool_mask(2, 1, 5, 5)
    xa = x.clone().requires_grad_()
    xb = x.clone().requires_grad_()
    out_a = recorded(xa, xa, xa, mask)
    out_b = fused(xb, xb, xb, mask)
    torch.testing.assert_close(out_a, out_b, atol=ATOL, rtol=0)
    out_a.square().sum().backward()
    out_b.square().sum().backward()
    torch.testing.assert_close(xa.grad, xb.grad, atol=1e-4, rtol=0)
    for (name, pa), pb in zip(recorded.named_parameters(), fused.parameters()):
        torch.testing.assert_close(pa.grad, pb.grad, atol=1e-4, rtol=0, msg=name)


def test_mha_records_in_eval_only_by_default() -> None:
    mha = MultiHeadAttention(8, 2, dropout=0.0)
    x = torch.randn(1, 3, 8)
    mha.train()
    mha(x, x, x)
    assert mha.attn_weights is None  # training uses the fused kernel
    mha.eval()
    mha(x, x, x)
    assert mha.attn_weights is not None and mha.attn_weights.shape == (1, 2, 3, 3)
    assert not mha.attn_weights.requires_grad
    mha.train()
    mha.record_weights = True
    mha(x, x, x)
    assert mha.attn_weights is not None


def test_mha_train_mode_without_dropout_equals_eval() -> None:
    mha = _mha()
    x = torch.randn(2, 4, 16)
    with torch.no_grad():
        eval_out = mha.eval()(x, x, x)
        train_out = mha.train()(x, x, x)
    torch.testing.assert_close(train_out, eval_out, atol=ATOL, rtol=0)


def test_mha_dropout_is_active_in_training_only() -> None:
    mha = MultiHeadAttention(16, 4, dropout=0.5)
    x = torch.randn(2, 6, 16)
    mha.train()
    a, b = mha(x, x, x), mha(x, x, x)
    assert not torch.allclose(a, b)
    mha.eval()
    torch.testing.assert_close(mha(x, x, x), mha(x, x, x))


@pytest.mark.parametrize("record", [True, False])
def test_mha_rejects_float_masks_on_both_paths(record) -> None:
    mha = _mha()
    mha.record_weights = record
    x = torch.randn(1, 3, 16)
    with pytest.raises(TypeError, match="bool"):
        mha(x, x, x, torch.zeros(3, 3))


def test_fused_path_in_eval_mode_has_no_dropout() -> None:
    # record_weights=False in eval mode must still be deterministic and equal the recorded path.
    mha = MultiHeadAttention(16, 4, dropout=0.5).eval()
    x = torch.randn(2, 5, 16)
    recorded = mha(x, x, x)
    mha.record_weights = False
    torch.testing.assert_close(mha(x, x, x), recorded, atol=ATOL, rtol=0)
    torch.testing.assert_close(mha(x, x, x), mha(x, x, x))


# --- the fused projections (one matmul for Q, K, V) ------------------------------


def _separate_projections(mha: MultiHeadAttention, query, key, value, mask):
    """The lesson's path: W^Q, W^K, W^V as three matmuls, each split into heads."""
    B, T, D = query.shape
    S = key.size(1)
    q = mha.w_q(query).view(B, T, mha.n_heads, mha.d_head).transpose(1, 2)  # (B, H, T, Dh)
    k = mha.w_k(key).view(B, S, mha.n_heads, mha.d_head).transpose(1, 2)  # (B, H, S, Dh)
    v = mha.w_v(value).view(B, S, mha.n_heads, mha.d_head).transpose(1, 2)  # (B, H, S, Dh)
    return mha._attend_heads(q, k, v, mask)


def _outputs_and_grads(fn, mha, *inputs):
    """fn's output, the gradients of its inputs and of mha's parameters, for a fixed upstream gradient."""
    mha.zero_grad()
    inputs = [x.clone().requires_grad_() for x in inputs]
    out = fn(*inputs)
    (out * torch.linspace(-1, 1, out.size(-1))).sum().backward()
    return out.detach(), [x.grad for x in inputs], {name: p.grad.clone() for name, p in mha.named_parameters()}


@pytest.mark.parametrize("record", [None, True])  # training uses F.sdpa, recording our sdpa
def test_fused_qkv_projection_equals_three_projections(record) -> None:
    """Self-attention projects Q, K and V in one matmul: the same output and gradients, up to rounding."""
    torch.manual_seed(0)
    mha = _mha(32, 4).train()
    mha.record_weights = record
    x, mask = torch.randn(3, 7, 32), causal_mask(7)
    out, (grad_x,), grads = _outputs_and_grads(lambda y: mha(y, y, y, mask), mha, x)
    ref, (ref_grad_x,), ref_grads = _outputs_and_grads(lambda y: _separate_projections(mha, y, y, y, mask), mha, x)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(grad_x, ref_grad_x, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(grads, ref_grads, atol=1e-6, rtol=1e-5)
    q, k, v = mha.project_qkv(x)
    torch.testing.assert_close(q, mha.project_q(x), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(
        (k, v), mha.project_kv(x, x.clone()), atol=1e-6, rtol=1e-5
    )  # a clone: not `key is value`


def test_fused_kv_projection_in_cross_attention_equals_two_projections() -> None:
    """Cross-attention reads the memory as key and value: K and V come from one matmul."""
    torch.manual_seed(0)
    mha = _mha(32, 4).train()
    x, memory = torch.randn(3, 5, 32), torch.randn(3, 9, 32)
    mask = padding_mask(torch.tensor([[1] * 9, [1] * 6 + [0] * 3, [1] * 2 + [0] * 7]), pad_id=0)
    out, grads_in, grads = _outputs_and_grads(lambda y, m: mha(y, m, m, mask), mha, x, memory)
    ref, ref_grads_in, ref_grads = _outputs_and_grads(
        lambda y, m: _separate_projections(mha, y, m, m, mask), mha, x, memory
    )
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(grads_in, ref_grads_in, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(grads, ref_grads, atol=1e-6, rtol=1e-5)


def test_fused_projections_keep_the_three_linears_and_the_state_dict() -> None:
    """The fusion stacks the weights on every call: parameters, names and checkpoints are those of the lesson."""
    mha = MultiHeadAttention(16, 4)
    assert list(mha.state_dict()) == [f"{w}.{p}" for w in ("w_q", "w_k", "w_v", "w_o") for p in ("weight", "bias")]
    x = torch.randn(2, 3, 16)
    with torch.no_grad():
        mha.w_k.weight.zero_()
        mha.w_k.bias.fill_(1.0)  # a change to one Linear shows in the fused path at once
    _, k, _ = mha.project_qkv(x)
    torch.testing.assert_close(k, torch.ones(2, 4, 3, 4))
