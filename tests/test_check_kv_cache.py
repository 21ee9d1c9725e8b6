"""The checks of notebook 12 (check_append_kv, check_reorder_kv), fed right answers written several ways and the bugs learners write.

Each answer is written the way a learner would write it, not with the check's own
bug simulations; tests/test_check_common.py's COVERAGE names them.
"""

from __future__ import annotations

import pytest
import torch

from check_helpers import assert_named, assert_passes, stub
from transformer_lessons.checks import ExerciseError, check_append_kv, check_reorder_kv
from transformer_lessons.checks.kv_cache import _append_cases, _appended, _reorder_cases, _reordered
from transformer_lessons.kv_cache import KVCache


# --- append_kv: right answers ------------------------------------------------------------


def append_cat(cache_k, cache_v, new_k, new_v):
    return torch.cat([cache_k, new_k], dim=2), torch.cat([cache_v, new_v], dim=2)


def append_preallocated(cache_k, cache_v, new_k, new_v):
    # A buffer of the final size, then both parts copied in.
    B, H, t, Dh = cache_k.shape
    T = new_k.size(2)
    k, v = cache_k.new_empty(B, H, t + T, Dh), cache_v.new_empty(B, H, t + T, Dh)
    k[:, :, :t], k[:, :, t:] = cache_k, new_k
    v[:, :, :t], v[:, :, t:] = cache_v, new_v
    return k, v


def append_concat_negative_dim(cache_k, cache_v, new_k, new_v):
    # dim=-2 is the time axis of (B, H, t, Dh) too; torch.concat is torch.cat.
    return tuple(torch.concat((old, new), dim=-2) for old, new in ((cache_k, new_k), (cache_v, new_v)))


def append_package(cache_k, cache_v, new_k, new_v):
    # The package's own KVCache, one layer.
    cache = KVCache([cache_k], [cache_v], [], [])
    return cache.append(0, new_k, new_v)


# --- append_kv: bugs ----------------------------------------------------------------------


def append_on_heads(cache_k, cache_v, new_k, new_v):
    return torch.cat([cache_k, new_k], dim=1), torch.cat([cache_v, new_v], dim=1)


def append_on_d_head(cache_k, cache_v, new_k, new_v):
    return torch.cat([cache_k, new_k], dim=-1), torch.cat([cache_v, new_v], dim=-1)


def append_on_batch(cache_k, cache_v, new_k, new_v):
    return torch.cat([cache_k, new_k]), torch.cat([cache_v, new_v])  # dim=0 by default


def append_stack(cache_k, cache_v, new_k, new_v):
    return torch.stack([cache_k, new_k], dim=2), torch.stack([cache_v, new_v], dim=2)


def append_reversed(cache_k, cache_v, new_k, new_v):
    return torch.cat([new_k, cache_k], dim=2), torch.cat([new_v, cache_v], dim=2)


def append_overwrite(cache_k, cache_v, new_k, new_v):
    return new_k, new_v


def append_forgets_values(cache_k, cache_v, new_k, new_v):
    return torch.cat([cache_k, new_k], dim=2), new_v


def append_values_unchanged(cache_k, cache_v, new_k, new_v):
    return torch.cat([cache_k, new_k], dim=2), cache_v


def append_values_get_keys(cache_k, cache_v, new_k, new_v):
    return torch.cat([cache_k, new_k], dim=2), torch.cat([cache_v, new_k], dim=2)


def append_swapped_outputs(cache_k, cache_v, new_k, new_v):
    k, v = torch.cat([cache_k, new_k], dim=2), torch.cat([cache_v, new_v], dim=2)
    return v, k


def append_keys_twice(cache_k, cache_v, new_k, new_v):
    k = torch.cat([cache_k, new_k], dim=2)
    return k, k


def append_returns_keys_only(cache_k, cache_v, new_k, new_v):
    return torch.cat([cache_k, new_k], dim=2)


def append_in_place(cache_k, cache_v, new_k, new_v):
    # "Appending" into the tail of the caller's buffer: it changes cache_k and cache_v.
    if cache_k.size(2) >= new_k.size(2) > 0:
        cache_k[:, :, -new_k.size(2) :] = new_k
        cache_v[:, :, -new_v.size(2) :] = new_v
    return torch.cat([cache_k, new_k], dim=2), torch.cat([cache_v, new_v], dim=2)


@pytest.mark.parametrize(
    "answer",
    [append_cat, append_preallocated, append_concat_negative_dim, append_package],
    ids=["cat", "preallocated", "concat_negative_dim", "package"],
)
def test_append_right_answers_pass(answer, capsys):
    assert_passes(check_append_kv, answer, "append_kv", capsys)


