"""check_sees_future (notebook 06's leak test), fed right leak tests and the mistakes learners make: it must pass
the right ones (printing one line, returning None), reject each buggy one with the hint that names its bug, and say
"not implemented yet" for a stub.
"""

from __future__ import annotations

import pytest
import torch

from check_helpers import stub
from transformer_lessons.checks import ExerciseError
from transformer_lessons.checks.leak_test import check_sees_future
from transformer_lessons.masks import causal_mask

T = 6

# --- answers, right and buggy -------------------------------------------------------------


def sees_future(layer, d_model):
    layer.eval()
    inputs, memory = torch.randn(1, T, d_model), torch.randn(1, T + 1, d_model)
    base = layer(inputs, memory, None, causal_mask(T))
    for t in range(1, T):
        moved = inputs.clone()
        moved[:, t] += 1.0
        if not torch.allclose(layer(moved, memory, None, causal_mask(T))[:, :t], base[:, :t], atol=1e-6):
            return True
    return False


def sees_future_jacobian(layer, d_model):
    """With autograd: the output at position i must not depend on any input position j > i."""
    layer.eval()
    memory = torch.randn(1, 4, d_model)
    jac = torch.autograd.functional.jacobian(
        lambda x: layer(x, memory, None, causal_mask(T)), torch.randn(1, T, d_model)
    )
    jac = jac.abs().sum(dim=(0, 2, 3, 5))  # (T out, T in)
    return bool(jac.triu(1).max() > 1e-6)


def sees_future_all_at_once(layer, d_model):
    """Changes every position after t at once, for each t: a leak into t shows up just the same."""
    layer.eval()
    x, memory = torch.randn(2, T, d_model), torch.randn(2, 3, d_model)
    mask = causal_mask(T)
    base = layer(x, memory, None, mask)
    for t in range(T - 1):
        y = x.clone()
        y[:, t + 1 :] = torch.randn_like(y[:, t + 1 :])
        if (layer(y, memory, None, mask)[:, : t + 1] - base[:, : t + 1]).abs().max() > 1e-6:
            return True
    return False


def sees_future_no_mask(layer, d_model):
    layer.eval()
    inputs, memory = torch.randn(1, T, d_model), torch.randn(1, T, d_model)
    base = layer(inputs, memory)
    for t in range(1, T):
        moved = inputs.clone()
        moved[:, t] += 1.0
        if not torch.allclose(layer(moved, memory)[:, :t], base[:, :t], atol=1e-6):
            return True
    return False


def sees_future_no_eval(layer, d_model):
    inputs, memory = torch.randn(1, T, d_model), torch.randn(1, T, d_model)
    base = layer(inputs, memory, None, causal_mask(T))
    for t in range(1, T):
        moved = inputs.clone()
        moved[:, t] += 1.0
        if not torch.allclose(layer(moved, memory, None, causal_mask(T))[:, :t], base[:, :t], atol=1e-6):
            return True
    return False


def sees_future_position_4_only(layer, d_model):
    """The notebook's experiment as it stands: change position 4, look at positions 0-3."""
    layer.eval()
    inputs, memory = torch.randn(1, T, d_model), torch.randn(1, T, d_model)
    moved = inputs.clone()
    moved[:, 4] = torch.randn(d_model)
    change = (layer(inputs, memory, None, causal_mask(T)) - layer(moved, memory, None, causal_mask(T))).abs()
    return bool(change[:, :4].max() > 1e-6)


def sees_future_compares_later(layer, d_model):
    """Compares the changed position and the ones after it: they always move."""
    layer.eval()
    inputs, memory = torch.randn(1, T, d_model), torch.randn(1, T, d_model)
    base = layer(inputs, memory, None, causal_mask(T))
    moved = inputs.clone()
    moved[:, 2] += 1.0
    return not torch.allclose(layer(moved, memory, None, causal_mask(T))[:, 2:], base[:, 2:])


def sees_future_attention_weights(layer, d_model):
    """Looks only at the self-attention's weights: a leak after the attention goes unseen."""
    layer.eval()
    layer(torch.randn(1, T, d_model), torch.randn(1, T, d_model), None, causal_mask(T))
    return bool(layer.self_attn.attn_weights.triu(1).abs().max() > 0)


