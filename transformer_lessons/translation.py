"""Sentences in, sentences out: translate German text, and score a Multi30k split with sacreBLEU.

The decoders (:mod:`transformer_lessons.decode`, :mod:`transformer_lessons.beam`) turn
tensors of ids into tensors of ids. This module does the rest around them: it
tokenizes the sentences with spaCy (or the subword units the model was trained on),
looks the tokens up in the vocabularies, batches sentences of similar length, caps
the output length (paper §6.1: source length + 50), turns the ids back into words
and detokenizes them, and scores a split the two ways BLEU is reported
(:func:`bleu_scores`). :func:`translate` and :func:`evaluate` are what notebooks 10
to 12, the command line and the translator widget call.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Sequence

import torch

from transformer_lessons.beam import beam_search
from transformer_lessons.checkpoint import load_checkpoint
from transformer_lessons.config import MAX_OUTPUT_EXTRA
from transformer_lessons.decode import check_temperature, check_top_k, greedy_decode, sample_decode
from transformer_lessons.masks import causal_mask, padding_mask
from transformer_lessons.model import Transformer
from transformer_lessons.notes import note

if TYPE_CHECKING:
    from transformer_lessons.data import Corpus, Vocab


def _resolve(model_or_checkpoint, src_vocab, tgt_vocab, device) -> tuple[Transformer, "Vocab", "Vocab", torch.device]:
    """``(model, src_vocab, tgt_vocab, device)`` from a checkpoint path or a model plus vocabularies."""
    if isinstance(model_or_checkpoint, (str, os.PathLike)):
        model, ckpt_src, ckpt_tgt, _ = load_checkpoint(model_or_checkpoint, device)
        src_vocab = ckpt_src if src_vocab is None else src_vocab
        tgt_vocab = ckpt_tgt if tgt_vocab is None else tgt_vocab
        return model, src_vocab, tgt_vocab, next(model.parameters()).device
    if isinstance(model_or_checkpoint, Transformer):
        if src_vocab is None or tgt_vocab is None:
            raise TypeError(
                "with a model, pass src_vocab= and tgt_vocab= too (or pass a checkpoint path instead of the model)"
            )
        model = model_or_checkpoint
        if device is not None:
            model = model.to(device)
        return model, src_vocab, tgt_vocab, next(model.parameters()).device
    raise TypeError(f"expected a checkpoint path or a Transformer, got {type(model_or_checkpoint).__name__}")


def _check_vocab_fits(model: Transformer, src_vocab: "Vocab", tgt_vocab: "Vocab") -> None:
    if len(src_vocab) != model.src_vocab_size or len(tgt_vocab) != model.tgt_vocab_size:
        raise ValueError(
            f"the vocabularies ({len(src_vocab)} source, {len(tgt_vocab)} target tokens) do not fit the model "
            f"({model.src_vocab_size}, {model.tgt_vocab_size}): use the vocabularies the model was trained with"
        )


@torch.no_grad()
def decode_token_lists(
    model: Transformer,
    src_tokens: Sequence[Sequence[str]],
    src_vocab: "Vocab",
    tgt_vocab: "Vocab",
    beam_size: int = 1,
    length_penalty: float = 0.6,
    max_new_tokens: int | None = None,
    batch_size: int = 128,
    progress: bool = False,
    max_output_extra: int = MAX_OUTPUT_EXTRA,
    temperature: float | None = None,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> list[list[int]]:
    """Decode tokenized source sentences; returns each output's ids (``<eos>`` included if produced).

    Sentences are sorted by length and decoded ``batch_size`` at a time (less
    padding), then put back in the input order. A source longer than the model
    accepts is cut to ``model.config.max_len - 1`` tokens (plus ``<eos>``);
    :func:`translate` warns about it. An empty source gives an empty output.
    ``max_new_tokens`` caps the output (default: source length + ``max_output_extra``, paper
    §6.1 uses 50; never more than the model's ``max_len``). With a ``temperature``,
    each output is drawn by :func:`sample_decode` (with ``top_k`` and ``generator``) instead.
    ``use_cache`` (default) decodes greedy and beam search with a key/value cache: the same
    outputs, several times faster; ``False`` reruns the decoder on the whole prefix at every step.
    """
    model.eval()
    device = next(model.parameters()).device
    limit = model.config.max_len - 1
    ids = [src_vocab.encode_words(tokens)[:limit] for tokens in src_tokens]
    outputs: list[list[int]] = [[] for _ in ids]
    order = sorted((i for i in range(len(ids)) if ids[i]), key=lambda i: len(ids[i]))
    chunks = [order[a : a + batch_size] for a in range(0, len(order), batch_size)]
    if progress:
        how = f"temperature {temperature}" if temperature is not None else f"beam {beam_size}"
        chunks = _with_progress_bar(chunks, how)
    for chunk in chunks:
        src = _source_batch([ids[i] for i in chunk], src_vocab).to(device)  # (B, S)
        src_mask = padding_mask(src, src_vocab.pad_id)  # (B, 1, 1, S)
        chunk_max_new_tokens = min(max_new_tokens or src.size(1) + max_output_extra, model.config.max_len)
        ys = _decode_batch(
            model,
            src,
            src_mask,
            chunk_max_new_tokens,
            tgt_vocab,
            beam_size=beam_size,
            length_penalty=length_penalty,
            temperature=temperature,
            top_k=top_k,
            generator=generator,
            use_cache=use_cache,
        )  # (B, 1 + L)
        for row, seq in enumerate(ys[:, 1:].tolist()):
            outputs[chunk[row]] = _up_to_eos(seq, tgt_vocab.eos_id)
    return outputs


def _with_progress_bar(chunks: list, how: str):
    """``chunks`` wrapped in a progress bar (``decode (beam 4)``), or as they are without tqdm."""
    try:
        from tqdm.auto import tqdm

        return tqdm(chunks, desc=f"decode ({how})", leave=False)
    except ImportError:  # progress bars are a nicety, never a requirement (tqdm, or a notebook's ipywidgets)
        return chunks


def _source_batch(ids: list[list[int]], src_vocab: "Vocab") -> torch.Tensor:
    """The sources as one padded batch ``(B, S)``: each one's ids then ``<eos>``, as in training."""
    width = max(len(i) for i in ids) + 1
    src = torch.full((len(ids), width), src_vocab.pad_id, dtype=torch.long)  # (B, S)
    for row, sentence in enumerate(ids):
        src[row, : len(sentence) + 1] = torch.tensor(sentence + [src_vocab.eos_id])
    return src


def _decode_batch(
    model: Transformer,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    max_new_tokens: int,
    tgt_vocab: "Vocab",
    *,
    beam_size: int,
    length_penalty: float,
    temperature: float | None,
    top_k: int | None,
    generator: torch.Generator | None,
    use_cache: bool,
) -> torch.Tensor:
    """One batch decoded ``(B, 1 + L)``: sampled with a ``temperature``, else greedy (``beam_size=1``) or beam search."""
    pad, bos, eos = tgt_vocab.pad_id, tgt_vocab.bos_id, tgt_vocab.eos_id
    if temperature is not None:
        return sample_decode(model, src, src_mask, max_new_tokens, bos, eos, temperature, top_k, generator, pad)
    if beam_size == 1:
        return greedy_decode(model, src, src_mask, max_new_tokens, bos, eos, pad, use_cache=use_cache)
    return beam_search(
        model, src, src_mask, max_new_tokens, bos, eos, beam_size, length_penalty, pad, use_cache=use_cache
    )


def _up_to_eos(seq: list[int], eos: int) -> list[int]:
    """The generated ids up to the first ``<eos>``, included; the padding after it dropped."""
    return seq[: seq.index(eos) + 1] if eos in seq else seq


def _check_sampling(temperature: float | None, top_k: int | None, seed: int | None, beam_size: int) -> None:
    """Refuse sampling options that would be ignored or are out of range, before any model or spaCy work."""
    if temperature is None:
        if top_k is not None or seed is not None:
            raise ValueError("top_k= and seed= choose how to sample: give a temperature= too (e.g. temperature=1.0)")
        return
    check_temperature(temperature)
    check_top_k(top_k)
    if beam_size != 1:
        raise ValueError(
            f"temperature= samples each token, beam_size={beam_size} searches: choose one (beam_size=1 to sample)"
        )
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"seed must be a whole number >= 0 or None, got {seed!r}")


