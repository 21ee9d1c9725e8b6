"""check_decoder_layer (§3.1), fed the reference, correct answers written differently and the bugs learners write."""

from __future__ import annotations

import pytest
import torch.nn.functional as F
from torch import nn

from check_helpers import failure, forward_stub, returns_float64
from transformer_lessons import checks, model
from transformer_lessons.attention import MultiHeadAttention
from transformer_lessons.layers import LayerNorm, PositionwiseFeedForward
from test_check_encoder_layer import Residual, layer_with_bug  # the learner's residual block; a bug switched on

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


class DecoderLayer(nn.Module):
    """A learner's decoder layer with optional bugs (bug=None is correct)."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, bug=None):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = LayerNorm(d_model), LayerNorm(d_model), LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.bug = bug

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        bug = self.bug
        if bug == "masks_swapped":
            src_mask, tgt_mask = tgt_mask, src_mask
        self_mask = None if bug == "no_causal" else tgt_mask
        if bug == "mask_transposed":  # an upper-triangle mask: sees the future, a bug no simulation names
            self_mask = tgt_mask.transpose(-2, -1)
        if bug == "pre_norm":
            y = self.norm1(x)
            x = x + self.self_attn(y, y, y, self_mask)
            x = x + self.cross_attn(self.norm2(x), memory, memory, src_mask)
            return x + self.feed_forward(self.norm3(x))
        if bug == "no_sublayer_dropout":  # the most common slip: MultiHeadAttention and the FFN drop inside anyway
            x = self.norm1(x + self.self_attn(x, x, x, self_mask))
            x = self.norm2(x + self.cross_attn(x, memory, memory, src_mask))
            return self.norm3(x + self.feed_forward(x))
        if bug in ("dropout_after_norm", "dropout_on_sum"):
            for norm, sublayer in (
                (self.norm1, lambda y: self.self_attn(y, y, y, self_mask)),
                (self.norm2, lambda y: self.cross_attn(y, memory, memory, src_mask)),
                (self.norm3, self.feed_forward),
            ):
                if bug == "dropout_after_norm":
                    x = self.dropout(norm(x + sublayer(x)))
                else:
                    x = norm(self.dropout(x + sublayer(x)))
            return x
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, self_mask)))
        kv = x if bug == "cross_on_x" else memory
        cross = self.cross_attn(x, kv, kv, None if bug == "no_src_mask" else src_mask)
        if bug == "no_cross_dropout":
            x = self.norm2(x + cross)
        else:
            x = self.norm2(cross if bug == "no_residual_cross" else x + self.dropout(cross))
        norm3 = self.norm1 if bug == "norms_mixed" else self.norm3
        out = norm3(x + self.dropout(self.feed_forward(x)))
        return out.mean(1) if bug == "shape" else out


# --- right answers and bugs written differently -------------------------------------------


class DecoderLayerHelper(nn.Module):
    """Three (sublayer, norm) steps through one helper method; F.dropout with training=self.training."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.p = dropout
        self.bug = ""

    def _residual(self, x, sublayer, norm, residual=True):
        out = F.dropout(sublayer(x), self.p, training=self.training)
        return norm(x + out if residual else out)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        attend_self = lambda y: self.self_attn(y, y, y, tgt_mask)  # noqa: E731
        attend_memory = lambda y: self.cross_attn(y, memory, memory, src_mask)  # noqa: E731
        sublayers = [attend_self, attend_memory, self.feed_forward]
        if self.bug == "cross_attention_first":
            sublayers[:2] = sublayers[1::-1]
        norms = (self.norm1, self.norm2, self.norm3)
        for i, (sublayer, norm) in enumerate(zip(sublayers, norms)):
            x = self._residual(x, sublayer, norm, residual=not (i == 0 and self.bug == "no_residual_self_attention"))
        return x


