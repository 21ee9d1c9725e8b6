"""check_embedding_scale (§3.4) and check_learned_positions (§3.5), fed the reference, other correct answers,
and the mistakes learners make: each must pass the right answers (printing one line, returning None),
reject each buggy answer with the hint that names its bug, and say "not implemented yet" for a stub.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from check_helpers import stub
from transformer_lessons.checks import ExerciseError
from transformer_lessons.checks.embeddings import check_embedding_scale, check_learned_positions
from transformer_lessons.layers import LearnedPositionalEmbedding

# --- answers, right and buggy -------------------------------------------------------------


def scaled_embedding(table, tokens):
    return table(tokens) * math.sqrt(table.embedding_dim)


def scaled_embedding_by_indexing(table, tokens):
    return table.weight[tokens] * table.weight.shape[1] ** 0.5  # (B, L, D)


def scaled_embedding_scaled_table(table, tokens):
    return F.embedding(tokens, table.weight * math.sqrt(table.embedding_dim))  # scale a copy, then look up


def scaled_embedding_tensor_sqrt(table, tokens):
    return torch.sqrt(torch.tensor(float(table.embedding_dim))) * table(tokens)


def embedding_in_place(table, tokens):
    table.weight.mul_(math.sqrt(table.embedding_dim))
    return table(tokens)


def embedding_data_in_place(table, tokens):
    table.weight.data *= math.sqrt(table.embedding_dim)
    return table(tokens)


class LearnedPositions(LearnedPositionalEmbedding):
    """The package's module, with the exercise's argument order."""

    def __init__(self, max_len, d_model, dropout=0.0):
        super().__init__(d_model, dropout, max_len)


class LearnedPositionsParameter(nn.Module):
    """A plain nn.Parameter table, sliced, with an explicit length check."""

    def __init__(self, max_len, d_model, dropout=0.0):
        super().__init__()
        self.pos = nn.Parameter(torch.zeros(max_len, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        if x.size(1) > self.pos.size(0):
            raise ValueError("too long")
        return self.dropout(x + self.pos[: x.size(1)].unsqueeze(0))


class LearnedPositionsBatchShaped(nn.Module):
    """Positions shaped (B, L), nn.Embedding's own IndexError beyond max_len, F.dropout."""

    def __init__(self, max_len, d_model, dropout=0.0):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)
        self.p = dropout

    def forward(self, x):
        B, L, _ = x.shape
        positions = torch.arange(L).expand(B, L)  # (B, L): the same row for every sequence
        return F.dropout(self.embedding(positions) + x, self.p, training=self.training)


class BuggyPositions(nn.Module):
    def __init__(self, max_len, d_model, dropout=0.0, bug=None):
        super().__init__()
        self.table = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(dropout)
        self.max_len, self.bug = max_len, bug

    def forward(self, x):
        B, L, _ = x.shape
        if self.bug not in ("no_error", "slice") and (
            L > self.max_len or (self.bug == "refuses_max_len" and L >= self.max_len)
        ):
            raise ValueError(f"sequence of length {L} is longer than max_len={self.max_len}")
        positions = torch.arange(L)
        if self.bug == "from_one":
            positions = positions + 1
        if self.bug == "no_error":
            positions = positions.clamp(max=self.max_len - 1)
        if self.bug == "slice":
            return self.dropout(x + self.table.weight[:L])  # beyond max_len: max_len rows, a RuntimeError
        rows = self.table(positions)  # (L, D)
        if self.bug == "rows_only":
            return rows
        if self.bug == "row_zero":
            rows = self.table.weight[0]
        if self.bug == "batch_index":
            rows = self.table(torch.arange(B))[:, None]  # (B, 1, D): the batch index as the position
        if self.bug == "dropout_on_rows":
            return x + self.dropout(rows)
        return self.dropout(x + rows)


def positions_with(bug):
    return lambda max_len, d_model, dropout=0.0: BuggyPositions(max_len, d_model, dropout, bug)


class PositionsStub(nn.Module):
    def __init__(self, max_len, d_model, dropout=0.0):
        super().__init__()
        self.table = nn.Embedding(max_len, d_model)

    def forward(self, x):
        raise NotImplementedError("add the table's rows to x")


# --- the tables ---------------------------------------------------------------------------

CHECKS = {
    "embedding_scale": check_embedding_scale,
    "learned_positions": check_learned_positions,
}


REFERENCES = {
    "embedding_scale": scaled_embedding,
    "learned_positions": LearnedPositions,
}


ALTERNATIVES = {
    "embedding_indexing": ("embedding_scale", scaled_embedding_by_indexing),
    "embedding_scaled_table_copy": ("embedding_scale", scaled_embedding_scaled_table),
    "embedding_tensor_sqrt": ("embedding_scale", scaled_embedding_tensor_sqrt),
    "positions_parameter": ("learned_positions", LearnedPositionsParameter),
    "positions_batch_shaped": ("learned_positions", LearnedPositionsBatchShaped),
}