def _validate_sentences(sentences) -> tuple[list[str], bool]:
    if isinstance(sentences, str):
        _check_encodable(sentences, 0)
        return [sentences], True
    if not isinstance(sentences, (list, tuple)):
        raise TypeError(f"translate expects a str or a list of str, got {type(sentences).__name__}")
    for i, s in enumerate(sentences):
        if not isinstance(s, str):
            raise TypeError(f"translate expects a list of str, but element {i} is {type(s).__name__}: {s!r}")
    for i, s in enumerate(sentences):
        _check_encodable(s, i)
    return list(sentences), False


def _check_encodable(sentence: str, index: int) -> None:
    """Refuse text that is not valid Unicode (a lone surrogate such as ``'\\ud800'``), which spaCy cannot read, naming the sentence."""
    try:
        sentence.encode("utf-8")
    except UnicodeEncodeError as err:
        shown = sentence if len(sentence) <= 60 else sentence[:57] + "..."
        raise ValueError(
            f"sentence {index} ({shown!r}) is not valid Unicode: it holds a lone surrogate {sentence[err.start]!r} at position "
            f"{err.start}, a half of a character (text decoded with errors='surrogateescape', or cut in the middle of a pair). "
            "Remove it, or read the text with the right encoding; s.encode('utf-8', 'replace').decode('utf-8') turns each into '?'"
        ) from None


