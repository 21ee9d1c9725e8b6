"""Turning a trained model into output sequences of ids: greedy decoding and sampling.

Paper: §6.1 uses beam search (beam 4, length penalty α = 0.6) and caps the
output at the input length + 50; greedy decoding is beam search with a beam of
one and the fastest way to see what a model learned. Sampling with a
temperature (:func:`sample_decode`) is not in the paper: it draws each token
instead of taking the likeliest, so one sentence can have many translations.
Beam search lives in :mod:`transformer_lessons.beam`.

Everything here works on tensors of ids. Sentences in, sentences out (spaCy's
tokens, the vocabularies, sacreBLEU) is :mod:`transformer_lessons.translation`:
``translate`` and ``evaluate``.
"""

from __future__ import annotations

import math
import numbers
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from transformer_lessons.attention import MultiHeadAttention

# Notebook 10 reaches beam search through this module, beside greedy decoding (decode.beam_search,
# decode.length_penalty): the one re-export here. Beam search lives in beam.py.
from transformer_lessons.beam import beam_search, length_penalty  # noqa: F401
from transformer_lessons.masks import causal_mask
from transformer_lessons.model import Transformer


def _append_tokens(
    ys: torch.Tensor, next_token: torch.Tensor, finished: torch.Tensor, eos_id: int | None, filler: int | None
) -> tuple[torch.Tensor, bool]:
    """One decoding step's bookkeeping, shared by every decoder here: append ``next_token (B,)`` to ``ys (B, t)``.

    A sentence that has already produced ``eos_id`` gets ``filler`` instead, and ``finished`` (bool ``(B,)``)
    is updated in place. Returns the longer ``ys (B, t + 1)`` and whether every sentence has finished
    (never, when ``eos_id`` is ``None``).
    """
    if eos_id is not None:
        next_token = next_token.masked_fill(finished, filler)
        finished |= next_token == eos_id
    ys = torch.cat([ys, next_token[:, None]], dim=1)  # (B, t) -> (B, t + 1)
    return ys, eos_id is not None and bool(finished.all())


def _full_batch(tokens: torch.Tensor, rows: torch.Tensor | None, batch: int, filler: int | None) -> torch.Tensor:
    """``tokens (A,)`` decoded for the sentences ``rows`` (``None``: all of them), as ``(B,)`` with ``filler`` elsewhere."""
    if rows is None:
        return tokens  # (B,)
    full = torch.full((batch,), filler, dtype=torch.long, device=tokens.device)  # (B,)
    full[rows] = tokens
    return full


