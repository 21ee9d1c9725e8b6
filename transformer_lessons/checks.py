"""Check functions for the exercises: run the learner's answer and name the likely bug.

Every ``check_*`` takes the learner's function or class and

* prints one line and returns ``True`` when the answer is right;
* raises :class:`ExerciseError` (an ``AssertionError``) when it is wrong. The
  check computes what each common mistake would produce and, when the answer
  matches one of them, says which ("did you forget to divide by sqrt(d_k)?");
* prints "not implemented yet" and returns ``False`` while the answer is still a
  stub raising ``NotImplementedError``, so a notebook with open exercises still
  runs top to bottom.

Answers are compared with independent references (PyTorch's own
``F.scaled_dot_product_attention``, ``nn.LayerNorm``, ``nn.MultiheadAttention``
holding the learner's weights, the package's layers) and with properties (rows
sum to 1, masked keys get zero weight, no NaN, inputs left unchanged, no peeking
at future positions). Inputs are small and seeded inside
``torch.random.fork_rng``, so running a check never changes the learner's random
state.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import math
import numbers
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "ExerciseError",
    "check_build_vocab",
    "check_causal_mask",
    "check_decoder_layer",
    "check_encoder_layer",
    "check_feed_forward",
    "check_greedy_decode",
    "check_layer_norm",
    "check_mask_inversion",
    "check_multi_head_attention",
    "check_noam_rate",
    "check_padding_mask",
    "check_positional_encoding",
    "check_scaled_dot_product_attention",
    "check_target_mask",
]


class ExerciseError(AssertionError):
    """The learner's answer is wrong; the message names the likely bug and what to do.

    Every failing check raises this one class, so a notebook that prints
    ``type(error).__name__`` shows ``ExerciseError``.

    Attributes:
        known_bug: True when the message names a mistake the check recognised
            (the answer equals what that mistake computes), False when the answer
            only differs from the reference.
    """

    known_bug: bool = False


def _known_bug(hint: str) -> ExerciseError:
    """An ExerciseError whose message names a mistake the check recognised (``known_bug`` set)."""
    error = ExerciseError(hint)
    error.known_bug = True
    return error


class _NotImplementedYet(Exception):
    """Raised inside a check when the learner's stub still raises NotImplementedError."""


# A bug the check knows about: the hint to show, and a thunk computing what that bug would return.
Bug = tuple[str, Callable[[], Any]]

# Float32 answers computed in a different order differ by ~1e-6; known bugs differ by far more.
_ATOL = 1e-5
_RTOL = 1e-4
# Masked scores in the bug simulations: finite, so a simulated bug that masks a whole
# row gives a uniform row (as a learner's -1e9 does) instead of NaN.
_NEG = -1e9


# --- the frame shared by every check -----------------------------------------------


def _exercise(name: str, todo: str) -> Callable[[Callable[[Any], str]], Callable[[Any], bool]]:
    """Wrap a check body: seeding, no_grad, the success line and the not-implemented line.

    The body returns a short description of what it checked, raises ExerciseError on a
    wrong answer, and calls learner code through :func:`_call`.
    """

    def decorate(body: Callable[[Any], str]) -> Callable[[Any], bool]:
        @functools.wraps(body)
        def check(answer: Any) -> bool:
            try:
                # fork_rng: seeding here must not change the random numbers the learner draws next.
                with torch.random.fork_rng(devices=[]), torch.no_grad():
                    torch.manual_seed(0)
                    checked = body(answer)
            except _NotImplementedYet:
                print(f"{name}: not implemented yet — {todo}")
                return False
            except ExerciseError as error:
                # Prefix the exercise's name; a bare `raise` keeps the traceback and the cause.
                error.args = (f"{name}: {error.args[0] if error.args else 'wrong answer'}",)
                raise
            print(f"✔ {name}: correct (checked {checked})")
            return True

        # help() and notebooks show the body's docstring with the check's own return type.
        check.__signature__ = inspect.signature(body).replace(return_annotation="bool")  # type: ignore[attr-defined]
        return check

    return decorate


def _call(fn: Callable[..., Any], *args: Any, hint: str = "") -> Any:
    """Call learner code; a stub becomes _NotImplementedYet, any other error an ExerciseError."""
    try:
        return fn(*args)
    except NotImplementedError as error:
        raise _NotImplementedYet from error
    except ExerciseError:
        raise
    except Exception as error:  # noqa: BLE001 - any learner error is reported, chained
        message = f"your code raised {type(error).__name__}: {error}"
        raise ExerciseError(f"{message}\n  hint: {hint}" if hint else message) from error


def _shape(t: torch.Tensor | Sequence[int]) -> tuple[int, ...]:
    return tuple(t.shape) if isinstance(t, torch.Tensor) else tuple(t)


def _expect_tensor(
    value: Any,
    what: str,
    shape: Sequence[int] | None = None,
    dtype: torch.dtype | None = None,
    shape_hint: str = "",
    finite: bool = True,
) -> torch.Tensor:
    """Raise ExerciseError unless value is a tensor of the given shape and dtype (and, if finite, without NaN/inf).

    ``dtype`` is the dtype of the learner's float inputs: an output should keep it.
    """
    if value is None:
        raise ExerciseError(f"{what} is None: did you forget a `return`?")
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, torch.Tensor) for v in value):
        raise ExerciseError(f"{what} should be one tensor, got a tuple of two: return only the output")
    if not isinstance(value, torch.Tensor):
        raise ExerciseError(f"{what} should be a torch.Tensor, got {type(value).__name__}")
    if shape is not None and _shape(value) != _shape(shape):
        message = f"{what} has the wrong shape: expected {_shape(shape)}, got {_shape(value)}"
        raise ExerciseError(f"{message}. {shape_hint}" if shape_hint else message)
    if dtype is not None and value.dtype != dtype:
        message = f"{what} has the wrong dtype {value.dtype}: the inputs are {dtype} and it should keep their dtype"
        if value.dtype == torch.float64:
            message += (". Did you build a tensor with torch.tensor(..., dtype=torch.float64) or .double(), or go "
                        "through numpy (whose default float is float64)?")
        raise ExerciseError(message)
    if finite and value.is_floating_point() and not torch.isfinite(value).all():
        raise ExerciseError(
            f"{what} contains NaN or inf. A softmax over a row whose scores are all -inf gives NaN: "
            "is a mask inverted (True must mean 'may attend'), or an operation dividing by zero?"
        )
    return value


def _close(got: Any, expected: Any, atol: float = _ATOL) -> bool:
    """allclose for tensors and tuples of tensors; False on any shape difference."""
    if isinstance(expected, tuple):
        return isinstance(got, tuple) and len(got) == len(expected) and all(_close(g, e, atol) for g, e in zip(got, expected))
    if not isinstance(got, torch.Tensor) or _shape(got) != _shape(expected):
        return False
    if expected.dtype == torch.bool or got.dtype == torch.bool:
        return got.dtype == expected.dtype and torch.equal(got, expected)
    return torch.allclose(got.double(), expected.double(), atol=atol, rtol=_RTOL)


def _difference(got: torch.Tensor, expected: torch.Tensor) -> str:
    diff = (got.double() - expected.double()).abs()
    index = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
    return (
        f"largest difference {diff.max().item():.3g} at index {index}: "
        f"expected {expected[index].item():.4g}, got {got[index].item():.4g}"
    )


def _diagnose(got: Any, expected: Any, bugs: Sequence[Bug], what: str, advice: str = "", atol: float = _ATOL) -> None:
    """Return if got matches expected; else raise naming the first known bug that got matches."""
    if _close(got, expected, atol):
        return
    for hint, simulate in bugs:
        try:
            candidate = simulate()
        except Exception:  # noqa: BLE001 - a bug that cannot even run on these shapes is not the one
            continue
        if _close(got, candidate, atol):
            raise _known_bug(hint)
    if isinstance(expected, tuple):
        got, expected = next((g, e) for g, e in zip(got, expected) if not _close(g, e, atol))
    message = f"{what} differs from the reference ({_difference(got, expected)})"
    raise ExerciseError(f"{message}. {advice}" if advice else message)


def _expect_unchanged(originals: dict[str, torch.Tensor], inputs: dict[str, torch.Tensor]) -> None:
    for name, original in originals.items():
        if not torch.equal(original, inputs[name]):
            raise ExerciseError(
                f"your code changed its input `{name}` in place (an operation ending in _ or a `-=`/`/=`): "
                "use out-of-place operations so the caller's tensor is left alone"
            )


def _module(cls: Callable[..., Any], args: tuple, signature: str) -> nn.Module:
    module = _call(cls, *args, hint=f"the constructor should accept {signature}")
    if not isinstance(module, nn.Module):
        raise ExerciseError(f"{signature} should build an nn.Module (subclass nn.Module), got {type(module).__name__}")
    return module.eval()  # dropout off: the answer must be deterministic to compare


def _linear(module: nn.Module, name: str, d_in: int, d_out: int, owner: str) -> nn.Linear:
    layer = getattr(module, name, None)
    if not isinstance(layer, nn.Linear):
        raise ExerciseError(
            f"{owner} should have an attribute `{name}` holding nn.Linear({d_in}, {d_out}); "
            f"got {type(layer).__name__ if layer is not None else 'nothing'}"
        )
    if (layer.in_features, layer.out_features) != (d_in, d_out):
        raise ExerciseError(
            f"`{name}` should be nn.Linear({d_in}, {d_out}), got nn.Linear({layer.in_features}, {layer.out_features})"
        )
    return layer


def _submodule(module: nn.Module, name: str, description: str) -> nn.Module:
    sub = getattr(module, name, None)
    if not isinstance(sub, nn.Module):
        raise ExerciseError(f"your layer should have a submodule `{name}` ({description})")
    return sub


def _allowed_mask(shape: Sequence[int]) -> torch.Tensor:
    """A random bool mask whose every row has a visible key and a hidden key (no all-masked rows)."""
    mask = torch.rand(*shape) < 0.5
    mask[..., 0] = True
    mask[..., -1] = False
    return mask


# --- 1. scaled dot-product attention ----------------------------------------------


def _attention(q, k, v, mask=None, scale=None, dim=-1, mask_mode="fill"):
    """Softmax attention with knobs that reproduce the common bugs; returns (output, weights)."""
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # (..., T, S)
    if mask is not None and mask_mode == "fill":
        scores = scores.masked_fill(~mask, _NEG)
    elif mask is not None and mask_mode == "inverted":
        scores = scores.masked_fill(mask, _NEG)
    elif mask is not None and mask_mode == "multiply":
        scores = scores * mask
    weights = scores.softmax(dim)
    if mask is not None and mask_mode == "zero_after":
        weights = weights * mask
    return weights @ v, weights


