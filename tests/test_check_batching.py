"""check_batch_by_tokens (§5.1), fed the reference, other correct answers, and the mistakes learners make:
it must pass the right answers (printing one line, returning None), reject each buggy answer with the hint
that names its bug, and say "not implemented yet" for a stub.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from check_helpers import stub
from transformer_lessons.checks import ExerciseError
from transformer_lessons.checks import batching as batching_checks
from transformer_lessons.checks.batching import check_batch_by_tokens
from transformer_lessons.data.batching import TokenBatcher

# --- answers, right and buggy -------------------------------------------------------------


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


# --- the tables ---------------------------------------------------------------------------

CHECKS = {
    "batch_by_tokens": check_batch_by_tokens,
}


REFERENCES = {
    "batch_by_tokens": batch_by_tokens_package,
}


ALTERNATIVES = {
    "batch_loop": ("batch_by_tokens", batch_by_tokens),
    "batch_numpy_unstable": ("batch_by_tokens", batch_by_tokens_numpy),
    "batch_longest_batch_first": ("batch_by_tokens", batch_by_tokens_longest_batch_first),
}


BUGS = {
    "batch_counts_tokens": ("batch_by_tokens", batch_with(cost="tokens"), "you counted the tokens"),
    "batch_not_sorted": ("batch_by_tokens", batch_with(order="input"), "sort the indices by length first"),
    "batch_longest_first": ("batch_by_tokens", batch_with(order="longest"), "you sorted longest first"),
    "batch_strict": ("batch_by_tokens", batch_with(strict=True), "off by one"),
    "batch_drops_last": ("batch_by_tokens", batch_with(drop_last=True), "the last batch is missing"),
    "batch_new_row_not_counted": ("batch_by_tokens", batch_with(cost="rows_before"), "count the new row too"),
    "batch_new_length_not_counted": (
        "batch_by_tokens",
        batch_with(cost="longest_before"),
        "count the new item's length",
    ),
    "batch_drops_long": ("batch_by_tokens", batch_with(drop_long=True), "still goes in, alone"),
    "batch_index_twice": ("batch_by_tokens", batch_index_twice, "is in more than one batch"),
    "batch_index_missing": ("batch_by_tokens", batch_index_missing, "is in no batch"),
    "batch_sorts_lengths": ("batch_by_tokens", batch_sorts_lengths, "changed `lengths`"),
    "batch_returns_lengths": ("batch_by_tokens", batch_returns_lengths, "return the INDICES"),
    "batch_empty_batch": ("batch_by_tokens", batch_empty_first, "an empty batch"),
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
    answer = stub
    assert CHECKS[name](answer) is None
    out = capsys.readouterr().out
    assert out.startswith(f"{name}: not implemented yet — ") and out.count("\n") == 1, out


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


def batch_refuses_long_sequences(lengths, max_tokens):
    """A learner's guard: a sequence that alone exceeds the budget is treated as an error."""
    if any(n > max_tokens for n in lengths):
        raise ValueError(f"a sequence is longer than max_tokens={max_tokens}")
    return batch_by_tokens(lengths, max_tokens)


def test_an_answer_that_refuses_an_over_long_sequence_is_told_the_rule():
    with pytest.raises(ExerciseError) as error:
        check_batch_by_tokens(batch_refuses_long_sequences)
    message = str(error.value)
    assert "your code raised ValueError: a sequence is longer than max_tokens" in message
    assert "(12 > 10)" in message and "such a sequence is not an error, it gets a batch of its own" in message


def test_a_crash_on_ordinary_lengths_keeps_the_plain_hint():
    def crashes(lengths, max_tokens):
        raise KeyError("oops")

    with pytest.raises(ExerciseError) as error:
        check_batch_by_tokens(crashes)
    assert "batch of its own" not in str(error.value)
