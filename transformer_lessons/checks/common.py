"""What every check shares: the error it raises, the decorator, calling learner code, comparing.

A check body is a plain function decorated with :func:`exercise`. The body calls
the learner's code through :func:`call_answer`, validates what came back with
:func:`expect_tensor`, and compares it with :func:`diagnose`, which, when the
answer is wrong, tries each known bug's simulation and names the first one the
answer equals. The simulations are built from what the learner built where that
matters (their own sub-modules, epsilon, dropout: :func:`_own_dropouts` here,
``own_number`` in :mod:`.slips`), and independent mistakes (:class:`~.slips.Slip`) are
also tried two at a time, so that an answer with two bugs is named as such
(:func:`~.slips.slip_bugs`) instead of only "differs". The decorator seeds, turns gradients off, prints the one-line
verdict, and turns a stub's ``NotImplementedError`` into "not implemented yet".
What the learner sees of all this (the red box, "still checking ...") lives in
:mod:`._feedback`.
"""

from __future__ import annotations

import numbers

import functools
import inspect
import re
from unittest import mock
from typing import Any, Callable, Sequence

import torch
from torch import nn

from transformer_lessons import exercises, learner_progress
from transformer_lessons.checks import _feedback

# In a message, [[...]] holds the exact fix (code): kept out of the first message, shown by hint().
_FIX = re.compile(r"\s*\[\[(.*?)\]\](?!\])", re.S)


def split_fix(message: str) -> tuple[str, tuple[str, ...]]:
    """A message written with ``[[fix]]`` parts: (the message without them, the fixes in order)."""
    fixes = tuple(fix.strip().lstrip(":;,.").strip() for fix in _FIX.findall(message))
    return _FIX.sub("", message), fixes


class ExerciseError(AssertionError):
    """The learner's answer is wrong; the message names the likely bug and what to do.

    Every failing check raises this one class, so a notebook that prints
    ``type(error).__name__`` shows ``ExerciseError``. ``str(error)`` is the plain
    message. In IPython and Jupyter the error draws itself as that message alone,
    in red (:meth:`_render_traceback_`), without the check's own frames.

    The message names the bug and the concept; the exact fix (code) is written in
    the check between ``[[`` and ``]]`` and kept out of it: :func:`transformer_lessons.hint`
    shows it when the learner asks.

    Attributes:
        known_bug: True when the message names a mistake the check recognised
            (the answer equals what that mistake computes), False when the answer
            only differs from the reference.
        fixes: the exact fixes kept back from the message, in order (empty if none).
    """

    known_bug: bool = False
    fixes: tuple[str, ...] = ()

    def __init__(self, *args: Any) -> None:
        if args and isinstance(args[0], str):
            message, fixes = split_fix(args[0])
            args = (message, *args[1:])
            self.fixes = fixes
        super().__init__(*args)

    def _render_traceback_(self) -> list[str]:
        """IPython's hook: the lines to show instead of the traceback (the diagnosis, wrapped, in red)."""
        return _feedback.render(str(self))


def known_bug(hint: str) -> ExerciseError:
    """An ExerciseError whose message names a mistake the check recognised (``known_bug`` set)."""
    error = ExerciseError(hint)
    error.known_bug = True
    return error


class _NotImplementedYet(Exception):
    """Raised inside a check when the learner's stub still raises NotImplementedError."""


# A bug the check knows about: the hint to show, and a thunk computing what that bug would return.
Bug = tuple[str, Callable[[], Any]]

