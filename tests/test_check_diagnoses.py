"""Diagnoses of what the learner actually built (issue 18): their own epsilon, sub-modules and dropout, two bugs at once.

A check's bug simulations used to be built from the reference's parts and defaults,
so an answer that differs in two ways, or in one way on top of the learner's own
LayerNorm, got only "differs from the reference". These answers are written for the
tests, each after a case that real tutorial code showed (issue 18): the checks must
name what is wrong, both things where there are two.

Also here: what ``check_scaled_dot_product_attention`` does with a query whose keys
are all blocked, and that the verdict points to notebook 03, which shows the three answers.
"""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import pytest
import torch
from torch import nn

from check_helpers import failure
from transformer_lessons import checks
from transformer_lessons.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_lessons.layers import LayerNorm, PositionwiseFeedForward

ROOT = Path(__file__).resolve().parents[1]


# --- answers written for these tests -----------------------------------------------------------


class OwnEpsLayerNorm(nn.Module):
    """A learner's LayerNorm with its own default eps 1e-6, the unbiased std and eps outside the square root."""

    def __init__(self, d_model, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        return self.weight * (x - mean) / (x.std(-1, keepdim=True) + self.eps) + self.bias


class EpsNamedEpsilon(OwnEpsLayerNorm):
    """The same, keeping its epsilon under another name the check knows (BERT's style)."""

    def __init__(self, d_model, eps=1e-6):
        super().__init__(d_model, eps)
        del self.eps
        self.variance_epsilon = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        return self.weight * (x - mean) / (x.std(-1, keepdim=True) + self.variance_epsilon) + self.bias


def encoder_layer(norm_cls, pre_norm, pass_dropout=True):
    """A learner's encoder layer with norms of class norm_cls, pre-norm or post-norm."""

    class Layer(nn.Module):
        def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
            super().__init__()
            # pass_dropout=False: the attention keeps MultiHeadAttention's own default rate, 0.1
            self.self_attn = MultiHeadAttention(d_model, n_heads, *((dropout,) if pass_dropout else ()))
            self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
            self.norm1, self.norm2 = norm_cls(d_model), norm_cls(d_model)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x, src_mask=None):
            if pre_norm:
                y = self.norm1(x)
                x = x + self.dropout(self.self_attn(y, y, y, src_mask))
                return x + self.dropout(self.feed_forward(self.norm2(x)))
            x = self.norm1(x + self.dropout(self.self_attn(x, x, x, src_mask)))
            return self.norm2(x + self.dropout(self.feed_forward(x)))

    return Layer


