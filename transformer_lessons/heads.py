"""Which attention heads does the translator need? Switch heads off and measure what the translation loses.

Each attention layer has ``H`` heads whose outputs are concatenated and mixed by ``W^O``
(paper §3.2.2): ``MultiHead(Q, K, V) = Concat(head_1, …, head_h) W^O``. Switching head ``i``
off replaces ``head_i`` by zeros before ``W^O``: its slice of ``W^O``'s input then adds
nothing, as if that slice of ``W^O`` were zero (the same numbers up to float rounding: a test checks). No
weight changes; :class:`~transformer_lessons.attention.MultiHeadAttention`'s ``head_mask``
does it, and :func:`heads_off` sets the masks for a block of code and puts them back.

The course's model has 3 encoder and 3 decoder layers with 8 heads in each attention:
24 heads of encoder self-attention (``"encoder"``), 24 of decoder masked self-attention
(``"decoder_self"``) and 24 of cross-attention (``"cross"``), the names
:meth:`~transformer_lessons.model.Transformer.attention_weights` uses. A head is
``(kind, layer, head)``, e.g. ``("cross", 2, 5)``.

Two measurements, in the spirit of Michel et al. 2019 ("Are Sixteen Heads Really Better
than One?"), who switched heads off at test time in a trained translation Transformer:

* :func:`head_importance`: BLEU on a fixed sample of sentences with every head on, then
  with each head off on its own; a head's importance is the BLEU it costs. Michel et al.
  found that most single heads can go with little loss, and a few cannot.
* :func:`prune_by_importance`: the heads switched off together, the least important first,
  and BLEU measured against the number off. Michel et al. found many heads can go before
  BLEU falls, and cross-attention (their encoder-decoder attention) to be the most
  sensitive to losing many. Voita et al. 2019 ("Analyzing Multi-Head Self-Attention:
  Specialized Heads Do the Heavy Lifting, the Rest Can Be Pruned") found roles in the
  heads that survive: attending to neighbouring positions, to syntactic relations, to rare words.

Measured on the course's model (``scripts/measure_heads.py``, recorded in ``results/heads/``;
the first 100 sentences of test_2016_flickr, greedy, 41.6 BLEU with every head on): no head is
indispensable. The costliest sit in the last layer: cross-attention head 1 costs 2.0 BLEU, the
encoder's head 2 1.8; 57 of the 72 cost less than 0.5, and 31 raise BLEU a little when off.
sacreBLEU's paired bootstrap puts 4 of the 72 drops below p = 0.05, about what chance alone gives
in 72 tests (3.6); only cross-attention head 1 of the last layer stands out (p = 0.004). Pruned in
importance order, BLEU first rises (43.1 with 8 off: heads whose loss helped on these sentences),
then falls: 35.5 with 40 off, 24.1 with 48, 0.1 with all 72. On the next 100 sentences, which did
not choose the order, the same 8 heads cost 2.0 BLEU (46.6 to 44.6), and 40 off keep 38.5, where
five random orders keep 15.8 to 32.6: the order is worth much, its start is optimistic.

What the numbers do and do not say: a drop is this model's loss on these sentences with this
decoding, not a property of the head alone. A head that costs nothing alone may matter together
with another that does the same job (heads are redundant), which the pruning curve shows. And the
model never learnt to work without the head: here it is removed after training, while Voita et al.
train the model further with a penalty on the heads it uses, so that it learns to do without the
ones it drops.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator, Mapping, Sequence, Union

import torch

from transformer_lessons.attention import MultiHeadAttention
from transformer_lessons.model import Transformer
from transformer_lessons.translation import translate

if TYPE_CHECKING:
    from transformer_lessons.data import Vocab

KINDS = ("encoder", "decoder_self", "cross")  # as Transformer.attention_weights() names them
Head = tuple[str, int, int]  # (kind, layer, head)
# What heads_off takes: {(kind, layer): [head, ...]} or [(kind, layer, head), ...].
HeadsOff = Union[Mapping[tuple[str, int], Iterable[int]], Iterable[Head]]


def _check_model(model) -> None:
    if not isinstance(model, Transformer):
        raise TypeError(
            f"expected a Transformer, got {type(model).__name__} (for the course's model, pass course.model)"
        )


def attention_layers(model: Transformer, kind: str) -> list[MultiHeadAttention]:
    """The attention modules of one kind, one per layer: ``"encoder"``, ``"decoder_self"`` or ``"cross"``."""
    _check_model(model)
    if kind == "encoder":
        return [layer.self_attn for layer in model.encoder.layers]
    if kind == "decoder_self":
        return [layer.self_attn for layer in model.decoder.layers]
    if kind == "cross":
        return [layer.cross_attn for layer in model.decoder.layers]
    raise ValueError(f"the kind of attention must be one of {KINDS}, got {kind!r}")


def all_heads(model: Transformer) -> list[Head]:
    """Every head of the model as ``(kind, layer, head)``: encoder, then decoder self-attention, then cross-attention."""
    return [
        (kind, layer, head)
        for kind in KINDS
        for layer, module in enumerate(attention_layers(model, kind))
        for head in range(module.n_heads)
    ]


def _entries(heads: HeadsOff) -> Iterator[tuple[str, int, list]]:
    """``(kind, layer, [head, ...])`` for each entry of either form :func:`heads_off` takes."""
    if isinstance(heads, Mapping):
        for key, listed in heads.items():
            if not (isinstance(key, tuple) and len(key) == 2):
                raise ValueError(f"heads_off's keys are (kind, layer) pairs such as ('cross', 0); got {key!r}")
            if isinstance(listed, int):
                listed = [listed]
            elif not isinstance(listed, Iterable) or isinstance(listed, str):
                raise ValueError(
                    f"list the heads of {key!r} to switch off as whole numbers, e.g. [0, 3]; got {listed!r}"
                )
            yield key[0], key[1], list(listed)
        return
    if isinstance(heads, (str, bytes)) or not isinstance(heads, Iterable):
        raise ValueError(
            f"heads_off takes {{(kind, layer): [head, ...]}} or a list of (kind, layer, head); got {heads!r}"
        )
    for item in heads:
        if not (isinstance(item, tuple) and len(item) == 3):
            raise ValueError(f"list each head as (kind, layer, head), such as ('cross', 0, 3); got {item!r}")
        yield item[0], item[1], [item[2]]


def _is_index(x, size: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < size


def _masks_for(model: Transformer, heads: HeadsOff) -> dict[MultiHeadAttention, torch.Tensor]:
    """The head mask each named module gets: its present one (or all on) with the named heads off. Checks every name first."""
    masks: dict[MultiHeadAttention, torch.Tensor] = {}
    for kind, layer, listed in _entries(heads):
        modules = attention_layers(model, kind)
        if not _is_index(layer, len(modules)):
            raise ValueError(f"{kind!r} attention has layers 0 to {len(modules) - 1}; there is no layer {layer!r}")
        module = modules[layer]
        if module not in masks:
            present = module.head_mask
            device = module.w_o.weight.device
            masks[module] = (
                torch.ones(module.n_heads, dtype=torch.bool, device=device) if present is None else present.clone()
            )
        for head in listed:
            if not _is_index(head, module.n_heads):
                raise ValueError(f"({kind!r}, {layer}) has heads 0 to {module.n_heads - 1}; there is no head {head!r}")
            masks[module][head] = False  # 0.0 in a float mask
    return masks


@contextmanager
def heads_off(model: Transformer, heads: HeadsOff) -> Iterator[Transformer]:
    """Inside the block, the named attention heads of ``model`` are switched off; afterwards, as before.

    Args:
        model: a :class:`~transformer_lessons.model.Transformer`.
        heads: ``{(kind, layer): [head, ...]}``, e.g. ``{("encoder", 0): [1, 5], ("cross", 2): [0]}``,
            or a list of ``(kind, layer, head)``, e.g. ``[("cross", 2, 0)]``; ``kind`` is ``"encoder"``,
            ``"decoder_self"`` or ``"cross"``. Layers and heads count from 0.

    Each named head's output is multiplied by 0 before ``W^O`` (the module's ``head_mask``); a
    head already off inside an outer ``heads_off`` stays off. Every name is checked before any
    mask is set, so a bad one (``ValueError``, naming the layers or heads there are) changes
    nothing; on leaving the block, even by an exception, each module gets back the mask it had.

    Example::

        with heads_off(course.model, {("cross", 2): range(8)}):  # the last layer's cross-attention, all of it
            print(course.translate("Ein Mann fährt Fahrrad.", beam_size=1))
    """
    _check_model(model)
    masks = _masks_for(model, heads)
    before = {module: module.head_mask for module in masks}
    try:
        for module, mask in masks.items():
            module.head_mask = mask
        yield model
    finally:
        for module, mask in before.items():
            module.head_mask = mask


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """sacreBLEU's corpus BLEU with its defaults: the ``bleu`` of :func:`~transformer_lessons.translation.bleu_scores`."""
    from sacrebleu.metrics import BLEU

    return BLEU().corpus_score(list(hypotheses), [list(references)]).score


