"""translate reads no more than the model can: a 1 MB "word" is not split into subwords whole.

Every word is at least one piece, so a sentence is cut to ``max_len`` words, and each word to ``max_len`` of the
vocabulary's longest pieces, before subword splitting: the model then reads the same first ``max_len - 1`` pieces
as before (tested), the sentence is still noted as too long, and the splitting no longer grows with the input.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from transformer_lessons.bpe import BPE
from transformer_lessons.checkpoint import load_checkpoint
from transformer_lessons.notes import collect_notes
from transformer_lessons.translation import _bounded, translate

MODEL = Path(__file__).resolve().parents[1] / "results" / "laptop" / "model_fp16.pt"


@pytest.fixture(scope="module")
def laptop():
    model, src_vocab, tgt_vocab, _ = load_checkpoint(MODEL)
    return model, src_vocab, tgt_vocab


def test_a_huge_word_is_split_only_as_far_as_the_model_reads(laptop, monkeypatch):
    model, src_vocab, tgt_vocab = laptop
    seen = []
    split = BPE.split_word

    def recording(self, word):
        seen.append(len(word))
        return split(self, word)

    monkeypatch.setattr(BPE, "split_word", recording)
    huge = "Donaudampfschifffahrtsgesellschaft" * 30_000  # about a megabyte, no space
    with collect_notes() as notes:
        out = translate(model, huge, src_vocab=src_vocab, tgt_vocab=tgt_vocab, beam_size=1, max_new_tokens=5)
    assert isinstance(out, str)
    limit = model.config.max_len - 1
    longest = max(len(u.removesuffix("@@")) for u in src_vocab.itos)
    assert seen and max(seen) <= (limit + 1) * longest < len(huge) // 100
    assert any(f"more than {limit} tokens" in str(n) for n in notes)


@pytest.mark.parametrize(
    "words",
    [
        ("Ein Mann mit einem Hut und ein Hund laufen am Strand ." * 40).split(),  # 480 words
        ["Donaudampfschifffahrtsgesellschaftskapitän" * 200, "fährt", "."],  # one word of 8,400 letters
    ],
)
def test_the_model_reads_the_same_pieces_as_without_the_bound(laptop, words):
    model, src_vocab, _ = laptop
    limit = model.config.max_len - 1
    assert src_vocab.segment(_bounded(words, limit, src_vocab))[:limit] == src_vocab.segment(words)[:limit]
    assert len(src_vocab.segment(_bounded(words, limit, src_vocab))) > limit  # still found too long
