"""Multi30k German→English: download, checksum, tokenize, vocabulary, batches.

The pipeline from files to tensors, one step per section:

1. :func:`fetch` gets one raw file (a local directory, the cache, or the
   internet) and checks its SHA-256; :func:`load_split` reads a split as
   ``(de, en)`` sentence pairs.
2. :class:`Tokenizer` splits sentences into words with spaCy's rule-based
   tokenizer and joins words back (:meth:`Tokenizer.detokenize`) for BLEU.
3. :class:`Vocab` maps tokens to ids, with ``<unk> <pad> <bos> <eos>`` first.
4. :func:`make_batch` pads a list of id pairs into a :class:`Batch` with its
   masks; :class:`TokenBatcher` groups pairs of similar length so each batch
   holds about ``max_tokens`` tokens (paper §5.1).
5. :func:`prepare_corpus` does 1–3 for every split and caches the tokens, so a
   second run (or a machine without spaCy) skips tokenization.

Paper: §5.1 ("Sentence pairs were batched together by approximate sequence
length"). Dataset: Elliott et al. (2016), "Multi30K: Multilingual
English-German Image Descriptions".

Importing this module is cheap: spaCy and tqdm are imported only when used.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.metadata
import json
import os
import re
import tempfile
import urllib.request
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import torch

from transformer_lessons.bpe import BPE, join_pieces
from transformer_lessons.masks import padding_mask, target_mask

# --------------------------------------------------------------------------------------
# 1. Files: where they come from and how we know they are right
# --------------------------------------------------------------------------------------

URL_TEMPLATE = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{split}.{lang}.gz"
SPLITS = ("train", "val", "test_2016_flickr", "test_2017_flickr", "test_2018_flickr", "test_2017_mscoco")
LANGS = ("de", "en")

#: Sentences per split (each ``.de`` file has as many lines as its ``.en`` file).
SPLIT_SIZES = {
    "train": 29000,
    "val": 1014,
    "test_2016_flickr": 1000,
    "test_2017_flickr": 1000,
    "test_2018_flickr": 1071,
    "test_2017_mscoco": 461,
}

#: SHA-256 of every raw file, so a truncated download or an edited copy is never used.
SHA256 = {
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2017_mscoco.de.gz": "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
    "test_2017_mscoco.en.gz": "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
    "test_2018_flickr.de.gz": "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
    "test_2018_flickr.en.gz": "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
}

DATA_ENV = "TRANSFORMER_LESSONS_DATA"  # a directory holding the raw .gz files (no download)
CACHE_ENV = "TRANSFORMER_LESSONS_CACHE"  # where downloads and tokenized corpora are kept
DOWNLOAD_TIMEOUT_S = 30.0


class DataError(RuntimeError):
    """Anything wrong with the data; the message says what to do about it."""


def file_name(split: str, lang: str) -> str:
    """``("val", "de")`` -> ``"val.de.gz"``, the name used in the repository and the cache."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    if lang not in LANGS:
        raise ValueError(f"unknown language {lang!r}; Multi30k task 1 has {' and '.join(LANGS)}")
    return f"{split}.{lang}.gz"


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path | None:
    """The local directory to read raw files from, or ``None`` to use the cache/download.

    The ``data_dir`` argument wins; else the environment variable
    ``TRANSFORMER_LESSONS_DATA`` if it is set and non-empty; else ``None``.
    """
    if data_dir is not None and str(data_dir) != "":
        return Path(data_dir).expanduser()
    env = os.environ.get(DATA_ENV, "").strip()
    return Path(env).expanduser() if env else None


