"""check_greedy_loop (notebook 07), fed the reference, other correct loops, and the mistakes learners make:
it must pass the right answers (printing one line, returning None), reject each buggy loop with the hint that
names its bug, and say "not implemented yet" for a stub.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from check_helpers import stub
from transformer_lessons.checks import ExerciseError
from transformer_lessons.checks.generation import check_greedy_loop
from transformer_lessons.decode import greedy_decode
from transformer_lessons.masks import causal_mask
from transformer_lessons.specials import BOS_ID

# --- answers, right and buggy -------------------------------------------------------------


def greedy_loop(model, src, n_tokens, bos_id):
    memory = model.encode(src, None)  # (B, S, D)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)  # (B, 1)
    for _ in range(n_tokens):
        logits = model.decode(memory, None, ys, causal_mask(ys.size(1)))  # (B, t, V)
        ys = torch.cat([ys, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)  # (B, t + 1)
    return ys


def greedy_loop_forward_each_step(model, src, n_tokens, bos_id):
    """Re-encodes the source every step through model(...): slower, the same tokens."""
    ys = torch.tensor([[bos_id]] * src.size(0))
    for _ in range(n_tokens):
        probs = F.softmax(model(src, ys, None, causal_mask(ys.size(1)))[:, -1, :], dim=-1)  # (B, V)
        ys = torch.hstack([ys, probs.max(dim=1).indices.unsqueeze(1)])
    return ys


def greedy_loop_list(model, src, n_tokens, bos_id):
    """A Python list of columns, stacked at the end; re-reads every position's argmax (the same, with the mask)."""
    memory = model.encode(src, None)
    columns = [torch.full((src.size(0),), bos_id)]
    for _ in range(n_tokens):
        ys = torch.stack(columns, dim=1)  # (B, t)
        out = model.decode(memory, None, ys, causal_mask(ys.size(1))).argmax(-1)  # (B, t)
        columns.append(out[:, -1])
    return torch.stack(columns, dim=1)


def loop_bos_only(model, src, n_tokens, bos_id):
    memory = model.encode(src, None)
    start = torch.full((src.size(0), 1), bos_id)
    out = [start]
    for _ in range(n_tokens):
        logits = model.decode(memory, None, start, causal_mask(1))  # always reads <bos> alone
        out.append(logits[:, -1].argmax(-1, keepdim=True))
    return torch.cat(out, dim=1)


def loop_last_token(model, src, n_tokens, bos_id):
    memory = model.encode(src, None)
    ys = torch.full((src.size(0), 1), bos_id)
    for _ in range(n_tokens):
        logits = model.decode(memory, None, ys[:, -1:], causal_mask(1))
        ys = torch.cat([ys, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ys


def loop_first_position(model, src, n_tokens, bos_id):
    memory = model.encode(src, None)
    ys = torch.full((src.size(0), 1), bos_id)
    for _ in range(n_tokens):
        logits = model.decode(memory, None, ys, causal_mask(ys.size(1)))
        ys = torch.cat([ys, logits[:, 0].argmax(-1, keepdim=True)], dim=1)
    return ys


def loop_no_mask(model, src, n_tokens, bos_id):
    ys = torch.full((src.size(0), 1), bos_id)
    for _ in range(n_tokens):
        ys = torch.cat([ys, model(src, ys)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ys


def loop_one_short(model, src, n_tokens, bos_id):
    return greedy_loop(model, src, n_tokens - 1, bos_id)


def loop_without_bos(model, src, n_tokens, bos_id):
    return greedy_loop(model, src, n_tokens, bos_id)[:, 1:]


def loop_course_bos(model, src, n_tokens, bos_id):
    return greedy_loop(model, src, n_tokens, BOS_ID)  # the course's <bos>, 2, not the argument


def loop_sampling(model, src, n_tokens, bos_id):
    memory = model.encode(src, None)
    ys = torch.full((src.size(0), 1), bos_id)
    for _ in range(n_tokens):
        probs = model.decode(memory, None, ys, causal_mask(ys.size(1)))[:, -1].softmax(-1)
        ys = torch.cat([ys, torch.multinomial(probs, 1)], dim=1)
    return ys


def loop_float_ids(model, src, n_tokens, bos_id):
    return greedy_loop(model, src, n_tokens, bos_id).float()


# --- the tables ---------------------------------------------------------------------------

REFERENCE = lambda model, src, n_tokens, bos_id: greedy_decode(model, src, None, n_tokens, bos_id)  # noqa: E731

ALTERNATIVES = {
    "loop_cat_keepdim": greedy_loop,
    "loop_forward_each_step": greedy_loop_forward_each_step,
    "loop_list_of_columns": greedy_loop_list,
}

BUGS = {
    "loop-bos-only": (loop_bos_only, "not fed back"),
    "loop-last-token": (loop_last_token, "reads only the last token"),
    "loop-first-position": (loop_first_position, "FIRST position"),
    "loop-no-mask": (loop_no_mask, "no causal mask"),
    "loop-one-short": (loop_one_short, "off by one"),
    "loop-without-bos": (loop_without_bos, "<bos> column is missing"),
    "loop-sampling": (loop_sampling, "sampling"),
}


# --- the tests ----------------------------------------------------------------------------


def test_reference_passes(capsys):
    assert check_greedy_loop(REFERENCE) is None
    out = capsys.readouterr().out
    assert out.startswith("✔ greedy_loop: correct (checked ") and out.count("\n") == 1, out


@pytest.mark.parametrize("case", ALTERNATIVES)
def test_other_correct_answers_pass(case, capsys):
    assert check_greedy_loop(ALTERNATIVES[case]) is None
    assert capsys.readouterr().out.startswith("✔ greedy_loop: correct")


@pytest.mark.parametrize("case", BUGS)
def test_known_bug_is_named(case, capsys):
    buggy, hint = BUGS[case]
    with pytest.raises(ExerciseError) as error:
        check_greedy_loop(buggy)
    message = str(error.value)
    assert message.startswith("greedy_loop: ")
    assert hint in message, message
    assert error.value.known_bug, message
    assert capsys.readouterr().out == ""  # nothing printed on failure: the error says it all


def test_a_hard_coded_bos_and_float_ids_are_refused():
    with pytest.raises(ExerciseError, match="use the argument"):
        check_greedy_loop(loop_course_bos)
    with pytest.raises(ExerciseError, match="token ids"):
        check_greedy_loop(loop_float_ids)


def test_every_simulated_bug_changes_the_output():
    # Each knob of the check's simulation must give tokens that differ from the right loop, or it names nothing.
    from transformer_lessons.checks.decoding import _decoding_model
    from transformer_lessons.checks.generation import _BUGS, _cases, _loop

    model = _decoding_model()
    for src, n_tokens in _cases():
        right = _loop(model, src, n_tokens, 1)  # 1: the check model's <bos>
        for _, knobs, _ in _BUGS:
            assert not torch.equal(_loop(model, src, n_tokens, 1, **knobs), right), (knobs, n_tokens)


def test_stub_says_not_implemented_and_returns_none(capsys):
    assert check_greedy_loop(stub) is None
    out = capsys.readouterr().out
    assert out.startswith("greedy_loop: not implemented yet — ") and out.count("\n") == 1, out
