"""Error analysis: which test sentences the translator gets wrong, and where beam search helps.

A test score is one number (the course's model: BLEU 44.1 on test_2016_flickr). It hides a
spread: some captions come out word for word, others are a caption about something else.
Scoring each sentence on its own shows which, and lets us ask the questions a single number
cannot answer:

* :func:`score_sentences`: for each sentence of a fixed sample of a split (its first ``limit``
  sentences), the source, the reference, the beam and the greedy output, each output's sentence
  chrF and sentence BLEU, and the source length in words: an :class:`ErrorAnalysis`.
* :func:`bleu_by_length`: corpus BLEU per bucket of source length. Encoder-decoder translators
  get worse as sentences grow longer (Cho et al. 2014, "On the Properties of Neural Machine
  Translation"; Koehn & Knowles 2017, "Six Challenges for Neural Machine Translation"): does ours?
* :func:`greedy_vs_beam`: per sentence, beam chrF minus greedy chrF. The paper decodes with a beam
  of 4 and a length penalty α = 0.6 (Vaswani et al. 2017, §6.1); a beam finds outputs the model
  scores higher, which is not always a better translation (Koehn & Knowles 2017, "beam search").
* :func:`ranked` and :func:`worst_and_best`: the sentences from worst to best.

Why chrF for one sentence. BLEU is a corpus measure (Papineni et al. 2002): it multiplies the
n-gram precisions of the whole test set, so one sentence without a matching 4-gram does not sink
it. On a single sentence it would: sentence BLEU needs smoothing (sacreBLEU's ``exp``, method 3 of
Chen & Cherry 2014, with the effective n-gram order) and still jumps in big steps. chrF (Popović
2015, "chrF: character n-gram F-score") compares character n-grams, gives partial credit to a word
with the wrong ending, and is steadier on one sentence, so the ranking and the beam-against-greedy
comparison use it; sentence BLEU is reported beside it. Both are sacreBLEU's (Post 2018) with its
defaults, the settings :func:`transformer_lessons.translation.bleu_scores` uses: cased text,
detokenized, BLEU's ``13a`` tokenizer; chrF on character 6-grams with β = 2.

Everything runs through the translator's own steps (:mod:`transformer_lessons.translation`): the
split is read and tokenized as :func:`~transformer_lessons.translation.evaluate` reads it, decoded
by :func:`~transformer_lessons.translation.decode_token_lists`, and turned into English the same
way, so the corpus BLEU of the whole sample is the number ``evaluate(..., limit=limit)`` gives.

Measured on the course's model over all 1,000 test sentences (``scripts/measure_errors.py``, recorded in
``results/error_analysis/``): corpus BLEU 44.06 with the beam, 43.27 greedy. By source length it stays between
42.9 and 46.5 up to 19 words, then falls to 35.0 for the 48 sentences of 20 words or more. Beam search helps 182
sentences, hurts 156 and ties 662 (all with the same words), +0.40 chrF on average: its largest gains find the
reference's word where greedy chose another, its largest losses drop or change a detail.
"""

from __future__ import annotations

import bisect
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import sacrebleu
import torch
from sacrebleu.metrics import BLEU, CHRF

from transformer_lessons.config import MAX_OUTPUT_EXTRA, compute_mode
from transformer_lessons.data.files import SPLITS
from transformer_lessons.model import Transformer

# The translator's own steps, reused so that every score here is computed on exactly what evaluate() scores.
from transformer_lessons.translation import (
    _check_vocab_fits,
    _english,
    _resolve,
    _split_texts_and_tokens,
    decode_token_lists,
)

if TYPE_CHECKING:
    from transformer_lessons.data import Corpus, Vocab

QUICK_SAMPLE = 200  # the quick mode's sample, the first 200 sentences: 8 s on a 2-core CPU (all 1,000: 29 s)
DEFAULT_EDGES = (8, 11, 14, 17, 20)  # where a bucket starts (source words): 83, 314, 307, 172, 76, 48 test sentences
SCORES = ("chrf", "bleu")  # what the sentences can be ranked by: the beam output's sentence chrF or BLEU


