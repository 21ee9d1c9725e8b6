"""The check of notebook 12's cached step (check_cached_self_attention), fed right answers and the position bugs learners write.

Each answer is written the way a learner would write it (with their own append), not with
the check's bug simulations; tests/test_check_common.py's COVERAGE names them.
"""

from __future__ import annotations

import pytest
import torch

from check_helpers import assert_named, assert_passes, stub
from transformer_lessons.checks import ExerciseError, check_cached_self_attention
from transformer_lessons.checks.kv_position import cached_logits, greedy_with_self_attention
from transformer_lessons.config import ModelConfig
from transformer_lessons.decode import greedy_decode
from transformer_lessons.kv_cache import step_mask
from transformer_lessons.masks import causal_mask
from transformer_lessons.model import Transformer

NAME = "cached_self_attention"


def append_kv(cache_k, cache_v, new_k, new_v):
    return torch.cat([cache_k, new_k], dim=2), torch.cat([cache_v, new_v], dim=2)


# --- right answers ------------------------------------------------------------------------


def step_right(attn, y, past_k, past_v):
    t, T = past_k.size(2), y.size(1)
    new_k, new_v = attn.project_kv(y, y, offset=t)
    k, v = append_kv(past_k, past_v, new_k, new_v)
    return attn.attend(y, k, v, step_mask(T, t), offset=t), k, v


def step_shape_unpacked(attn, y, past_k, past_v):
    # t from unpacking the shape, the mask built by hand, the query projected and attended in two calls.
    _, _, t, _ = past_k.shape
    T = y.shape[1]
    keys, values = attn.project_kv(y, y, t)
    k, v = torch.cat((past_k, keys), -2), torch.cat((past_v, values), -2)
    mask = torch.ones(T, t + T, dtype=torch.bool).tril(diagonal=t)
    return attn._attend_heads(attn.project_q(y, t), k, v, mask), k, v


def step_package(attn, y, past_k, past_v):
    # The package's KVCache and DecoderLayer.step's own lines.
    from transformer_lessons.kv_cache import KVCache

    cache = KVCache([past_k], [past_v], [], [])
    t = cache.length
    k, v = cache.append(0, *attn.project_kv(y, y, offset=t))
    return attn.attend(y, k, v, step_mask(y.size(1), t), offset=t), k, v


# --- bugs -----------------------------------------------------------------------------------


def step_at_zero(attn, y, past_k, past_v):
    # The classic bug: the offsets left at their default, every new word is position 0.
    new_k, new_v = attn.project_kv(y, y)
    k, v = append_kv(past_k, past_v, new_k, new_v)
    return attn.attend(y, k, v, step_mask(y.size(1), past_k.size(2))), k, v


def step_keys_at_zero(attn, y, past_k, past_v):
    t = past_k.size(2)
    k, v = append_kv(past_k, past_v, *attn.project_kv(y, y))
    return attn.attend(y, k, v, step_mask(y.size(1), t), offset=t), k, v


def step_query_at_zero(attn, y, past_k, past_v):
    t = past_k.size(2)
    k, v = append_kv(past_k, past_v, *attn.project_kv(y, y, offset=t))
    return attn.attend(y, k, v, step_mask(y.size(1), t)), k, v


def step_plus_one(attn, y, past_k, past_v):
    # "The new token is the (t+1)-th": counted from 1.
    t = past_k.size(2) + 1
    k, v = append_kv(past_k, past_v, *attn.project_kv(y, y, offset=t))
    return attn.attend(y, k, v, step_mask(y.size(1), t - 1), offset=t), k, v


def step_minus_one(attn, y, past_k, past_v):
    # "The last position's index": t - 1.
    t = past_k.size(2) - 1
    k, v = append_kv(past_k, past_v, *attn.project_kv(y, y, offset=t))
    return attn.attend(y, k, v, step_mask(y.size(1), t + 1), offset=t), k, v


def step_len_of_cache(attn, y, past_k, past_v):
    # len() of a tensor is its first axis, the batch.
    t = len(past_k)
    k, v = append_kv(past_k, past_v, *attn.project_kv(y, y, offset=t))
    return attn.attend(y, k, v, step_mask(y.size(1), past_k.size(2)), offset=t), k, v


def step_heads_axis(attn, y, past_k, past_v):
    t = past_k.size(1)
    k, v = append_kv(past_k, past_v, *attn.project_kv(y, y, offset=t))
    return attn.attend(y, k, v, step_mask(y.size(1), past_k.size(2)), offset=t), k, v


