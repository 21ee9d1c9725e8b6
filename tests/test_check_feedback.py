"""What a learner sees from a check, and the wrong answers that used to fool the checks.

The first half is the feedback: a failing check draws itself in IPython as a few
red lines holding the diagnosis and none of the check's own frames; a pass prints
one line and returns None; a stub says "not implemented yet" and returns None; a
slow answer hears "still checking". The second half feeds each check a mistake,
written as a learner would, that an earlier version of the checks let through or
misnamed, and asserts the check now names it.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from check_helpers import failure
from transformer_lessons import checks
from transformer_lessons.attention import MultiHeadAttention
from transformer_lessons.checks import _feedback
from transformer_lessons.layers import LayerNorm, PositionwiseFeedForward
from transformer_lessons.masks import causal_mask, padding_mask, target_mask
from transformer_lessons.model import DecoderLayer

ROOT = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def causal_mask_no_diagonal(size):
    return torch.ones(size, size, dtype=torch.bool).tril(-1)  # the bug: a token may not see itself


# --- the feedback -----------------------------------------------------------------------


def test_pass_prints_one_line_and_returns_none(capsys):
    assert checks.check_causal_mask(causal_mask) is None
    assert capsys.readouterr().out.splitlines() == [
        "✔ causal_mask: correct (checked shape, bool dtype, lower triangle with the diagonal, sizes 1, 5, 8)"
    ]


def test_stub_says_not_implemented_and_returns_none_without_raising(capsys):
    def causal_mask(size):
        raise NotImplementedError("return a (size, size) bool tensor, True on and below the diagonal")

    assert checks.check_causal_mask(causal_mask) is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("causal_mask: not implemented yet — ")


def test_a_stub_in_a_class_is_not_implemented_yet(capsys):
    class FeedForward(nn.Module):
        def __init__(self, d_model, d_ff, dropout=0.0):
            super().__init__()
            raise NotImplementedError("create w_1, w_2 and dropout")

    assert checks.check_feed_forward(FeedForward) is None
    assert "feed_forward: not implemented yet" in capsys.readouterr().out


def test_render_traceback_is_the_diagnosis_alone():
    error = failure(checks.check_causal_mask, causal_mask_no_diagonal)
    lines = error._render_traceback_()
    text = ANSI.sub("", "\n".join(lines))
    assert 1 <= len(lines) <= 6 and all(len(ANSI.sub("", line)) <= 100 for line in lines)
    assert text.startswith("✘ causal_mask: off by one: the diagonal is excluded")
    assert "tril(-1)" not in text and "tril(-1)" in " ".join(error.fixes)  # the fix waits for hint()
    assert text.endswith("more help: hint('causal_mask')")
    assert "transformer_lessons" not in text and "Traceback" not in text and "File " not in text
    assert "\x1b[31m" in lines[0]  # red
    assert str(error) == ANSI.sub("", text).replace("✘ ", "", 1).replace("\n  ", " ").replace(
        " more help", "\n  more help")  # str(error) stays plain text
    assert "\x1b" not in str(error)


def test_render_traceback_points_at_the_learners_line_not_the_packages():
    def padding_mask(tokens, pad_id):
        keep = tokens.ne(pad_id).float()
        return keep[:, None, None, :] & torch.ones(1, dtype=torch.bool)  # float & bool: PyTorch raises

    error = failure(checks.check_padding_mask, padding_mask)
    text = ANSI.sub("", "\n".join(error._render_traceback_()))
    assert "of your `padding_mask`:" in text
    assert "return keep[:, None, None, :] & torch.ones(1, dtype=torch.bool)" in text  # the line, unwrapped
    assert "transformer_lessons" not in text


def test_a_failing_check_in_ipython_shows_only_the_diagnosis():
    # A real IPython shell (no kernel), in a fresh process so that it installs no hooks in this one.
    script = textwrap.dedent(
        """
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.run_cell("import torch\\nfrom transformer_lessons.checks import check_causal_mask")
        print("=== fail")
        shell.run_cell("def causal_mask(size):\\n    return torch.ones(size, size, dtype=torch.bool).tril(-1)\\n"
                       "check_causal_mask(causal_mask)")
        print("=== pass")
        shell.run_cell("from transformer_lessons.masks import causal_mask\\ncheck_causal_mask(causal_mask)")
        print("=== stub")
        shell.run_cell("def causal_mask(size):\\n    raise NotImplementedError('write it')\\ncheck_causal_mask(causal_mask)")
        print("=== end")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    out = ANSI.sub("", result.stdout)
    failed, passed, stub = (part.strip() for part in re.split(r"=== \w+\n?", out)[1:4])
    assert failed.startswith("✘ causal_mask: off by one: the diagonal is excluded"), out
    assert "more help: hint('causal_mask')" in failed and len(failed.splitlines()) <= 4
    for frame_marker in ("Traceback", "transformer_lessons", "checks/common", "File ", "ExerciseError"):
        assert frame_marker not in failed, out
    # The pass prints its line and echoes nothing: a True returned would show as "Out[..]: True".
    assert len(passed.splitlines()) == 1 and passed.startswith("✔ causal_mask: correct"), out
    assert "Out[" not in out
    assert stub.startswith("causal_mask: not implemented yet") and len(stub.splitlines()) == 1, out


