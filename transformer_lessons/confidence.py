"""How sure the translator is: each output word's probability, and a warning for sentences unlike its captions.

A model trained on image captions translates everything as if it were a caption: "Wo ist der
nächste Bahnhof?" comes out as "We can be the next train station?", printed like a perfect
translation. The model's own probabilities tell the two apart. Given its own output as the target
(forced decoding: the output it chose, not a reference, fed back one token at a time), it gives each
output token a probability (with beam search, the same log-probabilities the beam added up); their
mean log-probability, per token, is high for a caption it knows how to translate and low where it
was guessing.

Measured on the course's model (``scripts/measure_confidence.py``, recorded in
``results/confidence/``): the mean log-probability separates the 1,000 test captions from the 67
sentences of :mod:`transformer_lessons.data.not_captions` with an AUROC of 0.993. The threshold,
set on the validation captions alone (their 5th percentile, -0.601), flags 3.4% of the test captions
and 96% of the sentences that are not captions (every instruction, English sentence and sentence of
everyday talk; 14 of 15 questions, 13 of 14 news sentences, 9 of 10 on science and ideas). The
question that escapes is "Wo ist der nächste Bahnhof?" (-0.563).

It also tells something about quality, though not a verdict on one sentence: on the 1,000 test
captions the signal and each translation's chrF against the reference have a Spearman correlation of
0.56, and the signal finds the translations with chrF under 40 with an AUROC of 0.78 (recorded in
``results/confidence/``; :func:`spearman`). A fluent, sure caption can still be a wrong translation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import torch
import torch.nn.functional as F

from transformer_lessons.masks import causal_mask
from transformer_lessons.model import Transformer

if TYPE_CHECKING:
    from transformer_lessons.data import Vocab

#: Mean log-probability per output token below which a sentence is called unlike the training captions: the
#: 5th percentile of the course's model on the 1,014 validation captions (results/confidence/results.json).
UNUSUAL_BELOW = -0.601


@dataclass(frozen=True)
class Confidence:
    """One translation and how sure the model was of it.

    Attributes:
        translation: the English sentence, detokenized.
        tokens: the output tokens, ``<eos>`` last when the model ended the sentence.
        probs: each token's probability, as the model gave it (forced decoding of its own output).
        mean_log_prob: the mean of their logarithms: the sentence's signal.
        unusual: ``mean_log_prob`` is below the threshold: the sentence is unlike the training captions.
    """

    translation: str
    tokens: list[str]
    probs: list[float]
    mean_log_prob: float
    unusual: bool


@torch.no_grad()
def token_log_probs(model: Transformer, src_ids: Sequence[int], out_ids: Sequence[int], bos_id: int) -> torch.Tensor:
    """The log-probability the model gives each of ``out_ids`` after ``src_ids`` and the tokens before it.

    Shape:
        ``src_ids`` (S,), ``out_ids`` (T,) -> (T,); an empty output gives an empty tensor.
    """
    device = next(model.parameters()).device
    if not out_ids:
        return torch.zeros(0, device=device)
    src = torch.tensor([list(src_ids)], device=device)  # (1, S)
    ys = torch.tensor([[bos_id, *out_ids]], device=device)  # (1, 1 + T)
    tgt_in, tgt_out = ys[:, :-1], ys[:, 1:]  # (1, T) each
    model.eval()
    logits = model(src, tgt_in, None, causal_mask(tgt_in.size(1), device))  # (1, T, V)
    log_p = F.log_softmax(logits.float(), dim=-1)  # (1, T, V)
    return log_p.gather(-1, tgt_out.unsqueeze(-1))[0, :, 0]  # (T,)


def assess(
    model_or_checkpoint: Transformer | str | os.PathLike,
    sentences: Sequence[str],
    src_vocab: "Vocab | None" = None,
    tgt_vocab: "Vocab | None" = None,
    beam_size: int = 4,
    threshold: float = UNUSUAL_BELOW,
    device: str | torch.device | None = None,
) -> list[Confidence]:
    """Translate ``sentences`` and say how sure the model was of each (see :class:`Confidence`).

    The model is the one :func:`~transformer_lessons.translation.translate` takes: a checkpoint path,
    or a model with its vocabularies. An empty sentence gives an empty translation, never unusual.
    """
    from transformer_lessons.data import Tokenizer
    from transformer_lessons.translation import _resolve, decode_token_lists

    model, src_vocab, tgt_vocab, _ = _resolve(model_or_checkpoint, src_vocab, tgt_vocab, device)
    german, english = Tokenizer("de"), Tokenizer("en")
    words = [german.tokenize(s) if s.strip() else [] for s in sentences]
    outputs = decode_token_lists(model, words, src_vocab, tgt_vocab, beam_size=beam_size)
    limit = model.config.max_len - 1  # decode_token_lists cuts a source to this many units
    results = []
    for tokens, out in zip(words, outputs):
        src_ids = src_vocab.encode_words(tokens)[:limit] + [src_vocab.eos_id]
        log_p = token_log_probs(model, src_ids, out, tgt_vocab.bos_id).cpu()
        mean = float(log_p.mean()) if len(out) else 0.0
        results.append(
            Confidence(
                translation=english.detokenize(tgt_vocab.decode_words(out)),
                tokens=[tgt_vocab.itos[i] for i in out],
                probs=log_p.exp().tolist(),
                mean_log_prob=mean,
                unusual=bool(out) and mean < threshold,
            )
        )
    return results


def auroc(higher: Sequence[float], lower: Sequence[float]) -> float:
    """How often a score of ``higher`` beats one of ``lower`` (ties count half): 1 separates them, 0.5 is chance.

    The area under the ROC curve, as the Mann-Whitney statistic over every pair.
    """
    if not higher or not lower:
        raise ValueError("auroc needs scores in both groups")
    a = torch.tensor(list(higher), dtype=torch.float64)[:, None]  # (N, 1)
    b = torch.tensor(list(lower), dtype=torch.float64)[None, :]  # (1, M)
    return float(((a > b).double() + 0.5 * (a == b).double()).mean())


def _ranks(values: Sequence[float]) -> torch.Tensor:
    """Each value's rank, 1 for the smallest; tied values share the mean of their ranks."""
    x = torch.tensor(list(values), dtype=torch.float64)  # (N,)
    below = (x[None, :] < x[:, None]).sum(1)  # (N,) how many are smaller
    equal = (x[None, :] == x[:, None]).sum(1)  # (N,) how many are equal, itself included
    return below.double() + (equal.double() + 1) / 2


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation: the Pearson correlation of the ranks (ties share a mean rank).

    1: ``y`` rises whenever ``x`` does; 0: no monotone relation; -1: it falls.
    """
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"spearman needs two lists of the same length, at least 2; got {len(x)} and {len(y)}")
    rx, ry = _ranks(x), _ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    return float((rx * ry).sum() / (rx.norm() * ry.norm()))


__all__ = ["UNUSUAL_BELOW", "Confidence", "assess", "auroc", "spearman", "token_log_probs"]
