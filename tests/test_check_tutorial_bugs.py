"""Every check against a bug of a popular public Transformer tutorial (or of its issue threads), with its source.

Learners copy from tutorials. Each answer below reproduces, in the exercise's own
signature, one mistake (or a convention that is a mistake here) found in a named
public tutorial, repository or issue thread; the check must reject it and name it.
The answers are written for these tests, in the exercises' signatures: they do what
the cited code does, they are not copies of it. Where a tutorial's code only becomes
a bug once ported into the exercise (its convention differs), the source says so.

:data:`TUTORIAL_BUGS` holds one row per case: the check, the answer, phrases the
message must contain, and where the bug comes from. Every exported ``check_*`` must
have at least one row (:func:`test_every_check_knows_a_tutorial_bug`).
"""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_lessons import checks
from transformer_lessons.attention import MultiHeadAttention
from transformer_lessons.checks import ExerciseError
from transformer_lessons.layers import LayerNorm, PositionwiseFeedForward
from transformer_lessons.masks import causal_mask, padding_mask
from transformer_lessons.specials import SPECIALS

# --- where the bugs come from --------------------------------------------------------------------

ANNOTATED = (
    "harvardnlp/annotated-transformer, the_annotated_transformer.py (The Annotated Transformer, v2022; "
    "the 2018 original does the same)"
)
PERSSON = (
    "aladdinpersson/Machine-Learning-Collection, "
    "ML/Pytorch/more_advanced/transformer_from_scratch/transformer_from_scratch.py (Aladdin Persson, "
    "'Pytorch Transformers from Scratch', YouTube)"
)
SAM_LYNN_EVANS = (
    "SamLynnEvans/Transformer (Samuel Lynn-Evans, 'How to code The Transformer in PyTorch', Towards Data Science, 2018)"
)
TF_TUTORIAL = (
    "TensorFlow tutorial 'Transformer model for language understanding' (tensorflow/docs, "
    "site/en/tutorials/text/transformer.ipynb)"
)
BENTREVETT = "bentrevett/pytorch-seq2seq, '6 - Attention is All You Need.ipynb' (the 2020 torchtext version)"
D2L = "Dive into Deep Learning (d2l.ai), the seq2seq chapter's bleu() (section 'Evaluation of Predicted Sequences')"
JADORE = "jadore801120/attention-is-all-you-need-pytorch"


# --- answers: scaled dot-product and multi-head attention -----------------------------------------


def sdpa_additive_tf_mask(query, key, value, mask=None):
    """The TF tutorial adds mask * -1e9 to the scores: its mask is 1 where a key is padding (blocked)."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores + mask * -1e9  # with this course's mask (True = may attend) it hides the visible keys
    weights = scores.softmax(dim=-1)
    return weights @ value, weights


class MHAScaledByDModel(nn.Module):
    """Persson's SelfAttention divides each head's scores by sqrt(embed_size), d_model, not by sqrt(head_dim)."""

    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.h, self.d = n_heads, d_model
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        B = query.size(0)

        def heads(x):
            return x.view(B, x.size(1), self.h, self.d // self.h).transpose(1, 2)

        energy = heads(self.w_q(query)) @ heads(self.w_k(key)).transpose(-2, -1)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e20)
        attention = self.dropout(torch.softmax(energy / self.d**0.5, dim=-1))
        return self.w_o((attention @ heads(self.w_v(value))).transpose(1, 2).reshape(B, -1, self.d))


# --- answers: masks -----------------------------------------------------------------------------


def causal_with_leading_axis(size):
    """The Annotated Transformer's subsequent_mask builds a (1, size, size) mask (triu of ones, k=1, == 0)."""
    return torch.triu(torch.ones(1, size, size), diagonal=1) == 0


def padding_without_heads_axis(tokens, pad_id):
    """The Annotated Transformer's Batch: src_mask = (src != pad).unsqueeze(-2), (B, 1, S); its attention adds the heads axis."""
    return (tokens != pad_id).unsqueeze(-2)


def padding_tf_style(tokens, pad_id):
    """The TF tutorial's create_padding_mask: 1.0 (float) where the token IS padding, shaped (B, 1, 1, S)."""
    return (tokens == pad_id).float()[:, None, None, :]


