"""check_scaled_dot_product_attention (§3.2.1), fed the reference, correct answers written differently and
the bugs learners (and published tutorials) write.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from transformer_lessons import checks
from transformer_lessons.attention import scaled_dot_product_attention
from transformer_lessons.checks import ExerciseError

# Collected here and run on this file's tables (check_tables.py, conftest.pytest_generate_tests):
from check_tables import (
    test_bug_written_differently_is_named,  # noqa: F401
    test_correct_answer_written_differently_passes,  # noqa: F401
    test_known_bug_is_named,  # noqa: F401
    test_learner_exception_is_reported_and_chained,  # noqa: F401
    test_other_correct_answers_pass,  # noqa: F401
    test_package_reference_passes,  # noqa: F401
    test_reference_passes_with_one_line,  # noqa: F401
    test_stub_returns_none_and_says_so,  # noqa: F401
    test_wrong_dtype_is_reported,  # noqa: F401
    test_wrong_shape_is_reported,  # noqa: F401
)

# --- answers for the tables below, right and buggy ----------------------------------------


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


def sdpa_numpy_softmax(query, key, value, mask=None):
    scores = _scores(query, key) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    e = np.exp(scores.numpy() - scores.numpy().max(-1, keepdims=True))
    weights = torch.tensor(e / e.sum(-1, keepdims=True), dtype=torch.float64)  # the bug: float64
    return weights @ value.double(), weights


def sdpa_annotated_style(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)  # a large negative number instead of -inf
    p_attn = F.softmax(scores, dim=-1)
    return torch.matmul(p_attn, value), p_attn


# --- right answers and bugs written differently -------------------------------------------


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


# --- the tables ---------------------------------------------------------------------------

REFERENCES = {
    "scaled_dot_product_attention": (checks.check_scaled_dot_product_attention, scaled_dot_product_attention),
}


# (check, buggy answer, a phrase the hint must contain)
BUGS = {
    "sdpa-no-scale": ("scaled_dot_product_attention", sdpa_no_scale, "forget to divide the scores by sqrt(d_k)"),
    "sdpa-scale-dk": ("scaled_dot_product_attention", sdpa_scale_dk, "instead of sqrt(d_k)"),
    "sdpa-sqrt-of-batch": ("scaled_dot_product_attention", sdpa_sqrt_of_batch, "LAST axis"),
    "sdpa-softmax-dim": ("scaled_dot_product_attention", sdpa_softmax_dim, "wrong axis"),
    "sdpa-inverted-mask": ("scaled_dot_product_attention", sdpa_inverted_mask, "mask is inverted"),
    "sdpa-fill-discarded": ("scaled_dot_product_attention", sdpa_fill_discarded, "returns a NEW tensor"),
    "sdpa-value-first": ("scaled_dot_product_attention", sdpa_value_first, "value @ weights"),
    "sdpa-weights-transposed": ("scaled_dot_product_attention", sdpa_weights_transposed, "transposed weights"),
    "sdpa-key-not-transposed": ("scaled_dot_product_attention", sdpa_key_not_transposed, "transpose the key"),
    "sdpa-scores-returned": ("scaled_dot_product_attention", sdpa_scores_returned, "BEFORE the softmax"),
    "sdpa-zero-after-softmax": ("scaled_dot_product_attention", sdpa_zero_after_softmax, "after the softmax"),
    "sdpa-3d-only": ("scaled_dot_product_attention", sdpa_3d_only, "heads axis"),
    "sdpa-small-fill": ("scaled_dot_product_attention", sdpa_small_fill, "exactly zero weight"),
    "sdpa-single-tensor": ("scaled_dot_product_attention", sdpa_single_tensor, "return the pair"),
}


# Answers of the wrong shape: the message must say "shape".
WRONG_SHAPES = {
    "scaled_dot_product_attention": sdpa_wrong_shape,
}


# Answers of the wrong dtype (float64 from float32 inputs): the message must name the dtype.
WRONG_DTYPES = {
    "scaled_dot_product_attention": sdpa_numpy_softmax,
}


# Correct answers written differently from the package: the checks must accept them too.
ALTERNATIVES = {
    "sdpa-annotated-style": ("scaled_dot_product_attention", sdpa_annotated_style),
}


# Correct answers written the way a learner would, differently from the reference and the answers above.
WRITTEN_DIFFERENTLY = {
    "sdpa_einsum": ("scaled_dot_product_attention", sdpa_einsum),
    "sdpa_loop_over_batch": ("scaled_dot_product_attention", sdpa_loop_over_batch),
}


# Bugs written in the styles above, each one a mistake the older tests did not feed its check:
# (check, buggy answer, a phrase of the message that names the bug)
BUGS_WRITTEN_DIFFERENTLY = {
    "sdpa_einsum_one_row_per_key": ("scaled_dot_product_attention", sdpa_einsum_one_row_per_key, "one row per query"),
}


# --- tests --------------------------------------------------------------------------------


PACKAGE_REFERENCES = {
    "scaled_dot_product_attention": scaled_dot_product_attention,
}


@pytest.mark.parametrize("name", ["scaled_dot_product_attention"])
def test_returning_none_asks_for_a_return(name):
    with pytest.raises(ExerciseError, match="return"):
        REFERENCES[name][0](lambda *args: None)


def test_every_failure_shows_the_public_class_name():
    # Notebooks print type(error).__name__: a recognised bug and any other failure both read ExerciseError.
    def no_weights(query, key, value, mask=None):
        return scaled_dot_product_attention(query, key, value, mask)[0], None

    for answer, known in ((sdpa_no_scale, True), (no_weights, False)):
        with pytest.raises(ExerciseError) as error:
            checks.check_scaled_dot_product_attention(answer)
        assert type(error.value).__name__ == "ExerciseError"
        assert error.value.known_bug is known
