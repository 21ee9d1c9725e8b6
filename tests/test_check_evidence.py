"""A check names a bug only when it explains every input it ran (issue 29, checks/evidence.py).

Each answer here makes a known mistake on the check's FIRST input and is right (or does
something else) on the others. The checks used to try their bugs on the first input where
the answer differed and name the one that matched there: each of these answers was told a
mistake it does not make everywhere. Now the check says what differs instead; the whole bug,
made on every input, is still named (the second half of the test).
"""

from __future__ import annotations

import pytest
import torch

from check_helpers import check_named, failure
from test_check_beam import beam_learner, beam_reference
from test_check_decoder_layer import DecoderLayer
from test_check_embeddings import BuggyPositions
from test_check_encoder_layer import EncoderLayer
from test_check_layers import BuggyLayerNorm
from test_check_multi_head import BuggyMHA
from transformer_lessons import data, decode
from transformer_lessons.checks import batching, decoding, generation, vocab
from transformer_lessons.checks.common import ExerciseError
from transformer_lessons.loss import LabelSmoothingLoss
from transformer_lessons.masks import causal_mask
from transformer_lessons.attention import scaled_dot_product_attention
from transformer_lessons.layers import sinusoidal_positional_encoding


def _ls_right(logits, target, pad_id, eps):
    return LabelSmoothingLoss(logits.size(-1), pad_id, eps)(logits, target)


def _ls_summed(logits, target, pad_id, eps):
    return _ls_right(logits, target, pad_id, eps) * (target != pad_id).sum()


def _sdpa_unscaled(q, k, v, mask=None):
    return scaled_dot_product_attention(q * q.size(-1) ** 0.5, k, v, mask)


def _rms_right(x, weight, eps=1e-5):  # written out: the check refuses a call to F.rms_norm
    return weight * x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)


def _rms_no_gain(x, weight, eps=1e-5):
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)


def append_kv(cache_k, cache_v, new_k, new_v):
    return torch.cat([cache_k, new_k], dim=2), torch.cat([cache_v, new_v], dim=2)


def reorder_kv(cache_k, cache_v, parent, keep):
    rows = (torch.arange(parent.size(0))[:, None] * parent.size(1) + parent)[keep].flatten()
    return cache_k.index_select(0, rows), cache_v.index_select(0, rows)


def _append_new_first(cache_k, cache_v, new_k, new_v):
    return torch.cat([new_k, cache_k], dim=2), torch.cat([new_v, cache_v], dim=2)


def _not_reordered(cache_k, cache_v, parent, keep):
    return cache_k, cache_v


def _vocab_right(token_lists, min_freq):
    return data.Vocab.build(token_lists, min_freq=min_freq).itos


def _vocab_lowercased(token_lists, min_freq):
    return vocab._vocab_itos(token_lists, min_freq, lower=True)


def _batches_strict(lengths, max_tokens):
    return batching._greedy(lengths, max_tokens, strict=True)


def _batches_right(lengths, max_tokens):
    return batching._greedy(lengths, max_tokens)


def _loop_not_fed_back(model, src, n_tokens, bos_id):
    return generation._loop(model, src, n_tokens, bos_id, feed="bos")


def _decode_first_position(model, src, src_mask, max_new_tokens, bos_id, eos_id):
    return decoding._greedy(model, src, src_mask, max_new_tokens, bos_id, eos_id, position=0)


def _on_first_input(buggy, right, first):
    """Buggy where ``first(*args)`` says this is the check's first input, right on the others."""
    return lambda *args, **kwargs: (buggy if first(*args, **kwargs) else right)(*args, **kwargs)


def _module_with_bug(cls, bug, first=None):
    """``cls`` (a module of the checks' tests whose forward reads ``self.bug``) making ``bug`` where
    ``first(module, *inputs)`` says this is the check's first input and no mistake on the others; with no
    ``first``, on every input."""

    def forward(self, *args, **kwargs):
        self.bug = bug if first is None or first(self, *args, **kwargs) else None
        return cls.forward(self, *args, **kwargs)

    return type(f"{cls.__name__}_{bug}", (cls,), {"forward": forward})