def target_causal_only_float(tokens, pad_id):
    """Persson's make_trg_mask: a float lower triangle of ones, expanded to (B, 1, T, T), with no padding part."""
    B, T = tokens.shape
    return torch.tril(torch.ones(T, T)).expand(B, 1, T, T)


def target_without_heads_axis(tokens, pad_id):
    """The Annotated Transformer's make_std_mask: (tgt != pad).unsqueeze(-2) & subsequent_mask(T): (B, T, T)."""
    return (tokens != pad_id).unsqueeze(-2) & causal_with_leading_axis(tokens.size(1))


def target_maximum_of_masks(tokens, pad_id):
    """The TF tutorial combines its two masks with tf.maximum: for 1 = blocked masks that is 'blocked by either';
    ported to True = may attend, the same maximum is OR."""
    return torch.maximum(padding_mask(tokens, pad_id), causal_mask(tokens.size(1)))


def inversion_one_minus(blocked):
    """Hugging Face's get_extended_attention_mask converts a mask with (1.0 - mask): floats, not a bool mask."""
    return 1.0 - blocked.float()


# --- answers: embeddings and positions ------------------------------------------------------------------


def pe_own_frequency_per_column(max_len, d_model):
    """SamLynnEvans' PositionalEncoder: i already steps by 2, then 2 * i again for sin, 2 * (i + 1) for cos."""
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / 10000 ** (2 * i / d_model))
            pe[pos, i + 1] = math.cos(pos / 10000 ** (2 * (i + 1) / d_model))
    return pe


def embedding_unscaled(table, tokens):
    """Persson's Encoder and Decoder add word_embedding(x) to the positions without the sqrt(d_model) factor."""
    return table(tokens)


class PositionsScalingInside(nn.Module):
    """SamLynnEvans' PositionalEncoder.forward multiplies x by sqrt(d_model) before adding the positions, so
    embeddings that arrive already scaled (as the course's do) are scaled twice."""

    def __init__(self, max_len, d_model, dropout=0.0):
        super().__init__()
        self.max_len, self.d_model = max_len, d_model
        self.table = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        if x.size(1) > self.max_len:
            raise ValueError("too long")
        x = x * math.sqrt(self.d_model)
        return self.dropout(x + self.table(torch.arange(x.size(1))))


# --- answers: layer norm, feed-forward, layers -----------------------------------------------------------


class LayerNormA2B2(nn.Module):
    """The Annotated Transformer's LayerNorm: parameters a_2, b_2, eps 1e-6, unbiased std, eps outside the sqrt."""

    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean, std = x.mean(-1, keepdim=True), x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


class LayerNormAlphaBias(nn.Module):
    """SamLynnEvans' Norm: the same formula and eps 1e-6, its gain called alpha and its shift bias."""

    def __init__(self, d_model, eps=1e-6):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):  # its own names: inheriting LayerNormA2B2.forward would read a_2, which this has not
        mean, std = x.mean(-1, keepdim=True), x.std(-1, keepdim=True)
        return self.alpha * (x - mean) / (std + self.eps) + self.bias


class AnnotatedLayerNormRenamed(nn.Module):
    """The Annotated Transformer's LayerNorm with the exercise's parameter names: its formula and its eps remain."""

    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean, std = x.mean(-1, keepdim=True), x.std(-1, keepdim=True)
        return self.weight * (x - mean) / (std + self.eps) + self.bias


class FeedForwardGELU(nn.Module):
    """nanoGPT's MLP (GPT-2's): GELU between the two Linear layers, where the paper has ReLU."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.w_2(self.dropout(F.gelu(self.w_1(x))))


class EncoderLayerOneNorm(nn.Module):
    """bentrevett's EncoderLayer: one layer_norm, applied after both sublayers."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)  # built, never used
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, src_mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, src_mask)))
        return self.norm1(x + self.dropout(self.feed_forward(x)))


class AnnotatedSublayers(nn.Module):
    """The Annotated Transformer's SublayerConnection, x + dropout(sublayer(norm(x))): pre-norm ("for code
    simplicity the norm is first"), with its own LayerNorm; the layers below keep the exercise's names."""

    def sublayer(self, norm, x, fn):
        return x + self.dropout(fn(norm(x)))