def step_length_after(attn, y, past_k, past_v):
    # "The position is the length of the sentence so far": t + T, counted after this step.
    t, T = past_k.size(2), y.size(1)
    k, v = append_kv(past_k, past_v, *attn.project_kv(y, y, offset=t + T))
    return attn.attend(y, k, v, step_mask(T, t), offset=t + T), k, v


def step_last_new_index(attn, y, past_k, past_v):
    # "The offset is the last position's index": right for one new position, wrong for two.
    t, T = past_k.size(2), y.size(1)
    k, v = append_kv(past_k, past_v, *attn.project_kv(y, y, offset=t + T - 1))
    return attn.attend(y, k, v, step_mask(T, t), offset=t + T - 1), k, v


def _step_with_mask(mask_of):
    def step(attn, y, past_k, past_v):
        t, T = past_k.size(2), y.size(1)
        k, v = append_kv(past_k, past_v, *attn.project_kv(y, y, offset=t))
        return attn.attend(y, k, v, mask_of(T, t), offset=t), k, v

    return step


step_full_causal_mask = _step_with_mask(lambda T, t: causal_mask(t + T))  # (t + T, t + T): one row per key
step_mask_arguments_swapped = _step_with_mask(lambda T, t: step_mask(t, T))
step_new_positions_causal_mask = _step_with_mask(lambda T, t: causal_mask(T))  # (T, T): the cached keys left out


def step_no_mask(attn, y, past_k, past_v):
    t = past_k.size(2)
    k, v = append_kv(past_k, past_v, *attn.project_kv(y, y, offset=t))
    return attn.attend(y, k, v, offset=t), k, v


def step_new_only(attn, y, past_k, past_v):
    t = past_k.size(2)
    new_k, new_v = attn.project_kv(y, y, offset=t)
    k, v = append_kv(past_k, past_v, new_k, new_v)
    return attn.attend(y, new_k, new_v, step_mask(y.size(1), 0), offset=t), k, v


def step_returns_output_only(attn, y, past_k, past_v):
    out, _, _ = step_right(attn, y, past_k, past_v)
    return out


def step_in_place(attn, y, past_k, past_v):
    out, k, v = step_right(attn, y, past_k, past_v)
    past_k.zero_()
    return out, k, v


@pytest.mark.parametrize(
    "answer", [step_right, step_shape_unpacked, step_package], ids=["right", "shape_unpacked", "package"]
)
def test_right_answers_pass(answer, capsys):
    assert_passes(check_cached_self_attention, answer, NAME, capsys)


@pytest.mark.parametrize(
    "bug, hint",
    [
        (step_at_zero, r"every new position was placed at position 0"),
        (step_keys_at_zero, r"the new keys are at position 0"),
        (step_query_at_zero, r"the query is at position 0"),
        (step_plus_one, r"off by one: the new position is placed at t \+ 1"),
        (step_minus_one, r"off by one: the new position is placed at t - 1"),
        (step_len_of_cache, r"t was read from dim 0, the batch"),
        (step_heads_axis, r"t was read from dim 1, the key/value heads"),
        (step_length_after, r"placed at t \+ T, the length of the prefix after this step"),
        (step_last_new_index, r"placed from t \+ T - 1, the last new position's index"),
        (step_no_mask, r"see each other without a mask"),
        (step_new_only, r"attends over the new position's keys and values only"),
    ],
    ids=lambda x: x.__name__ if callable(x) else "",
)
def test_bugs_are_named(bug, hint, capsys):
    assert_named(check_cached_self_attention, bug, NAME, hint, capsys)


@pytest.mark.parametrize(
    "bug",
    [step_full_causal_mask, step_mask_arguments_swapped, step_new_positions_causal_mask],
    ids=["causal_mask(t+T)", "step_mask(t, T)", "causal_mask(T)"],
)
def test_a_mask_of_the_wrong_shape_is_named_before_pytorch_fails(bug):
    with pytest.raises(
        ExerciseError,
        match=r"the mask is \(queries T\) x \(keys t \+ T\), and step_mask takes the number of new positions first",
    ) as raised:
        check_cached_self_attention(bug)
    assert "offset" not in str(raised.value).split("\n")[0]


def step_calls_unwritten_append(attn, y, past_k, past_v):
    # A right step whose append_kv (the exercise before) is still a stub.
    t, T = past_k.size(2), y.size(1)
    k, v = append_kv_stubbed(past_k, past_v, *attn.project_kv(y, y, offset=t))
    return attn.attend(y, k, v, step_mask(T, t), offset=t), k, v


