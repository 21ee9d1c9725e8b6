"""Tests of transformer_lessons.bpe and of subword vocabularies end to end."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from transformer_lessons.bpe import BPE, END, join_pieces, learn_merges
from transformer_lessons.data import DataError, Vocab

# Sennrich et al. (2016), Figure 1's toy vocabulary.
PAPER_COUNTS = {"low": 5, "lower": 2, "newest": 6, "widest": 3}


def naive_merges(counts: dict[str, int], n_merges: int, min_count: int = 2) -> list[tuple[str, str]]:
    """The textbook algorithm, slow and obvious: recount every pair after every merge."""
    words = {tuple([*w[:-1], w[-1] + END]): c for w, c in counts.items()}
    merges = []
    for _ in range(n_merges):
        pairs: Counter = Counter()
        for symbols, c in words.items():
            for p in zip(symbols, symbols[1:]):
                pairs[p] += c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))  # most frequent, ties by text
        if pairs[best] < min_count:
            break
        merges.append(best)
        new_words = {}
        for symbols, c in words.items():
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    out.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            new_words[tuple(out)] = new_words.get(tuple(out), 0) + c
        words = new_words
    return merges


def random_words(seed: int, n: int = 300) -> dict[str, int]:
    rng = random.Random(seed)
    stems = ["spiel", "kind", "hund", "lauf", "mann", "frau", "ball", "haus", "berg", "see"]
    ends = ["", "en", "er", "e", "es", "t", "st", "ern"]
    counts: Counter = Counter()
    for _ in range(n):
        word = rng.choice(stems) + rng.choice(ends)
        if rng.random() < 0.3:
            word = rng.choice(stems) + word  # compounds: "hundball"
        counts[word] += rng.randint(1, 5)
    return dict(counts)


def test_paper_example_first_merges():
    # es (6 + 3 = 9) ties with s+t</w> (9); ties go to the smaller text, then est</w> (9), then lo (7).
    assert learn_merges(PAPER_COUNTS, 3) == [("e", "s"), ("es", "t</w>"), ("l", "o")]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fast_learner_matches_the_textbook_algorithm(seed):
    counts = random_words(seed)
    assert learn_merges(counts, 200) == naive_merges(counts, 200)


def test_learning_is_deterministic_and_order_free():
    counts = random_words(3)
    shuffled = dict(sorted(counts.items(), key=lambda kv: random.Random(1).random()))
    assert learn_merges(counts, 100) == learn_merges(shuffled, 100)


def test_min_count_stops_learning():
    merges = learn_merges({"abc": 1, "xyz": 1}, 50)
    assert merges == [], "pairs seen once are not worth a unit"
    assert len(learn_merges({"abab": 3}, 50)) <= 3


def test_frequent_words_become_one_piece_rare_words_split():
    # "Mann</w>" ends a word; "Manne" teaches the word-internal "Mann".
    bpe = BPE.learn([["Mann", "Manne", "rennt", "."]] * 5 + [["Mannschaft"]], n_merges=50)
    assert bpe.segment(["Mann", "rennt", "."]) == ["Mann", "rennt", "."]
    pieces = bpe.split_word("Mannschaft")
    assert len(pieces) > 1 and pieces[0] == "Mann@@", pieces
    assert all(p.endswith("@@") for p in pieces[:-1]) and not pieces[-1].endswith("@@")
    unseen = bpe.split_word("Zebra")  # never seen: falls back to characters
    assert unseen == ["Z@@", "e@@", "b@@", "r@@", "a"]


def test_segment_then_join_gives_the_words_back():
    counts = random_words(4)
    bpe = BPE(learn_merges(counts, 120))
    words = [*counts, "Überraschung", "x", "a-b", "3.5", "Ä"]
    for w in words:
        assert join_pieces(bpe.split_word(w)) == [w]
    sentence = ["ein", "spielkind", "läuft", "."]
    assert join_pieces(bpe.segment(sentence)) == sentence


def test_split_word_applies_merges_in_learned_order():
    # Learned order says "b c" before "a b": "abc" must become a + bc, not ab + c.
    bpe = BPE([("b", "c</w>"), ("a", "b")])
    assert bpe.split_word("abc") == ["a@@", "bc"]
    bpe = BPE([("a", "b"), ("b", "c</w>")])
    assert bpe.split_word("abc") == ["ab@@", "c"]


def test_join_pieces_keeps_a_dangling_piece():
    assert join_pieces(["ein", "Hoch@@", "seil@@"]) == ["ein", "Hochseil"]
    assert join_pieces([]) == []


def test_vocab_with_bpe_round_trips_words_and_json(tmp_path):
    sentences = [["ein", "Hund", "spielt"], ["ein", "Hundeball", "."], ["ein", "Hund", "."]] * 3
    bpe = BPE.learn(sentences, n_merges=30)
    vocab = Vocab.build(sentences, min_freq=1, bpe=bpe)
    assert vocab.bpe is bpe and "bpe=" in repr(vocab)
    words = ["ein", "Hundeball", "spielt", "."]
    ids = vocab.encode_words(words)
    assert len(ids) == len(vocab.segment(words)) >= len(words)
    assert vocab.decode_words(ids + [vocab.eos_id, 5]) == words  # stops at <eos>
    vocab.save(tmp_path / "v.json")
    loaded = Vocab.load(tmp_path / "v.json")
    assert loaded == vocab and loaded.bpe == bpe
    assert Vocab(vocab.itos) != vocab, "the same pieces without the merges are another vocabulary"


def test_vocab_without_bpe_is_unchanged():
    vocab = Vocab.build([["a", "b", "a"]], min_freq=1)
    assert vocab.bpe is None and "bpe" not in vocab.to_dict()
    assert vocab.encode_words(["a", "zzz"]) == vocab.encode(["a", "zzz"])
    assert vocab.decode_words(vocab.encode(["a", "b"])) == ["a", "b"]


@pytest.mark.parametrize("bad", [{"merges": "ab"}, {"merges": [["a"]]}, {"merges": [["a", 1]]}, ["a", "b"]])
def test_vocab_with_damaged_bpe_is_refused(bad):
    data = Vocab.build([["a", "b"]], min_freq=1).to_dict()
    data["bpe"] = bad
    with pytest.raises(DataError, match="bpe"):
        Vocab.from_dict(data)
