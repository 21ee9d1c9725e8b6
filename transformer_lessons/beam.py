"""Beam search: keep the ``K`` most likely prefixes instead of only the best one.

Paper: §6.1 decodes with a beam of 4 and a length penalty α = 0.6 (the GNMT
penalty of Wu et al. 2016, Eq. 14). Greedy decoding is a beam of one
(:func:`~transformer_lessons.decode.greedy_decode`); :mod:`transformer_lessons.decode`
re-exports :func:`beam_search` and :func:`length_penalty` for notebook 10, and
:mod:`transformer_lessons.translation` decodes ``translate``/``evaluate`` with them.
:mod:`transformer_lessons.beam_tree` runs the same search on one sentence with the same steps
(:func:`start_beams`, :func:`next_log_probs`, :func:`extend_alive`) and records every hypothesis.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from transformer_lessons.config import MAX_BEAM_SIZE
from transformer_lessons.kv_cache import KVCache
from transformer_lessons.masks import causal_mask
from transformer_lessons.model import Transformer


def length_penalty(length: int | torch.Tensor, alpha: float = 0.6) -> float | torch.Tensor:
    """GNMT length penalty ``lp(Y) = ((5 + |Y|) / 6)^α`` (Wu et al. 2016, Eq. 14; paper §6.1: α = 0.6).

    A hypothesis is ranked by ``log P(Y | X) / lp(Y)``. Log-probabilities only
    fall as a sentence grows, so raw scores favour short outputs; dividing by a
    penalty that grows with the length undoes part of that. ``α = 0`` ranks by
    the raw log-probability. ``|Y|`` counts the generated tokens, ``<eos>`` included.
    """
    return ((5.0 + length) / 6.0) ** alpha


@torch.no_grad()
def beam_search(
    model: Transformer,
    src: torch.Tensor,
    src_mask: torch.Tensor | None,
    max_new_tokens: int,
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    pad_id: int | None = None,
    return_scores: bool = False,
    use_cache: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Keep the ``beam_size`` most likely prefixes of each sentence instead of only the best one.

    All sentences of the batch are searched together (``B * K`` rows per
    decoder call). At each step every live prefix is extended by every token;
    of the ``2K`` best extensions (by summed log-probability), those ending in
    ``<eos>`` that rank among the first ``K`` become finished hypotheses,
    scored ``log P / lp`` (:func:`length_penalty` of ``α``), and the first ``K`` others
    stay alive. A sentence is done once it has ``K`` finished hypotheses (so
    ``beam_size=1`` is exactly greedy decoding); at ``max_new_tokens`` the best ``K``
    candidates finish as they are (cut off, without ``<eos>``, as in greedy
    decoding). The best finished hypothesis is returned.

    Args:
        model: the Transformer, in eval mode.
        src: source ids ``(B, S)``.
        src_mask: ``(B, 1, 1, S)`` padding mask, or ``None``.
        max_new_tokens: the most tokens to generate after ``<bos>``, ``<eos>`` included.
        bos_id, eos_id: the special ids.
        beam_size: ``K`` (paper: 4).
        length_penalty: ``α`` (paper: 0.6).
        pad_id: id written after a sequence's ``<eos>`` (default ``eos_id``).
        return_scores: also return each output's score ``log P / lp``.
        use_cache: feed the decoder each prefix's new token only, with a key/value cache (:mod:`~transformer_lessons.kv_cache`): same outputs, faster.

    Returns:
        LongTensor ``(B, 1 + L)`` starting with ``bos_id``, like :func:`greedy_decode`;
        with ``return_scores`` also a FloatTensor ``(B,)``.
    """
    if not 1 <= beam_size <= MAX_BEAM_SIZE:
        raise ValueError(f"beam_size must be between 1 and {MAX_BEAM_SIZE}, got {beam_size} (the paper uses 4)")
    B, device = src.size(0), src.device
    # The paper's letters; the argument length_penalty is not read again (its name is also a function's).
    K, alpha = beam_size, length_penalty
    memory, mask, seqs, scores = start_beams(model, src, src_mask, bos_id, K)  # seqs (B, K, 1), scores (B, K)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]
    active = list(range(B))  # which sentence each row block of the tensors belongs to; A = sentences still searched
    cache = model.init_cache(memory) if use_cache else None  # rows follow seqs.view(A * K, t)
    for t in range(1, max_new_tokens + 1):
        A = len(active)
        log_p = next_log_probs(model, memory, mask, seqs.view(A * K, t), cache)  # (A*K, V)
        V = log_p.size(-1)
        cand = (scores.unsqueeze(-1) + log_p.view(A, K, V)).view(A, K * V)  # (A, K*V)
        top_scores, top_idx = cand.topk(min(2 * K, K * V), dim=-1)  # (A, 2K)
        beam, token = top_idx // V, top_idx % V  # which prefix each candidate extends, and with what
        is_eos = token == eos_id  # (A, 2K)

        # Candidates ending in <eos> among the first K finish; at max_new_tokens, the first K
        # finish whatever their last token (cut off, as greedy decoding is). One sync per step.
        ending = is_eos[:, :K] if t < max_new_tokens else torch.ones_like(is_eos[:, :K])
        ends = (ending & torch.isfinite(top_scores[:, :K])).nonzero().tolist()
        if ends:
            _collect_finished(finished, active, ends, seqs, top_scores, beam, token, t, alpha, K)
        keep = [a for a in range(A) if len(finished[active[a]]) < K]
        if not keep:
            break

        seqs, scores, parent = extend_alive(seqs, top_scores, beam, token, is_eos, K)  # (A, K, t + 1), (A, K), (A, K)
        _follow_beams(cache, parent, keep, K)
        if len(keep) < A:  # sentences with K finished hypotheses leave the batch
            seqs, scores, memory, mask = _keep_rows(keep, K, seqs, scores, memory, mask)
            active = [active[a] for a in keep]

    out, best_scores = _best_hypotheses(finished, pad_id if pad_id is not None else eos_id, device)
    return (out, best_scores) if return_scores else out


