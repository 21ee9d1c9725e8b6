"""Check for scaled dot-product attention (paper §3.2.1, Eq. 1): softmax(QKᵀ / √d_k) V.

The reference is PyTorch's own ``F.scaled_dot_product_attention`` for the output;
the bug simulation :func:`_attention` recomputes the answer with one mistake
switched on. Multi-head attention, built on it, is checked in :mod:`.multi_head`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from transformer_lessons.checks.common import (
    MASK_NAN_HINT,
    NEG,
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
from transformer_lessons.checks.slips import Slip, slip_bugs


def _allowed_mask(shape: Sequence[int]) -> torch.Tensor:
    """A random bool mask whose every row has a visible key and a hidden key (no all-masked rows)."""
    mask = torch.rand(*shape) < 0.5
    mask[..., 0] = True
    mask[..., -1] = False
    return mask


def _attention(q, k, v, mask=None, scale=None, dim=-1, mask_mode="fill"):
    """Softmax attention with knobs that reproduce the common bugs; returns (output, weights)."""
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # (..., T, S)
    if mask is not None and mask_mode == "fill":
        scores = scores.masked_fill(~mask, NEG)
    elif mask is not None and mask_mode == "inverted":
        scores = scores.masked_fill(mask, NEG)
    elif mask is not None and mask_mode == "multiply":
        scores = scores * mask
    weights = scores.softmax(dim)
    if mask is not None and mask_mode == "zero_after":
        weights = weights * mask
    return weights @ v, weights


def _mask_slips() -> list[Slip]:
    """The ways a mask goes wrong: discarded, inverted, applied after the softmax, multiplied in."""
    return [
        Slip(
            "your mask has no effect: masked_fill returns a NEW tensor, which must be assigned back to the "
            "scores[[: scores = scores.masked_fill(~mask, float('-inf'))]]. A classic bug: it runs, every row sums to 1, "
            "and the decoder sees the future (ParlAI fixed the same slip: PR #3068, 'Fix masked_fill no-op').",
            {"mask": None},
        ),
        Slip(
            "your mask is inverted: True means 'may attend', so fill the scores where the mask is False"
            "[[: scores.masked_fill(~mask, float('-inf')) (or mask == 0), not masked_fill(mask, ...)]]",
            {"mask_mode": "inverted"},
        ),
        Slip(
            "you zeroed masked weights after the softmax, so the remaining weights no longer sum to 1: "
            "mask the scores with -inf BEFORE the softmax",
            {"mask_mode": "zero_after"},
        ),
        Slip(
            "multiplying the scores by the mask gives masked keys a score of 0, which still gets weight: "
            "fill them with -inf instead, so that their weight is exactly 0"
            "[[: scores.masked_fill(~mask, float('-inf'))]]",
            {"mask_mode": "multiply"},
        ),
    ]


def _scale_slips(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> list[Slip]:
    """The ways the 1/sqrt(d_k) scaling goes wrong: missing, d_k instead of its root, the size of another axis."""
    d_k = q.size(-1)
    slips = [
        Slip(
            "did you forget to divide the scores by sqrt(d_k)?[[ softmax(query @ key.transpose(-2, -1) / math.sqrt(d_k))]]",
            {"scale": 1.0},
        ),
        Slip(f"you divided the scores by d_k = {d_k} instead of sqrt(d_k) = {math.sqrt(d_k):.3g}", {"scale": 1 / d_k}),
        Slip("you multiplied the scores by sqrt(d_k); divide them by it instead", {"scale": math.sqrt(d_k)}),
    ]
    # sqrt of the size of another axis (query.size(0), key.size(1), ...) instead of the last one.
    other_sizes = sorted({n for n in (*q.shape[:-1], *k.shape[:-1], v.size(-1)) if n not in (1, d_k)})
    slips += [
        Slip(
            f"d_k is the size of the LAST axis of query and key, {d_k}; you divided by "
            f"sqrt({n}), the size of another axis[[: d_k = query.size(-1)]]",
            {"scale": 1 / math.sqrt(n)},
        )
        for n in other_sizes
    ]
    return slips


# The softmax over an axis other than the keys'.
_SOFTMAX_AXIS_SLIPS = [
    Slip(
        "the softmax runs over the wrong axis (the queries): it must run over the keys, the last "
        "axis, so that each query's weights sum to 1[[: softmax(dim=-1)]]",
        {"dim": -2},
    ),
    Slip(
        "the softmax runs over the wrong axis (the batch): it must run over the keys, the last axis[[: softmax(dim=-1)]]",
        {"dim": 0},
    ),
]


def _product_bugs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> list[Bug]:
    """Bugs the simulator has no knob for: the scores in place of the weights, and wrong matmul orders."""
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1)

    def masked(s):
        return s if mask is None else s.masked_fill(~mask, NEG)

    others: list[Bug] = [
        (
            "the weights you return are the scores BEFORE the softmax: return the softmax probabilities",
            lambda: (_attention(q, k, v, mask)[0], masked(scores / math.sqrt(d_k))),
        ),
        (
            "the output uses the scores instead of the softmax weights[[: output = weights @ value]]",
            lambda: (masked(scores / math.sqrt(d_k)) @ v, _attention(q, k, v, mask)[1]),
        ),
    ]
    # Matmul orders that only run when T == S and d_k == d_v (the square diagnosis run).
    weights = _attention(q, k, v, mask)[1]
    others += [
        (
            "output should be weights @ value, (..., T, S) @ (..., S, d_v); you multiplied value @ weights",
            lambda: (v @ weights, weights),
        ),
        (
            "output should be weights @ value; you used the transposed weights",
            lambda: (weights.transpose(-2, -1) @ v, weights),
        ),
        (
            "the scores should have one row per query (the queries times the transposed keys); you multiplied the keys by "
            "the transposed queries[[: scores = query @ key.transpose(-2, -1)]]",
            lambda: _attention(k, q, v, mask.transpose(-2, -1) if mask is not None else None),
        ),
        (
            "did you forget to transpose the key?[[ scores = query @ key.transpose(-2, -1)]]",
            lambda: (((q @ k) / math.sqrt(d_k)).softmax(-1) @ v, ((q @ k) / math.sqrt(d_k)).softmax(-1)),
        ),
    ]
    return others


def _sdpa_bugs(q, k, v, mask=None) -> list[Bug]:
    """The common attention bugs on these inputs, alone and two at a time (no scaling AND the wrong axis, say)."""

    def simulate(**knobs):
        return _attention(q, k, v, **({"mask": mask} | knobs))

    slips = (_mask_slips() if mask is not None else []) + _scale_slips(q, k, v) + _SOFTMAX_AXIS_SLIPS
    return slip_bugs(simulate, slips, others=_product_bugs(q, k, v, mask))


def _unpack_attention(
    result: Any, shapes: tuple[tuple[int, ...], tuple[int, ...]], dtype: torch.dtype, finite: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    if result is None:
        raise ExerciseError("your function returned None: did you forget `return output, weights`?")
    if isinstance(result, torch.Tensor):
        raise ExerciseError("your function returned one tensor: return the pair (output, weights)")
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ExerciseError(f"your function should return a pair (output, weights), got {type(result).__name__}")
    out_shape, w_shape = shapes
    *batch, T, S = w_shape
    weights = result[1]
    if isinstance(weights, torch.Tensor) and shape_of(weights) == (*batch, S, T) and S != T:
        raise ExerciseError(
            f"weights have shape {shape_of(weights)} = (..., S, T) but should be {w_shape} = (..., T, S), one row per "
            "query[[: scores = query @ key.transpose(-2, -1)]]"
        )
    output = expect_tensor(
        result[0],
        "output",
        out_shape,
        dtype,
        nan_hint=MASK_NAN_HINT,
        finite=finite,
        shape_hint="output = weights @ value, (..., T, S) @ (..., S, d_v)",
    )
    weights = expect_tensor(
        weights,
        "weights",
        w_shape,
        dtype,
        nan_hint=MASK_NAN_HINT,
        finite=finite,
        shape_hint="weights = softmax(scores), one row per query: (..., T, S)",
    )
    return output, weights


def _run_attention(fn, q, k, v, mask=None, finite=True) -> tuple[torch.Tensor, torch.Tensor]:
    inputs = {"query": q, "key": k, "value": v} | ({"mask": mask} if mask is not None else {})
    originals = {name: t.clone() for name, t in inputs.items()}
    args = (q, k, v) if mask is None else (q, k, v, mask)
    result = call_answer(fn, *args)
    expect_unchanged(originals, inputs)
    shapes = ((*q.shape[:-1], v.size(-1)), (*q.shape[:-1], k.size(-2)))
    return _unpack_attention(result, shapes, q.dtype, finite)


def _check_attention_case(fn, q, k, v, mask=None, compare: Callable[..., Any] = diagnose) -> None:
    """One input: ``compare`` is :func:`diagnose` (a verdict on this input alone) or an :class:`Inputs`' compare."""
    output, weights = _run_attention(fn, q, k, v, mask)
    expected_weights = _attention(q, k, v, mask)[1]
    # PyTorch's fused op is the independent reference for the output.
    expected_output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    bugs = _sdpa_bugs(q, k, v, mask)
    # Properties, to say something useful when no known bug matches.
    sums = weights.sum(-1)
    leaked = weights.masked_select(~mask.expand_as(weights)).abs().max().item() if mask is not None else 0.0
    advice = ""
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
        advice = (
            f"Each row of the weights should sum to 1 (softmax over dim=-1), but yours sum to "
            f"{sums.min().item():.3g}..{sums.max().item():.3g}"
        )
    elif leaked > 1e-6:
        advice = (
            f"Masked keys should get exactly zero weight, yours get up to {leaked:.3g}: fill their scores "
            "with float('-inf') before the softmax"
        )
    compare((output, weights), (expected_output, expected_weights), bugs, "(output, weights)", advice)