def _sdpa_bugs(q, k, v, mask=None) -> list[Bug]:
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1)
    bugs: list[Bug] = []
    if mask is not None:
        bugs += [
            ("your mask has no effect. Note that scores.masked_fill(...) returns a NEW tensor: assign it, "
             "scores = scores.masked_fill(~mask, float('-inf')). (This bug made one published tutorial's model "
             "answer 'pool pool pool'.)",
             lambda: _attention(q, k, v)),
            ("your mask is inverted: True means 'may attend', so fill the scores where the mask is False: "
             "scores.masked_fill(~mask, float('-inf')) (or mask == 0), not masked_fill(mask, ...)",
             lambda: _attention(q, k, v, mask, mask_mode="inverted")),
            ("you zeroed masked weights after the softmax, so the remaining weights no longer sum to 1: "
             "mask the scores with -inf BEFORE the softmax",
             lambda: _attention(q, k, v, mask, mask_mode="zero_after")),
            ("multiplying the scores by the mask gives masked keys a score of 0, which still gets weight: "
             "use scores.masked_fill(~mask, float('-inf')) so their weight is exactly 0",
             lambda: _attention(q, k, v, mask, mask_mode="multiply")),
        ]

    def masked(s):
        return s if mask is None else s.masked_fill(~mask, _NEG)

    bugs += [
        ("did you forget to divide the scores by sqrt(d_k)? softmax(query @ key.transpose(-2, -1) / math.sqrt(d_k))",
         lambda: _attention(q, k, v, mask, scale=1.0)),
        (f"you divided the scores by d_k = {d_k} instead of sqrt(d_k) = {math.sqrt(d_k):.3g}",
         lambda: _attention(q, k, v, mask, scale=1 / d_k)),
        ("you multiplied the scores by sqrt(d_k); divide them by it instead",
         lambda: _attention(q, k, v, mask, scale=math.sqrt(d_k))),
    ]
    # sqrt of the size of another axis (query.size(0), key.size(1), ...) instead of the last one.
    other_sizes = sorted({n for n in (*q.shape[:-1], *k.shape[:-1], v.size(-1)) if n not in (1, d_k)})
    bugs += [
        (f"d_k is the size of the LAST axis of query and key, query.size(-1) = {d_k}; you divided by "
         f"sqrt({n}), the size of another axis", functools.partial(_attention, q, k, v, mask, scale=1 / math.sqrt(n)))
        for n in other_sizes
    ]
    bugs += [
        ("the softmax runs over the wrong axis (the queries): use softmax(dim=-1), over the keys, "
         "so each query's weights sum to 1",
         lambda: _attention(q, k, v, mask, dim=-2)),
        ("the softmax runs over the wrong axis (the batch): use softmax(dim=-1), over the keys",
         lambda: _attention(q, k, v, mask, dim=0)),
        ("the weights you return are the scores BEFORE the softmax: return the softmax probabilities",
         lambda: (_attention(q, k, v, mask)[0], masked(scores / math.sqrt(d_k)))),
        ("the output uses the scores instead of the softmax weights: output = weights @ value",
         lambda: (masked(scores / math.sqrt(d_k)) @ v, _attention(q, k, v, mask)[1])),
    ]
    # Matmul orders that only run when T == S and d_k == d_v (the square diagnosis run).
    weights = _attention(q, k, v, mask)[1]
    bugs += [
        ("output should be weights @ value, (..., T, S) @ (..., S, d_v); you multiplied value @ weights",
         lambda: (v @ weights, weights)),
        ("output should be weights @ value; you used the transposed weights",
         lambda: (weights.transpose(-2, -1) @ v, weights)),
        ("scores should be query @ key.transpose(-2, -1), one row per query; you computed key @ query.transpose(-2, -1)",
         lambda: _attention(k, q, v, mask.transpose(-2, -1) if mask is not None else None)),
        ("did you forget to transpose the key? scores = query @ key.transpose(-2, -1)",
         lambda: (((q @ k) / math.sqrt(d_k)).softmax(-1) @ v, ((q @ k) / math.sqrt(d_k)).softmax(-1))),
    ]
    return bugs


def _unpack_attention(
    result: Any, shapes: tuple[tuple[int, ...], tuple[int, ...]], dtype: torch.dtype
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
    if isinstance(weights, torch.Tensor) and _shape(weights) == (*batch, S, T) and S != T:
        raise ExerciseError(
            f"weights have shape {_shape(weights)} = (..., S, T) but should be {w_shape} = (..., T, S), one row per "
            "query: scores = query @ key.transpose(-2, -1)"
        )
    output = _expect_tensor(result[0], "output", out_shape, dtype, shape_hint="output = weights @ value, (..., T, S) @ (..., S, d_v)")
    weights = _expect_tensor(weights, "weights", w_shape, dtype, shape_hint="weights = softmax(scores), one row per query: (..., T, S)")
    return output, weights


def _run_attention(fn, q, k, v, mask=None) -> tuple[torch.Tensor, torch.Tensor]:
    inputs = {"query": q, "key": k, "value": v} | ({"mask": mask} if mask is not None else {})
    originals = {name: t.clone() for name, t in inputs.items()}
    args = (q, k, v) if mask is None else (q, k, v, mask)
    result = _call(fn, *args)
    _expect_unchanged(originals, inputs)
    shapes = ((*q.shape[:-1], v.size(-1)), (*q.shape[:-1], k.size(-2)))
    return _unpack_attention(result, shapes, q.dtype)


def _check_attention_case(fn, q, k, v, mask=None) -> None:
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
        advice = (f"Each row of the weights should sum to 1 (softmax over dim=-1), but yours sum to "
                  f"{sums.min().item():.3g}..{sums.max().item():.3g}")
    elif leaked > 1e-6:
        advice = (f"Masked keys should get exactly zero weight, yours get up to {leaked:.3g}: fill their scores "
                  "with float('-inf') before the softmax")
    _diagnose((output, weights), (expected_output, expected_weights), bugs, "(output, weights)", advice)


@_exercise(
    "scaled_dot_product_attention",
    "scale the query-key scores by 1/sqrt(d_k), hide masked keys (mask False) with -inf, softmax over "
    "the keys, and return (output, weights)",
)
def check_scaled_dot_product_attention(fn: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> str:
    """Check an implementation of scaled dot-product attention (paper §3.2.1, Eq. 1).

    Expected signature: ``fn(query, key, value, mask=None) -> (output, weights)``
    with ``weights = softmax(query @ keyᵀ / √d_k)`` (masked scores set to -inf
    where ``mask`` is False) and ``output = weights @ value``.

    Shape:
        query ``(..., T, d_k)``, key ``(..., S, d_k)``, value ``(..., S, d_v)``,
        mask bool broadcastable to ``(..., T, S)`` (True = may attend);
        output ``(..., T, d_v)``, weights ``(..., T, S)``.

    Args:
        fn: the learner's function.

    Returns:
        True if correct (one line printed), False if ``fn`` still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (missing √d_k, softmax axis, mask
            inverted or discarded, matmul order, ...).
    """
    q, k, v = torch.randn(2, 4, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 5)
    try:
        _check_attention_case(fn, q, k, v)
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
            f"{error.args[0]}\n  with query {_shape(q)}, key {_shape(k)}, value {_shape(v)} the shapes should go "
            f"scores = query @ key.transpose(-2, -1) -> (2, 4, 6), output = weights @ value -> (2, 4, 5) "
            "(note: key.T reverses ALL the axes of a batched tensor)"
        ) from error.__cause__
    _check_attention_case(fn, q, k, v, _allowed_mask((2, 4, 6)))
    # With a heads axis and a padding mask (B, 1, 1, S), as MultiHeadAttention calls it.
    q4, k4, v4 = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 5)
    pad = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]  # (B, 1, 1, S)
    try:
        _check_attention_case(fn, q4, k4, v4, pad)
    except ExerciseError as error:
        raise ExerciseError(
            f"correct on (B, T, d_k) inputs but not with a heads axis (B, H, T, d_k) and a (B, 1, 1, S) mask: "
            f"count axes from the end (key.transpose(-2, -1), size(-1), softmax(dim=-1)).\n  {error.args[0]}"
        ) from error.__cause__
    return "shapes, values against F.scaled_dot_product_attention, masking, rows sum to 1, heads axis"


# --- 2. masks ----------------------------------------------------------------------


@_exercise("causal_mask", "return a (size, size) bool tensor, True on and below the diagonal")
def check_causal_mask(fn: Callable[[int], torch.Tensor]) -> str:
    """Check a causal ("subsequent") mask (paper §3.2.3).

    Expected signature: ``fn(size) -> BoolTensor (size, size)`` with
    ``mask[t, s] = True`` iff ``s <= t``: position t may attend to 0..t,
    itself included.

    Args:
        fn: the learner's function.

    Returns:
        True if correct (one line printed), False if ``fn`` still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (diagonal excluded, upper triangle,
            inverted, float instead of bool, ...).
    """
    for size in (5, 1, 8):
        mask = _expect_tensor(_call(fn, size), f"causal_mask({size})", finite=False)
        if _shape(mask) != (size, size):
            raise ExerciseError(f"causal_mask({size}) should have shape ({size}, {size}), got {_shape(mask)}")
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
                    "(dtype=torch.bool) with True = may attend, e.g. torch.ones(size, size, dtype=torch.bool).tril()"
                )
            raise ExerciseError(f"the mask should be a bool tensor (dtype=torch.bool), got {mask.dtype}")
        bugs = [
            ("the mask is inverted: True must mean 'may attend' (on and below the diagonal). True = blocked is "
             "nn.Transformer's convention, not ours", lambda: ~torch.tril(ones)),
            ("off by one: the diagonal is excluded, but a token may attend to itself. Use tril() (diagonal=0), "
             "not tril(-1)", lambda: torch.tril(ones, -1)),
            ("off by one: position t may also see t + 1. Use tril() (diagonal=0), not tril(1)", lambda: torch.tril(ones, 1)),
            ("that is the upper triangle (triu): position t may see the PAST, 0..t, so True goes on and below the "
             "diagonal: tril()", lambda: torch.triu(ones)),
            ("every position may attend everywhere: keep only the lower triangle with tril()", lambda: ones),
        ]
        _diagnose(mask, expected, bugs, f"causal_mask({size})")
    return "shape, bool dtype, lower triangle with the diagonal, sizes 1, 5, 8"