@pytest.mark.parametrize(
    "bug, hint",
    [
        (append_on_heads, r"joined along dim 1, the heads"),
        (append_on_d_head, r"joined along dim 3, the head width"),
        (append_on_batch, r"joined along dim 0, the batch"),
        (append_stack, r"torch\.stack puts the tensors side by side on a NEW axis"),
        (append_reversed, r"the new position comes first"),
        (append_overwrite, r"hold only the new position.*overwrote the cache"),
        (append_forgets_values, r"values hold only the new position.*forgot the value cache"),
        (append_values_unchanged, r"values are the old cache, unchanged.*value cache must grow"),
        (append_values_get_keys, r"new keys went into the value cache"),
        (append_swapped_outputs, r"keys and values are swapped"),
        (append_keys_twice, r"your values are the keys"),
        (append_returns_keys_only, r"returned one tensor"),
    ],
    ids=lambda x: x.__name__ if callable(x) else "",
)
def test_append_bugs_are_named(bug, hint, capsys):
    assert_named(check_append_kv, bug, "append_kv", hint, capsys)


def test_append_in_place_is_named(capsys):
    with pytest.raises(ExerciseError, match="changed its input `cache_k` in place"):
        check_append_kv(append_in_place)


def test_append_that_breaks_only_inside_a_decoder_is_caught(capsys):
    # Right on every small case (at most 6 positions), wrong beyond 6 positions: only the real decoder sees it.
    def append_drops_old_positions(cache_k, cache_v, new_k, new_v):
        k, v = append_cat(cache_k, cache_v, new_k, new_v)
        return (k, v) if k.size(2) <= 6 else (k[:, :, -6:], v[:, :, -6:])  # a sliding window

    with pytest.raises(ExerciseError, match="inside a real decoder"):
        check_append_kv(append_drops_old_positions)


def test_append_reference_is_torch_cat():
    for _, (B, H, t, T, Dh) in _append_cases():
        cache, new = torch.randn(B, H, t, Dh), torch.randn(B, H, T, Dh)
        assert torch.equal(_appended(cache, new), torch.cat([cache, new], dim=2))


# --- reorder_kv: right answers -----------------------------------------------------------


def _rows(parent, keep):
    A, K = parent.shape
    return (torch.arange(A)[:, None] * K + parent)[keep].flatten()  # (A' * K,) rows of the whole cache


def reorder_index_select(cache_k, cache_v, parent, keep):
    rows = _rows(parent, keep)
    return cache_k.index_select(0, rows), cache_v.index_select(0, rows)


def reorder_fancy_indexing(cache_k, cache_v, parent, keep):
    # Sentence by sentence: its K rows, then its survivors' parents among them.
    K = parent.size(1)
    k = torch.cat([cache_k[a * K : (a + 1) * K][parent[a]] for a in keep])
    v = torch.cat([cache_v[a * K : (a + 1) * K][parent[a]] for a in keep])
    return k, v


def reorder_loop_stack(cache_k, cache_v, parent, keep):
    K = parent.size(1)
    rows = [a * K + p for a in keep for p in parent[a].tolist()]
    return torch.stack([cache_k[r] for r in rows]), torch.stack([cache_v[r] for r in rows])


def reorder_view(cache_k, cache_v, parent, keep):
    # (A * K, ...) seen as (A, K, ...): gather the parents within each sentence, then keep sentences.
    A, K = parent.shape

    def one(cache):
        per_sentence = cache.view(A, K, *cache.shape[1:])  # (A, K, H, t, Dh)
        index = parent.view(A, K, 1, 1, 1).expand(-1, -1, *cache.shape[1:])
        return per_sentence.gather(1, index)[keep].flatten(0, 1)  # (A' * K, H, t, Dh)

    return one(cache_k), one(cache_v)


def reorder_package(cache_k, cache_v, parent, keep):
    from transformer_lessons import beam

    cache = KVCache([cache_k], [cache_v], [], [])
    beam._follow_beams(cache, parent, keep, parent.size(1))
    return cache.self_k[0], cache.self_v[0]


# --- reorder_kv: bugs --------------------------------------------------------------------


def reorder_unchanged(cache_k, cache_v, parent, keep):
    return cache_k, cache_v


def reorder_no_sentence_offset(cache_k, cache_v, parent, keep):
    # parent[a, k] used as a row of the whole cache: every sentence reads sentence 0's rows.
    rows = parent[keep].flatten()
    return cache_k[rows], cache_v[rows]


def reorder_finished_kept(cache_k, cache_v, parent, keep):
    rows = _rows(parent, list(range(parent.size(0))))
    return cache_k[rows], cache_v[rows]


def reorder_keys_only(cache_k, cache_v, parent, keep):
    A, K = parent.shape
    same = (torch.arange(A)[:, None] * K + torch.arange(K))[keep].flatten()
    return cache_k[_rows(parent, keep)], cache_v[same]


def reorder_values_only(cache_k, cache_v, parent, keep):
    A, K = parent.shape
    same = (torch.arange(A)[:, None] * K + torch.arange(K))[keep].flatten()
    return cache_k[same], cache_v[_rows(parent, keep)]


def reorder_heads_axis(cache_k, cache_v, parent, keep):
    rows = _rows(parent, keep)
    return cache_k[:, rows], cache_v[:, rows]


