"""Beam search, recorded: every hypothesis it weighed for one sentence, and what became of it.

:func:`~transformer_lessons.beam.beam_search` returns the best sentence it found; what it weighed
on the way is gone. :func:`beam_tree` runs the same search on one sentence, with the same steps
(:func:`~transformer_lessons.beam.start_beams`, :func:`~transformer_lessons.beam.next_log_probs`,
:func:`~transformer_lessons.beam.extend_alive`), and keeps a record of it as a tree.

At each step beam search extends each of its ``K`` live prefixes by every token and looks only at
the ``2K`` best extensions, ranked by their summed log-probability ``log P = Σ log p``. So the tree
holds, per step, those ``2K`` candidates (paper §6.1: ``K = 4``), each a :class:`BeamNode` with its
token's log-probability, its prefix's ``log P``, and what became of it:

* **finished**: among the first ``K`` and ending in ``<eos>`` (at ``max_new_tokens``: among the first
  ``K``, whatever its last token, cut off as greedy decoding is). It is scored
  ``log P / lp(|Y|)`` with the GNMT length penalty ``lp(|Y|) = ((5 + |Y|) / 6)^α``
  (Wu et al. 2016, Eq. 14; paper §6.1: ``α = 0.6``). The search stops once ``K`` have finished.
* **kept**: one of the first ``K`` candidates that do not end in ``<eos>``; it is extended at the next step.
* **dropped**: everything else (an ``<eos>`` ranked below ``K``, a candidate ranked too low, or every
  candidate still unfinished when the search stops).

The winner is the finished hypothesis with the best score: what ``beam_search`` returns. Dividing by
``lp`` is what lets a longer hypothesis beat a shorter one whose raw ``log P`` is higher. The tree also
holds greedy decoding's output (:func:`~transformer_lessons.decode.greedy_decode`, a beam of one), so
a picture (``viz.plot_beam_tree``) can show where beam search and greedy part ways.
:func:`sentence_beam_tree` does it all for a German sentence, read as ``translate`` reads it.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

import torch

from transformer_lessons.beam import extend_alive, length_penalty, next_log_probs, start_beams
from transformer_lessons.config import MAX_BEAM_SIZE, MAX_OUTPUT_EXTRA
from transformer_lessons.decode import greedy_decode
from transformer_lessons.masks import padding_mask
from transformer_lessons.model import Transformer

# sentence_beam_tree reads a sentence exactly as translate() does, with translate's own helpers.
from transformer_lessons.translation import (
    _check_encodable,
    _check_vocab_fits,
    _cut_long_sources,
    _german_words,
    _source_batch,
)

if TYPE_CHECKING:
    from transformer_lessons.data import Vocab

KEPT, FINISHED, DROPPED = "kept", "finished", "dropped"  # what became of a candidate


@dataclass(frozen=True)
class BeamNode:
    """One candidate beam search weighed: its parent's prefix, one token longer.

    Attributes:
        id: its index in :attr:`BeamTree.nodes` (the root, ``<bos>``, is 0).
        parent: the id of the prefix it extends (``None`` for the root).
        step: how many tokens it has after ``<bos>`` (the root: 0).
        rank: its place among its step's candidates, best ``cum_logp`` first (0, 1, ... up to ``2K - 1``).
        token: the id it appends.
        token_logp: ``log p(token | prefix, source)``, the model's log-probability of that token.
        cum_logp: ``log P`` of the whole prefix: its parent's ``cum_logp`` + ``token_logp``.
        status: ``"kept"``, ``"finished"`` or ``"dropped"`` (the root: ``"kept"``).
        score: ``cum_logp / length_penalty(step, α)`` for a finished node, else ``None``.
    """

    id: int
    parent: int | None
    step: int
    rank: int
    token: int
    token_logp: float
    cum_logp: float
    status: str
    score: float | None = None


@dataclass(frozen=True)
class BeamTree:
    """What :func:`beam_tree` recorded: every candidate, the winner, and greedy decoding's output.

    Attributes:
        nodes: every :class:`BeamNode`, the root first, then step by step, each step best first.
        winner: the id of the best finished node: the hypothesis ``beam_search`` returns.
        greedy: greedy decoding's tokens after ``<bos>`` (``<eos>`` last when it ended the sentence).
        src_ids: the source ids searched.
        beam_size: ``K``.
        alpha: the length penalty's ``α``.
        max_new_tokens: the most tokens the search could write.
        bos_id, eos_id: the special ids.
    """

    nodes: list[BeamNode]
    winner: int
    greedy: list[int]
    src_ids: list[int]
    beam_size: int
    alpha: float
    max_new_tokens: int
    bos_id: int
    eos_id: int

    @property
    def n_steps(self) -> int:
        """How many steps the search ran."""
        return self.nodes[-1].step

    def at_step(self, step: int) -> list[BeamNode]:
        """The candidates of ``step``, best first (step 0: the root alone)."""
        return [node for node in self.nodes if node.step == step]

    def path(self, node_id: int) -> list[BeamNode]:
        """The nodes from step 1 down to ``node_id``: the hypothesis it stands for, token by token."""
        path = []
        node = self.nodes[node_id]
        while node.parent is not None:
            path.append(node)
            node = self.nodes[node.parent]
        return path[::-1]

    def tokens(self, node_id: int) -> list[int]:
        """The tokens of ``node_id``'s hypothesis, after ``<bos>``."""
        return [node.token for node in self.path(node_id)]

    @property
    def finished(self) -> list[BeamNode]:
        """The finished hypotheses, in the order the search collected them."""
        return [node for node in self.nodes if node.status == FINISHED]

    @property
    def winner_tokens(self) -> list[int]:
        """The winning hypothesis's tokens after ``<bos>``: ``beam_search``'s output."""
        return self.tokens(self.winner)

    @property
    def score(self) -> float:
        """The winner's score ``log P / lp``: what ``beam_search(..., return_scores=True)`` reports."""
        return self.nodes[self.winner].score

    def greedy_nodes(self) -> list[BeamNode]:
        """The nodes of the tree on greedy decoding's path, from step 1 on.

        Greedy's prefix can leave the beam (outranked by ``2K`` extensions of other prefixes): the list
        then stops where it did, shorter than :attr:`greedy`.
        """
        on_path, parent = [], 0
        for token in self.greedy:
            child = next((n for n in self.nodes if n.parent == parent and n.token == token), None)
            if child is None:
                break
            on_path.append(child)
            parent = child.id
        return on_path

    @property
    def parting_step(self) -> int | None:
        """The first step at which the winner and greedy write different tokens; ``None`` when they agree."""
        beam, greedy = self.winner_tokens, self.greedy
        for step, (a, b) in enumerate(zip(beam, greedy), start=1):
            if a != b:
                return step
        return None if len(beam) == len(greedy) else min(len(beam), len(greedy)) + 1