class PreNormDecoderLayer(nn.Module):
    """A learner's pre-norm decoder layer with their own LayerNorm class (unbiased std, eps outside)."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (OwnEpsLayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        y = self.norm1(x)
        x = x + self.dropout(self.self_attn(y, y, y, tgt_mask))
        x = x + self.dropout(self.cross_attn(self.norm2(x), memory, memory, src_mask))
        return x + self.dropout(self.feed_forward(self.norm3(x)))


def pe_base_1000_no_exp(max_len, d_model):
    """Two bugs at once: base 1000, and the log-space frequencies used without their exp."""
    position = torch.arange(max_len).unsqueeze(1)
    log_frequency = torch.arange(0, d_model, 2) * -(math.log(1000.0) / d_model)  # the exp is missing
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * log_frequency)
    pe[:, 1::2] = torch.cos(position * log_frequency)
    return pe


def pe_no_exp(max_len, d_model):
    position = torch.arange(max_len).unsqueeze(1)
    log_frequency = torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * log_frequency)
    pe[:, 1::2] = torch.cos(position * log_frequency)
    return pe


# --- the three cases of issue 18 -------------------------------------------------------------------


@pytest.mark.parametrize("cls", [OwnEpsLayerNorm, EpsNamedEpsilon])
def test_layer_norm_with_its_own_eps_and_two_formula_slips_is_named_as_both(cls):
    error = failure(checks.check_layer_norm, cls)
    message = str(error)
    assert error.known_bug
    assert "two things differ" in message
    assert "biased variance and put eps inside" in message  # the formula
    assert "default eps is 1e-06" in message  # their own epsilon, read from their module


def test_pre_norm_encoder_layer_with_the_learners_own_layer_norm_names_pre_norm_and_the_norm():
    message = str(failure(checks.check_encoder_layer, encoder_layer(OwnEpsLayerNorm, pre_norm=True)))
    assert "two things differ" in message
    assert "that is pre-norm" in message
    assert "your LayerNorm (OwnEpsLayerNorm) is not nn.LayerNorm's function" in message


def test_positional_encoding_with_base_1000_and_no_exp_names_both():
    message = str(failure(checks.check_positional_encoding, pe_base_1000_no_exp))
    assert "two things differ" in message
    assert "not 1000" in message
    assert "the exp that turns it back into a frequency is missing" in message


# --- the same machinery, one difference at a time --------------------------------------------------


def test_post_norm_encoder_layer_with_the_learners_own_layer_norm_names_the_norm_alone():
    message = str(failure(checks.check_encoder_layer, encoder_layer(OwnEpsLayerNorm, pre_norm=False)))
    assert "two things differ" not in message
    assert "your LayerNorm (OwnEpsLayerNorm) is not nn.LayerNorm's function" in message
    assert "check_layer_norm" in message  # where to look next, without the formula


def test_pre_norm_encoder_layer_with_a_standard_layer_norm_names_pre_norm_alone():
    message = str(failure(checks.check_encoder_layer, encoder_layer(LayerNorm, pre_norm=True)))
    assert "two things differ" not in message and "that is pre-norm" in message


def test_pre_norm_decoder_layer_with_the_learners_own_layer_norm_names_both():
    message = str(failure(checks.check_decoder_layer, PreNormDecoderLayer))
    assert "two things differ" in message and "that is pre-norm" in message
    assert "is not nn.LayerNorm's function" in message


def test_positional_encoding_without_exp_alone_is_named():
    message = str(failure(checks.check_positional_encoding, pe_no_exp))
    assert "two things differ" not in message and "exp" in message


def test_a_sub_module_built_without_the_dropout_argument_is_named_with_its_rate():
    # The Annotated Transformer's make_model builds MultiHeadedAttention(h, d_model) without its dropout
    # argument, so the attention drops at its default 0.1 whatever make_model's dropout says.
    message = str(failure(checks.check_encoder_layer, encoder_layer(LayerNorm, pre_norm=False, pass_dropout=False)))
    assert "`self_attn.dropout` with p=0.1" in message


# --- a query whose keys are all blocked (notebook 03) -----------------------------------------------


def sdpa_nan_for_blocked(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # an all-blocked row: softmax 0/0 = NaN
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_equal_for_blocked(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)  # an all-blocked row: every key -1e9, equal weights
    weights = scores.softmax(-1)
    return weights @ value, weights


def sdpa_nan_everywhere(query, key, value, mask=None):
    out, weights = sdpa_nan_for_blocked(query, key, value, mask)
    if mask is not None and not mask.any(-1).all():
        out = out + out.sum() * 0  # a reduction over the NaN row spreads it to every query
    return out, weights


def sdpa_one_key_for_blocked(query, key, value, mask=None):
    out, weights = sdpa_nan_for_blocked(query, key, value, mask)
    if mask is not None:
        blocked = ~mask.any(-1, keepdim=True)  # (..., T, 1)
        first = torch.zeros_like(weights)
        first[..., 0] = 1.0
        weights = torch.where(blocked, first, weights)  # all the weight on key 0, which is blocked
        out = weights @ value
    return out, weights


def test_the_reference_zeros_for_a_blocked_query_keep_the_pass_line(capsys):
    checks.check_scaled_dot_product_attention(scaled_dot_product_attention)
    assert capsys.readouterr().out == (
        "✔ scaled_dot_product_attention: correct (checked shapes, values against "
        "F.scaled_dot_product_attention, masking, rows sum to 1, heads axis)\n"
    )


@pytest.mark.parametrize(
    "answer, says",
    [
        (sdpa_nan_for_blocked, "gets NaN from yours"),
        (sdpa_equal_for_blocked, "gets equal weights on every key from yours"),
    ],
)
def test_nan_or_equal_weights_for_a_blocked_query_pass_and_the_verdict_says_so(answer, says, capsys):
    assert checks.check_scaled_dot_product_attention(answer) is None
    line = capsys.readouterr().out
    assert line.startswith("✔ scaled_dot_product_attention: correct") and says in line
    assert "row of zeros" in line and "notebook 03" in line


def test_nan_reaching_the_other_queries_is_rejected():
    assert "reached the OTHER queries" in str(failure(checks.check_scaled_dot_product_attention, sdpa_nan_everywhere))


def test_weight_on_some_blocked_keys_is_rejected():
    message = str(failure(checks.check_scaled_dot_product_attention, sdpa_one_key_for_blocked))
    assert "all blocked" in message and "row of zeros" in message


def test_notebook_01_says_what_the_check_does_with_a_blocked_query():
    notebook = nbformat.read(ROOT / "notebooks" / "01_self_attention.ipynb", as_version=4)
    text = next(c.source for c in notebook.cells if c.cell_type == "markdown" and "*all* blocked" in c.source)
    assert "NaN" in text and "row of zeros" in text and "all equal" in text
    assert "accepts all three" in text and "verdict" in text


# --- two bugs at once, in every check whose mistakes are knobs of one simulation -------------------


def sdpa_unscaled_softmax_over_queries(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1)  # no / sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-2)  # over the queries
    return weights @ value, weights


class MHAUnscaledWithoutWo(MultiHeadAttention):
    def forward(self, query, key, value, mask=None):
        B, T, D = query.shape

        def heads(x):
            return x.view(B, x.size(1), self.n_heads, self.d_head).transpose(1, 2)

        scores = heads(self.w_q(query)) @ heads(self.w_k(key)).transpose(-2, -1)  # no / sqrt(d_head)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return (scores.softmax(-1) @ heads(self.w_v(value))).transpose(1, 2).reshape(B, T, D)  # no w_o


def noam_no_warmup_d_model_up(step, d_model, warmup, factor=1.0):
    return factor * d_model**0.5 * step**-0.5


def vocab_lowercased_strict(token_lists, min_freq):
    from collections import Counter

    counts = Counter(t.lower() for tokens in token_lists for t in tokens)
    kept = sorted((t for t, n in counts.items() if n > min_freq), key=lambda t: (-counts[t], t))
    return ["<unk>", "<pad>", "<bos>", "<eos>", *kept]


def precision_unclipped_one_short(hypothesis, reference, n):
    grams = [tuple(reference[i : i + n]) for i in range(len(reference) - n)]
    mine = [tuple(hypothesis[i : i + n]) for i in range(len(hypothesis) - n)]
    return sum(g in grams for g in mine), max(len(hypothesis) - n, 0)


def bp_inverted_always(hyp_len, ref_len):
    return 0.0 if hyp_len == 0 else math.exp(1 - hyp_len / ref_len)


def beam_per_beam_without_prefix(scores, log_probs, K):
    best, token = log_probs.max(dim=-1)
    return best, torch.arange(log_probs.size(0)), token


TWO_AT_ONCE = {
    "sdpa": (
        checks.check_scaled_dot_product_attention,
        sdpa_unscaled_softmax_over_queries,
        ["sqrt(d_k)", "wrong axis (the queries)"],
    ),
    "mha": (checks.check_multi_head_attention, MHAUnscaledWithoutWo, ["sqrt(d_head)", "w_o is missing"]),
    "noam": (checks.check_noam_rate, noam_no_warmup_d_model_up, ["warm-up is missing", "power -0.5"]),
    "vocab": (checks.check_build_vocab, vocab_lowercased_strict, ["lowercased", "AT LEAST min_freq"]),
    "precision": (checks.check_modified_precision, precision_unclipped_one_short, ["not clipped", "stop one early"]),
    "brevity": (checks.check_brevity_penalty, bp_inverted_always, ["ratio is inverted", "long hypotheses too"]),
    "beam": (checks.check_beam_step, beam_per_beam_without_prefix, ["top-1 per beam", "prefix scores are not added"]),
}


@pytest.mark.parametrize("case", TWO_AT_ONCE)
def test_two_mistakes_at_once_are_both_named(case):
    check, answer, phrases = TWO_AT_ONCE[case]
    error = failure(check, answer)
    message = str(error)
    assert error.known_bug and "two things differ" in message, message
    for phrase in phrases:
        assert phrase in message, message