def reorder_time_axis(cache_k, cache_v, parent, keep):
    rows = _rows(parent, keep)
    return cache_k.index_select(2, rows), cache_v.index_select(2, rows)


def reorder_swapped_outputs(cache_k, cache_v, parent, keep):
    rows = _rows(parent, keep)
    return cache_v[rows], cache_k[rows]


def reorder_argsort(cache_k, cache_v, parent, keep):
    # "argsort gives the new order": the inverse permutation of each sentence's parents, not the parents.
    rows = _rows(parent.argsort(dim=-1), keep)
    return cache_k[rows], cache_v[rows]


def reorder_in_place(cache_k, cache_v, parent, keep):
    rows = _rows(parent, keep)
    cache_k[: len(rows)] = cache_k[rows].clone()
    cache_v[: len(rows)] = cache_v[rows].clone()
    return cache_k[: len(rows)], cache_v[: len(rows)]


@pytest.mark.parametrize(
    "answer",
    [reorder_index_select, reorder_fancy_indexing, reorder_loop_stack, reorder_view, reorder_package],
    ids=lambda f: f.__name__,
)
def test_reorder_right_answers_pass(answer, capsys):
    assert_passes(check_reorder_kv, answer, "reorder_kv", capsys)


@pytest.mark.parametrize(
    "bug, hint",
    [
        (reorder_unchanged, r"the cache was not reordered"),
        (reorder_no_sentence_offset, r"not a row of the whole cache.*a \* K \+ parent\[a, k\]"),
        (reorder_finished_kept, r"the finished sentences \(those not in keep\) must leave the cache"),
        (reorder_keys_only, r"the values were not reordered"),
        (reorder_values_only, r"the keys were not reordered"),
        (reorder_heads_axis, r"indexed along dim 1, the heads"),
        (reorder_time_axis, r"indexed along dim 2, the time axis"),
        (reorder_swapped_outputs, r"keys and values are swapped"),
        (reorder_argsort, r"in the order argsort\(\) gives"),
    ],
    ids=lambda x: x.__name__ if callable(x) else "",
)
def test_reorder_bugs_are_named(bug, hint, capsys):
    assert_named(check_reorder_kv, bug, "reorder_kv", hint, capsys)


def test_reorder_in_place_is_named():
    with pytest.raises(ExerciseError, match="changed its input `cache_k` in place"):
        check_reorder_kv(reorder_in_place)


def test_reorder_cases_have_a_finished_sentence_and_distinct_sizes():
    cases = _reorder_cases()
    assert any(len(keep) < len(parent) for *_, parent, keep in cases)
    for _, (N, H, t, Dh), parent, keep in cases:
        A, K = torch.tensor(parent).shape
        assert N == A * K and len({H, t, Dh}) == 3 and not {H, t, Dh} & {N, len(keep) * K}


def test_reorder_reference_is_the_packages_follow_beams():
    for _, (N, H, t, Dh), parent, keep in _reorder_cases():
        cache, parent = torch.randn(N, H, t, Dh), torch.tensor(parent)
        expected, _ = reorder_package(cache, cache, parent, keep)
        assert torch.equal(_reordered(cache, parent, keep), expected)


# --- both ----------------------------------------------------------------------------------


@pytest.mark.parametrize("check, name", [(check_append_kv, "append_kv"), (check_reorder_kv, "reorder_kv")])
def test_stub_says_not_implemented_and_returns_none(check, name, capsys):
    assert check(stub) is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"{name}: not implemented yet — ")


def test_checks_leave_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_append_kv(append_cat)
    check_reorder_kv(reorder_index_select)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("check", [check_append_kv, check_reorder_kv])
def test_every_check_is_documented_with_its_signature(check):
    doc = check.__doc__ or ""
    assert "Expected signature:" in doc and "Raises:" in doc, check.__name__


def test_beams_not_reordered_keeps_each_row_drops_finished_sentences_and_is_undone():
    # Notebook 12's demo of the bug: rows stay where they were (no parent), finished sentences still leave.
    from transformer_lessons import beam
    from transformer_lessons.checks.kv_cache import beams_not_reordered

    A, K = 3, 2
    cache = KVCache([torch.arange(A * K).float().view(A * K, 1, 1, 1)], [torch.zeros(A * K, 1, 1, 1)], [], [])
    parent, keep = torch.tensor([[1, 1], [0, 0], [1, 0]]), [0, 2]
    follow = beam._follow_beams
    with beams_not_reordered():
        beam._follow_beams(cache, parent, keep, K)
    assert beam._follow_beams is follow
    assert cache.self_k[0].flatten().tolist() == [0, 1, 4, 5]  # sentences 0 and 2, rows as they were
    right = KVCache([torch.arange(A * K).float().view(A * K, 1, 1, 1)], [torch.zeros(A * K, 1, 1, 1)], [], [])
    beam._follow_beams(right, parent, keep, K)
    assert right.self_k[0].flatten().tolist() == [1, 1, 5, 4]  # the package: row a * K + parent
