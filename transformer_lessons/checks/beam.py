"""Check for one step of beam search (paper §6.1: beam size 4): the joint top-K over K·V candidates.

The course's :func:`transformer_lessons.beam.beam_search` does this step inline, for
many sentences at once (``cand = scores[..., None] + log_p``, ``topk`` over ``K·V``,
then ``// V`` and ``% V``), so there is no function of its own to import. The check's
reference, :func:`_best_candidates`, is written differently on purpose: it lists every
candidate ``(score, prefix, token)`` and sorts them, without ``topk`` or index
arithmetic. :func:`_beam_variant` reproduces the mistakes learners make.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from transformer_lessons.checks.common import (
    Bug,
    ExerciseError,
    call_answer,
    exercise,
    expect_tensor,
    expect_unchanged,
    known_bug,
)
from transformer_lessons.checks.evidence import Inputs
from transformer_lessons.checks.slips import Slip, slip_bugs

_NEG_INF = float("-inf")


def _best_candidates(scores: torch.Tensor, log_probs: torch.Tensor, K: int) -> tuple[torch.Tensor, ...]:
    """The K best of all K·V extensions, best first: ``(new_scores, parent, token)``, by listing and sorting them."""
    candidates = [
        (float(scores[k] + log_probs[k, v]), k, v) for k in range(log_probs.size(0)) for v in range(log_probs.size(1))
    ]
    best = sorted(candidates, key=lambda c: -c[0])[:K]
    return (torch.tensor([c[0] for c in best]), torch.tensor([c[1] for c in best]), torch.tensor([c[2] for c in best]))


def _beam_variant(scores, log_probs, K, *, add_prefix=True, joint=True, swap=False, divisor=None, combine="add"):
    """One beam step with knobs that reproduce the common bugs (defaults: the correct step)."""
    V = log_probs.size(1)
    if combine == "multiply_probs":  # probabilities multiplied and returned as probabilities
        cand = scores.exp()[:, None] * log_probs.exp()  # (K, V)
    elif combine == "multiply_logs":
        cand = scores[:, None] * log_probs
    else:
        cand = scores[:, None] + log_probs if add_prefix else log_probs.clone()  # (K, V)
    if not joint:  # each prefix keeps its own best token
        best, token = cand.max(dim=-1)  # (K,)
        return best, torch.arange(log_probs.size(0)), token
    top, idx = cand.reshape(-1).topk(K)  # (K,) over K·V
    d = divisor or V
    parent, token = idx // d, idx % d
    return (top, token, parent) if swap else (top, parent, token)


def _beam_cases() -> list[tuple[torch.Tensor, torch.Tensor, int]]:
    """``(scores (K,), log_probs (K, V), K)``: a running beam, the first step (one live prefix), K = 1, a strong prefix."""
    g = torch.Generator().manual_seed(0)

    def log_probs(k, v):
        return torch.log_softmax(2 * torch.randn(k, v, generator=g), dim=-1)  # (K, V)

    return [
        (torch.tensor([-1.2, -1.9, -2.4, -4.0]), log_probs(4, 9), 4),  # a running beam: best prefix first
        (
            torch.tensor([0.0, _NEG_INF, _NEG_INF]),
            log_probs(1, 8).expand(3, 8).clone(),
            3,
        ),  # step 1: only <bos> is live
        (torch.tensor([-0.7]), log_probs(1, 6), 1),  # K = 1 is greedy decoding
        (torch.tensor([-0.1, -6.0, -7.0]), log_probs(3, 5), 3),  # a strong prefix: every survivor extends it
    ]


def _beam_bugs(scores: torch.Tensor, log_probs: torch.Tensor, K: int) -> list[Bug]:
    """The known mistakes of one beam step, alone and two at a time: each hint, and what it returns."""
    slips = [
        Slip(
            "each prefix keeps its own best token (a top-1 per beam): the K survivors are the K best of ALL K·V "
            "extensions, so a strong prefix may get several and a weak one none. Flatten the candidates before choosing"
            "[[: cand.view(-1).topk(K)]]",
            {"joint": False},
        ),
        Slip(
            "the prefix scores are not added: a candidate's score is its prefix's score plus the token's "
            "log-probability[[: cand = scores[:, None] + log_probs]]",
            {"add_prefix": False},
        ),
        Slip(
            "parent and token are swapped: in the flattened (K·V,) candidates, index i is prefix i // V and token i % V",
            {"swap": True},
        ),
        Slip(
            "divide (and take the rest) by V, the vocabulary size: index i of the flattened (K, V) candidates is "
            "prefix i // V, token i % V",
            {"divisor": K},
        ),
        Slip(
            "your scores are probabilities: log-probabilities add (score + log p), they are not multiplied, and the "
            "scores stay log-probabilities (probabilities of long sentences underflow to 0)",
            {"combine": "multiply_probs"},
        ),
        Slip("log-probabilities add: score + log p, not score * log p", {"combine": "multiply_logs"}),
    ]
    return slip_bugs(functools.partial(_beam_variant, scores, log_probs, K), slips)


def _expect_step(got: Any, K: int, V: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three tensors of shape (K,): float scores, integer parents and tokens."""
    if got is None:
        raise ExerciseError("your function returned None: did you forget a `return`?")
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        raise ExerciseError("return three tensors, (new_scores, parent, token), each of shape (K,)")
    if any(isinstance(t, torch.Tensor) and t.dim() == 2 and t.size(0) == K and t.size(1) > 1 for t in got):
        raise known_bug(
            f"your outputs are ({K}, ...) tables, one row per prefix: a topk per beam. The K survivors are "
            "the K best of ALL K·V extensions: flatten the candidates first[[: cand.view(-1).topk(K)]]"
        )
    hint = f"Each output has one entry per survivor: (K,) = ({K},)"
    new_scores = expect_tensor(got[0], "new_scores", shape=(K,), shape_hint=hint, finite=False)
    parent = expect_tensor(got[1], "parent", shape=(K,), shape_hint=hint)
    token = expect_tensor(got[2], "token", shape=(K,), shape_hint=hint)
    for name, t in (("parent", parent), ("token", token)):
        if t.is_floating_point() or t.dtype == torch.bool:
            raise ExerciseError(
                f"{name} should hold indices (an integer dtype, torch.long), got {t.dtype}: use // and %, not /"
            )
    return new_scores, parent.long(), token.long()


