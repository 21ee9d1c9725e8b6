"""Tokenization: sentences into words with spaCy's rule-based tokenizer, and words back into sentences.

A translation model reads units, not characters. :class:`Tokenizer` splits a
sentence into words and punctuation (``"A man's hat."`` -> ``A man 's hat .``)
with spaCy's tokenizer alone: no tagger or parser, which a translation model
does not need. :meth:`Tokenizer.detokenize` joins words back into a sentence,
so that BLEU can compare the model's output with the reference text.

spaCy is imported on first use, not when this module is imported.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
from typing import Iterable, Sequence

from transformer_lessons.data.files import LANGS
from transformer_lessons.errors import DataError

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
_NO_SPACE_BEFORE = {
    ".",
    ",",
    "!",
    "?",
    ";",
    ":",
    "%",
    ")",
    "]",
    "}",
    "...",
    "..",
    "“",
    "n't",
    "'s",
    "'S",
    "’s",
    "'re",
    "'ve",
    "'ll",
    "'d",
    "'m",
    "’",
}
# ...and tokens that attach to the word after them.
_NO_SPACE_AFTER = {"(", "[", "{", "$", "#", "„", "‘", "`", "``"}
_WORDLIKE = re.compile(r"^\w", re.UNICODE)


#: The components of spaCy's small trained pipelines, none of which we use (used when a package's meta.json cannot be read).
_SPACY_COMPONENTS = (
    "tok2vec",
    "tagger",
    "morphologizer",
    "parser",
    "attribute_ruler",
    "lemmatizer",
    "trainable_lemmatizer",
    "ner",
    "senter",
)


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
    # (the tagger, parser and the rest would cost seconds to load and much longer to run).
    try:
        components = spacy.util.get_model_meta(spacy.util.get_package_path(name)).get("components") or _SPACY_COMPONENTS
    except Exception:  # an unusual package layout: fall back to the usual names
        components = _SPACY_COMPONENTS
    return spacy.load(name, exclude=list(components)).tokenizer


class Tokenizer:
    """spaCy's rule-based tokenizer for one language, plus a rule-based detokenizer.

    Only the tokenizer runs (no tagger or parser), which is all a translation
    model needs, and faster. The trained pipeline
    (``de_core_news_sm`` / ``en_core_web_sm``) is used when it is installed,
    else ``spacy.blank(lang)`` (``kind`` says which; the course's records were
    made with the blank ones). Case is kept: "Ein" and "ein" stay different tokens.

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
        „…“ are handled too); they undo :meth:`tokenize` on 99.89% of the English
        training sentences. A sentence they get wrong differs only in a space.
        sacreBLEU's tokenizer (13a) splits punctuation again, which repairs some
        of these, but it does not split at an apostrophe or a hyphen between
        letters (``they 're`` and ``they're`` stay different words). Such
        sentences are rare, so they hardly move the score.
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
            elif (
                tok in ("/", "&")
                and prev
                and nxt
                and prev.isalnum()
                and nxt.isalnum()
                and len(prev) <= 2
                and len(nxt) <= 2
            ):
                attach, attach_next = True, True  # "R & B", "A/C"
            if tok in _NO_SPACE_AFTER:
                attach_next = True
            if out and not attach:
                out.append(" ")
            out.append(tok)
        return "".join(out)

    def __repr__(self) -> str:
        return f"Tokenizer({self.lang!r})  # {self.kind}"
