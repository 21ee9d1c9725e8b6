"""check_greedy_decode, fed the reference and the decoding bugs learners actually write.

Each buggy decoder below is written the way a learner would write it (a loop over
``model.decode``), not with the check's own simulation, so the test shows that the
check recognises real code and names the bug.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from transformer_lessons import checks, decode
from transformer_lessons.checks import ExerciseError
from transformer_lessons.checks import decoding as check_decoding
from transformer_lessons.decode import greedy_decode
from transformer_lessons.masks import causal_mask
from transformer_lessons.specials import BOS_ID, EOS_ID, PAD_ID

# Collected here and run on this file's tables (check_tables.py, conftest.pytest_generate_tests):
from check_tables import (
    test_correct_answer_written_differently_passes,  # noqa: F401
    test_package_reference_passes,  # noqa: F401
)


def learner_greedy(model, src, src_mask, max_new_tokens, bos_id, eos_id, bug=None):
    """A learner's greedy loop; ``bug`` switches on one known mistake (None is correct)."""
    memory = model.encode(src, None if bug == "no_src_mask" else src_mask)  # (B, S, D)
    mask = None if bug == "no_src_mask" else src_mask
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)  # (B, 1)
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    steps = (
        max_new_tokens - 1 if bug == "off_by_one" else max_new_tokens + 1 if bug == "one_too_many" else max_new_tokens
    )
    for _ in range(steps):
        inp = ys[:, :1] if bug == "no_feedback" else ys[:, -1:] if bug == "last_token_only" else ys
        tgt_mask = None if bug == "no_causal_mask" else causal_mask(inp.size(1))
        if bug == "reencode":  # slower, still right
            logits = model(src, inp, src_mask, tgt_mask)  # (B, t, V)
        else:
            logits = model.decode(memory, mask, inp, tgt_mask)  # (B, t, V)
        if bug == "first_position":
            next_token = logits[:, 0].argmax(dim=-1)
        elif bug == "wrong_axis":
            next_token = logits[:, -1].argmax(dim=0)  # (V,): over the batch
        elif bug == "softmax_axis":
            next_token = logits.softmax(dim=1)[:, -1].argmax(dim=-1)
        elif bug == "sampling":
            next_token = torch.multinomial(F.softmax(logits[:, -1], dim=-1), 1).squeeze(1)
        else:
            next_token = logits[:, -1].argmax(dim=-1)  # (B,)
        if bug != "no_eos_handling":
            next_token = next_token.masked_fill(finished, eos_id)
        finished |= next_token == eos_id
        ys = torch.cat([ys, next_token[:, None]], dim=1)  # (B, t + 1)
        if bug == "stop_at_first_eos" and bool(finished.any()):
            break
        if bug not in ("no_eos_handling", "run_to_max_len") and bool(finished.all()):
            break
    if bug == "no_bos":
        return ys[:, 1:]
    if bug == "float":
        return ys.float()
    if bug == "list":
        return ys.tolist()
    return ys


def learner(bug):
    def fn(model, src, src_mask, max_new_tokens, bos_id, eos_id):
        return learner_greedy(model, src, src_mask, max_new_tokens, bos_id, eos_id, bug=bug)

    return fn


@pytest.mark.parametrize(
    "answer",
    [
        greedy_decode,  # the package's own (no pad_id: finished rows get eos_id)
        learner(None),
        learner("reencode"),  # re-encoding the source every step: slower, not wrong
        learner("run_to_max_len"),  # no early stop, but eos after eos: fine
    ],
    ids=["package", "learner_loop", "reencode_each_step", "no_early_stop"],
)
def test_correct_answers_pass(answer, capsys):
    assert checks.check_greedy_decode(answer) is None
    assert capsys.readouterr().out.startswith("✔ greedy_decode: correct")


@pytest.mark.parametrize(
    "bug, hint",
    [
        ("no_feedback", "not fed back"),
        ("first_position", "FIRST position"),
        ("last_token_only", "only the last token"),
        ("no_causal_mask", "no causal mask"),
        ("no_src_mask", "src_mask is not used"),
        ("wrong_axis", "argmax over the vocabulary"),
        ("softmax_axis", "softmax runs over the wrong axis"),
        ("sampling", "sampling"),
        ("no_eos_handling", "goes on after its <eos>"),
        ("stop_at_first_eos", "ONE row"),
        ("off_by_one", "off by one"),
        ("one_too_many", "more than 1 + max_new_tokens"),
        ("no_bos", "<bos> column is missing"),
        ("float", "dtype torch.long"),
        ("list", "torch.Tensor"),
    ],
)
def test_each_bug_is_named(bug, hint):
    with pytest.raises(ExerciseError) as info:
        checks.check_greedy_decode(learner(bug))
    message = str(info.value)
    assert message.startswith("greedy_decode: ")
    assert hint in message, message


def test_hard_coded_special_ids_are_caught():
    def course_ids(model, src, src_mask, max_new_tokens, bos_id, eos_id):
        return learner_greedy(model, src, src_mask, max_new_tokens, 2, 3)  # the course vocabulary's <bos>/<eos>

    with pytest.raises(ExerciseError, match="bos_id = 1"):
        checks.check_greedy_decode(course_ids)


def test_inputs_left_alone():
    def zeroes_src(model, src, src_mask, max_new_tokens, bos_id, eos_id):
        out = learner_greedy(model, src, src_mask, max_new_tokens, bos_id, eos_id)
        src.zero_()
        return out

    with pytest.raises(ExerciseError, match="changed its input `src`"):
        checks.check_greedy_decode(zeroes_src)


