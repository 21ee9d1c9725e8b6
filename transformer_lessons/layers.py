"""The building blocks between attention and the full model.

Embeddings (§3.4), positional encoding (§3.5), layer normalisation (Ba et al.
2016, used in §3.1), the position-wise feed-forward network (§3.3) and the
residual sublayer connection (§3.1, §5.4). Since the paper: RMSNorm (Zhang &
Sennrich 2019, ``ModelConfig.norm="rmsnorm"``) and the SwiGLU feed-forward
(Shazeer 2020, ``ModelConfig.ffn="swiglu"``).
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn


class Embeddings(nn.Module):
    """Token embedding multiplied by √d_model (paper §3.4).

    The scaling brings the embeddings closer to the scale of the positional
    encoding they are added to. The Transformer initialises the ``(V, D)`` table
    Xavier-uniform, with standard deviation √(2 / (V + D)), while the sin/cos
    values have RMS 1/√2, so raw embeddings would be √(V + D) / 2 times smaller:
    a ratio that grows with the vocabulary, about 51x for V = 10,000 and
    D = 512, about 97x for the paper's 37,000 shared tokens. Multiplying by
    √D (22.6 for D = 512) leaves about 2.3x and 4.3x.

    Shape:
        tokens ``(B, L)`` -> ``(B, L, D)``.
    """

    def __init__(self, vocab_size: int, d_model: int):
        super().__init__()
        self.table = nn.Embedding(vocab_size, d_model)
        self.d_model = d_model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.table(tokens) * math.sqrt(self.d_model)  # (B, L) -> (B, L, D)


def sinusoidal_positional_encoding(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The paper's fixed positional encoding (§3.5).

    ``PE[pos, 2i] = sin(pos / base^(2i/d_model))`` and
    ``PE[pos, 2i+1] = cos(pos / base^(2i/d_model))``: even columns hold sines,
    odd columns cosines, and the wavelengths grow geometrically from 2π to just
    under ``base``·2π (the last pair's is 2π·base^((d_model - 2)/d_model)).

    Returns:
        FloatTensor ``(max_len, d_model)``.
    """
    if d_model % 2:
        raise ValueError(f"d_model must be even for sin/cos pairs, got {d_model}")
    position = torch.arange(max_len, dtype=torch.float32)[:, None]  # (L, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)  # (D/2,)
    angle = position / base ** (two_i / d_model)  # (L, 1) / (D/2,) -> (L, D/2)
    pe = torch.empty(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal table to the embeddings, then dropout (§3.5, §5.4).

    Shape:
        ``(B, L, D)`` -> ``(B, L, D)``, with ``L <= max_len``.
    """

    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 512, base: float = 10000.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.max_len = max_len
        # A buffer, not a parameter: it moves with .to(device) but is never trained,
        # and persistent=False keeps it out of checkpoints (it is recomputed).
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model, base), persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """``offset``: index of ``x``'s first position (a cached decoder feeds one position at a time)."""
        length = offset + x.size(1)
        if length > self.max_len:
            raise ValueError(f"sequence of length {length} is longer than the model's max_len={self.max_len}")
        return self.dropout(x + self.pe[offset:length])  # (B, L, D) + (L, D)


class LearnedPositionalEmbedding(nn.Module):
    """A trained vector per position instead of the sinusoid (§3.5 found them about equal).

    Shape:
        ``(B, L, D)`` -> ``(B, L, D)``, with ``L <= max_len``: unlike the
        sinusoid it cannot extrapolate past the longest position it was built for.
    """

    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 512):
        super().__init__()
        self.table = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(dropout)
        self.max_len = max_len

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """``offset``: index of ``x``'s first position (a cached decoder feeds one position at a time)."""
        length = offset + x.size(1)
        if length > self.max_len:
            raise ValueError(f"sequence of length {length} is longer than the model's max_len={self.max_len}")
        positions = torch.arange(offset, length, device=x.device)  # (L,)
        return self.dropout(x + self.table(positions))  # (B, L, D) + (L, D)