# name: (the check, the bug, the right answer, which input is the check's first, the bug's hint)
CASES = {
    "causal_mask": (
        lambda size: torch.ones(size, size, dtype=torch.bool).tril(-1),
        causal_mask,
        lambda size: size == 5,
        "the diagonal is excluded",
    ),
    "rms_norm": (_rms_no_gain, _rms_right, lambda x, weight, eps=1e-5: eps == 1e-5, "the gain is missing"),
    "label_smoothing_loss": (  # its first case has 10 positions (the property checks append 3 more)
        _ls_summed,
        _ls_right,
        lambda logits, *rest: logits.size(0) >= 10,
        "you return the sum over positions",
    ),
    "scaled_dot_product_attention": (
        _sdpa_unscaled,
        scaled_dot_product_attention,
        lambda q, k, v, mask=None: mask is None,
        "forget to divide the scores by sqrt(d_k)",
    ),
    "positional_encoding": (
        lambda L, D: sinusoidal_positional_encoding(L, D, base=1000.0),
        sinusoidal_positional_encoding,
        lambda L, D: L == 50,
        "not 1000",
    ),
    "append_kv": (_append_new_first, append_kv, lambda ck, *rest: ck.size(2) == 1, "the new position comes first"),
    "reorder_kv": (
        _not_reordered,
        reorder_kv,
        lambda ck, cv, parent, keep: parent.tolist() == [[1, 0], [1, 0]],
        "not reordered",
    ),
    "build_vocab": (_vocab_lowercased, _vocab_right, lambda token_lists, min_freq: min_freq == 2, "lowercased"),
    "batch_by_tokens": (
        _batches_strict,
        _batches_right,
        lambda lengths, max_tokens: len(lengths) == 15,
        "you cut it with <",
    ),
    "greedy_loop": (
        _loop_not_fed_back,
        decode.greedy_decode,
        lambda model, src, *rest: src.size(0) == 5,
        "not fed back",
    ),
    "greedy_decode": (
        _decode_first_position,
        decode.greedy_decode,
        lambda model, src, *rest: src.size(0) == 6,
        "logits of the FIRST position",
    ),
    "beam_step": (  # its first case is the running beam, K = 4 (then K = 3, 1, 3)
        beam_learner("no_prefix"),
        beam_reference,
        lambda scores, log_probs, K: K == 4,
        "prefix scores are not added",
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_a_bug_made_on_the_first_input_only_is_not_named(name):
    buggy, right, first, hint = CASES[name]
    if name == "greedy_loop":  # fn(model, src, n_tokens, bos_id): the reference without a source mask
        right = lambda model, src, n, bos: decode.greedy_decode(model, src, None, n, bos)  # noqa: E731
    check = check_named(name)
    error = failure(check, _on_first_input(buggy, right, first))
    assert not error.known_bug and hint not in str(error), str(error)
    error = failure(check, buggy)  # the same mistake on every input: named
    assert error.known_bug and hint in str(error), str(error)


# name: (a module class of the check's tests, the bug it switches on, which input is the check's first, the bug's hint)
MODULE_CASES = {
    "multi_head_attention": (  # first: cross-attention without a mask
        BuggyMHA,
        "no_scale",
        lambda m, q, k, v, mask=None: mask is None,
        "forget to divide the scores by sqrt(d_head)",
    ),
    "encoder_layer": (EncoderLayer, "pre_norm", lambda m, x, src_mask=None: src_mask is None, "pre-norm"),
    "decoder_layer": (  # first: a memory as long as the target
        DecoderLayer,
        "pre_norm",
        lambda m, x, memory, *masks: memory.size(1) == x.size(1),
        "pre-norm",
    ),
    "layer_norm": (BuggyLayerNorm, "unbiased", lambda m, x: m.eps == 1e-5, "biased variance"),
    "learned_positions": (  # first: L = 5, then L = max_len = 12
        BuggyPositions,
        "row_zero",
        lambda m, x: x.size(1) == 5,
        "every position got row 0",
    ),
}


@pytest.mark.parametrize("name", MODULE_CASES)
def test_a_module_bug_made_on_the_first_input_only_is_not_named(name):
    cls, bug, first, hint = MODULE_CASES[name]
    check = check_named(name)
    error = failure(check, _module_with_bug(cls, bug, first))
    assert not error.known_bug and hint not in str(error), str(error)
    error = failure(check, _module_with_bug(cls, bug))  # the same mistake on every input: named
    assert error.known_bug and hint in str(error), str(error)


def test_a_crash_is_no_evidence_and_the_first_failure_is_reported():
    from transformer_lessons.checks.evidence import Inputs  # here, so the tests above also run on the old checks

    seen = Inputs()
    with seen.one():
        seen.compare(torch.zeros(2), torch.ones(2), [("all zeros", lambda: torch.zeros(2))], "the output")
    with seen.one():
        raise ExerciseError("your code raised RuntimeError")
    with pytest.raises(ExerciseError) as error:  # the input that crashed neither confirms nor refutes the bug
        seen.verdict()
    assert error.value.known_bug and str(error.value) == "all zeros"
    seen = Inputs()
    with seen.one():
        raise ExerciseError("your code raised RuntimeError")
    with seen.one():
        seen.compare(torch.zeros(2), torch.ones(2), [("all zeros", lambda: torch.zeros(2))], "the output")
    with pytest.raises(ExerciseError, match="RuntimeError"):  # the first input that fails is what is reported
        seen.verdict()
