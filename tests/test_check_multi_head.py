"""check_multi_head_attention (§3.2.2), fed the reference, correct answers written differently and the bugs
learners (and published tutorials) write.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from check_helpers import failure, forward_stub, returns_float64
from transformer_lessons import checks
from transformer_lessons.attention import MultiHeadAttention

# Collected here and run on this file's tables (check_tables.py, conftest.pytest_generate_tests):
from check_tables import (
    test_bug_written_differently_is_named,  # noqa: F401
    test_correct_answer_written_differently_passes,  # noqa: F401
    test_known_bug_is_named,  # noqa: F401
    test_learner_exception_is_reported_and_chained,  # noqa: F401
    test_package_reference_passes,  # noqa: F401
    test_reference_passes_with_one_line,  # noqa: F401
    test_stub_returns_none_and_says_so,  # noqa: F401
    test_wrong_dtype_is_reported,  # noqa: F401
    test_wrong_shape_is_reported,  # noqa: F401
)

# --- answers for the tables below, right and buggy ----------------------------------------


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


# --- the tables ---------------------------------------------------------------------------

REFERENCES = {
    "multi_head_attention": (checks.check_multi_head_attention, MultiHeadAttention),
}


# (check, buggy answer, a phrase the hint must contain)
BUGS = {
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
}


# Answers of the wrong shape: the message must say "shape".
WRONG_SHAPES = {
    "multi_head_attention": mha("shape"),
}


# Answers of the wrong dtype (float64 from float32 inputs): the message must name the dtype.
WRONG_DTYPES = {
    "multi_head_attention": returns_float64(MultiHeadAttention),
}


# Correct answers written the way a learner would, differently from the reference and the answers above.
WRITTEN_DIFFERENTLY = {
    "MHAPermuteEinsum": ("multi_head_attention", MHAPermuteEinsum),
    "MHAHeadLoop": ("multi_head_attention", MHAHeadLoop),
    "MHAWeightSlices": ("multi_head_attention", MHAWeightSlices),
}


# Bugs written in the styles above, each one a mistake the older tests did not feed its check:
# (check, buggy answer, a phrase of the message that names the bug)
BUGS_WRITTEN_DIFFERENTLY = {
    "mha_heads_last": ("multi_head_attention", mha_heads_last, "concatenated in the wrong order"),
    "mha_keys_values_swapped": ("multi_head_attention", mha_keys_values_swapped, "keys and values are swapped"),
    "mha_divided_by_d_head": ("multi_head_attention", mha_divided_by_d_head, "not d_head = 4"),
}


# --- tests --------------------------------------------------------------------------------


PACKAGE_REFERENCES = {
    "multi_head_attention": MultiHeadAttention,
}


@pytest.mark.parametrize("name", ["multi_head_attention"])
def test_class_with_forward_stub_returns_none(name, capsys):
    check, reference = REFERENCES[name]
    assert check(forward_stub(reference)) is None
    assert "not implemented yet" in capsys.readouterr().out


def test_checks_leave_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    checks.check_multi_head_attention(MultiHeadAttention)
    assert torch.equal(torch.rand(3), expected)


# --- answers that used to fool the checks: dropout, NaN -----------------------------------


class MHADropoutInForward(MultiHeadAttention):
    """A fresh nn.Dropout made inside forward is always in training mode."""

    def forward(self, query, key, value, mask=None):
        B, T, D = query.shape

        def split(x):
            return x.view(B, x.size(1), self.n_heads, self.d_head).transpose(1, 2)

        q, k, v = split(self.w_q(query)), split(self.w_k(key)), split(self.w_v(value))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = nn.Dropout(self.dropout.p)(scores.softmax(-1))
        return self.w_o((weights @ v).transpose(1, 2).reshape(B, T, D))


@pytest.mark.parametrize(
    "check, answer",
    [
        (checks.check_multi_head_attention, MHADropoutInForward),
    ],
    ids=["multi_head_attention"],
)
def test_dropout_left_on_in_eval_mode_is_named(check, answer):
    error = failure(check, answer)
    message = str(error)
    assert "dropout is still on" in message and "training=self.training" in " ".join(error.fixes), message


class MHAInvertedMaskInf(MultiHeadAttention):
    def forward(self, query, key, value, mask=None):
        B, T, D = query.shape

        def split(x):
            return x.view(B, x.size(1), self.n_heads, self.d_head).transpose(1, 2)

        q, k, v = split(self.w_q(query)), split(self.w_k(key)), split(self.w_v(value))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))  # the bug: inverted, so a full row is all -inf
        out = self.dropout(scores.softmax(-1)) @ v
        return self.w_o(out.transpose(1, 2).reshape(B, T, D))


def test_nan_in_attention_hints_at_masks():
    message = str(failure(checks.check_multi_head_attention, MHAInvertedMaskInf))
    assert "NaN" in message and "mask inverted" in message


# --- an instance instead of the class -----------------------------------------------------


@pytest.mark.parametrize(
    "check, instance, name",
    [
        (checks.check_multi_head_attention, MultiHeadAttention(8, 2), "multi_head_attention(MultiHeadAttention)"),
    ],
    ids=["multi_head_attention"],
)
def test_an_instance_instead_of_the_class_is_named(check, instance, name):
    message = str(failure(check, instance))
    assert f"pass the class, not an instance: check_{name}" in message, message
