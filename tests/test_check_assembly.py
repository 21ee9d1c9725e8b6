"""check_transformer_forward (Figure 1), fed the reference, other correct answers, and the mistakes learners make:
it must pass the right answers (printing one line, returning None), reject each buggy answer with the hint
that names its bug, and say "not implemented yet" for a stub.
"""

from __future__ import annotations

import pytest

from check_helpers import stub
from transformer_lessons.checks import ExerciseError
from transformer_lessons.checks.assembly import check_transformer_forward

# --- answers, right and buggy -------------------------------------------------------------


def transformer_forward(model, src, tgt_in, src_mask, tgt_mask):
    memory = model.encode(src, src_mask)  # (B, S, D)
    return model.decode(memory, src_mask, tgt_in, tgt_mask)  # (B, T, V)


def transformer_forward_keywords(model, src, tgt_in, src_mask, tgt_mask):
    return model.decode(
        memory=model.encode(src=src, src_mask=src_mask), src_mask=src_mask, tgt=tgt_in, tgt_mask=tgt_mask
    )


def transformer_forward_by_hand(model, src, tgt_in, src_mask, tgt_mask):
    memory = model.encoder(model.src_pos(model.src_embed(src)), src_mask)  # (B, S, D)
    hidden = model.decoder(model.tgt_pos(model.tgt_embed(tgt_in)), memory, src_mask, tgt_mask)  # (B, T, D)
    return model.generator(hidden)  # (B, T, V)


def forward_hidden_states(model, src, tgt_in, src_mask, tgt_mask):
    memory = model.encode(src, src_mask)
    return model.decoder(model.tgt_pos(model.tgt_embed(tgt_in)), memory, src_mask, tgt_mask)


# --- the tables ---------------------------------------------------------------------------

CHECKS = {
    "transformer_forward": check_transformer_forward,
}


REFERENCES = {
    "transformer_forward": lambda model, src, tgt_in, src_mask, tgt_mask: model(src, tgt_in, src_mask, tgt_mask),
}


ALTERNATIVES = {
    "forward_encode_decode": ("transformer_forward", transformer_forward),
    "forward_keywords": ("transformer_forward", transformer_forward_keywords),
    "forward_by_hand": ("transformer_forward", transformer_forward_by_hand),
}


BUGS = {
    "forward_tgt_mask_as_memory_mask": (
        "transformer_forward",
        lambda m, s, t, sm, tm: m.decode(m.encode(s, sm), tm, t, tm),
        "the cross-attention got tgt_mask",
    ),
    "forward_masks_swapped": (
        "transformer_forward",
        lambda m, s, t, sm, tm: m.decode(m.encode(s, sm), tm, t, sm),
        "swapped in decode",
    ),
    "forward_no_src_mask_in_decode": (
        "transformer_forward",
        lambda m, s, t, sm, tm: m.decode(m.encode(s, sm), None, t, tm),
        "src_mask is missing in decode",
    ),
    "forward_no_src_mask_in_encode": (
        "transformer_forward",
        lambda m, s, t, sm, tm: m.decode(m.encode(s), sm, t, tm),
        "src_mask is missing in encode",
    ),
    "forward_encodes_tgt_in": (
        "transformer_forward",
        lambda m, s, t, sm, tm: m.decode(m.encode(t, sm), sm, t, tm),
        "the encoder reads the SOURCE",
    ),
    "forward_decodes_src": (
        "transformer_forward",
        lambda m, s, t, sm, tm: m.decode(m.encode(s, sm), sm, s, tm),
        "the decoder reads the TARGET",
    ),
    "forward_hidden_states": ("transformer_forward", forward_hidden_states, "hidden states"),
    "forward_softmax": (
        "transformer_forward",
        lambda m, s, t, sm, tm: m(s, t, sm, tm).softmax(-1),
        "return the logits, not probabilities",
    ),
    "forward_no_tgt_mask": (
        "transformer_forward",
        lambda m, s, t, sm, tm: m.decode(m.encode(s, sm), sm, t),
        "tgt_mask is missing",
    ),
}


# --- the tests ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", REFERENCES)
def test_reference_passes(name, capsys):
    assert CHECKS[name](REFERENCES[name]) is None
    out = capsys.readouterr().out
    assert out.startswith(f"✔ {name}: correct (checked ") and out.count("\n") == 1, out


@pytest.mark.parametrize("case", ALTERNATIVES)
def test_other_correct_answers_pass(case, capsys):
    name, answer = ALTERNATIVES[case]
    assert CHECKS[name](answer) is None
    assert capsys.readouterr().out.startswith(f"✔ {name}: correct")


@pytest.mark.parametrize("case", BUGS)
def test_known_bug_is_named(case, capsys):
    name, buggy, hint = BUGS[case]
    with pytest.raises(ExerciseError) as error:
        CHECKS[name](buggy)
    message = str(error.value)
    assert message.startswith(f"{name}: ")
    assert hint in message, message
    assert error.value.known_bug, message
    assert capsys.readouterr().out == ""  # nothing printed on failure: the error says it all


@pytest.mark.parametrize("name", CHECKS)
def test_stub_says_not_implemented_and_returns_none(name, capsys):
    answer = stub
    assert CHECKS[name](answer) is None
    out = capsys.readouterr().out
    assert out.startswith(f"{name}: not implemented yet — ") and out.count("\n") == 1, out
