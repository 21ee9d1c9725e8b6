"""check_encoder_layer (§3.1), fed the reference, correct answers written differently and the bugs learners write."""

from __future__ import annotations

import pytest
import torch.nn.functional as F
from torch import nn

from check_helpers import failure, forward_stub, returns_float64
from test_check_layers import LayerNormSquares  # a layer norm written differently, used by the layers here
from transformer_lessons import checks, model
from transformer_lessons.attention import MultiHeadAttention
from transformer_lessons.layers import LayerNorm, PositionwiseFeedForward

# Collected here and run on this file's tables (check_tables.py, conftest.pytest_generate_tests):
from check_tables import (
    test_bug_written_differently_is_named,  # noqa: F401
    test_correct_answer_written_differently_passes,  # noqa: F401
    test_known_bug_is_named,  # noqa: F401
    test_learner_exception_is_reported_and_chained,  # noqa: F401
    test_package_reference_passes,  # noqa: F401
    test_reference_passes_with_one_line,  # noqa: F401
    test_stub_returns_none_and_says_so,  # noqa: F401
    test_wrong_dtype_is_reported,  # noqa: F401
    test_wrong_shape_is_reported,  # noqa: F401
)


# --- reference answers written the way a learner would ------------------------------------


class EncoderLayer(nn.Module):
    """A learner's encoder layer with optional bugs (bug=None is correct)."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, bug=None):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)  # either LayerNorm works
        self.dropout = nn.Dropout(dropout)
        self.bug = bug

    def forward(self, x, src_mask=None):
        bug, attn, ff, n1, n2 = self.bug, self.self_attn, self.feed_forward, self.norm1, self.norm2
        mask = None if bug == "mask_not_passed" else src_mask
        if bug == "swap_norms":
            n1, n2 = n2, n1
        if bug == "shared_norm":
            n2 = n1
        if bug == "pre_norm":
            y = n1(x)
            x = x + self.dropout(attn(y, y, y, mask))
            return x + self.dropout(ff(n2(x)))
        if bug == "no_residual_attn":
            x = n1(self.dropout(attn(x, x, x, mask)))
        elif bug == "norm_sublayer":
            x = x + n1(attn(x, x, x, mask))
        elif bug == "dropout_on_sum":
            x = n1(self.dropout(x + attn(x, x, x, mask)))
        elif bug == "dropout_after_norm":
            x = self.dropout(n1(x + attn(x, x, x, mask)))
        elif bug == "dropout_on_input":
            y = self.dropout(x)
            x = n1(x + attn(y, y, y, mask))
        elif bug == "dropout_attention_only":
            x = n1(x + self.dropout(attn(x, x, x, mask)))
            return n2(x + ff(x))
        else:
            x = n1(x + self.dropout(attn(x, x, x, mask)))
        if bug == "shape":
            return x[:, :-1]
        if bug == "norm_sublayer":
            return x + n2(ff(x))
        return n2(x + self.dropout(ff(x)))


# --- answers for the tables below, right and buggy ----------------------------------------


def layer_with_bug(cls, bug):
    return lambda *args: cls(*args, bug=bug)


# --- right answers and bugs written differently -------------------------------------------


class EncoderLayerHelper(nn.Module):
    """Explicit sublayer code through one helper method; nn.LayerNorm; F.dropout with training=self.training."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.p = dropout
        self.bug = ""

    def _residual(self, x, sublayer, norm, residual=True):
        out = F.dropout(sublayer(x), self.p, training=self.training)
        return norm(x + out if residual else out)

    def forward(self, x, src_mask=None):
        attend = lambda y: self.self_attn(y, y, y, src_mask)  # noqa: E731
        if self.bug == "feed_forward_first":
            x = self._residual(x, self.feed_forward, self.norm1)
            return self._residual(x, attend, self.norm2)
        x = self._residual(x, attend, self.norm1)
        return self._residual(x, self.feed_forward, self.norm2, residual=self.bug != "no_residual_feed_forward")