def translate(
    model_or_checkpoint: Transformer | str | os.PathLike,
    sentences: str | Sequence[str],
    beam_size: int = 1,
    max_new_tokens: int | None = None,
    device: str | torch.device | None = None,
    src_vocab: "Vocab | None" = None,
    tgt_vocab: "Vocab | None" = None,
    return_attention: bool = False,
    length_penalty: float = 0.6,
    batch_size: int = 64,
    temperature: float | None = None,
    seed: int | None = None,
    top_k: int | None = None,
    use_cache: bool = True,
) -> Any:
    """Translate German sentences into English.

    Args:
        model_or_checkpoint: a checkpoint path (its vocabularies are used), or
            a :class:`~transformer_lessons.model.Transformer` together with
            ``src_vocab`` and ``tgt_vocab``.
        sentences: a list of German sentences, or one sentence (a ``str``).
        beam_size: 1 (the default) for greedy decoding, e.g. 4 for the paper's beam search.
        max_new_tokens: the most output tokens (default source length + 50, at most
            the model's ``max_len``).
        device: where to run (a checkpoint is loaded there; a model is moved).
        return_attention: also return what the widgets of the step-by-step view need.
        length_penalty: GNMT ``α`` for beam search.
        batch_size: sentences decoded together.
        temperature: sample each token (:func:`sample_decode`) at this temperature
            instead of greedy decoding or beam search (``None``, the default);
            ``top_k`` limits the draw to the likeliest tokens, ``seed`` makes it repeatable.
        use_cache: decode with a key/value cache (:mod:`transformer_lessons.kv_cache`,
            notebook 12), the default: the same translations, several times faster.
            ``False`` reruns the decoder on the whole prefix at every step.

    Returns:
        English sentences, cased and detokenized: a list for a list, a ``str``
        for a ``str``. With ``return_attention``, a pair ``(translations,
        details)`` where ``details`` (a list, or one dict for a ``str``) holds
        per sentence ``src_tokens`` (German tokens + ``"<eos>"``, the keys;
        BPE pieces such as ``"Hoch@@"`` when the vocabulary has subwords),
        ``tgt_tokens`` (the generated tokens, ``"<eos>"`` included: row ``t``
        is the step that produced token ``t``), ``cross_attention``
        (a list over decoder layers of ``(H, T, S)``, ready for
        :func:`~transformer_lessons.viz.generation_stepper`) and ``attention`` (the model's
        :meth:`~transformer_lessons.model.Transformer.attention_weights` for
        that sentence, batch size 1). An empty sentence has ``None`` attention.

    Behaviour on awkward input: ``""`` or whitespace gives ``""``; a word not
    in the vocabulary becomes ``<unk>`` (no error; the output may contain
    ``<unk>``); a sentence of more than ``max_len - 1`` tokens (``max_len``: the
    length the model was configured for) is cut to that length, with a note: a :class:`~transformer_lessons.notes.CourseWarning`, or inside
    ``with collect_notes() as notes:`` (:mod:`transformer_lessons.notes`) an entry
    of ``notes`` instead; anything but a ``str`` or a list/tuple of ``str``
    raises ``TypeError``; text with a lone surrogate (``"\\ud800"``) ``ValueError``.
    """
    items, single = _validate_sentences(sentences)
    _check_sampling(temperature, top_k, seed, beam_size)
    model, src_vocab, tgt_vocab, device = _resolve(model_or_checkpoint, src_vocab, tgt_vocab, device)
    _check_vocab_fits(model, src_vocab, tgt_vocab)
    limit = model.config.max_len - 1
    src_tokens = [_bounded(words, limit, src_vocab) for words in _german_words(items)]
    # What the model reads (words, or BPE pieces), cut to fit with a note; decode_token_lists cuts its own ids alike.
    src_units = _cut_long_sources([src_vocab.segment(t) for t in src_tokens], limit)
    generator = None if seed is None else torch.Generator(device=device).manual_seed(seed)
    decoding = {"temperature": temperature, "top_k": top_k, "generator": generator, "use_cache": use_cache}
    outputs = decode_token_lists(
        model, src_tokens, src_vocab, tgt_vocab, beam_size, length_penalty, max_new_tokens, batch_size, **decoding
    )
    texts, _ = _english(outputs, tgt_vocab)
    if not return_attention:
        return texts[0] if single else texts
    details = [_attention_details(model, units, out, src_vocab, tgt_vocab) for units, out in zip(src_units, outputs)]
    return (texts[0], details[0]) if single else (texts, details)