def cache_dir() -> Path:
    """``$TRANSFORMER_LESSONS_CACHE``, else ``~/.cache/transformer_lessons`` (not created here)."""
    env = os.environ.get(CACHE_ENV, "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache" / "transformer_lessons"


def _where_to_put_files(name: str) -> str:
    return (
        f"To work offline, download the Multi30k files from {URL_TEMPLATE} "
        f"(for this one: {URL_TEMPLATE.format(split=name.split('.')[0], lang=name.split('.')[1])}) and either "
        f"put them in the cache directory {cache_dir()} (or set {CACHE_ENV} to choose another), "
        f"or put them in any directory and set {DATA_ENV}=<that directory> or pass data_dir=<that directory>."
    )


def _from_local_dir(directory: Path, name: str) -> Path:
    if not directory.is_dir():
        where = directory if directory.is_absolute() else f"{directory} (relative to the working directory {Path.cwd()})"
        raise DataError(
            f"the data directory {where} does not exist or is not a directory (it came from data_dir= or ${DATA_ENV}). "
            f"Point it at a folder holding the Multi30k .gz files, or unset {DATA_ENV} to download them."
        )
    path = directory / name
    if not path.is_file():
        missing = sorted(n for n in SHA256 if not (directory / n).is_file())
        raise DataError(
            f"{name} is missing from the data directory {directory}. Missing there: {', '.join(missing)}. "
            f"Copy them in (they are at {URL_TEMPLATE}), or unset {DATA_ENV} / pass no data_dir to download them."
        )
    actual = sha256_file(path)
    if actual != SHA256[name]:
        raise DataError(
            f"{path} is corrupt or truncated: its SHA-256 is {actual}, expected {SHA256[name]}. "
            f"Replace it with a fresh copy from {URL_TEMPLATE.format(split=name.split('.')[0], lang=name.split('.')[1])}."
        )
    return path


class _CacheWriteError(Exception):
    """Internal: writing into the cache failed, a local disk problem (the network was fine)."""

    def __init__(self, err: OSError):
        super().__init__(err)
        self.err = err


def _download(url: str, target: Path, progress: bool) -> str:
    """Stream ``url`` into ``target`` through a temporary file; return the bytes' SHA-256.

    The final name appears only after the whole file arrived (``os.replace`` is
    atomic), so an interrupted download never leaves a half file in the cache.
    Network failures raise ``OSError`` (``URLError``, timeouts, resets);
    failures to write the cache raise :class:`_CacheWriteError`.
    """
    from tqdm.auto import tqdm

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".", suffix=".part")
    except OSError as err:
        raise _CacheWriteError(err) from err
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            size = response.headers.get("Content-Length")
            with tqdm(
                total=int(size) if size else None,
                unit="B",
                unit_scale=True,
                desc=target.name,
                disable=not progress,
            ) as bar:
                for chunk in iter(lambda: response.read(1 << 16), b""):  # the network
                    try:  # the disk
                        out.write(chunk)
                    except OSError as err:
                        raise _CacheWriteError(err) from err
                    digest.update(chunk)
                    bar.update(len(chunk))
            try:
                out.flush()
                os.replace(tmp_name, target)
            except OSError as err:
                raise _CacheWriteError(err) from err
    finally:
        if os.path.exists(tmp_name):
            os.remove(tmp_name)
    return digest.hexdigest()


