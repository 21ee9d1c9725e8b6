"""Multi30k German→English: download, checksum, tokenize, vocabulary, batches.

The pipeline from files to tensors, one step per module:

1. :mod:`~transformer_lessons.data.files`: :func:`fetch` gets one raw file (a
   local directory, the cache, or the internet) and checks its SHA-256;
   :func:`load_split` reads a split as ``(de, en)`` sentence pairs.
2. :mod:`~transformer_lessons.data.tokenizer`: :class:`Tokenizer` splits
   sentences into words with spaCy's rule-based tokenizer and joins words back
   (:meth:`Tokenizer.detokenize`) for BLEU.
3. :mod:`~transformer_lessons.data.vocab`: :class:`Vocab` maps tokens to ids,
   with ``<unk> <pad> <bos> <eos>`` first.
4. :mod:`~transformer_lessons.data.batching`: :func:`make_batch` pads a list of
   id pairs into a :class:`Batch` with its masks; :class:`TokenBatcher` groups
   pairs of similar length so each batch holds about ``max_tokens`` tokens
   (paper §5.1).
5. :mod:`~transformer_lessons.data.corpus`: :func:`prepare_corpus` does 1–3 for
   every split and caches the tokens (best effort), so a second run (or a
   machine without spaCy) skips tokenization.

And :mod:`~transformer_lessons.data.examples`: :func:`example_pairs`, the six
test sentences notebook 11 shows, shipped with the package (no file, no network).

Every name is importable from here (``from transformer_lessons import data;
data.Vocab``), as it was when this package was one module.

Paper: §5.1 ("Sentence pairs were batched together by approximate sequence
length"). Dataset: Elliott et al. (2016), "Multi30K: Multilingual
English-German Image Descriptions".

Importing this package is cheap: spaCy and tqdm are imported only when used.
"""

from transformer_lessons.data.batching import Batch, IdPair, TokenBatcher, make_batch
from transformer_lessons.data.corpus import CORPUS_FORMAT, Corpus, TokenPair, prepare_corpus
from transformer_lessons.data.examples import example_pairs
from transformer_lessons.data.files import (
    CACHE_ENV,
    DATA_ENV,
    DOWNLOAD_TIMEOUT_S,
    LANGS,
    SHA256,
    SPLIT_SIZES,
    SPLITS,
    URL_TEMPLATE,
    cache_dir,
    fetch,
    file_name,
    load_split,
    resolve_data_dir,
    sha256_file,
)
from transformer_lessons.data.tokenizer import (
    SPACY_PIPELINES,
    Tokenizer,
    tokenizer_kind,
)
from transformer_lessons.data.vocab import VOCAB_FORMAT, Vocab
from transformer_lessons.errors import DataError
from transformer_lessons.specials import SPECIALS

__all__ = [
    "Batch",
    "CACHE_ENV",
    "CORPUS_FORMAT",
    "Corpus",
    "DATA_ENV",
    "DOWNLOAD_TIMEOUT_S",
    "DataError",
    "IdPair",
    "LANGS",
    "SHA256",
    "SPACY_PIPELINES",
    "SPECIALS",
    "SPLITS",
    "SPLIT_SIZES",
    "TokenBatcher",
    "TokenPair",
    "Tokenizer",
    "URL_TEMPLATE",
    "VOCAB_FORMAT",
    "Vocab",
    "cache_dir",
    "example_pairs",
    "fetch",
    "file_name",
    "load_split",
    "make_batch",
    "prepare_corpus",
    "resolve_data_dir",
    "sha256_file",
    "tokenizer_kind",
]
