"""The checks of four exercises, fed the reference, other correct answers, and the mistakes learners make.

check_embedding_scale (§3.4), check_learned_positions (§3.5), check_transformer_forward
(Figure 1) and check_batch_by_tokens (§5.1): each must pass the package's reference and
answers written differently (printing one line, returning None), reject each buggy
answer with the hint that names its bug, and say "not implemented yet" for a stub.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_lessons.checks import ExerciseError
from transformer_lessons.checks import batching as batching_checks
from transformer_lessons.checks.assembly import check_transformer_forward
from transformer_lessons.checks.batching import check_batch_by_tokens
from transformer_lessons.checks.embeddings import check_embedding_scale, check_learned_positions
from transformer_lessons.data.batching import TokenBatcher
from transformer_lessons.layers import LearnedPositionalEmbedding

# --- scaled embeddings ------------------------------------------------------------------


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


# --- learned positions ------------------------------------------------------------------


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
        if self.bug not in ("no_error", "slice") and (L > self.max_len or (self.bug == "refuses_max_len" and L >= self.max_len)):
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
        return self.dropout(x + rows)


def positions_with(bug):
    return lambda max_len, d_model, dropout=0.0: BuggyPositions(max_len, d_model, dropout, bug)


class PositionsStub(nn.Module):
    def __init__(self, max_len, d_model, dropout=0.0):
        super().__init__()
        self.table = nn.Embedding(max_len, d_model)

    def forward(self, x):
        raise NotImplementedError("add the table's rows to x")


# --- the full forward pass --------------------------------------------------------------


def transformer_forward(model, src, tgt_in, src_mask, tgt_mask):
    memory = model.encode(src, src_mask)  # (B, S, D)
    return model.decode(memory, src_mask, tgt_in, tgt_mask)  # (B, T, V)


def transformer_forward_keywords(model, src, tgt_in, src_mask, tgt_mask):
    return model.decode(memory=model.encode(src=src, src_mask=src_mask), src_mask=src_mask, tgt=tgt_in,
                        tgt_mask=tgt_mask)


def transformer_forward_by_hand(model, src, tgt_in, src_mask, tgt_mask):
    memory = model.encoder(model.src_pos(model.src_embed(src)), src_mask)  # (B, S, D)
    hidden = model.decoder(model.tgt_pos(model.tgt_embed(tgt_in)), memory, src_mask, tgt_mask)  # (B, T, D)
    return model.generator(hidden)  # (B, T, V)


def forward_hidden_states(model, src, tgt_in, src_mask, tgt_mask):
    memory = model.encode(src, src_mask)
    return model.decoder(model.tgt_pos(model.tgt_embed(tgt_in)), memory, src_mask, tgt_mask)


# --- batching by tokens -----------------------------------------------------------------


def batch_by_tokens(lengths, max_tokens):
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, batch, longest = [], [], 0
    for i in order:
        if batch and (len(batch) + 1) * max(longest, lengths[i]) > max_tokens:
            batches.append(batch)
            batch, longest = [], 0
        batch.append(i)
        longest = max(longest, lengths[i])
    if batch:
        batches.append(batch)
    return batches


def batch_by_tokens_package(lengths, max_tokens):
    pairs = [([7] * (n - 1), []) for n in lengths]  # TokenBatcher adds <eos>: length n
    return TokenBatcher(pairs, max_tokens, pad_id=0, bos_id=1, eos_id=2, shuffle=False).batch_indices()


def batch_by_tokens_numpy(lengths, max_tokens):
    order = np.argsort(lengths).tolist()  # quicksort: equal lengths in any order
    batches, start = [], 0
    while start < len(order):
        end = start + 1
        while end < len(order) and (end + 1 - start) * lengths[order[end]] <= max_tokens:
            end += 1  # sorted: the new item is the longest
        batches.append(order[start:end])
        start = end
    return batches


def batch_by_tokens_longest_batch_first(lengths, max_tokens):
    return [list(reversed(batch)) for batch in reversed(batch_by_tokens(lengths, max_tokens))]


def batch_with(**knobs):
    return lambda lengths, max_tokens: batching_checks._greedy(lengths, max_tokens, **knobs)


def batch_index_twice(lengths, max_tokens):
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, batch = [], []
    for i in order:
        if batch and (len(batch) + 1) * max(lengths[j] for j in batch + [i]) > max_tokens:
            batches.append(batch + [i])  # the bug: i goes into the full batch too
            batch = []
        batch.append(i)
    return batches + [batch]


def batch_index_missing(lengths, max_tokens):
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, batch = [], []
    for i in order:
        if batch and (len(batch) + 1) * max(lengths[j] for j in batch + [i]) > max_tokens:
            batches.append(batch)
            batch = []  # the bug: i is never added
            continue
        batch.append(i)
    return batches + ([batch] if batch else [])


def batch_sorts_lengths(lengths, max_tokens):
    lengths.sort()
    return batch_by_tokens(lengths, max_tokens)


def batch_returns_lengths(lengths, max_tokens):
    return [[lengths[i] for i in batch] for batch in batch_by_tokens(lengths, max_tokens)]


def batch_empty_first(lengths, max_tokens):
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, batch = [], []
    for i in order:
        if (len(batch) + 1) * max([lengths[j] for j in batch] + [lengths[i]]) > max_tokens:
            batches.append(batch)  # the bug: appended even when empty
            batch = []
        batch.append(i)
    return batches + ([batch] if batch else [])


def stub(*args):
    raise NotImplementedError("write it")


# --- the tables -------------------------------------------------------------------------

CHECKS = {
    "embedding_scale": check_embedding_scale,
    "learned_positions": check_learned_positions,
    "transformer_forward": check_transformer_forward,
    "batch_by_tokens": check_batch_by_tokens,
}

REFERENCES = {
    "embedding_scale": scaled_embedding,
    "learned_positions": LearnedPositions,
    "transformer_forward": lambda model, src, tgt_in, src_mask, tgt_mask: model(src, tgt_in, src_mask, tgt_mask),
    "batch_by_tokens": batch_by_tokens_package,
}

ALTERNATIVES = {
    "embedding_indexing": ("embedding_scale", scaled_embedding_by_indexing),
    "embedding_scaled_table_copy": ("embedding_scale", scaled_embedding_scaled_table),
    "embedding_tensor_sqrt": ("embedding_scale", scaled_embedding_tensor_sqrt),
    "positions_parameter": ("learned_positions", LearnedPositionsParameter),
    "positions_batch_shaped": ("learned_positions", LearnedPositionsBatchShaped),
    "forward_encode_decode": ("transformer_forward", transformer_forward),
    "forward_keywords": ("transformer_forward", transformer_forward_keywords),
    "forward_by_hand": ("transformer_forward", transformer_forward_by_hand),
    "batch_loop": ("batch_by_tokens", batch_by_tokens),
    "batch_numpy_unstable": ("batch_by_tokens", batch_by_tokens_numpy),
    "batch_longest_batch_first": ("batch_by_tokens", batch_by_tokens_longest_batch_first),
}

BUGS = {
    # (exercise, buggy answer, a phrase of the hint that names the bug)
    "embedding_no_scale": ("embedding_scale", lambda t, x: t(x), "the scaling is missing"),
    "embedding_divided": ("embedding_scale", lambda t, x: t(x) / math.sqrt(t.embedding_dim), "don't divide"),
    "embedding_times_d": ("embedding_scale", lambda t, x: t(x) * t.embedding_dim, "SQUARE ROOT of d_model"),
    "embedding_precedence": ("embedding_scale", lambda t, x: t(x) * t.embedding_dim ** 1 / 2, "precedence"),
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
    "positions_dropout_unused": ("learned_positions",
                                 lambda max_len, d_model, dropout=0.0: LearnedPositions(max_len, d_model, 0.0),
                                 "the dropout argument is not used"),
    "forward_tgt_mask_as_memory_mask": (
        "transformer_forward", lambda m, s, t, sm, tm: m.decode(m.encode(s, sm), tm, t, tm),
        "the cross-attention got tgt_mask"),
    "forward_masks_swapped": (
        "transformer_forward", lambda m, s, t, sm, tm: m.decode(m.encode(s, sm), tm, t, sm), "swapped in decode"),
    "forward_no_src_mask_in_decode": (
        "transformer_forward", lambda m, s, t, sm, tm: m.decode(m.encode(s, sm), None, t, tm),
        "src_mask is missing in decode"),
    "forward_no_src_mask_in_encode": (
        "transformer_forward", lambda m, s, t, sm, tm: m.decode(m.encode(s), sm, t, tm), "src_mask is missing in encode"),
    "forward_encodes_tgt_in": (
        "transformer_forward", lambda m, s, t, sm, tm: m.decode(m.encode(t, sm), sm, t, tm), "the encoder reads the SOURCE"),
    "forward_decodes_src": (
        "transformer_forward", lambda m, s, t, sm, tm: m.decode(m.encode(s, sm), sm, s, tm), "the decoder reads the TARGET"),
    "forward_hidden_states": ("transformer_forward", forward_hidden_states, "hidden states"),
    "forward_softmax": (
        "transformer_forward", lambda m, s, t, sm, tm: m(s, t, sm, tm).softmax(-1), "return the logits, not probabilities"),
    "forward_no_tgt_mask": (
        "transformer_forward", lambda m, s, t, sm, tm: m.decode(m.encode(s, sm), sm, t), "tgt_mask is missing"),
    "batch_counts_tokens": ("batch_by_tokens", batch_with(cost="tokens"), "you counted the tokens"),
    "batch_not_sorted": ("batch_by_tokens", batch_with(order="input"), "sort the indices by length first"),
    "batch_longest_first": ("batch_by_tokens", batch_with(order="longest"), "you sorted longest first"),
    "batch_strict": ("batch_by_tokens", batch_with(strict=True), "off by one"),
    "batch_drops_last": ("batch_by_tokens", batch_with(drop_last=True), "the last batch is missing"),
    "batch_new_row_not_counted": ("batch_by_tokens", batch_with(cost="rows_before"), "count the new row too"),
    "batch_new_length_not_counted": ("batch_by_tokens", batch_with(cost="longest_before"), "count the new item's length"),
    "batch_drops_long": ("batch_by_tokens", batch_with(drop_long=True), "still goes in, alone"),
    "batch_index_twice": ("batch_by_tokens", batch_index_twice, "is in more than one batch"),
    "batch_index_missing": ("batch_by_tokens", batch_index_missing, "is in no batch"),
    "batch_sorts_lengths": ("batch_by_tokens", batch_sorts_lengths, "changed `lengths`"),
    "batch_returns_lengths": ("batch_by_tokens", batch_returns_lengths, "return the INDICES"),
    "batch_empty_batch": ("batch_by_tokens", batch_empty_first, "an empty batch"),
}


# --- the tests --------------------------------------------------------------------------


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
    with pytest.raises(ExerciseError, match=r"pass the class, not an instance: check_learned_positions\(LearnedPositions\)"):
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


@pytest.mark.parametrize("seed", range(20))
def test_the_bug_simulation_with_default_knobs_is_token_batchers_rule(seed):
    generator = torch.Generator().manual_seed(seed)
    n = int(torch.randint(0, 30, (1,), generator=generator))
    lengths = torch.randint(1, 25, (n,), generator=generator).tolist()
    max_tokens = int(torch.randint(5, 80, (1,), generator=generator))
    assert batching_checks._greedy(lengths, max_tokens) == batching_checks._reference(lengths, max_tokens)


def test_every_batching_bug_changes_the_answer_on_the_checks_lists():
    # Otherwise a bug could pass, or be named by another bug's hint.
    lengths, max_tokens = batching_checks._cases()[0]
    answers = [batching_checks._greedy(lengths, max_tokens, **knobs) for _, knobs in batching_checks._BUGS]
    signatures = [batching_checks._signature(lengths, a) for a in answers]
    reference = batching_checks._signature(lengths, batching_checks._reference(lengths, max_tokens))
    assert reference not in signatures
    assert len({tuple(s) for s in signatures}) == len(signatures)
