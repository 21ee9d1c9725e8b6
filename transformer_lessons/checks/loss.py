"""Check for the label-smoothed loss (paper §5.4): ε spread over the other classes, padding ignored.

The reference is the course's own :class:`transformer_lessons.loss.LabelSmoothingLoss`.
:func:`_smoothed_loss` writes the loss out with knobs, only to reproduce the mistakes
learners make (ε spread over the wrong classes, padding counted, the KL divergence);
with its default knobs it equals ``LabelSmoothingLoss`` (tests/test_check_loss.py checks).
"""

from __future__ import annotations

import functools
import numbers
from typing import Callable

import torch
import torch.nn.functional as F

from transformer_lessons.checks.common import (
    Bug,
    ExerciseError,
    call_answer,
    all_close,
    differs,
    exercise,
    expect_tensor,
    expect_unchanged,
    known_bug,
)
from transformer_lessons.checks.evidence import Inputs
from transformer_lessons.checks.slips import Slip, slip_bugs
from transformer_lessons.loss import LabelSmoothingLoss

# Not the course's <pad> (1): a hard-coded pad id counts padding positions, and is caught.
_LS_PAD = 3
_LS_V = 7  # small, so that ε/V, ε/(V-1) and ε/(V-2) differ clearly


def _smoothed_loss(logits, target, pad_id, eps, *, spread="V-2", divide="real", kl=False) -> torch.Tensor:
    """-Σ q log p per position, averaged, with knobs that reproduce the common bugs (defaults: the course's loss).

    ``spread``: where ε goes. "V-2": ε/(V-2) on each class neither true nor pad (the course);
    "V": ε/V on every class (``F.cross_entropy(label_smoothing=ε)``); "V-1 pad": ε/(V-1) on
    every class but the true one; "V-1 true": ε/(V-1) on every class but <pad>; "none": one-hot.
    ``divide``: "real" (non-pad targets), "all" (N positions) or "none" (the sum).
    """
    V = logits.size(-1)
    log_p = F.log_softmax(logits.double(), dim=-1)  # (N, V)
    one_hot = F.one_hot(target, V).double()  # (N, V)
    if spread == "none":
        q = one_hot
    elif spread == "V":
        q = eps / V + (1 - eps) * one_hot
    elif spread == "V-1 pad":
        q = eps / (V - 1) * (1 - one_hot) + (1 - eps) * one_hot
    else:
        rest = (1 - one_hot) if spread == "V-2" else torch.ones_like(one_hot)
        rest[:, pad_id] = 0.0
        q = eps / (V - 2 if spread == "V-2" else V - 1) * rest + (1 - eps) * one_hot
    loss = -(q * log_p).sum(-1)  # (N,)
    if kl:  # KL(q ‖ p) = Σ q log q - Σ q log p: the cross-entropy minus the entropy H(q)
        loss = loss + torch.xlogy(q, q).sum(-1)
    real = target != pad_id  # (N,)
    loss = loss.masked_fill(~real, 0.0).sum()
    count = {"real": real.sum(), "all": target.numel(), "none": 1}[divide]
    return (loss / count).float()


def _ls_cases() -> list[tuple[torch.Tensor, torch.Tensor, float]]:
    """``(logits (N, V), target (N,), eps)``: targets with a few <pad> positions, two values of ε."""
    g = torch.Generator().manual_seed(0)
    cases = []
    for n, eps, pads in ((10, 0.2, [2, 5, 9]), (6, 0.05, [4])):
        logits = 2 * torch.randn(n, _LS_V, generator=g)  # (N, V)
        target = torch.randint(0, _LS_V - 1, (n,), generator=g)
        target = target + (target >= _LS_PAD).long()  # real targets: any class but <pad>
        target[pads] = _LS_PAD
        cases.append((logits, target, eps))
    return cases