class EmbeddingDropout(nn.Module):
    """Dropout on the embeddings alone, for a model whose positions are not added to them (rotary).

    With ``ModelConfig.positional="rotary"`` (RoFormer, Su et al. 2021) positions
    rotate the queries and keys inside self-attention
    (:mod:`transformer_lessons.rotary`); what §5.4 drops out, "the sums of the
    embeddings and the positional encodings", is then the embeddings. It takes an
    ``offset`` like the positional modules and has no length limit.

    Shape:
        ``(B, L, D)`` -> ``(B, L, D)``.
    """

    def __init__(self, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """``offset`` is accepted for the cached decoder's sake and not used: the positions are in the attention."""
        return self.dropout(x)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Layer normalisation written out: ``gain * (x - mean) / sqrt(var + eps) + bias`` over the last axis.

    The *biased* variance (divide by ``D``) and ``eps`` inside the square root,
    as ``nn.LayerNorm`` does. (The Annotated Transformer divides by ``std + eps``
    with the unbiased std: close, but not the same function.) :class:`LayerNorm`
    computes this same function with PyTorch's fused kernel; a test checks the
    two agree, outputs and gradients.

    Shape:
        x ``(..., D)``, weight and bias ``(D,)`` -> ``(..., D)``.
    """
    mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
    var = x.var(dim=-1, keepdim=True, unbiased=False)  # (..., 1)
    return weight * (x - mean) / torch.sqrt(var + eps) + bias


class LayerNorm(nn.Module):
    """Layer normalisation (Ba et al. 2016), equal to ``nn.LayerNorm(d_model)``.

    The formula is :func:`layer_norm`, written out. ``forward`` hands the same
    formula to ``F.layer_norm``: one fused kernel instead of six elementwise
    passes and their backward, which is most of a small model's LayerNorm time
    on a CPU. The two agree to float rounding (``tests/test_layers.py``).

    Shape:
        ``(..., D)`` -> ``(..., D)``.
    """

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))  # gain; names match nn.LayerNorm
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(
            x, self.weight.shape, self.weight, self.bias, self.eps
        )  # = layer_norm(x, weight, bias, eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Root-mean-square normalisation written out: ``gain * x / sqrt(mean(x²) + eps)`` over the last axis.

    Zhang & Sennrich (2019), "Root Mean Square Layer Normalization", Eq. 4: LayerNorm
    without the mean subtraction and without the bias. Only the scale is normalised
    (re-centring, they found, is not what makes LayerNorm work), which saves one
    reduction. ``eps`` inside the square root, as ``torch.nn.RMSNorm``, T5 and LLaMA put it.

    Shape:
        x ``(..., D)``, weight ``(D,)`` -> ``(..., D)``.
    """
    mean_square = x.pow(2).mean(dim=-1, keepdim=True)  # (..., 1)
    return weight * x / torch.sqrt(mean_square + eps)


class RMSNorm(nn.Module):
    """RMSNorm (Zhang & Sennrich 2019): :func:`rms_norm` with a trained gain, no bias.

    A departure from the paper (``ModelConfig.norm="rmsnorm"``; the paper's is
    :class:`LayerNorm`). ``forward`` uses PyTorch's fused ``F.rms_norm``; it equals
    :func:`rms_norm` and ``torch.nn.RMSNorm(d_model, eps)`` (``tests/test_modern_options.py``).

    Shape:
        ``(..., D)`` -> ``(..., D)``.
    """

    def __init__(self, d_model: int, eps: float = 1e-5):  # eps as our LayerNorm's; Zhang & Sennrich's code uses 1e-8
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))  # gain g; the name matches nn.RMSNorm
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)  # = rms_norm(x, weight, eps)


#: The normalisations a model may use (``ModelConfig.norm``); the first is the paper's.
NORMS = {"layernorm": LayerNorm, "rmsnorm": RMSNorm}


def make_norm(kind: str, d_model: int) -> nn.Module:
    """A :class:`LayerNorm` (``"layernorm"``, the paper's) or an :class:`RMSNorm` (``"rmsnorm"``) of width ``d_model``."""
    if kind not in NORMS:
        raise ValueError(f"norm must be one of {', '.join(map(repr, NORMS))}, got {kind!r}")
    return NORMS[kind](d_model)


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to every position alike (§3.3, Eq. 2).

    Shape:
        ``(B, L, D)`` -> ``(B, L, D)`` through ``(B, L, d_ff)``.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)  # on the hidden activations: not in the paper, tensor2tensor's relu_dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.w_1(x))  # (B, L, D) -> (B, L, d_ff)
        return self.w_2(self.dropout(hidden))  # (B, L, d_ff) -> (B, L, D)