def start_beams(model: Transformer, src: torch.Tensor, src_mask: torch.Tensor | None, bos_id: int, K: int):
    """The search's start: the encoder's output and the mask once per beam, ``K`` prefixes ``<bos>`` and their scores.

    Returns ``memory (B*K, S, D)``, ``mask (B*K, 1, 1, S)`` or ``None``, ``seqs (B, K, 1)`` and ``scores (B, K)``.
    """
    B, device = src.size(0), src.device
    memory = model.encode(src, src_mask).repeat_interleave(K, dim=0)  # (B, S, D) -> (B*K, S, D)
    mask = src_mask.repeat_interleave(K, dim=0) if src_mask is not None else None  # (B*K, 1, 1, S)
    seqs = torch.full((B, K, 1), bos_id, dtype=torch.long, device=device)  # (B, K, 1): K prefixes per sentence
    scores = torch.zeros(B, K, device=device)  # summed log-probabilities of the live prefixes
    scores[:, 1:] = float("-inf")  # all K start as the same <bos>: only the first may grow at step 1
    return memory, mask, seqs, scores


def next_log_probs(model: Transformer, memory, mask, prefixes: torch.Tensor, cache: KVCache | None) -> torch.Tensor:
    """Log-probabilities of the token after each of ``prefixes (N, t)``: ``(N, V)``, float32.

    Without a cache the decoder reads the whole prefix; with one, only its last token.
    """
    if cache is None:
        t = prefixes.size(1)
        logits = model.decode(memory, mask, prefixes, causal_mask(t, prefixes.device))[:, -1]  # (N, V)
    else:
        logits = model.decode_step(cache, mask, prefixes[:, -1:])  # (N, 1) -> (N, V)
    return F.log_softmax(logits.float(), dim=-1)  # (N, V)


def _follow_beams(cache: KVCache | None, parent: torch.Tensor, keep: list[int], K: int) -> None:
    """Give each surviving prefix its parent's cached keys and values, for the sentences in ``keep`` only.

    ``parent (A, K)`` says which of its sentence's ``K`` prefixes each survivor extends;
    the cache's rows go from ``A * K`` to ``len(keep) * K``, in the order of ``seqs``.
    """
    if cache is not None:
        rows = (torch.arange(parent.size(0), device=parent.device)[:, None] * K + parent)[
            keep
        ]  # (A', K) rows of (A*K, ...)
        cache.reorder(rows.flatten())  # (A*K, ...) -> (A'*K, ...)


def extend_alive(seqs, top_scores, beam, token, is_eos, K: int):
    """The first ``K`` candidates not ending in ``<eos>`` stay alive (topk keeps their order): their prefixes, one token longer, and scores and parents ``(A, K)``."""
    t = seqs.size(-1)
    alive_scores, pos = top_scores.masked_fill(is_eos, float("-inf")).topk(K, dim=-1)  # (A, K)
    parent = beam.gather(1, pos)  # (A, K): which prefix each survivor extends
    seqs = torch.cat(
        [seqs.gather(1, parent.unsqueeze(-1).expand(-1, -1, t)), token.gather(1, pos).unsqueeze(-1)], dim=2
    )
    return seqs, alive_scores, parent  # (A, K, t + 1), (A, K), (A, K)


def _keep_rows(keep: list[int], K: int, seqs, scores, memory, mask):
    """The rows of the sentences in ``keep``: ``seqs (A', K, t)``, ``scores (A', K)``, ``memory (A'*K, S, D)``, ``mask``."""
    A, rows = seqs.size(0), torch.tensor(keep, device=seqs.device)
    memory = memory.view(A, K, *memory.shape[1:])[rows].flatten(0, 1)  # (A'*K, S, D)
    if mask is not None:
        mask = mask.view(A, K, *mask.shape[1:])[rows].flatten(0, 1)  # (A'*K, 1, 1, S)
    return seqs[rows], scores[rows], memory, mask


def _best_hypotheses(
    finished: list[list[tuple[float, list[int]]]], filler: int, device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sentence's best ``(score, ids)`` hypothesis, padded with ``filler`` into ``(B, 1 + L)``, and the scores ``(B,)``."""
    best = [max(f, key=lambda item: item[0]) for f in finished]
    width = max(len(seq) for _, seq in best)
    out = torch.full((len(best), width), filler, dtype=torch.long, device=device)  # (B, 1 + L)
    for b, (_, seq) in enumerate(best):
        out[b, : len(seq)] = torch.tensor(seq, dtype=torch.long, device=device)
    return out, torch.tensor([score for score, _ in best], device=device)


def _collect_finished(finished, active, ends, seqs, top_scores, beam, token, t: int, alpha: float, K: int) -> None:
    """Add each ending candidate ``(a, k)`` of ``ends``, scored ``log P / lp``, to its sentence's finished list (at most ``K``)."""
    penalty = length_penalty(t, alpha)
    end_scores, end_beams, end_tokens = top_scores.tolist(), beam.tolist(), token.tolist()
    for a, k in ends:
        done = finished[active[a]]
        if len(done) < K:
            done.append((end_scores[a][k] / penalty, seqs[a, end_beams[a][k]].tolist() + [end_tokens[a][k]]))