class DecoderLayerBlocks(nn.Module):
    """The norms in the learner's own residual blocks, sublayers[i].norm; three plain calls in forward."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList(Residual(d_model, dropout) for _ in range(3))

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask))
        x = self.sublayers[1](x, lambda y: self.cross_attn(y, memory, memory, src_mask))
        return self.sublayers[2](x, self.feed_forward)


def _decoder_bug(bug):
    def init(self, d_model, n_heads, d_ff, dropout=0.0):
        DecoderLayerHelper.__init__(self, d_model, n_heads, d_ff, dropout)
        self.bug = bug

    return type(f"DecoderLayer_{bug}", (DecoderLayerHelper,), {"__init__": init})


dec_cross_attention_first = _decoder_bug("cross_attention_first")


dec_no_residual_self_attention = _decoder_bug("no_residual_self_attention")


# --- the tables ---------------------------------------------------------------------------

REFERENCES = {
    "decoder_layer": (checks.check_decoder_layer, DecoderLayer),
}


# (check, buggy answer, a phrase the hint must contain)
BUGS = {
    "dec-no-causal": ("decoder_layer", layer_with_bug(DecoderLayer, "no_causal"), "future leaks"),
    "dec-mask-transposed": ("decoder_layer", layer_with_bug(DecoderLayer, "mask_transposed"), "future leaks"),
    "dec-cross-on-x": ("decoder_layer", layer_with_bug(DecoderLayer, "cross_on_x"), "x as keys and values"),
    "dec-masks-swapped": ("decoder_layer", layer_with_bug(DecoderLayer, "masks_swapped"), "swapped"),
    "dec-no-src-mask": ("decoder_layer", layer_with_bug(DecoderLayer, "no_src_mask"), "src_mask is not passed"),
    "dec-pre-norm": ("decoder_layer", layer_with_bug(DecoderLayer, "pre_norm"), "pre-norm"),
    "dec-no-residual": (
        "decoder_layer",
        layer_with_bug(DecoderLayer, "no_residual_cross"),
        "residual around the cross-attention",
    ),
    "dec-norms-mixed": ("decoder_layer", layer_with_bug(DecoderLayer, "norms_mixed"), "LayerNorms are mixed up"),
    "dec-no-sublayer-dropout": (
        "decoder_layer",
        layer_with_bug(DecoderLayer, "no_sublayer_dropout"),
        "no dropout on the sublayers' outputs",
    ),
    "dec-dropout-after-norm": (
        "decoder_layer",
        layer_with_bug(DecoderLayer, "dropout_after_norm"),
        "not after the LayerNorm",
    ),
    "dec-dropout-on-sum": (
        "decoder_layer",
        layer_with_bug(DecoderLayer, "dropout_on_sum"),
        "dropout goes on the sublayer's output, not on x + sublayer(x)",
    ),
    "dec-no-cross-dropout": (
        "decoder_layer",
        layer_with_bug(DecoderLayer, "no_cross_dropout"),
        "dropout is missing after the cross-attention",
    ),
}


# Answers of the wrong shape: the message must say "shape".
WRONG_SHAPES = {
    "decoder_layer": layer_with_bug(DecoderLayer, "shape"),
}


# Answers of the wrong dtype (float64 from float32 inputs): the message must name the dtype.
WRONG_DTYPES = {
    "decoder_layer": returns_float64(model.DecoderLayer),
}


# Correct answers written the way a learner would, differently from the reference and the answers above.
WRITTEN_DIFFERENTLY = {
    "DecoderLayerHelper": ("decoder_layer", DecoderLayerHelper),
    "DecoderLayerBlocks": ("decoder_layer", DecoderLayerBlocks),
}


# Bugs written in the styles above, each one a mistake the older tests did not feed its check:
# (check, buggy answer, a phrase of the message that names the bug)
BUGS_WRITTEN_DIFFERENTLY = {
    "dec_cross_attention_first": ("decoder_layer", dec_cross_attention_first, "sublayers are in the wrong order"),
    "dec_no_residual_self_attention": (
        "decoder_layer",
        dec_no_residual_self_attention,
        "residual around the self-attention is missing",
    ),
}


# --- tests --------------------------------------------------------------------------------


PACKAGE_REFERENCES = {
    "decoder_layer": model.DecoderLayer,
}


@pytest.mark.parametrize("name", ["decoder_layer"])
def test_class_with_forward_stub_returns_none(name, capsys):
    check, reference = REFERENCES[name]
    assert check(forward_stub(reference)) is None
    assert "not implemented yet" in capsys.readouterr().out


# --- answers that used to fool the checks: dropout, cross-attention wiring ----------------


class DecoderLayerFunctionalDropout(model.DecoderLayer):
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        p = self.sublayers[0].dropout.p
        x = self.sublayers[0].norm(x + F.dropout(self.self_attn(x, x, x, tgt_mask), p))
        x = self.sublayers[1].norm(x + F.dropout(self.cross_attn(x, memory, memory, src_mask), p))
        return self.sublayers[2].norm(x + F.dropout(self.feed_forward(x), p))


@pytest.mark.parametrize(
    "check, answer",
    [
        (checks.check_decoder_layer, DecoderLayerFunctionalDropout),
    ],
    ids=["decoder_layer"],
)
def test_dropout_left_on_in_eval_mode_is_named(check, answer):
    error = failure(check, answer)
    message = str(error)
    assert "dropout is still on" in message and "training=self.training" in " ".join(error.fixes), message


class DecoderLayerCrossWiring(model.DecoderLayer):
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


# --- an instance instead of the class -----------------------------------------------------


@pytest.mark.parametrize(
    "check, instance, name",
    [
        (checks.check_decoder_layer, model.DecoderLayer(8, 2, 16), "decoder_layer(DecoderLayer)"),
    ],
    ids=["decoder_layer"],
)
def test_an_instance_instead_of_the_class_is_named(check, instance, name):
    message = str(failure(check, instance))
    assert f"pass the class, not an instance: check_{name}" in message, message
