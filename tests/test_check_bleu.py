"""check_modified_precision and check_brevity_penalty (notebook 10), fed right answers written several ways and the bugs learners write.

Each buggy answer is written the way a learner would write it, not with the check's own simulation.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from check_helpers import assert_named, assert_passes, stub
from transformer_lessons.checks import ExerciseError
from transformer_lessons.checks.bleu import (
    _MP_CASES,
    _ngram_stats,
    _reference_stats,
    check_brevity_penalty,
    check_modified_precision,
)

# --- modified_precision and brevity_penalty -----------------------------------------------


def ngram_counts(tokens, n):
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def mp_reference(hypothesis, reference, n):
    hyp, ref = ngram_counts(hypothesis, n), ngram_counts(reference, n)
    return sum(min(c, ref[g]) for g, c in hyp.items()), max(len(hypothesis) - n + 1, 0)


def mp_loop(hypothesis, reference, n):
    left = [tuple(reference[i : i + n]) for i in range(len(reference) - n + 1)]  # each reference n-gram used once
    matches = total = 0
    for i in range(len(hypothesis) - n + 1):
        total += 1
        gram = tuple(hypothesis[i : i + n])
        if gram in left:
            left.remove(gram)
            matches += 1
    return matches, total


def mp_counter_and(hypothesis, reference, n):
    hyp, ref = ngram_counts(hypothesis, n), ngram_counts(reference, n)
    return sum((hyp & ref).values()), sum(hyp.values())  # Counter & keeps the minimum count


def mp_learner(bug):
    def fn(hypothesis, reference, n):
        stop = {"off_by_one": lambda t: len(t) - n, "short_at_end": len}.get(bug, lambda t: len(t) - n + 1)
        hyp = Counter(tuple(hypothesis[i : i + n]) for i in range(stop(hypothesis)))
        ref = Counter(tuple(reference[i : i + n]) for i in range(stop(reference)))
        if bug == "unclipped":
            matches = sum(c for g, c in hyp.items() if g in ref)
        elif bug == "set":
            matches = len(set(hyp) & set(ref))
        else:
            matches = sum(min(c, ref[g]) for g, c in hyp.items())
        if bug == "negative_total":
            return matches, len(hypothesis) - n + 1
        if bug == "ratio":
            return matches / max(sum(hyp.values()), 1)
        return matches, sum(hyp.values())

    return fn


def test_modified_precision_reference_passes(capsys):
    assert_passes(check_modified_precision, mp_reference, "modified_precision", capsys)


@pytest.mark.parametrize("answer", [mp_loop, mp_counter_and], ids=["loop", "counter_and"])
def test_modified_precision_other_correct_answers_pass(answer, capsys):
    assert_passes(check_modified_precision, answer, "modified_precision", capsys)


@pytest.mark.parametrize(
    "bug, hint",
    [
        ("unclipped", "not clipped"),
        ("set", "distinct n-grams"),
        ("off_by_one", "off by one"),
        ("short_at_end", "shorter than n at the end"),
        ("negative_total", "never negative"),
        ("ratio", "not one number"),
    ],
)
def test_modified_precision_bugs_are_named(bug, hint, capsys):
    assert assert_named(check_modified_precision, mp_learner(bug), "modified_precision", hint).known_bug
    assert capsys.readouterr().out == ""


def test_ngram_stats_with_default_knobs_is_sacrebleu():
    for hyp, ref, n in _MP_CASES:
        assert _ngram_stats(hyp, ref, n) == _reference_stats(hyp, ref, n) == mp_reference(hyp, ref, n)


def bp_reference(hyp_len, ref_len):
    if hyp_len > ref_len:
        return 1.0
    return math.exp(1 - ref_len / hyp_len) if hyp_len > 0 else 0.0


def bp_min(hyp_len, ref_len):
    return min(1.0, math.exp(1 - ref_len / max(hyp_len, 1e-300)))  # tiny c: exp(-huge) = 0.0


def bp_torch(hyp_len, ref_len):
    c, r = torch.tensor(float(hyp_len), dtype=torch.float64), torch.tensor(float(ref_len), dtype=torch.float64)
    return torch.where(c > r, torch.ones(()), torch.exp(1 - r / c)).clamp(max=1)  # exp(-inf) = 0 at c = 0


def bp_learner(bug):
    def fn(hyp_len, ref_len):
        c, r = hyp_len, ref_len
        if bug == "inverted":
            return 1.0 if c > r else math.exp(1 - c / r)
        if bug == "always":
            return math.exp(1 - r / c)
        if bug == "sign":
            return 1.0 if c > r else math.exp(r / c - 1)
        if bug == "zero_division":
            return 1.0 if c > r else math.exp(1 - r / c)
        if bug == "inf":
            return 1.0 if c > r else math.exp(1 - r / c) if c else float("nan")
        if bug == "empty_gets_one":
            return 1.0 if c > r or c == 0 else math.exp(1 - r / c)
        if bug == "nltk_order":  # def brevity_penalty(closest_ref_len, hyp_len), NLTK's order, called (hyp, ref)
            c, r = ref_len, hyp_len
            return 1.0 if c > r else math.exp(1 - r / c) if c else 0.0
        raise ValueError(bug)

    return fn


def test_brevity_penalty_reference_passes(capsys):
    assert_passes(check_brevity_penalty, bp_reference, "brevity_penalty", capsys)


@pytest.mark.parametrize("answer", [bp_min, bp_torch], ids=["min", "torch"])
def test_brevity_penalty_other_correct_answers_pass(answer, capsys):
    assert_passes(check_brevity_penalty, answer, "brevity_penalty", capsys)


@pytest.mark.parametrize(
    "bug, hint",
    [
        ("inverted", "ratio is inverted"),
        ("always", "applied to long hypotheses"),
        ("sign", "sign is flipped"),
        ("zero_division", r"(?s)ZeroDivisionError.*empty hypothesis"),
        ("inf", "return 0.0 before dividing"),
        ("empty_gets_one", "gets BP = 0.0"),
        ("nltk_order", r"other order: it is called as fn\(hyp_len, ref_len\)"),
    ],
)
def test_brevity_penalty_bugs_are_named(bug, hint, capsys):
    assert_named(check_brevity_penalty, bp_learner(bug), "brevity_penalty", hint)
    assert capsys.readouterr().out == ""


# --- stubs, random state, docstrings ------------------------------------------------------


@pytest.mark.parametrize(
    "check, name",
    [
        (check_modified_precision, "modified_precision"),
        (check_brevity_penalty, "brevity_penalty"),
    ],
)
def test_stub_says_not_implemented_and_returns_none(check, name, capsys):
    assert check(stub) is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"{name}: not implemented yet — ")


@pytest.mark.parametrize("check", [check_modified_precision, check_brevity_penalty])
def test_every_check_is_documented_with_its_signature(check):
    doc = check.__doc__ or ""
    assert "Expected signature:" in doc and "Raises:" in doc, check.__name__


def test_a_bug_is_named_only_when_it_explains_every_case():
    # Unclipped counts for n = 1 only, right for n >= 2: the first failing case (n = 1) looks like "not clipped",
    # but that bug would also change the n >= 2 cases, which this answer gets right. Naming it would name a
    # mistake the learner did not make everywhere; the check says what differs instead (issue 29).
    right, unclipped = mp_learner("right"), mp_learner("unclipped")

    def mixed(hypothesis, reference, n):
        return unclipped(hypothesis, reference, n) if n == 1 else right(hypothesis, reference, n)

    with pytest.raises(ExerciseError) as error:
        check_modified_precision(mixed)
    assert not error.value.known_bug and "not clipped" not in str(error.value)
    assert "the clipped count of the hypothesis's n-grams" in str(error.value)
    with pytest.raises(ExerciseError) as error:  # the whole bug, on every case: named
        check_modified_precision(unclipped)
    assert error.value.known_bug and "not clipped" in str(error.value)
