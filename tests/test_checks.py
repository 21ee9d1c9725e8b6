"""The learner-facing checks, fed the reference and a zoo of known-buggy answers.

Each check must pass the package's reference (printing one line, returning None), reject every
buggy answer below with the hint that names its bug, say "not implemented yet"
(and return None) for a stub, and report shapes, types and learner exceptions.
The buggy answers are the mistakes learners (and some published tutorials) make.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_lessons import checks, data, decode, model, schedule
from transformer_lessons.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_lessons.checks import ExerciseError
from transformer_lessons.checks import schedule as check_schedule
from transformer_lessons.layers import LayerNorm, PositionwiseFeedForward, sinusoidal_positional_encoding
from transformer_lessons.masks import causal_mask, padding_mask, target_mask
from transformer_lessons.schedule import noam_rate as course_noam_rate

# --- reference answers written the way a learner would --------------------------------


def noam_rate(step, d_model, warmup, factor=1.0):
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


class EncoderLayer(nn.Module):
    """A learner's encoder layer with optional bugs (bug=None is correct)."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, bug=None):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)  # either LayerNorm works
        self.dropout = nn.Dropout(dropout)
        self.bug = bug

    def forward(self, x, src_mask=None):
        bug, attn, ff, n1, n2 = self.bug, self.self_attn, self.feed_forward, self.norm1, self.norm2
        mask = None if bug == "mask_not_passed" else src_mask
        if bug == "swap_norms":
            n1, n2 = n2, n1
        if bug == "shared_norm":
            n2 = n1
        if bug == "pre_norm":
            y = n1(x)
            x = x + self.dropout(attn(y, y, y, mask))
            return x + self.dropout(ff(n2(x)))
        if bug == "no_residual_attn":
            x = n1(self.dropout(attn(x, x, x, mask)))
        elif bug == "norm_sublayer":
            x = x + n1(attn(x, x, x, mask))
        else:
            x = n1(x + self.dropout(attn(x, x, x, mask)))
        if bug == "shape":
            return x[:, :-1]
        if bug == "norm_sublayer":
            return x + n2(ff(x))
        return n2(x + self.dropout(ff(x)))


