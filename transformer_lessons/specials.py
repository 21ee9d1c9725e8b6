"""The special tokens and their ids: defined here once, used by every vocabulary, batch and decoder.

Every :class:`~transformer_lessons.data.Vocab` starts with these four tokens in
this order, so their ids are the same in every vocabulary the course builds
(source, target, subword or word), and in the toy tasks too:

====  =========  ==============================================================
 id   token      meaning
====  =========  ==============================================================
 0    ``<unk>``  a word the vocabulary does not hold
 1    ``<pad>``  filler that makes rows of a batch equally long; never attended to
 2    ``<bos>``  "beginning of sentence": the decoder's first input
 3    ``<eos>``  "end of sentence": the model writes it to stop
====  =========  ==============================================================
"""

from __future__ import annotations

SPECIALS: tuple[str, str, str, str] = ("<unk>", "<pad>", "<bos>", "<eos>")
UNK_ID, PAD_ID, BOS_ID, EOS_ID = range(len(SPECIALS))
UNK, PAD, BOS, EOS = SPECIALS

__all__ = ["BOS", "BOS_ID", "EOS", "EOS_ID", "PAD", "PAD_ID", "SPECIALS", "UNK", "UNK_ID"]
