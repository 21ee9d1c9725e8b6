"""Every check against right answers written differently, and against bugs written in those styles.

The course's standard for a check: at least two correct answers written differently
from the reference (einsum, a loop, another order) that it accepts, and at least
three realistic bugs that it rejects with a message naming them. The nine newer
checks meet it in test_checks_more_a.py and test_checks_more_b.py; this file
completes the fourteen older ones, whose other tests (test_checks.py,
test_checks_data.py, test_checks_decode.py, test_check_feedback.py) mostly fed them
the package's own reference.

:data:`COVERAGE` names, per exported check, the answers and bugs that cover it and
the file each lives in; two tests hold it to the standard: every exported
``check_*`` must have a row (a new check without tests fails), and every answer or
bug named must exist in its file. The answers and bugs here are written as a
learner would write them, not with the checks' own bug simulations.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_lessons import checks
from transformer_lessons.attention import MultiHeadAttention
from transformer_lessons.checks import ExerciseError
from transformer_lessons.layers import PositionwiseFeedForward
from transformer_lessons.specials import SPECIALS

TESTS = Path(__file__).resolve().parent
HERE = Path(__file__).name

# --- the coverage table ---------------------------------------------------------------------
# check name (without "check_") -> {"alternatives": [...], "bugs": [...]}, each entry "file::name":
# a correct answer the check accepts, or a bug it rejects naming it, and where that test lives.
# `name` is the answer's function or class, or its case id in that file's table.

_A, _B = "test_checks_more_a.py", "test_checks_more_b.py"
_KV = "test_check_kv_cache.py"
_DDP = "test_check_distributed.py"
COVERAGE: dict[str, dict[str, list[str]]] = {
    "scaled_dot_product_attention": {
        "alternatives": ["test_checks.py::sdpa-annotated-style", f"{HERE}::sdpa_einsum", f"{HERE}::sdpa_loop_over_batch"],
        "bugs": ["test_checks.py::sdpa-no-scale", "test_checks.py::sdpa-softmax-dim", "test_checks.py::sdpa-inverted-mask",
                 "test_checks.py::sdpa-fill-discarded", "test_checks.py::sdpa-zero-after-softmax",
                 f"{HERE}::sdpa_einsum_one_row_per_key"],
    },
    "causal_mask": {
        "alternatives": ["test_checks.py::causal-tril-of-ones", f"{HERE}::causal_arange_comparison",
                         f"{HERE}::causal_not_triu", f"{HERE}::causal_loop"],
        "bugs": ["test_checks.py::causal-no-diagonal", "test_checks.py::causal-upper", "test_checks.py::causal-inverted",
                 "test_checks.py::causal-additive", f"{HERE}::causal_arange_strict"],
    },
    "padding_mask": {
        "alternatives": ["test_checks.py::padding-unsqueeze", f"{HERE}::padding_ne_view", f"{HERE}::padding_index_none"],
        "bugs": ["test_checks.py::padding-inverted", "test_checks.py::padding-2d", "test_checks.py::padding-queries",
                 "test_checks.py::padding-float", "test_check_feedback.py::test_padding_mask_with_a_hard_coded_pad_id_is_named"],
    },
    "target_mask": {
        "alternatives": [f"{HERE}::target_tril_unsqueeze", f"{HERE}::target_logical_and_arange", f"{HERE}::target_loop"],
        "bugs": ["test_checks.py::target-causal-only", "test_checks.py::target-padding-only", "test_checks.py::target-or",
                 "test_checks.py::target-query-padding",
                 "test_check_feedback.py::test_target_mask_with_a_hard_coded_pad_id_is_named"],
    },
    "mask_inversion": {
        "alternatives": [f"{HERE}::inversion_logical_not", f"{HERE}::inversion_eq_false", f"{HERE}::inversion_where"],
        "bugs": ["test_checks.py::inversion-unchanged", "test_checks.py::inversion-arithmetic",
                 "test_checks.py::inversion-in-place", "test_checks.py::inversion-all-true"],
    },
    "positional_encoding": {
        "alternatives": ["test_checks.py::pe-exp-log", f"{HERE}::pe_double_loop", f"{HERE}::pe_pow",
                         f"{HERE}::pe_stack_interleave"],
        "bugs": ["test_checks.py::pe-swapped", "test_checks.py::pe-base-1000", "test_checks.py::pe-exponent-i",
                 "test_checks.py::pe-start-1", "test_checks.py::pe-halves", f"{HERE}::pe_loop_column_exponent",
                 f"{HERE}::pe_loop_column_exponent_2j"],
    },
    "multi_head_attention": {
        "alternatives": [f"{HERE}::MHAPermuteEinsum", f"{HERE}::MHAHeadLoop", f"{HERE}::MHAWeightSlices"],
        "bugs": ["test_checks.py::mha-no-scale", "test_checks.py::mha-split-view", "test_checks.py::mha-concat",
                 "test_checks.py::mha-no-w-o", "test_checks.py::mha-mask-inverted", f"{HERE}::mha_heads_last",
                 f"{HERE}::mha_keys_values_swapped", f"{HERE}::mha_divided_by_d_head"],
    },
    "layer_norm": {
        "alternatives": ["test_checks.py::layer-norm-nn", "test_checks.py::layer-norm-functional",
                         f"{HERE}::LayerNormSquares", f"{HERE}::LayerNormVarMean"],
        "bugs": ["test_checks.py::ln-unbiased", "test_checks.py::ln-eps-outside", "test_checks.py::ln-dim0",
                 "test_checks.py::ln-no-gain", f"{HERE}::ln_divides_by_variance", f"{HERE}::ln_whole_tensor"],
    },
    "feed_forward": {
        "alternatives": [f"{HERE}::FeedForwardClamp", f"{HERE}::FeedForwardSequential", f"{HERE}::FeedForwardMatmul"],
        "bugs": ["test_checks.py::ffn-no-relu", "test_checks.py::ffn-relu-twice", "test_checks.py::ffn-gelu",
                 "test_checks.py::ffn-residual", "test_check_feedback.py::FeedForwardNoBias", f"{HERE}::ffn_relu_on_input"],
    },
    "encoder_layer": {
        "alternatives": ["test_checks.py::EncoderLayer", f"{HERE}::EncoderLayerHelper", f"{HERE}::EncoderLayerBlocks"],
        "bugs": ["test_checks.py::enc-pre-norm", "test_checks.py::enc-no-residual", "test_checks.py::enc-mask-not-passed",
                 "test_checks.py::enc-norms-swapped", f"{HERE}::enc_feed_forward_first", f"{HERE}::enc_no_residual_feed_forward"],
    },
    "decoder_layer": {
        "alternatives": ["test_checks.py::DecoderLayer", f"{HERE}::DecoderLayerHelper", f"{HERE}::DecoderLayerBlocks"],
        "bugs": ["test_checks.py::dec-no-causal", "test_checks.py::dec-cross-on-x", "test_checks.py::dec-masks-swapped",
                 "test_checks.py::dec-pre-norm", "test_check_feedback.py::DecoderLayerCrossWiring",
                 f"{HERE}::dec_cross_attention_first", f"{HERE}::dec_no_residual_self_attention"],
    },
    "noam_rate": {
        "alternatives": ["test_checks.py::noam-tensor", f"{HERE}::noam_branch", f"{HERE}::noam_sqrt"],
        "bugs": ["test_checks.py::noam-no-warmup", "test_checks.py::noam-exponent", "test_checks.py::noam-d-model",
                 "test_checks.py::noam-max", "test_checks.py::noam-factor-ignored", f"{HERE}::noam_branch_flipped"],
    },
    "build_vocab": {
        "alternatives": ["test_checks_data.py::build_vocab_by_hand", "test_checks_data.py::build_vocab_two_sorts",
                         f"{HERE}::vocab_most_common_then_sorted", f"{HERE}::vocab_defaultdict_items"],
        "bugs": ["test_checks_data.py::greater_than", "test_checks_data.py::lowercased", "test_checks_data.py::alphabetical",
                 "test_checks_data.py::most_common_ties", "test_checks_data.py::once_per_sentence"],
    },
    "greedy_decode": {
        "alternatives": ["test_checks_decode.py::learner_loop", "test_checks_decode.py::reencode_each_step",
                         "test_checks_decode.py::no_early_stop", f"{HERE}::greedy_preallocated",
                         f"{HERE}::greedy_columns_stack", f"{HERE}::greedy_one_sentence_at_a_time"],
        "bugs": ["test_checks_decode.py::no_feedback", "test_checks_decode.py::first_position",
                 "test_checks_decode.py::last_token_only", "test_checks_decode.py::no_causal_mask",
                 "test_checks_decode.py::stop_at_first_eos"],
    },
    # The nine newer checks, covered in their own files.
    "embedding_scale": {
        "alternatives": [f"{_A}::embedding_indexing", f"{_A}::embedding_scaled_table_copy", f"{_A}::embedding_tensor_sqrt"],
        "bugs": [f"{_A}::embedding_no_scale", f"{_A}::embedding_divided", f"{_A}::embedding_times_d"],
    },
    "learned_positions": {
        "alternatives": [f"{_A}::positions_parameter", f"{_A}::positions_batch_shaped"],
        "bugs": [f"{_A}::positions_from_one", f"{_A}::positions_rows_only", f"{_A}::positions_row_zero"],
    },
    "transformer_forward": {
        "alternatives": [f"{_A}::forward_encode_decode", f"{_A}::forward_keywords", f"{_A}::forward_by_hand"],
        "bugs": [f"{_A}::forward_masks_swapped", f"{_A}::forward_no_src_mask_in_decode", f"{_A}::forward_softmax"],
    },
    "batch_by_tokens": {
        "alternatives": [f"{_A}::batch_loop", f"{_A}::batch_numpy_unstable", f"{_A}::batch_longest_batch_first"],
        "bugs": [f"{_A}::batch_counts_tokens", f"{_A}::batch_not_sorted", f"{_A}::batch_drops_last"],
    },
    "label_smoothing_loss": {
        "alternatives": [f"{_B}::ls_explicit_q", f"{_B}::ls_loop", f"{_B}::ls_kl_plus_entropy"],
        "bugs": [f"{_B}::ls_cross_entropy_label_smoothing", f"{_B}::no_smoothing", f"{_B}::pad_not_ignored", f"{_B}::ls_kl"],
    },
    "train_step": {
        "alternatives": [f"{_B}::ts_learner(None)", f"{_B}::ts_flattened"],
        "bugs": [f"{_B}::no_zero_grad", f"{_B}::scheduler_first", f"{_B}::feeds_tgt_out", f"{_B}::own_optimizer"],
    },
    "beam_step": {
        "alternatives": [f"{_B}::beam_per_beam_then_joint", f"{_B}::beam_transposed", f"{_B}::beam_loop"],
        "bugs": [f"{_B}::per_beam", f"{_B}::no_prefix", f"{_B}::divide_by_k"],
    },
    "modified_precision": {
        "alternatives": [f"{_B}::mp_loop", f"{_B}::mp_counter_and"],
        "bugs": [f"{_B}::unclipped", f"{_B}::short_at_end", f"{_B}::negative_total"],
    },
    "brevity_penalty": {
        "alternatives": [f"{_B}::bp_min", f"{_B}::bp_torch"],
        "bugs": [f"{_B}::inverted", f"{_B}::sign", f"{_B}::empty_gets_one"],
    },
    # Notebook 12's key/value cache, covered in its own file.
    "append_kv": {
        "alternatives": [f"{_KV}::append_cat", f"{_KV}::append_preallocated", f"{_KV}::append_concat_negative_dim"],
        "bugs": [f"{_KV}::append_on_heads", f"{_KV}::append_on_d_head", f"{_KV}::append_on_batch", f"{_KV}::append_stack",
                 f"{_KV}::append_reversed", f"{_KV}::append_overwrite", f"{_KV}::append_forgets_values",
                 f"{_KV}::append_values_unchanged", f"{_KV}::append_values_get_keys", f"{_KV}::append_swapped_outputs"],
    },
    "reorder_kv": {
        "alternatives": [f"{_KV}::reorder_index_select", f"{_KV}::reorder_fancy_indexing", f"{_KV}::reorder_loop_stack",
                         f"{_KV}::reorder_gather"],
        "bugs": [f"{_KV}::reorder_unchanged", f"{_KV}::reorder_keys_only", f"{_KV}::reorder_scatter",
                 f"{_KV}::reorder_heads_axis", f"{_KV}::reorder_time_axis", f"{_KV}::reorder_swapped_outputs"],
    },
    # Notebook 13's loss of one rank of a DDP run, covered in its own file.
    "rank_loss": {
        "alternatives": [f"{_DDP}::rank_loss_scaled", f"{_DDP}::rank_loss_mean_of_batch", f"{_DDP}::rank_loss_tensor_counts"],
        "bugs": [f"{_DDP}::rank_loss_own_mean", f"{_DDP}::rank_loss_no_world_size", f"{_DDP}::rank_loss_divides_by_world",
                 f"{_DDP}::rank_loss_unscaled", f"{_DDP}::rank_loss_item", f"{_DDP}::rank_loss_own_mean_over_world"],
    },
}


# --- scaled dot-product attention ----------------------------------------------------------


def sdpa_einsum(query, key, value, mask=None):
    scores = torch.einsum("...td,...sd->...ts", query, key) / math.sqrt(query.shape[-1])  # (..., T, S)
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.einsum("...ts,...sv->...tv", weights, value), weights  # (..., T, d_v)


def sdpa_loop_over_batch(query, key, value, mask=None):
    if mask is not None:
        mask = mask.expand(*query.shape[:-1], key.size(-2))  # (B, ..., T, S): one mask per batch item
    outputs, all_weights = [], []
    for b in range(query.size(0)):  # one sentence at a time
        scores = query[b] @ key[b].transpose(-2, -1) / query.size(-1) ** 0.5  # (..., T, S)
        if mask is not None:
            scores[~mask[b]] = float("-inf")  # scores is a new tensor: writing into it is fine
        weights = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)  # the softmax written out
        outputs.append(weights @ value[b])
        all_weights.append(weights)
    return torch.stack(outputs), torch.stack(all_weights)


def sdpa_einsum_one_row_per_key(query, key, value, mask=None):
    scores = torch.einsum("...td,...sd->...st", query, key) / math.sqrt(query.shape[-1])  # the bug: (..., S, T)
    weights = scores.softmax(dim=-1)
    return torch.einsum("...st,...sv->...tv", weights, value), weights


# --- masks ------------------------------------------------------------------------------------


def causal_arange_comparison(size):
    positions = torch.arange(size)
    return positions[None, :] <= positions[:, None]  # key s <= query t, written the other way round


def causal_not_triu(size):
    return ~torch.triu(torch.ones(size, size, dtype=torch.bool), diagonal=1)  # not the strict future


def causal_loop(size):
    mask = torch.zeros(size, size, dtype=torch.bool)
    for t in range(size):
        mask[t, : t + 1] = True
    return mask


def causal_arange_strict(size):
    return torch.arange(size)[:, None] > torch.arange(size)  # the bug: > leaves out the diagonal


def padding_ne_view(tokens, pad_id):
    B, S = tokens.shape
    return tokens.ne(pad_id).view(B, 1, 1, S)


def padding_index_none(tokens, pad_id):
    return ~torch.eq(tokens, pad_id)[:, None, None]  # (B, S) -> (B, 1, 1, S): trailing ':' left out


def target_tril_unsqueeze(tokens, pad_id):
    T = tokens.size(1)
    keys = tokens.ne(pad_id).unsqueeze(1).unsqueeze(2)  # (B, 1, 1, T)
    return keys & torch.tril(torch.ones(T, T, device=tokens.device)).bool()  # (B, 1, T, T)


def target_logical_and_arange(tokens, pad_id):
    B, T = tokens.shape
    steps = torch.arange(T)
    causal = (steps[:, None] >= steps[None, :]).expand(B, 1, T, T)  # (B, 1, T, T)
    return torch.logical_and(causal, (tokens != pad_id).view(B, 1, 1, T))


def target_loop(tokens, pad_id):
    B, T = tokens.shape
    mask = torch.zeros(B, 1, T, T, dtype=torch.bool)
    for b in range(B):
        for t in range(T):
            for s in range(t + 1):
                mask[b, 0, t, s] = bool(tokens[b, s] != pad_id)
    return mask


def inversion_logical_not(blocked):
    return torch.logical_not(blocked)


def inversion_eq_false(blocked):
    return blocked == False  # noqa: E712 - a learner's spelling; it builds a new bool tensor


def inversion_where(blocked):
    return torch.where(blocked, False, True)


# --- positional encoding -----------------------------------------------------------------


def pe_double_loop(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(0, d_model, 2):  # i is already 2i: 0, 2, 4, ...
            angle = pos / (10000 ** (i / d_model))
            pe[pos, i] = math.sin(angle)
            pe[pos, i + 1] = math.cos(angle)
    return pe


def pe_pow(max_len, d_model):
    position = torch.arange(max_len).float().unsqueeze(1)  # (L, 1)
    i = torch.arange(d_model // 2).float()  # the pair index
    angle = position / torch.pow(10000.0, 2 * i / d_model)  # (L, D/2)
    pe = torch.zeros(max_len, d_model)
    pe[:, ::2] = angle.sin()
    pe[:, 1::2] = angle.cos()
    return pe


def pe_stack_interleave(max_len, d_model):
    position = torch.arange(max_len, dtype=torch.float32)[:, None]  # (L, 1)
    inv_freq = 1.0 / 10000 ** (torch.arange(0, d_model, 2).float() / d_model)  # (D/2,)
    angle = position * inv_freq  # (L, D/2)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)  # (L, D/2, 2) -> (L, D): sin, cos, sin, ...


def pe_loop_column_exponent(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for j in range(d_model):  # the bug: the column j in the exponent, not the pair's 2i
            angle = pos / 10000 ** (j / d_model)
            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


def pe_loop_column_exponent_2j(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for j in range(d_model):  # the bug: "2i" read as twice the column
            angle = pos / 10000 ** (2 * j / d_model)
            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


# --- multi-head attention ----------------------------------------------------------------


class _Projections(nn.Module):
    """The four projections the check requires, w_q, w_k, w_v, w_o, and the dropout; forward is the answer."""

    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.w_q, self.w_k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.w_v, self.w_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)


class MHAPermuteEinsum(_Projections):
    """reshape + permute to split the heads, einsum for the scores and, merged in one go, the output."""

    def forward(self, query, key, value, mask=None):
        B, T, D = query.shape
        H, Dh = self.n_heads, self.d_head
        q = self.w_q(query).reshape(B, T, H, Dh).permute(0, 2, 1, 3)  # (B, H, T, Dh)
        k = self.w_k(key).reshape(B, -1, H, Dh).permute(0, 2, 1, 3)  # (B, H, S, Dh)
        v = self.w_v(value).reshape(B, -1, H, Dh).permute(0, 2, 1, 3)  # (B, H, S, Dh)
        scores = torch.einsum("bhtd,bhsd->bhts", q, k) / Dh**0.5  # (B, H, T, S)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = self.dropout(F.softmax(scores, dim=-1))
        out = torch.einsum("bhts,bhsd->bthd", weights, v)  # (B, T, H, Dh): heads merged by the output order
        return self.w_o(out.reshape(B, T, D))


class MHAHeadLoop(_Projections):
    """Project once, then one head at a time on its slice of columns; concatenate the heads."""

    def forward(self, query, key, value, mask=None):
        B, T, S = query.size(0), query.size(1), key.size(1)
        q, k, v = self.w_q(query), self.w_k(key), self.w_v(value)  # (B, T, D), (B, S, D), (B, S, D)
        if mask is not None:
            mask = mask.expand(B, self.n_heads, T, S)  # one (T, S) mask per sentence and head
        heads = []
        for h in range(self.n_heads):
            cols = slice(h * self.d_head, (h + 1) * self.d_head)
            scores = q[..., cols] @ k[..., cols].transpose(1, 2) / math.sqrt(self.d_head)  # (B, T, S)
            if mask is not None:
                scores = scores.masked_fill(~mask[:, h], float("-inf"))
            heads.append(self.dropout(scores.softmax(dim=-1)) @ v[..., cols])  # (B, T, Dh)
        return self.w_o(torch.cat(heads, dim=-1))  # H x (B, T, Dh) -> (B, T, D)


class MHAWeightSlices(_Projections):
    """Each head projects with its own rows of w_q, w_k, w_v (a head's W^Q_i of the paper); the heads stack."""

    def forward(self, query, key, value, mask=None):
        B, T, D = query.shape
        heads = []
        for h in range(self.n_heads):
            rows = slice(h * self.d_head, (h + 1) * self.d_head)
            q = F.linear(query, self.w_q.weight[rows], self.w_q.bias[rows])  # (B, T, Dh)
            k = F.linear(key, self.w_k.weight[rows], self.w_k.bias[rows])  # (B, S, Dh)
            v = F.linear(value, self.w_v.weight[rows], self.w_v.bias[rows])  # (B, S, Dh)
            heads.append((q, k, v))
        q, k, v = (torch.stack(parts, dim=1) for parts in zip(*heads))  # (B, H, L, Dh) each
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.d_head**-0.5  # (B, H, T, S)
        if mask is not None:
            scores = torch.where(mask, scores, torch.full_like(scores, float("-inf")))
        out = torch.matmul(self.dropout(scores.softmax(-1)), v)  # (B, H, T, Dh)
        return self.w_o(torch.cat(out.unbind(dim=1), dim=-1))  # H x (B, T, Dh) -> (B, T, D)


class _MHABug(_Projections):
    """A learner's permute-style multi-head attention with one mistake (set by ``bug``)."""

    bug = ""

    def forward(self, query, key, value, mask=None):
        B, T, D = query.shape
        H, Dh = self.n_heads, self.d_head

        def split(x):
            return x.reshape(B, -1, H, Dh).permute(0, 2, 1, 3)  # (B, H, L, Dh)

        if self.bug == "keys_values_swapped":
            k, v = split(self.w_k(value)), split(self.w_v(key))
        else:
            k, v = split(self.w_k(key)), split(self.w_v(value))
        q = split(self.w_q(query))
        scores = q @ k.transpose(-2, -1) / (Dh if self.bug == "divided_by_d_head" else math.sqrt(Dh))
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out = self.dropout(scores.softmax(-1)) @ v  # (B, H, T, Dh)
        if self.bug == "heads_last":
            return self.w_o(out.permute(0, 2, 3, 1).reshape(B, T, D))  # (B, T, Dh, H): heads interleaved
        return self.w_o(out.permute(0, 2, 1, 3).reshape(B, T, D))


def _mha_bug(bug):
    return type(f"MHA_{bug}", (_MHABug,), {"bug": bug})


mha_heads_last = _mha_bug("heads_last")
mha_keys_values_swapped = _mha_bug("keys_values_swapped")
mha_divided_by_d_head = _mha_bug("divided_by_d_head")


# --- layer norm and feed-forward -----------------------------------------------------------


class LayerNormSquares(nn.Module):
    """The variance as the mean squared deviation, and rsqrt."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps
        self.bug = ""

    def forward(self, x):
        dims = tuple(range(x.dim())) if self.bug == "whole_tensor" else -1
        centred = x - x.mean(dim=dims, keepdim=True)
        var = (centred**2).mean(dim=dims, keepdim=True)  # biased: divides by D
        if self.bug == "divides_by_variance":
            return self.weight * centred / (var + self.eps) + self.bias
        return self.weight * centred * torch.rsqrt(var + self.eps) + self.bias


class LayerNormVarMean(nn.Module):
    """torch.var_mean with correction=0 (the biased variance), and the gain and bias as addcmul."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, correction=0, keepdim=True)  # (..., 1) each
        return torch.addcmul(self.bias, self.weight, (x - mean) / (var + self.eps).sqrt())


def _layer_norm_bug(bug):
    def init(self, d_model, eps=1e-5):
        LayerNormSquares.__init__(self, d_model, eps)
        self.bug = bug

    return type(f"LayerNorm_{bug}", (LayerNormSquares,), {"__init__": init})


ln_divides_by_variance = _layer_norm_bug("divides_by_variance")
ln_whole_tensor = _layer_norm_bug("whole_tensor")


class FeedForwardClamp(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.w_2(self.dropout(torch.clamp(self.w_1(x), min=0)))  # clamp(min=0) is max(0, x)


class FeedForwardSequential(nn.Module):
    """The same two Linear layers, registered as w_1 and w_2 and run inside an nn.Sequential."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.net = nn.Sequential(self.w_1, nn.ReLU(), nn.Dropout(dropout), self.w_2)

    def forward(self, x):
        return self.net(x)


class FeedForwardMatmul(nn.Module):
    """Eq. 2 as written in the paper, max(0, x W1 + b1) W2 + b2, from the layers' weights."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.p = dropout

    def forward(self, x):
        hidden = F.relu(x @ self.w_1.weight.T + self.w_1.bias)  # (B, L, d_ff)
        hidden = F.dropout(hidden, self.p, training=self.training)
        return hidden @ self.w_2.weight.T + self.w_2.bias  # (B, L, D)


class ffn_relu_on_input(FeedForwardClamp):  # noqa: N801 - named like the other bugs in the table
    def forward(self, x):
        return self.w_2(self.dropout(self.w_1(torch.clamp(x, min=0))))  # the bug: clamps the input


# --- encoder and decoder layers -----------------------------------------------------------


class EncoderLayerHelper(nn.Module):
    """Explicit sublayer code through one helper method; nn.LayerNorm; F.dropout with training=self.training."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.p = dropout
        self.bug = ""

    def _residual(self, x, sublayer, norm, residual=True):
        out = F.dropout(sublayer(x), self.p, training=self.training)
        return norm(x + out if residual else out)

    def forward(self, x, src_mask=None):
        attend = lambda y: self.self_attn(y, y, y, src_mask)  # noqa: E731
        if self.bug == "feed_forward_first":
            x = self._residual(x, self.feed_forward, self.norm1)
            return self._residual(x, attend, self.norm2)
        x = self._residual(x, attend, self.norm1)
        return self._residual(x, self.feed_forward, self.norm2, residual=self.bug != "no_residual_feed_forward")


class Residual(nn.Module):
    """A learner's own residual block: norm(x + dropout(sublayer(x)))."""

    def __init__(self, d_model, dropout):
        super().__init__()
        self.norm = LayerNormSquares(d_model)  # a hand-written LayerNorm works as well as nn.LayerNorm
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayerBlocks(nn.Module):
    """The norms inside the learner's own residual blocks, sublayers[i].norm, as in the package's layout."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList([Residual(d_model, dropout) for _ in range(2)])

    def forward(self, x, src_mask=None):
        attention, feed_forward = self.sublayers
        x = attention(x, lambda y: self.self_attn(y, y, y, src_mask))
        return feed_forward(x, self.feed_forward)


def _encoder_bug(bug):
    def init(self, d_model, n_heads, d_ff, dropout=0.0):
        EncoderLayerHelper.__init__(self, d_model, n_heads, d_ff, dropout)
        self.bug = bug

    return type(f"EncoderLayer_{bug}", (EncoderLayerHelper,), {"__init__": init})


enc_feed_forward_first = _encoder_bug("feed_forward_first")
enc_no_residual_feed_forward = _encoder_bug("no_residual_feed_forward")


class DecoderLayerHelper(nn.Module):
    """Three (sublayer, norm) steps through one helper method; F.dropout with training=self.training."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.p = dropout
        self.bug = ""

    def _residual(self, x, sublayer, norm, residual=True):
        out = F.dropout(sublayer(x), self.p, training=self.training)
        return norm(x + out if residual else out)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        attend_self = lambda y: self.self_attn(y, y, y, tgt_mask)  # noqa: E731
        attend_memory = lambda y: self.cross_attn(y, memory, memory, src_mask)  # noqa: E731
        sublayers = [attend_self, attend_memory, self.feed_forward]
        if self.bug == "cross_attention_first":
            sublayers[:2] = sublayers[1::-1]
        norms = (self.norm1, self.norm2, self.norm3)
        for i, (sublayer, norm) in enumerate(zip(sublayers, norms)):
            x = self._residual(x, sublayer, norm, residual=not (i == 0 and self.bug == "no_residual_self_attention"))
        return x


class DecoderLayerBlocks(nn.Module):
    """The norms in the learner's own residual blocks, sublayers[i].norm; three plain calls in forward."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList(Residual(d_model, dropout) for _ in range(3))

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask))
        x = self.sublayers[1](x, lambda y: self.cross_attn(y, memory, memory, src_mask))
        return self.sublayers[2](x, self.feed_forward)


def _decoder_bug(bug):
    def init(self, d_model, n_heads, d_ff, dropout=0.0):
        DecoderLayerHelper.__init__(self, d_model, n_heads, d_ff, dropout)
        self.bug = bug

    return type(f"DecoderLayer_{bug}", (DecoderLayerHelper,), {"__init__": init})


dec_cross_attention_first = _decoder_bug("cross_attention_first")
dec_no_residual_self_attention = _decoder_bug("no_residual_self_attention")


# --- learning-rate schedule ----------------------------------------------------------------


def noam_branch(step, d_model, warmup, factor=1.0):
    if step < warmup:  # warm-up: linear in step
        return factor * step / (math.sqrt(d_model) * warmup**1.5)
    return factor / math.sqrt(d_model * step)  # then 1/sqrt(step)


def noam_sqrt(step, d_model, warmup, factor=1.0):
    return factor * math.pow(d_model, -0.5) * min(1 / math.sqrt(step), step / (warmup * math.sqrt(warmup)))


def noam_branch_flipped(step, d_model, warmup, factor=1.0):
    if step > warmup:  # the bug: the comparison is the wrong way round, so each branch runs where the other should
        return factor * step / (math.sqrt(d_model) * warmup**1.5)
    return factor / math.sqrt(d_model * step)


# --- vocabulary -------------------------------------------------------------------------


def vocab_most_common_then_sorted(token_lists, min_freq):
    counts = Counter(token for sentence in token_lists for token in sentence)
    kept = [(token, n) for token, n in counts.most_common() if n >= min_freq]
    kept.sort(key=lambda pair: (-pair[1], pair[0]))  # most_common's ties are first-seen: re-sort them by token
    return [*SPECIALS] + [token for token, _ in kept]


def vocab_defaultdict_items(token_lists, min_freq):
    counts = defaultdict(int)
    for sentence in token_lists:
        for token in sentence:
            counts[token] += 1
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    itos = ["<unk>", "<pad>", "<bos>", "<eos>"]
    for token, n in ranked:
        if n < min_freq:
            break  # sorted by count: every token after this one is rarer
        itos.append(token)
    return itos


# --- greedy decoding -----------------------------------------------------------------------


def _tril(size):
    return torch.tril(torch.ones(size, size, dtype=torch.bool))


def greedy_preallocated(model, src, src_mask, max_new_tokens, bos_id, eos_id):
    """One (B, 1 + max_new_tokens) buffer filled column by column; the columns after an early stop stay eos_id."""
    memory = model.encode(src, src_mask)  # (B, S, D)
    ys = torch.full((src.size(0), 1 + max_new_tokens), eos_id, dtype=torch.long)
    ys[:, 0] = bos_id
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    for t in range(1, max_new_tokens + 1):
        logits = model.decode(memory, src_mask, ys[:, :t], _tril(t))  # (B, t, V)
        next_token = logits[:, -1].argmax(dim=-1)  # (B,)
        next_token[finished] = eos_id
        ys[:, t] = next_token
        finished |= next_token == eos_id
        if finished.all():
            break
    return ys


def greedy_columns_stack(model, src, src_mask, max_new_tokens, bos_id, eos_id):
    """A list of (B,) columns, stacked each step; torch.where for the finished rows."""
    memory = model.encode(src, src_mask)
    columns = [torch.full((src.size(0),), bos_id, dtype=torch.long)]
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_new_tokens):
        ys = torch.stack(columns, dim=1)  # (B, t)
        logits = model.decode(memory, src_mask, ys, _tril(ys.size(1)))
        token = torch.where(done, eos_id, logits[:, -1].argmax(dim=-1))  # (B,)
        columns.append(token)
        done = done | (token == eos_id)
        if bool(done.all()):
            break
    return torch.stack(columns, dim=1)


def greedy_one_sentence_at_a_time(model, src, src_mask, max_new_tokens, bos_id, eos_id):
    """Another order: decode each sentence alone until its <eos>, then pad the shorter ones with eos_id."""
    rows = []
    for b in range(src.size(0)):
        memory = model.encode(src[b : b + 1], src_mask[b : b + 1])  # (1, S, D)
        row = [bos_id]
        while len(row) <= max_new_tokens and row[-1] != eos_id:
            ys = torch.tensor([row])  # (1, t)
            logits = model.decode(memory, src_mask[b : b + 1], ys, _tril(len(row)))
            row.append(int(logits[0, -1].argmax()))
        rows.append(row)
    width = max(len(row) for row in rows)
    return torch.tensor([row + [eos_id] * (width - len(row)) for row in rows])


# --- the tables ------------------------------------------------------------------------------

ALTERNATIVES = {
    "sdpa_einsum": ("scaled_dot_product_attention", sdpa_einsum),
    "sdpa_loop_over_batch": ("scaled_dot_product_attention", sdpa_loop_over_batch),
    "causal_arange_comparison": ("causal_mask", causal_arange_comparison),
    "causal_not_triu": ("causal_mask", causal_not_triu),
    "causal_loop": ("causal_mask", causal_loop),
    "padding_ne_view": ("padding_mask", padding_ne_view),
    "padding_index_none": ("padding_mask", padding_index_none),
    "target_tril_unsqueeze": ("target_mask", target_tril_unsqueeze),
    "target_logical_and_arange": ("target_mask", target_logical_and_arange),
    "target_loop": ("target_mask", target_loop),
    "inversion_logical_not": ("mask_inversion", inversion_logical_not),
    "inversion_eq_false": ("mask_inversion", inversion_eq_false),
    "inversion_where": ("mask_inversion", inversion_where),
    "pe_double_loop": ("positional_encoding", pe_double_loop),
    "pe_pow": ("positional_encoding", pe_pow),
    "pe_stack_interleave": ("positional_encoding", pe_stack_interleave),
    "MHAPermuteEinsum": ("multi_head_attention", MHAPermuteEinsum),
    "MHAHeadLoop": ("multi_head_attention", MHAHeadLoop),
    "MHAWeightSlices": ("multi_head_attention", MHAWeightSlices),
    "LayerNormSquares": ("layer_norm", LayerNormSquares),
    "LayerNormVarMean": ("layer_norm", LayerNormVarMean),
    "FeedForwardClamp": ("feed_forward", FeedForwardClamp),
    "FeedForwardSequential": ("feed_forward", FeedForwardSequential),
    "FeedForwardMatmul": ("feed_forward", FeedForwardMatmul),
    "EncoderLayerHelper": ("encoder_layer", EncoderLayerHelper),
    "EncoderLayerBlocks": ("encoder_layer", EncoderLayerBlocks),
    "DecoderLayerHelper": ("decoder_layer", DecoderLayerHelper),
    "DecoderLayerBlocks": ("decoder_layer", DecoderLayerBlocks),
    "noam_branch": ("noam_rate", noam_branch),
    "noam_sqrt": ("noam_rate", noam_sqrt),
    "vocab_most_common_then_sorted": ("build_vocab", vocab_most_common_then_sorted),
    "vocab_defaultdict_items": ("build_vocab", vocab_defaultdict_items),
    "greedy_preallocated": ("greedy_decode", greedy_preallocated),
    "greedy_columns_stack": ("greedy_decode", greedy_columns_stack),
    "greedy_one_sentence_at_a_time": ("greedy_decode", greedy_one_sentence_at_a_time),
}

# Bugs written in the styles above, each one a mistake the older tests did not feed its check:
# (check, buggy answer, a phrase of the message that names the bug)
BUGS = {
    "sdpa_einsum_one_row_per_key": ("scaled_dot_product_attention", sdpa_einsum_one_row_per_key, "one row per query"),
    "causal_arange_strict": ("causal_mask", causal_arange_strict, "the diagonal is excluded"),
    "pe_loop_column_exponent": ("positional_encoding", pe_loop_column_exponent, "you gave every column its own"),
    "pe_loop_column_exponent_2j": ("positional_encoding", pe_loop_column_exponent_2j, "you gave every column its own"),
    "mha_heads_last": ("multi_head_attention", mha_heads_last, "concatenated in the wrong order"),
    "mha_keys_values_swapped": ("multi_head_attention", mha_keys_values_swapped, "keys and values are swapped"),
    "mha_divided_by_d_head": ("multi_head_attention", mha_divided_by_d_head, "not d_head = 4"),
    "ln_divides_by_variance": ("layer_norm", ln_divides_by_variance, "not by the variance"),
    "ln_whole_tensor": ("layer_norm", ln_whole_tensor, "not over the whole tensor"),
    "ffn_relu_on_input": ("feed_forward", ffn_relu_on_input, "not on the input"),
    "enc_feed_forward_first": ("encoder_layer", enc_feed_forward_first, "sublayers are in the wrong order"),
    "enc_no_residual_feed_forward": ("encoder_layer", enc_no_residual_feed_forward, "residual around the feed-forward"),
    "dec_cross_attention_first": ("decoder_layer", dec_cross_attention_first, "sublayers are in the wrong order"),
    "dec_no_residual_self_attention": ("decoder_layer", dec_no_residual_self_attention,
                                       "residual around the self-attention is missing"),
    "noam_branch_flipped": ("noam_rate", noam_branch_flipped, "not the larger (max)"),
}


def _check(name):
    return getattr(checks, f"check_{name}")


# --- the tests -------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ALTERNATIVES)
def test_correct_answer_written_differently_passes(case, capsys):
    name, answer = ALTERNATIVES[case]
    assert _check(name)(answer) is None
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"✔ {name}: correct"), lines


@pytest.mark.parametrize("case", BUGS)
def test_bug_written_differently_is_named(case, capsys):
    name, buggy, hint = BUGS[case]
    with pytest.raises(ExerciseError) as error:
        _check(name)(buggy)
    message = str(error.value)
    assert message.startswith(f"{name}: ") and hint in message, message
    assert capsys.readouterr().out == ""


def test_every_exported_check_has_a_coverage_row():
    exported = {n.removeprefix("check_") for n in checks.__all__ if n.startswith("check_")}
    missing = sorted(exported - set(COVERAGE))
    assert not missing, f"checks without a row in COVERAGE (add their alternatives and bugs): {missing}"
    assert not set(COVERAGE) - exported, f"COVERAGE rows for checks that are not exported: {sorted(set(COVERAGE) - exported)}"


@pytest.mark.parametrize("name", sorted(COVERAGE))
def test_coverage_row_meets_the_standard(name):
    row = COVERAGE[name]
    assert len(set(row["alternatives"])) >= 2, f"{name}: fewer than 2 correct answers written differently"
    assert len(set(row["bugs"])) >= 3, f"{name}: fewer than 3 bugs"
    for entry in row["alternatives"] + row["bugs"]:
        filename, _, token = entry.partition("::")
        path = TESTS / filename
        assert path.is_file(), f"{name}: {entry}: no file {filename}"
        assert re.search(rf"(?<![\w-]){re.escape(token)}(?![\w-])", path.read_text(encoding="utf-8")), (
            f"{name}: {entry}: `{token}` does not appear in {filename}")


def test_coverage_names_every_case_of_this_file():
    # The tables above are what runs; COVERAGE must list each of them under its check.
    for case, (name, _) in ALTERNATIVES.items():
        assert f"{HERE}::{case}" in COVERAGE[name]["alternatives"], case
    for case, (name, _, _) in BUGS.items():
        assert f"{HERE}::{case}" in COVERAGE[name]["bugs"], case