class Residual(nn.Module):
    """A learner's own residual block: norm(x + dropout(sublayer(x)))."""

    def __init__(self, d_model, dropout):
        super().__init__()
        self.norm = LayerNormSquares(d_model)  # a hand-written LayerNorm works as well as nn.LayerNorm
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayerBlocks(nn.Module):
    """The norms inside the learner's own residual blocks, sublayers[i].norm, as in the package's layout."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList([Residual(d_model, dropout) for _ in range(2)])

    def forward(self, x, src_mask=None):
        attention, feed_forward = self.sublayers
        x = attention(x, lambda y: self.self_attn(y, y, y, src_mask))
        return feed_forward(x, self.feed_forward)


def _encoder_bug(bug):
    def init(self, d_model, n_heads, d_ff, dropout=0.0):
        EncoderLayerHelper.__init__(self, d_model, n_heads, d_ff, dropout)
        self.bug = bug

    return type(f"EncoderLayer_{bug}", (EncoderLayerHelper,), {"__init__": init})


enc_feed_forward_first = _encoder_bug("feed_forward_first")


enc_no_residual_feed_forward = _encoder_bug("no_residual_feed_forward")


# --- the tables ---------------------------------------------------------------------------

REFERENCES = {
    "encoder_layer": (checks.check_encoder_layer, EncoderLayer),
}


# (check, buggy answer, a phrase the hint must contain)
BUGS = {
    "enc-pre-norm": ("encoder_layer", layer_with_bug(EncoderLayer, "pre_norm"), "pre-norm"),
    "enc-no-residual": (
        "encoder_layer",
        layer_with_bug(EncoderLayer, "no_residual_attn"),
        "residual around self-attention",
    ),
    "enc-mask-not-passed": ("encoder_layer", layer_with_bug(EncoderLayer, "mask_not_passed"), "src_mask is not passed"),
    "enc-norm-on-sublayer": ("encoder_layer", layer_with_bug(EncoderLayer, "norm_sublayer"), "norm the SUM"),
    "enc-norms-swapped": ("encoder_layer", layer_with_bug(EncoderLayer, "swap_norms"), "swapped"),
    "enc-shared-norm": ("encoder_layer", layer_with_bug(EncoderLayer, "shared_norm"), "same LayerNorm"),
    "enc-dropout-on-sum": (
        "encoder_layer",
        layer_with_bug(EncoderLayer, "dropout_on_sum"),
        "dropout goes on the sublayer's output, not on x + sublayer(x)",
    ),
    "enc-dropout-after-norm": (
        "encoder_layer",
        layer_with_bug(EncoderLayer, "dropout_after_norm"),
        "not after the LayerNorm",
    ),
    "enc-dropout-on-input": ("encoder_layer", layer_with_bug(EncoderLayer, "dropout_on_input"), "not on its input"),
    "enc-dropout-attention-only": (
        "encoder_layer",
        layer_with_bug(EncoderLayer, "dropout_attention_only"),
        "missing after the feed-forward",
    ),
}


# Answers of the wrong shape: the message must say "shape".
WRONG_SHAPES = {
    "encoder_layer": layer_with_bug(EncoderLayer, "shape"),
}


# Answers of the wrong dtype (float64 from float32 inputs): the message must name the dtype.
WRONG_DTYPES = {
    "encoder_layer": returns_float64(model.EncoderLayer),
}


# Correct answers written the way a learner would, differently from the reference and the answers above.
WRITTEN_DIFFERENTLY = {
    "EncoderLayerHelper": ("encoder_layer", EncoderLayerHelper),
    "EncoderLayerBlocks": ("encoder_layer", EncoderLayerBlocks),
}


# Bugs written in the styles above, each one a mistake the older tests did not feed its check:
# (check, buggy answer, a phrase of the message that names the bug)
BUGS_WRITTEN_DIFFERENTLY = {
    "enc_feed_forward_first": ("encoder_layer", enc_feed_forward_first, "sublayers are in the wrong order"),
    "enc_no_residual_feed_forward": ("encoder_layer", enc_no_residual_feed_forward, "residual around the feed-forward"),
}


# --- tests --------------------------------------------------------------------------------


PACKAGE_REFERENCES = {
    "encoder_layer": model.EncoderLayer,  # norms in sublayers[i].norm, not norm1, norm2
}


@pytest.mark.parametrize("name", ["encoder_layer"])
def test_class_with_forward_stub_returns_none(name, capsys):
    check, reference = REFERENCES[name]
    assert check(forward_stub(reference)) is None
    assert "not implemented yet" in capsys.readouterr().out


# --- answers that used to fool the checks: dropout ----------------------------------------


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


@pytest.mark.parametrize(
    "check, answer",
    [
        (checks.check_encoder_layer, EncoderLayerFunctionalDropout),
    ],
    ids=["encoder_layer"],
)
def test_dropout_left_on_in_eval_mode_is_named(check, answer):
    error = failure(check, answer)
    message = str(error)
    assert "dropout is still on" in message and "training=self.training" in " ".join(error.fixes), message