def fetch(split: str, lang: str, data_dir: str | os.PathLike | None = None, progress: bool = True) -> Path:
    """Path of a verified raw file ``{split}.{lang}.gz``, downloading it if needed.

    With a local directory (``data_dir`` or ``$TRANSFORMER_LESSONS_DATA``) the
    file must be there and match its checksum; nothing is downloaded. Otherwise
    the cache (:func:`cache_dir`) is used, and a missing or corrupt cached copy
    is (re)downloaded from :data:`URL_TEMPLATE`.

    Args:
        split: one of :data:`SPLITS`.
        lang: ``"de"`` or ``"en"``.
        data_dir: a directory that holds the raw files (no network then).
        progress: show a progress bar while downloading.

    Raises:
        DataError: a local file is missing or corrupt, the download failed
            (offline) and there is no copy, or the downloaded bytes are wrong.
    """
    name = file_name(split, lang)
    local = resolve_data_dir(data_dir)
    if local is not None:
        return _from_local_dir(local, name)

    path = cache_dir() / name
    if path.is_file():
        actual = sha256_file(path)
        if actual == SHA256[name]:
            return path
        warnings.warn(
            f"cached {path} is corrupt (SHA-256 {actual}, expected {SHA256[name]}); deleting it and downloading again",
            stacklevel=2,
        )
        path.unlink()

    url = URL_TEMPLATE.format(split=split, lang=lang)
    try:
        actual = _download(url, path, progress)
    except _CacheWriteError as err:  # the disk: an unwritable, full or misplaced cache directory
        raise DataError(
            f"could not save {name} in the cache directory {path.parent} ({err.err}); this is a problem with the local disk, "
            f"not the network. Make that directory writable (or free space on its disk), set {CACHE_ENV} to a writable "
            f"directory, or put the Multi30k files in any directory and set {DATA_ENV}=<that directory> (nothing is written then)."
        ) from err.err
    except OSError as err:  # the network: URLError/HTTPError, timeouts, resets
        reason = getattr(err, "reason", None) or err
        raise DataError(
            f"could not download {url} ({reason}) and there is no copy of {name}. Check the internet connection "
            f"(and any proxy), or try again later. {_where_to_put_files(name)}"
        ) from err
    if actual != SHA256[name]:
        path.unlink(missing_ok=True)
        raise DataError(
            f"the file downloaded from {url} has SHA-256 {actual}, expected {SHA256[name]}; it was not kept. "
            f"Try again later; if it persists the upstream file changed. {_where_to_put_files(name)}"
        )
    return path


def _read_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as f:
        text = f.read()
    # split("\n"), not splitlines(): the latter also breaks at U+2028 and friends,
    # which would shift every later German line against its English translation.
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.strip() for line in lines]


def load_split(split: str, data_dir: str | os.PathLike | None = None, progress: bool = True) -> list[tuple[str, str]]:
    """The ``(german, english)`` sentence pairs of one split, each line stripped.

    Raises:
        DataError: the two files have different numbers of lines (plus anything
            :func:`fetch` raises).
    """
    de_path = fetch(split, "de", data_dir, progress)
    en_path = fetch(split, "en", data_dir, progress)
    de, en = _read_lines(de_path), _read_lines(en_path)
    if len(de) != len(en):
        raise DataError(f"{de_path} has {len(de)} lines but {en_path} has {len(en)}; line i of one must translate line i of the other")
    return list(zip(de, en))


# --------------------------------------------------------------------------------------
# 2. Tokenization
# --------------------------------------------------------------------------------------

#: spaCy's trained pipelines, used (tokenizer only) when installed; else spacy.blank(lang).
SPACY_PIPELINES = {"de": "de_core_news_sm", "en": "en_core_web_sm"}


def _is_installed(package: str) -> bool:
    # What spacy.util.is_package does, without importing spaCy (so a cache key
    # can be computed on a machine that has no spaCy).
    try:
        importlib.metadata.distribution(package)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def tokenizer_kind(lang: str) -> str:
    """Which tokenizer :class:`Tokenizer` would use: ``"de_core_news_sm"`` or ``"blank:de"``."""
    name = SPACY_PIPELINES[lang]
    return name if _is_installed(name) else f"blank:{lang}"


# Detokenization rules. Tokens that attach to the word before them...
_NO_SPACE_BEFORE = {".", ",", "!", "?", ";", ":", "%", ")", "]", "}", "...", "..", "“", "n't", "'s", "'S", "’s", "'re", "'ve", "'ll", "'d", "'m", "’"}
# ...and tokens that attach to the word after them.
_NO_SPACE_AFTER = {"(", "[", "{", "$", "#", "„", "‘", "`", "``"}
_WORDLIKE = re.compile(r"^\w", re.UNICODE)


#: The components of spaCy's small trained pipelines, none of which we use (used when a package's meta.json cannot be read).
_SPACY_COMPONENTS = ("tok2vec", "tagger", "morphologizer", "parser", "attribute_ruler", "lemmatizer", "trainable_lemmatizer", "ner", "senter")