@torch.no_grad()
def beam_tree(
    model: Transformer,
    src_ids: Sequence[int] | torch.Tensor,
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    max_new_tokens: int | None = None,
    src_mask: torch.Tensor | None = None,
) -> BeamTree:
    """Run beam search on one sentence and record every candidate it weighed (see the module's docstring).

    The search is :func:`~transformer_lessons.beam.beam_search`'s, step for step (without a key/value
    cache): the tree's winner and its score are what ``beam_search(..., return_scores=True)`` returns
    for this sentence.

    Args:
        model: the Transformer, in eval mode.
        src_ids: one source sentence's ids, ``<eos>`` included: a list, a ``(S,)`` or a ``(1, S)`` tensor.
        bos_id, eos_id: the target side's special ids.
        beam_size: ``K`` (paper: 4); ``1`` is greedy decoding.
        length_penalty: ``α`` of the GNMT length penalty (paper: 0.6; 0 ranks by ``log P`` alone).
        max_new_tokens: the most tokens to write, ``<eos>`` included (default, as ``translate``: the source
            length + 50, at most the model's ``max_len``).
        src_mask: ``(1, 1, 1, S)`` padding mask, or ``None`` (one sentence has no padding).

    Returns:
        A :class:`BeamTree`: at most ``2K`` nodes per step.
    """
    src, src_mask = _one_sentence(model, src_ids, src_mask)  # (1, S), (1, 1, 1, S) or None
    # The paper's letters; the argument length_penalty is not read again (its name is also a function's).
    K, alpha = _check_search(beam_size, length_penalty)
    max_new_tokens = _output_limit(model, src, max_new_tokens)
    memory, mask, seqs, scores = start_beams(model, src, src_mask, bos_id, K)  # (K, S, D), ..., (1, K, 1), (1, K)
    nodes = [BeamNode(0, None, 0, 0, bos_id, 0.0, 0.0, KEPT)]
    rows: list[int | None] = [0] + [None] * (K - 1)  # the node each live prefix is (None: a -inf placeholder)
    for t in range(1, max_new_tokens + 1):
        log_p = next_log_probs(model, memory, mask, seqs.view(K, t), None)  # (K, V)
        V = log_p.size(-1)
        # As in beam_search: the 2K best one-token extensions of the K prefixes, by summed log-probability.
        cand = (scores.unsqueeze(-1) + log_p.view(1, K, V)).view(1, K * V)  # (1, K*V)
        top_scores, top_idx = cand.topk(min(2 * K, K * V), dim=-1)  # (1, 2K)
        beam, token = top_idx // V, top_idx % V  # which prefix each candidate extends, and with what
        step = _candidates(nodes, rows, log_p, top_scores[0], beam[0], token[0], t)
        done = _finish(step, nodes, t, alpha, K, eos_id, last=t == max_new_tokens)
        if not done:
            seqs, scores, parent = extend_alive(seqs, top_scores, beam, token, token == eos_id, K)  # (1, K, t + 1)
            rows = _survivors(step, rows, parent[0].tolist(), seqs[0, :, -1].tolist(), scores[0].tolist())
        nodes.extend(step)
        if done:
            break
    return _tree(nodes, model, src, src_mask, bos_id, eos_id, K, alpha, max_new_tokens)


