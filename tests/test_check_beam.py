"""check_beam_step (notebook 10), fed right answers written several ways and the bugs learners write.

Each buggy answer is written the way a learner would write it, not with the check's own simulation.
"""

from __future__ import annotations

import pytest
import torch

from check_helpers import assert_named, assert_passes, stub
from transformer_lessons.checks.beam import _best_candidates, _beam_cases, _beam_variant, check_beam_step

# --- beam_step ----------------------------------------------------------------------------


def beam_reference(scores, log_probs, K):
    V = log_probs.size(1)
    top, idx = (scores[:, None] + log_probs).view(-1).topk(K)  # (K,) of K·V
    return top, idx // V, idx % V


def beam_per_beam_then_joint(scores, log_probs, K):
    # Each prefix's own K best, then the best K of those K·K: the K best overall are always among them.
    V = log_probs.size(1)
    cand = scores[:, None] + log_probs  # (K, V)
    top, tok = cand.topk(min(K, V), dim=-1)  # (K, K)
    best, pos = top.flatten().topk(K)
    parent = torch.div(pos, top.size(1), rounding_mode="floor")
    return best, parent, tok.flatten()[pos]


def beam_transposed(scores, log_probs, K):
    # Flattening (V, K) instead: index i is token i // K and prefix i % K.
    top, idx = (scores[None, :] + log_probs.t()).reshape(-1).topk(K)
    return top, idx % K, idx // K


def beam_loop(scores, log_probs, K):
    cands = sorted(
        ((scores[k] + log_probs[k, v]).item(), k, v) for k in range(len(scores)) for v in range(log_probs.size(1))
    )[::-1][:K]
    return torch.tensor([c[0] for c in cands]), torch.tensor([c[1] for c in cands]), torch.tensor([c[2] for c in cands])


def beam_learner(bug):
    def fn(scores, log_probs, K):
        V = log_probs.size(1)
        if bug == "per_beam":
            best, token = (scores[:, None] + log_probs).max(dim=-1)
            return best, torch.arange(K), token
        if bug == "per_beam_topk":
            top, idx = (scores[:, None] + log_probs).topk(K, dim=-1)  # (K, K)
            return top, torch.arange(K)[:, None].expand(K, K), idx
        cand = log_probs if bug == "no_prefix" else scores[:, None] + log_probs
        if bug == "multiply":
            cand = scores.exp()[:, None] * log_probs.exp()
        top, idx = cand.view(-1).topk(K)
        if bug == "swapped":
            return top, idx % V, idx // V
        if bug == "divide_by_k":
            return top, idx // K, idx % K
        if bug == "float_parent":
            return top, idx / V, idx % V
        if bug == "unsorted":
            return top.flip(0), (idx // V).flip(0), (idx % V).flip(0)
        return top, idx // V, idx % V

    return fn


def test_beam_reference_passes(capsys):
    assert_passes(check_beam_step, beam_reference, "beam_step", capsys)


@pytest.mark.parametrize(
    "answer", [beam_per_beam_then_joint, beam_transposed, beam_loop], ids=["per_beam_then_joint", "transposed", "loop"]
)
def test_beam_other_correct_answers_pass(answer, capsys):
    assert_passes(check_beam_step, answer, "beam_step", capsys)


@pytest.mark.parametrize(
    "bug, hint",
    [
        ("per_beam", "each prefix keeps its own best token"),
        ("per_beam_topk", r"one row per prefix: a topk per beam"),
        ("no_prefix", "prefix scores are not added"),
        ("multiply", "your scores are probabilities"),
        ("swapped", "parent and token are swapped"),
        ("divide_by_k", "divide .and take the rest. by V"),
        ("float_parent", "integer dtype"),
        ("unsorted", "best first"),
    ],
)
def test_beam_bugs_are_named(bug, hint, capsys):
    assert_named(check_beam_step, beam_learner(bug), "beam_step", hint)
    assert capsys.readouterr().out == ""


def test_beam_variant_with_default_knobs_is_the_reference():
    for scores, log_probs, K in _beam_cases():
        got, expected = _beam_variant(scores, log_probs, K), _best_candidates(scores, log_probs, K)
        assert torch.allclose(got[0], expected[0]) and all(torch.equal(g, e) for g, e in zip(got[1:], expected[1:]))


# --- stubs, random state, docstrings ------------------------------------------------------


@pytest.mark.parametrize(
    "check, name",
    [
        (check_beam_step, "beam_step"),
    ],
)
def test_stub_says_not_implemented_and_returns_none(check, name, capsys):
    assert check(stub) is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"{name}: not implemented yet — ")


@pytest.mark.parametrize("check", [check_beam_step])
def test_every_check_is_documented_with_its_signature(check):
    doc = check.__doc__ or ""
    assert "Expected signature:" in doc and "Raises:" in doc, check.__name__