def _blocked_query(fn) -> str:
    """A query whose keys are ALL blocked: the other queries must be right; what it gets itself is a choice.

    Softmax over scores that are all -inf is 0/0, NaN (what ``nn.MultiheadAttention``
    returns); a large finite fill such as -1e9 gives equal weights on every key (the
    Annotated Transformer's way); the course's reference, like
    ``F.scaled_dot_product_attention``, returns a row of zeros. No mask of the course
    blocks a whole row, so all three are accepted; the verdict says which one the
    learner's gives when it is not the reference's zeros (notebook 03 shows all three).
    """
    q, k, v = torch.randn(2, 4, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 5)
    mask = _allowed_mask((2, 4, 6))
    mask[0, 2] = False  # query 2 of the first sequence may attend to nothing
    output, weights = _run_attention(fn, q, k, v, mask, finite=False)
    blocked = ~mask.any(-1)  # (2, 4): True for the one blocked query
    reference_output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    reference_weights = _attention(q, k, v, mask)[1].masked_fill(blocked[..., None], 0.0)
    rows = ~blocked
    if not (torch.isfinite(output[rows]).all() and torch.isfinite(weights[rows]).all()):
        raise known_bug(
            "with one query whose keys are all blocked, NaN or inf reached the OTHER queries' rows too: "
            "whatever that query gets must stay in its own row"
        )
    diagnose(
        (output[rows], weights[rows]),
        (reference_output[rows], reference_weights[rows]),
        [],
        "(output, weights) of the queries that may attend somewhere, next to a query whose keys are all blocked",
    )
    row_w, row_out = weights[blocked], output[blocked]  # (1, S), (1, d_v)
    if torch.equal(row_w, torch.zeros_like(row_w)) and torch.allclose(row_out, torch.zeros_like(row_out)):
        return ""
    if row_w.isnan().all() and row_out.isnan().all():
        return (
            "; a query whose keys are all blocked gets NaN from yours (0/0 in the softmax) where the reference "
            "gives a row of zeros: accepted, as no mask of this course blocks a whole row, see notebook 03"
        )
    uniform = torch.full_like(row_w, 1 / row_w.size(-1))
    if torch.allclose(row_w, uniform, atol=1e-6) and torch.allclose(row_out, v[0].mean(0, keepdim=True), atol=1e-5):
        return (
            "; a query whose keys are all blocked gets equal weights on every key from yours (a finite fill such "
            "as -1e9) where the reference gives a row of zeros: accepted, as no mask of this course blocks a whole "
            "row, see notebook 03"
        )
    raise known_bug(
        f"a query whose keys are all blocked gets the weights {[round(w, 4) for w in row_w[0].tolist()]} from yours. "
        "It has nothing it may attend to: the reference gives it a row of zeros (NaN, the 0/0 of a softmax over "
        "scores that are all -inf, or equal weights, from a finite fill, are accepted too), never weight on some "
        "blocked keys and not others"
    )