def append_kv_stubbed(cache_k, cache_v, new_k, new_v):
    raise NotImplementedError("return (k, v), each (B, H, t + T, Dh)")


def test_an_unwritten_append_kv_is_named_not_the_step(capsys):
    with pytest.raises(ExerciseError, match=r"your append_kv_stubbed, which your step calls, is not written yet"):
        check_cached_self_attention(step_calls_unwritten_append)
    assert "not implemented yet" not in capsys.readouterr().out


def test_an_unwritten_append_kv_is_called_the_exercise_above(capsys):
    namespace = {"torch": torch, "step_mask": step_mask}
    exec(  # noqa: S102 - the learner's two cells, as the notebook has them
        "def append_kv(cache_k, cache_v, new_k, new_v):\n"
        "    raise NotImplementedError('return (k, v)')\n"
        "def cached_self_attention(attn, y, past_k, past_v):\n"
        "    t, T = past_k.size(2), y.size(1)\n"
        "    k, v = append_kv(past_k, past_v, *attn.project_kv(y, y, offset=t))\n"
        "    return attn.attend(y, k, v, step_mask(T, t), offset=t), k, v\n",
        namespace,
    )
    with pytest.raises(ExerciseError, match=r"your append_kv \(the exercise above\) is not written yet"):
        check_cached_self_attention(namespace["cached_self_attention"])
    torch.manual_seed(0)
    model = Transformer(ModelConfig(n_layers=1, d_model=8, n_heads=2, d_ff=16, positional="rotary"), 9, 9).eval()
    with pytest.raises(NotImplementedError, match=r"your append_kv \(the exercise above\) is not written yet"):
        greedy_with_self_attention(model, torch.randint(3, 9, (1, 4)), None, namespace["cached_self_attention"], 2, 1)


def test_a_single_output_is_refused():
    with pytest.raises(ExerciseError, match=r"return three tensors, \(out, k, v\)"):
        check_cached_self_attention(step_returns_output_only)


def test_in_place_is_named():
    with pytest.raises(ExerciseError, match="changed its input `past_k` in place"):
        check_cached_self_attention(step_in_place)


def test_a_step_wrong_only_late_in_a_sentence_is_caught():
    # Right for caches of up to 7 positions, at position 0 after that: only the real decoder goes that far.
    def step_forgets_late(attn, y, past_k, past_v):
        return step_right(attn, y, past_k, past_v) if past_k.size(2) <= 7 else step_at_zero(attn, y, past_k, past_v)

    with pytest.raises(ExerciseError, match="inside a real decoder"):
        check_cached_self_attention(step_forgets_late)


def test_the_notebooks_decoder_is_the_packages_with_the_right_step():
    torch.manual_seed(0)
    config = ModelConfig(n_layers=2, d_model=16, n_heads=2, d_ff=32, dropout=0.0, positional="rotary")
    model = Transformer(config, 13, 13).eval()
    src, tokens = torch.randint(3, 13, (3, 5)), torch.randint(3, 13, (3, 6))
    with torch.no_grad():
        ours = greedy_with_self_attention(model, src, None, step_right, 9, 1)
        assert torch.equal(ours, greedy_decode(model, src, None, 9, 1, use_cache=True))
        memory = model.encode(src, None)
        right, wrong = model.init_cache(memory), model.init_cache(memory)
        for step in range(6):  # a prefix of 6 tokens: position 0 goes wrong from the second on
            expected = model.decode_step(right, None, tokens[:, step : step + 1])
            got = cached_logits(model, wrong, None, tokens[:, step : step + 1], step_at_zero)
            assert torch.allclose(got, expected, atol=1e-5) == (step == 0)


def test_stub_says_not_implemented_and_returns_none(capsys):
    assert check_cached_self_attention(stub) is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"{NAME}: not implemented yet — ")


def test_check_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_cached_self_attention(step_right)
    assert torch.equal(torch.rand(3), expected)


def test_the_notebooks_decoder_lets_a_stub_raise_not_implemented():
    # Notebook 12 catches NotImplementedError to show the other rows while the exercise is a stub.
    torch.manual_seed(0)
    model = Transformer(ModelConfig(n_layers=1, d_model=8, n_heads=2, d_ff=16, positional="rotary"), 9, 9).eval()
    with pytest.raises(NotImplementedError):
        greedy_with_self_attention(model, torch.randint(3, 9, (1, 4)), None, stub, 2, 1)