# Float32 answers computed in a different order differ by ~1e-6; known bugs differ by far more.
ATOL = 1e-5
RTOL = 1e-4
# Masked scores in the bug simulations: finite, so a simulated bug that masks a whole
# row gives a uniform row (as a learner's -1e9 does) instead of NaN.
NEG = -1e9
# What a check says when an answer is None: the function has no `return`.
NO_RETURN = "your function returned None: did you forget a `return`?"
# Where NaN comes from: in general, and where a softmax over masked scores is involved.
_NAN_HINT = (
    "Look for a division by zero (or by a tiny number), a sqrt or log of a negative number or of zero, "
    "or values so large they overflow"
)
MASK_NAN_HINT = (
    "A softmax over a row whose scores are all -inf gives NaN: is a mask inverted (True must mean "
    "'may attend'), or an operation dividing by zero?"
)
# The checks build modules with this much dropout, then require eval mode to switch it off.
DROPOUT = 0.5
_DROPOUT_IN_EVAL = (
    "in eval mode (module.eval()) two calls with the same input gave different outputs: dropout is still on. "
    "F.dropout(x, p) defaults to training=True, and an nn.Dropout created inside forward is always in training "
    "mode: create the dropout module once, in __init__, and apply it in forward (it switches off in eval mode), "
    "or tell the function whether the module is training"
    "[[: self.dropout = nn.Dropout(dropout) in __init__, self.dropout(...) in forward; or F.dropout(x, p, "
    "training=self.training)]]"
)


def exercise(
    name: str, todo: str, *, takes: str = "function", prepare: Callable[[], Any] | None = None
) -> Callable[[Callable[[Any], str]], Callable[[Any], None]]:
    """Wrap a check body: seeding, no_grad, the success line and the not-implemented line.

    Every verdict (pass, fail, stub) is noted for ``progress()`` (:mod:`transformer_lessons.learner_progress`)
    and for ``hint()`` (:mod:`transformer_lessons.exercises`: a failure's kept-back fixes); a
    failure's message ends with the line saying how to ask for more help.

    The body returns a short description of what it checked, raises ExerciseError on a
    wrong answer, and calls learner code through :func:`call_answer`. The check returns None
    either way, so a notebook cell ending in ``check_x(x)`` echoes nothing after its line.

    Args:
        name: the exercise's name, the first word of every line the check prints or raises.
        todo: what the exercise asks for, shown while the answer is still a stub.
        takes: "function" or "class": what the learner passes (an instance or a
            function's result instead is reported as such).
        prepare: work of the check's own (building a model) to do before the
            "still checking" clock starts.
    """

    exercises.exercise(name)  # every check is an exercise of the course's table (KeyError otherwise)

    def decorate(body: Callable[[Any], str]) -> Callable[[Any], None]:
        @functools.wraps(body)
        def check(answer: Any) -> None:
            try:
                _expect_answer(answer, name, takes)
                if prepare is not None:
                    prepare()
                # fork_rng: seeding here must not change the random numbers the learner draws next.
                with _feedback.still_checking(name), torch.random.fork_rng(devices=[]), torch.no_grad():
                    torch.manual_seed(0)
                    checked = body(answer)
            except _NotImplementedYet:
                exercises.checked(name)
                learner_progress.record(name, "stub")
                print(f"{name}: not implemented yet — {todo}; stuck? hint('{name}')")
                return None
            except ExerciseError as error:
                # Prefix the exercise's name, end with where to get more help; a bare `raise` keeps the
                # traceback and the cause.
                message = f"{name}: {error.args[0] if error.args else 'wrong answer'}"
                exercises.checked(name, message, error.fixes)
                learner_progress.record(name, "fail")
                error.args = (f"{message}\n{exercises.more_help(name)}",)
                raise
            exercises.checked(name)
            learner_progress.record(name, "pass")
            print(f"✔ {name}: correct (checked {checked})")
            return None

        # help() and notebooks show the body's docstring with the check's own return type.
        check.__signature__ = inspect.signature(body).replace(return_annotation="None")  # type: ignore[attr-defined]
        return check

    return decorate


def _expect_answer(answer: Any, name: str, takes: str) -> None:
    """The learner passed their function or class itself, not an instance or a result."""
    if takes == "class" and isinstance(answer, nn.Module):
        cls = type(answer).__name__
        raise known_bug(
            f"pass the class, not an instance: check_{name}({cls}), not check_{name}({cls}(...)); "
            "the check builds its own instances with the sizes it needs"
        )
    if not callable(answer):
        thing = "class" if takes == "class" else "function"
        raise known_bug(
            f"pass your {thing} itself, not what it returns: check_{name}(your_{thing}), without "
            f"parentheses after its name (got a {type(answer).__name__})"
        )


_TORCH_NOT_IMPLEMENTED = (
    "this NotImplementedError comes from PyTorch, not from your stub: an operation that does not support these "
    "inputs' dtypes (e.g. & between a float and a bool tensor: keep masks bool)"
)