def _german_words(sentences: list[str]) -> list[list[str]]:
    """Each sentence's spaCy tokens; a blank sentence has none (spaCy loads on first use: all-blank input never needs it)."""
    from transformer_lessons.data import Tokenizer

    german = Tokenizer("de")
    return [german.tokenize(s) if s.strip() else [] for s in sentences]


def _bounded(words: list[str], limit: int, vocab: "Vocab") -> list[str]:
    """The words of a sentence, no more than the model can read: ``limit + 1`` words, each at most ``limit + 1`` of the
    vocabulary's longest pieces long. Every word is at least one piece, so what is left out could not be read (the
    sentence is still found too long, and noted); without it a 1 MB "word" took minutes of subword splitting."""
    longest = max((len(unit.removesuffix("@@")) for unit in vocab.itos), default=1)
    most = (limit + 1) * max(longest, 1)
    return [word[:most] for word in words[: limit + 1]]


def _english(outputs: list[list[int]], tgt_vocab: "Vocab") -> tuple[list[str], list[list[str]]]:
    """The outputs as English sentences, cased and detokenized, and the words each one joins."""
    from transformer_lessons.data import Tokenizer

    english = Tokenizer("en")
    words = [tgt_vocab.decode_words(out) for out in outputs]
    return [english.detokenize(w) for w in words], words