def test_stub_says_not_implemented(capsys):
    def stub(model, src, src_mask, max_new_tokens, bos_id, eos_id):
        raise NotImplementedError("write the loop")

    assert checks.check_greedy_decode(stub) is None
    assert capsys.readouterr().out.startswith("greedy_decode: not implemented yet — ")


def test_check_leaves_the_random_state_and_the_model_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    checks.check_greedy_decode(greedy_decode)
    assert torch.equal(torch.rand(3), expected)
    model = check_decoding._decoding_model()
    assert "decode" not in model.__dict__  # the spy is removed


def test_every_bug_changes_the_output():
    """The check's model and sources are chosen so that no simulated bug coincides with the reference."""
    model = check_decoding._decoding_model()
    for src, src_mask, max_new_tokens in check_decoding._decoding_cases()[:1]:
        bos, eos = check_decoding._DEC_BOS, check_decoding._DEC_EOS
        with torch.no_grad():
            want = check_decoding._rows_until_eos(greedy_decode(model, src, src_mask, max_new_tokens, bos, eos), eos)
            outputs = {
                name: check_decoding._rows_until_eos(
                    check_decoding._greedy(model, src, src_mask, max_new_tokens, bos, eos, **knobs), eos
                )
                for name, knobs in {
                    "bos": dict(feed="bos"),
                    "last": dict(feed="last"),
                    "causal": dict(causal=False),
                    "src_mask": dict(use_src_mask=False),
                    "softmax": dict(softmax_dim=1),
                }.items()
            }
        assert all(out != want for out in outputs.values())
        assert len({str(out) for out in outputs.values()}) == len(outputs)
        assert any(row[-1] != eos for row in want) and any(row[-1] == eos for row in want)  # cut rows and ended rows


def test_toy_ids_differ_from_the_course_vocabulary():
    # So a decoder that hard-codes the course's <bos>/<eos> (transformer_lessons.specials) is caught.
    toy = (check_decoding._DEC_PAD, check_decoding._DEC_BOS, check_decoding._DEC_EOS)
    assert all(mine != course for mine, course in zip(toy, (PAD_ID, BOS_ID, EOS_ID)))


def test_decoding_model_comes_back_in_eval_mode():
    # It is trained with train.train_step, which switches to train mode.
    assert not check_decoding._decoding_model().training


# --- right answers written differently, and the package's own -----------------------------


def _tril(size):
    return torch.tril(torch.ones(size, size, dtype=torch.bool))


def greedy_preallocated(model, src, src_mask, max_new_tokens, bos_id, eos_id):
    """One (B, 1 + max_new_tokens) buffer filled column by column; the columns after an early stop stay eos_id."""
    memory = model.encode(src, src_mask)  # (B, S, D)
    ys = torch.full((src.size(0), 1 + max_new_tokens), eos_id, dtype=torch.long)
    ys[:, 0] = bos_id
    finished = torch.zeros(src.size(0), dtype=torch.bool)
    for t in range(1, max_new_tokens + 1):
        logits = model.decode(memory, src_mask, ys[:, :t], _tril(t))  # (B, t, V)
        next_token = logits[:, -1].argmax(dim=-1)  # (B,)
        next_token[finished] = eos_id
        ys[:, t] = next_token
        finished |= next_token == eos_id
        if finished.all():
            break
    return ys


def greedy_columns_stack(model, src, src_mask, max_new_tokens, bos_id, eos_id):
    """A list of (B,) columns, stacked each step; torch.where for the finished rows."""
    memory = model.encode(src, src_mask)
    columns = [torch.full((src.size(0),), bos_id, dtype=torch.long)]
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_new_tokens):
        ys = torch.stack(columns, dim=1)  # (B, t)
        logits = model.decode(memory, src_mask, ys, _tril(ys.size(1)))
        token = torch.where(done, eos_id, logits[:, -1].argmax(dim=-1))  # (B,)
        columns.append(token)
        done = done | (token == eos_id)
        if bool(done.all()):
            break
    return torch.stack(columns, dim=1)


def greedy_one_sentence_at_a_time(model, src, src_mask, max_new_tokens, bos_id, eos_id):
    """Another order: decode each sentence alone until its <eos>, then pad the shorter ones with eos_id."""
    rows = []
    for b in range(src.size(0)):
        memory = model.encode(src[b : b + 1], src_mask[b : b + 1])  # (1, S, D)
        row = [bos_id]
        while len(row) <= max_new_tokens and row[-1] != eos_id:
            ys = torch.tensor([row])  # (1, t)
            logits = model.decode(memory, src_mask[b : b + 1], ys, _tril(len(row)))
            row.append(int(logits[0, -1].argmax()))
        rows.append(row)
    width = max(len(row) for row in rows)
    return torch.tensor([row + [eos_id] * (width - len(row)) for row in rows])


# Correct answers written the way a learner would, differently from the reference and the answers above.
WRITTEN_DIFFERENTLY = {
    "greedy_preallocated": ("greedy_decode", greedy_preallocated),
    "greedy_columns_stack": ("greedy_decode", greedy_columns_stack),
    "greedy_one_sentence_at_a_time": ("greedy_decode", greedy_one_sentence_at_a_time),
}


PACKAGE_REFERENCES = {
    "greedy_decode": decode.greedy_decode,
}