@exercise(
    "scaled_dot_product_attention",
    "scale the query-key scores by 1/sqrt(d_k), hide masked keys (mask False) with -inf, softmax over "
    "the keys, and return (output, weights)",
)
def check_scaled_dot_product_attention(fn: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> str:
    """Check an implementation of scaled dot-product attention (paper §3.2.1, Eq. 1).

    Expected signature: ``fn(query, key, value, mask=None) -> (output, weights)``
    with ``weights = softmax(query @ keyᵀ / √d_k)`` (masked scores set to -inf
    where ``mask`` is False) and ``output = weights @ value``.

    A query whose keys are all blocked may get a row of zeros (the reference's
    answer), NaN (a softmax over scores that are all -inf) or equal weights (a
    finite fill such as -1e9): the course's masks never block a whole row, so the
    check accepts all three and its verdict says which one ``fn`` gives when it
    is not zeros.

    Shape:
        query ``(..., T, d_k)``, key ``(..., S, d_k)``, value ``(..., S, d_v)``,
        mask bool broadcastable to ``(..., T, S)`` (True = may attend);
        output ``(..., T, d_v)``, weights ``(..., T, S)``.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while ``fn`` still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (missing √d_k, softmax axis, mask
            inverted or discarded, matmul order, ...).
    """
    q, k, v = torch.randn(2, 4, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 5)
    seen = Inputs()  # a bug is named only if it explains the answer without a mask and with one
    try:
        _check_attention_case(fn, q, k, v, compare=seen.compare)
    except ExerciseError as error:
        if not isinstance(error.__cause__, RuntimeError):
            raise
        # It crashed on T != S, d_k != d_v: run a square case, where wrong matmul orders do run, to name the bug.
        square = [torch.randn(2, 5, 5) for _ in range(3)]
        try:
            _check_attention_case(fn, *square)
        except ExerciseError as square_error:
            if square_error.known_bug:
                raise square_error from error
        raise ExerciseError(
            f"{error.args[0]}\n  with query {shape_of(q)}, key {shape_of(k)}, value {shape_of(v)} the scores should "
            f"be (2, 4, 6), one row per query and one column per key, and the output (2, 4, 5)"
            "[[: scores = query @ key.transpose(-2, -1) -> (2, 4, 6), output = weights @ value -> (2, 4, 5)]] "
            "(note: key.T reverses ALL the axes of a batched tensor)"
        ) from error.__cause__
    with seen.one():
        _check_attention_case(fn, q, k, v, _allowed_mask((2, 4, 6)), compare=seen.compare)
    seen.verdict()
    # With a heads axis and a padding mask (B, 1, 1, S), as MultiHeadAttention calls it.
    q4, k4, v4 = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 5)
    pad = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]  # (B, 1, 1, S)
    try:
        _check_attention_case(fn, q4, k4, v4, pad)
    except ExerciseError as error:
        raise ExerciseError(
            f"correct on (B, T, d_k) inputs but not with a heads axis (B, H, T, d_k) and a (B, 1, 1, S) mask: "
            f"count axes from the end (the last two for the transpose, the last one for d_k and for the "
            f"softmax)[[: key.transpose(-2, -1), size(-1), softmax(dim=-1)]].\n  {error.args[0]}"
        ) from error.__cause__
    note = _blocked_query(fn)
    return "shapes, values against F.scaled_dot_product_attention, masking, rows sum to 1, heads axis" + note