def _ls_call(fn: Callable, logits: torch.Tensor, target: torch.Tensor, eps: float) -> torch.Tensor:
    """The learner's loss on one case: a scalar float32 tensor, inputs left unchanged."""
    inputs = {"logits": logits.clone(), "target": target.clone()}
    loss = call_answer(
        fn,
        inputs["logits"],
        inputs["target"],
        _LS_PAD,
        eps,
        hint="logits (N, V), target (N,) of class ids, pad_id an int, eps a float",
    )
    expect_unchanged({"logits": logits, "target": target}, inputs)
    if isinstance(loss, numbers.Real):
        raise known_bug(
            f"the loss is a Python {type(loss).__name__}: return a tensor, so that loss.backward() "
            "can follow it back to the logits (drop the .item())"
        )
    return expect_tensor(
        loss,
        "the loss",
        shape=(),
        dtype=torch.float32,
        finite=False,
        shape_hint="Return one number, the mean over the non-pad positions: did you forget the "
        "reduction, or keep a dimension (keepdim=True)?",
    )


def _ls_bugs(logits: torch.Tensor, target: torch.Tensor, eps: float) -> list[Bug]:
    """The loss's known mistakes, alone and two at a time (the Annotated Transformer's KL summed, say)."""

    def simulate(eps=eps, **knobs):
        return _smoothed_loss(logits, target, _LS_PAD, eps, **knobs)

    share = "the true class gets exactly 1 - ε, <pad> gets 0, and each of the V - 2 other classes ε/(V - 2)"
    slips = [
        Slip(
            "you spread ε/V over every class, the true one and <pad> included: that is F.cross_entropy(..., "
            f"label_smoothing=ε), a slightly different target. Here {share}",
            {"spread": "V"},
        ),
        Slip(
            "you give ε/(V - 1) to every class but the true one, so <pad> gets some too: <pad> is never a right "
            f"answer. Here {share}",
            {"spread": "V-1 pad"},
        ),
        Slip(
            f"you give ε/(V - 1) to every class but <pad>, the true one included (it gets 1 - ε + ε/(V - 1)): {share}",
            {"spread": "V-1 true"},
        ),
        Slip(
            f"no smoothing: the true class gets 1 and the others 0, the plain cross-entropy. Smooth it: {share}",
            {"spread": "none"},
        ),
        Slip("the eps argument is not used (a hard-coded 0.1?): smooth with the eps passed in", {"eps": 0.1}),
        Slip(
            "you return the sum over positions: divide by the number of non-pad targets[[: (target != pad_id).sum()]]",
            {"divide": "none"},
        ),
        Slip(
            "you divide by all N positions, padding included: divide by the number of non-pad targets, "
            "(target != pad_id).sum()",
            {"divide": "all"},
        ),
        Slip(
            "you compute the KL divergence KL(q ‖ p) = Σ q log(q / p) (F.kl_div): the cross-entropy minus the entropy "
            "H(q), a constant. It has the same gradients and is a fine loss (the Annotated Transformer's), but this "
            "exercise asks for the course's loss, the cross-entropy -Σ q log p: drop the Σ q log q term",
            {"kl": True},
        ),
    ]
    return slip_bugs(simulate, slips)


def _ls_properties(fn: Callable, logits: torch.Tensor, target: torch.Tensor, eps: float, got: torch.Tensor) -> None:
    """Name a wrong loss by what it depends on: logits at padding, the number of padding rows, ε."""
    pads = target == _LS_PAD
    moved = logits.clone()
    moved[pads] = 5 * torch.randn(int(pads.sum()), logits.size(-1), generator=torch.Generator().manual_seed(1))
    if not all_close(_ls_call(fn, moved, target, eps), got):
        raise known_bug(
            "the loss changes when only the logits of positions whose target is pad_id change: those "
            "positions are not ignored. Zero their loss (target != pad_id) and use the pad_id argument, "
            "not a hard-coded id"
        )
    extra = torch.cat([logits, torch.randn(3, logits.size(-1))]), torch.cat([target, torch.full((3,), _LS_PAD)])
    if not all_close(_ls_call(fn, *extra, eps), got):
        raise known_bug(
            "appending padding positions changes the loss: divide by the number of non-pad targets, "
            "(target != pad_id).sum(), not by all positions"
        )
    if all_close(_ls_call(fn, logits, target, 0.0), LabelSmoothingLoss(logits.size(-1), _LS_PAD, 0.0)(logits, target)):
        raise known_bug(
            "with eps = 0 your loss is right (the cross-entropy), so the smoothing is off: the true class "
            "gets 1 - ε, <pad> 0, and each of the V - 2 other classes ε/(V - 2)"
        )