def _cut_long_sources(src_units: list[list[str]], limit: int) -> list[list[str]]:
    """Each source cut to ``limit`` units, with a note (:mod:`transformer_lessons.notes`) if any was longer.

    The cut is ``translate``'s rule, the same for every model: ``limit`` is ``max_len - 1``, the length the model
    was configured for. A sinusoidal or learned model has a table of ``max_len`` positions; a rotary one has no
    table (:mod:`transformer_lessons.rotary`), and is cut alike.

    Uncollected, the note is a :class:`~transformer_lessons.notes.CourseWarning` pointing at the caller of ``translate``.
    """
    long = [i for i, u in enumerate(src_units) if len(u) > limit]
    if long:
        note(
            f"{len(long)} sentence(s) (index {long[:5]}) have more than {limit} tokens: the model was configured for "
            f"max_len={limit + 1} (one place for <eos>), so only their first {limit} tokens are translated",
            stacklevel=3,
        )
    return [u[:limit] for u in src_units] if long else src_units


@torch.no_grad()
def _attention_details(
    model: Transformer, src_tokens: list[str], out: list[int], src_vocab: "Vocab", tgt_vocab: "Vocab"
) -> dict:
    """Re-run one finished translation with teacher forcing to read its attention weights.

    ``src_tokens`` are the units the model read (BPE pieces when the vocabulary has them).
    """
    tgt_tokens = [tgt_vocab.itos[i] for i in out]
    details = {
        "src_tokens": [*src_tokens, "<eos>"],
        "tgt_tokens": tgt_tokens,
        "cross_attention": None,
        "attention": None,
    }
    if not src_tokens or not out:
        return details
    device = next(model.parameters()).device
    src = torch.tensor([src_vocab.encode(src_tokens) + [src_vocab.eos_id]], device=device)  # (1, S)
    tgt_in = torch.tensor([[tgt_vocab.bos_id, *out[:-1]]], device=device)  # (1, T): row t predicts out[t]
    model.eval()
    model(src, tgt_in, None, causal_mask(tgt_in.size(1), device))  # eval mode records the weights
    attention = model.attention_weights()
    details["attention"] = attention
    details["cross_attention"] = [w[0].cpu() for w in attention["cross"]]  # per layer (H, T, S)
    return details


def evaluate(
    model_or_checkpoint: Transformer | str | os.PathLike,
    split: str = "test_2016_flickr",
    data_dir: str | os.PathLike | None = None,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    corpus: "Corpus | None" = None,
    src_vocab: "Vocab | None" = None,
    tgt_vocab: "Vocab | None" = None,
    device: str | torch.device | None = None,
    limit: int | None = None,
    batch_size: int = 128,
    progress: bool = False,
    max_output_extra: int = MAX_OUTPUT_EXTRA,
    use_cache: bool = True,
) -> dict:
    """Translate a Multi30k split and score it with sacreBLEU.

    Two scores, because two conventions are in use:

    * ``bleu``: sacreBLEU's corpus BLEU on cased, detokenized output against
      the raw references, with its default ``13a`` tokenizer. This is the
      comparable number; ``signature`` (e.g.
      ``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0``) says
      exactly how it was computed.
    * ``tutorial_bleu``: BLEU on *lowercased, spaCy-tokenized* text (sacreBLEU
      with ``lowercase=True, tokenize="none"`` on space-joined tokens), the way
      most PyTorch Multi30k tutorials (torchtext's ``bleu_score``) report it.
      It usually runs higher, by anything from a fraction of a point to a
      few points depending on the output (the quick CPU runs in
      ``results/``: 18.44 against 14.42 with whole words, 20.11 against
      19.95 with subwords); do not compare it with the first.

    Args:
        model_or_checkpoint: a checkpoint path, or a model with ``src_vocab``/``tgt_vocab``.
        split: a Multi30k split (see :data:`transformer_lessons.data.SPLITS`).
        data_dir: raw files, when ``corpus`` does not hold the split.
        beam_size, length_penalty: decoding (paper §6.1: 4 and 0.6; 1 = greedy).
        corpus: a prepared corpus holding ``split``: its tokens are used, so no
            spaCy is needed (a GPU machine without spaCy evaluates this way).
        limit: score only the first ``limit`` sentences.
        max_output_extra: outputs stop at source length + ``max_output_extra`` tokens (paper
            §6.1: 50; ``TrainConfig.max_output_extra`` is the same number for a run). A half-trained model that repeats itself costs time
            quadratic in this; a CPU run uses less.
        use_cache: decode with a key/value cache (the default: same outputs, several
            times faster; on the course's model, beam 4 over the 1,000 test sentences gave the
            same 1,000 translations in 20 s instead of 122 s on a 2-core CPU).

    Returns:
        dict with ``split``, ``n``, ``bleu``, ``signature``, ``bleu_text``
        (sacreBLEU's one-line summary), ``tutorial_bleu``,
        ``tutorial_signature``, ``beam_size``, ``length_penalty``,
        ``hypotheses`` and ``references``.
    """
    model, src_vocab, tgt_vocab, device = _resolve(model_or_checkpoint, src_vocab, tgt_vocab, device)
    _check_vocab_fits(model, src_vocab, tgt_vocab)
    texts, tokens = _split_texts_and_tokens(split, corpus, data_dir, progress)
    if limit is not None:
        texts, tokens = texts[:limit], tokens[:limit]
    outputs = decode_token_lists(
        model,
        [s for s, _ in tokens],
        src_vocab,
        tgt_vocab,
        beam_size,
        length_penalty,
        batch_size=batch_size,
        progress=progress,
        max_output_extra=max_output_extra,
        use_cache=use_cache,
    )
    return _scored(split, outputs, texts, tokens, tgt_vocab, beam_size, length_penalty)