BUGS = {
    # (exercise, buggy answer, a phrase of the hint that names the bug)
    "embedding_no_scale": ("embedding_scale", lambda t, x: t(x), "the scaling is missing"),
    "embedding_divided": ("embedding_scale", lambda t, x: t(x) / math.sqrt(t.embedding_dim), "don't divide"),
    "embedding_times_d": ("embedding_scale", lambda t, x: t(x) * t.embedding_dim, "SQUARE ROOT of d_model"),
    "embedding_precedence": ("embedding_scale", lambda t, x: t(x) * t.embedding_dim**1 / 2, "precedence"),
    "embedding_sqrt_vocab": ("embedding_scale", lambda t, x: t(x) * math.sqrt(t.num_embeddings), "vocabulary size"),
    "embedding_sqrt_length": ("embedding_scale", lambda t, x: t(x) * math.sqrt(x.size(1)), "sequence length"),
    "embedding_hard_coded": ("embedding_scale", lambda t, x: t(x) * math.sqrt(512), "hard-coded to 512"),
    "embedding_in_place": ("embedding_scale", embedding_in_place, "changed the embedding table's weights in place"),
    "embedding_data_in_place": ("embedding_scale", embedding_data_in_place, "in place"),
    "positions_from_one": ("learned_positions", positions_with("from_one"), "positions start at 0"),
    "positions_rows_only": ("learned_positions", positions_with("rows_only"), "without x"),
    "positions_row_zero": ("learned_positions", positions_with("row_zero"), "every position got row 0"),
    "positions_batch_index": ("learned_positions", positions_with("batch_index"), "depend on the batch"),
    "positions_no_error": ("learned_positions", positions_with("no_error"), "instead of an error"),
    "positions_obscure_error": ("learned_positions", positions_with("slice"), "should raise a clear ValueError"),
    "positions_refuse_max_len": ("learned_positions", positions_with("refuses_max_len"), "exactly max_len"),
    "positions_dropout_on_rows": (
        "learned_positions",
        positions_with("dropout_on_rows"),
        "goes on the sum x + rows (§5.4), not on the position rows alone",
    ),
    "positions_dropout_unused": (
        "learned_positions",
        lambda max_len, d_model, dropout=0.0: LearnedPositions(max_len, d_model, 0.0),
        "the dropout argument is not used",
    ),
}


# --- the tests ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", REFERENCES)
def test_reference_passes(name, capsys):
    assert CHECKS[name](REFERENCES[name]) is None
    out = capsys.readouterr().out
    assert out.startswith(f"✔ {name}: correct (checked ") and out.count("\n") == 1, out


@pytest.mark.parametrize("case", ALTERNATIVES)
def test_other_correct_answers_pass(case, capsys):
    name, answer = ALTERNATIVES[case]
    assert CHECKS[name](answer) is None
    assert capsys.readouterr().out.startswith(f"✔ {name}: correct")


@pytest.mark.parametrize("case", BUGS)
def test_known_bug_is_named(case, capsys):
    name, buggy, hint = BUGS[case]
    with pytest.raises(ExerciseError) as error:
        CHECKS[name](buggy)
    message = str(error.value)
    assert message.startswith(f"{name}: ")
    assert hint in message, message
    assert error.value.known_bug, message
    assert capsys.readouterr().out == ""  # nothing printed on failure: the error says it all


@pytest.mark.parametrize("name", CHECKS)
def test_stub_says_not_implemented_and_returns_none(name, capsys):
    answer = PositionsStub if name == "learned_positions" else stub
    assert CHECKS[name](answer) is None
    out = capsys.readouterr().out
    assert out.startswith(f"{name}: not implemented yet — ") and out.count("\n") == 1, out


def test_an_instance_instead_of_the_class_is_named():
    with pytest.raises(
        ExerciseError, match=r"pass the class, not an instance: check_learned_positions\(LearnedPositions\)"
    ):
        check_learned_positions(LearnedPositions(12, 8))


def test_an_unrecognised_wrong_answer_says_what_differs():
    with pytest.raises(ExerciseError, match="differs from the reference") as error:
        check_embedding_scale(lambda t, x: t(x) * 3.0)
    assert not error.value.known_bug


def test_the_checks_leave_the_learners_random_state_alone():
    torch.manual_seed(1)
    expected = torch.rand(3)
    torch.manual_seed(1)
    check_embedding_scale(scaled_embedding)
    check_learned_positions(LearnedPositions)
    assert torch.equal(torch.rand(3), expected)