class DecoderLayer(nn.Module):
    """A learner's decoder layer with optional bugs (bug=None is correct)."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, bug=None):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = LayerNorm(d_model), LayerNorm(d_model), LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.bug = bug

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        bug = self.bug
        if bug == "masks_swapped":
            src_mask, tgt_mask = tgt_mask, src_mask
        self_mask = None if bug == "no_causal" else tgt_mask
        if bug == "mask_transposed":  # an upper-triangle mask: sees the future, a bug no simulation names
            self_mask = tgt_mask.transpose(-2, -1)
        if bug == "pre_norm":
            y = self.norm1(x)
            x = x + self.self_attn(y, y, y, self_mask)
            x = x + self.cross_attn(self.norm2(x), memory, memory, src_mask)
            return x + self.feed_forward(self.norm3(x))
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, self_mask)))
        kv = x if bug == "cross_on_x" else memory
        cross = self.cross_attn(x, kv, kv, None if bug == "no_src_mask" else src_mask)
        x = self.norm2(cross if bug == "no_residual_cross" else x + self.dropout(cross))
        norm3 = self.norm1 if bug == "norms_mixed" else self.norm3
        out = norm3(x + self.dropout(self.feed_forward(x)))
        return out.mean(1) if bug == "shape" else out


# --- known-buggy answers -------------------------------------------------------------


def _scores(q, k):
    return q @ k.transpose(-2, -1)


def sdpa_no_scale(query, key, value, mask=None):
    scores = _scores(query, key)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_scale_dk(query, key, value, mask=None):
    scores = _scores(query, key) / query.size(-1)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_sqrt_of_batch(query, key, value, mask=None):
    scores = _scores(query, key) / math.sqrt(key.size(0))  # the bug: size(0) is the batch, not d_k
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_softmax_dim(query, key, value, mask=None):
    scores = _scores(query, key) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = scores.softmax(dim=-2)
    return weights @ value, weights


def sdpa_inverted_mask(query, key, value, mask=None):
    scores = _scores(query, key) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_fill_discarded(query, key, value, mask=None):
    scores = _scores(query, key) / math.sqrt(query.size(-1))
    if mask is not None:
        scores.masked_fill(mask == 0, -1e9)  # the bug: the result is thrown away
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_value_first(query, key, value, mask=None):
    weights = scaled_dot_product_attention(query, key, value, mask)[1]
    return value @ weights, weights


def sdpa_weights_transposed(query, key, value, mask=None):
    weights = scaled_dot_product_attention(query, key, value, mask)[1]
    return weights.transpose(-2, -1) @ value, weights


def sdpa_key_not_transposed(query, key, value, mask=None):
    weights = (query @ key / math.sqrt(query.size(-1))).softmax(-1)
    return weights @ value, weights


def sdpa_scores_returned(query, key, value, mask=None):
    scores = _scores(query, key) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    return scores.softmax(-1) @ value, scores


def sdpa_zero_after_softmax(query, key, value, mask=None):
    weights = (_scores(query, key) / math.sqrt(query.size(-1))).softmax(-1)
    if mask is not None:
        weights = weights.masked_fill(mask == 0, 0.0)
    return weights @ value, weights


def sdpa_3d_only(query, key, value, mask=None):
    scores = query @ key.transpose(1, 2) / math.sqrt(query.size(2))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_small_fill(query, key, value, mask=None):
    scores = _scores(query, key) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -5.0)  # not negative enough: masked keys keep some weight
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_wrong_shape(query, key, value, mask=None):
    out, weights = scaled_dot_product_attention(query, key, value, mask)
    return out[..., :-1], weights


def sdpa_single_tensor(query, key, value, mask=None):
    return scaled_dot_product_attention(query, key, value, mask)[0]


class BuggyMHA(MultiHeadAttention):
    """The package's MultiHeadAttention with one bug switched on."""

    bug: str | None = None

    def forward(self, query, key, value, mask=None):
        B, T, D = query.shape
        H, Dh, bug = self.n_heads, self.d_head, self.bug
        if bug == "query_for_kv":
            key = value = query

        def split(x):
            if bug == "split_view":
                return x.view(B, H, x.size(1), Dh)  # the bug: mixes positions into heads
            return x.view(B, x.size(1), H, Dh).transpose(1, 2)

        q, k, v = split(self.w_q(query)), split(self.w_k(key)), split(self.w_v(value))
        scale = {"no_scale": 1.0, "scale_d_model": 1 / math.sqrt(D)}.get(bug, 1 / math.sqrt(Dh))
        scores = q @ k.transpose(-2, -1) * scale
        if mask is not None and bug != "mask_ignored":
            scores = scores.masked_fill(mask if bug == "mask_inverted" else ~mask, -1e9)
        out = scores.softmax(-1) @ v  # (B, H, T, Dh)
        if bug in ("concat_no_transpose", "split_view"):
            out = out.reshape(B, T, D)
        else:
            out = out.transpose(1, 2).reshape(B, T, D)
        if bug == "shape":
            return out[..., :-1]
        if bug == "tuple":
            return self.w_o(out), scores
        return out if bug == "no_w_o" else self.w_o(out)


def mha(bug):
    return type(f"MHA_{bug}", (BuggyMHA,), {"bug": bug})


class MHAMisnamed(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        return query


class BuggyLayerNorm(nn.Module):
    bug: str | None = None

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = 1e-5 if self.bug == "ignores_eps" else eps

    def forward(self, x):
        bug = self.bug
        dim = 0 if bug == "dim0" else -1
        mean = x.mean(dim, keepdim=True)
        if bug == "in_place":
            x -= mean
            return self.weight * x / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + self.eps) + self.bias
        if bug == "annotated":  # the Annotated Transformer's version: unbiased std, eps outside
            return self.weight * (x - mean) / (x.std(-1, keepdim=True) + self.eps) + self.bias
        var = x.var(dim, keepdim=True, unbiased=bug == "unbiased")
        denominator = var.sqrt() + self.eps if bug == "eps_outside" else torch.sqrt(var + self.eps)
        normed = (x - mean) / denominator
        if bug == "shape":
            return normed.mean(-1)
        if bug == "no_gain":
            return normed + self.bias
        if bug == "no_bias":
            return self.weight * normed
        return self.weight * normed + self.bias