@dataclass(frozen=True)
class SentenceScore:
    """One sentence of the sample: what went in, what came out, how close it came.

    Attributes:
        index: its line in the split (0 is the first sentence).
        source, reference: the German sentence and its English reference, as in the data files.
        beam, greedy: the model's outputs, cased and detokenized (what BLEU scores).
        beam_chrf, greedy_chrf: sentence chrF of each output against the reference (0 to 100).
        beam_bleu, greedy_bleu: sentence BLEU of each (0 to 100; smoothed, effective order).
        source_words: the source's length in words (spaCy tokens, punctuation included).
    """

    index: int
    source: str
    reference: str
    beam: str
    greedy: str
    beam_chrf: float
    greedy_chrf: float
    beam_bleu: float
    greedy_bleu: float
    source_words: int

    @property
    def chrf_gain(self) -> float:
        """Beam chrF minus greedy chrF: above 0 where beam search helped, below where it hurt."""
        return self.beam_chrf - self.greedy_chrf

    def score(self, by: str = "chrf") -> float:
        """The beam output's sentence ``"chrf"`` or ``"bleu"``."""
        return self.beam_chrf if _check_by(by) == "chrf" else self.beam_bleu


@dataclass(frozen=True)
class ErrorAnalysis:
    """What :func:`score_sentences` returns: each sentence's scores, and the sample's corpus BLEU.

    Attributes:
        split: the Multi30k split scored.
        sentences: one :class:`SentenceScore` per sentence, in the split's order.
        beam_size, length_penalty: the beam search compared with greedy decoding.
        bleu, greedy_bleu: corpus sacreBLEU of the beam and greedy outputs over the whole sample.
        signatures: sacreBLEU's signature of each score (``"corpus_bleu"``, ``"sentence_bleu"``, ``"sentence_chrf"``).
        seconds: the time it took: reading, decoding twice, scoring.
    """

    split: str
    sentences: tuple[SentenceScore, ...]
    beam_size: int
    length_penalty: float
    bleu: float
    greedy_bleu: float
    signatures: dict
    seconds: float

    def describe(self) -> str:
        """One line: the sample, both corpus BLEU scores and the time taken."""
        return (
            f"{self.split}, first {len(self.sentences)} sentences: beam {self.beam_size} (α = {self.length_penalty}) "
            f"BLEU {self.bleu:.2f}, greedy BLEU {self.greedy_bleu:.2f}; {self.seconds:.1f} s"
        )


def sentence_scores(hypothesis: str, reference: str) -> tuple[float, float]:
    """``(chrF, BLEU)`` of one output against its reference: sacreBLEU's ``sentence_chrf`` and ``sentence_bleu``."""
    chrf = sacrebleu.sentence_chrf(hypothesis, [reference]).score
    bleu = sacrebleu.sentence_bleu(hypothesis, [reference]).score
    return chrf, bleu


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """sacreBLEU's corpus BLEU with its defaults (cased, ``13a``): the ``bleu`` of :func:`~transformer_lessons.translation.bleu_scores`."""
    return BLEU().corpus_score(list(hypotheses), [list(references)]).score