def _one_sentence(model, src_ids, src_mask) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``src_ids`` as a ``(1, S)`` tensor on the model's device, and the mask; one clear error for anything else."""
    if getattr(model, "training", False):
        raise ValueError("the model is in training mode (dropout on): call model.eval() before beam_tree")
    src = src_ids if isinstance(src_ids, torch.Tensor) else torch.tensor(src_ids)
    if src.dtype.is_floating_point or src.dtype == torch.bool or src.dim() not in (1, 2) or src.numel() == 0:
        raise ValueError(
            "src_ids must be one sentence's ids (a list of ints or a (S,) tensor), "
            f"got {src.dtype} of shape {tuple(src.shape)}"
        )
    src = src.reshape(1, -1) if src.dim() == 1 else src  # (S,) -> (1, S)
    if src.size(0) != 1:
        raise ValueError(
            f"beam_tree follows one sentence, but src_ids holds a batch of {src.size(0)}: pass one row, e.g. src[0]"
        )
    if src_mask is not None and src_mask.size(0) != 1:
        raise ValueError(f"src_mask must be one sentence's mask (1, 1, 1, S), got shape {tuple(src_mask.shape)}")
    param = next(iter(model.parameters()), None)  # a stand-in model without parameters decodes where src is
    device = src.device if param is None else param.device
    return src.to(device), None if src_mask is None else src_mask.to(device)


def _check_search(beam_size, alpha) -> tuple[int, float]:
    """``(K, α)``, or one clear error for a beam size or length penalty out of range."""
    whole = isinstance(beam_size, numbers.Integral) and not isinstance(beam_size, bool)
    if not whole or not 1 <= beam_size <= MAX_BEAM_SIZE:
        raise ValueError(
            f"beam_size must be a whole number from 1 to {MAX_BEAM_SIZE}, got {beam_size!r} (the paper uses 4)"
        )
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 <= alpha < math.inf:
        raise ValueError(
            f"length_penalty (α) must be a number >= 0, got {alpha!r} (the paper uses 0.6; 0 turns it off)"
        )
    return int(beam_size), float(alpha)


def _output_limit(model, src: torch.Tensor, max_new_tokens) -> int:
    """``max_new_tokens``, or ``translate``'s default: the source length + 50, at most the model's ``max_len``."""
    if max_new_tokens is None:
        config = getattr(model, "config", None)
        limit = src.size(1) + MAX_OUTPUT_EXTRA
        return min(limit, config.max_len) if config is not None else limit
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a whole number >= 1 (or None), got {max_new_tokens!r}")
    return int(max_new_tokens)


def _candidates(nodes, rows, log_p, top_scores, beam, token, t: int) -> list[BeamNode]:
    """The step's candidates as nodes (status ``dropped`` until decided), best first; ``-inf`` ones left out.

    A ``-inf`` candidate extends a placeholder prefix (at step 1 all ``K`` prefixes are the same ``<bos>``,
    and only the first may grow): beam search never finishes or keeps it, so the tree does not show it.
    """
    token_logp = log_p[beam, token].tolist()  # (2K,): log p of each candidate's token after its prefix
    step = []
    for rank, (cum, k, tok, lp) in enumerate(zip(top_scores.tolist(), beam.tolist(), token.tolist(), token_logp)):
        if math.isfinite(cum):
            step.append(BeamNode(len(nodes) + len(step), rows[k], t, rank, tok, lp, cum, DROPPED))
    return step