def test_a_slow_answer_hears_still_checking(monkeypatch, capsys):
    monkeypatch.setattr(_feedback, "_SLOW_AFTER_S", 0.05)
    monkeypatch.setattr(_feedback, "_SLOW_EVERY_S", 0.05)

    def noam_rate(step, d_model, warmup, factor=1.0):
        time.sleep(0.03)  # a slow answer: 11 calls take a third of a second
        return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

    checks.check_noam_rate(noam_rate)
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("… still checking noam_rate (") for line in lines), lines
    assert lines[-1].startswith("✔ noam_rate: correct")


def test_a_fast_answer_hears_nothing_more(capsys):
    checks.check_noam_rate(lambda s, d, w, f=1.0: f * d**-0.5 * min(s**-0.5, s * w**-1.5))
    assert "still checking" not in capsys.readouterr().out


# --- checks that could be fooled: dropout ------------------------------------------------


class FeedForwardFunctionalDropout(nn.Module):
    """F.dropout without training=self.training: dropout stays on in eval mode."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w_1, self.w_2, self.p = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model), dropout

    def forward(self, x):
        return self.w_2(F.dropout(torch.relu(self.w_1(x)), self.p))


class FeedForwardNoDropout(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(torch.relu(self.w_1(x)))


class FeedForwardFixedDropout(FeedForwardNoDropout):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(0.1)  # the bug: the argument is ignored

    def forward(self, x):
        return self.w_2(self.dropout(torch.relu(self.w_1(x))))


class MHADropoutInForward(MultiHeadAttention):
    """A fresh nn.Dropout made inside forward is always in training mode."""

    def forward(self, query, key, value, mask=None):
        B, T, D = query.shape

        def split(x):
            return x.view(B, x.size(1), self.n_heads, self.d_head).transpose(1, 2)

        q, k, v = split(self.w_q(query)), split(self.w_k(key)), split(self.w_v(value))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = nn.Dropout(self.dropout.p)(scores.softmax(-1))
        return self.w_o((weights @ v).transpose(1, 2).reshape(B, T, D))


class EncoderLayerFunctionalDropout(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.p = dropout

    def forward(self, x, src_mask=None):
        x = self.norm1(x + F.dropout(self.self_attn(x, x, x, src_mask), self.p))
        return self.norm2(x + F.dropout(self.feed_forward(x), self.p))


class DecoderLayerFunctionalDropout(DecoderLayer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        p = self.sublayers[0].dropout.p
        x = self.sublayers[0].norm(x + F.dropout(self.self_attn(x, x, x, tgt_mask), p))
        x = self.sublayers[1].norm(x + F.dropout(self.cross_attn(x, memory, memory, src_mask), p))
        return self.sublayers[2].norm(x + F.dropout(self.feed_forward(x), p))


@pytest.mark.parametrize(
    "check, answer",
    [
        (checks.check_feed_forward, FeedForwardFunctionalDropout),
        (checks.check_multi_head_attention, MHADropoutInForward),
        (checks.check_encoder_layer, EncoderLayerFunctionalDropout),
        (checks.check_decoder_layer, DecoderLayerFunctionalDropout),
    ],
    ids=["feed_forward", "multi_head_attention", "encoder_layer", "decoder_layer"],
)
def test_dropout_left_on_in_eval_mode_is_named(check, answer):
    error = failure(check, answer)
    message = str(error)
    assert "dropout is still on" in message and "training=self.training" in " ".join(error.fixes), message


def test_dropout_never_applied_is_named():
    assert "the dropout argument is not used" in str(failure(checks.check_feed_forward, FeedForwardNoDropout))


def test_dropout_rate_hard_coded_is_named():
    assert "hard-coded" in str(failure(checks.check_feed_forward, FeedForwardFixedDropout))


# --- pad ids --------------------------------------------------------------------------------


@pytest.mark.parametrize("hard_coded", [1, 0])
def test_padding_mask_with_a_hard_coded_pad_id_is_named(hard_coded):
    def padding_mask(tokens, pad_id):
        return (tokens != hard_coded)[:, None, None, :]

    assert "hard-code the pad id" in str(failure(checks.check_padding_mask, padding_mask))


@pytest.mark.parametrize("hard_coded", [1, 0])
def test_target_mask_with_a_hard_coded_pad_id_is_named(hard_coded):
    def target_mask(tokens, pad_id):
        return (tokens != hard_coded)[:, None, None, :] & causal_mask(tokens.size(1))

    assert "hard-code the pad id" in str(failure(checks.check_target_mask, target_mask))


def test_masks_are_checked_with_several_pad_ids(capsys):
    seen = []

    def recording(tokens, pad_id):
        seen.append(pad_id)
        return padding_mask(tokens, pad_id)

    checks.check_padding_mask(recording)
    assert len(set(seen)) >= 3 and {0, 1} <= set(seen)
    seen.clear()
    checks.check_target_mask(lambda tokens, pad_id: recording(tokens, pad_id) & causal_mask(tokens.size(1)))
    assert len(set(seen)) >= 3 and {0, 1} <= set(seen)


# --- NotImplementedError: the learner's stub, or PyTorch's -------------------------------------


def test_not_implemented_error_from_pytorch_is_a_bug_not_a_stub(capsys):
    def target_mask(tokens, pad_id):
        T = tokens.size(1)
        causal = torch.tril(torch.ones(T, T))  # float: & with a bool tensor raises NotImplementedError
        return causal & (tokens != pad_id)[:, None, None, :]

    message = str(failure(checks.check_target_mask, target_mask))
    assert "your code raised NotImplementedError" in message and "comes from PyTorch, not from your stub" in message
    assert "causal & (tokens != pad_id)" in message  # the learner's line
    assert "not implemented yet" not in capsys.readouterr().out


def test_a_class_without_forward_is_named():
    class FeedForward(nn.Module):
        def __init__(self, d_model, d_ff, dropout=0.0):
            super().__init__()
            self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

        def foward(self, x):  # misspelt: nn.Module's placeholder forward raises NotImplementedError
            return self.w_2(torch.relu(self.w_1(x)))

    assert "no `forward` method" in str(failure(checks.check_feed_forward, FeedForward))


# --- cross-attention wiring ------------------------------------------------------------------


class DecoderLayerCrossWiring(DecoderLayer):
    """The package's decoder layer with cross_attn fed from the wrong sides."""

    wiring = "memory, x, x"

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0):
        super().__init__(d_model, n_heads, d_ff, dropout)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask))
        if self.wiring == "memory, x, x":
            x = self.sublayers[1](x, lambda y: self.cross_attn(memory, y, y, src_mask))
        else:  # "x, x, memory"
            x = self.sublayers[1](x, lambda y: self.cross_attn(y, y, memory, src_mask))
        return self.sublayers[2](x, self.feed_forward)


