"""check_positional_encoding (§3.5), fed the reference, correct answers written differently and the bugs learners write."""

from __future__ import annotations

import math

import torch

from transformer_lessons import checks
from transformer_lessons.layers import sinusoidal_positional_encoding

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

# --- answers for the tables below, right and buggy ----------------------------------------


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


def pe_exp_log(max_len, d_model):
    position = torch.arange(max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


# --- right answers and bugs written differently -------------------------------------------


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


# --- the tables ---------------------------------------------------------------------------

REFERENCES = {
    "positional_encoding": (checks.check_positional_encoding, sinusoidal_positional_encoding),
}


# (check, buggy answer, a phrase the hint must contain)
BUGS = {
    # positional encoding
    "pe-swapped": ("positional_encoding", lambda L, D: pe_pairs(L, D).flip(-1).reshape(L, D), "swapped"),
    "pe-base-1000": ("positional_encoding", lambda L, D: sinusoidal_positional_encoding(L, D, base=1000.0), "not 1000"),
    "pe-exponent-i": ("positional_encoding", lambda L, D: pe_exponent_i(L, D), "you used i/d_model"),
    "pe-2i-doubled": ("positional_encoding", pe_two_i_doubled, "the factor 2 is there twice"),
    "pe-start-1": ("positional_encoding", lambda L, D: sinusoidal_positional_encoding(L + 1, D)[1:], "start at 0"),
    "pe-halves": ("positional_encoding", lambda L, D: pe_pairs(L, D).transpose(1, 2).reshape(L, D), "interleaved"),
    "pe-batch-axis": ("positional_encoding", lambda L, D: sinusoidal_positional_encoding(L, D)[None], "2-D table"),
    "pe-float64": ("positional_encoding", lambda L, D: sinusoidal_positional_encoding(L, D).double(), "float32"),
}


# Answers of the wrong shape: the message must say "shape".
WRONG_SHAPES = {
    "positional_encoding": lambda L, D: sinusoidal_positional_encoding(L, D).T,
}


# Correct answers written differently from the package: the checks must accept them too.
ALTERNATIVES = {
    "pe-exp-log": ("positional_encoding", pe_exp_log),
}


# Correct answers written the way a learner would, differently from the reference and the answers above.
WRITTEN_DIFFERENTLY = {
    "pe_double_loop": ("positional_encoding", pe_double_loop),
    "pe_pow": ("positional_encoding", pe_pow),
    "pe_stack_interleave": ("positional_encoding", pe_stack_interleave),
}


# Bugs written in the styles above, each one a mistake the older tests did not feed its check:
# (check, buggy answer, a phrase of the message that names the bug)
BUGS_WRITTEN_DIFFERENTLY = {
    "pe_loop_column_exponent": ("positional_encoding", pe_loop_column_exponent, "you gave every column its own"),
    "pe_loop_column_exponent_2j": ("positional_encoding", pe_loop_column_exponent_2j, "you gave every column its own"),
}


# --- tests --------------------------------------------------------------------------------


PACKAGE_REFERENCES = {
    "positional_encoding": sinusoidal_positional_encoding,
}
