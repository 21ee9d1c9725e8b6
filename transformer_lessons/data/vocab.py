"""The vocabulary: a fixed table from tokens to the integer ids a model reads.

An embedding layer looks a row up by id, so every token must become an id and
every predicted id must become a token again. :class:`Vocab` is that table,
built from the training sentences only (a vocabulary that peeked at the test
set would flatter the model). Its first four entries are the special tokens of
:mod:`transformer_lessons.specials`, so ``<unk> <pad> <bos> <eos>`` have the
ids 0, 1, 2, 3 in every vocabulary of the course.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

import torch

from transformer_lessons.bpe import BPE, join_pieces
from transformer_lessons.data.files import read_json, write_json
from transformer_lessons.errors import DataError
from transformer_lessons.specials import BOS_ID, EOS_ID, PAD_ID, SPECIALS, UNK_ID

VOCAB_FORMAT = 1


class Vocab:
    """A fixed token <-> id table whose first four entries are the special tokens.

    ``<unk>`` (0) stands for every word seen fewer than ``min_freq`` times in
    training; ``<pad>`` (1) fills short sentences up to the batch length and is
    masked out of attention and the loss; ``<bos>`` (2) starts the decoder's
    input; ``<eos>`` (3) ends every sentence, so the model learns when to stop.

    With subword units (``bpe``, see :mod:`transformer_lessons.bpe`) the
    table holds pieces such as ``"Hoch@@"``, and the vocabulary carries the
    merges that make them: :meth:`encode_words` splits words into pieces
    before looking them up, :meth:`decode_words` joins pieces back into words.
    Without ``bpe`` both are plain :meth:`encode` / :meth:`decode`.

    Attributes:
        itos: id -> token (a list).
        stoi: token -> id (a dict).
        bpe: the :class:`~transformer_lessons.bpe.BPE` whose pieces the table
            holds, or ``None`` for whole words.
    """

    def __init__(self, itos: Sequence[str], bpe: "BPE | None" = None):
        itos = list(itos)
        if tuple(itos[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"a Vocab starts with the specials {SPECIALS}, got {itos[: len(SPECIALS)]}")
        if len(set(itos)) != len(itos):
            dupes = [t for t, n in Counter(itos).items() if n > 1][:5]
            raise ValueError(f"a Vocab's tokens must be unique; repeated: {dupes}")
        self.itos: list[str] = itos
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(itos)}
        self.bpe = bpe

    @classmethod
    def build(
        cls,
        token_lists: Iterable[Sequence[str]],
        min_freq: int = 2,
        max_size: int | None = None,
        bpe: "BPE | None" = None,
    ) -> "Vocab":
        """Count tokens and keep those seen at least ``min_freq`` times.

        Args:
            token_lists: tokenized sentences (training data only: a vocabulary
                that peeked at the test set would flatter the model).
            min_freq: rarer tokens become ``<unk>``.
            max_size: cap on ``len(vocab)``, specials included; the most
                frequent tokens are kept.
            bpe: subword merges: the sentences' words are split into pieces
                (:meth:`segment`) before counting, and the vocabulary keeps them.

        Tokens are ordered by frequency (most frequent first), ties by the
        token itself, so the same data always gives the same ids.
        """
        segment = bpe.segment if bpe is not None else (lambda tokens: tokens)
        counts = Counter(tok for tokens in token_lists for tok in segment(tokens))
        for special in SPECIALS:
            counts.pop(special, None)
        kept = sorted((t for t, n in counts.items() if n >= min_freq), key=lambda t: (-counts[t], t))
        if max_size is not None:
            if max_size < len(SPECIALS):
                raise ValueError(f"max_size={max_size} leaves no room for the {len(SPECIALS)} special tokens")
            kept = kept[: max_size - len(SPECIALS)]
        return cls([*SPECIALS, *kept], bpe=bpe)

    @property
    def unk_id(self) -> int:
        return UNK_ID

    @property
    def pad_id(self) -> int:
        return PAD_ID

    @property
    def bos_id(self) -> int:
        return BOS_ID

    @property
    def eos_id(self) -> int:
        return EOS_ID

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: str) -> bool:
        return token in self.stoi

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self.itos == other.itos and self.bpe == other.bpe

    def __repr__(self) -> str:
        units = f", bpe={len(self.bpe)} merges" if self.bpe is not None else ""
        return f"Vocab(size={len(self)}{units}, first={self.itos[4:9]})"

    def segment(self, words: Iterable[str]) -> list[str]:
        """Words -> the units this vocabulary holds (BPE pieces, or the words themselves)."""
        return self.bpe.segment(words) if self.bpe is not None else list(words)

    def encode_words(self, words: Iterable[str]) -> list[int]:
        """Tokenized words -> ids: :meth:`segment`, then :meth:`encode`."""
        return self.encode(self.segment(words))

    def decode_words(self, ids: Iterable[int] | torch.Tensor) -> list[str]:
        """Ids -> words: :meth:`decode` (specials stripped), BPE pieces joined."""
        units = self.decode(ids)
        return join_pieces(units) if self.bpe is not None else units

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """Tokens -> ids; a token not in the vocabulary becomes ``unk_id``."""
        get, unk = self.stoi.get, self.unk_id
        return [get(tok, unk) for tok in tokens]

    def decode(self, ids: Iterable[int] | torch.Tensor, strip_special: bool = True) -> list[str]:
        """Ids -> tokens.

        With ``strip_special`` (the default) reading stops at the first
        ``<eos>`` and ``<pad>``/``<bos>`` are dropped (``<unk>`` is kept: it is
        part of the output). Without it, every id is turned into its token.
        """
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        out = []
        for i in ids:
            i = int(i)
            if strip_special:
                if i == self.eos_id:
                    break
                if i in (self.pad_id, self.bos_id):
                    continue
            out.append(self.itos[i])
        return out

    def to_dict(self) -> dict:
        data = {"format": "transformer_lessons.Vocab", "version": VOCAB_FORMAT, "itos": self.itos}
        if self.bpe is not None:
            data["bpe"] = self.bpe.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Vocab":
        if not isinstance(data, dict) or data.get("format") != "transformer_lessons.Vocab":
            raise DataError("not a saved Vocab (no 'format': 'transformer_lessons.Vocab'); rebuild it with Vocab.build")
        if data.get("version") != VOCAB_FORMAT:
            raise DataError(
                f"Vocab format version {data.get('version')!r} is not supported (this code reads {VOCAB_FORMAT}); rebuild it"
            )
        itos = data.get("itos")
        if not isinstance(itos, list) or not all(isinstance(t, str) for t in itos):
            raise DataError("a saved Vocab's 'itos' must be a list of strings; the file is damaged, rebuild it")
        bpe = None
        if data.get("bpe") is not None:
            merges = data["bpe"].get("merges") if isinstance(data["bpe"], dict) else None
            if not isinstance(merges, list) or not all(
                isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) for x in m) for m in merges
            ):
                raise DataError(
                    "a saved Vocab's 'bpe' must hold 'merges', a list of [str, str] pairs; the file is damaged, rebuild it"
                )
            bpe = BPE(merges)
        try:
            return cls(itos, bpe=bpe)
        except ValueError as err:
            raise DataError(f"damaged Vocab: {err}") from err

    def save(self, path: str | os.PathLike) -> None:
        """Write the vocabulary as JSON (readable, diff-able, no pickle)."""
        write_json(Path(path), self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Vocab":
        """Read a file written by :meth:`save`; a broken file raises :class:`DataError`."""
        return cls.from_dict(read_json(Path(path), "Vocab"))
