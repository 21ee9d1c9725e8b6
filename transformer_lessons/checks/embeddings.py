"""Checks for what goes in before the first layer: scaled token embeddings (§3.4) and learned positions (§3.5).

The references are the package's own modules: :class:`~transformer_lessons.layers.Embeddings`
(``table(tokens) * sqrt(d_model)``), whose table the learner's function is given, and
:class:`~transformer_lessons.layers.LearnedPositionalEmbedding`, loaded with the
learner's table. The bug simulations redo the same lookups with the mistake in them.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import torch
from torch import nn

from transformer_lessons.checks.common import (
    DROPOUT,
    Bug,
    ExerciseError,
    call_answer,
    call_in_eval,
    diagnose,
    exercise,
    expect_dropout,
    expect_dropout_at,
    fixed_dropout,
    expect_tensor,
    expect_unchanged,
    known_bug,
    build_module,
    describe_raised,
    shape_of,
)
from transformer_lessons.checks.evidence import Inputs
from transformer_lessons.layers import Embeddings, LearnedPositionalEmbedding

_IN_PLACE = (
    "your function changed the embedding table's weights in place (table.weight.mul_(...), "
    "table.weight.data *= ...): every call multiplies the trained weights by sqrt(d_model) again. "
    "Scale the looked-up vectors instead, leaving the table alone[[: return table(tokens) * math.sqrt(d_model)]]"
)


@exercise("embedding_scale", "look the tokens up in the table and multiply the vectors by sqrt(d_model)")
def check_embedding_scale(fn: Callable[[nn.Embedding, torch.Tensor], torch.Tensor]) -> str:
    """Check the scaled token embedding of the paper (§3.4: "we multiply those weights by √d_model").

    Expected signature: ``fn(table, tokens) -> FloatTensor (B, L, D)`` with
    ``table`` an ``nn.Embedding(V, D)`` and ``tokens`` a LongTensor ``(B, L)``,
    returning ``table(tokens) * sqrt(D)``, the same as the package's ``Embeddings``,
    and leaving the table's weights unchanged.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while ``fn`` still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (no scaling, dividing by √d_model,
            scaling by d_model or by d_model / 2, √ of the vocabulary size or of the
            length, a hard-coded 512, the table's weights scaled in place).
    """
    B, L, V, D = 2, 5, 11, 8  # four different sizes, so the wrong one shows
    reference = Embeddings(V, D)
    table = reference.table
    tokens = torch.tensor([[1, 4, 4, 10, 0], [7, 2, 9, 3, 4]])  # (B, L), a repeated id
    expected = reference(tokens)  # before the learner's code can touch the table
    weights, original = table.weight.detach().clone(), tokens.clone()
    out = call_answer(
        fn, table, tokens, hint="tokens (B, L) -> table(tokens) (B, L, D), then multiply by sqrt(d_model)"
    )
    if not torch.equal(table.weight, weights):
        raise known_bug(_IN_PLACE)
    expect_unchanged({"tokens": original}, {"tokens": tokens})
    out = expect_tensor(
        out,
        "the output",
        (B, L, D),
        weights.dtype,
        shape_hint="look every token up: table(tokens) maps (B, L) to (B, L, d_model)",
    )
    looked_up = table(tokens)  # (B, L, D)
    bugs: list[Bug] = [
        (
            "the scaling is missing: multiply the looked-up vectors by the square root of d_model (paper §3.4)"
            "[[: table(tokens) * math.sqrt(d_model)]]",
            lambda: looked_up,
        ),
        (
            "multiply by sqrt(d_model), don't divide by it[[: table(tokens) * math.sqrt(d_model)]]",
            lambda: looked_up / math.sqrt(D),
        ),
        ("multiply by the SQUARE ROOT of d_model, not by d_model[[: math.sqrt(d_model)]]", lambda: looked_up * D),
        (
            "a power 1/2 written without brackets is the power 1 then a division by 2 (Python's precedence)"
            "[[: d_model ** 0.5 or math.sqrt(d_model)]]",
            lambda: looked_up * D / 2,
        ),
        (
            "that is the square root of the vocabulary size (table.num_embeddings): d_model is the vector width, "
            "table.embedding_dim",
            lambda: looked_up * math.sqrt(V),
        ),
        (
            "that is the square root of the sequence length (the length of each row of tokens): d_model is the vector width, "
            "table.embedding_dim",
            lambda: looked_up * math.sqrt(L),
        ),
        (
            "d_model is hard-coded to 512: read it from the table, table.embedding_dim, so the function works for "
            "every model",
            lambda: looked_up * math.sqrt(512),
        ),
    ]
    diagnose(
        out,
        expected,
        bugs,
        "the output",
        "expected the looked-up vectors times sqrt(d_model)[[: table(tokens) * math.sqrt(d_model)]]",
    )
    return "values against layers.Embeddings, shape (B, L, d_model), table and tokens unchanged"


# --- learned positional embeddings -----------------------------------------------------


def _trained_table(module: nn.Module, max_len: int, d_model: int) -> nn.Parameter:
    """The learner's (max_len, d_model) table: an nn.Embedding's weight or an nn.Parameter."""
    found = [p for p in module.parameters() if shape_of(p) == (max_len, d_model)]
    if len(found) == 1:
        return found[0]
    if any(shape_of(p) == (d_model, max_len) for p in module.parameters()):
        raise known_bug(
            f"your table has shape (d_model, max_len) = {(d_model, max_len)}: one ROW per position, "
            "so max_len rows of d_model; the constructor takes max_len first, cls(max_len, d_model, dropout)"
            "[[: nn.Embedding(max_len, d_model)]]"
        )
    if any(shape_of(b) == (max_len, d_model) for b in module.buffers()):
        raise known_bug(
            "your (max_len, d_model) table is a buffer, which is never trained: learned positions are "
            "parameters, which an embedding table holds[[: self.table = nn.Embedding(max_len, d_model)]]"
        )
    if found:
        raise ExerciseError(
            f"your module holds {len(found)} tables of shape (max_len, d_model): keep one"
            "[[: self.table = nn.Embedding(max_len, d_model)]]"
        )
    raise ExerciseError(
        f"your module should hold a trained table of shape (max_len, d_model) = {(max_len, d_model)}, "
        "created in __init__[[: self.table = nn.Embedding(max_len, d_model)]]"
    )


def _expect_too_long_refused(module: nn.Module, x: torch.Tensor, max_len: int) -> None:
    """A sequence longer than max_len must raise ValueError or IndexError, not return or fail obscurely."""
    try:
        out = module(x)
    except (ValueError, IndexError):
        return
    except Exception as error:  # noqa: BLE001 - a learner error, reported with its line
        raise known_bug(
            f"a sequence of {x.size(1)} > max_len = {max_len} positions should raise a clear ValueError; "
            f"instead {describe_raised(error, '')}\n  hint: check the length first, before the lookup"
            "[[: if x.size(1) > self.max_len: raise ValueError(...)]]"
        ) from error
    shape = f" (shape {shape_of(out)})" if isinstance(out, torch.Tensor) else ""
    raise known_bug(
        f"a sequence of {x.size(1)} > max_len = {max_len} positions returned an answer{shape} instead of an error: "
        "the table has no row for those positions, so whatever was added there is wrong. Raise a "
        "ValueError when the length (dim 1) is larger than max_len"
        "[[: if x.size(1) > self.max_len: raise ValueError(f'sequence of length {L} is longer than max_len={max_len}')]]"
    )


def _forward(module: nn.Module, x: torch.Tensor, max_len: int) -> torch.Tensor:
    """The learner's output for x (in eval mode, twice: the same both times); L = max_len must not be refused."""
    try:
        return call_in_eval(
            module,
            x,
            hint="add the table's rows of positions 0 .. L-1 to x"
            "[[: positions = torch.arange(x.size(1)); return x + self.table(positions)]]",
        )
    except ExerciseError as error:
        if x.size(1) == max_len and isinstance(error.__cause__, (ValueError, IndexError)):
            raise known_bug(
                f"a sequence of exactly max_len = {max_len} positions was refused: it fits, rows 0 .. "
                "max_len - 1; raise only when the length is larger than max_len (>, not >=)[[: if x.size(1) > max_len]]"
            ) from error.__cause__
        raise