@functools.lru_cache(maxsize=None)
def _load_spacy_tokenizer(lang: str):
    try:
        import spacy
    except ImportError as err:
        raise DataError(
            "spaCy is not installed, and tokenizing German or English text needs its tokenizer: pip install spacy. "
            "translate() always needs it (new sentences must be tokenized). Scoring and training do not: with a corpus "
            "saved by 'python -m transformer_lessons prepare --out FILE' on a machine that has spaCy, "
            "'evaluate --corpus FILE' and 'train --corpus FILE' (or Corpus.load(FILE)) run without it."
        ) from err
    name = SPACY_PIPELINES[lang]
    if not spacy.util.is_package(name):
        return spacy.blank(lang).tokenizer
    # Only the tokenizer is used: exclude every trained component, so none is even loaded
    # (the tagger, parser and the rest would cost seconds to load and ~100x the time to run).
    try:
        components = spacy.util.get_model_meta(spacy.util.get_package_path(name)).get("components") or _SPACY_COMPONENTS
    except Exception:  # an unusual package layout: fall back to the usual names
        components = _SPACY_COMPONENTS
    return spacy.load(name, exclude=list(components)).tokenizer


class Tokenizer:
    """spaCy's rule-based tokenizer for one language, plus a rule-based detokenizer.

    Only the tokenizer runs (no tagger or parser), which is all a translation
    model needs and about 100x faster. The trained pipeline
    (``de_core_news_sm`` / ``en_core_web_sm``) is used when it is installed,
    else ``spacy.blank(lang)``; both split punctuation the same way for this
    data. Case is kept: "Ein" and "ein" stay different tokens.

    Args:
        lang: ``"de"`` or ``"en"``.
    """

    def __init__(self, lang: str):
        if lang not in LANGS:
            raise ValueError(f"lang must be one of {LANGS}, got {lang!r}")
        self.lang = lang
        self._tokenizer = None  # loaded on first use: importing spaCy takes a second or two

    @property
    def kind(self) -> str:
        return tokenizer_kind(self.lang)

    @property
    def spacy_tokenizer(self):
        """The underlying ``spacy.tokenizer.Tokenizer`` (loaded on first use, shared per language)."""
        if self._tokenizer is None:
            self._tokenizer = _load_spacy_tokenizer(self.lang)
        return self._tokenizer

    def tokenize(self, text: str) -> list[str]:
        """``"A man's hat."`` -> ``["A", "man", "'s", "hat", "."]``."""
        return [t.text for t in self.spacy_tokenizer(text.strip()) if not t.is_space]

    def tokenize_batch(self, texts: Iterable[str], batch_size: int = 1000) -> list[list[str]]:
        """:meth:`tokenize` for many texts at once (spaCy's ``pipe``; faster)."""
        docs = self.spacy_tokenizer.pipe((t.strip() for t in texts), batch_size=batch_size)
        return [[t.text for t in doc if not t.is_space] for doc in docs]

    def __call__(self, text: str) -> list[str]:
        return self.tokenize(text)

    def detokenize(self, tokens: Sequence[str]) -> str:
        """Join tokens into a sentence: no space before ``. , ! ? ; :`` or ``n't 's``,
        none inside brackets and quotes, none around a hyphen between two words.

        The rules are written for the English side of Multi30k (German quotes
        „…“ are handled too); they undo :meth:`tokenize` on most sentences, and a
        sentence they get wrong differs only in a space, which BLEU's own
        tokenizer mostly ignores.
        """
        out: list[str] = []
        double_open = False  # inside a "…" pair: the next " closes it
        single_open = False
        attach_next = True  # nothing before the first token
        for i, tok in enumerate(tokens):
            prev = tokens[i - 1] if i else ""
            nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
            attach = attach_next
            attach_next = False
            if tok in _NO_SPACE_BEFORE:
                attach = True
            elif tok in ('"', "''"):
                if double_open:  # closing quote: hugs the word before
                    attach = True
                else:  # opening quote: hugs the word after
                    attach_next = True
                double_open = not double_open
            elif tok == "'":
                if single_open:  # closing a 'quote'
                    attach, single_open = True, False
                elif "'" in tokens[i + 1 :]:  # a later ' closes it: an opening quote
                    attach_next, single_open = True, True
                else:  # a lone apostrophe: "the players' shirts", "4' wide"
                    attach = True
            elif tok == "-" and _WORDLIKE.match(prev or " ") and _WORDLIKE.match(nxt or " "):
                attach, attach_next = True, True  # "t - shirt" -> "t-shirt"
            elif tok == "amp" and prev == "&" and nxt == ";":
                attach = True  # the HTML entity "&amp;" in some captions
            elif tok in ("/", "&") and prev and nxt and prev.isalnum() and nxt.isalnum() and len(prev) <= 2 and len(nxt) <= 2:
                attach, attach_next = True, True  # "R & B", "A/C"
            if tok in _NO_SPACE_AFTER:
                attach_next = True
            if out and not attach:
                out.append(" ")
            out.append(tok)
        return "".join(out)

    def __repr__(self) -> str:
        return f"Tokenizer({self.lang!r})  # {self.kind}"


