"""Checks for the key/value cache of notebook 12: appending one step's keys and values, reordering for beams.

The package does both inside :class:`transformer_lessons.kv_cache.KVCache`
(``append``: ``torch.cat`` on dim 2; ``reorder``: ``index_select`` on dim 0). The
checks' references are written differently on purpose: :func:`_appended` fills a
new tensor position by position, :func:`_reordered` copies row by row. Shapes are
all different (``B, H, t, Dh`` = 2, 3, 1, 4 in the first case), so an answer that
joins or indexes the wrong axis is recognised by the shape it returns.

``check_append_kv`` ends by decoding with the learner's function inside a real
(small, random) Transformer: the cached logits must equal the recomputed ones.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch

from transformer_lessons.checks.common import (
    Bug,
    ExerciseError,
    call_answer,
    all_close,
    exercise,
    expect_tensor,
    expect_unchanged,
    known_bug,
    shape_of,
)
from transformer_lessons.checks.evidence import Inputs
from transformer_lessons import beam
from transformer_lessons.config import ModelConfig
from transformer_lessons.kv_cache import KVCache
from transformer_lessons.masks import causal_mask
from transformer_lessons.model import Transformer

_AXES = {
    0: "dim 0, the batch (B)",
    1: "dim 1, the heads (H)",
    2: "dim 2, the time axis (t)",
    3: "dim 3, the head width (Dh)",
}
# The exact fix, kept back for hint() ([[...]], see common.split_fix).
_FIX_APPEND = "[[: torch.cat([cache_k, new_k], dim=2) and torch.cat([cache_v, new_v], dim=2)]]"


def _pair(got: Any, what: str) -> tuple[Any, Any]:
    """The learner's answer as (keys, values)."""
    if got is None:
        raise ExerciseError("your function returned None: did you forget a `return`?")
    if isinstance(got, torch.Tensor):
        raise known_bug(
            f"your function returned one tensor: return two, the {what} keys and the {what} values, as a tuple (k, v)"
        )
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise ExerciseError(f"return a tuple of two tensors (k, v), got {type(got).__name__}")
    return got[0], got[1]


# --- append_kv ----------------------------------------------------------------------------