def swiglu_hidden_width(d_ff: int) -> int:
    """The SwiGLU hidden width with the parameters of a ReLU network of inner width ``d_ff``: ``round(2 d_ff / 3)``.

    Three ``(D, h)`` matrices instead of two ``(D, d_ff)``: ``3 h = 2 d_ff``
    (Shazeer 2020, §2: the GLU variants reduce the hidden units by a factor of 2/3,
    T5's 3072 to 2048). Rounded to the nearest whole number (2048 -> 1365); LLaMA
    rounds up to a multiple of 256 instead, which we do not. The counts then differ
    by the ReLU network's biases and the rounding: 0.15% at the base model's sizes.
    """
    return max(1, round(2 * d_ff / 3))


class SwiGLUFeedForward(nn.Module):
    """FFN_SwiGLU(x) = (SiLU(x W1) ⊙ x W3) W2 (Shazeer 2020, "GLU Variants Improve Transformer", Eq. 6).

    A departure from the paper's ReLU network (``ModelConfig.ffn="swiglu"``): a
    gated linear unit (Dauphin et al. 2017) whose gate is ``SiLU(z) = z·σ(z)``
    (Swish with β = 1). The hidden width is :func:`swiglu_hidden_width` of
    ``d_ff``, so that the three matrices hold about the parameters of the ReLU
    network's two. No biases, as in Shazeer's experiments (and T5, LLaMA).

    Shape:
        ``(B, L, D)`` -> ``(B, L, D)`` through ``(B, L, h)``, ``h = round(2 d_ff / 3)``.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1):
        super().__init__()
        hidden = swiglu_hidden_width(d_ff)
        self.w_1 = nn.Linear(d_model, hidden, bias=False)  # W: through SiLU, the gate
        self.w_3 = nn.Linear(d_model, hidden, bias=False)  # V: the linear unit it gates
        self.w_2 = nn.Linear(hidden, d_model, bias=False)  # W2: back to d_model
        self.dropout = nn.Dropout(dropout)  # on the hidden activations, as PositionwiseFeedForward's

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = F.silu(self.w_1(x)) * self.w_3(x)  # (B, L, D) -> (B, L, h)
        return self.w_2(self.dropout(hidden))  # (B, L, h) -> (B, L, D)


#: The feed-forward networks a model may use (``ModelConfig.ffn``); the first is the paper's.
FEED_FORWARDS = {"relu": PositionwiseFeedForward, "swiglu": SwiGLUFeedForward}


def make_feed_forward(kind: str, d_model: int, d_ff: int, dropout: float = 0.1) -> nn.Module:
    """The paper's ReLU :class:`PositionwiseFeedForward` (``"relu"``) or a :class:`SwiGLUFeedForward` (``"swiglu"``)."""
    if kind not in FEED_FORWARDS:
        raise ValueError(f"ffn must be one of {', '.join(map(repr, FEED_FORWARDS))}, got {kind!r}")
    return FEED_FORWARDS[kind](d_model, d_ff, dropout)


class SublayerConnection(nn.Module):
    """Residual connection around a sublayer, with its LayerNorm and dropout.

    Post-norm (the paper, §3.1 and §5.4): ``LayerNorm(x + Dropout(sublayer(x)))``.
    Pre-norm (``norm_first=True``; tensor2tensor's later presets and GPT-2 use it,
    Xiong et al. 2020 analyse it): ``x + Dropout(sublayer(LayerNorm(x)))``, which
    is more stable early in training and can train without warm-up, but needs a
    final LayerNorm after the stack (the Encoder and Decoder add it). ``norm="rmsnorm"`` puts an
    :class:`RMSNorm` where the LayerNorm is, in either order.

    Shape:
        ``(B, L, D)`` -> ``(B, L, D)``.
    """

    def __init__(self, d_model: int, dropout: float = 0.1, norm_first: bool = False, norm: str = "layernorm"):
        super().__init__()
        self.norm = make_norm(norm, d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))