# --------------------------------------------------------------------------------------
# 3. Vocabulary
# --------------------------------------------------------------------------------------

SPECIALS = ("<unk>", "<pad>", "<bos>", "<eos>")
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
            raise ValueError(f"a Vocab starts with the specials {SPECIALS}, got {itos[:len(SPECIALS)]}")
        if len(set(itos)) != len(itos):
            dupes = [t for t, n in Counter(itos).items() if n > 1][:5]
            raise ValueError(f"a Vocab's tokens must be unique; repeated: {dupes}")
        self.itos: list[str] = itos
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(itos)}
        self.bpe = bpe

    @classmethod
    def build(
        cls, token_lists: Iterable[Sequence[str]], min_freq: int = 2, max_size: int | None = None, bpe: "BPE | None" = None
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
        return 0

    @property
    def pad_id(self) -> int:
        return 1

    @property
    def bos_id(self) -> int:
        return 2

    @property
    def eos_id(self) -> int:
        return 3

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
            raise DataError(f"Vocab format version {data.get('version')!r} is not supported (this code reads {VOCAB_FORMAT}); rebuild it")
        itos = data.get("itos")
        if not isinstance(itos, list) or not all(isinstance(t, str) for t in itos):
            raise DataError("a saved Vocab's 'itos' must be a list of strings; the file is damaged, rebuild it")
        bpe = None
        if data.get("bpe") is not None:
            merges = data["bpe"].get("merges") if isinstance(data["bpe"], dict) else None
            if not isinstance(merges, list) or not all(isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) for x in m) for m in merges):
                raise DataError("a saved Vocab's 'bpe' must hold 'merges', a list of [str, str] pairs; the file is damaged, rebuild it")
            bpe = BPE(merges)
        try:
            return cls(itos, bpe=bpe)
        except ValueError as err:
            raise DataError(f"damaged Vocab: {err}") from err

    def save(self, path: str | os.PathLike) -> None:
        """Write the vocabulary as JSON (readable, diff-able, no pickle)."""
        _write_json(Path(path), self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Vocab":
        """Read a file written by :meth:`save`; a broken file raises :class:`DataError`."""
        return cls.from_dict(_read_json(Path(path), "Vocab"))


def _write_json(path: Path, data: dict) -> None:
    # Write then rename, so a crash never leaves half a file behind.
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if path.suffix == ".gz":
        payload = gzip.compress(payload, compresslevel=5, mtime=0)
    tmp.write_bytes(payload)
    os.replace(tmp, path)


def _read_json(path: Path, what: str) -> dict:
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":  # gzip magic
            raw = gzip.decompress(raw)
        return json.loads(raw.decode("utf-8"))
    except FileNotFoundError as err:
        raise DataError(f"no {what} file at {path}") from err
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(f"{path} is not a readable {what} file ({err}); delete it and create it again") from err


# --------------------------------------------------------------------------------------
# 4. Batches
# --------------------------------------------------------------------------------------

IdPair = tuple[list[int], list[int]]


@dataclass
class Batch:
    """One training batch, batch-first.

    Teacher forcing (paper §3.1, "shifted right"): the decoder reads
    ``tgt_in = <bos> y1 … yn`` and must predict ``tgt_out = y1 … yn <eos>``,
    one position ahead.

    Shape:
        src ``(B, S)``: source ids then ``<eos>``, right-padded with ``pad_id``.
        tgt_in ``(B, T)``: ``<bos>`` then target ids, padded.
        tgt_out ``(B, T)``: target ids then ``<eos>``, padded.
        src_mask ``(B, 1, 1, S)`` and tgt_mask ``(B, 1, T, T)``: bool, True = may attend.
    """

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    src_mask: torch.Tensor
    tgt_mask: torch.Tensor
    n_tokens: int  # real (non-pad) tokens in tgt_out: what the loss is averaged over
    indices: list[int] | None = None  # positions of these pairs in the batcher's input list

    def __len__(self) -> int:
        return self.src.size(0)

    def to(self, device: torch.device | str) -> "Batch":
        """A copy on ``device``; copies from pinned memory are asynchronous."""

        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, non_blocking=t.is_pinned())

        return Batch(
            move(self.src), move(self.tgt_in), move(self.tgt_out), move(self.src_mask), move(self.tgt_mask), self.n_tokens, self.indices
        )

    def pin_memory(self) -> "Batch":
        """A copy in page-locked memory (CUDA only), so :meth:`to` overlaps with compute."""
        return Batch(
            self.src.pin_memory(),
            self.tgt_in.pin_memory(),
            self.tgt_out.pin_memory(),
            self.src_mask.pin_memory(),
            self.tgt_mask.pin_memory(),
            self.n_tokens,
            self.indices,
        )