def _rows_only(out: object, rows: torch.Tensor) -> bool:
    """Did the learner return the table's rows alone, shaped (L, D) or (1, L, D), without adding x?"""
    return (
        isinstance(out, torch.Tensor)
        and out.dim() in (2, 3)
        and shape_of(out)[-2:] == shape_of(rows)
        and (out.dim() == 2 or out.size(0) == 1)
        and torch.allclose(out.reshape(rows.shape), rows)
    )


_NOT_ADDED = "you returned the position rows without x: return x + the rows, (B, L, D) + (L, D) -> (B, L, D)"


def _position_bugs(x: torch.Tensor, W: torch.Tensor) -> list[Bug]:
    """The common mistakes, on x (B, L, D) and the learner's table W (max_len, D)."""
    B, L, D = x.shape
    return [
        (
            "positions start at 0: add table rows 0 .. L-1, not 1 .. L[[: torch.arange(x.size(1))]]",
            lambda: x + W[1 : L + 1],
        ),
        (_NOT_ADDED, lambda: W[:L].expand(B, L, D)),
        (
            "every position got row 0: look up one row PER POSITION, (L, D)[[: self.table(torch.arange(x.size(1)))]]",
            lambda: x + W[0],
        ),
        ("add the positions to x, don't multiply[[: x + self.table(positions)]]", lambda: x * W[:L]),
        (
            "don't scale here: the sqrt(d_model) factor belongs to the token embeddings; just add the rows",
            lambda: x + W[:L] * math.sqrt(D),
        ),
        (
            "don't scale here: the sqrt(d_model) factor belongs to the token embeddings, which arrive already "
            "scaled; just add the rows",
            lambda: x * math.sqrt(D) + W[:L],
        ),
    ]