def score_sentences(
    model_or_checkpoint: Transformer | str | os.PathLike,
    split: str = "test_2016_flickr",
    limit: int | None = QUICK_SAMPLE,
    *,
    data_dir: str | os.PathLike | None = None,
    corpus: "Corpus | None" = None,
    src_vocab: "Vocab | None" = None,
    tgt_vocab: "Vocab | None" = None,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    device: str | torch.device | None = None,
    batch_size: int = 128,
    progress: bool = False,
    max_output_extra: int = MAX_OUTPUT_EXTRA,
) -> ErrorAnalysis:
    """Translate the first ``limit`` sentences of a split twice (beam search, greedy) and score each sentence.

    Args:
        model_or_checkpoint: a checkpoint path, or a model with ``src_vocab`` and ``tgt_vocab``
            (the course's: ``course = load_course_model()``, then ``course.model, src_vocab=course.src_vocab, ...``).
        split: a Multi30k split (:data:`transformer_lessons.data.SPLITS`).
        limit: the sample: the split's first ``limit`` sentences (default :data:`QUICK_SAMPLE`, 200);
            ``None`` scores them all (test_2016_flickr has 1,000).
        data_dir, corpus: where the split comes from, as for :func:`~transformer_lessons.translation.evaluate`.
        beam_size, length_penalty: the beam search (paper §6.1: 4 and 0.6); greedy is always decoded beside it.
        device, batch_size, progress, max_output_extra: as for ``evaluate``.

    Returns:
        An :class:`ErrorAnalysis`: per sentence a :class:`SentenceScore`, and the corpus BLEU of both outputs.

    Raises:
        ValueError: an unknown split, a ``limit`` below 1, a beam below 2, or a split with no sentences;
            checked before the model is loaded where it can be.
    """
    _check_request(split, limit, beam_size)
    start = time.perf_counter()
    model, src_vocab, tgt_vocab, _ = _resolve(model_or_checkpoint, src_vocab, tgt_vocab, device)
    _check_vocab_fits(model, src_vocab, tgt_vocab)
    texts, tokens = _split_texts_and_tokens(split, corpus, data_dir, progress)
    texts, tokens = texts[:limit], tokens[:limit]  # [:None] keeps them all
    if not texts:
        raise ValueError(f"the split {split!r} holds no sentences to score: pass a corpus or data_dir that has them")
    sources = [src for src, _ in tokens]  # German tokens, what the model reads
    settings = {"batch_size": batch_size, "progress": progress, "max_output_extra": max_output_extra}
    outputs = {
        name: decode_token_lists(model, sources, src_vocab, tgt_vocab, k, length_penalty, **settings)
        for name, k in (("beam", beam_size), ("greedy", 1))
    }
    beam, _ = _english(outputs["beam"], tgt_vocab)
    greedy, _ = _english(outputs["greedy"], tgt_vocab)
    references = [en for _, en in texts]
    sentences = tuple(
        _score_one(i, de, en, b, g, len(src))
        for i, ((de, en), src, b, g) in enumerate(zip(texts, sources, beam, greedy))
    )
    return ErrorAnalysis(
        split=split,
        sentences=sentences,
        beam_size=beam_size,
        length_penalty=length_penalty,
        bleu=corpus_bleu(beam, references),
        greedy_bleu=corpus_bleu(greedy, references),
        signatures=_signatures(beam[0], references[0]),
        seconds=time.perf_counter() - start,
    )


def sample_for(mode: str | None = None) -> int | None:
    """The sample a notebook scores: the first :data:`QUICK_SAMPLE` sentences in the quick mode, the whole split in
    the full mode (:func:`~transformer_lessons.config.compute_mode`, the one knob): ``score_sentences(..., limit=sample_for())``."""
    return QUICK_SAMPLE if compute_mode(mode) == "quick" else None


def _signatures(hypothesis: str, reference: str) -> dict:
    """sacreBLEU's signature of each score (a metric states its settings once it has scored something)."""
    corpus, sentence_bleu, chrf = BLEU(), BLEU(effective_order=True), CHRF()  # effective order: what sentence_bleu uses
    corpus.corpus_score([hypothesis], [[reference]])
    sentence_bleu.sentence_score(hypothesis, [reference])
    chrf.sentence_score(hypothesis, [reference])
    return {
        "corpus_bleu": str(corpus.get_signature()),
        "sentence_bleu": str(sentence_bleu.get_signature()),
        "sentence_chrf": str(chrf.get_signature()),
    }


def _score_one(index: int, source: str, reference: str, beam: str, greedy: str, words: int) -> SentenceScore:
    beam_chrf, beam_bleu = sentence_scores(beam, reference)
    greedy_chrf, greedy_bleu = sentence_scores(greedy, reference)
    return SentenceScore(index, source, reference, beam, greedy, beam_chrf, greedy_chrf, beam_bleu, greedy_bleu, words)