def _scored(split: str, outputs, texts, tokens, tgt_vocab: "Vocab", beam_size: int, length_penalty: float) -> dict:
    """What :func:`evaluate` returns: the outputs in English, both BLEU scores against the references, the settings."""
    hypotheses, hyp_tokens = _english(outputs, tgt_vocab)
    references = [t for _, t in texts]
    return (
        {"split": split, "n": len(hypotheses)}
        | bleu_scores(hypotheses, references, hyp_tokens, [t for _, t in tokens])
        | {
            "beam_size": beam_size,
            "length_penalty": length_penalty,
            "hypotheses": hypotheses,
            "references": references,
        }
    )


def _split_texts_and_tokens(split: str, corpus: "Corpus | None", data_dir, progress: bool) -> tuple[list, list]:
    """``(texts, tokens)`` of ``split``: from the corpus when it holds them (no spaCy needed), else read and tokenized."""
    if corpus is not None and split in corpus.text and corpus.tokens is not None and split in corpus.tokens:
        return corpus.text[split], corpus.tokens[split]
    from transformer_lessons.data import Tokenizer, load_split

    texts = load_split(split, data_dir, progress=progress)
    de, en = Tokenizer("de"), Tokenizer("en")
    return texts, list(zip(de.tokenize_batch(s for s, _ in texts), en.tokenize_batch(t for _, t in texts)))


def bleu_scores(
    hypotheses: list[str], references: list[str], hyp_tokens: list[list[str]], ref_tokens: list[list[str]]
) -> dict:
    """sacreBLEU on detokenized text (``bleu``, ``signature``, ``bleu_text``) and the tutorial-style score on tokens."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU()  # cased, 13a tokenization of detokenized text: sacreBLEU's defaults
    score = bleu.corpus_score(hypotheses, [references])
    tutorial = BLEU(lowercase=True, tokenize="none", force=True)  # force: the input is tokenized on purpose
    tutorial_score = tutorial.corpus_score([" ".join(t) for t in hyp_tokens], [[" ".join(t) for t in ref_tokens]])
    return {
        "bleu": score.score,
        "signature": str(bleu.get_signature()),
        "bleu_text": str(score),
        "tutorial_bleu": tutorial_score.score,
        "tutorial_signature": str(tutorial.get_signature()),
        "tutorial_note": "lowercased, spaCy-tokenized (torchtext-style); not comparable with 'bleu'",
    }