def call_answer(fn: Callable[..., Any], *args: Any, hint: str = "") -> Any:
    """Call learner code; their stub becomes _NotImplementedYet, any other error an ExerciseError.

    Only a ``raise NotImplementedError`` in the learner's own code is a stub; one that
    PyTorch raises inside it (an op a dtype lacks) is a bug, reported with the line.
    """
    try:
        return fn(*args)
    except NotImplementedError as error:
        if _feedback.is_stub(error):
            raise _NotImplementedYet from error
        if _feedback.is_missing_forward(error):
            raise ExerciseError(
                "your class has no `forward` method: define forward(self, ...) inside the class "
                "(check its spelling and its indentation)"
            ) from error
        raise ExerciseError(describe_raised(error, _TORCH_NOT_IMPLEMENTED)) from error
    except ExerciseError:
        raise
    except Exception as error:  # noqa: BLE001 - any learner error is reported, chained
        raise ExerciseError(describe_raised(error, hint)) from error


#: PyTorch's words when Python asks a tensor of several entries for one True/False (``not t``, ``t and u``, ``if t:``).
AMBIGUOUS_TRUTH = "Boolean value of Tensor with more than one value is ambiguous"
TRUTH_HINT = (
    "Python's `not`, `and`, `or` and `if` ask a whole tensor for one True or False; to work on every entry use "
    "the tensor operators: ~ for not, & for and, | for or (or torch.where to choose entry by entry)"
)


def describe_raised(error: BaseException, hint: str) -> str:
    """The message for an error in learner code: what it raised, on which line of theirs, and the hint."""
    message = f"your code raised {type(error).__name__}: {error}"
    where = _feedback.where_in_learner_code(error)
    if AMBIGUOUS_TRUTH in str(error):  # the hint that fits better than the exercise's own
        hint = TRUTH_HINT
    return message + (f"\n{where}" if where else "") + (f"\n  hint: {hint}" if hint else "")


def shape_of(t: torch.Tensor | Sequence[int]) -> tuple[int, ...]:
    return tuple(t.shape) if isinstance(t, torch.Tensor) else tuple(t)


def expect_tensor(
    value: Any,
    what: str,
    shape: Sequence[int] | None = None,
    dtype: torch.dtype | None = None,
    shape_hint: str = "",
    finite: bool = True,
    nan_hint: str = "",
) -> torch.Tensor:
    """Raise ExerciseError unless value is a tensor of the given shape and dtype (and, if finite, without NaN/inf).

    ``dtype`` is the dtype of the learner's float inputs: an output should keep it.
    ``nan_hint`` says where NaN comes from in this exercise (:data:`MASK_NAN_HINT`
    where a softmax and masks are involved); the default names the usual culprits.
    """
    if value is None:
        raise ExerciseError(f"{what} is None: did you forget a `return`?")
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, torch.Tensor) for v in value):
        raise ExerciseError(f"{what} should be one tensor, got a tuple of two: return only the output")
    if not isinstance(value, torch.Tensor):
        raise ExerciseError(f"{what} should be a torch.Tensor, got {type(value).__name__}")
    if shape is not None and shape_of(value) != shape_of(shape):
        message = f"{what} has the wrong shape: expected {shape_of(shape)}, got {shape_of(value)}"
        raise ExerciseError(f"{message}. {shape_hint}" if shape_hint else message)
    if dtype is not None and value.dtype != dtype:
        message = f"{what} has the wrong dtype {value.dtype}: the inputs are {dtype} and it should keep their dtype"
        if value.dtype == torch.float64:
            message += (
                ". Did you build a tensor with torch.tensor(..., dtype=torch.float64) or .double(), or go "
                "through numpy (whose default float is float64)?"
            )
        raise ExerciseError(message)
    if finite and value.is_floating_point() and not torch.isfinite(value).all():
        bad = ~torch.isfinite(value)
        first = tuple(int(i) for i in bad.nonzero()[0])
        raise ExerciseError(
            f"{what} contains NaN or inf ({int(bad.sum())} of {value.numel()} values, the first at index {first}). "
            + (nan_hint or _NAN_HINT)
        )
    return value