@exercise(
    "beam_step",
    "score every extension (its prefix's score plus its log-probability), keep the K best of all K·V of them, "
    "and return their scores, their prefixes and their tokens",
)
def check_beam_step(fn: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> str:
    """Check one step of beam search: extend K prefixes by every token, keep the K best (paper §6.1).

    Expected signature: ``fn(scores, log_probs, K) -> (new_scores, parent, token)``:
    every live prefix ``k`` (its summed log-probability ``scores[k]``) is extended by
    every token ``v``, scored ``scores[k] + log_probs[k, v]``; of those ``K·V``
    candidates the ``K`` best survive, best first. ``parent[i]`` is the prefix the
    ``i``-th survivor extends and ``token[i]`` its new token. What
    ``beam.beam_search`` does at each step with ``topk`` over ``K·V`` and ``// V``, ``% V``.

    Checked against a sorted list of all candidates on a running beam, on the first
    step (scores ``[0, -inf, ...]``: one live prefix), with ``K = 1`` (greedy), and on a beam
    whose best prefix is far ahead (every survivor extends it).

    Shape:
        scores ``(K,)``, log_probs ``(K, V)`` -> ``(K,)``, ``(K,)`` long, ``(K,)`` long.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (a top-1 per beam instead of the joint
            top-K, prefix scores not added, parent and token swapped, // K for // V,
            probabilities multiplied, survivors not best first).
    """
    seen = Inputs()  # a bug is named only if it explains every input
    for scores, log_probs, K in _beam_cases():
        with seen.one():
            V = log_probs.size(1)
            inputs = {"scores": scores.clone(), "log_probs": log_probs.clone()}
            got = call_answer(
                fn, inputs["scores"], inputs["log_probs"], K, hint="scores (K,), log_probs (K, V), K an int"
            )
            expect_unchanged({"scores": scores, "log_probs": log_probs}, inputs)
            got = _expect_step(got, K, V)
            expected = _best_candidates(scores, log_probs, K)
            if not torch.equal(got[1] * V + got[2], expected[1] * V + expected[2]):
                same = sorted((got[1] * V + got[2]).tolist()) == sorted((expected[1] * V + expected[2]).tolist())
                if same:
                    raise known_bug(
                        "the right K survivors, in another order: return them best first (topk sorts them; "
                        "sorted=True is its default)"
                    )
            seen.compare(
                got,
                expected,
                _beam_bugs(scores, log_probs, K),
                "(new_scores, parent, token)",
                "expected the K best of all K·V candidates, each its prefix's score plus its log-probability"
                "[[: cand = scores[:, None] + log_probs; top, idx = cand.view(-1).topk(K); "
                "parent, token = idx // V, idx % V]]",
            )
    seen.verdict()
    return "a running beam, the first step, K = 1 and a strong prefix against a sorted list of all K·V candidates"
