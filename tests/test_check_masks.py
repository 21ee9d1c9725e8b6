"""check_causal_mask, check_padding_mask, check_target_mask and check_mask_inversion, fed the reference,
correct answers written differently and the mask bugs learners write.
"""

from __future__ import annotations

import pytest
import torch

from check_helpers import failure
from transformer_lessons import checks
from transformer_lessons.masks import causal_mask, padding_mask, target_mask

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
    test_wrong_shape_is_reported,  # noqa: F401
)

# --- right answers and bugs written differently -------------------------------------------


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


# --- the tables ---------------------------------------------------------------------------

REFERENCES = {
    "causal_mask": (checks.check_causal_mask, causal_mask),
    "padding_mask": (checks.check_padding_mask, padding_mask),
    "target_mask": (checks.check_target_mask, target_mask),
    "mask_inversion": (checks.check_mask_inversion, lambda blocked: ~blocked),
}


# (check, buggy answer, a phrase the hint must contain)
BUGS = {
    # causal mask
    "causal-no-diagonal": (
        "causal_mask",
        lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1),
        "diagonal is excluded",
    ),
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
    "target-query-padding": (
        "target_mask",
        lambda t, p: (t != p)[:, None, :, None] & causal_mask(t.size(1)),
        "queries (rows)",
    ),
    "target-upper": ("target_mask", lambda t, p: padding_mask(t, p) & causal_mask(t.size(1)).T, "upper triangle"),
    "target-no-diagonal": (
        "target_mask",
        lambda t, p: padding_mask(t, p) & causal_mask(t.size(1)).tril(-1),
        "diagonal",
    ),
    "inversion-unchanged": ("mask_inversion", lambda b: b.clone(), "input unchanged"),
    "inversion-arithmetic": ("mask_inversion", lambda b: 1 - b.int(), "dtype"),
    "inversion-in-place": ("mask_inversion", lambda b: b.logical_not_(), "in place"),
    "inversion-all-true": ("mask_inversion", lambda b: torch.ones_like(b), "attend everywhere"),
    "padding-inverted": ("padding_mask", lambda t, p: (t == p)[:, None, None, :], "inverted"),
    "padding-2d": ("padding_mask", lambda t, p: t != p, "(B, S)"),
    "padding-queries": ("padding_mask", lambda t, p: (t != p)[:, None, :, None], "queries (rows)"),
    "padding-float": ("padding_mask", lambda t, p: (t != p).float()[:, None, None, :], "bool"),
    "padding-hard-coded": ("padding_mask", lambda t, p: (t != 0)[:, None, None, :], "hard-code"),
}


# Answers of the wrong shape: the message must say "shape".
WRONG_SHAPES = {
    "causal_mask": lambda n: torch.ones(n, n + 1, dtype=torch.bool).tril(),
    "padding_mask": lambda t, p: (t != p)[:, None, :],
    "target_mask": lambda t, p: target_mask(t, p)[..., :-1],
    "mask_inversion": lambda b: (~b)[:-1],
}


# Correct answers written differently from the package: the checks must accept them too.
ALTERNATIVES = {
    "causal-tril-of-ones": ("causal_mask", lambda n: torch.tril(torch.ones(n, n)).bool()),
    "padding-unsqueeze": ("padding_mask", lambda t, p: (t != p).unsqueeze(1).unsqueeze(2)),
}


# Correct answers written the way a learner would, differently from the reference and the answers above.
WRITTEN_DIFFERENTLY = {
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
}


# Bugs written in the styles above, each one a mistake the older tests did not feed its check:
# (check, buggy answer, a phrase of the message that names the bug)
BUGS_WRITTEN_DIFFERENTLY = {
    "causal_arange_strict": ("causal_mask", causal_arange_strict, "the diagonal is excluded"),
}


# --- tests --------------------------------------------------------------------------------


PACKAGE_REFERENCES = {
    "causal_mask": causal_mask,
    "padding_mask": padding_mask,
    "target_mask": target_mask,
}


# --- pad ids ------------------------------------------------------------------------------


@pytest.mark.parametrize("hard_coded", [1, 0])
def test_padding_mask_with_a_hard_coded_pad_id_is_named(hard_coded):
    def padding_mask(tokens, pad_id):
        return (tokens != hard_coded)[:, None, None, :]

    assert "hard-code the pad id" in str(failure(checks.check_padding_mask, padding_mask))


@pytest.mark.parametrize("hard_coded", [1, 0])
def test_target_mask_with_a_hard_coded_pad_id_is_named(hard_coded):
    def target_mask(tokens, pad_id):
        return (tokens != hard_coded)[:, None, None, :] & causal_mask(tokens.size(1))

    assert "hard-code the pad id" in str(failure(checks.check_target_mask, target_mask))


def test_masks_are_checked_with_several_pad_ids(capsys):
    seen = []

    def recording(tokens, pad_id):
        seen.append(pad_id)
        return padding_mask(tokens, pad_id)

    checks.check_padding_mask(recording)
    assert len(set(seen)) >= 3 and {0, 1} <= set(seen)
    seen.clear()
    checks.check_target_mask(lambda tokens, pad_id: recording(tokens, pad_id) & causal_mask(tokens.size(1)))
    assert len(set(seen)) >= 3 and {0, 1} <= set(seen)