@pytest.mark.parametrize(
    "wiring, named",
    [("memory, x, x", "memory as queries and x as keys and values"), ("x, x, memory", "using x as keys.")],
)
def test_mis_wired_cross_attention_is_named(wiring, named):
    answer = type("DecoderLayerWired", (DecoderLayerCrossWiring,), {"wiring": wiring})
    message = str(failure(checks.check_decoder_layer, answer))
    assert "cross-attention is mis-wired" in message and f"cross_attn({wiring}, ...)" in message, message
    assert named in message and "future leaks" not in message


# --- feed-forward biases ---------------------------------------------------------------------


class FeedForwardNoBias(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff, bias=False)
        self.w_2 = nn.Linear(d_ff, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.w_2(self.dropout(torch.relu(self.w_1(x))))


class FeedForwardWeightsOnly(PositionwiseFeedForward):
    def forward(self, x):
        hidden = torch.relu(x @ self.w_1.weight.T)  # the bug: the biases are left out
        return self.dropout(hidden) @ self.w_2.weight.T


def test_feed_forward_without_biases_is_named():
    assert "has no bias" in str(failure(checks.check_feed_forward, FeedForwardNoBias))
    assert "the biases are missing" in str(failure(checks.check_feed_forward, FeedForwardWeightsOnly))


# --- NaN hints ---------------------------------------------------------------------------------


class FeedForwardSqrt(PositionwiseFeedForward):
    def forward(self, x):
        return self.w_2(self.dropout(torch.sqrt(self.w_1(x))))  # the bug: sqrt of negative numbers


class MHAInvertedMaskInf(MultiHeadAttention):
    def forward(self, query, key, value, mask=None):
        B, T, D = query.shape

        def split(x):
            return x.view(B, x.size(1), self.n_heads, self.d_head).transpose(1, 2)

        q, k, v = split(self.w_q(query)), split(self.w_k(key)), split(self.w_v(value))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))  # the bug: inverted, so a full row is all -inf
        out = self.dropout(scores.softmax(-1)) @ v
        return self.w_o(out.transpose(1, 2).reshape(B, T, D))