@_exercise("padding_mask", "return a bool tensor (B, 1, 1, S), True where the token is not pad_id")
def check_padding_mask(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> str:
    """Check a padding mask that hides padding keys from every query.

    Expected signature: ``fn(tokens, pad_id) -> BoolTensor`` broadcastable to
    ``(B, 1, 1, S)``, True where the key is a real token (not padding).

    Shape:
        tokens ``(B, S)`` -> mask ``(B, 1, 1, S)``, which broadcasts over heads
        and queries of the scores ``(B, H, T, S)``.

    Args:
        fn: the learner's function.

    Returns:
        True if correct (one line printed), False if ``fn`` still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (inverted, shape that masks queries
            or mis-broadcasts, not bool, hard-coded pad id).
    """
    pad_id = 1  # not 0, so a hard-coded 0 shows; 0 appears as a real token below
    tokens = torch.tensor([[5, 0, 7, 3, 1, 1], [4, 9, 2, 8, 6, 0], [2, 1, 1, 1, 1, 1]])
    B, S = tokens.shape
    H, T = 2, 5  # scores (B, H, T, S) with every size different, so wrong broadcasts show
    original = tokens.clone()
    mask = _expect_tensor(_call(fn, tokens, pad_id), "padding_mask(tokens, pad_id)")
    _expect_unchanged({"tokens": original}, {"tokens": tokens})
    if _shape(mask) == (B, S):
        raise ExerciseError(
            f"shape (B, S) = {(B, S)} does not broadcast over the scores (B, H, T, S): PyTorch lines up trailing "
            "axes, so the batch axis would meet the queries. Add two singleton axes: [:, None, None, :] -> (B, 1, 1, S)"
        )
    if _shape(mask) == (B, 1, S, 1) or _shape(mask) == (B, S, 1):
        raise ExerciseError(
            f"shape {_shape(mask)} masks queries (rows) instead of keys (columns): padding keys must be hidden "
            "from every query, so S goes last: (B, 1, 1, S)"
        )
    try:
        broadcast = torch.broadcast_shapes(mask.shape, (B, H, T, S))
    except RuntimeError:
        broadcast = None
    if broadcast != (B, H, T, S):
        raise ExerciseError(f"the mask should have shape (B, 1, 1, S) = {(B, 1, 1, S)}, got {_shape(mask)}")
    if mask.dtype != torch.bool:
        raise ExerciseError(
            f"the mask should be a bool tensor (True = may attend), got dtype {mask.dtype}: "
            "a comparison like tokens != pad_id is already bool"
        )
    got = mask.expand(B, H, T, S)

    def full(m):
        return m[:, None, None, :].expand(B, H, T, S)

    bugs = [
        ("the mask is inverted: True must mean 'may attend', i.e. a real token: use tokens != pad_id, not ==",
         lambda: full(tokens == pad_id)),
        ("did you hard-code the pad id? use the pad_id argument: tokens != pad_id", lambda: full(tokens != 0)),
    ]
    _diagnose(got, full(tokens != pad_id), bugs, "the mask")
    return "bool dtype, shape (B, 1, 1, S) broadcasting over the keys, padding positions hidden"


@_exercise(
    "target_mask",
    "return a bool tensor (B, 1, T, T): True where the key is a real token AND is not in the future",
)
def check_target_mask(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> str:
    """Check the decoder's self-attention mask: no padding keys and no future keys.

    Expected signature: ``fn(tokens, pad_id) -> BoolTensor`` broadcastable to
    ``(B, 1, T, T)``: ``mask[b, 0, t, s]`` is True iff ``s <= t`` and token
    ``s`` of sentence ``b`` is not padding (paper §3.2.3, the decoder in §3.1).

    Args:
        fn: the learner's function.

    Returns:
        True if correct (one line printed), False if ``fn`` still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (only causal, only padding, OR
            instead of AND, inverted, padding applied to the queries).
    """
    pad_id = 1
    tokens = torch.tensor([[2, 5, 0, 7, 1, 1], [2, 4, 9, 3, 8, 6], [2, 6, 1, 1, 1, 1]])
    B, T = tokens.shape
    H = 2
    original = tokens.clone()
    mask = _expect_tensor(_call(fn, tokens, pad_id), "target_mask(tokens, pad_id)", finite=False)
    _expect_unchanged({"tokens": original}, {"tokens": tokens})
    try:
        broadcast = torch.broadcast_shapes(mask.shape, (B, H, T, T))
    except RuntimeError:
        broadcast = None
    if broadcast != (B, H, T, T):
        raise ExerciseError(
            f"the mask should broadcast to the scores (B, H, T, T) = {(B, H, T, T)}, got shape {_shape(mask)}: "
            "combine a (B, 1, 1, T) padding mask with a (T, T) causal mask and broadcasting gives (B, 1, T, T)"
        )
    if mask.dtype != torch.bool:
        raise ExerciseError(f"the mask should be a bool tensor (True = may attend), got dtype {mask.dtype}")
    got = mask.expand(B, H, T, T)
    causal = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T)
    keys = (tokens != pad_id)[:, None, None, :]  # (B, 1, 1, T)
    queries = (tokens != pad_id)[:, None, :, None]  # (B, 1, T, 1)

    def full(m):
        return m.expand(B, H, T, T)

    bugs = [
        ("only the causal part is there: padding keys must be hidden too. AND (&) it with the padding mask",
         lambda: full(causal.expand(B, 1, T, T))),
        ("only the padding part is there: the decoder must not see future tokens. AND (&) it with the causal mask",
         lambda: full(keys.expand(B, 1, T, T))),
        ("that is OR (|): a key must be real AND not in the future, so combine with &",
         lambda: full(keys | causal)),
        ("the mask is inverted: True must mean 'may attend'", lambda: full(~(keys & causal))),
        ("the padding hides queries (rows) instead of keys (columns): pad the last axis, tokens[:, None, None, :]",
         lambda: full(queries & causal)),
        ("the causal part is the upper triangle: a token may see the past, so use tril()",
         lambda: full(keys & causal.T)),
        ("off by one: the diagonal is excluded, but a token may attend to itself",
         lambda: full(keys & torch.ones(T, T, dtype=torch.bool).tril(-1))),
    ]
    _diagnose(got, full(keys & causal), bugs, "the mask")
    return "bool dtype, broadcasts to (B, H, T, T), padding keys and future keys hidden"


@_exercise(
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
        True if correct (one line printed), False if ``fn`` still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (input returned unchanged, a
            float/int result such as ``1 - blocked``, the argument changed in place).
    """
    size = 5
    positions = torch.arange(size)
    blocked = positions[None, :] > positions[:, None]  # (T, T): True = the future, which may not be seen
    original = blocked.clone()
    answer = _expect_tensor(_call(fn, blocked), "to_course_mask(blocked)", finite=False)
    if not torch.equal(blocked, original):
        raise ExerciseError(
            "your function changed its argument in place (e.g. logical_not_() or blocked[...] = ...): "
            "build and return a new tensor, ~blocked"
        )
    if _shape(answer) != (size, size):
        raise ExerciseError(f"the answer should keep the mask's shape {(size, size)}, got {_shape(answer)}")
    expected = ~original
    if answer.dtype != torch.bool:
        if torch.equal(answer != 0, expected):
            raise ExerciseError(
                f"the values are right but the dtype is {answer.dtype}: converting to numbers (blocked.int(), .float(), arithmetic) loses the bool dtype; "
                "~blocked (or blocked.logical_not()) keeps a bool tensor"
            )
        raise ExerciseError(f"return a bool tensor (True = may attend), got dtype {answer.dtype}")
    bugs = [
        ("that is the input unchanged: every True must become False and every False True (use ~blocked)",
         lambda: original),
        ("every position may attend everywhere: only the blocked entries should become False", lambda: torch.ones_like(original)),
    ]
    _diagnose(answer, expected, bugs, "the mask")
    return "bool dtype, same shape, every entry swapped, argument left unchanged"


# --- 3. positional encoding ---------------------------------------------------------


def _sinusoid(max_len, d_model, base=10000.0, start=0, exponent="2i", layout="interleaved", first="sin"):
    """The §3.5 table in float64, with knobs that reproduce the common bugs."""
    position = torch.arange(start, start + max_len, dtype=torch.float64)[:, None]  # (L, 1)
    pair = torch.arange(d_model // 2, dtype=torch.float64)  # i = 0 .. D/2-1
    # "i" forgot the factor 2; "4i" doubled a 2i that was already there (i in range(0, D, 2), then 2 * i).
    factor = {"2i": 2, "i": 1, "4i": 4}[exponent]
    # exp/log form of base^(-2i/D): deliberately not the package's formula, to stay independent
    frequency = torch.exp(-math.log(base) * factor * pair / d_model)
    angle = position * frequency  # (L, D/2)
    sin, cos = torch.sin(angle), torch.cos(angle)
    if first == "cos":
        sin, cos = cos, sin
    if layout == "halves":
        return torch.cat([sin, cos], dim=-1).float()  # (L, D)
    return torch.stack([sin, cos], dim=-1).reshape(max_len, d_model).float()  # (L, D/2, 2) -> (L, D)


def _sinusoid_per_column(max_len, d_model, two=False):
    """Bug: every column gets its own frequency, base^(j/D) or base^(2j/D) with j the column."""
    position = torch.arange(max_len, dtype=torch.float64)[:, None]
    column = torch.arange(d_model, dtype=torch.float64)
    angle = position * torch.exp(-math.log(10000.0) * (2 if two else 1) * column / d_model)
    pe = torch.where(column % 2 == 0, torch.sin(angle), torch.cos(angle))
    return pe.float()


@_exercise(
    "positional_encoding",
    "return the (max_len, d_model) table of §3.5: sines in even columns, cosines in odd columns",
)
def check_positional_encoding(fn: Callable[[int, int], torch.Tensor]) -> str:
    """Check the sinusoidal positional encoding table (paper §3.5).

    Expected signature: ``fn(max_len, d_model) -> FloatTensor (max_len, d_model)``
    with ``PE[pos, 2i] = sin(pos / 10000^(2i/d_model))`` in even columns and
    ``PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model))`` in odd columns, pos from 0.

    Args:
        fn: the learner's function.

    Returns:
        True if correct (one line printed), False if ``fn`` still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (sin/cos swapped, base 1000,
            exponent i/d or 4i/d, halves instead of interleaved, positions from 1).
    """
    for max_len, d_model in ((50, 16), (7, 4)):
        pe = _expect_tensor(_call(fn, max_len, d_model), f"the table for max_len={max_len}, d_model={d_model}")
        if _shape(pe) == (1, max_len, d_model):
            raise ExerciseError(
                f"shape {_shape(pe)}: return the 2-D table (max_len, d_model) = {(max_len, d_model)}; "
                "the module adds the batch axis when it adds the table to the embeddings"
            )
        if _shape(pe) != (max_len, d_model):
            raise ExerciseError(f"the table should have shape (max_len, d_model) = {(max_len, d_model)}, got {_shape(pe)}")
        if pe.dtype != torch.float32:
            raise ExerciseError(
                f"the table should be float32 (torch's default float), got {pe.dtype}: it is added to float32 "
                "embeddings; build it from torch.arange(..., dtype=torch.float32)"
            )
        bugs = [
            ("sin and cos are swapped: even columns (0, 2, ...) hold sin, odd columns cos",
             lambda: _sinusoid(max_len, d_model, first="cos")),
            ("the base should be 10000 (paper §3.5), not 1000: pos / 10000^(2i/d_model)",
             lambda: _sinusoid(max_len, d_model, base=1000.0)),
            ("the exponent should be 2i/d_model, where i indexes the sin/cos PAIR (columns 2i and 2i+1); "
             "you used i/d_model", lambda: _sinusoid(max_len, d_model, exponent="i")),
            ("the factor 2 is there twice: torch.arange(0, d_model, 2) already gives 2i = 0, 2, 4, ..., so the "
             "exponent is that divided by d_model; multiplying it by 2 again makes it 4i/d_model",
             lambda: _sinusoid(max_len, d_model, exponent="4i")),
            ("the exponent should be 2i/d_model with i the pair index, so columns 2i and 2i+1 share one frequency; "
             "you gave every column its own", lambda: _sinusoid_per_column(max_len, d_model)),
            ("the exponent should be 2i/d_model with i the pair index, so columns 2i and 2i+1 share one frequency; "
             "you gave every column its own", lambda: _sinusoid_per_column(max_len, d_model, two=True)),
            ("sin and cos should be interleaved (sin in columns 0, 2, 4, ..., cos in 1, 3, 5, ...), not "
             "concatenated as two halves: pe[:, 0::2] = sin, pe[:, 1::2] = cos",
             lambda: _sinusoid(max_len, d_model, layout="halves")),
            ("positions should start at 0 (torch.arange(max_len)), not 1: row 0 is [0, 1, 0, 1, ...]",
             lambda: _sinusoid(max_len, d_model, start=1)),
        ]
        _diagnose(pe, _sinusoid(max_len, d_model), bugs, f"the table for max_len={max_len}, d_model={d_model}", atol=1e-4)
    return "shape, dtype, values for two sizes against the formula of §3.5"


# --- 4. multi-head attention --------------------------------------------------------


def _mha(m, n_heads, query, key, value, mask=None, *, scale=None, split="ok", concat="ok", w_o=True, mask_mode="ok", inputs="ok"):
    """Multi-head attention from the learner's four Linear layers, with knobs that reproduce the common bugs."""
    B, T, D = query.shape
    Dh = D // n_heads
    if inputs == "query":
        key = value = query
    elif inputs == "swap":
        key, value = value, key

    def project(layer, x):
        return F.linear(x, layer.weight, layer.bias)

    def heads(x):
        L = x.size(1)
        if split == "view":  # no transpose: each "head" gets a slab of consecutive positions
            return x.reshape(B, n_heads, L, Dh)
        return x.reshape(B, L, n_heads, Dh).transpose(1, 2)  # (B, L, D) -> (B, H, L, Dh)

    q, k, v = heads(project(m.w_q, query)), heads(project(m.w_k, key)), heads(project(m.w_v, value))
    scores = q @ k.transpose(-2, -1) * (1 / math.sqrt(Dh) if scale is None else scale)  # (B, H, T, S)
    if mask is not None and mask_mode != "ignore":
        scores = scores.masked_fill(mask if mask_mode == "inverted" else ~mask, _NEG)
    out = scores.softmax(-1) @ v  # (B, H, T, Dh)
    if concat == "no_transpose":
        out = out.reshape(B, T, D)
    elif concat == "heads_last":
        out = out.permute(0, 2, 3, 1).reshape(B, T, D)  # (B, T, Dh, H): head index varies fastest
    else:
        out = out.transpose(1, 2).reshape(B, T, D)  # (B, H, T, Dh) -> (B, T, D)
    return project(m.w_o, out) if w_o else out


