"""The whole corpus: every split tokenized and encoded, with its two vocabularies.

:func:`prepare_corpus` runs the pipeline of this package for Multi30k
German→English: read each split (:mod:`~transformer_lessons.data.files`),
tokenize it (:mod:`~transformer_lessons.data.tokenizer`), build the
vocabularies on the training split (:mod:`~transformer_lessons.data.vocab`),
and encode every sentence as ids. The result, a :class:`Corpus`, makes the
batches a training run needs (:mod:`~transformer_lessons.data.batching`), and
saves and loads itself without spaCy.

Tokenizing 31,000 sentence pairs takes a while, so the tokens of each split are
cached under ``cache_dir()/tokenized``. The cache is best effort: when it
cannot be written (a read-only or full disk) you get one warning and the run
goes on with the tokens in memory; a damaged cached file is tokenized again.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from transformer_lessons.bpe import BPE
from transformer_lessons.data.batching import IdPair, TokenBatcher
from transformer_lessons.data.files import (
    CACHE_ENV,
    LANGS,
    SHA256,
    SPLIT_SIZES,
    cache_dir,
    file_name,
    load_split,
    read_json,
    write_json,
)
from transformer_lessons.data.tokenizer import Tokenizer, tokenizer_kind
from transformer_lessons.data.vocab import Vocab
from transformer_lessons.errors import DataError

CORPUS_FORMAT = 1
TokenPair = tuple[list[str], list[str]]


@dataclass
class Corpus:
    """Everything a training run needs from the data.

    Attributes:
        src_vocab, tgt_vocab: German and English vocabularies (built on train).
        pairs: split -> ``(source ids, target ids)`` without specials.
        text: split -> raw ``(de, en)`` sentences (references for BLEU).
        tokens: split -> ``(de tokens, en tokens)``.
        info: how it was made (min_freq, drop_longer_than, limit, bpe_merges, tokenizers).
    """

    src_vocab: Vocab
    tgt_vocab: Vocab
    pairs: dict[str, list[IdPair]]
    text: dict[str, list[tuple[str, str]]]
    tokens: dict[str, list[TokenPair]] | None = None
    info: dict = field(default_factory=dict)
    src_lang: str = "de"
    tgt_lang: str = "en"

    def __repr__(self) -> str:  # the default would print every sentence
        sizes = ", ".join(f"{k}={len(v)}" for k, v in self.pairs.items())
        return f"Corpus({self.src_lang}->{self.tgt_lang}, src_vocab={len(self.src_vocab)}, tgt_vocab={len(self.tgt_vocab)}, {sizes})"

    def batcher(
        self, split: str, max_tokens: int, shuffle: bool | None = None, seed: int = 0, max_len: int | None = None
    ) -> TokenBatcher:
        """A :class:`TokenBatcher` over one split (shuffled for ``train`` by default).

        ``max_len``: skip pairs a model of that ``max_len`` cannot read (see :meth:`too_long`).
        """
        v = self.tgt_vocab
        pairs = self.pairs[split]
        if max_len is not None:
            pairs = [p for p in pairs if len(p[0]) < max_len and len(p[1]) < max_len]
        return TokenBatcher(
            pairs, max_tokens, v.pad_id, v.bos_id, v.eos_id, split == "train" if shuffle is None else shuffle, seed
        )

    def too_long(self, split: str, max_len: int) -> int:
        """How many pairs of ``split`` a model with this ``max_len`` cannot read:
        a side with ``max_len`` or more units (one place goes to ``<eos>`` / ``<bos>``)."""
        return sum(1 for s, t in self.pairs[split] if len(s) >= max_len or len(t) >= max_len)

    def require_splits(self, source: str | os.PathLike | None = None) -> None:
        """Refuse a corpus without the splits a training run needs, ``train`` and ``val``: :class:`DataError` naming
        what is missing and how to make the corpus again. ``source``: the file it was loaded from, named in the message."""
        missing = [split for split in ("train", "val") if split not in self.pairs]
        if missing:
            has = ", ".join(map(repr, self.pairs)) or "none"
            raise DataError(
                f"the corpus{f' {source}' if source else ''} has no {' and no '.join(map(repr, missing))} split (it has {has}): a run "
                f"trains on 'train' and validates on 'val'. Make the corpus again with every split: python -m transformer_lessons "
                f"prepare --out {source or 'FILE'} (in Python: prepare_corpus_for(config).save(path))"
            )

    def save(self, path: str | os.PathLike, include_tokens: bool = True) -> None:
        """Write the corpus as (gzipped if ``path`` ends in ``.gz``) JSON; :meth:`load` needs no spaCy."""
        data = {
            "format": "transformer_lessons.Corpus",
            "version": CORPUS_FORMAT,
            "src_lang": self.src_lang,
            "tgt_lang": self.tgt_lang,
            "src_vocab": self.src_vocab.to_dict(),
            "tgt_vocab": self.tgt_vocab.to_dict(),
            "pairs": self.pairs,
            "text": self.text,
            "tokens": self.tokens if include_tokens else None,
            "info": self.info,
        }
        write_json(Path(path), data)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Corpus":
        data = read_json(Path(path), "Corpus")
        if not isinstance(data, dict) or data.get("format") != "transformer_lessons.Corpus":
            raise DataError(f"{path} is not a saved Corpus; make one with prepare_corpus(...).save(path)")
        if data.get("version") != CORPUS_FORMAT:
            raise DataError(
                f"{path} has Corpus format {data.get('version')!r}, this code reads {CORPUS_FORMAT}; save it again"
            )
        try:
            tuples = lambda d: {k: [tuple(p) for p in v] for k, v in d.items()}  # noqa: E731  (JSON has no tuples)
            return cls(
                src_vocab=Vocab.from_dict(data["src_vocab"]),
                tgt_vocab=Vocab.from_dict(data["tgt_vocab"]),
                pairs=tuples(data["pairs"]),
                text=tuples(data["text"]),
                tokens=tuples(data["tokens"]) if data.get("tokens") is not None else None,
                info=data.get("info", {}),
                src_lang=data.get("src_lang", "de"),
                tgt_lang=data.get("tgt_lang", "en"),
            )
        except (KeyError, TypeError, AttributeError) as err:
            raise DataError(f"{path} is a damaged Corpus file ({err!r}); save it again") from err


# --------------------------------------------------------------------------------------
# The tokenized splits, cached (best effort)
# --------------------------------------------------------------------------------------


def _split_cache_path(split: str) -> Path:
    # The key names everything the tokens depend on: the exact input files and
    # the tokenizers. The file checksums are constants (every file is verified
    # against them), so the key is computable without the files or spaCy.
    key = {
        "format": CORPUS_FORMAT,
        "files": [SHA256[file_name(split, lang)] for lang in LANGS],
        "tokenizers": [tokenizer_kind(lang) for lang in LANGS],
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / "tokenized" / f"{split}.{digest}.json.gz"


def _read_cached_split(path: Path, split: str) -> tuple[list, list] | None:
    """The ``(text pairs, token pairs)`` cached at ``path``; ``None`` when there are none or they are damaged."""
    try:
        if not path.is_file():
            return None
    except OSError:  # a cache folder we may not look into: as if empty
        return None
    try:
        data = read_json(path, "tokenized split")
        text = [tuple(p) for p in data["text"]]
        tokens = [tuple(p) for p in data["tokens"]]
        if len(text) == len(tokens) == SPLIT_SIZES[split]:
            return text, tokens
    except (DataError, KeyError, TypeError):
        pass
    warnings.warn(f"ignoring the damaged tokenized cache {path}; tokenizing again", stacklevel=4)
    return None


def _write_cached_split(path: Path, split: str, text: list, tokens: list) -> bool:
    """Cache a tokenized split; if that fails, warn and return ``False`` (the tokens stay in memory)."""
    try:
        write_json(path, {"split": split, "text": text, "tokens": tokens})
        return True
    except OSError as err:  # read-only, full, or not a folder: the data is fine, only the next run is slower
        warnings.warn(
            f"could not write the tokenized cache in {path.parent} ({err}); going on without it (the next run "
            f"tokenizes again). To keep it, make that folder writable (or free space on its disk), or set "
            f"{CACHE_ENV} to a writable folder; cache=False skips the cache.",
            stacklevel=4,
        )
        return False


def _tokenize_split(split: str, data_dir, progress: bool, tokenizers: dict[str, Tokenizer]) -> tuple[list, list]:
    """``(text pairs, token pairs)`` of one split, read from the raw files and tokenized."""
    text = load_split(split, data_dir, progress)
    columns = []
    for j, lang in enumerate(LANGS):
        sentences = [pair[j] for pair in text]
        if progress:
            from tqdm.auto import tqdm  # only when drawn: importing tqdm is not free

            sentences = tqdm(sentences, desc=f"tokenize {split}.{lang}", unit=" sent", leave=False)
        columns.append(tokenizers[lang].tokenize_batch(sentences))
    return text, list(zip(*columns))


def _tokenized_splits(splits: Sequence[str], data_dir, cache: bool, progress: bool) -> tuple[dict, dict]:
    """``(text, tokens)``, each split -> pairs; from the cache when it has them, else tokenized (and cached)."""
    tokenizers = {lang: Tokenizer(lang) for lang in LANGS}
    text, tokens = {}, {}
    writable = cache  # after one failed write, the others are not tried (one warning is enough)
    for split in splits:
        path = _split_cache_path(split)
        found = _read_cached_split(path, split) if cache else None
        if found is None:
            found = _tokenize_split(split, data_dir, progress, tokenizers)
            if writable:
                writable = _write_cached_split(path, split, *found)
        text[split], tokens[split] = found
    return text, tokens


# --------------------------------------------------------------------------------------
# The pipeline
# --------------------------------------------------------------------------------------


def prepare_corpus(
    data_dir: str | os.PathLike | None = None,
    min_freq: int = 2,
    drop_longer_than: int | None = None,
    splits: Sequence[str] = ("train", "val", "test_2016_flickr"),
    limit: int | None = None,
    cache: bool = True,
    progress: bool = True,
    bpe_merges: int | None = None,
) -> Corpus:
    """Load, tokenize and encode Multi30k German→English.

    Args:
        data_dir: a directory with the raw files (see :func:`~transformer_lessons.data.files.fetch`).
        min_freq: training-set count below which a word becomes ``<unk>``.
        drop_longer_than: drop *training* pairs with more than this many tokens
            on either side (specials not counted). Evaluation pairs are never
            dropped: a test set you filter is no longer the test set.
        splits: which splits to return; ``"train"`` is always included (the
            vocabularies are built on it).
        limit: keep only the first ``limit`` training pairs (quick mode).
        cache: read/write the tokens of each split under
            ``cache_dir()/tokenized``, so later calls skip spaCy. Best effort:
            a cache that cannot be written gives a warning, not an error.
        progress: show progress bars.
        bpe_merges: learn this many byte-pair merges per language on the
            training words and train on subword pieces (see
            :mod:`transformer_lessons.bpe`); ``None`` keeps whole words.
            ``min_freq`` then applies to pieces. ``Corpus.tokens`` stays words.

    Returns:
        a :class:`Corpus`.
    """
    splits = ["train", *[s for s in splits if s != "train"]]
    for s in splits:
        file_name(s, "de")  # validates the name
    text, tokens = _tokenized_splits(splits, data_dir, cache, progress)

    keep = range(len(tokens["train"]) if limit is None else min(limit, len(tokens["train"])))
    if drop_longer_than is not None:
        keep = [i for i in keep if max(len(tokens["train"][i][0]), len(tokens["train"][i][1])) <= drop_longer_than]
    text["train"] = [text["train"][i] for i in keep]
    tokens["train"] = [tokens["train"][i] for i in keep]

    src_bpe = tgt_bpe = None
    if bpe_merges:
        src_bpe = BPE.learn((s for s, _ in tokens["train"]), bpe_merges)
        tgt_bpe = BPE.learn((t for _, t in tokens["train"]), bpe_merges)
    src_vocab = Vocab.build((s for s, _ in tokens["train"]), min_freq=min_freq, bpe=src_bpe)
    tgt_vocab = Vocab.build((t for _, t in tokens["train"]), min_freq=min_freq, bpe=tgt_bpe)
    pairs = {
        split: [(src_vocab.encode_words(s), tgt_vocab.encode_words(t)) for s, t in tokens[split]] for split in splits
    }
    info = {
        "min_freq": min_freq,
        "drop_longer_than": drop_longer_than,
        "limit": limit,
        "bpe_merges": bpe_merges or None,
        "tokenizers": {lang: tokenizer_kind(lang) for lang in LANGS},
    }
    return Corpus(src_vocab, tgt_vocab, pairs, text, tokens, info)