def _expect_same_rows_in_every_batch_row(m: nn.Module, same: torch.Tensor) -> None:
    """The same sequence in every batch row must get the same output: positions run over the length, not the batch."""
    repeated = call_answer(m, same)
    if (
        isinstance(repeated, torch.Tensor)
        and repeated.shape == same.shape
        and not torch.allclose(repeated, repeated[:1].expand_as(repeated))
    ):
        raise known_bug(
            "the same sequence in two batch rows got different outputs: the positions depend on the batch. The "
            "position of x[b, t] is t alone: the positions run over the length (dim 1), not the batch "
            "size, nor B * L numbers; one (L, D) block of rows is added to every sequence of the batch"
            "[[: positions = torch.arange(x.size(1))]]"
        )


def _expect_dropout_on_the_sum(m: nn.Module, without_dropout, rows: torch.Tensor, x: torch.Tensor) -> None:
    """Dropout on in training only, and on x + rows (§5.4), not on one of the two."""
    expect_dropout(
        m,
        without_dropout,
        (x,),
        call_answer(m, x),
        "to x + the position rows",
    )
    drop = functools.partial(fixed_dropout, p=DROPOUT)
    expect_dropout_at(
        m,
        (x,),
        lambda: drop(x + rows),
        [
            ("the dropout goes on the sum x + rows (§5.4), not on the position rows alone", lambda: x + drop(rows)),
            ("the dropout goes on the sum x + rows (§5.4), not on x alone", lambda: drop(x) + rows),
        ],
        "the output",
    )


@exercise(
    "learned_positions", "add a trained row of d_model numbers to every position, one row per position", takes="class"
)
def check_learned_positions(cls: Callable[..., nn.Module]) -> str:
    """Check learned positional embeddings, the alternative of §3.5 (Table 3, row (E)).

    Expected signature: ``cls(max_len, d_model, dropout=0.0)``, an ``nn.Module`` holding
    a trained table ``nn.Embedding(max_len, d_model)`` (or an ``nn.Parameter`` of that
    shape) whose ``forward(x)`` returns ``dropout(x + table[0 .. L-1])``, the same as the
    package's ``LearnedPositionalEmbedding``, and raises ``ValueError`` (or ``IndexError``)
    when ``L > max_len``. The check gives the table random values, builds the module with
    dropout on and compares in eval mode; in training mode dropout must change the output.

    Shape:
        ``(B, L, D)`` -> ``(B, L, D)``, with ``L <= max_len``.

    Args:
        cls: the learner's class.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (positions from 1, rows returned without x,
            row 0 for every position, positions that depend on the batch, no error
            beyond max_len, dropout left on in eval mode or never applied).
    """
    max_len, D, B, L = 12, 8, 3, 5
    m = build_module(cls, (max_len, D, DROPOUT), "cls(max_len, d_model, dropout)")
    table = _trained_table(m, max_len, D)
    table.copy_(torch.randn(max_len, D))  # the learner's init may be zeros: random rows make every bug show
    W = table.detach().clone()
    reference = LearnedPositionalEmbedding(D, 0.0, max_len).eval()
    reference.table.weight.copy_(W)
    seen = Inputs()  # a bug is named only if it explains every input
    for length in (L, max_len):  # a sequence of exactly max_len positions is allowed
        with seen.one():
            x = torch.randn(B, length, D)
            original = x.clone()
            out = _forward(m, x, max_len)
            expect_unchanged({"x": original}, {"x": x})
            if _rows_only(out, W[:length]):
                raise known_bug(_NOT_ADDED)
            out = expect_tensor(
                out,
                f"the output for L={length}",
                x.shape,
                x.dtype,
                shape_hint="return x + the position rows: (B, L, D) + (L, D) -> (B, L, D)",
            )
            _expect_same_rows_in_every_batch_row(m, x[:1].expand(B, length, D).clone())
            seen.compare(
                out,
                reference(x),
                _position_bugs(x, W),
                f"the output for L={length}",
                "expected x plus the table's rows of its positions[[: x + self.table(torch.arange(x.size(1)))]]",
            )
    seen.verdict()
    _expect_too_long_refused(m, torch.randn(B, max_len + 1, D), max_len)
    _expect_dropout_on_the_sum(
        m, lambda: build_module(cls, (max_len, D, 0.0), "cls(max_len, d_model, dropout)"), W[:L], torch.randn(B, L, D)
    )
    return (
        "values against layers.LearnedPositionalEmbedding for L < max_len and L = max_len, the same rows for "
        "every sequence of a batch, an error beyond max_len, dropout on the sum in training only"
    )