def _finish(step: list[BeamNode], nodes: list[BeamNode], t: int, alpha: float, K: int, eos_id: int, last: bool) -> bool:
    """Mark the step's finished candidates (in place); returns whether the search is over.

    As in ``beam_search``: of the first ``K`` candidates, those ending in ``<eos>`` finish (at the last step,
    all of them), while fewer than ``K`` hypotheses have finished; the search ends with ``K`` of them.
    """
    n_finished = sum(node.status == FINISHED for node in nodes)
    penalty = length_penalty(t, alpha)
    for i, node in enumerate(step):
        if node.rank < K and (last or node.token == eos_id) and n_finished < K:
            step[i] = replace(node, status=FINISHED, score=node.cum_logp / penalty)
            n_finished += 1
    return last or n_finished >= K


def _survivors(
    step: list[BeamNode], rows: list[int | None], parents: list[int], tokens: list[int], scores: list[float]
) -> list[int | None]:
    """Mark the candidates ``extend_alive`` kept (in place); returns the node each of the ``K`` new prefixes is.

    Survivor ``k`` extends the prefix in row ``parents[k]`` (the node ``rows[parents[k]]``) with ``tokens[k]``:
    that pair names one candidate. A ``-inf`` survivor is a placeholder (fewer than ``K`` candidates without
    ``<eos>`` had a finite score), which no node stands for.
    """
    by_choice = {(node.parent, node.token): i for i, node in enumerate(step)}
    new_rows: list[int | None] = []
    for row, tok, score in zip(parents, tokens, scores):
        if not math.isfinite(score):
            new_rows.append(None)
            continue
        i = by_choice[(rows[row], tok)]
        step[i] = replace(step[i], status=KEPT)
        new_rows.append(step[i].id)
    return new_rows


def _tree(nodes, model, src, src_mask, bos_id: int, eos_id: int, K: int, alpha: float, max_new_tokens: int) -> BeamTree:
    """The :class:`BeamTree`: the winner (the first best finished node, as ``beam_search``'s ``max``) and greedy's path."""
    winner = max((node for node in nodes if node.status == FINISHED), key=lambda node: node.score)
    greedy = greedy_decode(model, src, src_mask, max_new_tokens, bos_id, eos_id)[0, 1:].tolist()  # (L,), no <bos>
    greedy = greedy[: greedy.index(eos_id) + 1] if eos_id in greedy else greedy
    return BeamTree(nodes, winner.id, greedy, src[0].tolist(), K, alpha, max_new_tokens, bos_id, eos_id)


def sentence_beam_tree(
    model: Transformer,
    sentence: str,
    src_vocab: "Vocab",
    tgt_vocab: "Vocab",
    beam_size: int = 4,
    length_penalty: float = 0.6,
) -> BeamTree | None:
    """:func:`beam_tree` for a German sentence, read as :func:`~transformer_lessons.translation.translate` reads it.

    spaCy's tokens, the units of the model's vocabulary (BPE pieces when it has them), cut to the model's
    ``max_len`` with a note (:mod:`transformer_lessons.notes`), then ``<eos>``; the output is capped at the
    source length + 50 tokens. So the winner's words are what ``translate(model, sentence, beam_size=...,
    length_penalty=..., use_cache=False)`` writes (``beam_size=1``: greedy decoding's).

    Returns:
        The :class:`BeamTree`, or ``None`` for a blank sentence (nothing to search).
    """
    if not isinstance(sentence, str):
        raise TypeError(f"sentence must be a str, got {type(sentence).__name__}")
    _check_encodable(sentence, 0)
    _check_vocab_fits(model, src_vocab, tgt_vocab)
    words = _german_words([sentence])[0]
    if not words:
        return None
    model.eval()  # as translate does: dropout off
    units = _cut_long_sources([src_vocab.segment(words)], model.config.max_len - 1)[0]
    src = _source_batch([src_vocab.encode(units)], src_vocab).to(next(model.parameters()).device)  # (1, S)
    src_mask = padding_mask(src, src_vocab.pad_id)  # (1, 1, 1, S)
    return beam_tree(model, src, tgt_vocab.bos_id, tgt_vocab.eos_id, beam_size, length_penalty, src_mask=src_mask)


__all__ = ["DROPPED", "FINISHED", "KEPT", "BeamNode", "BeamTree", "beam_tree", "sentence_beam_tree"]