def _pad(rows: list[list[int]], pad_id: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), pad_id, dtype=torch.long)  # (B, L)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out


def make_batch(pairs: Sequence[IdPair], pad_id: int, bos_id: int, eos_id: int) -> Batch:
    """Pad ``(source ids, target ids)`` pairs (no specials yet) into a :class:`Batch`."""
    if not pairs:
        raise ValueError("make_batch needs at least one pair")
    src = _pad([[*s, eos_id] for s, _ in pairs], pad_id)  # (B, S)
    tgt_in = _pad([[bos_id, *t] for _, t in pairs], pad_id)  # (B, T)
    tgt_out = _pad([[*t, eos_id] for _, t in pairs], pad_id)  # (B, T)
    return Batch(
        src=src,
        tgt_in=tgt_in,
        tgt_out=tgt_out,
        src_mask=padding_mask(src, pad_id),  # (B, 1, 1, S)
        tgt_mask=target_mask(tgt_in, pad_id),  # (B, 1, T, T)
        n_tokens=int((tgt_out != pad_id).sum()),
    )


class TokenBatcher:
    """Batches of similar-length pairs, each holding at most ``max_tokens`` tokens.

    The paper (§5.1) batches "by approximate sequence length" with about 25,000
    source and 25,000 target tokens per batch. Grouping similar lengths wastes
    little on padding; counting tokens instead of sentences keeps every batch
    about the same cost, whether its sentences are short or long.

    Pairs are sorted by (source length, target length) and cut into batches
    greedily while ``B * max(S, T) <= max_tokens`` (``S``, ``T`` the padded
    lengths with ``<eos>``/``<bos>``). A single pair longer than that still
    gets a batch of its own. With ``shuffle``, each epoch the order of pairs of
    equal length and the order of batches are shuffled by a generator seeded
    with ``seed + epoch``; the epoch advances after every pass (or set it with
    :meth:`set_epoch`), so runs are reproducible and epochs differ.

    Args:
        pairs: ``(source ids, target ids)`` without specials.
        max_tokens: budget of padded tokens per batch (per side).
        pad_id, bos_id, eos_id: the special ids (:class:`Vocab` has them).
        shuffle: ``False`` yields batches in length order every time (for evaluation).
        seed: the base of the shuffling seed.

    Yields:
        :class:`Batch` with ``indices`` set to the pairs' positions in ``pairs``.
    """

    def __init__(
        self,
        pairs: Sequence[IdPair],
        max_tokens: int,
        pad_id: int,
        bos_id: int,
        eos_id: int,
        shuffle: bool = True,
        seed: int = 0,
    ):
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        self.pairs = pairs
        self.max_tokens = max_tokens
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self._lengths = [(len(s) + 1, len(t) + 1) for s, t in pairs]  # with <eos> / <bos>
        order = sorted(range(len(pairs)), key=self._lengths.__getitem__)
        # Batch boundaries depend only on the sorted lengths, which do not change
        # when equal-length pairs swap places: the same slices serve every epoch.
        self._bounds: list[tuple[int, int]] = []
        start, width = 0, 0
        for pos, i in enumerate(order):
            width_with = max(width, *self._lengths[i])
            if pos > start and (pos - start + 1) * width_with > max_tokens:
                self._bounds.append((start, pos))
                start, width_with = pos, max(self._lengths[i])
            width = width_with
        if order:
            self._bounds.append((start, len(order)))

    def set_epoch(self, epoch: int) -> None:
        """Use the shuffle of epoch ``epoch`` for the next pass."""
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self._bounds)

    def batch_indices(self) -> list[list[int]]:
        """The pair indices of each batch of the next pass (does not advance the epoch)."""
        n = len(self.pairs)
        if not self.shuffle:
            order = sorted(range(n), key=self._lengths.__getitem__)
            return [order[a:b] for a, b in self._bounds]
        gen = torch.Generator().manual_seed(self.seed + self.epoch)
        perm = torch.randperm(n, generator=gen).tolist()
        order = sorted(perm, key=self._lengths.__getitem__)  # stable: random order within equal lengths
        batches = [order[a:b] for a, b in self._bounds]
        return [batches[j] for j in torch.randperm(len(batches), generator=gen).tolist()]

    def __iter__(self) -> Iterator[Batch]:
        batches = self.batch_indices()
        self.epoch += 1
        for idx in batches:
            batch = make_batch([self.pairs[i] for i in idx], self.pad_id, self.bos_id, self.eos_id)
            batch.indices = idx
            yield batch


