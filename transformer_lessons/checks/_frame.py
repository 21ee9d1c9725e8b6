"""The frame every check shares: the error it raises, the decorator, calling learner code, comparing.

A check body is a plain function decorated with :func:`_exercise`. The body calls
the learner's code through :func:`_call`, validates what came back with
:func:`_expect_tensor`, and compares it with :func:`_diagnose`, which, when the
answer is wrong, tries each known bug's simulation and names the first one the
answer equals. The decorator seeds, turns gradients off, prints the one-line
verdict, and turns a stub's ``NotImplementedError`` into "not implemented yet".
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Sequence

import torch
from torch import nn


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
# What a check says when an answer is None: the function has no `return`.
_NO_RETURN = "your function returned None: did you forget a `return`?"


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