@torch.no_grad()
def greedy_decode(
    model: Transformer,
    src: torch.Tensor,
    src_mask: torch.Tensor | None,
    max_new_tokens: int,
    bos_id: int,
    eos_id: int | None = None,
    pad_id: int | None = None,
    use_cache: bool = False,
) -> torch.Tensor:
    """Generate a batch of sequences, one most-likely token at a time.

    The source is encoded once; each step feeds everything generated so far to
    the decoder and appends the argmax of the last position's logits. A
    sequence that has produced ``eos_id`` is finished: it receives ``pad_id``
    (or ``eos_id`` again when no pad id is given) from then on and leaves the
    decoder's batch, and the loop stops early when every sequence is finished.

    Args:
        model: the Transformer (put it in eval mode first).
        src: source ids ``(B, S)``.
        src_mask: ``(B, 1, 1, S)`` padding mask, or ``None``.
        max_new_tokens: the most tokens to generate after ``<bos>``.
        bos_id: id the decoder input starts with.
        eos_id: id that ends a sequence, or ``None`` to always run ``max_new_tokens`` steps.
        pad_id: id written after a sequence's ``<eos>``.
        use_cache: feed only the new position each step, keeping the earlier keys
            and values (:mod:`transformer_lessons.kv_cache`): the same tokens, faster.

    Returns:
        LongTensor ``(B, 1 + L)`` with ``L <= max_new_tokens``, starting with ``bos_id``.
    """
    if use_cache:
        return _greedy_decode_cached(model, src, src_mask, max_new_tokens, bos_id, eos_id, pad_id)
    memory = model.encode(src, src_mask)  # (B, S, D)
    batch = src.size(0)
    ys = torch.full((batch, 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
    filler = pad_id if pad_id is not None else eos_id
    for _ in range(max_new_tokens):
        # Only unfinished rows go through the decoder: a finished sentence costs nothing more.
        rows = (~finished).nonzero().squeeze(1) if bool(finished.any()) else None  # (A,) or all
        mem, mask, inp = (
            (memory, src_mask, ys)
            if rows is None
            else (memory[rows], None if src_mask is None else src_mask[rows], ys[rows])
        )
        # Every row has the same length here, so the causal mask alone suffices.
        logits = model.decode(mem, mask, inp, causal_mask(ys.size(1), src.device))  # (A, t, V)
        next_token = _full_batch(logits[:, -1].argmax(dim=-1), rows, batch, filler)  # (B,)
        ys, done = _append_tokens(ys, next_token, finished, eos_id, filler)
        if done:
            break
    return ys


def _greedy_decode_cached(
    model: Transformer,
    src: torch.Tensor,
    src_mask: torch.Tensor | None,
    max_new_tokens: int,
    bos_id: int,
    eos_id: int | None,
    pad_id: int | None,
) -> torch.Tensor:
    """:func:`greedy_decode` with a :class:`~transformer_lessons.kv_cache.KVCache`: the same tokens, each step one position.

    Finished sentences leave the cache (``KVCache.reorder``), as they leave the
    decoder's batch in the recomputing version.
    """
    batch, device = src.size(0), src.device
    cache = model.init_cache(model.encode(src, src_mask))  # cross K/V once per sentence
    ys = torch.full((batch, 1), bos_id, dtype=torch.long, device=device)  # (B, 1)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    rows = torch.arange(batch, device=device)  # (A,): which sentence each cache row holds
    mask, filler = src_mask, pad_id if pad_id is not None else eos_id
    for _ in range(max_new_tokens):
        logits = model.decode_step(cache, mask, ys[rows, -1:])  # (A, 1) -> (A, V)
        next_token = _full_batch(logits.argmax(dim=-1), rows if rows.numel() < batch else None, batch, filler)  # (B,)
        ys, done = _append_tokens(ys, next_token, finished, eos_id, filler)
        if done:
            break
        going = (~finished[rows]).nonzero().squeeze(1)  # (A',): cache rows still decoding
        if going.numel() < rows.numel():
            cache.reorder(going)
            rows, mask = rows[going], None if mask is None else mask[going]
    return ys


@torch.no_grad()
def sequence_log_prob(
    model: Transformer, src: torch.Tensor, src_mask: torch.Tensor | None, ys: torch.Tensor, eos_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability the model gives to given outputs (teacher forcing), for comparing decoders.

    Args:
        ys: ``(B, 1 + L)`` sequences starting with ``<bos>``, as the decoders return them.

    Returns:
        ``(log_prob, length)``, each ``(B,)``: the summed log-probability of
        the tokens after ``<bos>`` up to and including the first ``<eos>``, and
        how many tokens that is (``log_prob / length_penalty(length)`` is
        :func:`beam_search`'s score).
    """
    tgt_in, tgt_out = ys[:, :-1], ys[:, 1:]  # (B, L) each
    logits = model(src, tgt_in, src_mask, causal_mask(tgt_in.size(1), ys.device))  # (B, L, V)
    log_p = F.log_softmax(logits.float(), dim=-1).gather(-1, tgt_out.unsqueeze(-1)).squeeze(-1)  # (B, L)
    is_eos = (tgt_out == eos_id).long()  # (B, L)
    before_end = (is_eos.cumsum(1) - is_eos) == 0  # (B, L): up to and including the first <eos>
    return (log_p * before_end).sum(1), before_end.sum(1)


# --------------------------------------------------------------------------------------
# Sampling with a temperature
# --------------------------------------------------------------------------------------


def check_temperature(temperature: float) -> float:
    """``temperature`` as a float, or ``ValueError`` unless it is a finite number >= 0 (0 means greedy)."""
    ok = (
        isinstance(temperature, numbers.Real)
        and not isinstance(temperature, bool)
        and math.isfinite(temperature)
        and temperature >= 0
    )
    if not ok:
        raise ValueError(
            f"temperature must be a finite number >= 0 (0 = greedy, 1 = the model's own distribution), got {temperature!r}"
        )
    return float(temperature)


def check_top_k(top_k: int | None) -> int | None:
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be a whole number >= 1 or None, got {top_k!r}")
    return top_k


def temperature_probs(logits: torch.Tensor, temperature: float, top_k: int | None = None) -> torch.Tensor:
    """``softmax(logits / temperature)`` over the last axis, optionally over the ``top_k`` largest logits only.

    Below 1 the distribution sharpens towards the argmax, above 1 it flattens towards
    uniform. At ``temperature == 0`` it is the limit: all the mass on the argmax (the
    first one on a tie, as ``argmax`` picks), so sampling from it is greedy decoding.

    Shape:
        logits ``(..., V)`` -> probabilities ``(..., V)`` (float32), summing to 1.
    """
    temperature, top_k = check_temperature(temperature), check_top_k(top_k)
    logits = logits.float()
    if top_k is not None and top_k < logits.size(-1):
        kth = logits.topk(top_k, dim=-1).values[..., -1:]  # (..., 1): the k-th largest logit
        logits = logits.masked_fill(logits < kth, float("-inf"))  # (..., V)
    if temperature == 0:
        return F.one_hot(logits.argmax(dim=-1), logits.size(-1)).float()  # (..., V)
    # Subtracting the max first keeps a tiny temperature from turning logits into inf - inf = NaN.
    scaled = (logits - logits.amax(dim=-1, keepdim=True)) / temperature  # (..., V), every value <= 0
    return scaled.softmax(dim=-1)


def _draw(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of ``probs (B, V)``, drawn on the generator's device: ids ``(B,)``."""
    where = generator.device if generator is not None else probs.device
    return torch.multinomial(probs.to(where), 1, generator=generator).squeeze(1).to(probs.device)  # (B,)


@torch.no_grad()
def sample_decode(
    model: Transformer,
    src: torch.Tensor,
    src_mask: torch.Tensor | None,
    max_new_tokens: int,
    bos_id: int,
    eos_id: int | None = None,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    pad_id: int | None = None,
) -> torch.Tensor:
    """Generate a batch of sequences, drawing each next token from ``softmax(logits / temperature)``.

    :func:`greedy_decode` always takes the most likely token; here the next token
    is *drawn*, so one source can give many outputs. ``temperature`` reshapes the
    distribution first (:func:`temperature_probs`): 1 samples the model's own
    distribution, below 1 favours likely tokens, above 1 gives rare ones more
    chances, and 0 is greedy decoding exactly (the same function is called).
    ``top_k`` draws among the ``k`` likeliest tokens only. Not in the paper, which
    decodes with a beam (§6.1); sampling is how language models generate text.
    ``<eos>`` handling and the output are :func:`greedy_decode`'s.

    Args:
        model, src, src_mask, max_new_tokens, bos_id, eos_id, pad_id: as for :func:`greedy_decode`.
        temperature: a finite number >= 0 (``ValueError`` otherwise).
        top_k: sample among the ``top_k`` most likely tokens only (``None``: all of them).
        generator: a seeded ``torch.Generator`` makes the draws reproducible
            (``None``: torch's global random state).

    Returns:
        LongTensor ``(B, 1 + L)`` with ``L <= max_new_tokens``, starting with ``bos_id``.
    """
    temperature, top_k = check_temperature(temperature), check_top_k(top_k)
    if temperature == 0:  # all the mass on the argmax, whatever top_k keeps
        return greedy_decode(model, src, src_mask, max_new_tokens, bos_id, eos_id, pad_id)
    memory = model.encode(src, src_mask)  # (B, S, D)
    batch = src.size(0)
    ys = torch.full((batch, 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
    filler = pad_id if pad_id is not None else eos_id
    for _ in range(max_new_tokens):
        # Every row draws at every step, finished or not, so the random stream is the same whichever rows ended.
        logits = model.decode(memory, src_mask, ys, causal_mask(ys.size(1), src.device))[:, -1]  # (B, V)
        next_token = _draw(temperature_probs(logits, temperature, top_k), generator)  # (B,)
        ys, done = _append_tokens(ys, next_token, finished, eos_id, filler)
        if done:
            break
    return ys


@torch.no_grad()
def next_token_distribution(
    model: Transformer,
    src: torch.Tensor,
    src_mask: torch.Tensor | None,
    prefix: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
) -> torch.Tensor:
    """The probabilities the decoder gives the token after ``prefix``, at ``temperature``.

    What :func:`sample_decode` draws from at one step: call it at several
    temperatures to see the distribution sharpen (below 1) or flatten (above 1).

    Args:
        src: source ids ``(S,)`` for one sentence or ``(B, S)``.
        src_mask: its padding mask (``(B, 1, 1, S)``), or ``None``.
        prefix: the decoder input so far, ``<bos>`` first: ``(T,)`` or ``(B, T)``
            (one prefix is used for every source of the batch).

    Returns:
        FloatTensor ``(V,)`` for one source, else ``(B, V)``; each row sums to 1.
    """
    single = src.dim() == 1
    src = src.unsqueeze(0) if single else src  # (B, S)
    prefix = prefix.unsqueeze(0) if prefix.dim() == 1 else prefix  # (B or 1, T)
    prefix = prefix.expand(src.size(0), -1).to(src.device)  # (B, T)
    memory = model.encode(src, src_mask)  # (B, S, D)
    logits = model.decode(memory, src_mask, prefix, causal_mask(prefix.size(1), src.device))[:, -1]  # (B, V)
    probs = temperature_probs(logits, temperature, top_k)  # (B, V)
    return probs[0] if single else probs


@contextmanager
def fused_attention(model: Transformer):
    """Inside the block no attention layer records its weights, so all take the fused kernel.

    In eval mode :class:`~transformer_lessons.attention.MultiHeadAttention`
    keeps each call's weights for the plots, computing them with an explicit
    softmax, which is slower than ``F.scaled_dot_product_attention``.
    Validation and test decoding need only the outputs (the same up to float
    rounding). Each layer's own setting comes back afterwards.
    """
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    before = [m.record_weights for m in layers]
    model.set_record_attention(False)
    try:
        yield model
    finally:
        for layer, record in zip(layers, before):
            layer.record_weights = record