class AnnotatedEncoderLayer(AnnotatedSublayers):
    """The Annotated Transformer's EncoderLayer: two pre-norm sublayers, each with its own LayerNorm."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = AnnotatedLayerNormRenamed(d_model), AnnotatedLayerNormRenamed(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, src_mask=None):
        x = self.sublayer(self.norm1, x, lambda y: self.self_attn(y, y, y, src_mask))
        return self.sublayer(self.norm2, x, self.feed_forward)


class AnnotatedDecoderLayer(AnnotatedSublayers):
    """The Annotated Transformer's DecoderLayer: three pre-norm sublayers, each with its own LayerNorm."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (AnnotatedLayerNormRenamed(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.sublayer(self.norm1, x, lambda y: self.self_attn(y, y, y, tgt_mask))
        x = self.sublayer(self.norm2, x, lambda y: self.cross_attn(y, memory, memory, src_mask))
        return self.sublayer(self.norm3, x, self.feed_forward)


class EncoderLayerAttentionDropoutDefault(nn.Module):
    """The Annotated Transformer's make_model builds its attention as MultiHeadedAttention(h, d_model), without the
    dropout argument: the attention drops at its default 0.1 whatever dropout the model is given."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads)  # dropout not passed: MultiHeadAttention's default, 0.1
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, src_mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, src_mask)))
        return self.norm2(x + self.dropout(self.feed_forward(x)))


def sees_future_from_attention_weights(layer, d_model):
    """The Annotated Transformer shows that the decoder cannot see the future by drawing subsequent_mask: the
    mask, or the attention weights it leaves, not what the layer computes."""
    layer.eval()
    layer(torch.randn(1, 6, d_model), torch.randn(1, 6, d_model), None, causal_mask(6))
    return bool(layer.self_attn.attn_weights.triu(1).abs().max() > 0)


def greedy_loop_annotated_style(model, src, n_tokens, bos_id):
    """The Annotated Transformer's greedy_decode loops range(max_len - 1) times, given n_tokens as max_len."""
    memory = model.encode(src, None)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    for _ in range(n_tokens - 1):
        out = model.decode(memory, None, ys, causal_mask(ys.size(1)))
        ys = torch.cat([ys, out[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
    return ys


# --- answers: data, training ---------------------------------------------------------------------


def batch_torchtext_style(lengths, max_tokens):
    """torchtext's (legacy) data.batch with a padded-size function, as the Annotated Transformer (2018) batches:
    when an example alone exceeds the budget it yields minibatch[:-1], an empty batch."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, batch, size = [], [], 0
    for i in order:
        batch.append(i)
        size = len(batch) * max(lengths[j] for j in batch)
        if size == max_tokens:
            batches.append(batch)
            batch, size = [], 0
        elif size > max_tokens:
            batches.append(batch[:-1])
            batch, size = batch[-1:], lengths[i]
    if batch:
        batches.append(batch)
    return batches


def vocab_lowercased(token_lists, min_freq):
    """bentrevett's Field(lower=True): every token lowercased before the vocabulary is counted."""
    from collections import Counter

    counts = Counter(token.lower() for tokens in token_lists for token in tokens)
    kept = sorted((t for t, n in counts.items() if n >= min_freq and t not in SPECIALS), key=lambda t: (-counts[t], t))
    return [*SPECIALS, *kept]


def noam_step_plus_one(step, d_model, warmup, factor=1.0):
    """jadore801120's early train.py: update_learning_rate adds 1 to the step it is given, then computes the rate."""
    step += 1
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def label_smoothing_kl_summed(logits, target, pad_id, eps):
    """The Annotated Transformer's LabelSmoothing: ε/(V-2) off the true class, <pad> 0, padding rows 0, then
    nn.KLDivLoss(reduction='sum'): the KL divergence, summed (its caller divides by the token count later)."""
    V = logits.size(-1)
    log_p = F.log_softmax(logits, dim=-1)
    true_dist = torch.full_like(log_p, eps / (V - 2))
    true_dist.scatter_(1, target.unsqueeze(1), 1 - eps)
    true_dist[:, pad_id] = 0
    true_dist[target == pad_id] = 0
    return F.kl_div(log_p, true_dist, reduction="sum")


def label_smoothing_v_minus_1_summed(logits, target, pad_id, eps):
    """jadore801120's cal_loss: ε/(V-1) on every class but the true one, <pad> included, summed ('average later').
    Its eps is a hard-coded 0.1; here it is the argument, so that the two other differences show."""
    V = logits.size(1)
    one_hot = F.one_hot(target, V).float()
    q = one_hot * (1 - eps) + (1 - one_hot) * eps / (V - 1)
    loss = -(q * F.log_softmax(logits, dim=1)).sum(dim=1)
    return loss[target != pad_id].sum()


def train_step_scheduler_first(model, batch, criterion, optimizer, scheduler):
    """The order PyTorch's schedulers expected before 1.1.0: scheduler.step() before optimizer.step()."""
    model.train()
    loss = criterion(model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask), batch.tgt_out)
    optimizer.zero_grad()
    loss.backward()
    scheduler.step()
    optimizer.step()
    return loss.item()


def train_step_zero_grad_last(model, batch, criterion, optimizer, scheduler):
    """The Annotated Transformer's run_epoch order: backward, step, zero_grad after the step, scheduler: correct."""
    model.train()
    loss = criterion(model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask), batch.tgt_out)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    return loss.item()


# --- answers: decoding, BLEU, the cache, many processes -------------------------------------------


def greedy_annotated_style(model, src, src_mask, max_new_tokens, bos_id, eos_id):
    """The Annotated Transformer's greedy_decode, batched: max_len - 1 steps, and no stop at <eos>."""
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)
    for _ in range(max_new_tokens - 1):
        out = model.decode(memory, src_mask, ys, causal_mask(ys.size(1)))
        ys = torch.cat([ys, out[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
    return ys


def beam_step_multiplied(scores, log_probs, K):
    """Jason Brownlee's beam search multiplied a sequence's score by -log(p) of each new token; here the
    scores, log-probabilities, are multiplied by the new log-probabilities."""
    cand = scores[:, None] * log_probs  # (K, V)
    top, index = cand.reshape(-1).topk(K)
    V = log_probs.size(1)
    return top, index // V, index % V


def precision_unclamped_total(hypothesis, reference, n):
    """d2l's bleu() counting, clipped through a dictionary, with its total len_pred - n + 1 (its loop never asks
    for n > len_pred; as a function of n the total goes negative)."""
    from collections import defaultdict

    reference_counts = defaultdict(int)
    for i in range(len(reference) - n + 1):
        reference_counts[tuple(reference[i : i + n])] += 1
    matches = 0
    for i in range(len(hypothesis) - n + 1):
        if reference_counts[tuple(hypothesis[i : i + n])] > 0:
            matches += 1
            reference_counts[tuple(hypothesis[i : i + n])] -= 1
    return matches, len(hypothesis) - n + 1


def brevity_penalty_d2l(hyp_len, ref_len):
    """d2l's bleu(): exp(min(0, 1 - len_label / len_pred)), which divides by zero for an empty hypothesis."""
    return math.exp(min(0, 1 - ref_len / hyp_len))


def append_kv_on_last_axis(cache_k, cache_v, new_k, new_v):
    """Hugging Face's GPT-2 (v2 to v4) kept its keys transposed, (B, H, Dh, t), and joined them on dim=-1;
    with the usual (B, H, t, Dh) layout that joins the head width."""
    return torch.cat((cache_k, new_k), dim=-1), torch.cat((cache_v, new_v), dim=-2)


def reorder_kv_skipped(cache_k, cache_v, parent, keep):
    """transformers#46612: beam search never reordered some models' caches, so each row kept its old prefix."""
    return cache_k, cache_v


def cached_step_positions_from_zero(attn, y, past_k, past_v):
    """mlx-lm's GPT-2 before PR #93 started the new tokens' positions at 0, whatever the cache held."""
    new_k, new_v = attn.project_kv(y, y)
    k, v = torch.cat([past_k, new_k], dim=2), torch.cat([past_v, new_v], dim=2)
    return attn.attend(y, k, v, None if y.size(1) == 1 else causal_mask(y.size(1))), k, v


def cached_step_count_one_ahead(attn, y, past_k, past_v):
    """flash-linear-attention#766: the cache counted the new token before the upper layers read it, so RoPE got t + 1."""
    t = past_k.size(2) + 1
    new_k, new_v = attn.project_kv(y, y, offset=t)
    k, v = torch.cat([past_k, new_k], dim=2), torch.cat([past_v, new_v], dim=2)
    mask = torch.ones(y.size(1), k.size(2), dtype=torch.bool).tril(diagonal=t - 1)
    return attn.attend(y, k, v, mask, offset=t), k, v


def rank_loss_local_mean(local_sum, local_tokens, total_tokens, world_size):
    """torchtitan#1842: each rank's loss averaged over its own tokens, then DDP averages the gradients."""
    return local_sum / local_tokens


def auroc_ties_as_wins(higher, lower):
    """ledell/cvAUC#6: a tie between a positive's and a negative's score counted as a whole win, not a half."""
    return sum(a >= b for a in higher for b in lower) / (len(higher) * len(lower))


# --- the table -------------------------------------------------------------------------------------


# id -> (check, answer, phrases the message must contain, source)
def rms_norm_authors(x, weight, eps=1e-8):
    """The RMSNorm authors' reference PyTorch code: the root mean square as the 2-norm over sqrt(D), eps added to the
    root, not under it, default 1e-8. Beside the check's rows (root mean squares of 1e-3 and more) an eps of 1e-8
    outside the root is no eps at all, and the check says so: eps is missing from under the root."""
    rms = x.norm(2, dim=-1, keepdim=True) * x.size(-1) ** -0.5
    return weight * (x / (rms + eps))


TUTORIAL_BUGS = {
    "sdpa-tf-additive-mask": (
        "scaled_dot_product_attention",
        sdpa_additive_tf_mask,
        ["mask is inverted"],
        f"{TF_TUTORIAL}, scaled_dot_product_attention: scaled_attention_logits += mask * -1e9, its mask 1 where a key "
        "is padding; ported with this course's mask (True = may attend) the mask is inverted",
    ),
    "mha-persson-sqrt-embed-size": (
        "multi_head_attention",
        MHAScaledByDModel,
        ["not sqrt(d_model)"],
        f"{PERSSON}, SelfAttention.forward: torch.softmax(energy / (self.embed_size ** (1 / 2)), dim=3)",
    ),
    "causal-annotated-leading-axis": (
        "causal_mask",
        causal_with_leading_axis,
        ["(1, 5, 5)", "leading axis"],
        f"{ANNOTATED}, subsequent_mask (section 'Decoder'): attn_shape = (1, size, size)",
    ),
    "padding-annotated-no-heads-axis": (
        "padding_mask",
        padding_without_heads_axis,
        ["(B, 1, S)", "one singleton axis short"],
        f"{ANNOTATED}, class Batch: self.src_mask = (src != pad).unsqueeze(-2); MultiHeadedAttention adds the heads "
        "axis with mask.unsqueeze(1)",
    ),
    "padding-tf-float-inverted": (
        "padding_mask",
        padding_tf_style,
        ["two things differ", "bool tensor", "inverted"],
        f"{TF_TUTORIAL}, create_padding_mask: tf.cast(tf.math.equal(seq, 0), tf.float32)[:, tf.newaxis, tf.newaxis, :]",
    ),
    "target-persson-causal-only-float": (
        "target_mask",
        target_causal_only_float,
        ["two things differ", "bool tensor", "only the causal part"],
        f"{PERSSON}, Transformer.make_trg_mask: torch.tril(torch.ones((trg_len, trg_len))).expand(N, 1, trg_len, "
        "trg_len), float and without the padding",
    ),
    "target-annotated-no-heads-axis": (
        "target_mask",
        target_without_heads_axis,
        ["(B, T, T)", "heads axis is missing"],
        f"{ANNOTATED}, Batch.make_std_mask: (tgt != pad).unsqueeze(-2) & subsequent_mask(tgt.size(-1)), (B, T, T)",
    ),
    "target-tf-maximum": (
        "target_mask",
        target_maximum_of_masks,
        ["that is OR"],
        f"{TF_TUTORIAL}, create_masks: combined_mask = tf.maximum(dec_target_padding_mask, look_ahead_mask), right "
        "for its 1 = blocked masks, OR once ported to True = may attend",
    ),
    "inversion-hf-one-minus": (
        "mask_inversion",
        inversion_one_minus,
        ["dtype"],
        "huggingface/transformers, modeling_utils.py, ModuleUtilsMixin.get_extended_attention_mask: "
        "(1.0 - extended_attention_mask) * torch.finfo(dtype).min",
    ),
    "pe-samlynnevans-column-frequency": (
        "positional_encoding",
        pe_own_frequency_per_column,
        ["every column its own"],
        f"{SAM_LYNN_EVANS}, Embed.py, PositionalEncoder: pos / (10000 ** ((2 * i)/d_model)) with i in "
        "range(0, d_model, 2), and 2 * (i + 1) for the cos column",
    ),
    "embedding-persson-unscaled": (
        "embedding_scale",
        embedding_unscaled,
        ["scaling is missing"],
        f"{PERSSON}, Encoder.forward and Decoder.forward: word_embedding(x) + position_embedding(positions), unscaled",
    ),
    "positions-samlynnevans-scaled-inside": (
        "learned_positions",
        PositionsScalingInside,
        ["don't scale here", "already scaled"],
        f"{SAM_LYNN_EVANS}, Embed.py, PositionalEncoder.forward: x = x * math.sqrt(self.d_model) before adding pe",
    ),
    "ln-annotated-a2-b2": (
        "layer_norm",
        LayerNormA2B2,
        ["`a_2` and `b_2`", "`weight`", "`bias`"],
        f"{ANNOTATED}, class LayerNorm (section 'Encoder and Decoder Stacks'): self.a_2, self.b_2, eps=1e-6",
    ),
    "ln-samlynnevans-alpha": (
        "layer_norm",
        LayerNormAlphaBias,
        ["`alpha` and `bias`"],
        f"{SAM_LYNN_EVANS}, Sublayers.py, class Norm: self.alpha, self.bias, eps = 1e-6",
    ),
    "ln-annotated-formula-and-eps": (
        "layer_norm",
        AnnotatedLayerNormRenamed,
        ["two things differ", "biased variance and put eps inside", "default eps is 1e-06"],
        f"{ANNOTATED}, class LayerNorm: x.std(-1) (unbiased), (std + self.eps), eps=1e-6 (issue 18's first case)",
    ),
    "rms-authors-eps-outside": (
        "rms_norm",
        rms_norm_authors,
        # Both of its departures. (Its eps 1e-8 outside the root is invisible by default; "eps is missing" was named
        # from that input alone, but with eps=1e-2 passed in the answer is not eps-less: issue 29.)
        ["eps belongs INSIDE the square root", "your default eps is 1e-08"],
        "bzhangGo/rmsnorm (Zhang & Sennrich's code), rmsnorm_torch.py, RMSNorm.forward: x / (rms_x + self.eps), eps=1e-8",
    ),
    "ffn-nanogpt-gelu": (
        "feed_forward",
        FeedForwardGELU,
        ["GELU"],
        "karpathy/nanoGPT, model.py, class MLP: c_fc, nn.GELU(), c_proj (GPT-2's feed-forward)",
    ),
    "enc-bentrevett-one-layer-norm": (
        "encoder_layer",
        EncoderLayerOneNorm,
        ["same LayerNorm is used twice"],
        f"{BENTREVETT}, class EncoderLayer: one self.layer_norm after the self-attention and after the feed-forward",
    ),
    "enc-annotated-pre-norm": (
        "encoder_layer",
        AnnotatedEncoderLayer,
        ["two things differ", "that is pre-norm", "is not nn.LayerNorm's function"],
        f"{ANNOTATED}, SublayerConnection.forward: x + self.dropout(sublayer(self.norm(x))) with its LayerNorm "
        "(issue 18's second case)",
    ),
    "enc-annotated-attention-dropout-default": (
        "encoder_layer",
        EncoderLayerAttentionDropoutDefault,
        ["`self_attn.dropout` with p=0.1", "not passed on"],
        f"{ANNOTATED}, make_model: attn = MultiHeadedAttention(h, d_model), its dropout left at the default 0.1",
    ),
    "dec-annotated-pre-norm": (
        "decoder_layer",
        AnnotatedDecoderLayer,
        ["two things differ", "that is pre-norm", "is not nn.LayerNorm's function"],
        f"{ANNOTATED}, DecoderLayer with SublayerConnection (pre-norm) and its LayerNorm",
    ),
    "leak-annotated-mask-picture": (
        "sees_future",
        sees_future_from_attention_weights,
        ["not its mask"],
        f"{ANNOTATED}, section 'Decoder': example_mask() draws subsequent_mask(20) as the proof that no position "
        "attends to a later one; ported to the leak test, it checks the attention weights, not the layer's output",
    ),
    "loop-annotated-one-short": (
        "greedy_loop",
        greedy_loop_annotated_style,
        ["off by one", "one step short"],
        f"{ANNOTATED}, greedy_decode (section 'Greedy Decoding'): for i in range(max_len - 1), one token short of "
        "max_len new tokens",
    ),
    "batch-torchtext-empty-batch": (
        "batch_by_tokens",
        batch_torchtext_style,
        ["empty batch"],
        "pytorch/text (torchtext <= 0.8, legacy), torchtext/data/iterator.py, batch(): yields minibatch[:-1] when the "
        "budget is exceeded, an empty list when one example alone exceeds it; the Annotated Transformer (2018) "
        "batches through it with its batch_size_fn",
    ),
    "noam-jadore-step-plus-one": (
        "noam_rate",
        noam_step_plus_one,
        ["off by one", "NEXT step"],
        f"{JADORE}, train.py (early version, commit 01371c44), update_learning_rate: n_steps += 1 before the rate",
    ),
    "ls-annotated-kl-summed": (
        "label_smoothing_loss",
        label_smoothing_kl_summed,
        ["two things differ", "KL divergence", "sum over positions"],
        f"{ANNOTATED}, class LabelSmoothing: nn.KLDivLoss(reduction='sum') (section 'Regularization')",
    ),
    "ls-jadore-v-minus-1-summed": (
        "label_smoothing_loss",
        label_smoothing_v_minus_1_summed,
        ["two things differ", "ε/(V - 1)", "sum over positions"],
        f"{JADORE}, train.py, cal_loss: eps / (n_class - 1), loss.masked_select(non_pad_mask).sum()",
    ),
    "train-step-pre-1-1-scheduler-order": (
        "train_step",
        train_step_scheduler_first,
        ["scheduler.step() ran before optimizer.step()"],
        "PyTorch documentation, torch.optim, 'How to adjust learning rate': before PyTorch 1.1.0 the scheduler was "
        "expected to be called before the optimizer's update, as tutorials of that time do",
    ),
    "greedy-annotated-no-eos": (
        "greedy_decode",
        greedy_annotated_style,
        ["two things differ", "goes on after its <eos>", "off by one"],
        f"{ANNOTATED}, greedy_decode (section 'Greedy Decoding'): for i in range(max_len - 1), no stop at </s>",
    ),
    "beam-brownlee-multiplied": (
        "beam_step",
        beam_step_multiplied,
        ["log-probabilities add"],
        "Jason Brownlee, 'How to Implement a Beam Search Decoder for Natural Language Processing' "
        "(machinelearningmastery.com), first version: candidate = [seq + [j], score * -log(row[j])]",
    ),
    "precision-d2l-negative-total": (
        "modified_precision",
        precision_unclamped_total,
        ["never negative"],
        f"{D2L}: total len_pred - n + 1, safe there only because its loop stops at n = min(k, len_pred)",
    ),
    "bp-d2l-empty-hypothesis": (
        "brevity_penalty",
        brevity_penalty_d2l,
        ["ZeroDivisionError", "hyp_len = 0"],
        f"{D2L}: score = math.exp(min(0, 1 - len_label / len_pred))",
    ),
    "vocab-bentrevett-lowercased": (
        "build_vocab",
        vocab_lowercased,
        ["lowercased"],
        f"{BENTREVETT}: Field(tokenize = ..., lower = True, ...) for both languages",
    ),
    "append-kv-hf-gpt2-last-axis": (
        "append_kv",
        append_kv_on_last_axis,
        ["joined along dim 3"],
        "huggingface/transformers, modeling_gpt2.py (v2 to v4), Attention.forward: key = torch.cat((past_key, key), "
        "dim=-1) on keys split transposed, split_heads(key, k=True)",
    ),
    "reorder-kv-hf-not-reordered": (
        "reorder_kv",
        reorder_kv_skipped,
        ["not reordered"],
        "huggingface/transformers issue #46612, 'Beam search cache reorder silently skipped for Mamba, XLNet, RWKV, "
        "and Reformer models (wrong generation output)'",
    ),
    "cached-step-mlx-gpt2-positions-from-zero": (
        "cached_self_attention",
        cached_step_positions_from_zero,
        ["placed at position 0"],
        "ml-explore/mlx-lm pull request #93, 'Fix GPT2 Incremental Generation by Correctly Applying Position "
        "Embeddings and Offsets': the cached GPT-2 'always starts position embeddings at zero for new tokens' "
        "(learned positions there; ported here to rotated queries and keys)",
    ),
    "cached-step-fla-rope-offset-one-ahead": (
        "cached_self_attention",
        cached_step_count_one_ahead,
        ["off by one", "t + 1"],
        "fla-org/flash-linear-attention issue #766, 'Cache seen-token count is committed too early during decode, "
        "shifting upper-layer RoPE offsets': upper layers read past_len + 1",
    ),
    "auroc-cvauc-ties-as-wins": (
        "auroc",
        auroc_ties_as_wins,
        ["a tie counts as a whole win"],
        "ledell/cvAUC issue #6, 'ci.cvAUC needs 0.5 for ties': its confidence-interval code counts a negative whose "
        "score ties a positive's as a whole (w1 * 1) where ROCR's AUC counts it a half",
    ),
    "rank-loss-torchtitan-local-mean": (
        "rank_loss",
        rank_loss_local_mean,
        ["averages over its own tokens"],
        "pytorch/torchtitan issue #1842, 'More robust distributed loss': the loss computed per rank, then gradients "
        "averaged, is wrong when ranks hold different numbers of valid tokens (Hugging Face's Trainer added "
        "average_tokens_across_devices for the same bug)",
    ),
}


@pytest.mark.filterwarnings(r"ignore:Detected call of `lr_scheduler\.step\(\)`")  # that tutorial order is the point
@pytest.mark.parametrize("case", TUTORIAL_BUGS)
def test_tutorial_bug_is_named(case):
    name, answer, phrases, source = TUTORIAL_BUGS[case]
    with pytest.raises(ExerciseError) as caught:
        getattr(checks, f"check_{name}")(answer)
    message = str(caught.value)
    assert message.startswith(f"{name}: ")
    assert caught.value.known_bug or "your code raised" in message, message  # recognised, or the learner's own error
    for phrase in phrases:
        assert phrase in message, f"{case} ({source}):\n{message}"


def test_every_check_knows_a_tutorial_bug():
    exported = {name.removeprefix("check_") for name in checks.__all__ if name.startswith("check_")}
    covered = {name for name, *_ in TUTORIAL_BUGS.values()}
    assert exported - covered == set()
    assert len(exported) == 30


def test_every_tutorial_bug_names_its_source():
    for case, (_, answer, _, source) in TUTORIAL_BUGS.items():
        assert answer.__doc__, f"{case}: say in the answer's docstring what the tutorial does"
        assert re.search(r"[\w-]+/[\w.-]+|tutorial|documentation|d2l|Brownlee", source), case


def test_a_tutorial_order_that_is_right_passes(capsys):
    """zero_grad after the step (the Annotated Transformer's run_epoch) is as right as before the backward."""
    checks.check_train_step(train_step_zero_grad_last)
    assert capsys.readouterr().out.startswith("✔ train_step: correct")