def _appended(cache: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """``cache (B, H, t, Dh)`` followed by ``new (B, H, T, Dh)`` on the time axis, position by position."""
    B, H, t, Dh = cache.shape
    T = new.size(2)
    out = cache.new_zeros(B, H, t + T, Dh)  # (B, H, t + T, Dh)
    for i in range(t + T):
        out[:, :, i] = cache[:, :, i] if i < t else new[:, :, i - t]
    return out


def _append_cases() -> list[tuple[str, tuple[int, int, int, int, int]]]:
    """``(description, (B, H, t, T, Dh))``: every size different in the first, so a wrong axis shows in the shape."""
    return [
        ("a cache of one position", (2, 3, 1, 1, 4)),
        ("the first step (an empty cache, t = 0)", (2, 3, 0, 1, 4)),
        ("a cache of five positions", (2, 3, 5, 1, 4)),
        ("two new positions at once", (1, 2, 3, 2, 4)),
    ]


def _append_shape_bug(got: torch.Tensor, which: str, cache: torch.Tensor, new: torch.Tensor) -> ExerciseError | None:
    """A known bug the shape of ``got`` (the new keys or values) gives away, or None."""
    B, H, t, Dh = cache.shape
    T = new.size(2)
    shape = shape_of(got)
    if got.dim() == 5:
        return known_bug(
            f"your {which} have 5 dimensions, {shape}: torch.stack puts the tensors side by side on a "
            f"NEW axis; torch.cat joins them along an existing one, the time axis{_FIX_APPEND}"
        )
    if t == T:  # joining along any axis runs: the result's shape names the axis
        for dim, name in _AXES.items():
            joined = list(cache.shape)
            joined[dim] *= 2  # both tensors have the same size there
            if dim != 2 and shape == tuple(joined):
                return known_bug(
                    f"your {which} were joined along {name}: {shape} instead of {(B, H, t + T, Dh)}. "
                    f"(B, H, t, Dh) grows along dim 2, the positions{_FIX_APPEND}"
                )
    if t > 0 and shape == (B, H, T, Dh) and torch.equal(got, new):
        fix = "forgot the value cache?" if which == "values" else "overwrote the cache?"
        return known_bug(
            f"your {which} hold only the new position(s), {shape}: the earlier positions are gone "
            f"(you {fix}). The cache must grow by T positions per step{_FIX_APPEND}"
        )
    if shape == (B, H, t, Dh) and torch.equal(got, cache):
        return known_bug(
            f"your {which} are the old cache, unchanged, {shape}: the new position was never added "
            f"(the {which[:-1]} cache must grow too). {_FIX_APPEND}"
        )
    return None


def _append_bugs(ck: torch.Tensor, cv: torch.Tensor, nk: torch.Tensor, nv: torch.Tensor) -> list[Bug]:
    def cat(a, b):
        return torch.cat([a, b], dim=2)

    return [
        (
            "the new position comes first, before the earlier ones. Position i "
            "of the cache is the token decoded at step i, so the new one goes last[[: torch.cat([cache_k, new_k], dim=2)]]",
            lambda: (cat(nk, ck), cat(nv, cv)),
        ),
        (
            "the new values come first. Keys and values must stay in the same order "
            "(position i of both is step i)[[: torch.cat([cache_v, new_v], dim=2)]]",
            lambda: (cat(ck, nk), cat(nv, cv)),
        ),
        ("keys and values are swapped: return (k, v), keys first", lambda: (cat(cv, nv), cat(ck, nk))),
        (
            "your values are the keys: the value cache holds x W^V, not x W^K; append new_v to cache_v",
            lambda: (cat(ck, nk), cat(ck, nk)),
        ),
        (
            "the new keys went into the value cache: append new_v (not new_k) to cache_v",
            lambda: (cat(ck, nk), cat(cv, nk)),
        ),
    ]


def _learner_cache(fn: Callable[..., Any]) -> type[KVCache]:
    """A KVCache whose ``append`` is the learner's function (what DecoderLayer.step calls once per layer)."""

    class LearnerCache(KVCache):
        def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            keys, values = _pair(call_answer(fn, self.self_k[layer], self.self_v[layer], k, v), "grown")
            self.self_k[layer], self.self_v[layer] = keys, values
            return keys, values

    return LearnerCache


def _decode_with(fn: Callable[..., Any], steps: int = 8) -> None:
    """Greedy steps of a small random Transformer with the learner's append: logits equal to recomputing."""
    torch.manual_seed(0)
    config = ModelConfig(n_layers=2, d_model=16, n_heads=2, d_ff=32, dropout=0.0, max_len=16, tie_embeddings=False)
    model = Transformer(config, 11, 11).eval()
    src = torch.randint(3, 11, (2, 6))  # (B, S)
    memory = model.encode(src, None)  # (B, S, D)
    empty = model.init_cache(memory)
    cache = _learner_cache(fn)(empty.self_k, empty.self_v, empty.cross_k, empty.cross_v)
    ys = torch.full((2, 1), 1, dtype=torch.long)  # (B, 1): <bos>
    for step in range(steps):
        cached = model.decode_step(cache, None, ys[:, -1:])  # (B, V)
        recomputed = model.decode(memory, None, ys, causal_mask(ys.size(1)))[:, -1]  # (B, V)
        if not all_close(cached, recomputed):
            raise ExerciseError(
                f"used inside a real decoder, your function gives other logits than recomputing the "
                f"whole prefix, at step {step + 1}{_FIX_APPEND}"
            )
        ys = torch.cat([ys, recomputed.argmax(-1, keepdim=True)], dim=1)  # (B, t + 1)


@exercise(
    "append_kv",
    "return (k, v): each cache with the new position(s) after the cached ones, on the time axis of (B, H, t, Dh)",
)
def check_append_kv(fn: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> str:
    """Check one step's update of a self-attention key/value cache.

    Expected signature: ``fn(cache_k, cache_v, new_k, new_v) -> (k, v)``: the
    cached keys and values of the ``t`` positions decoded so far, followed by those
    of the ``T`` new positions (usually one), along the time axis (dim 2). What
    ``KVCache.append`` does for each decoder layer at every step.

    Checked on a cache of one position, an empty cache (the first step), five
    positions, and two new positions at once, against a reference that copies
    position by position; then inside a small random Transformer, whose cached
    logits must equal those of recomputing the whole prefix.

    Shape:
        cache_k, cache_v ``(B, H, t, Dh)``, new_k, new_v ``(B, H, T, Dh)`` ->
        k, v ``(B, H, t + T, Dh)``.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (joined along the batch, heads or Dh
            axis, torch.stack instead of torch.cat, the new position first, the
            cache overwritten, the value cache forgotten or fed the keys, keys and
            values swapped, inputs changed in place).
    """
    g = torch.Generator().manual_seed(0)
    seen = Inputs()  # a bug is named only if it explains every input
    for description, (B, H, t, T, Dh) in _append_cases():
        with seen.one():
            ck, cv = torch.randn(B, H, t, Dh, generator=g), torch.randn(B, H, t, Dh, generator=g)
            nk, nv = torch.randn(B, H, T, Dh, generator=g), torch.randn(B, H, T, Dh, generator=g)
            originals = {"cache_k": ck, "cache_v": cv, "new_k": nk, "new_v": nv}
            inputs = {name: x.clone() for name, x in originals.items()}
            got = _pair(
                call_answer(
                    fn,
                    *inputs.values(),
                    hint="cache_k, cache_v (B, H, t, Dh); new_k, new_v (B, H, T, Dh): they "
                    "differ only in dim 2, the time axis, so join them there",
                ),
                "grown",
            )
            expect_unchanged(originals, inputs)
            for value, which, cache, new in ((got[0], "keys", ck, nk), (got[1], "values", cv, nv)):
                if isinstance(value, torch.Tensor) and (bug := _append_shape_bug(value, which, cache, new)):
                    raise bug
                expect_tensor(
                    value,
                    f"the grown {which} ({description})",
                    shape=(B, H, t + T, Dh),
                    dtype=ck.dtype,
                    shape_hint="They should hold the t cached positions and the T new ones: (B, H, t + T, Dh)",
                )
            seen.compare(
                tuple(got),
                (_appended(ck, nk), _appended(cv, nv)),
                _append_bugs(ck, cv, nk, nv),
                f"(k, v) for {description}",
                f"Expected the cached positions first, then the new ones{_FIX_APPEND}",
            )
    seen.verdict()
    _decode_with(fn)
    return "four caches (empty, one, five positions; two new at once) and 8 steps of a real decoder against recomputing"


# --- reorder_kv ---------------------------------------------------------------------------

_FIX_REORDER = (
    "[[: rows = (torch.arange(A)[:, None] * K + parent)[keep].flatten(); "
    "cache_k.index_select(0, rows), cache_v.index_select(0, rows)]]"
)


def _reordered(cache: torch.Tensor, parent: torch.Tensor, keep: list[int]) -> torch.Tensor:
    """Row by row: for each kept sentence ``a``, in order, its survivors' rows ``a * K + parent[a, k]``."""
    K = parent.size(1)
    return torch.stack([cache[a * K + int(p)] for a in keep for p in parent[a]])  # (A' * K, H, t, Dh)


def _reorder_cases() -> list[tuple[str, tuple[int, int, int, int], list[list[int]], list[int]]]:
    """``(description, (A * K, H, t, Dh), parent (A, K), keep)``: the sizes differ from every row count and index."""
    return [
        ("two sentences whose beams swap places", (4, 5, 6, 7), [[1, 0], [1, 0]], [0, 1]),
        ("one beam kept twice, another dropped", (6, 5, 7, 9), [[0, 0], [1, 0], [1, 1]], [0, 1, 2]),
        ("the second of three sentences finished", (9, 5, 7, 8), [[2, 0, 1], [0, 0, 0], [1, 2, 2]], [0, 2]),
    ]


def _reorder_shape_bug(
    got: torch.Tensor, which: str, cache: torch.Tensor, parent: torch.Tensor, keep: list[int]
) -> ExerciseError | None:
    shape, (A, K) = shape_of(got), parent.shape
    if shape == shape_of(cache) and len(keep) < A:
        return known_bug(
            f"your {which} keep the rows of every sentence, {shape}: the finished sentences (those not in keep) must "
            f"leave the cache. Keep only the sentences in keep, K rows each{_FIX_REORDER}"
        )
    for dim, name in _AXES.items():
        indexed = list(cache.shape)
        indexed[dim] = len(keep) * K
        if dim != 0 and shape == tuple(indexed) and shape != shape_of(cache):
            return known_bug(
                f"your {which} were indexed along {name}: {shape}. The beams are the rows, dim 0 of "
                f"(A * K, H, t, Dh){_FIX_REORDER}"
            )
    return None


def _reorder_bugs(ck: torch.Tensor, cv: torch.Tensor, parent: torch.Tensor, keep: list[int]) -> list[Bug]:
    A, K = parent.shape
    kept = torch.tensor([a * K + k for a in keep for k in range(K)])  # each kept sentence's rows, in place

    def rows(index: torch.Tensor) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
        return lambda: (ck[index], cv[index])

    return [
        (
            "the cache was not reordered: each row still holds the prefix it held before this step, while the beams "
            f"now extend other prefixes. Row a * K + k must become row a * K + parent[a, k]{_FIX_REORDER}",
            rows(kept),
        ),
        (
            "parent[a, k] counts the prefixes of sentence a only (0 … K-1): it is not a row of the whole cache. "
            f"Sentence a's rows start at a * K, so survivor k's row is a * K + parent[a, k]{_FIX_REORDER}",
            rows(parent[keep].flatten()),
        ),
        (
            "the values were not reordered (only the keys): reorder both caches with the same rows",
            lambda: (_reordered(ck, parent, keep), cv[kept]),
        ),
        (
            "the keys were not reordered (only the values): reorder both caches with the same rows",
            lambda: (ck[kept], _reordered(cv, parent, keep)),
        ),
        (
            "the rows were taken in the order argsort() gives, which sorts the prefixes by parent; it is not the "
            f"parents themselves. Survivor k of sentence a is FETCHED from its parent's row{_FIX_REORDER}",
            rows((torch.arange(A)[:, None] * K + parent.argsort(dim=-1))[keep].flatten()),
        ),
        (
            "keys and values are swapped: return (k, v), keys first",
            lambda: (_reordered(cv, parent, keep), _reordered(ck, parent, keep)),
        ),
    ]


@exercise("reorder_kv", "return (k, v): the rows of the kept sentences' survivors, each its parent's row")
def check_reorder_kv(fn: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> str:
    """Check reordering a key/value cache after one step of beam search, for a batch of sentences.

    Expected signature: ``fn(cache_k, cache_v, parent, keep) -> (k, v)``. The cache has
    ``K`` rows per sentence, sentence ``a`` in rows ``a * K … a * K + K - 1``. After a step,
    survivor ``k`` of sentence ``a`` extends that sentence's prefix ``parent[a, k]`` (counted
    from 0 within the sentence), and only the sentences in ``keep`` go on. The new cache
    holds, for each sentence of ``keep`` in order, the rows ``a * K + parent[a, k]``: what
    beam search's ``_follow_beams`` gives ``KVCache.reorder``.

    Checked on two sentences whose beams swap, a beam kept twice while another drops out,
    and a finished sentence leaving, against a reference that copies row by row.

    Shape:
        cache_k, cache_v ``(A * K, H, t, Dh)``, parent LongTensor ``(A, K)``, keep a list of
        ``A'`` sentence indices -> k, v ``(A' * K, H, t, Dh)``.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (not reordered, parent used as rows of the
            whole cache without the a * K offset, finished sentences kept, only the keys or only the values reordered, argsort, indexed along the
            heads, time or Dh axis, keys and values swapped, inputs changed in place).
    """
    g = torch.Generator().manual_seed(1)
    seen = Inputs()  # a bug is named only if it explains every input
    for description, (N, H, t, Dh), parents, keep in _reorder_cases():
        with seen.one():
            ck, cv = torch.randn(N, H, t, Dh, generator=g), torch.randn(N, H, t, Dh, generator=g)
            originals = {"cache_k": ck, "cache_v": cv, "parent": torch.tensor(parents)}
            inputs = {name: x.clone() for name, x in originals.items()}
            got = _pair(
                call_answer(
                    fn,
                    *inputs.values(),
                    list(keep),
                    hint="cache_k, cache_v (A * K, H, t, Dh), parent (A, K), keep: the rows a * K + parent[a, k] of "
                    "the sentences in keep" + _FIX_REORDER,
                ),
                "reordered",
            )
            expect_unchanged(originals, inputs)
            parent = originals["parent"]
            for value, which, cache in ((got[0], "keys", ck), (got[1], "values", cv)):
                if isinstance(value, torch.Tensor) and (bug := _reorder_shape_bug(value, which, cache, parent, keep)):
                    raise bug
                expect_tensor(
                    value,
                    f"the reordered {which} ({description})",
                    shape=(len(keep) * parent.size(1), H, t, Dh),
                    dtype=ck.dtype,
                    shape_hint="K rows for each sentence still decoding: (A' * K, H, t, Dh) with A' = len(keep)",
                )
            seen.compare(
                tuple(got),
                (_reordered(ck, parent, keep), _reordered(cv, parent, keep)),
                _reorder_bugs(ck, cv, parent, keep),
                f"(k, v) for {description}",
                f"Expected, for each sentence a in keep, the rows a * K + parent[a, k] of both caches{_FIX_REORDER}",
            )
    seen.verdict()
    return "beams swapping, a beam kept twice, and a finished sentence leaving, against a row-by-row copy"


@contextlib.contextmanager
def beams_not_reordered() -> Iterator[None]:
    """Inside it, cached beam search forgets to reorder its cache: the bug that reorder_kv prevents, for notebook 12.

    Finished sentences still leave the cache (that is not the bug shown), but each of a sentence's
    ``K`` rows keeps its own past instead of taking its parent's: row ``a * K + k`` stays row ``a * K + k``.
    """

    def keep_rows(cache: KVCache | None, parent: torch.Tensor, keep: list[int], K: int) -> None:
        if cache is not None:
            rows = torch.arange(parent.size(0) * K, device=parent.device).view(-1, K)[keep]  # (A', K): no parent
            cache.reorder(rows.flatten())

    follow = beam._follow_beams
    beam._follow_beams = keep_rows
    try:
        yield
    finally:
        beam._follow_beams = follow
