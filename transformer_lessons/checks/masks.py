"""Checks for the masks (paper §3.2.3): causal, padding, the decoder's target mask, and converting conventions.

The course's convention: masks are ``bool`` and ``True`` means "may attend"
(see :mod:`transformer_lessons.masks`). Each check builds the expected mask
independently with ``torch.tril`` and comparisons, and names the bugs that break
the convention: an inverted mask, a float mask, a shape that masks queries
instead of keys, OR instead of AND.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch

from transformer_lessons.checks.common import (
    Bug,
    ExerciseError,
    call_answer,
    diagnose,
    exercise,
    expect_tensor,
    expect_unchanged,
    known_bug,
    shape_of,
)
from transformer_lessons.checks.evidence import Inputs
from transformer_lessons.checks.slips import two_things


@exercise("causal_mask", "return a (size, size) bool tensor, True on and below the diagonal")
def check_causal_mask(fn: Callable[[int], torch.Tensor]) -> str:
    """Check a causal ("subsequent") mask (paper §3.2.3).

    Expected signature: ``fn(size) -> BoolTensor (size, size)`` with
    ``mask[t, s] = True`` iff ``s <= t``: position t may attend to 0..t,
    itself included.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while ``fn`` still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (diagonal excluded, upper triangle,
            inverted, float instead of bool, a leading axis of 1, ...).
    """
    seen = Inputs()  # a bug is named only if it explains every input
    for size in (5, 1, 8):
        with seen.one():
            mask = expect_tensor(call_answer(fn, size), f"causal_mask({size})", finite=False)
            if shape_of(mask) == (1, size, size):
                raise known_bug(
                    f"shape (1, {size}, {size}): a leading axis of 1 that nobody asked for. Return the ({size}, {size}) "
                    "table itself: where the mask meets the scores (B, H, T, T), broadcasting supplies the batch and "
                    "head axes, and other masks combine with a 2-D causal mask the same way"
                )
            if shape_of(mask) != (size, size):
                raise ExerciseError(f"causal_mask({size}) should have shape ({size}, {size}), got {shape_of(mask)}")
            ones = torch.ones(size, size, dtype=torch.bool)
            expected = torch.tril(ones)
            if mask.dtype != torch.bool:
                if mask.is_floating_point() and torch.isinf(mask).any():
                    raise ExerciseError(
                        "that is an additive float mask (0 / -inf, as nn.Transformer.generate_square_subsequent_mask "
                        "builds): this course uses bool masks with True = may attend; build the triangle on a bool tensor"
                    )
                if torch.equal(mask == 0, ~expected) or torch.equal(mask == 0, expected):
                    raise ExerciseError(
                        f"the pattern is there but the dtype is {mask.dtype}: masks in this course are bool "
                        "(torch.bool) with True = may attend[[: e.g. torch.ones(size, size, dtype=torch.bool).tril()]]"
                    )
                raise ExerciseError(f"the mask should be a bool tensor (torch.bool), got {mask.dtype}")
            bugs = [
                (
                    "the mask is inverted: True must mean 'may attend' (on and below the diagonal). True = blocked is "
                    "nn.Transformer's convention, not ours",
                    lambda: ~torch.tril(ones),
                ),
                (
                    "off by one: the diagonal is excluded, but a token may attend to itself[[: tril() (diagonal=0), "
                    "not tril(-1)]]",
                    lambda: torch.tril(ones, -1),
                ),
                (
                    "off by one: position t may also see t + 1, one step into the future[[: tril() (diagonal=0), not tril(1)]]",
                    lambda: torch.tril(ones, 1),
                ),
                (
                    "that is the upper triangle (triu): position t may see the PAST, 0..t, so True goes on and below the "
                    "diagonal, the lower triangle[[: tril()]]",
                    lambda: torch.triu(ones),
                ),
                (
                    "every position may attend everywhere: keep only the lower triangle, diagonal included[[: .tril()]]",
                    lambda: ones,
                ),
            ]
            seen.compare(mask, expected, bugs, f"causal_mask({size})")
    seen.verdict()
    return "shape, bool dtype, lower triangle with the diagonal, sizes 1, 5, 8"


# Token batches for the padding and target masks, one per pad id. Each pad id also appears as a REAL token
# in the batches of the others, so a mask that hard-codes `!= 1` (the course's <pad>) or `!= 0` is caught.
_PADDING_TOKENS = {
    1: [[5, 0, 7, 3, 1, 1], [4, 9, 2, 8, 6, 0], [2, 1, 1, 1, 1, 1]],
    0: [[5, 1, 7, 3, 0, 0], [4, 9, 2, 8, 6, 1], [7, 0, 0, 0, 0, 0]],
    7: [[5, 0, 1, 3, 7, 7], [4, 9, 2, 0, 6, 1], [2, 7, 7, 7, 7, 7]],
}
_TARGET_TOKENS = {
    1: [[2, 5, 0, 7, 1, 1], [2, 4, 9, 3, 8, 6], [2, 6, 1, 1, 1, 1]],
    0: [[2, 5, 1, 7, 0, 0], [2, 4, 9, 3, 8, 1], [2, 6, 0, 0, 0, 0]],
    7: [[2, 5, 0, 1, 7, 7], [2, 4, 9, 3, 0, 6], [2, 1, 7, 7, 7, 7]],
}


def _hard_coded_pad_bugs(tokens: torch.Tensor, pad_id: int, full: Callable[[torch.Tensor], torch.Tensor]) -> list[Bug]:
    """A mask built with another pad id than the argument: one bug per pad id the checks use."""
    return [
        (
            f"did you hard-code the pad id? With pad_id = {pad_id} your mask hides the tokens equal to {other}: "
            "use the pad_id argument, tokens != pad_id",
            functools.partial(full, tokens != other),
        )
        for other in _PADDING_TOKENS
        if other != pad_id
    ]


_PADDING_INVERTED = "the mask is inverted: True must mean 'may attend', i.e. a real token: use tokens != pad_id, not =="


@exercise("padding_mask", "return a bool tensor (B, 1, 1, S), True where the token is not pad_id")
def check_padding_mask(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> str:
    """Check a padding mask that hides padding keys from every query.

    Expected signature: ``fn(tokens, pad_id) -> BoolTensor`` broadcastable to
    ``(B, 1, 1, S)``, True where the key is a real token (not padding). The check
    runs it with pad ids 1, 0 and 7.

    Shape:
        tokens ``(B, S)`` -> mask ``(B, 1, 1, S)``, which broadcasts over heads
        and queries of the scores ``(B, H, T, S)``.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while ``fn`` still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (inverted, shape that masks queries
            or mis-broadcasts, the heads axis missing, not bool, hard-coded pad id),
            or two at once (a float mask that is also inverted).
    """
    for pad_id, rows in _PADDING_TOKENS.items():
        _check_padding_case(fn, torch.tensor(rows), pad_id)
    return "bool dtype, shape (B, 1, 1, S) broadcasting over the keys, padding positions hidden, pad ids 1, 0, 7"


def _check_padding_case(fn: Callable[[torch.Tensor, int], torch.Tensor], tokens: torch.Tensor, pad_id: int) -> None:
    B, S = tokens.shape
    H, T = 2, 5  # scores (B, H, T, S) with every size different, so wrong broadcasts show
    original = tokens.clone()
    mask = expect_tensor(call_answer(fn, tokens, pad_id), "padding_mask(tokens, pad_id)")
    expect_unchanged({"tokens": original}, {"tokens": tokens})
    if shape_of(mask) == (B, S):
        raise ExerciseError(
            f"shape (B, S) = {(B, S)} does not broadcast over the scores (B, H, T, S): PyTorch lines up trailing "
            "axes, so the batch axis would meet the queries. Add two singleton axes, for the heads and the queries: (B, 1, 1, S)[[: mask[:, None, None, :]]]"
        )
    if shape_of(mask) == (B, 1, S):
        raise known_bug(
            f"shape (B, 1, S) = {(B, 1, S)}: one singleton axis short. Lined up from the right against the scores "
            "(B, H, T, S), the batch axis would meet the heads. Some attention code adds the heads axis itself (the "
            "Annotated Transformer's does); here the mask meets the scores as it is, so it needs both: (B, 1, 1, S)"
        )
    if shape_of(mask) == (B, 1, S, 1) or shape_of(mask) == (B, S, 1):
        raise ExerciseError(
            f"shape {shape_of(mask)} masks queries (rows) instead of keys (columns): padding keys must be hidden "
            "from every query, so S goes last: (B, 1, 1, S)"
        )
    try:
        broadcast = torch.broadcast_shapes(mask.shape, (B, H, T, S))
    except RuntimeError:
        broadcast = None
    if broadcast != (B, H, T, S):
        raise ExerciseError(f"the mask should have shape (B, 1, 1, S) = {(B, 1, 1, S)}, got {shape_of(mask)}")

    def full(m):
        return m[:, None, None, :].expand(B, H, T, S)

    if mask.dtype != torch.bool:
        dtype_hint = (
            f"the mask should be a bool tensor (True = may attend), got dtype {mask.dtype}: "
            "a comparison like tokens != pad_id is already bool"
        )
        if torch.equal((mask != 0).expand(B, H, T, S), full(tokens == pad_id)):
            raise known_bug(
                two_things(
                    dtype_hint,
                    _PADDING_INVERTED + " (a 1 for padding is another convention: "
                    "an additive mask's, where 1 times a large negative number is added)",
                )
            )
        raise ExerciseError(dtype_hint)

    bugs = [
        (_PADDING_INVERTED, lambda: full(tokens == pad_id)),
        *_hard_coded_pad_bugs(tokens, pad_id, full),
    ]
    diagnose(mask.expand(B, H, T, S), full(tokens != pad_id), bugs, f"the mask (pad_id = {pad_id})")


@exercise(
    "target_mask",
    "return a bool tensor (B, 1, T, T): True where the key is a real token AND is not in the future",
)
def check_target_mask(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> str:
    """Check the decoder's self-attention mask: no padding keys and no future keys.

    Expected signature: ``fn(tokens, pad_id) -> BoolTensor`` broadcastable to
    ``(B, 1, T, T)``: ``mask[b, 0, t, s]`` is True iff ``s <= t`` and token
    ``s`` of sentence ``b`` is not padding (paper §3.2.3, the decoder in §3.1).
    The check runs it with pad ids 1, 0 and 7.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while ``fn`` still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (only causal, only padding, OR
            instead of AND, inverted, padding applied to the queries, hard-coded pad id,
            the heads axis missing), with the dtype when a float mask also has one.
    """
    for pad_id, rows in _TARGET_TOKENS.items():
        _check_target_case(fn, torch.tensor(rows), pad_id)
    return "bool dtype, broadcasts to (B, H, T, T), padding keys and future keys hidden, pad ids 1, 0, 7"


def _check_target_case(fn: Callable[[torch.Tensor, int], torch.Tensor], tokens: torch.Tensor, pad_id: int) -> None:
    B, T = tokens.shape
    H = 2
    original = tokens.clone()
    mask = expect_tensor(call_answer(fn, tokens, pad_id), "target_mask(tokens, pad_id)", finite=False)
    expect_unchanged({"tokens": original}, {"tokens": tokens})
    try:
        broadcast = torch.broadcast_shapes(mask.shape, (B, H, T, T))
    except RuntimeError:
        broadcast = None
    if broadcast != (B, H, T, T) and shape_of(mask) == (B, T, T):
        raise known_bug(
            f"shape (B, T, T) = {(B, T, T)}: the heads axis is missing. Lined up from the right against the scores "
            "(B, H, T, T), the batch axis would meet the heads. Some attention code adds it itself (the Annotated "
            "Transformer's does); here the mask meets the scores as it is: (B, 1, T, T)"
        )
    if broadcast != (B, H, T, T):
        raise ExerciseError(
            f"the mask should broadcast to the scores (B, H, T, T) = {(B, H, T, T)}, got shape {shape_of(mask)}: "
            "combine a (B, 1, 1, T) padding mask with a (T, T) causal mask and broadcasting gives (B, 1, T, T)"
        )
    dtype_hint = None
    if mask.dtype != torch.bool:  # name the dtype, and what the pattern of its non-zero entries gets wrong
        dtype_hint = f"the mask should be a bool tensor (True = may attend), got dtype {mask.dtype}"
        mask = mask != 0
    causal = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T)
    keys = (tokens != pad_id)[:, None, None, :]  # (B, 1, 1, T)
    queries = (tokens != pad_id)[:, None, :, None]  # (B, 1, T, 1)

    def full(m):
        return m.expand(B, H, T, T)

    bugs = [
        (
            "only the causal part is there: padding keys must be hidden too. AND (&) it with the padding mask",
            lambda: full(causal.expand(B, 1, T, T)),
        ),
        (
            "only the padding part is there: the decoder must not see future tokens. AND (&) it with the causal mask",
            lambda: full(keys.expand(B, 1, T, T)),
        ),
        ("that is OR (|): a key must be real AND not in the future, so combine with &", lambda: full(keys | causal)),
        ("the mask is inverted: True must mean 'may attend'", lambda: full(~(keys & causal))),
        (
            "the padding hides queries (rows) instead of keys (columns): the padding belongs on the last axis[[: (tokens != pad_id)[:, None, None, :]]]",
            lambda: full(queries & causal),
        ),
        (
            "the causal part is the upper triangle: a token may see the past, so use tril()",
            lambda: full(keys & causal.T),
        ),
        (
            "off by one: the diagonal is excluded, but a token may attend to itself",
            lambda: full(keys & torch.ones(T, T, dtype=torch.bool).tril(-1)),
        ),
        *_hard_coded_pad_bugs(tokens, pad_id, lambda m: full(m[:, None, None, :] & causal)),
    ]
    if dtype_hint is None:
        diagnose(mask.expand(B, H, T, T), full(keys & causal), bugs, f"the mask (pad_id = {pad_id})")
        return
    if torch.equal(full(mask), full(keys & causal)):
        raise ExerciseError(
            f"{dtype_hint}: its non-zero entries are the right ones, so compare or combine bool "
            "tensors and keep the result bool"
        )
    for hint, simulate in bugs:
        if torch.equal(full(mask), simulate()):
            raise known_bug(two_things(dtype_hint, hint))
    raise ExerciseError(dtype_hint)


@exercise(
    "mask_inversion",
    "return the mask with True and False swapped (element-wise NOT of a bool tensor)",
)
def check_mask_inversion(fn: Callable[[torch.Tensor], torch.Tensor]) -> str:
    """Check the conversion from ``nn.MultiheadAttention``'s mask convention to ours.

    Expected signature: ``fn(blocked) -> BoolTensor`` of the same shape, where
    ``blocked`` is True where attention is NOT allowed (PyTorch's
    ``nn.Transformer`` convention) and the answer is True where it IS allowed
    (this course's convention, shared with ``F.scaled_dot_product_attention``).

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while ``fn`` still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (input returned unchanged, a
            float/int result such as ``1 - blocked``, the argument changed in place).
    """
    size = 5
    positions = torch.arange(size)
    blocked = positions[None, :] > positions[:, None]  # (T, T): True = the future, which may not be seen
    original = blocked.clone()
    answer = expect_tensor(call_answer(fn, blocked), "to_course_mask(blocked)", finite=False)
    if not torch.equal(blocked, original):
        raise ExerciseError(
            "your function changed its argument in place (e.g. logical_not_() or blocked[...] = ...): "
            "build and return a new tensor[[: return ~blocked]]"
        )
    if shape_of(answer) != (size, size):
        raise ExerciseError(f"the answer should keep the mask's shape {(size, size)}, got {shape_of(answer)}")
    expected = ~original
    if answer.dtype != torch.bool:
        if torch.equal(answer != 0, expected):
            raise known_bug(
                f"the values are right but the dtype is {answer.dtype}: converting to numbers (blocked.int(), .float(), arithmetic) loses the bool dtype; "
                "negate the bool tensor itself, which keeps it bool[[: ~blocked, or blocked.logical_not()]]"
            )
        raise ExerciseError(f"return a bool tensor (True = may attend), got dtype {answer.dtype}")
    bugs = [
        (
            "that is the input unchanged: every True must become False and every False True[[: ~blocked]]",
            lambda: original,
        ),
        (
            "every position may attend everywhere: only the blocked entries should become False",
            lambda: torch.ones_like(original),
        ),
    ]
    diagnose(answer, expected, bugs, "the mask")
    return "bool dtype, same shape, every entry swapped, argument left unchanged"