def sees_future_position_1_only(layer, d_model):
    """Changes position 1 alone and looks at position 0: every leak into position 0 shows, a leak elsewhere not."""
    layer.eval()
    inputs, memory = torch.randn(1, T, d_model), torch.randn(1, T, d_model)
    moved = inputs.clone()
    moved[:, 1] += 1.0
    change = layer(moved, memory, None, causal_mask(T)) - layer(inputs, memory, None, causal_mask(T))
    return bool(change[:, 0].abs().max() > 1e-6)


def sees_future_one_before(layer, d_model):
    """Changes each position t in turn, but compares only position t - 1."""
    layer.eval()
    inputs, memory = torch.randn(1, T, d_model), torch.randn(1, T, d_model)
    base = layer(inputs, memory, None, causal_mask(T))
    for t in range(1, T):
        moved = inputs.clone()
        moved[:, t] += 1.0
        if not torch.allclose(layer(moved, memory, None, causal_mask(T))[:, t - 1], base[:, t - 1], atol=1e-6):
            return True
    return False


def sees_future_loose(layer, d_model):
    """The right experiment with a loose tolerance: a small leak passes under it."""
    layer.eval()
    inputs, memory = torch.randn(1, T, d_model), torch.randn(1, T, d_model)
    base = layer(inputs, memory, None, causal_mask(T))
    for t in range(1, T):
        moved = inputs.clone()
        moved[:, t] += 1.0
        if not torch.allclose(layer(moved, memory, None, causal_mask(T))[:, :t], base[:, :t], atol=0.1):
            return True
    return False


def sees_future_float(layer, d_model):
    return float(sees_future(layer, d_model))


# --- the tables ---------------------------------------------------------------------------

ALTERNATIVES = {
    "leak_test_each_position": sees_future,
    "leak_test_jacobian": sees_future_jacobian,
    "leak_test_future_at_once": sees_future_all_at_once,
}

BUGS = {
    "leak-no-mask": (sees_future_no_mask, "correct layer sees the future"),
    "leak-no-eval": (sees_future_no_eval, "eval mode"),
    "leak-position-4-only": (sees_future_position_4_only, "Change every"),
    "leak-compares-later": (sees_future_compares_later, "correct layer sees the future"),
    "leak-attention-weights": (sees_future_attention_weights, "test the layer's output, not its mask"),
    "leak-always-false": (lambda layer, d_model: False, "ignores tgt_mask"),
    "leak-position-1-only": (sees_future_position_1_only, "compare ALL the positions before it"),
    "leak-one-before-only": (sees_future_one_before, "compare ALL the positions before it"),
    "leak-loose-tolerance": (sees_future_loose, "a small leak is still a leak"),
}


# --- the tests ----------------------------------------------------------------------------


@pytest.mark.parametrize("case", ALTERNATIVES)
def test_right_leak_tests_pass(case, capsys):
    assert check_sees_future(ALTERNATIVES[case]) is None
    out = capsys.readouterr().out
    assert out.startswith("✔ sees_future: correct (checked ") and out.count("\n") == 1, out


@pytest.mark.parametrize("case", BUGS)
def test_known_bug_is_named(case, capsys):
    buggy, hint = BUGS[case]
    with pytest.raises(ExerciseError) as error:
        check_sees_future(buggy)
    message = str(error.value)
    assert message.startswith("sees_future: ")
    assert hint in message, message
    assert error.value.known_bug, message
    assert capsys.readouterr().out == ""


def test_not_a_bool_is_refused():
    with pytest.raises(ExerciseError, match="return True or False"):
        check_sees_future(sees_future_float)


def test_the_leaky_layers_leak_and_the_right_one_does_not():
    # The check's own cases must be what they claim, by the reference leak test.
    from transformer_lessons.checks.leak_test import _LEAK_CASES, _SEES_FUTURE_D

    for what, cls, dropout, leaks, _ in _LEAK_CASES:
        assert sees_future(cls(_SEES_FUTURE_D, 2, 16, dropout=dropout), _SEES_FUTURE_D) == leaks, what


def test_stub_says_not_implemented_and_returns_none(capsys):
    assert check_sees_future(stub) is None
    out = capsys.readouterr().out
    assert out.startswith("sees_future: not implemented yet — ") and out.count("\n") == 1, out