def layer_norm(bug):
    return type(f"LayerNorm_{bug}", (BuggyLayerNorm,), {"bug": bug})


class LayerNormPlainTensors(BuggyLayerNorm):
    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model, eps)
        del self.weight
        self.weight = torch.ones(d_model)  # not a Parameter: never trained


class BuggyFeedForward(PositionwiseFeedForward):
    bug: str | None = None

    def forward(self, x):
        bug = self.bug
        h = self.w_1(x)
        if bug not in ("no_relu", "relu_after_w_2"):
            h = F.gelu(h) if bug == "gelu" else torch.relu(h)
        if bug == "shape":
            return h
        y = self.w_2(self.dropout(h))
        if bug in ("relu_twice", "relu_after_w_2"):
            y = torch.relu(y)
        return x + y if bug == "residual" else y


def feed_forward(bug):
    return type(f"FFN_{bug}", (BuggyFeedForward,), {"bug": bug})


class FeedForwardTransposed(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_ff, d_model)
        self.w_2 = nn.Linear(d_model, d_ff)

    def forward(self, x):
        return x


def pe_exponent_i(max_len, d_model):
    position = torch.arange(max_len, dtype=torch.float32)[:, None]
    i = torch.arange(d_model // 2, dtype=torch.float32)
    angle = position / 10000 ** (i / d_model)  # the bug: i/d instead of 2i/d
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return pe


def pe_two_i_doubled(max_len, d_model):
    position = torch.arange(max_len, dtype=torch.float32)[:, None]
    i = torch.arange(0, d_model, 2, dtype=torch.float32)  # 0, 2, 4, ...: already 2i
    angle = position / 10000 ** (2 * i / d_model)  # the bug: doubled again, 4i/d
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return pe


def pe_pairs(max_len, d_model):
    return sinusoidal_positional_encoding(max_len, d_model).view(max_len, d_model // 2, 2)  # (L, D/2, [sin, cos])


def layer_with_bug(cls, bug):
    return lambda *args: cls(*args, bug=bug)


def stub(*args, **kwargs):
    raise NotImplementedError("write this")


def _raise_not_implemented(self, *args):
    raise NotImplementedError("write forward")


def forward_stub(cls):
    """A class exercise whose __init__ is given and whose forward is still a stub."""
    return type(f"{cls.__name__}Stub", (cls,), {"forward": _raise_not_implemented})


# --- the table of checks ---------------------------------------------------------------

REFERENCES = {
    "scaled_dot_product_attention": (checks.check_scaled_dot_product_attention, scaled_dot_product_attention),
    "causal_mask": (checks.check_causal_mask, causal_mask),
    "padding_mask": (checks.check_padding_mask, padding_mask),
    "target_mask": (checks.check_target_mask, target_mask),
    "mask_inversion": (checks.check_mask_inversion, lambda blocked: ~blocked),
    "positional_encoding": (checks.check_positional_encoding, sinusoidal_positional_encoding),
    "multi_head_attention": (checks.check_multi_head_attention, MultiHeadAttention),
    "layer_norm": (checks.check_layer_norm, LayerNorm),
    "feed_forward": (checks.check_feed_forward, PositionwiseFeedForward),
    "encoder_layer": (checks.check_encoder_layer, EncoderLayer),
    "decoder_layer": (checks.check_decoder_layer, DecoderLayer),
    "noam_rate": (checks.check_noam_rate, noam_rate),
}

# (check, buggy answer, a phrase the hint must contain)
BUGS = {
    # scaled dot-product attention
    "sdpa-no-scale": ("scaled_dot_product_attention", sdpa_no_scale, "forget to divide the scores by sqrt(d_k)"),
    "sdpa-scale-dk": ("scaled_dot_product_attention", sdpa_scale_dk, "instead of sqrt(d_k)"),
    "sdpa-sqrt-of-batch": ("scaled_dot_product_attention", sdpa_sqrt_of_batch, "LAST axis"),
    "sdpa-softmax-dim": ("scaled_dot_product_attention", sdpa_softmax_dim, "wrong axis"),
    "sdpa-inverted-mask": ("scaled_dot_product_attention", sdpa_inverted_mask, "mask is inverted"),
    "sdpa-fill-discarded": ("scaled_dot_product_attention", sdpa_fill_discarded, "pool pool pool"),
    "sdpa-value-first": ("scaled_dot_product_attention", sdpa_value_first, "value @ weights"),
    "sdpa-weights-transposed": ("scaled_dot_product_attention", sdpa_weights_transposed, "transposed weights"),
    "sdpa-key-not-transposed": ("scaled_dot_product_attention", sdpa_key_not_transposed, "transpose the key"),
    "sdpa-scores-returned": ("scaled_dot_product_attention", sdpa_scores_returned, "BEFORE the softmax"),
    "sdpa-zero-after-softmax": ("scaled_dot_product_attention", sdpa_zero_after_softmax, "after the softmax"),
    "sdpa-3d-only": ("scaled_dot_product_attention", sdpa_3d_only, "heads axis"),
    "sdpa-small-fill": ("scaled_dot_product_attention", sdpa_small_fill, "exactly zero weight"),
    "sdpa-single-tensor": ("scaled_dot_product_attention", sdpa_single_tensor, "return the pair"),
    # causal mask
    "causal-no-diagonal": ("causal_mask", lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1), "diagonal is excluded"),
    "causal-upper": ("causal_mask", lambda n: torch.ones(n, n, dtype=torch.bool).triu(), "upper triangle"),
    "causal-inverted": ("causal_mask", lambda n: torch.ones(n, n, dtype=torch.bool).triu(1), "inverted"),
    "causal-float": ("causal_mask", lambda n: torch.ones(n, n).tril(), "dtype"),
    "causal-int": ("causal_mask", lambda n: torch.ones(n, n, dtype=torch.long).tril(), "dtype"),
    "causal-additive": ("causal_mask", lambda n: torch.full((n, n), float("-inf")).triu(1), "additive"),
    "causal-all-true": ("causal_mask", lambda n: torch.ones(n, n, dtype=torch.bool), "everywhere"),
    # padding mask
    "target-causal-only": ("target_mask", lambda t, p: causal_mask(t.size(1)), "only the causal part"),
    "target-padding-only": ("target_mask", lambda t, p: padding_mask(t, p), "only the padding part"),
    "target-or": ("target_mask", lambda t, p: padding_mask(t, p) | causal_mask(t.size(1)), "OR"),
    "target-inverted": ("target_mask", lambda t, p: ~target_mask(t, p), "inverted"),
    "target-query-padding": ("target_mask", lambda t, p: (t != p)[:, None, :, None] & causal_mask(t.size(1)), "queries (rows)"),
    "target-upper": ("target_mask", lambda t, p: padding_mask(t, p) & causal_mask(t.size(1)).T, "upper triangle"),
    "target-no-diagonal": ("target_mask", lambda t, p: padding_mask(t, p) & causal_mask(t.size(1)).tril(-1), "diagonal"),
    "inversion-unchanged": ("mask_inversion", lambda b: b.clone(), "input unchanged"),
    "inversion-arithmetic": ("mask_inversion", lambda b: 1 - b.int(), "dtype"),
    "inversion-in-place": ("mask_inversion", lambda b: b.logical_not_(), "in place"),
    "inversion-all-true": ("mask_inversion", lambda b: torch.ones_like(b), "attend everywhere"),
    "padding-inverted": ("padding_mask", lambda t, p: (t == p)[:, None, None, :], "inverted"),
    "padding-2d": ("padding_mask", lambda t, p: t != p, "(B, S)"),
    "padding-queries": ("padding_mask", lambda t, p: (t != p)[:, None, :, None], "queries (rows)"),
    "padding-float": ("padding_mask", lambda t, p: (t != p).float()[:, None, None, :], "bool"),
    "padding-hard-coded": ("padding_mask", lambda t, p: (t != 0)[:, None, None, :], "hard-code"),
    # positional encoding
    "pe-swapped": ("positional_encoding", lambda L, D: pe_pairs(L, D).flip(-1).reshape(L, D), "swapped"),
    "pe-base-1000": ("positional_encoding", lambda L, D: sinusoidal_positional_encoding(L, D, base=1000.0), "not 1000"),
    "pe-exponent-i": ("positional_encoding", lambda L, D: pe_exponent_i(L, D), "you used i/d_model"),
    "pe-2i-doubled": ("positional_encoding", pe_two_i_doubled, "the factor 2 is there twice"),
    "pe-start-1": ("positional_encoding", lambda L, D: sinusoidal_positional_encoding(L + 1, D)[1:], "start at 0"),
    "pe-halves": ("positional_encoding", lambda L, D: pe_pairs(L, D).transpose(1, 2).reshape(L, D), "interleaved"),
    "pe-batch-axis": ("positional_encoding", lambda L, D: sinusoidal_positional_encoding(L, D)[None], "2-D table"),
    "pe-float64": ("positional_encoding", lambda L, D: sinusoidal_positional_encoding(L, D).double(), "float32"),
    # multi-head attention
    "mha-no-scale": ("multi_head_attention", mha("no_scale"), "forget to divide the scores by sqrt(d_head)"),
    "mha-scale-d-model": ("multi_head_attention", mha("scale_d_model"), "not sqrt(d_model)"),
    "mha-split-view": ("multi_head_attention", mha("split_view"), "split wrongly"),
    "mha-concat": ("multi_head_attention", mha("concat_no_transpose"), "concatenated wrongly"),
    "mha-no-w-o": ("multi_head_attention", mha("no_w_o"), "w_o is missing"),
    "mha-mask-ignored": ("multi_head_attention", mha("mask_ignored"), "mask is ignored"),
    "mha-mask-inverted": ("multi_head_attention", mha("mask_inverted"), "mask is inverted"),
    "mha-query-for-kv": ("multi_head_attention", mha("query_for_kv"), "query for keys and values"),
    "mha-tuple": ("multi_head_attention", mha("tuple"), "tuple"),
    "mha-misnamed": ("multi_head_attention", MHAMisnamed, "`w_q`"),
    # layer norm
    "ln-unbiased": ("layer_norm", layer_norm("unbiased"), "biased variance"),
    "ln-eps-outside": ("layer_norm", layer_norm("eps_outside"), "INSIDE the square root"),
    "ln-annotated": ("layer_norm", layer_norm("annotated"), "biased variance and put eps inside"),
    "ln-dim0": ("layer_norm", layer_norm("dim0"), "LAST axis"),
    "ln-no-gain": ("layer_norm", layer_norm("no_gain"), "gain is missing"),
    "ln-no-bias": ("layer_norm", layer_norm("no_bias"), "bias is missing"),
    "ln-ignores-eps": ("layer_norm", layer_norm("ignores_eps"), "eps argument is ignored"),
    "ln-in-place": ("layer_norm", layer_norm("in_place"), "in place"),
    "ln-not-parameter": ("layer_norm", LayerNormPlainTensors, "nn.Parameter"),
    # feed-forward
    "ffn-no-relu": ("feed_forward", feed_forward("no_relu"), "ReLU is missing"),
    "ffn-relu-twice": ("feed_forward", feed_forward("relu_twice"), "only between"),
    "ffn-relu-after-w-2": ("feed_forward", feed_forward("relu_after_w_2"), "not after w_2"),
    "ffn-gelu": ("feed_forward", feed_forward("gelu"), "GELU"),
    "ffn-residual": ("feed_forward", feed_forward("residual"), "residual"),
    "ffn-transposed-linears": ("feed_forward", FeedForwardTransposed, "nn.Linear(6, 10)"),
    # encoder layer
    "enc-pre-norm": ("encoder_layer", layer_with_bug(EncoderLayer, "pre_norm"), "pre-norm"),
    "enc-no-residual": ("encoder_layer", layer_with_bug(EncoderLayer, "no_residual_attn"), "residual around self-attention"),
    "enc-mask-not-passed": ("encoder_layer", layer_with_bug(EncoderLayer, "mask_not_passed"), "src_mask is not passed"),
    "enc-norm-on-sublayer": ("encoder_layer", layer_with_bug(EncoderLayer, "norm_sublayer"), "norm the SUM"),
    "enc-norms-swapped": ("encoder_layer", layer_with_bug(EncoderLayer, "swap_norms"), "swapped"),
    "enc-shared-norm": ("encoder_layer", layer_with_bug(EncoderLayer, "shared_norm"), "same LayerNorm"),
    # decoder layer
    "dec-no-causal": ("decoder_layer", layer_with_bug(DecoderLayer, "no_causal"), "future leaks"),
    "dec-mask-transposed": ("decoder_layer", layer_with_bug(DecoderLayer, "mask_transposed"), "future leaks"),
    "dec-cross-on-x": ("decoder_layer", layer_with_bug(DecoderLayer, "cross_on_x"), "x as keys and values"),
    "dec-masks-swapped": ("decoder_layer", layer_with_bug(DecoderLayer, "masks_swapped"), "swapped"),
    "dec-no-src-mask": ("decoder_layer", layer_with_bug(DecoderLayer, "no_src_mask"), "src_mask is not passed"),
    "dec-pre-norm": ("decoder_layer", layer_with_bug(DecoderLayer, "pre_norm"), "pre-norm"),
    "dec-no-residual": ("decoder_layer", layer_with_bug(DecoderLayer, "no_residual_cross"), "residual around the cross-attention"),
    "dec-norms-mixed": ("decoder_layer", layer_with_bug(DecoderLayer, "norms_mixed"), "LayerNorms are mixed up"),
    # learning-rate schedule
    "noam-no-warmup": ("noam_rate", lambda s, d, w, f=1.0: f * d**-0.5 * s**-0.5, "warm-up is missing"),
    "noam-exponent": ("noam_rate", lambda s, d, w, f=1.0: f * d**-0.5 * min(s**-0.5, s * w**-0.5), "exponents"),
    "noam-d-model": ("noam_rate", lambda s, d, w, f=1.0: f * d**0.5 * min(s**-0.5, s * w**-1.5), "power -0.5"),
    "noam-max": ("noam_rate", lambda s, d, w, f=1.0: f * d**-0.5 * max(s**-0.5, s * w**-1.5), "not the larger (max)"),
    "noam-factor-ignored": ("noam_rate", lambda s, d, w, f=1.0: d**-0.5 * min(s**-0.5, s * w**-1.5), "factor"),
    "noam-wrong-type": ("noam_rate", lambda s, d, w, f=1.0: [noam_rate(s, d, w, f)], "float"),
    "noam-unknown": ("noam_rate", lambda s, d, w, f=1.0: 1e-3, "should be"),
}

# Answers of the wrong shape: the message must say "shape".
WRONG_SHAPES = {
    "scaled_dot_product_attention": sdpa_wrong_shape,
    "causal_mask": lambda n: torch.ones(n, n + 1, dtype=torch.bool).tril(),
    "padding_mask": lambda t, p: (t != p)[:, None, :],
    "target_mask": lambda t, p: target_mask(t, p)[..., :-1],
    "mask_inversion": lambda b: (~b)[:-1],
    "positional_encoding": lambda L, D: sinusoidal_positional_encoding(L, D).T,
    "multi_head_attention": mha("shape"),
    "layer_norm": layer_norm("shape"),
    "feed_forward": feed_forward("shape"),
    "encoder_layer": layer_with_bug(EncoderLayer, "shape"),
    "decoder_layer": layer_with_bug(DecoderLayer, "shape"),
}



def sdpa_numpy_softmax(query, key, value, mask=None):
    scores = _scores(query, key) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    e = np.exp(scores.numpy() - scores.numpy().max(-1, keepdims=True))
    weights = torch.tensor(e / e.sum(-1, keepdims=True), dtype=torch.float64)  # the bug: float64
    return weights @ value.double(), weights


def returns_float64(cls):
    """A module class whose output is converted to float64, as a detour through numpy leaves it."""
    return type(f"{cls.__name__}Float64", (cls,), {"forward": lambda self, *args: cls.forward(self, *args).double()})


# Answers of the wrong dtype (float64 from float32 inputs): the message must name the dtype.
WRONG_DTYPES = {
    "scaled_dot_product_attention": sdpa_numpy_softmax,
    "multi_head_attention": returns_float64(MultiHeadAttention),
    "layer_norm": returns_float64(LayerNorm),
    "feed_forward": returns_float64(PositionwiseFeedForward),
    "encoder_layer": returns_float64(model.EncoderLayer),
    "decoder_layer": returns_float64(model.DecoderLayer),
}


# Correct answers written differently from the package: the checks must accept them too.


def sdpa_annotated_style(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)  # a large negative number instead of -inf
    p_attn = F.softmax(scores, dim=-1)
    return torch.matmul(p_attn, value), p_attn


def pe_exp_log(max_len, d_model):
    position = torch.arange(max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


class LayerNormFunctional(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


ALTERNATIVES = {
    "sdpa-annotated-style": ("scaled_dot_product_attention", sdpa_annotated_style),
    "causal-tril-of-ones": ("causal_mask", lambda n: torch.tril(torch.ones(n, n)).bool()),
    "padding-unsqueeze": ("padding_mask", lambda t, p: (t != p).unsqueeze(1).unsqueeze(2)),
    "pe-exp-log": ("positional_encoding", pe_exp_log),
    "layer-norm-nn": ("layer_norm", nn.LayerNorm),
    "layer-norm-functional": ("layer_norm", LayerNormFunctional),
    "noam-tensor": ("noam_rate", lambda s, d, w, f=1.0: f * torch.tensor(d, dtype=torch.float64) ** -0.5 * min(s**-0.5, s * w**-1.5)),
}


# --- tests ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", REFERENCES)
def test_reference_passes_with_one_line(name, capsys):
    check, reference = REFERENCES[name]
    assert check(reference) is None
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"✔ {name}: correct")


# The package's own reference for every check, adapted only where the check's signature differs.
PACKAGE_REFERENCES = {
    "scaled_dot_product_attention": scaled_dot_product_attention,
    "causal_mask": causal_mask,
    "padding_mask": padding_mask,
    "target_mask": target_mask,
    "positional_encoding": sinusoidal_positional_encoding,
    "multi_head_attention": MultiHeadAttention,
    "layer_norm": LayerNorm,
    "feed_forward": PositionwiseFeedForward,
    "encoder_layer": model.EncoderLayer,  # norms in sublayers[i].norm, not norm1, norm2
    "decoder_layer": model.DecoderLayer,
    "noam_rate": schedule.noam_rate,
    "build_vocab": lambda token_lists, min_freq: data.Vocab.build(token_lists, min_freq=min_freq).itos,
    "greedy_decode": decode.greedy_decode,
}


@pytest.mark.parametrize("name", PACKAGE_REFERENCES)
def test_package_reference_passes(name, capsys):
    check = getattr(checks, f"check_{name}")
    assert check(PACKAGE_REFERENCES[name]) is None
    assert capsys.readouterr().out.startswith(f"✔ {name}: correct")


@pytest.mark.parametrize("case", ALTERNATIVES)
def test_other_correct_answers_pass(case, capsys):
    name, answer = ALTERNATIVES[case]
    assert REFERENCES[name][0](answer) is None
    assert capsys.readouterr().out.startswith(f"✔ {name}: correct")


@pytest.mark.parametrize("case", BUGS)
def test_known_bug_is_named(case, capsys):
    name, buggy, hint = BUGS[case]
    check = REFERENCES[name][0]
    with pytest.raises(ExerciseError) as error:
        check(buggy)
    message = str(error.value)
    assert message.startswith(f"{name}: ")
    assert hint in message, message
    assert capsys.readouterr().out == ""  # nothing printed on failure: the error says it all


@pytest.mark.parametrize("name", REFERENCES)
def test_stub_returns_none_and_says_so(name, capsys):
    check = REFERENCES[name][0]
    assert check(stub) is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert out.startswith(f"{name}: not implemented yet — ")


@pytest.mark.parametrize("name", ["multi_head_attention", "layer_norm", "feed_forward", "encoder_layer", "decoder_layer"])
def test_class_with_forward_stub_returns_none(name, capsys):
    check, reference = REFERENCES[name]
    assert check(forward_stub(reference)) is None
    assert "not implemented yet" in capsys.readouterr().out


@pytest.mark.parametrize("name", WRONG_SHAPES)
def test_wrong_shape_is_reported(name):
    check = REFERENCES[name][0]
    with pytest.raises(ExerciseError, match="shape"):
        check(WRONG_SHAPES[name])


@pytest.mark.parametrize("name", WRONG_DTYPES)
def test_wrong_dtype_is_reported(name):
    check = REFERENCES[name][0]
    with pytest.raises(ExerciseError, match="wrong dtype torch.float64: the inputs are torch.float32") as error:
        check(WRONG_DTYPES[name])
    assert "numpy" in str(error.value)


@pytest.mark.parametrize("name", REFERENCES)
def test_learner_exception_is_reported_and_chained(name):
    def broken(*args, **kwargs):
        raise ValueError("oops")

    with pytest.raises(ExerciseError, match="your code raised ValueError: oops") as error:
        REFERENCES[name][0](broken)
    assert isinstance(error.value.__cause__, ValueError)


@pytest.mark.parametrize("name", ["scaled_dot_product_attention", "noam_rate"])
def test_returning_none_asks_for_a_return(name):
    with pytest.raises(ExerciseError, match="return"):
        REFERENCES[name][0](lambda *args: None)


def test_checks_leave_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    checks.check_multi_head_attention(MultiHeadAttention)
    assert torch.equal(torch.rand(3), expected)


def test_exercise_error_is_an_assertion_error():
    assert issubclass(ExerciseError, AssertionError)


def test_every_failure_shows_the_public_class_name():
    # Notebooks print type(error).__name__: a recognised bug and any other failure both read ExerciseError.
    def no_weights(query, key, value, mask=None):
        return scaled_dot_product_attention(query, key, value, mask)[0], None

    for answer, known in ((sdpa_no_scale, True), (no_weights, False)):
        with pytest.raises(ExerciseError) as error:
            checks.check_scaled_dot_product_attention(answer)
        assert type(error.value).__name__ == "ExerciseError"
        assert error.value.known_bug is known


def test_every_check_is_documented_with_its_signature():
    for check, _ in REFERENCES.values():
        doc = check.__doc__ or ""
        assert "Expected signature:" in doc and "Raises:" in doc, check.__name__



def test_buggy_noam_with_default_knobs_is_the_course_formula():
    # check_noam_rate compares with schedule.noam_rate; its knob function only reproduces the bugs,
    # and must not drift from the one formula it varies.
    for d_model, warmup, factor in ((512, 4000, 1.0), (256, 100, 2.0), (128, 1, 0.5)):
        for step in (1, 2, warmup - 1 or 1, warmup, warmup + 1, 10 * warmup, 123_457):
            assert check_schedule._buggy_noam(step, d_model, warmup, factor) == course_noam_rate(step, d_model, warmup, factor)


def test_public_names_live_in_the_package():
    # Notebooks import from transformer_lessons.checks, and help(check_...) names that module (notebook 00 shows it),
    # whichever submodule defines the check.
    for name in checks.__all__:
        assert getattr(checks, name).__module__ == "transformer_lessons.checks", name
    assert sorted(n for n in dir(checks) if n.startswith("check_")) == sorted(n for n in checks.__all__ if n.startswith("check_"))