def _torch_mha(m, n_heads, query, key, value, mask=None) -> torch.Tensor:
    """nn.MultiheadAttention holding the learner's weights: the independent reference."""
    D = query.size(-1)
    ref = nn.MultiheadAttention(D, n_heads, dropout=0.0, batch_first=True).eval()
    zero = torch.zeros(D)
    ref.in_proj_weight.copy_(torch.cat([m.w_q.weight, m.w_k.weight, m.w_v.weight]))
    ref.in_proj_bias.copy_(torch.cat([b if b is not None else zero for b in (m.w_q.bias, m.w_k.bias, m.w_v.bias)]))
    ref.out_proj.weight.copy_(m.w_o.weight)
    ref.out_proj.bias.copy_(m.w_o.bias if m.w_o.bias is not None else zero)
    attn_mask = None
    if mask is not None:
        B, T, S = query.size(0), query.size(1), key.size(1)
        # nn.MultiheadAttention reads True as BLOCKED, the opposite of our convention: invert.
        attn_mask = ~mask.expand(B, n_heads, T, S).reshape(B * n_heads, T, S)
    return ref(query, key, value, attn_mask=attn_mask, need_weights=False)[0]


@_exercise(
    "multi_head_attention",
    "project with w_q, w_k, w_v, split into heads (B, H, L, d_head), attend, merge the heads and apply w_o",
)
def check_multi_head_attention(cls: Callable[..., nn.Module]) -> str:
    """Check a multi-head attention module (paper §3.2.2).

    Expected signature: ``cls(d_model, n_heads, dropout=0.0)``, an ``nn.Module``
    owning four ``nn.Linear(d_model, d_model)`` named ``w_q, w_k, w_v, w_o``, with
    ``forward(query, key, value, mask=None) -> output``. The check copies those
    weights into ``nn.MultiheadAttention`` and compares.

    Shape:
        query ``(B, T, D)``, key and value ``(B, S, D)``, mask bool broadcastable
        to ``(B, H, T, S)`` (True = may attend); output ``(B, T, D)``.

    Args:
        cls: the learner's class.

    Returns:
        True if correct (one line printed), False if it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (scaling, head split or merge, missing
            w_o, mask ignored or inverted, key/value mixed up).
    """
    D, H = 12, 3  # d_head = 4: sqrt(d_head) = 2, sqrt(d_model) = 3.46, d_head = 4 all differ
    m = _module(cls, (D, H, 0.0), "cls(d_model, n_heads, dropout=0.0)")
    for name in ("w_q", "w_k", "w_v", "w_o"):
        _linear(m, name, D, D, "your MultiHeadAttention")
    B, T, S = 2, 4, 6
    pad = torch.tensor([[True] * S, [True] * (S - 2) + [False] * 2])
    x = torch.randn(B, T, D)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    # T != S and key != value, so mixing up lengths or inputs shows.
    cases = [
        ("cross-attention without a mask", (torch.randn(B, T, D), torch.randn(B, S, D), torch.randn(B, S, D), None)),
        ("cross-attention with a padding mask (B, 1, 1, S)",
         (torch.randn(B, T, D), torch.randn(B, S, D), torch.randn(B, S, D), pad[:, None, None, :])),
        ("self-attention with a causal mask (T, T)", (x, x, x, causal)),
    ]
    for case, (q, k, v, mask) in cases:
        inputs = {"query": q, "key": k, "value": v}
        originals = {name: t.clone() for name, t in inputs.items()}
        out = _call(m, q, k, v) if mask is None else _call(m, q, k, v, mask)
        _expect_unchanged(originals, inputs)
        out = _expect_tensor(out, "the output", (B, T, D), q.dtype, shape_hint="one d_model vector per query: (B, T, d_model)")

        def bug(**knobs):
            return lambda: _mha(m, H, q, k, v, mask, **knobs)

        bugs = [
            ("did you forget to divide the scores by sqrt(d_head)? Each head's scores are "
             "q @ k.transpose(-2, -1) / math.sqrt(d_head)", bug(scale=1.0)),
            (f"divide each head's scores by sqrt(d_head) = sqrt(d_model / n_heads) = {math.sqrt(D // H):.3g}, "
             f"not sqrt(d_model) = {math.sqrt(D):.3g}", bug(scale=1 / math.sqrt(D))),
            (f"divide by sqrt(d_head) = {math.sqrt(D // H):.3g}, not d_head = {D // H}", bug(scale=1 / (D // H))),
            ("the heads are split wrongly: x.view(B, H, L, d_head) mixes positions across heads. Split the LAST "
             "axis: x.view(B, L, H, d_head).transpose(1, 2)", bug(split="view", concat="no_transpose")),
            ("the heads are split wrongly: x.view(B, H, L, d_head) mixes positions across heads. Split the LAST "
             "axis: x.view(B, L, H, d_head).transpose(1, 2)", bug(split="view")),
            ("the heads are concatenated wrongly: transpose (B, H, T, d_head) back to (B, T, H, d_head) BEFORE "
             "reshaping to (B, T, d_model): out.transpose(1, 2).reshape(B, T, d_model)", bug(concat="no_transpose")),
            ("the heads are concatenated in the wrong order: each position's vector is head 0's d_head values, "
             "then head 1's, ...: out.transpose(1, 2).reshape(B, T, d_model)", bug(concat="heads_last")),
            ("the output projection w_o is missing: return self.w_o(concatenated heads)", bug(w_o=False)),
            ("forward uses the query for keys and values: project key with w_k and value with w_v", bug(inputs="query")),
            ("keys and values are swapped: keys come from w_k(key), values from w_v(value)", bug(inputs="swap")),
        ]
        if mask is not None:
            bugs[:0] = [
                ("the mask is ignored: pass it on to the attention, where scores are filled with -inf where it is False",
                 bug(mask_mode="ignore")),
                ("the mask is inverted: True means 'may attend'; fill the scores where the mask is False",
                 bug(mask_mode="inverted")),
            ]
        _diagnose(out, _torch_mha(m, H, q, k, v, mask), bugs, f"the output ({case})",
                  "compare with nn.MultiheadAttention holding your weights")
    return "shapes, values against nn.MultiheadAttention with your weights, padding and causal masks, inputs unchanged"


# --- 5. layer norm and feed-forward -------------------------------------------------


def _layer_norm(x, weight, bias, eps=1e-5, unbiased=False, eps_outside=False, dim=-1,
                gain=True, shift=True, sqrt=True, swap=False):
    """LayerNorm with knobs that reproduce the common bugs (defaults: nn.LayerNorm)."""
    mean = x.mean(dim=dim, keepdim=True)
    var = x.var(dim=dim, keepdim=True, unbiased=unbiased)
    if eps_outside:
        normed = (x - mean) / (var.sqrt() + eps)
    else:
        normed = (x - mean) / ((var + eps).sqrt() if sqrt else var + eps)
    if swap:
        weight, bias = bias, weight
    return (weight * normed if gain else normed) + (bias if shift else 0)


@_exercise(
    "layer_norm",
    "create the parameters weight and bias, and normalise each vector over its last axis",
)
def check_layer_norm(cls: Callable[..., nn.Module]) -> str:
    """Check a layer normalisation module (Ba et al. 2016; paper §3.1 uses it after every sublayer).

    Expected signature: ``cls(d_model, eps=1e-5)``, an ``nn.Module`` with
    parameters ``weight`` (ones) and ``bias`` (zeros) of shape ``(d_model,)``,
    computing ``weight * (x - mean) / sqrt(var + eps) + bias`` over the last
    axis with the biased variance: the same function as ``nn.LayerNorm``.

    Shape:
        ``(..., D)`` -> ``(..., D)``.

    Args:
        cls: the learner's class.

    Returns:
        True if correct (one line printed), False if it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (unbiased variance, eps outside the
            square root, wrong axis, missing gain or bias, ignored eps).
    """
    D = 8
    m = _module(cls, (D,), "cls(d_model, eps=1e-5)")
    for name, start in (("weight", torch.ones(D)), ("bias", torch.zeros(D))):
        p = getattr(m, name, None)
        if not isinstance(p, nn.Parameter):
            raise ExerciseError(
                f"`{name}` should be an nn.Parameter of shape ({D},) so the optimiser trains it; "
                f"got {type(p).__name__ if p is not None else 'nothing'}"
            )
        if _shape(p) != (D,):
            raise ExerciseError(f"`{name}` should have shape (d_model,) = ({D},), got {_shape(p)}")
        if not torch.equal(p.detach(), start):
            start_name = "torch.ones(d_model)" if name == "weight" else "torch.zeros(d_model)"
            raise ExerciseError(f"`{name}` should start as {start_name}, as nn.LayerNorm's does")
    # Non-trivial gain and bias, so forgetting (or swapping) them shows.
    m.weight.copy_(1 + 0.5 * torch.randn(D))
    m.bias.copy_(torch.randn(D))
    weight, bias = m.weight.detach().clone(), m.bias.detach().clone()
    # Rows at very different scales: tiny-variance rows make eps's place visible.
    scale = torch.tensor([[3.0, 1e-3, 1.0], [0.5, 2.0, 1e-3]])[..., None]  # (2, 3, 1)
    x = scale * (torch.randn(2, 3, D) + 1.5)  # (2, 3, D), non-zero means
    for eps in (1e-5, 1e-2):
        layer = m if eps == 1e-5 else _make_layer_norm(cls, D, eps, weight, bias)
        original = x.clone()
        out = _expect_tensor(_call(layer, x), "the output", x.shape, x.dtype)
        _expect_unchanged({"x": original}, {"x": x})
        reference = nn.LayerNorm(D, eps=eps)
        reference.weight.copy_(weight)
        reference.bias.copy_(bias)

        def bug(**knobs):
            return lambda: _layer_norm(x, weight, bias, **({"eps": eps} | knobs))

        bugs = [
            ("use the biased variance, as nn.LayerNorm does: x.var(dim=-1, keepdim=True, unbiased=False) "
             "(torch.var's default divides by D - 1)", bug(unbiased=True)),
            ("eps belongs INSIDE the square root: (x - mean) / torch.sqrt(var + eps), not / (std + eps)", bug(eps_outside=True)),
            ("use the biased variance and put eps inside the square root: (x - mean) / torch.sqrt(var + eps) "
             "with var = x.var(dim=-1, keepdim=True, unbiased=False)", bug(eps_outside=True, unbiased=True)),
            ("divide by the standard deviation, torch.sqrt(var + eps), not by the variance", bug(sqrt=False)),
            ("normalise over the LAST axis, the features: mean(dim=-1, keepdim=True), var(dim=-1, ...); "
             "you normalised over the batch (dim=0)", bug(dim=0)),
            ("normalise over the LAST axis, the features: mean(dim=-1, keepdim=True); you normalised over the "
             "positions (dim=1)", bug(dim=1)),
            ("normalise each vector over the LAST axis (dim=-1, keepdim=True), not over the whole tensor",
             bug(dim=(0, 1, 2))),
            ("the gain is missing: multiply the normalised x by self.weight", bug(gain=False)),
            ("the bias is missing: add self.bias after scaling", bug(shift=False)),
            ("the gain and the bias are missing: return self.weight * normalised + self.bias", bug(gain=False, shift=False)),
            ("weight and bias are swapped: weight multiplies, bias adds", bug(swap=True)),
        ]
        if eps != 1e-5:
            bugs.insert(0, ("the eps argument is ignored: store it (self.eps = eps) and use it", bug(eps=1e-5)))
        else:
            bugs.insert(0, ("the default eps should be 1e-5, as nn.LayerNorm's", bug(eps=1e-6)))
        _diagnose(out, reference(x), bugs, f"the output (eps={eps})", "compare with nn.LayerNorm(d_model)")
    return "parameters, values against nn.LayerNorm with non-trivial weight and bias, eps, inputs unchanged"


def _make_layer_norm(cls, D, eps, weight, bias) -> nn.Module:
    m = _module(lambda *args: cls(*args, eps=eps), (D,), "cls(d_model, eps=1e-5)")
    m.weight.copy_(weight)
    m.bias.copy_(bias)
    return m


def _ffn(m, x, relu_at=("hidden",), activation=F.relu, residual=False):
    """w_2(relu(w_1(x))) from the learner's layers, with knobs that reproduce the common bugs."""
    h = F.linear(activation(x) if "input" in relu_at else x, m.w_1.weight, m.w_1.bias)  # (B, L, d_ff)
    h = activation(h) if "hidden" in relu_at else h
    y = F.linear(h, m.w_2.weight, m.w_2.bias)  # (B, L, D)
    y = activation(y) if "output" in relu_at else y
    return x + y if residual else y


@_exercise("feed_forward", "Linear w_1 (d_model -> d_ff), ReLU, Linear w_2 (d_ff -> d_model)")
def check_feed_forward(cls: Callable[..., nn.Module]) -> str:
    """Check the position-wise feed-forward network (paper §3.3, Eq. 2).

    Expected signature: ``cls(d_model, d_ff, dropout=0.0)``, an ``nn.Module`` with
    ``w_1 = nn.Linear(d_model, d_ff)`` and ``w_2 = nn.Linear(d_ff, d_model)``,
    computing ``FFN(x) = w_2(ReLU(w_1(x)))`` (dropout, if any, on the hidden layer).

    Shape:
        ``(B, L, D)`` -> ``(B, L, D)`` through ``(B, L, d_ff)``.

    Args:
        cls: the learner's class.

    Returns:
        True if correct (one line printed), False if it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (missing ReLU, ReLU in the wrong
            place or twice, another activation, a residual added inside).
    """
    D, d_ff = 6, 10
    m = _module(cls, (D, d_ff, 0.0), "cls(d_model, d_ff, dropout=0.0)")
    _linear(m, "w_1", D, d_ff, "your feed-forward module")
    _linear(m, "w_2", d_ff, D, "your feed-forward module")
    x = torch.randn(2, 3, D)
    original = x.clone()
    out = _expect_tensor(_call(m, x), "the output", x.shape, x.dtype, shape_hint="FFN maps (B, L, d_model) to (B, L, d_model)")
    _expect_unchanged({"x": original}, {"x": x})
    bugs = [
        ("the ReLU is missing: without it the two Linear layers collapse into one linear map. "
         "w_2(relu(w_1(x)))", lambda: _ffn(m, x, relu_at=())),
        ("apply the ReLU only between the two Linear layers: the output of w_2 must be able to go negative",
         lambda: _ffn(m, x, relu_at=("hidden", "output"))),
        ("the ReLU is in the wrong place: it goes between the Linear layers, on the hidden (B, L, d_ff) "
         "activations, not after w_2", lambda: _ffn(m, x, relu_at=("output",))),
        ("the ReLU is in the wrong place: it goes on the hidden activations, after w_1, not on the input",
         lambda: _ffn(m, x, relu_at=("input",))),
        ("the paper uses ReLU, max(0, x), between the two Linear layers (GELU is a later choice, e.g. BERT/GPT)",
         lambda: _ffn(m, x, activation=F.gelu)),
        ("don't add the residual here: the sublayer connection adds x around the whole FFN",
         lambda: _ffn(m, x, residual=True)),
    ]
    _diagnose(out, _ffn(m, x), bugs, "the output")
    return "w_1, w_2 shapes, values of w_2(relu(w_1(x))), inputs unchanged"


# --- 6. encoder and decoder layers --------------------------------------------------


def _residual_stack(x, steps, mode="post"):
    """Apply (sublayer, norm, residual) steps: post-norm (the paper), pre-norm, or norm on the sublayer."""
    for sublayer, norm, residual in steps:
        if mode == "pre":
            x = (x if residual else 0) + sublayer(norm(x))
        elif mode == "norm_sublayer":
            x = x + norm(sublayer(x))
        else:
            x = norm((x if residual else 0) + sublayer(x))
    return x


def _copy_layer(learner: nn.Module, name: str, description: str, target: nn.Module) -> None:
    """Load the learner's submodule `name` into the reference's `target` (same parameter names)."""
    source = _submodule(learner, name, description)
    try:
        target.load_state_dict(source.state_dict())
    except RuntimeError as error:
        raise ExerciseError(f"`{name}` should be {description}; its parameters do not match:\n{error}") from None


def _learner_norms(learner: nn.Module, count: int) -> list[tuple[str, Any]]:
    """The learner's LayerNorms in sublayer order, with the names to report them by.

    Two layouts: ``norm1``, ``norm2``, ... on the layer (what the exercises ask for),
    or ``sublayers[i].norm`` (the package's SublayerConnection, as in model.EncoderLayer).
    """
    sublayers = getattr(learner, "sublayers", None)
    if not hasattr(learner, "norm1") and isinstance(sublayers, nn.ModuleList) and len(sublayers) == count:
        return [(f"sublayers[{i}].norm", getattr(sublayer, "norm", None)) for i, sublayer in enumerate(sublayers)]
    return [(f"norm{i + 1}", getattr(learner, f"norm{i + 1}", None)) for i in range(count)]


def _copy_norms(learner: nn.Module, targets: Sequence[nn.Module], D: int) -> None:
    """Give the learner's norms distinct non-trivial gains and biases, and copy them into the reference."""
    for (name, norm), target in zip(_learner_norms(learner, len(targets)), targets):
        if not isinstance(norm, nn.Module):
            raise ExerciseError(
                f"your layer should have a submodule `{name}` (a LayerNorm(d_model) with weight and bias of shape ({D},))"
            )
        for param in ("weight", "bias"):
            p = getattr(norm, param, None)
            if not isinstance(p, torch.Tensor) or _shape(p) != (D,):
                raise ExerciseError(f"`{name}` should be a LayerNorm(d_model) with a `{param}` of shape ({D},)")
        norm.weight.copy_(1 + 0.5 * torch.randn(D))  # distinct per norm, so a swapped or shared norm shows
        norm.bias.copy_(0.5 * torch.randn(D))
        target.weight.copy_(norm.weight)
        target.bias.copy_(norm.bias)


def _pad_mask(lengths: Sequence[int], size: int) -> torch.Tensor:
    return (torch.arange(size)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]  # (B, 1, 1, size)


_NORM_HINT = "norm the SUM: x = norm(x + sublayer(x)), not x + norm(sublayer(x))"


@_exercise(
    "encoder_layer",
    "self-attention then feed-forward, each inside a residual connection followed by its LayerNorm",
)
def check_encoder_layer(cls: Callable[..., nn.Module]) -> str:
    """Check an encoder layer: self-attention then feed-forward, each with residual and post-norm (paper §3.1).

    Expected signature: ``cls(d_model, n_heads, d_ff, dropout=0.0)``, an
    ``nn.Module`` with submodules ``self_attn`` (the package's
    ``MultiHeadAttention``), ``feed_forward`` (``PositionwiseFeedForward``),
    ``norm1``, ``norm2`` (LayerNorm), and ``forward(x, src_mask=None)``::

        x = norm1(x + dropout(self_attn(x, x, x, src_mask)))
        x = norm2(x + dropout(feed_forward(x)))

    The norms may instead live in ``sublayers[0].norm`` and ``sublayers[1].norm``
    (the package's ``SublayerConnection`` layout). The check copies the learner's
    submodules into the package's ``EncoderLayer`` (with non-trivial LayerNorm
    weights) and compares.

    Shape:
        x ``(B, S, D)``, src_mask bool broadcastable to ``(B, 1, S, S)`` -> ``(B, S, D)``.

    Args:
        cls: the learner's class.

    Returns:
        True if correct (one line printed), False if it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (pre-norm, missing residual, mask not
            passed, norms swapped or shared, sublayers in the wrong order).
    """
    from transformer_lessons.model import EncoderLayer

    D, H, d_ff, B, S = 8, 2, 16, 2, 5
    m = _module(cls, (D, H, d_ff, 0.0), "cls(d_model, n_heads, d_ff, dropout=0.0)")
    ref = EncoderLayer(D, H, d_ff, dropout=0.0).eval()
    _copy_layer(m, "self_attn", "a MultiHeadAttention(d_model, n_heads, dropout)", ref.self_attn)
    _copy_layer(m, "feed_forward", "a PositionwiseFeedForward(d_model, d_ff, dropout)", ref.feed_forward)
    _copy_norms(m, (ref.sublayers[0].norm, ref.sublayers[1].norm), D)
    x = 2 * torch.randn(B, S, D) + 1
    n1, n2, ff = ref.sublayers[0].norm, ref.sublayers[1].norm, ref.feed_forward
    for mask in (None, _pad_mask([S, S - 2], S)):
        original = x.clone()
        out = _call(m, x) if mask is None else _call(m, x, mask)
        _expect_unchanged({"x": original}, {"x": x})
        out = _expect_tensor(out, "the output", x.shape, x.dtype, shape_hint="an encoder layer keeps the shape (B, S, d_model)")

        def sa(mk):
            return lambda y: ref.self_attn(y, y, y, mk)

        def bug(steps, mode="post"):
            return lambda: _residual_stack(x, steps, mode)

        bugs = [
            ("that is pre-norm, x + sublayer(norm(x)); this exercise follows the paper's post-norm: "
             "x = norm1(x + self_attn(x, x, x, src_mask)), then x = norm2(x + feed_forward(x))",
             bug([(sa(mask), n1, True), (ff, n2, True)], "pre")),
            ("the residual around self-attention is missing: x = norm1(x + self_attn(x, x, x, src_mask))",
             bug([(sa(mask), n1, False), (ff, n2, True)])),
            ("the residual around the feed-forward is missing: x = norm2(x + feed_forward(x))",
             bug([(sa(mask), n1, True), (ff, n2, False)])),
            ("both residual connections are missing: norm(x + sublayer(x)), adding the sublayer's input back",
             bug([(sa(mask), n1, False), (ff, n2, False)])),
            ("norm1 and norm2 are swapped: norm1 follows self-attention, norm2 the feed-forward",
             bug([(sa(mask), n2, True), (ff, n1, True)])),
            ("the same LayerNorm is used twice: norm1 after self-attention, norm2 after the feed-forward",
             bug([(sa(mask), n1, True), (ff, n1, True)])),
            ("the same LayerNorm is used twice: norm1 after self-attention, norm2 after the feed-forward",
             bug([(sa(mask), n2, True), (ff, n2, True)])),
            ("the sublayers are in the wrong order: self-attention first, then the feed-forward",
             bug([(ff, n1, True), (sa(mask), n2, True)])),
            (_NORM_HINT, bug([(sa(mask), n1, True), (ff, n2, True)], "norm_sublayer")),
        ]
        if mask is not None:
            bugs.insert(0, ("src_mask is not passed to self-attention: self_attn(x, x, x, src_mask), so no "
                            "query attends to padding", bug([(sa(None), n1, True), (ff, n2, True)])))
        _diagnose(out, ref(x, mask), bugs, "the output" + (" with a padding mask" if mask is not None else ""))
    return "values against the package's EncoderLayer holding your weights, with and without a padding mask"


_CAUSAL_HINT = (
    "the future leaks: changing a later target position changed the outputs at earlier positions. "
    "Pass tgt_mask to the self-attention: self_attn(x, x, x, tgt_mask)"
)


@_exercise(
    "decoder_layer",
    "masked self-attention, cross-attention over memory, feed-forward, each with a residual and a LayerNorm",
)
def check_decoder_layer(cls: Callable[..., nn.Module]) -> str:
    """Check a decoder layer: masked self-attention, cross-attention, feed-forward (paper §3.1).

    Expected signature: ``cls(d_model, n_heads, d_ff, dropout=0.0)``, an
    ``nn.Module`` with ``self_attn``, ``cross_attn`` (package
    ``MultiHeadAttention``), ``feed_forward`` (``PositionwiseFeedForward``),
    ``norm1``, ``norm2``, ``norm3`` (LayerNorm), and
    ``forward(x, memory, src_mask=None, tgt_mask=None)``::

        x = norm1(x + dropout(self_attn(x, x, x, tgt_mask)))
        x = norm2(x + dropout(cross_attn(x, memory, memory, src_mask)))
        x = norm3(x + dropout(feed_forward(x)))

    The norms may instead live in ``sublayers[i].norm`` (the package's
    ``SublayerConnection`` layout). The check copies the learner's submodules into
    the package's ``DecoderLayer`` and compares, and checks that no position sees
    later ones.

    Shape:
        x ``(B, T, D)``, memory ``(B, S, D)``, src_mask broadcastable to
        ``(B, 1, T, S)``, tgt_mask to ``(B, 1, T, T)`` -> ``(B, T, D)``.

    Args:
        cls: the learner's class.

    Returns:
        True if correct (one line printed), False if it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (no causal mask, masks swapped,
            cross-attention over x instead of memory, pre-norm, missing residual, ...).
    """
    from transformer_lessons.masks import causal_mask
    from transformer_lessons.model import DecoderLayer

    D, H, d_ff, B, T = 8, 2, 16, 2, 5
    m = _module(cls, (D, H, d_ff, 0.0), "cls(d_model, n_heads, d_ff, dropout=0.0)")
    ref = DecoderLayer(D, H, d_ff, dropout=0.0).eval()
    _copy_layer(m, "self_attn", "a MultiHeadAttention(d_model, n_heads, dropout)", ref.self_attn)
    _copy_layer(m, "cross_attn", "a MultiHeadAttention(d_model, n_heads, dropout)", ref.cross_attn)
    _copy_layer(m, "feed_forward", "a PositionwiseFeedForward(d_model, d_ff, dropout)", ref.feed_forward)
    _copy_norms(m, [s.norm for s in ref.sublayers], D)
    norms = [s.norm for s in ref.sublayers]
    ff = ref.feed_forward
    x = 2 * torch.randn(B, T, D) + 1
    tgt_mask = _pad_mask([T, T - 2], T) & causal_mask(T)  # (B, 1, T, T)
    # First with memory as long as the target (S = T), so that swapped masks still run and can be named;
    # then with a longer memory.
    for S in (T, T + 2):
        memory = torch.randn(B, S, D)
        src_mask = _pad_mask([S - 1, S], S)  # (B, 1, 1, S)
        inputs = {"x": x, "memory": memory, "src_mask": src_mask, "tgt_mask": tgt_mask}
        originals = {name: t.clone() for name, t in inputs.items()}
        out = _call(m, x, memory, src_mask, tgt_mask)
        _expect_unchanged(originals, inputs)
        out = _expect_tensor(out, "the output", x.shape, x.dtype, shape_hint="one vector per TARGET position: (B, T, d_model)")

        def sa(mk):
            return lambda y: ref.self_attn(y, y, y, mk)

        def ca(mk, source="memory", query="y"):
            def attend(y):
                kv = memory if source == "memory" else y
                q = {"y": y, "x": x, "memory": memory}[query]
                return ref.cross_attn(q, kv, kv, mk)

            return attend

        def bug(steps, mode="post"):
            return lambda: _residual_stack(x, steps, mode)

        def layer(s=None, c=None, f=ff, order=(0, 1, 2), residual=(True, True, True)):
            subs = [s or sa(tgt_mask), c or ca(src_mask), f]
            return [(subs[i], norms[order[i]], residual[i]) for i in range(3)]

        bugs: list[Bug] = [
            (_CAUSAL_HINT, bug(layer(s=sa(None)))),
            ("src_mask and tgt_mask are swapped: self-attention takes tgt_mask (causal + padding), "
             "cross-attention takes src_mask (source padding)", bug(layer(s=sa(src_mask), c=ca(tgt_mask)))),
            ("cross-attention must attend over the encoder's output: cross_attn(x, memory, memory, src_mask); "
             "you used x as keys and values", bug(layer(c=ca(src_mask, source="x")))),
            ("in cross-attention the QUERIES come from the decoder (x) and keys and values from memory: "
             "cross_attn(x, memory, memory, src_mask)", bug(layer(c=ca(src_mask, query="memory")))),
            ("cross-attention should take the output of the self-attention sublayer as its query, not the "
             "layer's input", bug(layer(c=ca(src_mask, query="x")))),
            ("src_mask is not passed to cross-attention: cross_attn(x, memory, memory, src_mask), so no query "
             "attends to source padding", bug(layer(c=ca(None)))),
            ("that is pre-norm, x + sublayer(norm(x)); this exercise follows the paper's post-norm: "
             "x = norm(x + sublayer(x)) for each of the three sublayers", bug(layer(), "pre")),
            (_NORM_HINT, bug(layer(), "norm_sublayer")),
            ("the sublayers are in the wrong order: masked self-attention, then cross-attention, then feed-forward",
             bug([(ca(src_mask), norms[0], True), (sa(tgt_mask), norms[1], True), (ff, norms[2], True)])),
        ]
        for i, name in enumerate(("self-attention", "cross-attention", "feed-forward")):
            residual = tuple(j != i for j in range(3))
            bugs.append((f"the residual around the {name} is missing: x = norm{i + 1}(x + sublayer(x))",
                         bug(layer(residual=residual))))
        for order in itertools.product(range(3), repeat=3):  # every other way to pick a norm per sublayer
            if order == (0, 1, 2):
                continue
            bugs.append(("the LayerNorms are mixed up: norm1 after self-attention, norm2 after cross-attention, "
                         "norm3 after the feed-forward", bug(layer(order=order))))
        try:
            _diagnose(out, ref(x, memory, src_mask, tgt_mask), bugs, f"the output (memory length {S})")
        except ExerciseError as error:
            if not error.known_bug and _leaks_future(m, x, memory, src_mask, tgt_mask, out):
                raise ExerciseError(_CAUSAL_HINT) from None
            raise
        if S == T and _leaks_future(m, x, memory, src_mask, tgt_mask, out):
            raise ExerciseError(_CAUSAL_HINT)
    return ("values against the package's DecoderLayer holding your weights, masks, memory longer than the "
            "target, no peeking at later positions")


def _leaks_future(m, x, memory, src_mask, tgt_mask, out) -> bool:
    """Does changing the last target position change the outputs at earlier positions?"""
    changed = x.clone()
    changed[:, -1] = torch.randn_like(changed[:, -1])
    again = _call(m, changed, memory, src_mask, tgt_mask)
    return isinstance(again, torch.Tensor) and not torch.allclose(again[:, :-1], out[:, :-1], atol=_ATOL, rtol=_RTOL)


# --- 7. learning-rate schedule --------------------------------------------------------


def _noam(step, d_model, warmup, factor=1.0, d_power=-0.5, step_power=-0.5, warmup_power=-1.5, pick=min):
    return factor * d_model**d_power * pick(step**step_power, step * warmup**warmup_power)


@_exercise(
    "noam_rate",
    "return the rate of §5.3, Eq. 3: linear warm-up for `warmup` steps, then decay as 1/sqrt(step)",
)
def check_noam_rate(fn: Callable[..., float]) -> str:
    """Check the learning-rate schedule of the paper (§5.3, Eq. 3), "Noam" after Noam Shazeer.

    Expected signature: ``fn(step, d_model, warmup, factor=1.0) -> float`` with
    ``factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``: a linear
    warm-up for ``warmup`` steps, then decay as ``1/sqrt(step)``. Steps count
    from 1 (at step 0, ``step ** -0.5`` divides by zero; training loops call the
    schedule with ``step + 1``).

    Args:
        fn: the learner's function.

    Returns:
        True if correct (one line printed), False if it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (no warm-up, wrong exponents,
            d_model not to the -0.5, max instead of min, factor ignored).
    """
    cases = [(step, 512, 4000, 1.0) for step in (1, 100, 3999, 4000, 4001, 10000, 100000)]
    cases += [(step, 256, 100, 2.0) for step in (1, 50, 100, 1000)]
    got = []
    for step, d_model, warmup, factor in cases:
        value = _call(fn, step, d_model, warmup) if factor == 1.0 else _call(fn, step, d_model, warmup, factor)
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if value is None:
            raise ExerciseError("your function returned None: did you forget a `return`?")
        if not isinstance(value, numbers.Real):
            raise ExerciseError(f"the rate should be a float, got {type(value).__name__}")
        got.append(float(value))

    def rates(**knobs):
        return [_noam(*case, **knobs) for case in cases]

    def matches(expected):
        return all(math.isclose(g, e, rel_tol=1e-5) for g, e in zip(got, expected))

    if matches(rates()):
        return "warm-up, peak at step = warmup, 1/sqrt(step) decay, d_model and factor, 11 steps"
    bugs = [
        ("the warm-up is missing: take the min of step ** -0.5 and step * warmup ** -1.5, so the rate grows "
         "linearly for the first `warmup` steps", dict(pick=lambda a, b: a)),
        ("only the warm-up branch is there: take min(step ** -0.5, step * warmup ** -1.5), so the rate decays "
         "after `warmup` steps", dict(pick=lambda a, b: b)),
        ("use min, not max, of step ** -0.5 and step * warmup ** -1.5", dict(pick=max)),
        ("the exponents are wrong: step ** -0.5 and warmup ** -1.5 (you used warmup ** -0.5)", dict(warmup_power=-0.5)),
        ("the exponents are wrong: step ** -0.5 (you used -1.5) and warmup ** -1.5", dict(step_power=-1.5)),
        ("the exponents are swapped: step ** -0.5 and warmup ** -1.5", dict(step_power=-1.5, warmup_power=-0.5)),
        ("d_model should be raised to the power -0.5: d_model ** -0.5", dict(d_power=0.5)),
        ("d_model should be raised to the power -0.5: d_model ** -0.5", dict(d_power=-1.0)),
        ("the factor d_model ** -0.5 is missing", dict(d_power=0.0)),
    ]
    for hint, knobs in bugs:
        if matches(rates(**knobs)):
            raise ExerciseError(hint)
    if matches([_noam(s, d, w) for s, d, w, _ in cases]):
        raise ExerciseError("the `factor` argument is ignored: multiply the rate by it")
    expected = rates()
    index = next(i for i, (g, e) in enumerate(zip(got, expected)) if not math.isclose(g, e, rel_tol=1e-5))
    step, d_model, warmup, factor = cases[index]
    raise ExerciseError(
        f"at step={step}, d_model={d_model}, warmup={warmup}, factor={factor} the rate should be "
        f"{expected[index]:.6g}, got {got[index]:.6g}: factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)"
    )


# --- 8. vocabulary -------------------------------------------------------------------

# Tokenized captions, small enough to count by hand, built so that every bug below
# gives a different list: "A"/"a" (case), "the" twice in one sentence (counting once
# per sentence), counts of exactly 2 and 3 (the min_freq boundary), and a three-way
# tie at count 2 whose first-seen order ("dog", "man", "ball") is neither
# alphabetical nor reverse alphabetical.
_VOCAB_SENTENCES = [
    "A dog runs after a ball .",
    "A man throws the ball to the dog .",
    "Two dogs play in the snow .",
    "A man and a girl play .",
    "a girl plays with Two dogs .",
]
_VOCAB_CASES = (2, 3, 1)  # min_freq values; 3 before 1, so a hard-coded 2 is told apart from ">"


def _vocab_itos(token_lists, min_freq, *, lower=False, keep=">=", order="frequency", count="all") -> list[str]:
    """A vocabulary list with knobs that reproduce the common bugs (defaults: the correct rule)."""
    from collections import Counter

    from transformer_lessons.data import SPECIALS

    counts: Counter = Counter()
    for tokens in token_lists:
        tokens = [t.lower() for t in tokens] if lower else tokens
        if count == "last_sentence":  # the Counter re-created inside the loop
            counts = Counter()
        counts.update(dict.fromkeys(tokens, 1) if count == "once_per_sentence" else tokens)
    passes = {">=": lambda n: n >= min_freq, ">": lambda n: n > min_freq, "<": lambda n: n < min_freq, "all": lambda n: True}[keep]
    kept = [t for t, n in counts.most_common() if passes(n) and t not in SPECIALS]  # most_common: ties in first-seen order
    if order == "frequency":
        kept.sort(key=lambda t: (-counts[t], t))
    elif order == "alphabetical":
        kept.sort()
    elif order == "ascending":
        kept.sort(key=lambda t: (counts[t], t))
    elif order == "reverse":  # sorted(..., key=(count, token), reverse=True)
        kept.sort(key=lambda t: (counts[t], t), reverse=True)
    return [*SPECIALS, *kept]  # order == "first_seen" keeps most_common's order


_ORDER_KEY = "sorted(kept, key=lambda t: (-counts[t], t))"


def _vocab_bugs(token_lists, min_freq) -> list[tuple[str, Callable[[], list[str]]]]:
    def bug(**knobs):
        return lambda: _vocab_itos(token_lists, min_freq, **knobs)

    return [
        ("you lowercased the tokens: keep their case, 'A' and 'a' are different tokens. The model's output is cased "
         "English and BLEU is scored on cased text, so the vocabulary must keep case", bug(lower=True)),
        ("off by one: keep every token seen AT LEAST min_freq times, count >= min_freq (you used >)", bug(keep=">")),
        ("the comparison is reversed: keep the FREQUENT tokens, count >= min_freq; the rare ones are the ones that "
         "become <unk>", bug(keep="<")),
        ("min_freq is ignored: drop the tokens seen fewer than min_freq times (they become <unk>)", bug(keep="all")),
        ("min_freq seems hard-coded to 2: use the argument", lambda: _vocab_itos(token_lists, 2)),
        (f"the tokens are sorted alphabetically: order them by frequency, most frequent first, ties alphabetically: "
         f"{_ORDER_KEY}", bug(order="alphabetical")),
        (f"least frequent first: order by DEcreasing count, ties alphabetically: {_ORDER_KEY}", bug(order="ascending")),
        (f"ties are in the order the tokens were first seen (what Counter.most_common gives): break ties "
         f"alphabetically, {_ORDER_KEY}, so the same data always gives the same ids", bug(order="first_seen")),
        (f"ties come out in reverse alphabetical order (reverse=True reverses the tie-break too): use "
         f"{_ORDER_KEY}", bug(order="reverse")),
        ("each token is counted once per sentence (a set of the sentence?): count every occurrence, a word used "
         "twice in a sentence counts twice", bug(count="once_per_sentence")),
        ("only the last sentence is counted: create the Counter once, before the loop over sentences, and update it "
         "with every sentence", bug(count="last_sentence")),
    ]


def _short_list(tokens: list[str], limit: int = 24) -> str:
    return repr(tokens) if len(tokens) <= limit else f"{repr(tokens[:limit])[:-1]}, ... ({len(tokens)} in all)]"


def _expect_token_list(value: Any) -> list[str]:
    """Raise ExerciseError unless value is a list (or tuple) of strings; return it as a list."""
    if value is None:
        raise ExerciseError("your function returned None: did you forget a `return`?")
    if hasattr(value, "itos") and not isinstance(value, (list, tuple)):
        raise ExerciseError(f"return the list of tokens itself (the itos list), not a {type(value).__name__}")
    if isinstance(value, dict):
        raise ExerciseError("return a list (itos[i] is the token with id i), not a dict: token -> id is stoi, which Vocab derives from the list")
    if not isinstance(value, (list, tuple)):
        raise ExerciseError(f"return a list of tokens (str), got {type(value).__name__}")
    for item in value:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            raise ExerciseError("return only the tokens, not (token, count) pairs: [token for token, count in ...]")
        if not isinstance(item, str):
            raise ExerciseError(f"every entry of the list should be a token (str), got {type(item).__name__}: {item!r}")
    return list(value)


def _check_specials(itos: list[str]) -> None:
    from transformer_lessons.data import SPECIALS

    order = ", ".join(SPECIALS)
    if tuple(itos[: len(SPECIALS)]) == SPECIALS:
        return
    missing = [s for s in SPECIALS if s not in itos]
    if len(missing) == len(SPECIALS):
        raise _known_bug(
            f"the special tokens are missing: the list must start with {order} (ids 0 to 3; the rest of the "
            "course relies on pad_id = 1, bos_id = 2 and eos_id = 3)"
        )
    if missing:
        raise _known_bug(f"special token(s) missing: {', '.join(missing)}; the list must start with {order}")
    if set(itos[: len(SPECIALS)]) == set(SPECIALS):
        raise _known_bug(f"the special tokens are in the wrong order: {', '.join(itos[:4])}; they must be {order}, in that order")
    raise _known_bug(f"the special tokens must come FIRST, in the order {order} (ids 0 to 3), before every word")


@_exercise(
    "build_vocab",
    "count the tokens, keep those seen at least min_freq times, most frequent first (ties alphabetically), "
    "after the four specials <unk> <pad> <bos> <eos>",
)
def check_build_vocab(fn: Callable[[list[list[str]], int], list[str]]) -> str:
    """Check a vocabulary builder (what ``data.Vocab.build`` does).

    Expected signature: ``fn(token_lists, min_freq) -> list[str]``, the
    ``itos`` list (id -> token): the specials ``<unk>``, ``<pad>``, ``<bos>``,
    ``<eos>`` first, in that order, then every token seen at least ``min_freq``
    times in ``token_lists``, most frequent first, ties alphabetically. Case is
    kept. The reference is ``data.Vocab.build(token_lists, min_freq).itos``.

    Args:
        fn: the learner's function.

    Returns:
        True if correct (one line printed), False if it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (specials missing or out of order,
            ``>`` instead of ``>=``, lowercasing, alphabetical order, ties not
            broken alphabetically, duplicates, counting once per sentence, ...).
    """
    import copy

    from transformer_lessons.data import SPECIALS, Vocab

    token_lists = [sentence.split() for sentence in _VOCAB_SENTENCES]
    for min_freq in _VOCAB_CASES:
        inputs = copy.deepcopy(token_lists)
        got = _expect_token_list(_call(fn, inputs, min_freq, hint="the function should accept (token_lists, min_freq)"))
        if inputs != token_lists:
            raise ExerciseError(
                "your code changed its input token_lists (a sentence list was modified in place): count without "
                "changing the caller's lists"
            )
        expected = Vocab.build(token_lists, min_freq=min_freq).itos
        if got == expected:
            continue
        where = f"with min_freq={min_freq}"
        try:
            _check_specials(got)
            repeated = sorted({t for t in got if got.count(t) > 1})
            if repeated:
                raise _known_bug(
                    f"the list has duplicates ({', '.join(repeated[:5])}): each token appears once. Count first "
                    "(collections.Counter), then list each kept token once"
                )
            for hint, simulate in _vocab_bugs(token_lists, min_freq):
                if got == simulate():
                    raise _known_bug(hint)
            words, want = got[len(SPECIALS):], expected[len(SPECIALS):]
            counts = {t: sum(s.count(t) for s in token_lists) for t in {*words, *want}}
            extra = [t for t in words if t not in want]
            lost = [t for t in want if t not in words]
            if extra or lost:
                raise ExerciseError(
                    "the kept tokens differ from the reference: "
                    + "; ".join(
                        part
                        for part in (
                            f"extra {', '.join(f'{t!r} (seen {counts[t]}x)' for t in extra[:5])}" if extra else "",
                            f"missing {', '.join(f'{t!r} (seen {counts[t]}x)' for t in lost[:5])}" if lost else "",
                        )
                        if part
                    )
                    + ". Keep exactly the tokens seen at least min_freq times, case kept"
                )
            if all(counts[a] >= counts[b] for a, b in zip(words, words[1:])):
                raise _known_bug(f"tokens with the same count must be in alphabetical order, so the same data always "
                                f"gives the same ids: {_ORDER_KEY}")
            raise ExerciseError(f"the right tokens, in the wrong order: most frequent first, ties alphabetically: {_ORDER_KEY}")
        except ExerciseError as error:
            error.args = (f"{error.args[0]}\n  {where}, on the captions {_VOCAB_SENTENCES}:\n"
                          f"  expected {_short_list(expected)}\n  got      {_short_list(got)}",)
            raise
    return f"specials first, min_freq = {', '.join(map(str, _VOCAB_CASES))}, frequency order with alphabetical ties, case kept"


# --- 9. greedy decoding --------------------------------------------------------------

# A toy vocabulary for the decoding check. The ids differ from the course's Vocab
# (<pad> 1, <bos> 2, <eos> 3), so a decoder with hard-coded ids is caught.
_DEC_PAD, _DEC_BOS, _DEC_EOS, _DEC_VOCAB = 0, 1, 2, 10
_DEC_MAX_LEN = 9  # short enough that two of the six test sources are cut off without <eos>


def _copy_pairs(batch_size: int, generator: torch.Generator, shortest: int = 2, longest: int = 7):
    """Variable-length copy data with <eos>: src = s <eos> <pad>…, tgt = <bos> s <eos> <pad>…."""
    src = torch.full((batch_size, longest + 1), _DEC_PAD)  # (B, S)
    tgt = torch.full((batch_size, longest + 2), _DEC_PAD)  # (B, 1 + T)
    for b, length in enumerate(torch.randint(shortest, longest + 1, (batch_size,), generator=generator).tolist()):
        symbols = torch.randint(_DEC_EOS + 1, _DEC_VOCAB, (length,), generator=generator)
        src[b, :length], src[b, length] = symbols, _DEC_EOS
        tgt[b, 0], tgt[b, 1 : length + 1], tgt[b, length + 1] = _DEC_BOS, symbols, _DEC_EOS
    return src, tgt


@functools.lru_cache(maxsize=1)
def _decoding_model() -> nn.Module:
    """A 2-layer Transformer trained for 60 steps to copy: it half works.

    Half-trained is the point: its outputs depend on the position, on the source and
    on every token fed back, rows end with <eos> after different numbers of steps and
    some never do, so each decoding bug below changes the output. A random model
    repeats one token and hides most of them. Training takes about half a second;
    the model is built once per process.
    """
    from transformer_lessons.config import ModelConfig
    from transformer_lessons.masks import padding_mask, target_mask
    from transformer_lessons.model import Transformer

    with torch.random.fork_rng(devices=[]), torch.enable_grad():
        torch.manual_seed(0)
        config = ModelConfig(n_layers=2, d_model=32, n_heads=4, d_ff=64, dropout=0.0, max_len=32)
        model = Transformer(config, _DEC_VOCAB, _DEC_VOCAB)
        generator = torch.Generator().manual_seed(0)
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
        for _ in range(60):
            src, tgt = _copy_pairs(32, generator)
            tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]  # teacher forcing
            logits = model(src, tgt_in, padding_mask(src, _DEC_PAD), target_mask(tgt_in, _DEC_PAD))  # (B, T, V)
            loss = F.cross_entropy(logits.reshape(-1, _DEC_VOCAB), tgt_out.reshape(-1), ignore_index=_DEC_PAD)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


def _decoding_cases() -> list[tuple[torch.Tensor, torch.Tensor, int]]:
    """``(src, src_mask, max_len)``: six padded sources, then one source with a tight max_len."""
    from transformer_lessons.masks import padding_mask

    src, _ = _copy_pairs(6, torch.Generator().manual_seed(9))  # (6, S), padded
    one = src[1:2, :7]  # (1, 7): one sentence, no padding, cut off after 4 tokens
    return [(src, padding_mask(src, _DEC_PAD), _DEC_MAX_LEN), (one, padding_mask(one, _DEC_PAD), 4)]


def _greedy(model, src, src_mask, max_len, bos_id, eos_id, *, feed="all", position=-1, causal=True,
            use_src_mask=True, softmax_dim=None):
    """Greedy decoding with knobs that reproduce the common bugs (defaults: the correct loop)."""
    from transformer_lessons.masks import causal_mask

    mask = src_mask if use_src_mask else None
    memory = model.encode(src, mask)  # (B, S, D)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)  # (B, 1)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len):
        inp = {"all": ys, "bos": ys[:, :1], "last": ys[:, -1:]}[feed]  # (B, t) or (B, 1)
        logits = model.decode(memory, mask, inp, causal_mask(inp.size(1)) if causal else None)  # (B, t, V)
        if softmax_dim is not None:
            logits = logits.softmax(dim=softmax_dim)
        next_token = logits[:, position].argmax(dim=-1).masked_fill(finished, eos_id)  # (B,)
        finished |= next_token == eos_id
        ys = torch.cat([ys, next_token[:, None]], dim=1)  # (B, t + 1)
        if bool(finished.all()):
            break
    return ys


def _rows_until_eos(ys: torch.Tensor, eos_id: int) -> list[list[int]]:
    """Each row's generated tokens (after <bos>) up to and including its first <eos>."""
    rows = []
    for row in ys[:, 1:].tolist():
        rows.append(row[: row.index(eos_id) + 1] if eos_id in row else row)
    return rows


class _DecodeSpy:
    """Record what the learner feeds the decoder: its input ids and whether a tgt_mask came with them."""

    def __init__(self, model: nn.Module):
        self.model, self.calls = model, []
        original = type(model).decode.__get__(model)

        def decode(memory, src_mask, tgt, tgt_mask=None):
            self.calls.append((tgt.detach().clone(), tgt_mask is not None))
            return original(memory, src_mask, tgt, tgt_mask)

        model.decode = decode  # an instance attribute: model(...) -> forward -> self.decode comes here too

    def close(self) -> None:
        self.model.__dict__.pop("decode", None)


_GREEDY_HINT = (
    "the decoder returns logits (B, t, V): take the last position, logits[:, -1] -> (B, V), and its argmax over the "
    "vocabulary, .argmax(dim=-1) -> (B,); append it as a column, torch.cat([ys, next_token[:, None]], dim=1)"
)


def _check_greedy_structure(got: Any, B: int, max_len: int, bos_id: int, eos_id: int, expected: torch.Tensor) -> None:
    """Type, shape, the <bos> column, eos padding and lengths: what any greedy decoder must satisfy."""
    _expect_tensor(got, "the result")
    if got.is_floating_point() or got.dtype == torch.bool:
        raise ExerciseError(f"the result should hold token ids (dtype torch.long), got {got.dtype}")
    if got.dim() != 2 or got.size(0) != B:
        raise ExerciseError(
            f"the result should be (B, 1 + L) = ({B}, 1 + L) with L <= max_len = {max_len}, got shape {_shape(got)}"
        )
    got = got.long()
    if got.size(1) > 1 + max_len:
        raise ExerciseError(
            f"the result has {got.size(1)} columns, more than 1 + max_len = {1 + max_len}: generate at most max_len "
            "tokens (one per loop step), and append only the last position's token each step"
        )
    if not bool((got[:, 0] == bos_id).all()):
        width = expected.size(1) - 1
        if got.size(1) >= width and torch.equal(got[:, :width], expected[:, 1:]):
            raise _known_bug("the <bos> column is missing: return ys including the bos_id it started with, (B, 1 + L)")
        raise ExerciseError(f"every row must start with bos_id = {bos_id} (use the argument), got {got[:, 0].tolist()}")
    for b, row in enumerate(got[:, 1:].tolist()):
        if eos_id in row:
            after = row[row.index(eos_id) + 1 :]
            if any(token != eos_id for token in after):
                raise _known_bug(
                    f"row {b} goes on after its <eos>: {row}. A row that has produced eos_id is finished: from then on "
                    "append eos_id to it (keep a `finished` flag per row, next_token.masked_fill(finished, eos_id)), "
                    "and stop when every row is finished"
                )
    cut = [b for b, row in enumerate(got[:, 1:].tolist()) if eos_id not in row and len(row) < max_len]
    if cut:
        ended = [row.index(eos_id) for row in got[:, 1:].tolist() if eos_id in row]  # where each ended row ended
        if ended and all(end == got.size(1) - 2 for end in ended):  # nothing ended before the last step
            raise _known_bug(
                f"rows {cut} stop after {got.size(1) - 1} tokens without <eos>: the loop stopped as soon as ONE row "
                "produced eos_id. Stop when EVERY row has (finished.all()); until then the others are still being written"
            )
        if got.size(1) - 1 == max_len - 1:
            raise _known_bug(f"off by one: a row without <eos> should have max_len = {max_len} tokens after <bos>, "
                            f"got {max_len - 1}: loop `for _ in range(max_len)`")
        raise ExerciseError(
            f"rows {cut} end after {got.size(1) - 1} tokens without <eos>: keep generating until a row produces "
            f"eos_id or max_len = {max_len} tokens"
        )


@_exercise(
    "greedy_decode",
    "encode once, start every row with bos_id, then up to max_len times: decode everything generated so far "
    "with a causal mask and append the argmax of the LAST position's logits; finished rows get eos_id",
)
def check_greedy_decode(fn: Callable[..., torch.Tensor]) -> str:
    """Check a greedy decoder (what ``decode.greedy_decode`` does; paper §6.1 decodes with a beam, greedy is beam 1).

    Expected signature: ``fn(model, src, src_mask, max_len, bos_id, eos_id) -> LongTensor (B, 1 + L)``:

    * the source is encoded once (re-encoding it every step gives the same answer, only slower);
    * every row starts with ``bos_id``; each step feeds *all* tokens so far to
      ``model.decode(memory, src_mask, ys, causal_mask(t))`` and appends the
      argmax of the last position's logits;
    * a row that has produced ``eos_id`` is finished and receives ``eos_id``
      from then on; the loop stops when every row is finished, or after
      ``max_len`` steps (so ``L <= max_len``; running all ``max_len`` steps is fine);
    * the result equals ``decode.greedy_decode(model, src, src_mask, max_len,
      bos_id, eos_id)`` row by row up to each row's first ``eos_id`` (after it, only ``eos_id``).

    The model is a small Transformer half-trained to copy, with ids ``<pad>`` 0,
    ``<bos>`` 1, ``<eos>`` 2 (not the course vocabulary's), run on six padded
    sources and on one source with a tight ``max_len``.

    Shape:
        src ``(B, S)``, src_mask ``(B, 1, 1, S)`` bool -> ``(B, 1 + L)``, ``L <= max_len``.

    Args:
        fn: the learner's function.

    Returns:
        True if correct (one line printed), False if it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (generated tokens not fed back, only
            the last token fed, first position's logits, argmax/softmax over the
            wrong axis, no causal mask, src_mask ignored, sampling instead of
            argmax, tokens written after ``<eos>``, stopping when the first row
            ends, the ``<bos>`` column missing, off-by-one lengths).
    """
    from transformer_lessons.decode import greedy_decode

    model = _decoding_model()
    model.eval()
    bos, eos = _DEC_BOS, _DEC_EOS
    for src, src_mask, max_len in _decoding_cases():
        B = src.size(0)
        originals = {"src": src.clone(), "src_mask": src_mask.clone()}
        inputs = {"src": src.clone(), "src_mask": src_mask.clone()}
        spy = _DecodeSpy(model)
        try:
            got = _call(fn, model, inputs["src"], inputs["src_mask"], max_len, bos, eos, hint=_GREEDY_HINT)
        finally:
            spy.close()
        _expect_unchanged(originals, inputs)
        expected = greedy_decode(model, src, src_mask, max_len, bos, eos)  # (B, 1 + L)
        _check_greedy_structure(got, B, max_len, bos, eos, expected)
        got_rows, want_rows = _rows_until_eos(got.long(), eos), _rows_until_eos(expected, eos)
        if got_rows == want_rows:
            continue

        torch.manual_seed(1)  # another seed: a deterministic decoder gives the same answer again
        again = _call(fn, model, src.clone(), src_mask.clone(), max_len, bos, eos, hint=_GREEDY_HINT)
        if isinstance(again, torch.Tensor) and _rows_until_eos(again.long(), eos) != got_rows:
            raise _known_bug(
                "two runs with the same input gave different outputs: are you sampling (torch.multinomial, "
                "Categorical(...).sample()) instead of taking the argmax? Greedy decoding is deterministic"
            )

        def simulate(**knobs):
            return _rows_until_eos(_greedy(model, src, src_mask, max_len, bos, eos, **knobs), eos)

        fed_one_token = bool(spy.calls) and all(tgt.size(1) == 1 for tgt, _ in spy.calls)
        bugs = [
            ("the generated tokens are not fed back: the decoder input stays [bos] at every step. Append each new "
             "token to ys and decode the whole ys next step", dict(feed="bos"), fed_one_token),
            ("you use the logits of the FIRST position, logits[:, 0]: that position only ever sees <bos>, so it "
             "predicts the same token every step. Take the last one, logits[:, -1]", dict(position=0), not fed_one_token),
            ("only the last token is fed to the decoder: it has no memory between calls, so feed the whole "
             "sequence so far (ys, (B, t)) and read the last position's logits", dict(feed="last"), True),
            ("no causal mask: pass causal_mask(ys.size(1)) as tgt_mask. The model was trained with it; without it "
             "earlier positions attend to later ones, and in a multi-layer decoder that changes the last "
             "position's output too", dict(causal=False), True),
            ("src_mask is not used: pass it to model.encode and to model.decode, so that no query attends to the "
             "padding at the end of the shorter sources", dict(use_src_mask=False), True),
            ("the softmax runs over the wrong axis (dim=1 is the positions): the vocabulary is the last axis, "
             "dim=-1. For greedy decoding no softmax is needed at all: argmax of the logits is the same token",
             dict(softmax_dim=1), True),
        ]
        for hint, knobs, plausible in bugs:
            if plausible and got_rows == simulate(**knobs):
                raise _known_bug(hint)
        if spy.calls and not any(has_mask for _, has_mask in spy.calls):
            raise _known_bug(bugs[3][0])
        b = next(i for i, (g, w) in enumerate(zip(got_rows, want_rows)) if g != w)
        t = next((i for i, (g, w) in enumerate(zip(got_rows[b], want_rows[b])) if g != w), min(len(got_rows[b]), len(want_rows[b])))
        raise ExerciseError(
            f"row {b} differs from decode.greedy_decode at generated token {t}: expected {want_rows[b]}, got "
            f"{got_rows[b]} (max_len={max_len}, bos_id={bos}, eos_id={eos}, source {src[b].tolist()}). "
            "Each step: logits = model.decode(memory, src_mask, ys, causal_mask(ys.size(1))), "
            "next_token = logits[:, -1].argmax(dim=-1)"
        )
    return "6 padded sources and a tight max_len against decode.greedy_decode, <eos> handling, deterministic"