def one_number(value: Any, what: str) -> float:
    """The learner's answer as one float (a number, or a tensor of one element); ``what`` names it in the message."""
    if value is None:
        raise ExerciseError(NO_RETURN)
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ExerciseError(f"return one number, {what}; got a tensor of shape {tuple(value.shape)}")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ExerciseError(f"return one number, {what}; got {type(value).__name__}")
    return float(value)


def all_close(got: Any, expected: Any, atol: float = ATOL) -> bool:
    """allclose for tensors and tuples of tensors; False on any shape difference."""
    if isinstance(expected, tuple):
        return (
            isinstance(got, tuple)
            and len(got) == len(expected)
            and all(all_close(g, e, atol) for g, e in zip(got, expected))
        )
    if not isinstance(got, torch.Tensor) or shape_of(got) != shape_of(expected):
        return False
    if expected.dtype == torch.bool or got.dtype == torch.bool:
        return got.dtype == expected.dtype and torch.equal(got, expected)
    return torch.allclose(got.double(), expected.double(), atol=atol, rtol=RTOL)


def _difference(got: torch.Tensor, expected: torch.Tensor) -> str:
    diff = (got.double() - expected.double()).abs()
    index = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
    return (
        f"largest difference {diff.max().item():.3g} at index {index}: "
        f"expected {expected[index].item():.4g}, got {got[index].item():.4g}"
    )


def diagnose(got: Any, expected: Any, bugs: Sequence[Bug], what: str, advice: str = "", atol: float = ATOL) -> None:
    """Return if got matches expected; else raise naming the first known bug that got matches."""
    if all_close(got, expected, atol):
        return
    for hint, simulate in bugs:
        try:
            candidate = simulate()
        except Exception:  # noqa: BLE001 - a bug that cannot even run on these shapes is not the one
            continue
        if all_close(got, candidate, atol):
            raise known_bug(hint)
    raise differs(got, expected, what, advice, atol)


def differs(got: Any, expected: Any, what: str, advice: str = "", atol: float = ATOL) -> ExerciseError:
    """The error for an answer that no known bug explains: where it is furthest from the reference."""
    if isinstance(expected, tuple):
        got, expected = next((g, e) for g, e in zip(got, expected) if not all_close(g, e, atol))
    message = f"{what} differs from the reference ({_difference(got, expected)})"
    return ExerciseError(f"{message}. {advice}" if advice else message)


def expect_unchanged(originals: dict[str, torch.Tensor], inputs: dict[str, torch.Tensor]) -> None:
    for name, original in originals.items():
        if not torch.equal(original, inputs[name]):
            raise ExerciseError(
                f"your code changed its input `{name}` in place (an operation ending in _ or a `-=`/`/=`): "
                "use out-of-place operations so the caller's tensor is left alone"
            )


def build_module(cls: Callable[..., Any], args: tuple, signature: str) -> nn.Module:
    module = call_answer(cls, *args, hint=f"the constructor should accept {signature}")
    if not isinstance(module, nn.Module):
        raise ExerciseError(f"{signature} should build an nn.Module (subclass nn.Module), got {type(module).__name__}")
    return module.eval()  # built with dropout on (DROPOUT): eval mode must switch it off, so answers compare


def call_in_eval(module: nn.Module, *args: Any, hint: str = "") -> Any:
    """Call the learner's module (in eval mode) twice on the same inputs: the answer must not change.

    A module whose dropout stays on in eval mode gives a different answer each call:
    that is named here, before the comparison with the reference would only say "differs".
    """
    copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]  # in case the first call edits them
    first = call_answer(module, *args, hint=hint)
    if isinstance(first, torch.Tensor) and first.is_floating_point():
        second = call_answer(module, *copies, hint=hint)
        if (
            isinstance(second, torch.Tensor)
            and second.shape == first.shape
            and not torch.equal(first.nan_to_num(), second.nan_to_num())
        ):
            raise known_bug(_DROPOUT_IN_EVAL)
    return first