def bleu_with_heads_off(
    model: Transformer,
    sources: Sequence[str],
    references: Sequence[str],
    heads: HeadsOff,
    src_vocab: "Vocab",
    tgt_vocab: "Vocab",
    beam_size: int = 1,
    length_penalty: float = 0.6,
) -> float:
    """BLEU of ``model``'s translations of ``sources`` against ``references``, with ``heads`` off (:func:`heads_off`)."""
    sources, references = _sample(sources, references, None)
    return corpus_bleu(
        translations_with_heads_off(model, sources, heads, src_vocab, tgt_vocab, beam_size, length_penalty), references
    )


def translations_with_heads_off(
    model: Transformer,
    sources: Sequence[str],
    heads: HeadsOff,
    src_vocab: "Vocab",
    tgt_vocab: "Vocab",
    beam_size: int = 1,
    length_penalty: float = 0.6,
) -> list[str]:
    """``model``'s English for each of ``sources``, with ``heads`` off (:func:`heads_off`)."""
    with heads_off(model, heads):
        return translate(
            model,
            list(sources),
            beam_size=beam_size,
            src_vocab=src_vocab,
            tgt_vocab=tgt_vocab,
            length_penalty=length_penalty,
        )


def _sample(sources: Sequence[str], references: Sequence[str], n: int | None) -> tuple[list[str], list[str]]:
    """The first ``n`` sentence pairs (all for ``None``): a fixed sample, the same for every measurement."""
    if isinstance(sources, str) or isinstance(references, str):
        raise TypeError("sources and references are lists of sentences (a str is one sentence: put it in a list)")
    if len(sources) != len(references):
        raise ValueError(f"{len(sources)} sources but {len(references)} references: give one reference per source")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"n, the number of sentences to score, must be a whole number >= 1 or None (all), got {n!r}")
    sources, references = list(sources)[:n], list(references)[:n]
    if not sources:
        raise ValueError("no sentences to score: give at least one source and its reference")
    return sources, references