def _ls_unexplained(
    fn: Callable, logits: torch.Tensor, target: torch.Tensor, eps: float, got: torch.Tensor, expected: torch.Tensor
) -> ExerciseError:
    """A wrong loss that no known bug explains: named by what it depends on (raised there), else how far off it is."""
    _ls_properties(fn, logits, target, eps, got)
    return differs(got, expected, "the loss", "loss = -Σ_v q_v log p_v per position, averaged over non-pad targets")


def _ls_extreme(fn: Callable) -> None:
    """A confident model: logits 200 apart, whose softmax underflows to 0. The loss must stay finite and exact."""
    logits = torch.zeros(4, _LS_V)
    logits[torch.arange(4), torch.tensor([0, 2, 4, 6])] = 200.0  # (N, V): p = 1 on one class, e^-200 = 0 on the others
    target = torch.tensor([0, 5, _LS_PAD, 6])
    got = _ls_call(fn, logits, target, 0.1)
    if not torch.isfinite(got):
        raise known_bug(
            f"on confident logits (one 200 above the others) your loss is {got.item()}: log(softmax(x)) "
            "takes log 0 = -inf where the probabilities underflow. Use the log-softmax function, "
            "which never forms the tiny probabilities[[: F.log_softmax(logits, dim=-1)]]"
        )
    expected = LabelSmoothingLoss(_LS_V, _LS_PAD, 0.1)(logits, target)
    if not all_close(got, expected):
        raise known_bug(
            f"on confident logits (one 200 above the others) your loss is {got.item():.4g}, not "
            f"{expected.item():.4g}: a log of the softmax with an added epsilon or a clamp changes the "
            "values there. Use the log-softmax function[[: F.log_softmax(logits, dim=-1)]]"
        )


@exercise(
    "label_smoothing_loss",
    "return the mean over non-pad targets of -Σ_v q_v log p_v, with q = 1 - eps on the true class, 0 on pad_id "
    "and eps shared equally by the V - 2 other classes, log p from a stable log-softmax",
)
def check_label_smoothing_loss(fn: Callable[..., torch.Tensor]) -> str:
    """Check the label-smoothed cross-entropy (paper §5.4, ε_ls = 0.1), the course's ``LabelSmoothingLoss``.

    Expected signature: ``fn(logits, target, pad_id, eps) -> scalar tensor``: the mean over
    the positions whose target is not ``pad_id`` of ``-Σ_v q_v log p_v``, with
    ``log p = log_softmax(logits)`` and ``q`` the smoothed target: ``1 - eps`` on the true
    class, 0 on ``pad_id``, ``eps / (V - 2)`` on each of the other classes (what
    ``loss.smoothed_targets`` builds). Compared with ``loss.LabelSmoothingLoss`` on two
    batches (pad id 3, not the course's 1), on confident logits (which must not give inf),
    and for a gradient back to the logits. The KL divergence ``KL(q ‖ p)`` is the same
    minus the constant entropy ``H(q)``: the same gradients, but not this exercise's number.

    Shape:
        logits ``(N, V)`` float, target ``(N,)`` long -> ``()``.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while it still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (ε/V or ε/(V-1) instead of ε/(V-2), no
            smoothing, eps ignored, padding positions counted, the sum instead of the
            mean, the KL divergence, log of softmax giving inf, no gradient), or two
            of them at once (the KL divergence summed over positions).
    """
    seen = Inputs()  # a bug is named only if it explains both batches
    for logits, target, eps in _ls_cases():
        with seen.one():
            got = _ls_call(fn, logits, target, eps)
            expected = LabelSmoothingLoss(_LS_V, _LS_PAD, eps)(logits, target)
            seen.compare(
                got,
                expected,
                _ls_bugs(logits, target, eps),
                "the loss",
                differs=functools.partial(_ls_unexplained, fn, logits, target, eps, got, expected),
            )
    seen.verdict()
    _ls_extreme(fn)
    logits, target, eps = _ls_cases()[0]
    with torch.enable_grad():
        logits = logits.clone().requires_grad_()
        if not _ls_call(fn, logits, target, eps).requires_grad:
            raise known_bug(
                "the loss has no gradient back to the logits: a .item(), .detach(), numpy, or a new "
                "torch.tensor(...) cut it off. Compute it from logits with torch operations"
            )
    return "two batches with padding against loss.LabelSmoothingLoss, confident logits, the gradient"