# --------------------------------------------------------------------------------------
# 5. The whole corpus, tokenized, with vocabularies
# --------------------------------------------------------------------------------------

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
        info: how it was made (min_freq, max_len, limit, tokenizers).
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

    def batcher(self, split: str, max_tokens: int, shuffle: bool | None = None, seed: int = 0, max_len: int | None = None) -> TokenBatcher:
        """A :class:`TokenBatcher` over one split (shuffled for ``train`` by default).

        ``max_len``: skip pairs a model of that ``max_len`` cannot read (see :meth:`too_long`).
        """
        v = self.tgt_vocab
        pairs = self.pairs[split]
        if max_len is not None:
            pairs = [p for p in pairs if len(p[0]) < max_len and len(p[1]) < max_len]
        return TokenBatcher(pairs, max_tokens, v.pad_id, v.bos_id, v.eos_id, split == "train" if shuffle is None else shuffle, seed)

    def too_long(self, split: str, max_len: int) -> int:
        """How many pairs of ``split`` a model with this ``max_len`` cannot read:
        a side with ``max_len`` or more units (one place goes to ``<eos>`` / ``<bos>``)."""
        return sum(1 for s, t in self.pairs[split] if len(s) >= max_len or len(t) >= max_len)

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
        _write_json(Path(path), data)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Corpus":
        data = _read_json(Path(path), "Corpus")
        if not isinstance(data, dict) or data.get("format") != "transformer_lessons.Corpus":
            raise DataError(f"{path} is not a saved Corpus; make one with prepare_corpus(...).save(path)")
        if data.get("version") != CORPUS_FORMAT:
            raise DataError(f"{path} has Corpus format {data.get('version')!r}, this code reads {CORPUS_FORMAT}; save it again")
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


