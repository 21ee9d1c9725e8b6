"""Tests of transformer_lessons.data: files, tokenizer, vocabulary, batches, corpus.

The raw Multi30k files come from $TRANSFORMER_LESSONS_DATA or the shared copy
beside the repository (../shared/data/multi30k); no test touches the network.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import torch

from transformer_lessons import atomic, data, errors, specials
from transformer_lessons.data import corpus as corpus_module
from transformer_lessons.data import files
from transformer_lessons.data import (
    SHA256,
    SPLIT_SIZES,
    SPLITS,
    Batch,
    Corpus,
    DataError,
    Tokenizer,
    TokenBatcher,
    Vocab,
    make_batch,
)
from transformer_lessons.masks import padding_mask, target_mask
from transformer_lessons.data import tokenizer as tokenizer_module

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get(data.DATA_ENV) or REPO.parent / "shared" / "data" / "multi30k")
needs_data = pytest.mark.skipif(
    not (DATA_DIR / "train.en.gz").is_file(),
    reason=f"Multi30k raw files not found in {DATA_DIR}: set {data.DATA_ENV} to a directory holding them",
)


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """Every test gets its own empty cache and no data directory unless it asks."""
    monkeypatch.setenv(data.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(data.DATA_ENV, raising=False)


def copy_data(target: Path, names=None) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    for name in names if names is not None else SHA256:
        shutil.copyfile(DATA_DIR / name, target / name)
    return target


# ----------------------------------------------------------------------------- files


def test_checksum_table_covers_every_file():
    assert set(SHA256) == {f"{s}.{lang}.gz" for s in SPLITS for lang in ("de", "en")}
    assert set(SPLIT_SIZES) == set(SPLITS)


@needs_data
def test_shared_files_match_checksums():
    for name, expected in SHA256.items():
        assert data.sha256_file(DATA_DIR / name) == expected, name


@needs_data
def test_load_split_sizes_and_alignment():
    for split in SPLITS:
        pairs = data.load_split(split, DATA_DIR)
        assert len(pairs) == SPLIT_SIZES[split], split
        assert all(de and en and de == de.strip() for de, en in pairs), split
    assert data.load_split("val", DATA_DIR)[0] == (
        "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen",
        "A group of men are loading cotton onto a truck",
    )


def test_resolve_data_dir(monkeypatch, tmp_path):
    assert data.resolve_data_dir() is None
    monkeypatch.setenv(data.DATA_ENV, "")
    assert data.resolve_data_dir() is None
    monkeypatch.setenv(data.DATA_ENV, str(tmp_path))
    assert data.resolve_data_dir() == tmp_path
    assert data.resolve_data_dir(tmp_path / "x") == tmp_path / "x"  # the argument wins


def test_cache_dir(monkeypatch, tmp_path):
    assert data.cache_dir() == tmp_path / "cache"
    monkeypatch.delenv(data.CACHE_ENV)
    monkeypatch.chdir(tmp_path)  # outside a course folder (a prepared one has its own: tests/test_classroom.py)
    assert data.cache_dir() == Path.home() / ".cache" / "transformer_lessons"


@needs_data
def test_the_shipped_test_sentences_are_the_real_files_lines():
    test = data.load_split("test_2016_flickr", DATA_DIR, progress=False)
    for i, pair in data.examples.TEST_2016_FLICKR.items():
        assert pair == test[i], i
    assert data.example_pairs([8, 20, 18, 32, 3, 9]) == [test[i] for i in (8, 20, 18, 32, 3, 9)]  # notebook 11's PICK


def test_an_unshipped_line_says_where_the_rest_is():
    with pytest.raises(KeyError, match=r"lines \[0\] of test_2016_flickr are not shipped.*load_split"):
        data.example_pairs([8, 0])


def test_bad_split_or_language():
    with pytest.raises(ValueError, match="unknown split"):
        data.fetch("dev", "en")
    with pytest.raises(ValueError, match="unknown language"):
        data.fetch("val", "fr")


@needs_data
@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_corrupt_local_file_is_refused(tmp_path, damage):
    local = copy_data(tmp_path / "local")
    path = local / "val.en.gz"
    raw = bytearray(path.read_bytes())
    if damage == "truncate":
        raw = raw[: len(raw) // 2]
    else:
        raw[100] ^= 0xFF
    path.write_bytes(bytes(raw))
    actual = hashlib.sha256(bytes(raw)).hexdigest()
    with pytest.raises(DataError) as info:
        data.fetch("val", "en", data_dir=local)
    message = str(info.value)
    assert str(path) in message and SHA256["val.en.gz"] in message and actual in message
    with pytest.raises(DataError, match="val.en.gz"):
        data.load_split("val", local)
    assert data.fetch("val", "de", data_dir=local) == local / "val.de.gz"  # the good one is fine


@needs_data
def test_missing_local_files_are_listed(tmp_path, monkeypatch):
    local = copy_data(tmp_path / "local", ["val.de.gz", "val.en.gz"])
    assert data.fetch("val", "en", data_dir=local) == local / "val.en.gz"
    monkeypatch.setenv(data.DATA_ENV, str(local))  # the environment variable works the same way
    with pytest.raises(DataError) as info:
        data.fetch("train", "de")
    message = str(info.value)
    assert "train.de.gz" in message and "test_2017_mscoco.en.gz" in message and "val.en.gz is" not in message
    with pytest.raises(DataError, match="does not exist"):
        data.fetch("val", "en", data_dir=tmp_path / "nowhere")


@pytest.mark.parametrize("error", [urllib.error.URLError("no route to host"), TimeoutError("timed out")])
def test_offline_without_copy_says_where_to_put_files(monkeypatch, error):
    def offline(*args, **kwargs):
        raise error

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DataError) as info:
        data.fetch("val", "de", progress=False)
    message = str(info.value)
    assert str(data.cache_dir()) in message
    assert data.DATA_ENV in message and "data_dir=" in message
    assert data.URL_TEMPLATE.format(split="val", lang="de") in message
    assert not list(data.cache_dir().glob("*")), "nothing may be left in the cache"


class FakeResponse(io.BytesIO):
    """What urlopen returns, serving fixed bytes (optionally failing midway)."""

    def __init__(self, payload: bytes, fail_after: int | None = None):
        super().__init__(payload)
        self.headers = {"Content-Length": str(len(payload))}
        self.fail_after = fail_after

    def read(self, size=-1):
        if self.fail_after is not None and self.tell() >= self.fail_after:
            raise ConnectionResetError("connection reset by peer")
        return super().read(size)


def serve(monkeypatch, payload: bytes, fail_after=None) -> list[str]:
    calls: list[str] = []

    def fake_urlopen(url, timeout=None):
        calls.append(url)
        return FakeResponse(payload, fail_after)

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    return calls


@needs_data
def test_download_writes_verified_file_atomically(monkeypatch, capsys):
    payload = (DATA_DIR / "val.en.gz").read_bytes()
    calls = serve(monkeypatch, payload)
    path = data.fetch("val", "en", progress=True)
    assert calls == [data.URL_TEMPLATE.format(split="val", lang="en")]
    assert path == data.cache_dir() / "val.en.gz" and path.read_bytes() == payload
    assert [p.name for p in data.cache_dir().iterdir()] == ["val.en.gz"], "no temporary file left behind"
    assert "val.en.gz" in capsys.readouterr().err  # the progress bar
    assert data.fetch("val", "en") == path and len(calls) == 1  # the cached copy is used


@needs_data
def test_interrupted_download_leaves_nothing(monkeypatch):
    serve(monkeypatch, (DATA_DIR / "train.en.gz").read_bytes(), fail_after=1 << 16)
    with pytest.raises(DataError, match="could not download"):
        data.fetch("train", "en", progress=False)
    assert not list(data.cache_dir().iterdir())


def test_an_unwritable_cache_is_not_called_a_download_failure(monkeypatch, tmp_path):
    def no_network(*args, **kwargs):
        raise AssertionError("the cache directory is checked before the network is used")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    (tmp_path / "a_file").write_text("not a directory")
    monkeypatch.setenv(data.CACHE_ENV, str(tmp_path / "a_file" / "cache"))
    with pytest.raises(DataError) as info:
        data.fetch("val", "de", progress=False)
    message = str(info.value)
    assert message.startswith(f"could not save val.de.gz in the cache directory {tmp_path / 'a_file' / 'cache'}")
    assert "not the network" in message and "could not download" not in message
    assert data.CACHE_ENV in message and data.DATA_ENV in message


class FullDisk(io.BytesIO):
    """A file whose writes fail as on a full disk."""

    def write(self, chunk):
        raise OSError(28, "No space left on device")


def test_a_full_disk_while_downloading_is_not_called_a_download_failure(monkeypatch):
    serve(monkeypatch, b"x" * 1000)

    def open_on_a_full_disk(path, mode="r", *args, **kwargs):
        f = open(path, mode, *args, **kwargs)  # the real temporary file, which must be removed again
        if "w" not in mode:
            return f
        f.close()
        return FullDisk()

    monkeypatch.setattr(files, "open", open_on_a_full_disk, raising=False)  # the download's open(), nobody else's
    with pytest.raises(
        DataError, match=r"could not save val.en.gz in the cache directory .*No space left on device.*not the network"
    ):
        data.fetch("val", "en", progress=False)
    assert data.cache_dir().is_dir() and not list(data.cache_dir().iterdir()), "the temporary file is removed"


def test_wrong_bytes_from_server_are_not_kept(monkeypatch):
    serve(monkeypatch, b"<html>rate limited</html>")
    with pytest.raises(DataError, match="expected " + SHA256["val.en.gz"]):
        data.fetch("val", "en", progress=False)
    assert not (data.cache_dir() / "val.en.gz").exists()


@needs_data
def test_corrupt_cached_file_is_downloaded_again(monkeypatch):
    payload = (DATA_DIR / "val.de.gz").read_bytes()
    cached = data.cache_dir() / "val.de.gz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(payload[:1000])
    calls = serve(monkeypatch, payload)
    with pytest.warns(UserWarning, match="val.de.gz is corrupt"):
        path = data.fetch("val", "de", progress=False)
    assert len(calls) == 1 and path.read_bytes() == payload


def test_load_split_refuses_unequal_line_counts(monkeypatch, tmp_path):
    for lang, lines in (("de", "a\nb\nc\n"), ("en", "a\nb\n")):
        with gzip.open(tmp_path / f"val.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write(lines)
    monkeypatch.setattr(
        files, "fetch", lambda split, lang, data_dir=None, progress=True: tmp_path / f"{split}.{lang}.gz"
    )
    with pytest.raises(DataError, match="has 3 lines but"):
        data.load_split("val")


# ----------------------------------------------------------------------------- tokenizer


def test_import_is_cheap():
    code = "import sys, transformer_lessons, transformer_lessons.data; print('spacy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_tokenizer_keeps_case_and_splits_punctuation():
    en, de = Tokenizer("en"), Tokenizer("de")
    assert en.tokenize("A man's dog isn't wet, \"Rex\" (a puppy).") == [
        "A",
        "man",
        "'s",
        "dog",
        "is",
        "n't",
        "wet",
        ",",
        '"',
        "Rex",
        '"',
        "(",
        "a",
        "puppy",
        ")",
        ".",
    ]
    assert de.tokenize("  Ein Mann  schläft auf dem Sofa. ") == ["Ein", "Mann", "schläft", "auf", "dem", "Sofa", "."]
    texts = ["Two dogs run.", "Zwei Hunde rennen!"]
    assert en.tokenize_batch(texts) == [en.tokenize(t) for t in texts]
    assert en.kind in ("en_core_web_sm", "blank:en")


@pytest.fixture
def fresh_spacy_tokenizers():
    """The per-language tokenizer cache emptied before and after (a test loads its own)."""
    tokenizer_module._load_spacy_tokenizer.cache_clear()
    yield
    tokenizer_module._load_spacy_tokenizer.cache_clear()


@pytest.mark.parametrize("meta_readable", [True, False])
def test_a_trained_spacy_pipeline_is_loaded_tokenizer_only(
    tmp_path, monkeypatch, fresh_spacy_tokenizers, meta_readable
):
    # A stand-in for de_core_news_sm: a saved pipeline with components that tokenizing never needs.
    spacy = pytest.importorskip("spacy")
    nlp = spacy.blank("de")
    nlp.add_pipe("sentencizer", name="senter")  # cheap factories under the trained pipelines' names
    nlp.add_pipe("entity_ruler", name="ner")
    nlp.to_disk(tmp_path / "pipeline")
    calls = []
    real_load = spacy.load

    def load(name, **kwargs):
        calls.append((name, kwargs))
        loaded = real_load(tmp_path / "pipeline", **kwargs)
        assert loaded.pipe_names == [], "every component is excluded, none is even loaded"
        return loaded

    def package_path(name):
        if not meta_readable:
            raise ModuleNotFoundError(name)
        return tmp_path / "pipeline"

    monkeypatch.setattr(spacy.util, "is_package", lambda name: True)
    monkeypatch.setattr(spacy.util, "get_package_path", package_path)
    monkeypatch.setattr(spacy, "load", load)
    tokenizer = tokenizer_module._load_spacy_tokenizer("de")
    assert [t.text for t in tokenizer("Ein Mann, der schläft.")] == ["Ein", "Mann", ",", "der", "schläft", "."]
    expected = ["senter", "ner"] if meta_readable else list(tokenizer_module._SPACY_COMPONENTS)
    assert calls == [("de_core_news_sm", {"exclude": expected})]


def test_without_spacy_the_message_says_what_works(monkeypatch, fresh_spacy_tokenizers):
    monkeypatch.setitem(sys.modules, "spacy", None)  # import spacy now raises ImportError
    with pytest.raises(DataError) as info:
        Tokenizer("de").tokenize("Ein Mann.")
    message = str(info.value)
    assert "pip install spacy" in message and "translate() always needs it" in message
    assert "evaluate --corpus" in message and "prepare --out" in message


@pytest.mark.parametrize(
    "sentence",
    [
        "A man in a t-shirt isn't smiling.",
        'A sign says "Come on in!" near the door.',
        "The players' shirts are red; the dog's collar is blue.",
        "A child (about 5) plays with a ball at 50% off?",
        "Two kids read 'Harry Potter' outside.",
    ],
)
def test_detokenize_undoes_tokenize(sentence):
    tok = Tokenizer("en")
    assert tok.detokenize(tok.tokenize(sentence)) == sentence


def test_detokenize_german_quotes():
    tok = Tokenizer("de")
    sentence = "Ein Schild mit der Aufschrift „Willkommen“, daneben ein Hund."
    assert tok.detokenize(tok.tokenize(sentence)) == sentence


@needs_data
def test_detokenize_round_trip_on_val():
    tok = Tokenizer("en")
    english = [en for _, en in data.load_split("val", DATA_DIR)]
    exact = sum(tok.detokenize(t) == s for s, t in zip(english, tok.tokenize_batch(english)))
    assert exact / len(english) >= 0.99  # 1013 of 1014 when written; the miss is an ambiguous "..."


# ----------------------------------------------------------------------------- vocabulary


def test_vocab_build_min_freq_and_order():
    vocab = Vocab.build([["b", "a", "c"], ["a", "b", "d"], ["a", "<pad>"]], min_freq=2)
    assert vocab.itos == ["<unk>", "<pad>", "<bos>", "<eos>", "a", "b"]  # a: 3, b: 2; c, d once
    assert (vocab.unk_id, vocab.pad_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2, 3)
    assert vocab.stoi["b"] == 5 and len(vocab) == 6
    ties = Vocab.build([["z", "y", "x"]], min_freq=1)
    assert ties.itos[4:] == ["x", "y", "z"]  # equal counts: by token
    assert Vocab.build([["a", "a", "b", "b", "c"]], min_freq=1, max_size=5).itos[4:] == ["a"]


def test_vocab_encode_decode():
    vocab = Vocab.build([["a", "b", "a", "b"]], min_freq=2)
    assert vocab.encode(["a", "zebra", "b"]) == [4, 0, 5]
    assert vocab.decode([2, 4, 0, 5, 3, 4, 1]) == ["a", "<unk>", "b"]  # stops at <eos>, drops <bos>
    assert vocab.decode(torch.tensor([4, 1, 1])) == ["a"]
    assert vocab.decode([2, 4, 3, 1], strip_special=False) == ["<bos>", "a", "<eos>", "<pad>"]


def test_vocab_save_load_round_trip(tmp_path):
    vocab = Vocab.build([["Ein", "Mann", "ein", "Ein", "Mann", "ein", "„"]], min_freq=2)
    vocab.save(tmp_path / "v.json")
    assert Vocab.load(tmp_path / "v.json") == vocab
    assert json.loads((tmp_path / "v.json").read_text(encoding="utf-8"))["version"] == data.VOCAB_FORMAT
    assert Vocab.from_dict(vocab.to_dict()) == vocab and vocab != Vocab.build([["x", "x"]])


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        '{"format": "transformer_lessons.Vocab", "version": 99, "itos": []}',
        '{"format": "transformer_lessons.Vocab", "version": 1, "itos": ["a", "b"]}',
        '{"format": "something else"}',
        "[1, 2, 3]",
    ],
)
def test_vocab_load_broken_file(tmp_path, content):
    (tmp_path / "v.json").write_text(content)
    with pytest.raises(DataError):
        Vocab.load(tmp_path / "v.json")


def test_vocab_load_missing_file(tmp_path):
    with pytest.raises(DataError, match="no Vocab file"):
        Vocab.load(tmp_path / "nope.json")


# ----------------------------------------------------------------------------- batches

PAD, BOS, EOS = 1, 2, 3


def test_make_batch_shapes_specials_and_masks():
    batch = make_batch([([10, 11, 12], [20, 21]), ([13], [22, 23, 24, 25])], PAD, BOS, EOS)
    assert batch.src.tolist() == [[10, 11, 12, 3], [13, 3, 1, 1]]  # (B, S) = (2, 4)
    assert batch.tgt_in.tolist() == [[2, 20, 21, 1, 1], [2, 22, 23, 24, 25]]  # (B, T) = (2, 5)
    assert batch.tgt_out.tolist() == [[20, 21, 3, 1, 1], [22, 23, 24, 25, 3]]
    assert batch.src.dtype == batch.tgt_in.dtype == torch.long
    assert batch.src_mask.shape == (2, 1, 1, 4) and batch.src_mask.dtype == torch.bool
    assert batch.tgt_mask.shape == (2, 1, 5, 5) and batch.tgt_mask.dtype == torch.bool
    assert torch.equal(batch.src_mask, padding_mask(batch.src, PAD))
    assert torch.equal(batch.tgt_mask, target_mask(batch.tgt_in, PAD))
    assert batch.n_tokens == 3 + 5 and len(batch) == 2
    moved = batch.to("cpu")
    assert isinstance(moved, Batch) and torch.equal(moved.tgt_out, batch.tgt_out)


def random_pairs(n: int, seed: int = 0, max_len: int = 30) -> list[tuple[list[int], list[int]]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, max_len, (n, 2), generator=g).tolist()
    return [([4 + i % 50] * s, [5 + i % 40] * t) for i, (s, t) in enumerate(lengths)]


def test_token_batcher_covers_each_pair_once_within_budget():
    pairs = random_pairs(500)
    batcher = TokenBatcher(pairs, max_tokens=200, pad_id=PAD, bos_id=BOS, eos_id=EOS, seed=3)
    for _ in range(2):
        seen = Counter()
        n = 0
        for batch in batcher:
            n += 1
            seen.update(batch.indices)
            width = max(batch.src.size(1), batch.tgt_in.size(1))
            assert len(batch) * width <= 200
            for row, i in enumerate(batch.indices):  # the batch holds the pairs it says it holds
                assert batch.src[row, : len(pairs[i][0])].tolist() == pairs[i][0]
        assert n == len(batcher)
        assert seen == Counter(range(len(pairs)))


def test_token_batcher_lone_long_pair():
    pairs = [([7] * 3, [8] * 3)] * 4 + [([7] * 50, [8] * 60)]
    batches = list(TokenBatcher(pairs, max_tokens=20, pad_id=PAD, bos_id=BOS, eos_id=EOS, shuffle=False))
    assert [len(b) for b in batches] == [4, 1]  # 4 * max(4, 4) = 16 <= 20; the long one alone
    assert batches[1].tgt_out.shape == (1, 61)


def test_token_batcher_is_seeded_and_changes_each_epoch():
    pairs = random_pairs(300, seed=1, max_len=8)  # many equal lengths: composition can change too
    order = lambda b: [batch.indices for batch in b]  # noqa: E731
    a = TokenBatcher(pairs, 100, PAD, BOS, EOS, seed=0)
    b = TokenBatcher(pairs, 100, PAD, BOS, EOS, seed=0)
    first, again = order(a), order(b)
    assert first == again  # same seed, same epoch: same batches
    assert order(a) != first  # the next epoch differs
    b.set_epoch(0)
    assert order(b) == first  # set_epoch replays an epoch
    assert order(TokenBatcher(pairs, 100, PAD, BOS, EOS, seed=1)) != first
    fixed = TokenBatcher(pairs, 100, PAD, BOS, EOS, shuffle=False)
    assert order(fixed) == order(fixed)


# ----------------------------------------------------------------------------- corpus


@needs_data
def test_prepare_corpus_and_cache_reuse(monkeypatch, tmp_path):
    corpus = data.prepare_corpus(DATA_DIR, limit=500, drop_longer_than=20, progress=False)
    assert len(corpus.pairs["train"]) == len(corpus.text["train"]) == len(corpus.tokens["train"])
    assert 450 < len(corpus.pairs["train"]) < 500  # drop_longer_than dropped a few long training pairs...
    assert len(corpus.pairs["val"]) == 1014 and len(corpus.pairs["test_2016_flickr"]) == 1000  # ...never eval pairs
    assert all(len(s) <= 20 and len(t) <= 20 for s, t in corpus.tokens["train"])
    assert corpus.src_vocab.itos[:4] == list(data.SPECIALS) and 300 < len(corpus.tgt_vocab) < 1000
    de, en = corpus.text["val"][0]
    assert corpus.tgt_vocab.decode(corpus.pairs["val"][0][1]) == [
        w if w in corpus.tgt_vocab else "<unk>" for w in Tokenizer("en").tokenize(en)
    ]
    assert list(data.cache_dir().glob("tokenized/train.*.json.gz"))

    def no_tokenizing(*args, **kwargs):
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(Tokenizer, "tokenize_batch", no_tokenizing)
    monkeypatch.setattr(corpus_module, "load_split", no_tokenizing)  # nor are the raw files needed
    again = data.prepare_corpus(DATA_DIR, limit=500, drop_longer_than=20, progress=False)
    assert again.pairs == corpus.pairs and again.src_vocab == corpus.src_vocab and again.text == corpus.text

    corpus.save(tmp_path / "corpus.json.gz")
    loaded = Corpus.load(tmp_path / "corpus.json.gz")
    assert loaded.pairs == corpus.pairs and loaded.tgt_vocab == corpus.tgt_vocab and loaded.tokens == corpus.tokens
    assert "train=" in repr(loaded) and len(repr(loaded)) < 300
    batch = next(iter(loaded.batcher("val", max_tokens=500)))
    assert batch.src.max() < len(loaded.src_vocab) and batch.tgt_out.max() < len(loaded.tgt_vocab)


def test_corpus_load_broken_file(tmp_path):
    (tmp_path / "c.json").write_text('{"format": "transformer_lessons.Corpus", "version": 1}')
    with pytest.raises(DataError, match="damaged"):
        Corpus.load(tmp_path / "c.json")


@needs_data
def test_prepare_corpus_with_subwords(tmp_path):
    words = data.prepare_corpus(DATA_DIR, limit=2000, progress=False)
    pieces = data.prepare_corpus(DATA_DIR, limit=2000, progress=False, bpe_merges=1000)
    assert pieces.tokens == words.tokens, "Corpus.tokens stay words; only the ids are pieces"
    assert pieces.info["bpe_merges"] == 1000 and pieces.src_vocab.bpe is not None and pieces.tgt_vocab.bpe is not None
    # Training sentences read back word for word, unless a piece was too rare for min_freq=2.
    whole = [(ids, en) for (_, ids), (_, en) in zip(pieces.pairs["train"], pieces.tokens["train"]) if 0 not in ids]
    assert len(whole) > 0.95 * len(pieces.pairs["train"])
    assert all(pieces.tgt_vocab.decode_words(ids) == list(en) for ids, en in whole)

    # The point of subwords: far fewer <unk> in text the vocabulary was not built on.
    def unk_rate(corpus, side):
        ids = [i for pair in corpus.pairs["test_2016_flickr"] for i in pair[side]]
        return sum(i == 0 for i in ids) / len(ids)

    for side in (0, 1):
        assert unk_rate(pieces, side) < unk_rate(words, side) / 3, (side, unk_rate(pieces, side), unk_rate(words, side))
    corpus_file = tmp_path / "c.json.gz"
    pieces.save(corpus_file)
    assert Corpus.load(corpus_file).src_vocab == pieces.src_vocab  # the merges travel with the corpus


# ----------------------------------------------------------------------------- the tokenized cache is best effort


def fast_tokenizing(monkeypatch):
    """Whitespace tokenizing instead of spaCy: these tests are about the cache, not the tokens."""
    monkeypatch.setattr(Tokenizer, "tokenize_batch", lambda self, texts, batch_size=1000: [t.split() for t in texts])


def files_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def same_corpus(a: Corpus, b: Corpus) -> bool:
    return (
        a.pairs == b.pairs
        and a.text == b.text
        and a.tokens == b.tokens
        and a.src_vocab == b.src_vocab
        and a.tgt_vocab == b.tgt_vocab
    )


def cache_write_warnings(record) -> list[str]:
    return [str(w.message) for w in record if "could not write the tokenized cache" in str(w.message)]


@needs_data
@pytest.mark.parametrize(
    "error",
    [PermissionError(errno.EACCES, "Permission denied"), OSError(errno.ENOSPC, "No space left on device")],
    ids=["read-only", "full"],
)
def test_an_unwritable_tokenized_cache_costs_a_warning_not_the_data(monkeypatch, error):
    fast_tokenizing(monkeypatch)
    real_atomic_write = atomic.atomic_write
    attempts = []

    def failing_atomic_write(path, write):
        def half_then_fail(tmp: Path) -> None:
            tmp.write_bytes(b"half a file")  # a temporary file exists when the disk gives up
            raise error

        attempts.append(path)
        return real_atomic_write(path, half_then_fail)

    monkeypatch.setattr(files, "atomic_write", failing_atomic_write)
    monkeypatch.setenv(data.DATA_ENV, str(DATA_DIR))
    with pytest.warns(UserWarning) as record:
        corpus = data.prepare_corpus(progress=False)
    messages = cache_write_warnings(record)
    assert len(messages) == 1 and len(attempts) == 1, "one failed write, one warning: the other splits are not tried"
    assert str(data.cache_dir() / "tokenized") in messages[0] and data.CACHE_ENV in messages[0]
    assert error.strerror in messages[0]
    assert files_in(data.cache_dir()) == [], "no temporary file is left behind"
    monkeypatch.setattr(files, "atomic_write", real_atomic_write)
    assert same_corpus(corpus, data.prepare_corpus(progress=False, cache=False)), (
        "the data is the same as without a cache"
    )


@needs_data
def test_a_cache_path_that_cannot_be_a_folder_still_gives_the_corpus(monkeypatch, tmp_path):
    fast_tokenizing(monkeypatch)
    (tmp_path / "a_file").write_text("not a directory")
    monkeypatch.setenv(data.CACHE_ENV, str(tmp_path / "a_file" / "cache"))
    with pytest.warns(UserWarning) as record:
        corpus = data.prepare_corpus(DATA_DIR, splits=("val",), progress=False)
    messages = cache_write_warnings(record)
    assert len(messages) == 1 and str(tmp_path / "a_file" / "cache" / "tokenized") in messages[0]
    assert len(corpus.pairs["train"]) == SPLIT_SIZES["train"] and len(corpus.pairs["val"]) == SPLIT_SIZES["val"]


@needs_data
def test_a_read_only_cache_folder_still_gives_the_corpus(monkeypatch):
    fast_tokenizing(monkeypatch)
    cache = data.cache_dir()
    cache.mkdir(parents=True)
    cache.chmod(0o500)
    try:
        try:
            (cache / "probe").write_text("")
        except PermissionError:
            pass
        else:
            pytest.skip("chmod does not stop this user from writing (root); the test above simulates it")
        with pytest.warns(UserWarning, match="could not write the tokenized cache") as record:
            corpus = data.prepare_corpus(DATA_DIR, progress=False)
        assert len(cache_write_warnings(record)) == 1 and len(corpus.pairs["val"]) == SPLIT_SIZES["val"]
        assert files_in(cache) == []
    finally:
        cache.chmod(0o700)


@needs_data
@pytest.mark.parametrize("damage", ["truncated", "wrong size", "not a split"])
def test_a_damaged_tokenized_cache_is_rebuilt(monkeypatch, damage):
    fast_tokenizing(monkeypatch)
    first = data.prepare_corpus(DATA_DIR, splits=("val",), progress=False)
    (cached,) = data.cache_dir().glob("tokenized/val.*.json.gz")
    good = cached.read_bytes()
    if damage == "truncated":
        cached.write_bytes(good[: len(good) // 2])
    elif damage == "wrong size":
        saved = json.loads(gzip.decompress(good))
        cached.write_bytes(gzip.compress(json.dumps({**saved, "text": saved["text"][:-1]}).encode()))
    else:
        cached.write_bytes(gzip.compress(b"[1, 2, 3]"))
    with pytest.warns(UserWarning, match="ignoring the damaged tokenized cache"):
        again = data.prepare_corpus(DATA_DIR, splits=("val",), progress=False)
    assert same_corpus(again, first)
    assert cached.read_bytes() == good, "the cache file is written again, byte for byte"


def test_shared_definitions_are_the_package_ones():
    assert data.SPECIALS is specials.SPECIALS and data.DataError is errors.DataError
    vocab = Vocab.build([["a"]], min_freq=1)
    assert (vocab.unk_id, vocab.pad_id, vocab.bos_id, vocab.eos_id) == (
        specials.UNK_ID,
        specials.PAD_ID,
        specials.BOS_ID,
        specials.EOS_ID,
    )
    assert [vocab.itos[i] for i in (vocab.unk_id, vocab.pad_id, vocab.bos_id, vocab.eos_id)] == [
        specials.UNK,
        specials.PAD,
        specials.BOS,
        specials.EOS,
    ]


def test_saved_files_are_written_atomically(monkeypatch, tmp_path):
    vocab = Vocab.build([["a", "a"]], min_freq=1)
    vocab.save(tmp_path / "v.json")

    def interrupted(path, write):
        def half(tmp: Path) -> None:
            tmp.write_bytes(b'{"format": "transfor')
            raise KeyboardInterrupt

        return atomic.atomic_write(path, half)

    monkeypatch.setattr(files, "atomic_write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        Vocab.build([["b", "b"]], min_freq=1).save(tmp_path / "v.json")
    assert Vocab.load(tmp_path / "v.json") == vocab and files_in(tmp_path) == [tmp_path / "v.json"]


def test_a_data_folder_this_user_cannot_read_is_one_data_error_in_a_notebook_too(tmp_path, monkeypatch):
    # The command line refuses such a folder itself; prepare_corpus() in a notebook used to raise a bare PermissionError.
    # Staged (the tests run as root, who may read anything): the first read in the folder is refused.
    folder = tmp_path / "shared_multi30k"
    folder.mkdir()
    name = files.file_name("train", "de")
    (folder / name).write_bytes(b"")

    def refused(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(files, "sha256_file", refused)
    monkeypatch.setenv(files.CACHE_ENV, str(tmp_path / "cache"))  # no tokenized splits to skip the reading
    with pytest.raises(errors.DataError) as error:
        data.prepare_corpus(data_dir=folder, progress=False)
    message = str(error.value)
    assert message.startswith(
        f"the data directory {folder} (from data_dir= or $TRANSFORMER_LESSONS_DATA) cannot be read"
    )
    assert f"({folder / name})" in message and "unset TRANSFORMER_LESSONS_DATA to download them" in message
    assert "\n" not in message