def _progress(items: list, desc: str, show: bool):
    """``items`` with a progress bar (one line that updates: sparing in a notebook and a log), or as they are."""
    if not show:
        return items
    try:
        from tqdm.auto import tqdm

        return tqdm(items, desc=desc, leave=False)
    except ImportError:  # a progress bar is a nicety, never a requirement
        return items


def head_from_text(text: str) -> Head:
    """``"cross/2/5"`` -> ``("cross", 2, 5)``: a head as a JSON record writes it."""
    kind, layer, head = text.split("/")
    return kind, int(layer), int(head)


@dataclass(frozen=True)
class HeadImportance:
    """What :func:`head_importance` measured.

    Attributes:
        baseline: BLEU with every head on.
        bleu: ``{(kind, layer, head): BLEU with that head off}``, in the model's order.
        n_sentences, beam_size: the sample and the decoding (1 = greedy).
        seconds: how long the measurement took.
        translations: ``{head: its sentences' English}`` (``None``: every head on), when asked for
            (``keep_translations``): what a paired significance test needs; not in :meth:`to_dict`.
    """

    baseline: float
    bleu: dict[Head, float]
    n_sentences: int
    beam_size: int
    seconds: float
    translations: dict[Head | None, list[str]] | None = None

    @property
    def drop(self) -> dict[Head, float]:
        """``{head: BLEU lost with it off}``: ``baseline - bleu``; negative where BLEU rose."""
        return {head: self.baseline - bleu for head, bleu in self.bleu.items()}

    def ranked(self) -> list[Head]:
        """The heads, least important first (smallest drop; a head whose loss raised BLEU comes first); ties in the model's order."""
        drop = self.drop
        return sorted(self.bleu, key=lambda head: drop[head])  # sorted is stable: ties keep their order

    def to_dict(self) -> dict:
        """A JSON-ready dict (heads as ``"kind/layer/head"``); :meth:`from_dict` reads it back."""
        bleu = {"/".join(map(str, head)): value for head, value in self.bleu.items()}
        return {
            "baseline": self.baseline,
            "bleu": bleu,
            "n_sentences": self.n_sentences,
            "beam_size": self.beam_size,
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, record: Mapping) -> "HeadImportance":
        bleu = {head_from_text(key): float(value) for key, value in record["bleu"].items()}
        fields = ("n_sentences", "beam_size", "seconds")
        return cls(float(record["baseline"]), bleu, **{name: record[name] for name in fields})