def _tokenized_split(split: str, data_dir, cache: bool, progress: bool, tokenizers: dict[str, Tokenizer]) -> tuple[list, list]:
    """``(text pairs, token pairs)`` of one split, from the cache when possible."""
    path = _split_cache_path(split)
    if cache and path.is_file():
        try:
            data = _read_json(path, "tokenized split")
            text = [tuple(p) for p in data["text"]]
            tokens = [tuple(p) for p in data["tokens"]]
            if len(text) == len(tokens) == SPLIT_SIZES[split]:
                return text, tokens
        except (DataError, KeyError, TypeError):
            pass
        warnings.warn(f"ignoring the damaged tokenized cache {path}; tokenizing again", stacklevel=3)
    text = load_split(split, data_dir, progress)
    columns = []
    for j, lang in enumerate(LANGS):
        sentences = [pair[j] for pair in text]
        if progress:
            from tqdm.auto import tqdm

            sentences = tqdm(sentences, desc=f"tokenize {split}.{lang}", unit=" sent", leave=False)
        columns.append(tokenizers[lang].tokenize_batch(sentences))
    tokens = list(zip(*columns))
    if cache:
        _write_json(path, {"split": split, "text": text, "tokens": tokens})
    return text, tokens


def prepare_corpus(
    data_dir: str | os.PathLike | None = None,
    min_freq: int = 2,
    max_len: int | None = None,
    splits: Sequence[str] = ("train", "val", "test_2016_flickr"),
    limit: int | None = None,
    cache: bool = True,
    progress: bool = True,
    bpe_merges: int | None = None,
) -> Corpus:
    """Load, tokenize and encode Multi30k German→English.

    Args:
        data_dir: a directory with the raw files (see :func:`fetch`).
        min_freq: training-set count below which a word becomes ``<unk>``.
        max_len: drop *training* pairs with more than ``max_len`` tokens on
            either side (specials not counted). Evaluation pairs are never
            dropped: a test set you filter is no longer the test set.
        splits: which splits to return; ``"train"`` is always included (the
            vocabularies are built on it).
        limit: keep only the first ``limit`` training pairs (quick mode).
        cache: read/write the tokens of each split under
            ``cache_dir()/tokenized``, so later calls skip spaCy.
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
    tokenizers = {lang: Tokenizer(lang) for lang in LANGS}
    text, tokens = {}, {}
    for split in splits:
        text[split], tokens[split] = _tokenized_split(split, data_dir, cache, progress, tokenizers)

    keep = range(len(tokens["train"]) if limit is None else min(limit, len(tokens["train"])))
    if max_len is not None:
        keep = [i for i in keep if len(tokens["train"][i][0]) <= max_len and len(tokens["train"][i][1]) <= max_len]
    text["train"] = [text["train"][i] for i in keep]
    tokens["train"] = [tokens["train"][i] for i in keep]

    src_bpe = tgt_bpe = None
    if bpe_merges:
        src_bpe = BPE.learn((s for s, _ in tokens["train"]), bpe_merges)
        tgt_bpe = BPE.learn((t for _, t in tokens["train"]), bpe_merges)
    src_vocab = Vocab.build((s for s, _ in tokens["train"]), min_freq=min_freq, bpe=src_bpe)
    tgt_vocab = Vocab.build((t for _, t in tokens["train"]), min_freq=min_freq, bpe=tgt_bpe)
    pairs = {split: [(src_vocab.encode_words(s), tgt_vocab.encode_words(t)) for s, t in tokens[split]] for split in splits}
    info = {
        "min_freq": min_freq,
        "max_len": max_len,
        "limit": limit,
        "bpe_merges": bpe_merges or None,
        "tokenizers": {lang: tokenizer_kind(lang) for lang in LANGS},
    }
    return Corpus(src_vocab, tgt_vocab, pairs, text, tokens, info)