def expect_dropout(
    module: nn.Module, zero: Callable[[], nn.Module], args: tuple, eval_out: torch.Tensor, where: str
) -> None:
    """In training mode, dropout (built with DROPOUT) changes the output; built with dropout=0.0 it does not.

    Args:
        module: the learner's module, built with dropout=DROPOUT, in eval mode (left so).
        zero: builds the learner's module with dropout=0.0.
        args: the inputs that gave ``eval_out`` in eval mode.
        where: where the paper (or the package) applies this module's dropout, for the hint.
    """
    module.train()
    try:
        out = call_answer(module, *args)
    finally:
        module.eval()
    if isinstance(out, torch.Tensor) and out.shape == eval_out.shape and torch.allclose(out, eval_out):
        raise known_bug(
            f"built with dropout={DROPOUT}, your module gives the same output in training mode as in eval mode: "
            f"the dropout argument is not used: store a dropout module built with it and apply it {where}"
            "[[: self.dropout = nn.Dropout(dropout) in __init__]]"
        )
    unused = zero().train()
    copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    first, second = call_answer(unused, *args), call_answer(unused, *copies)
    if isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor) and not torch.equal(first, second):
        held = _own_dropouts(unused)
        found = (
            (
                "; it holds "
                + ", ".join(f"`{name}` with p={p:g}" for name, p in held.items())
                + ": a sub-module built without the dropout argument keeps its own default rate"
            )
            if held
            else ""
        )
        raise known_bug(
            f"built with dropout=0.0, your module still drops in training mode{found}. Is a rate hard-coded "
            "(nn.Dropout(0.1)), or not passed on? Use the dropout argument[[: self.dropout = nn.Dropout(dropout)]]"
        )


def fixed_dropout(x: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
    """A deterministic stand-in for F.dropout: the same mask for the same shape, scaled by 1 / (1 - p).

    With it, where a module applies its dropout can be compared with a reference wired the same way.
    """
    if not training or p == 0:
        return x
    generator = torch.Generator().manual_seed(1234)
    keep = (torch.rand(x.shape, generator=generator) >= p).to(x.dtype) / (1 - p)
    return x.mul_(keep) if inplace else x * keep


def expect_dropout_at(
    module: nn.Module,
    args: tuple,
    expected: Callable[[], torch.Tensor],
    bugs: Sequence[Bug],
    what: str,
    keep_eval: Sequence[str] = (),
) -> None:
    """Where the dropout goes: the module in training mode, every dropout replaced by :func:`fixed_dropout`.

    F.dropout (which nn.Dropout calls) is swapped for the fixed stand-in during the call,
    so the output is deterministic and is compared with ``expected`` (the reference with
    the stand-in in the right place); ``bugs`` simulate it in the wrong places. The
    submodules named in ``keep_eval`` (checked by their own exercises) stay in eval mode,
    so only the module's own dropout acts.
    """
    module.train()
    for name in keep_eval:
        sub = getattr(module, name, None)
        if isinstance(sub, nn.Module):
            sub.eval()
    try:
        with mock.patch.object(nn.functional, "dropout", fixed_dropout):
            out = call_answer(module, *args)
    finally:
        module.eval()
    diagnose(out, expected(), bugs, what + " in training mode (every dropout replaced by a fixed mask)")


def expect_linear(module: nn.Module, name: str, d_in: int, d_out: int, owner: str, bias: bool = False) -> nn.Linear:
    """The learner's ``module.<name>``, which must be nn.Linear(d_in, d_out) (with a bias, if ``bias``)."""
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
    if bias and layer.bias is None:
        raise known_bug(
            f"`{name}` has no bias: the paper's FFN(x) = max(0, xW1 + b1)W2 + b2 has the biases b1 and b2. "
            f"nn.Linear({d_in}, {d_out}) has one by default: drop bias=False"
        )
    return layer


def expect_submodule(module: nn.Module, name: str, description: str) -> nn.Module:
    sub = getattr(module, name, None)
    if not isinstance(sub, nn.Module):
        raise ExerciseError(f"your layer should have a submodule `{name}` ({description})")
    return sub


def _own_dropouts(module: nn.Module) -> dict[str, float]:
    """The dropout rates the learner's module holds, by sub-module name (nn.Dropout only: F.dropout is invisible)."""
    return {
        name or "(the module itself)": float(sub.p)
        for name, sub in module.named_modules()
        if isinstance(sub, nn.Dropout) and sub.p > 0
    }
