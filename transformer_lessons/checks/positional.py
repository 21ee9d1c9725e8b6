"""Check for the sinusoidal positional encoding (paper §3.5).

The reference, :func:`_sinusoid`, computes the table in float64 by the
exp/log form of the formula, deliberately not the package's way, so that the
check stays independent of :mod:`transformer_lessons.layers`.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import torch

from transformer_lessons.checks.common import ExerciseError, call_answer, exercise, expect_tensor, shape_of
from transformer_lessons.checks.evidence import Inputs
from transformer_lessons.checks.slips import Slip, slip_bugs


def _sinusoid(max_len, d_model, base=10000.0, start=0, exponent="2i", layout="interleaved", first="sin", exp=True):
    """The §3.5 table in float64, with knobs that reproduce the common bugs.

    ``exp=False``: the frequencies left in log space, -2i·ln(base)/d_model, the exp of the
    exp/log form forgotten.
    """
    position = torch.arange(start, start + max_len, dtype=torch.float64)[:, None]  # (L, 1)
    pair = torch.arange(d_model // 2, dtype=torch.float64)  # i = 0 .. D/2-1
    # "i" forgot the factor 2; "4i" doubled a 2i that was already there (i in range(0, D, 2), then 2 * i).
    factor = {"2i": 2, "i": 1, "4i": 4}[exponent]
    # exp/log form of base^(-2i/D): deliberately not the package's formula, to stay independent
    log_frequency = -math.log(base) * factor * pair / d_model
    frequency = torch.exp(log_frequency) if exp else log_frequency
    angle = position * frequency  # (L, D/2)
    sin, cos = torch.sin(angle), torch.cos(angle)
    if first == "cos":
        sin, cos = cos, sin
    if layout == "halves":
        return torch.cat([sin, cos], dim=-1).float()  # (L, D)
    return torch.stack([sin, cos], dim=-1).reshape(max_len, d_model).float()  # (L, D/2, 2) -> (L, D)


def _sinusoid_per_column(max_len, d_model, two=False):
    """Bug: every column gets its own frequency, base^(j/D) or base^(2j/D) with j the column."""
    position = torch.arange(max_len, dtype=torch.float64)[:, None]
    column = torch.arange(d_model, dtype=torch.float64)
    angle = position * torch.exp(-math.log(10000.0) * (2 if two else 1) * column / d_model)
    pe = torch.where(column % 2 == 0, torch.sin(angle), torch.cos(angle))
    return pe.float()


# The mistakes _sinusoid reproduces, alone and two at a time (base 1000 and a forgotten exp, say).
_SLIPS = [
    Slip("sin and cos are swapped: even columns (0, 2, ...) hold sin, odd columns cos", {"first": "cos"}),
    Slip("the base should be 10000 (paper §3.5), not 1000: pos / 10000^(2i/d_model)", {"base": 1000.0}),
    Slip(
        "the exponent should be 2i/d_model, where i indexes the sin/cos PAIR (columns 2i and 2i+1); you used i/d_model",
        {"exponent": "i"},
    ),
    Slip(
        "the factor 2 is there twice: the even column indices already are 2i = 0, 2, 4, ..., so the "
        "exponent is that divided by d_model; multiplying it by 2 again makes it 4i/d_model",
        {"exponent": "4i"},
    ),
    Slip(
        "you put all the sines in one half and all the cosines in the other (as tensor2tensor's code does): "
        "a model learns equally well with that, since it is the same table with its columns reordered, but this "
        "exercise asks for the paper's layout, interleaved: sin in columns 0, 2, 4, ..., cos in 1, 3, 5, ..."
        "[[: pe[:, 0::2] = sin, pe[:, 1::2] = cos]]",
        {"layout": "halves"},
    ),
    Slip("positions should start at 0, not 1: row 0 is [0, 1, 0, 1, ...][[: torch.arange(max_len)]]", {"start": 1}),
    Slip(
        "the frequencies are base^(-2i/d_model). Written in log space, -2i·ln(base)/d_model is only their "
        "logarithm: the exp that turns it back into a frequency is missing (the frequencies then fall linearly "
        "below zero instead of shrinking geometrically from 1)",
        {"exp": False},
    ),
]
_OWN_FREQUENCY = (
    "the exponent should be 2i/d_model with i the pair index, so columns 2i and 2i+1 share one "
    "frequency; you gave every column its own"
)


@exercise(
    "positional_encoding",
    "return the (max_len, d_model) table of §3.5: sines in even columns, cosines in odd columns",
)
def check_positional_encoding(fn: Callable[[int, int], torch.Tensor]) -> str:
    """Check the sinusoidal positional encoding table (paper §3.5).

    Expected signature: ``fn(max_len, d_model) -> FloatTensor (max_len, d_model)``
    with ``PE[pos, 2i] = sin(pos / 10000^(2i/d_model))`` in even columns and
    ``PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model))`` in odd columns, pos from 0.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while ``fn`` still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (sin/cos swapped, base 1000,
            exponent i/d or 4i/d, halves instead of interleaved, positions from 1,
            the exp of the log-space form forgotten), or two of them at once.
    """
    seen = Inputs()  # a bug is named only if it explains every input
    for max_len, d_model in ((50, 16), (7, 4)):
        with seen.one():
            pe = expect_tensor(call_answer(fn, max_len, d_model), f"the table for max_len={max_len}, d_model={d_model}")
            if shape_of(pe) == (1, max_len, d_model):
                raise ExerciseError(
                    f"shape {shape_of(pe)}: return the 2-D table (max_len, d_model) = {(max_len, d_model)}; "
                    "the module adds the batch axis when it adds the table to the embeddings"
                )
            if shape_of(pe) != (max_len, d_model):
                raise ExerciseError(
                    f"the table should have shape (max_len, d_model) = {(max_len, d_model)}, got {shape_of(pe)}"
                )
            if pe.dtype != torch.float32:
                raise ExerciseError(
                    f"the table should be float32 (torch's default float), got {pe.dtype}: it is added to float32 "
                    "embeddings; build it from float32 positions[[: torch.arange(..., dtype=torch.float32)]]"
                )
            bugs = slip_bugs(functools.partial(_sinusoid, max_len, d_model), _SLIPS) + [
                (_OWN_FREQUENCY, functools.partial(_sinusoid_per_column, max_len, d_model)),
                (_OWN_FREQUENCY, functools.partial(_sinusoid_per_column, max_len, d_model, two=True)),
            ]
            seen.compare(
                pe, _sinusoid(max_len, d_model), bugs, f"the table for max_len={max_len}, d_model={d_model}", atol=1e-4
            )
    seen.verdict()
    return "shape, dtype, values for two sizes against the formula of §3.5"
