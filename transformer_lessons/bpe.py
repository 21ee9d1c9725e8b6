"""Byte-pair encoding (BPE): subword units on top of spaCy's words.

Sennrich, Haddow and Birch (2016), "Neural Machine Translation of Rare Words
with Subword Units", https://aclanthology.org/P16-1162/: start from
characters, and repeatedly merge the most frequent adjacent pair of symbols in
the training words. After ``n`` merges, frequent words are single units and a
rare word ("Hochseilgarten") is split into a few frequent pieces
("Hoch@@ seil@@ garten") instead of becoming ``<unk>``.

Conventions (those of the paper's ``subword-nmt``):

- Learning works on *word types* weighted by their count, so it is fast.
- The last symbol of a word carries the end-of-word mark ``</w>`` while
  learning, so "er" at the end of a word and "er" inside one are different units.
- In the output, every piece but the last of a word ends with ``@@``:
  ``["Hoch@@", "seil@@", "garten"]``. :func:`join_pieces` undoes it exactly.

Everything here is plain Python and deterministic (ties are broken by the
pair's text), so the same corpus always gives the same merges.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

END = "</w>"
CONTINUE = "@@"


def learn_merges(word_counts: dict[str, int] | Counter, n_merges: int, min_count: int = 2) -> list[tuple[str, str]]:
    """Learn up to ``n_merges`` merges from word counts.

    Args:
        word_counts: word -> how often it occurs in the training text.
        n_merges: the most merges to learn (the vocabulary is about the
            number of distinct characters plus ``n_merges``).
        min_count: stop when the most frequent pair occurs fewer times.

    Returns:
        the merges in the order learned, e.g. ``[("e", "n</w>"), ("d", "e"), ...]``.
    """
    words: list[list[str]] = []
    freqs: list[int] = []
    for word, count in sorted(word_counts.items()):
        if not word or count <= 0:
            continue
        words.append([*word[:-1], word[-1] + END])
        freqs.append(count)

    pair_counts: Counter = Counter()
    where: dict[tuple[str, str], set[int]] = defaultdict(set)  # pair -> words that may contain it
    for i, symbols in enumerate(words):
        for pair in zip(symbols, symbols[1:]):
            pair_counts[pair] += freqs[i]
            where[pair].add(i)
    # Max-heap by count, ties by the pair's text; stale entries are skipped when popped.
    heap = [(-c, pair) for pair, c in pair_counts.items()]
    heapq.heapify(heap)

    merges: list[tuple[str, str]] = []
    while len(merges) < n_merges and heap:
        neg, pair = heapq.heappop(heap)
        if pair_counts.get(pair, 0) != -neg:
            continue  # stale: the count changed since this entry was pushed
        if -neg < min_count:
            break
        merges.append(pair)
        a, b = pair
        merged = a + b
        changed: set[tuple[str, str]] = set()
        for i in sorted(where.pop(pair, ())):
            symbols = words[i]
            if len(symbols) < 2:
                continue
            new: list[str] = []
            j = 0
            while j < len(symbols):
                if j + 1 < len(symbols) and symbols[j] == a and symbols[j + 1] == b:
                    new.append(merged)
                    j += 2
                else:
                    new.append(symbols[j])
                    j += 1
            if len(new) == len(symbols):
                continue  # the index was a superset: this word no longer has the pair
            f = freqs[i]
            for p in zip(symbols, symbols[1:]):
                pair_counts[p] -= f
                changed.add(p)
            for p in zip(new, new[1:]):
                pair_counts[p] += f
                where[p].add(i)
                changed.add(p)
            words[i] = new
        pair_counts.pop(pair, None)
        for p in changed:
            c = pair_counts.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, p))
            else:
                pair_counts.pop(p, None)
    return merges


def join_pieces(pieces: Iterable[str]) -> list[str]:
    """``["Hoch@@", "seil@@", "garten", "."]`` -> ``["Hochseilgarten", "."]``.

    A dangling ``@@`` piece at the end (a model may stop mid-word) keeps its
    text without the mark.
    """
    words: list[str] = []
    current = ""
    for piece in pieces:
        if piece.endswith(CONTINUE):
            current += piece[: -len(CONTINUE)]
        else:
            words.append(current + piece)
            current = ""
    if current:
        words.append(current)
    return words


class BPE:
    """Split words into the pieces of learned merges.

    Args:
        merges: the output of :func:`learn_merges` (pairs, or lists of two).

    Example:
        >>> bpe = BPE.learn([["ein", "Mann", "rennt"], ["ein", "Mann"]], n_merges=10)
        >>> bpe.segment(["Mann", "rennt"])
        ['Mann', 'rennt']
    """

    def __init__(self, merges: Sequence[Sequence[str]]):
        self.merges = [(str(a), str(b)) for a, b in merges]
        self.ranks = {pair: i for i, pair in enumerate(self.merges)}
        self._cache: dict[str, list[str]] = {}

    @classmethod
    def learn(cls, token_lists: Iterable[Sequence[str]], n_merges: int, min_count: int = 2) -> "BPE":
        """Learn merges from tokenized sentences (count words, then :func:`learn_merges`)."""
        counts: Counter = Counter()
        for tokens in token_lists:
            counts.update(tokens)
        return cls(learn_merges(counts, n_merges, min_count))

    def __len__(self) -> int:
        return len(self.merges)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BPE) and self.merges == other.merges

    def __repr__(self) -> str:
        return f"BPE({len(self.merges)} merges)"

    def split_word(self, word: str) -> list[str]:
        """One word -> its pieces, ``@@`` on every piece but the last."""
        if not word:
            return []
        cached = self._cache.get(word)
        if cached is not None:
            return cached
        symbols = [*word[:-1], word[-1] + END]
        while len(symbols) > 1:
            # Apply the earliest-learned merge present, as learning did.
            best = min(
                range(len(symbols) - 1), key=lambda j: self.ranks.get((symbols[j], symbols[j + 1]), len(self.ranks))
            )
            pair = (symbols[best], symbols[best + 1])
            if pair not in self.ranks:
                break
            a, b = pair
            new: list[str] = []
            j = 0
            while j < len(symbols):
                if j + 1 < len(symbols) and symbols[j] == a and symbols[j + 1] == b:
                    new.append(a + b)
                    j += 2
                else:
                    new.append(symbols[j])
                    j += 1
            symbols = new
        symbols[-1] = symbols[-1][: -len(END)]
        pieces = [s + CONTINUE for s in symbols[:-1]] + [symbols[-1]]
        pieces = [p for p in pieces if p]  # a lone "</w>" symbol cannot happen, but never emit ""
        self._cache[word] = pieces
        return pieces

    def segment(self, tokens: Iterable[str]) -> list[str]:
        """A tokenized sentence -> its pieces."""
        return [piece for token in tokens for piece in self.split_word(token)]

    def to_dict(self) -> dict:
        return {"merges": [list(p) for p in self.merges]}

    @classmethod
    def from_dict(cls, data: dict) -> "BPE":
        return cls(data["merges"])
