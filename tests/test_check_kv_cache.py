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


def reorder_index_select(cache_k, cache_v, parent):
    return cache_k.index_select(0, parent), cache_v.index_select(0, parent)


def reorder_fancy_indexing(cache_k, cache_v, parent):
    return cache_k[parent], cache_v[parent]


def reorder_loop_stack(cache_k, cache_v, parent):
    return torch.stack([cache_k[p] for p in parent.tolist()]), torch.stack([cache_v[p] for p in parent.tolist()])


def reorder_gather(cache_k, cache_v, parent):
    index = parent.view(-1, 1, 1, 1).expand(-1, *cache_k.shape[1:])  # (N', H, t, Dh)
    return cache_k.gather(0, index), cache_v.gather(0, index)


def reorder_package(cache_k, cache_v, parent):
    cache = KVCache([cache_k], [cache_v], [], [])
    cache.reorder(parent)
    return cache.self_k[0], cache.self_v[0]


# --- reorder_kv: bugs --------------------------------------------------------------------


def reorder_unchanged(cache_k, cache_v, parent):
    return cache_k, cache_v


def reorder_keys_only(cache_k, cache_v, parent):
    return cache_k[parent], cache_v


def reorder_values_only(cache_k, cache_v, parent):
    return cache_k, cache_v[parent]


def reorder_scatter(cache_k, cache_v, parent):
    # "Row i goes to parent[i]": the opposite direction.
    k, v = cache_k.clone(), cache_v.clone()
    k[parent], v[parent] = cache_k[: len(parent)], cache_v[: len(parent)]
    return k, v


def reorder_heads_axis(cache_k, cache_v, parent):
    return cache_k[:, parent], cache_v[:, parent]


def reorder_time_axis(cache_k, cache_v, parent):
    return cache_k.index_select(2, parent), cache_v.index_select(2, parent)


def reorder_swapped_outputs(cache_k, cache_v, parent):
    return cache_v[parent], cache_k[parent]


def reorder_in_place(cache_k, cache_v, parent):
    cache_k[: len(parent)] = cache_k[parent].clone()
    cache_v[: len(parent)] = cache_v[parent].clone()
    return cache_k[: len(parent)], cache_v[: len(parent)]


@pytest.mark.parametrize(
    "answer",
    [reorder_index_select, reorder_fancy_indexing, reorder_loop_stack, reorder_gather, reorder_package],
    ids=lambda f: f.__name__,
)
def test_reorder_right_answers_pass(answer, capsys):
    assert_passes(check_reorder_kv, answer, "reorder_kv", capsys)


@pytest.mark.parametrize(
    "bug, hint",
    [
        (reorder_unchanged, r"the cache was not reordered"),
        (reorder_keys_only, r"the values were not reordered"),
        (reorder_values_only, r"the keys were not reordered"),
        (reorder_scatter, r"rows went the wrong way.*FETCHED"),
        (reorder_heads_axis, r"indexed along dim 1, the heads"),
        (reorder_time_axis, r"indexed along dim 2, the time axis"),
        (reorder_swapped_outputs, r"keys and values are swapped"),
    ],
    ids=lambda x: x.__name__ if callable(x) else "",
)
def test_reorder_bugs_are_named(bug, hint, capsys):
    assert_named(check_reorder_kv, bug, "reorder_kv", hint, capsys)


def test_reorder_in_place_is_named():
    with pytest.raises(ExerciseError, match="changed its input `cache_k` in place"):
        check_reorder_kv(reorder_in_place)


def test_reorder_unchanged_when_rows_leave_is_named_by_its_shape(capsys):
    # Only the case where finished beams leave: the shape alone gives the unreordered cache away.
    *_, (description, (N, H, t, Dh), rows) = _reorder_cases()
    assert len(rows) != N
    from transformer_lessons.checks.kv_cache import _reorder_shape_bug

    cache = torch.randn(N, H, t, Dh)
    bug = _reorder_shape_bug(cache, "keys", cache, torch.tensor(rows))
    assert bug is not None and "not reordered" in str(bug)


def test_reorder_reference_is_index_select():
    for _, (N, H, t, Dh), rows in _reorder_cases():
        cache, parent = torch.randn(N, H, t, Dh), torch.tensor(rows)
        assert torch.equal(_reordered(cache, parent), cache.index_select(0, parent))


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