def _check_request(split: str, limit: int | None, beam_size: int) -> None:
    """Refuse an unknown split, an empty sample or a beam that is greedy, before any model or data work."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(
            f"limit must be a whole number of sentences >= 1 (e.g. {QUICK_SAMPLE}), or None for the whole split; got {limit!r}"
        )
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 2:
        raise ValueError(
            f"beam_size must be a whole number >= 2 (greedy decoding is scored beside it anyway); got {beam_size!r}"
        )


def _check_by(by: str) -> str:
    if by not in SCORES:
        raise ValueError(
            f"by must be one of {', '.join(map(repr, SCORES))} (the beam output's sentence score); got {by!r}"
        )
    return by


def _sentences(analysis: ErrorAnalysis | Sequence[SentenceScore]) -> tuple[SentenceScore, ...]:
    """The scored sentences of an :class:`ErrorAnalysis` (or a list of them); refuse an empty one."""
    sentences = tuple(analysis.sentences if isinstance(analysis, ErrorAnalysis) else analysis)
    if not sentences:
        raise ValueError("no sentences to analyse: score some first with score_sentences(model, split, limit=...)")
    if not all(isinstance(s, SentenceScore) for s in sentences):
        raise TypeError("expected what score_sentences returns (an ErrorAnalysis), or a list of its SentenceScore")
    return sentences


# --------------------------------------------------------------------------------------
# BLEU by source length
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LengthBucket:
    """The sentences whose source length falls in ``low..high`` words, and their corpus BLEU.

    Attributes:
        label: e.g. ``"8-10"``, ``"up to 7"``, ``"20+"`` (words).
        low, high: the shortest and longest source length that belongs here; ``high`` is ``None`` for the last.
        indices: the positions of its sentences in the analysis (``analysis.sentences[i]``).
        bleu, greedy_bleu: corpus sacreBLEU of their beam and greedy outputs; ``None`` for an empty bucket.
        mean_chrf: the mean sentence chrF of their beam outputs; ``None`` for an empty bucket.
    """

    label: str
    low: int
    high: int | None
    indices: tuple[int, ...]
    bleu: float | None
    greedy_bleu: float | None
    mean_chrf: float | None

    @property
    def n(self) -> int:
        """How many sentences it holds."""
        return len(self.indices)


def bleu_by_length(
    analysis: ErrorAnalysis | Sequence[SentenceScore], edges: Sequence[int] = DEFAULT_EDGES
) -> list[LengthBucket]:
    """Corpus BLEU per bucket of source length: does the translator get worse as sentences grow?

    Each bucket's BLEU is a corpus BLEU of its own sentences (not a mean of sentence scores), so
    it is comparable with the test score. Its sentence count says how much to trust it: a bucket
    of 20 sentences moves by points when one sentence changes.

    Args:
        analysis: what :func:`score_sentences` returned.
        edges: the source lengths (words) where a new bucket starts, increasing: ``(8, 11)`` makes
            "up to 7", "8-10" and "11+". Every sentence falls in exactly one bucket.

    Returns:
        One :class:`LengthBucket` per bucket, shortest first (``len(edges) + 1`` of them; empty ones included).
    """
    sentences = _sentences(analysis)
    edges = _check_edges(edges)
    members: list[list[int]] = [[] for _ in range(len(edges) + 1)]
    for i, s in enumerate(sentences):
        members[bisect.bisect_right(edges, s.source_words)].append(i)  # below edges[0]: bucket 0
    buckets = []
    for b, indices in enumerate(members):
        low = edges[b - 1] if b else 0
        high = edges[b] - 1 if b < len(edges) else None
        label = (
            f"up to {high}" if b == 0 else f"{low}+" if high is None else f"{low}-{high}" if high > low else f"{low}"
        )
        chosen = [sentences[i] for i in indices]
        references = [s.reference for s in chosen]
        buckets.append(
            LengthBucket(
                label=label,
                low=low,
                high=high,
                indices=tuple(indices),
                bleu=corpus_bleu([s.beam for s in chosen], references) if chosen else None,
                greedy_bleu=corpus_bleu([s.greedy for s in chosen], references) if chosen else None,
                mean_chrf=sum(s.beam_chrf for s in chosen) / len(chosen) if chosen else None,
            )
        )
    return buckets


def _check_edges(edges: Sequence[int]) -> tuple[int, ...]:
    edges = tuple(edges)
    ok = edges and all(isinstance(e, int) and not isinstance(e, bool) and e >= 2 for e in edges)
    if not ok or any(a >= b for a, b in zip(edges, edges[1:])):
        raise ValueError(
            f"edges must be increasing whole numbers of words >= 2, where each bucket starts (e.g. {DEFAULT_EDGES}); got {edges!r}"
        )
    return edges


# --------------------------------------------------------------------------------------
# Greedy against beam
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BeamVsGreedy:
    """Where beam search helped and where it hurt, sentence by sentence (chrF).

    Attributes:
        gains: beam chrF minus greedy chrF, per sentence, in the analysis' order.
        helps, hurts, ties: how many sentences beam search made better, worse, no different
            (``helps + hurts + ties`` is the number of sentences).
        same_output: of the ties, how many got the very same words from both.
        mean_gain: the mean of ``gains``.
        helped, hurt: examples: the sentences it helped most (largest gain first) and hurt most (largest loss first).
        tolerance: the largest difference that counted as a tie.
    """

    gains: tuple[float, ...]
    helps: int
    hurts: int
    ties: int
    same_output: int
    mean_gain: float
    helped: tuple[SentenceScore, ...]
    hurt: tuple[SentenceScore, ...]
    tolerance: float = 0.0


def greedy_vs_beam(
    analysis: ErrorAnalysis | Sequence[SentenceScore], examples: int = 3, tolerance: float = 0.0
) -> BeamVsGreedy:
    """Compare beam search with greedy decoding sentence by sentence: where does the beam help, where does it hurt?

    Beam search keeps the ``k`` likeliest prefixes instead of one, so it finds outputs the model
    scores higher (paper §6.1). On most captions it writes the same words as greedy decoding; where
    it differs, a likelier output is often better and sometimes worse, shorter, or a safer caption.

    Args:
        analysis: what :func:`score_sentences` returned.
        examples: how many sentences to keep in ``helped`` and in ``hurt``.
        tolerance: a chrF difference at most this large counts as a tie (0: only equal scores tie).

    Returns:
        A :class:`BeamVsGreedy`.
    """
    sentences = _sentences(analysis)
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 0:
        raise ValueError(f"examples must be a whole number >= 0 (sentences to show of each kind); got {examples!r}")
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be a chrF difference >= 0; got {tolerance!r}")
    gains = tuple(s.chrf_gain for s in sentences)
    helped = sorted((s for s in sentences if s.chrf_gain > tolerance), key=lambda s: (-s.chrf_gain, s.index))
    hurt = sorted((s for s in sentences if s.chrf_gain < -tolerance), key=lambda s: (s.chrf_gain, s.index))
    return BeamVsGreedy(
        gains=gains,
        helps=len(helped),
        hurts=len(hurt),
        ties=len(sentences) - len(helped) - len(hurt),
        same_output=sum(s.beam == s.greedy for s in sentences),
        mean_gain=sum(gains) / len(gains),
        helped=tuple(helped[:examples]),
        hurt=tuple(hurt[:examples]),
        tolerance=tolerance,
    )


# --------------------------------------------------------------------------------------
# Worst and best
# --------------------------------------------------------------------------------------


def ranked(analysis: ErrorAnalysis | Sequence[SentenceScore], by: str = "chrf") -> list[SentenceScore]:
    """Every sentence from worst to best by its beam output's sentence ``"chrf"`` (or ``"bleu"``); ties by position."""
    _check_by(by)
    return sorted(_sentences(analysis), key=lambda s: (s.score(by), s.index))


def worst_and_best(
    analysis: ErrorAnalysis | Sequence[SentenceScore], n: int = 5, by: str = "chrf"
) -> tuple[list[SentenceScore], list[SentenceScore]]:
    """The ``n`` worst sentences (worst first) and the ``n`` best (best first), by the beam output's ``by`` score."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a whole number >= 1 (sentences of each kind); got {n!r}")
    order = ranked(analysis, by)
    best = sorted(order, key=lambda s: (-s.score(by), s.index))
    return order[:n], best[:n]


__all__ = [
    "DEFAULT_EDGES",
    "QUICK_SAMPLE",
    "SCORES",
    "BeamVsGreedy",
    "ErrorAnalysis",
    "LengthBucket",
    "SentenceScore",
    "bleu_by_length",
    "corpus_bleu",
    "greedy_vs_beam",
    "ranked",
    "sample_for",
    "score_sentences",
    "sentence_scores",
    "worst_and_best",
]