def head_importance(
    model: Transformer,
    sources: Sequence[str],
    references: Sequence[str],
    src_vocab: "Vocab",
    tgt_vocab: "Vocab",
    n: int | None = 100,
    beam_size: int = 1,
    length_penalty: float = 0.6,
    heads: Iterable[Head] | None = None,
    progress: bool = True,
    keep_translations: bool = False,
) -> HeadImportance:
    """BLEU with every head on, then with each head off on its own: what each head is worth to the translation.

    Args:
        model: a trained :class:`~transformer_lessons.model.Transformer`; its weights are not changed.
        sources: German sentences; references: their English translations, one each.
        src_vocab, tgt_vocab: the model's vocabularies.
        n: score the first ``n`` pairs (``None``: all): the same fixed sample for every head.
        beam_size: 1 for greedy decoding (fast), more for beam search (:func:`~transformer_lessons.translation.translate`).
        length_penalty: GNMT ``α`` for beam search.
        heads: the heads to try (default every head, :func:`all_heads`).
        progress: show a progress bar over the heads.
        keep_translations: keep every translation in the result (``translations``).

    Returns:
        A :class:`HeadImportance`: ``baseline``, ``bleu`` per head, ``drop`` per head, ``ranked()``.
        BLEU is sacreBLEU's corpus BLEU on the detokenized output (:func:`corpus_bleu`).

    Cost: ``1 + heads`` translations of the sample: 73 for the course's 72 heads.
    """
    sources, references = _sample(sources, references, n)
    candidates = all_heads(model) if heads is None else list(heads)
    _masks_for(model, candidates)  # a head that does not exist is refused now, not after the baseline
    start = time.perf_counter()
    translations: dict[Head | None, list[str]] = {}
    for head in [None, *_progress(candidates, "one head off at a time", progress)]:
        off = [] if head is None else [head]
        translations[head] = translations_with_heads_off(
            model, sources, off, src_vocab, tgt_vocab, beam_size, length_penalty
        )
    bleu = {head: corpus_bleu(translations[head], references) for head in candidates}
    return HeadImportance(
        corpus_bleu(translations[None], references),
        bleu,
        len(sources),
        beam_size,
        time.perf_counter() - start,
        translations if keep_translations else None,
    )


@dataclass(frozen=True)
class PruningCurve:
    """What :func:`prune_by_importance` measured.

    Attributes:
        order: the heads in the order they are switched off (least important first).
        counts: numbers of heads off, ascending.
        bleu: BLEU with the first ``counts[i]`` heads of ``order`` off.
        n_sentences, beam_size, seconds: the sample, the decoding and how long the curve took
            (the importance it was ordered by not included).
    """

    order: list[Head]
    counts: list[int]
    bleu: list[float]
    n_sentences: int
    beam_size: int
    seconds: float

    def to_dict(self) -> dict:
        """A JSON-ready dict (heads as ``"kind/layer/head"``); :meth:`from_dict` reads it back."""
        order = ["/".join(map(str, head)) for head in self.order]
        return {"order": order, "counts": list(self.counts), "bleu": list(self.bleu)} | {
            name: getattr(self, name) for name in ("n_sentences", "beam_size", "seconds")
        }

    @classmethod
    def from_dict(cls, record: Mapping) -> "PruningCurve":
        order = [head_from_text(text) for text in record["order"]]
        fields = ("n_sentences", "beam_size", "seconds")
        return cls(order, list(record["counts"]), list(record["bleu"]), **{name: record[name] for name in fields})


