"""check_build_vocab, fed the reference and the vocabulary bugs learners actually write.

Each buggy answer below is written the way a learner would write it (not with the
check's own simulation), so the test shows that the check recognises real code.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from transformer_lessons import checks, data
from transformer_lessons.checks import ExerciseError
from transformer_lessons.checks import vocab as check_vocab
from transformer_lessons.data import SPECIALS, Vocab

# Collected here and run on this file's tables (check_tables.py, conftest.pytest_generate_tests):
from check_tables import (
    test_correct_answer_written_differently_passes,  # noqa: F401
    test_package_reference_passes,  # noqa: F401
)

# --- a correct answer, and correct answers written differently -----------------------


def build_vocab(token_lists, min_freq):
    return Vocab.build(token_lists, min_freq=min_freq).itos


def build_vocab_by_hand(token_lists, min_freq):
    counts = {}
    for sentence in token_lists:
        for token in sentence:
            counts[token] = counts.get(token, 0) + 1
    words = sorted(counts, key=lambda t: (-counts[t], t))
    return ["<unk>", "<pad>", "<bos>", "<eos>"] + [t for t in words if counts[t] >= min_freq]


def build_vocab_two_sorts(token_lists, min_freq):
    counts = Counter(t for s in token_lists for t in s)
    kept = sorted(t for t in counts if counts[t] >= min_freq)  # alphabetical first...
    kept.sort(key=counts.__getitem__, reverse=True)  # ...then a stable sort by count keeps ties alphabetical
    return tuple(SPECIALS) + tuple(kept)  # a tuple is accepted too


# --- buggy answers -------------------------------------------------------------------


def _counts(token_lists):
    return Counter(t for s in token_lists for t in s)


def _ordered(counts, min_freq):
    return sorted((t for t, n in counts.items() if n >= min_freq), key=lambda t: (-counts[t], t))


def no_specials(token_lists, min_freq):
    return _ordered(_counts(token_lists), min_freq)


def specials_wrong_order(token_lists, min_freq):
    return ["<pad>", "<unk>", "<bos>", "<eos>"] + _ordered(_counts(token_lists), min_freq)


def specials_last(token_lists, min_freq):
    return _ordered(_counts(token_lists), min_freq) + list(SPECIALS)


def no_eos(token_lists, min_freq):
    return ["<unk>", "<pad>", "<bos>"] + _ordered(_counts(token_lists), min_freq)


def greater_than(token_lists, min_freq):
    counts = _counts(token_lists)
    return list(SPECIALS) + sorted((t for t, n in counts.items() if n > min_freq), key=lambda t: (-counts[t], t))


def lowercased(token_lists, min_freq):
    return list(SPECIALS) + _ordered(Counter(t.lower() for s in token_lists for t in s), min_freq)


def alphabetical(token_lists, min_freq):
    counts = _counts(token_lists)
    return list(SPECIALS) + sorted(t for t, n in counts.items() if n >= min_freq)


def most_common_ties(token_lists, min_freq):
    return list(SPECIALS) + [t for t, n in _counts(token_lists).most_common() if n >= min_freq]


def reverse_sorted(token_lists, min_freq):
    counts = _counts(token_lists)
    return list(SPECIALS) + sorted(
        (t for t in counts if counts[t] >= min_freq), key=lambda t: (counts[t], t), reverse=True
    )


def least_frequent_first(token_lists, min_freq):
    counts = _counts(token_lists)
    return list(SPECIALS) + sorted((t for t in counts if counts[t] >= min_freq), key=lambda t: (counts[t], t))


def set_order_ties(token_lists, min_freq):
    # Sorted by count only, from a set: ties in hash order (here made deterministic, reverse first-seen).
    counts = _counts(token_lists)
    kept = [t for t in reversed(list(counts)) if counts[t] >= min_freq]
    return list(SPECIALS) + sorted(kept, key=lambda t: -counts[t])


def duplicates(token_lists, min_freq):
    counts = _counts(token_lists)
    words = [t for s in token_lists for t in s if counts[t] >= min_freq]  # one entry per occurrence
    return list(SPECIALS) + sorted(words, key=lambda t: (-counts[t], t))


def once_per_sentence(token_lists, min_freq):
    counts = Counter(t for s in token_lists for t in set(s))
    return list(SPECIALS) + _ordered(counts, min_freq)


def counter_reset_in_loop(token_lists, min_freq):
    for sentence in token_lists:
        counts = Counter(sentence)
    return list(SPECIALS) + _ordered(counts, min_freq)


def min_freq_ignored(token_lists, min_freq):
    return list(SPECIALS) + _ordered(_counts(token_lists), 1)


def min_freq_hard_coded(token_lists, min_freq):
    return list(SPECIALS) + _ordered(_counts(token_lists), 2)


def keeps_rare(token_lists, min_freq):
    counts = _counts(token_lists)
    return list(SPECIALS) + sorted((t for t, n in counts.items() if n < min_freq), key=lambda t: (-counts[t], t))


def modifies_input(token_lists, min_freq):
    for sentence in token_lists:
        sentence.append("<eos>")  # ends the caller's sentences too
    return build_vocab(token_lists, min_freq)


BUGS = {
    "no-specials": (no_specials, "special tokens are missing"),
    "specials-wrong-order": (specials_wrong_order, "wrong order"),
    "specials-last": (specials_last, "must come FIRST"),
    "one-special-missing": (no_eos, "missing: <eos>"),
    "greater-than": (greater_than, "off by one"),
    "lowercased": (lowercased, "lowercased"),
    "alphabetical": (alphabetical, "sorted alphabetically"),
    "most-common-ties": (most_common_ties, "first seen"),
    "reverse-sorted": (reverse_sorted, "reverse alphabetical"),
    "least-frequent-first": (least_frequent_first, "least frequent first"),
    "set-order-ties": (set_order_ties, "same count must be in alphabetical order"),
    "duplicates": (duplicates, "duplicates"),
    "once-per-sentence": (once_per_sentence, "once per sentence"),
    "counter-reset-in-loop": (counter_reset_in_loop, "only the last sentence"),
    "min-freq-ignored": (min_freq_ignored, "min_freq is ignored"),
    "min-freq-hard-coded": (min_freq_hard_coded, "hard-coded"),
    "keeps-rare": (keeps_rare, "reversed"),
    "modifies-input": (modifies_input, "changed its input"),
}

WRONG_TYPES = {
    "none": (lambda tl, m: None, "return"),
    "vocab-object": (lambda tl, m: Vocab.build(tl, min_freq=m), "not a Vocab"),
    "stoi-dict": (lambda tl, m: Vocab.build(tl, min_freq=m).stoi, "not a dict"),
    "string": (lambda tl, m: " ".join(Vocab.build(tl, min_freq=m).itos), "got str"),
    "token-count-pairs": (lambda tl, m: list(_counts(tl).items()), "(token, count) pairs"),
    "ids": (lambda tl, m: list(range(len(Vocab.build(tl, min_freq=m)))), "got int"),
}


# --- tests ---------------------------------------------------------------------------


def test_reference_passes_with_one_line(capsys):
    assert checks.check_build_vocab(build_vocab) is None
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("✔ build_vocab: correct")


@pytest.mark.parametrize("answer", [build_vocab_by_hand, build_vocab_two_sorts])
def test_other_correct_answers_pass(answer, capsys):
    assert checks.check_build_vocab(answer) is None
    assert capsys.readouterr().out.startswith("✔ build_vocab: correct")


@pytest.mark.parametrize("case", BUGS)
def test_known_bug_is_named(case, capsys):
    buggy, hint = BUGS[case]
    with pytest.raises(ExerciseError) as error:
        checks.check_build_vocab(buggy)
    message = str(error.value)
    assert message.startswith("build_vocab: ")
    assert hint in message, message
    assert capsys.readouterr().out == ""


def test_every_bug_is_caught_by_its_own_hint():
    # No two bugs in the zoo may be reported with the same message: each hint names one mistake.
    messages = {}
    for case, (buggy, _) in BUGS.items():
        with pytest.raises(ExerciseError) as error:
            checks.check_build_vocab(buggy)
        messages[case] = str(error.value).split("\n")[0]
    assert len(set(messages.values())) == len(messages), messages


def test_stub_returns_none_and_says_so(capsys):
    def stub(token_lists, min_freq):
        raise NotImplementedError("count, filter, sort")

    assert checks.check_build_vocab(stub) is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert out.startswith("build_vocab: not implemented yet — ")


@pytest.mark.parametrize("case", WRONG_TYPES)
def test_wrong_type_is_reported(case):
    answer, hint = WRONG_TYPES[case]
    with pytest.raises(ExerciseError, match="build_vocab: ") as error:
        checks.check_build_vocab(answer)
    assert hint in str(error.value), str(error.value)


def test_learner_exception_is_reported_and_chained():
    def broken(token_lists, min_freq):
        raise KeyError("the")

    with pytest.raises(ExerciseError, match="your code raised KeyError") as error:
        checks.check_build_vocab(broken)
    assert isinstance(error.value.__cause__, KeyError)


def test_an_unknown_bug_gets_a_specific_message():
    def drops_punctuation(token_lists, min_freq):
        return [t for t in build_vocab(token_lists, min_freq) if t != "."]

    with pytest.raises(ExerciseError, match=r"missing '\.' \(seen \d+x\)"):
        checks.check_build_vocab(drops_punctuation)


def test_check_is_documented_with_its_signature():
    doc = checks.check_build_vocab.__doc__ or ""
    assert "Expected signature:" in doc and "Raises:" in doc
    assert "check_build_vocab" in checks.__all__


def test_bug_simulation_with_default_knobs_is_the_reference():
    # _vocab_itos only reproduces bugs; with its default knobs it must build what Vocab.build builds.
    token_lists = [sentence.split() for sentence in check_vocab._VOCAB_SENTENCES]
    for min_freq in check_vocab._VOCAB_CASES:
        assert check_vocab._vocab_itos(token_lists, min_freq) == build_vocab(token_lists, min_freq)


# --- right answers written differently, and the package's own -----------------------------


def vocab_most_common_then_sorted(token_lists, min_freq):
    counts = Counter(token for sentence in token_lists for token in sentence)
    kept = [(token, n) for token, n in counts.most_common() if n >= min_freq]
    kept.sort(key=lambda pair: (-pair[1], pair[0]))  # most_common's ties are first-seen: re-sort them by token
    return [*SPECIALS] + [token for token, _ in kept]


def vocab_defaultdict_items(token_lists, min_freq):
    counts = defaultdict(int)
    for sentence in token_lists:
        for token in sentence:
            counts[token] += 1
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    itos = ["<unk>", "<pad>", "<bos>", "<eos>"]
    for token, n in ranked:
        if n < min_freq:
            break  # sorted by count: every token after this one is rarer
        itos.append(token)
    return itos


# Correct answers written the way a learner would, differently from the reference and the answers above.
WRITTEN_DIFFERENTLY = {
    "vocab_most_common_then_sorted": ("build_vocab", vocab_most_common_then_sorted),
    "vocab_defaultdict_items": ("build_vocab", vocab_defaultdict_items),
}


PACKAGE_REFERENCES = {
    "build_vocab": lambda token_lists, min_freq: data.Vocab.build(token_lists, min_freq=min_freq).itos,
}
