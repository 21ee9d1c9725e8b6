"""Check for building a vocabulary: the specials first, then the words seen at least ``min_freq`` times.

The reference is ``data.Vocab.build(token_lists, min_freq).itos``; the specials
and their ids are those of :mod:`transformer_lessons.specials`.
:func:`_vocab_itos` rebuilds the list with knobs, only to reproduce the mistakes
learners make (lowercasing, ``>`` for ``>=``, alphabetical order, ...).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import operator
from collections import Counter
from typing import Any, Callable, Iterator, NoReturn

from transformer_lessons.checks.common import NO_RETURN, ExerciseError, call_answer, exercise, known_bug
from transformer_lessons.checks.evidence import Inputs
from transformer_lessons.checks.slips import Slip, slip_bugs
from transformer_lessons.data import Vocab
from transformer_lessons.specials import BOS_ID, EOS_ID, PAD_ID, SPECIALS

# Tokenized captions, small enough to count by hand, built so that every bug below
# gives a different list: "A"/"a" (case), "the" twice in one sentence (counting once
# per sentence), counts of exactly 2 and 3 (the min_freq boundary), and a three-way
# tie at count 2 whose first-seen order ("dog", "man", "ball") is neither
# alphabetical nor reverse alphabetical.
_VOCAB_SENTENCES = [
    "A dog runs after a ball .",
    "A man throws the ball to the dog .",
    "Two dogs play in the snow .",
    "A man and a girl play .",
    "a girl plays with Two dogs .",
]
_VOCAB_CASES = (2, 3, 1)  # min_freq values; 3 before 1, so a hard-coded 2 is told apart from ">"


def _vocab_itos(token_lists, min_freq, *, lower=False, keep=">=", order="frequency", count="all") -> list[str]:
    """A vocabulary list with knobs that reproduce the common bugs (defaults: the correct rule)."""
    counts: Counter = Counter()
    for tokens in token_lists:
        tokens = [t.lower() for t in tokens] if lower else tokens
        if count == "last_sentence":  # the Counter re-created inside the loop
            counts = Counter()
        counts.update(dict.fromkeys(tokens, 1) if count == "once_per_sentence" else tokens)
    passes = {
        ">=": lambda n: n >= min_freq,
        ">": lambda n: n > min_freq,
        "<": lambda n: n < min_freq,
        "all": lambda n: True,
    }[keep]
    kept = [
        t for t, n in counts.most_common() if passes(n) and t not in SPECIALS
    ]  # most_common: ties in first-seen order
    if order == "frequency":
        kept.sort(key=lambda t: (-counts[t], t))
    elif order == "alphabetical":
        kept.sort()
    elif order == "ascending":
        kept.sort(key=lambda t: (counts[t], t))
    elif order == "reverse":  # sorted(..., key=(count, token), reverse=True)
        kept.sort(key=lambda t: (counts[t], t), reverse=True)
    return [*SPECIALS, *kept]  # order == "first_seen" keeps most_common's order


_ORDER_KEY = "sorted(kept, key=lambda t: (-counts[t], t))"


def _vocab_bugs(token_lists, min_freq) -> list[tuple[str, Callable[[], list[str]]]]:
    """The known mistakes, alone and two at a time (lowercased AND > for >=, say): each hint, and its list."""

    def simulate(min_freq=min_freq, **knobs):
        return _vocab_itos(token_lists, min_freq, **knobs)

    slips = [
        Slip(
            "you lowercased the tokens: keep their case, 'A' and 'a' are different tokens. The model's output is cased "
            "English and BLEU is scored on cased text, so the vocabulary must keep case",
            {"lower": True},
        ),
        Slip(
            "off by one: keep every token seen AT LEAST min_freq times, count >= min_freq (you used >)", {"keep": ">"}
        ),
        Slip(
            "the comparison is reversed: keep the FREQUENT tokens, count >= min_freq; the rare ones are the ones that "
            "become <unk>",
            {"keep": "<"},
        ),
        Slip(
            "min_freq is ignored: drop the tokens seen fewer than min_freq times (they become <unk>)", {"keep": "all"}
        ),
        Slip("min_freq seems hard-coded to 2: use the argument", {"min_freq": 2}),
        Slip(
            f"the tokens are sorted alphabetically: order them by frequency, most frequent first, ties alphabetically: "
            f"{_ORDER_KEY}",
            {"order": "alphabetical"},
        ),
        Slip(
            f"least frequent first: order by DEcreasing count, ties alphabetically: {_ORDER_KEY}",
            {"order": "ascending"},
        ),
        Slip(
            f"ties are in the order the tokens were first seen (what Counter.most_common gives): break ties "
            f"alphabetically, {_ORDER_KEY}, so the same data always gives the same ids",
            {"order": "first_seen"},
        ),
        Slip(
            f"ties come out in reverse alphabetical order (reverse=True reverses the tie-break too): use {_ORDER_KEY}",
            {"order": "reverse"},
        ),
        Slip(
            "each token is counted once per sentence (a set of the sentence?): count every occurrence, a word used "
            "twice in a sentence counts twice",
            {"count": "once_per_sentence"},
        ),
        Slip(
            "only the last sentence is counted: create the Counter once, before the loop over sentences, and update it "
            "with every sentence",
            {"count": "last_sentence"},
        ),
    ]
    return slip_bugs(simulate, slips)


def _short_list(tokens: list[str], limit: int = 24) -> str:
    return repr(tokens) if len(tokens) <= limit else f"{repr(tokens[:limit])[:-1]}, ... ({len(tokens)} in all)]"


def _expect_token_list(value: Any) -> list[str]:
    """Raise ExerciseError unless value is a list (or tuple) of strings; return it as a list."""
    if value is None:
        raise ExerciseError(NO_RETURN)
    if hasattr(value, "itos") and not isinstance(value, (list, tuple)):
        raise ExerciseError(f"return the list of tokens itself (the itos list), not a {type(value).__name__}")
    if isinstance(value, dict):
        raise ExerciseError(
            "return a list (itos[i] is the token with id i), not a dict: token -> id is stoi, which Vocab derives from the list"
        )
    if not isinstance(value, (list, tuple)):
        raise ExerciseError(f"return a list of tokens (str), got {type(value).__name__}")
    for item in value:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            raise ExerciseError("return only the tokens, not (token, count) pairs[[: [token for token, count in ...]]]")
        if not isinstance(item, str):
            raise ExerciseError(f"every entry of the list should be a token (str), got {type(item).__name__}: {item!r}")
    return list(value)


def _check_specials(itos: list[str]) -> None:
    order = ", ".join(SPECIALS)
    ids = f"ids 0 to {len(SPECIALS) - 1}"
    if tuple(itos[: len(SPECIALS)]) == SPECIALS:
        return
    missing = [s for s in SPECIALS if s not in itos]
    if len(missing) == len(SPECIALS):
        raise known_bug(
            f"the special tokens are missing: the list must start with {order} ({ids}; the rest of the "
            f"course relies on pad_id = {PAD_ID}, bos_id = {BOS_ID} and eos_id = {EOS_ID})"
        )
    if missing:
        raise known_bug(f"special token(s) missing: {', '.join(missing)}; the list must start with {order}")
    if set(itos[: len(SPECIALS)]) == set(SPECIALS):
        raise known_bug(
            f"the special tokens are in the wrong order: {', '.join(itos[: len(SPECIALS)])}; they must be {order}, in that order"
        )
    raise known_bug(f"the special tokens must come FIRST, in the order {order} ({ids}), before every word")


def _vocab_case(fn: Callable, token_lists: list[list[str]], min_freq: int, seen: Inputs) -> None:
    """Run the answer with one min_freq; keep its list beside what each known mistake gives."""
    inputs = copy.deepcopy(token_lists)
    got = _expect_token_list(
        call_answer(fn, inputs, min_freq, hint="the function should accept (token_lists, min_freq)")
    )
    if inputs != token_lists:
        raise ExerciseError(
            "your code changed its input token_lists (a sentence list was modified in place): count without "
            "changing the caller's lists"
        )
    expected = Vocab.build(token_lists, min_freq=min_freq).itos
    if got != expected:
        with _shown(got, expected, min_freq):
            _check_specials(got)
            repeated = sorted({t for t in got if got.count(t) > 1})
            if repeated:
                raise known_bug(
                    f"the list has duplicates ({', '.join(repeated[:5])}): each token appears once. Count first "
                    "(collections.Counter), then list each kept token once"
                )
    differs = functools.partial(_unexplained, got, expected, token_lists, min_freq)
    seen.compare(got, expected, _vocab_bugs(token_lists, min_freq), "the list", same=operator.eq, differs=differs)


@contextlib.contextmanager
def _shown(got: list[str], expected: list[str], min_freq: int) -> Iterator[None]:
    """An error raised inside ends with both lists, and the captions and min_freq they come from."""
    try:
        yield
    except ExerciseError as error:
        error.args = (
            f"{error.args[0]}\n  with min_freq={min_freq}, on the captions {_VOCAB_SENTENCES}:\n"
            f"  expected {_short_list(expected)}\n  got      {_short_list(got)}",
        )
        raise


def _unexplained(got: list[str], expected: list[str], token_lists: list[list[str]], min_freq: int) -> NoReturn:
    """Raise for a wrong list that no known mistake explains: which tokens are extra or missing, else the order."""
    words, want = got[len(SPECIALS) :], expected[len(SPECIALS) :]
    counts = {t: sum(s.count(t) for s in token_lists) for t in {*words, *want}}
    extra = [t for t in words if t not in want]
    lost = [t for t in want if t not in words]
    with _shown(got, expected, min_freq):
        if extra or lost:
            raise ExerciseError(
                "the kept tokens differ from the reference: "
                + "; ".join(
                    part
                    for part in (
                        f"extra {', '.join(f'{t!r} (seen {counts[t]}x)' for t in extra[:5])}" if extra else "",
                        f"missing {', '.join(f'{t!r} (seen {counts[t]}x)' for t in lost[:5])}" if lost else "",
                    )
                    if part
                )
                + ". Keep exactly the tokens seen at least min_freq times, case kept"
            )
        if all(counts[a] >= counts[b] for a, b in zip(words, words[1:])):
            raise known_bug(
                f"tokens with the same count must be in alphabetical order, so the same data always "
                f"gives the same ids: {_ORDER_KEY}"
            )
        raise ExerciseError(
            f"the right tokens, in the wrong order: most frequent first, ties alphabetically: {_ORDER_KEY}"
        )


@exercise(
    "build_vocab",
    "count the tokens, keep those seen at least min_freq times, most frequent first (ties alphabetically), "
    "after the four specials <unk> <pad> <bos> <eos>",
)
def check_build_vocab(fn: Callable[[list[list[str]], int], list[str]]) -> str:
    """Check a vocabulary builder (what ``data.Vocab.build`` does).

    Expected signature: ``fn(token_lists, min_freq) -> list[str]``, the
    ``itos`` list (id -> token): the specials ``<unk>``, ``<pad>``, ``<bos>``,
    ``<eos>`` first, in that order, then every token seen at least ``min_freq``
    times in ``token_lists``, most frequent first, ties alphabetically. Case is
    kept. The reference is ``data.Vocab.build(token_lists, min_freq).itos``.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (specials missing or out of order,
            ``>`` instead of ``>=``, lowercasing, alphabetical order, ties not
            broken alphabetically, duplicates, counting once per sentence, ...).
    """
    token_lists = [sentence.split() for sentence in _VOCAB_SENTENCES]
    seen = Inputs()  # a bug is named only if it explains every min_freq
    for min_freq in _VOCAB_CASES:
        with seen.one():
            _vocab_case(fn, token_lists, min_freq, seen)
    seen.verdict()
    return f"specials first, min_freq = {', '.join(map(str, _VOCAB_CASES))}, frequency order with alphabetical ties, case kept"