def _checked_counts(counts: Iterable[int] | None, total: int) -> list[int]:
    if counts is None:
        return list(range(total + 1))
    counts = list(counts)
    if not counts or not all(_is_index(k, total + 1) for k in counts):
        raise ValueError(f"counts are numbers of heads to switch off, each from 0 to {total}; got {counts!r}")
    return sorted(set(counts))


def prune_by_importance(
    model: Transformer,
    sources: Sequence[str],
    references: Sequence[str],
    src_vocab: "Vocab",
    tgt_vocab: "Vocab",
    importance: HeadImportance | None = None,
    counts: Iterable[int] | None = None,
    n: int | None = 100,
    beam_size: int = 1,
    length_penalty: float = 0.6,
    progress: bool = True,
) -> PruningCurve:
    """Switch heads off together, the least important first, and measure BLEU against the number off.

    Args:
        model, sources, references, src_vocab, tgt_vocab, n, beam_size, length_penalty, progress:
            as :func:`head_importance`.
        importance: the order comes from its :meth:`HeadImportance.ranked` (computed first when ``None``:
            ``1 + heads`` more translations). The order is fixed once, from each head off on its own;
            measuring again after each head switched off would cost a pass over every remaining head per step.
        counts: the numbers of heads off to measure (default every number from 0 to all the heads
            ranked; e.g. ``range(0, 73, 8)`` costs a ninth of that).

    Returns:
        A :class:`PruningCurve`. ``counts`` 0 is every head on (the baseline, measured again).
    """
    sources, references = _sample(sources, references, n)
    if importance is None:
        importance = head_importance(
            model, sources, references, src_vocab, tgt_vocab, None, beam_size, length_penalty, progress=progress
        )
    order = importance.ranked()
    return prune_in_order(
        model, sources, references, src_vocab, tgt_vocab, order, counts, None, beam_size, length_penalty, progress
    )


def prune_in_order(
    model: Transformer,
    sources: Sequence[str],
    references: Sequence[str],
    src_vocab: "Vocab",
    tgt_vocab: "Vocab",
    order: Sequence[Head],
    counts: Iterable[int] | None = None,
    n: int | None = 100,
    beam_size: int = 1,
    length_penalty: float = 0.6,
    progress: bool = True,
) -> PruningCurve:
    """Switch off the first ``k`` heads of ``order`` together, for each ``k`` of ``counts``, and measure BLEU.

    :func:`prune_by_importance` calls it with the importance order; a random order
    (``random.Random(seed).sample(all_heads(model), 72)``) is the comparison that says what the
    importance order is worth. Arguments as :func:`prune_by_importance`.
    """
    sources, references = _sample(sources, references, n)
    order = list(order)
    if len(set(order)) != len(order):
        raise ValueError("the order names a head twice: give each head at most once")
    _masks_for(model, order)  # a head that does not exist is refused before any translation
    counts = _checked_counts(counts, len(order))
    start = time.perf_counter()
    bleu = [
        bleu_with_heads_off(model, sources, references, order[:k], src_vocab, tgt_vocab, beam_size, length_penalty)
        for k in _progress(counts, "pruning", progress)
    ]
    return PruningCurve(order, counts, bleu, len(sources), beam_size, time.perf_counter() - start)


__all__ = [
    "KINDS",
    "HeadImportance",
    "PruningCurve",
    "all_heads",
    "attention_layers",
    "bleu_with_heads_off",
    "corpus_bleu",
    "head_importance",
    "heads_off",
    "prune_by_importance",
    "prune_in_order",
    "translations_with_heads_off",
]