def test_nan_without_softmax_does_not_blame_masks():
    message = str(failure(checks.check_feed_forward, FeedForwardSqrt))
    assert "NaN" in message and "sqrt" in message
    assert "mask" not in message and "softmax" not in message


def test_nan_in_attention_hints_at_masks():
    message = str(failure(checks.check_multi_head_attention, MHAInvertedMaskInf))
    assert "NaN" in message and "mask inverted" in message


# --- an instance instead of the class ------------------------------------------------------


@pytest.mark.parametrize(
    "check, instance, name",
    [
        (checks.check_feed_forward, PositionwiseFeedForward(8, 16), "feed_forward(PositionwiseFeedForward)"),
        (checks.check_layer_norm, LayerNorm(8), "layer_norm(LayerNorm)"),
        (checks.check_multi_head_attention, MultiHeadAttention(8, 2), "multi_head_attention(MultiHeadAttention)"),
        (checks.check_decoder_layer, DecoderLayer(8, 2, 16), "decoder_layer(DecoderLayer)"),
    ],
    ids=["feed_forward", "layer_norm", "multi_head_attention", "decoder_layer"],
)
def test_an_instance_instead_of_the_class_is_named(check, instance, name):
    message = str(failure(check, instance))
    assert f"pass the class, not an instance: check_{name}" in message, message


def test_a_result_instead_of_the_function_is_named():
    message = str(failure(checks.check_target_mask, target_mask(torch.tensor([[2, 5, 1]]), 1)))
    assert "not what it returns" in message and "check_target_mask(" in message
