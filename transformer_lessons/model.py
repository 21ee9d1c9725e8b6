"""Encoder, decoder and the full encoder–decoder Transformer.

Paper: §3.1 (encoder and decoder stacks), Figure 1, §3.4 (embeddings and
softmax), §5.4 (dropout). Defaults are the base model of Table 3.
"""

from __future__ import annotations

import torch
from torch import nn

from transformer_lessons.attention import MultiHeadAttention
from transformer_lessons.config import ModelConfig
from transformer_lessons.kv_cache import KVCache, step_mask
from transformer_lessons.layers import (
    EmbeddingDropout,
    Embeddings,
    LearnedPositionalEmbedding,
    PositionalEncoding,
    SublayerConnection,
    make_feed_forward,
    make_norm,
)


class EncoderLayer(nn.Module):
    """Self-attention, then feed-forward, each inside a residual sublayer (§3.1).

    Shape:
        x ``(B, S, D)``, src_mask broadcastable to ``(B, 1, S, S)`` -> ``(B, S, D)``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        norm: str = "layernorm",
        ffn: str = "relu",
        n_kv_heads: int | None = None,
        rotary_base: float | None = None,
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout, n_kv_heads, rotary_base)
        self.feed_forward = make_feed_forward(ffn, d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList(SublayerConnection(d_model, dropout, norm_first, norm) for _ in range(2))

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, src_mask))
        return self.sublayers[1](x, self.feed_forward)


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the encoder's output, feed-forward (§3.1).

    Queries of the cross-attention come from the decoder; keys and values from
    the encoder's output ("memory").

    Shape:
        x ``(B, T, D)``, memory ``(B, S, D)``, src_mask broadcastable to
        ``(B, 1, T, S)``, tgt_mask broadcastable to ``(B, 1, T, T)`` -> ``(B, T, D)``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        norm: str = "layernorm",
        ffn: str = "relu",
        n_kv_heads: int | None = None,
        rotary_base: float | None = None,
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout, n_kv_heads, rotary_base)
        # Shared K/V heads here too (Shazeer 2019); never rotated: target queries and source keys count different sentences.
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout, n_kv_heads)
        self.feed_forward = make_feed_forward(ffn, d_model, d_ff, dropout)
        self.sublayers = nn.ModuleList(SublayerConnection(d_model, dropout, norm_first, norm) for _ in range(3))

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask))
        x = self.sublayers[1](x, lambda y: self.cross_attn(y, memory, memory, src_mask))
        return self.sublayers[2](x, self.feed_forward)

    def step(self, x: torch.Tensor, src_mask: torch.Tensor | None, cache: KVCache, layer: int) -> torch.Tensor:
        """:meth:`forward` for the new positions only, with the earlier ones' keys and values from ``cache``.

        Shape:
            x ``(B, T, D)`` (the new positions, usually ``T = 1``), src_mask
            broadcastable to ``(B, 1, T, S)`` -> ``(B, T, D)``.
        """
        t, T = cache.self_k[layer].size(2), x.size(1)  # this layer's cached positions (earlier layers already appended)

        def self_attention(y: torch.Tensor) -> torch.Tensor:
            # Keys (and, in attend, queries) at their absolute positions t .. t + T - 1: rotary rotates them there.
            k, v = cache.append(layer, *self.self_attn.project_kv(y, y, offset=t))  # (B, Hkv, t + T, Dh) each
            return self.self_attn.attend(y, k, v, step_mask(T, t, y.device), offset=t)  # (B, T, D)

        x = self.sublayers[0](x, self_attention)
        x = self.sublayers[1](
            x, lambda y: self.cross_attn.attend(y, cache.cross_k[layer], cache.cross_v[layer], src_mask)
        )
        return self.sublayers[2](x, self.feed_forward)


class Encoder(nn.Module):
    """A stack of ``n_layers`` encoder layers.

    With pre-norm layers the stack ends with a LayerNorm (each layer's output is
    an un-normalised residual stream); the paper's post-norm needs none.
    ``norm`` (``"layernorm"`` or ``"rmsnorm"``) picks every normalisation of the stack.
    """

    def __init__(
        self,
        n_layers: int,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        norm: str = "layernorm",
        ffn: str = "relu",
        n_kv_heads: int | None = None,
        rotary_base: float | None = None,
    ):
        super().__init__()
        options = (norm_first, norm, ffn, n_kv_heads, rotary_base)
        self.layers = nn.ModuleList(EncoderLayer(d_model, n_heads, d_ff, dropout, *options) for _ in range(n_layers))
        self.norm = make_norm(norm, d_model) if norm_first else nn.Identity()

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, src_mask)  # (B, S, D)
        return self.norm(x)


class Decoder(nn.Module):
    """A stack of ``n_layers`` decoder layers (final LayerNorm, or RMSNorm, only with pre-norm)."""

    def __init__(
        self,
        n_layers: int,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        norm: str = "layernorm",
        ffn: str = "relu",
        n_kv_heads: int | None = None,
        rotary_base: float | None = None,
    ):
        super().__init__()
        options = (norm_first, norm, ffn, n_kv_heads, rotary_base)
        self.layers = nn.ModuleList(DecoderLayer(d_model, n_heads, d_ff, dropout, *options) for _ in range(n_layers))
        self.norm = make_norm(norm, d_model) if norm_first else nn.Identity()

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)  # (B, T, D)
        return self.norm(x)

    def step(self, x: torch.Tensor, src_mask: torch.Tensor | None, cache: KVCache) -> torch.Tensor:
        """:meth:`forward` for new positions ``x (B, T, D)`` after the ones in ``cache`` -> ``(B, T, D)``."""
        for i, layer in enumerate(self.layers):
            x = layer.step(x, src_mask, cache, i)  # (B, T, D)
        return self.norm(x)


class Transformer(nn.Module):
    """The encoder–decoder Transformer of Figure 1.

    Args:
        config: sizes and options (see :class:`~transformer_lessons.config.ModelConfig`).
        src_vocab_size: number of source token ids.
        tgt_vocab_size: number of target token ids (``V``).

    Shape:
        src ``(B, S)``, tgt ``(B, T)`` (the decoder input, starting with ``<bos>``),
        src_mask broadcastable to ``(B, 1, 1, S)``, tgt_mask to ``(B, 1, T, T)``;
        output logits ``(B, T, V)`` (pre-softmax).
    """

    def __init__(self, config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__()
        c = config
        self.config = config
        self.src_vocab_size = src_vocab_size
        self.tgt_vocab_size = tgt_vocab_size
        self.src_embed = Embeddings(src_vocab_size, c.d_model)
        self.tgt_embed = Embeddings(tgt_vocab_size, c.d_model)
        if c.positional == "sinusoidal":
            self.src_pos = PositionalEncoding(c.d_model, c.dropout, c.max_len, c.pe_base)
            self.tgt_pos = PositionalEncoding(c.d_model, c.dropout, c.max_len, c.pe_base)
        elif c.positional == "learned":
            self.src_pos = LearnedPositionalEmbedding(c.d_model, c.dropout, c.max_len)
            self.tgt_pos = LearnedPositionalEmbedding(c.d_model, c.dropout, c.max_len)
        elif c.positional == "rotary":  # RoFormer: nothing added, self-attention rotates its queries and keys
            self.src_pos, self.tgt_pos = EmbeddingDropout(c.dropout), EmbeddingDropout(c.dropout)
        else:
            raise ValueError(f"positional must be 'sinusoidal', 'learned' or 'rotary', got {c.positional!r}")
        rotary_base = c.pe_base if c.positional == "rotary" else None  # RoFormer's 10000 is the sinusoid's base
        options = (c.dropout, c.norm_first, c.norm, c.ffn, c.n_kv_heads, rotary_base)
        self.encoder = Encoder(c.n_layers, c.d_model, c.n_heads, c.d_ff, *options)
        self.decoder = Decoder(c.n_layers, c.d_model, c.n_heads, c.d_ff, *options)
        self.generator = nn.Linear(c.d_model, tgt_vocab_size)  # pre-softmax projection to the vocabulary
        self._init_weights()
        if c.tie_embeddings:
            self.generator.weight = self.tgt_embed.table.weight  # §3.4: one matrix for both

    def _init_weights(self) -> None:
        # Xavier/Glorot uniform on every matrix, as the Annotated Transformer does; biases and
        # LayerNorm gains keep their defaults. The authors' tensor2tensor differs for the
        # embeddings: it draws the shared embedding/softmax matrix from N(0, 1/d_model), and
        # the √d_model of §3.4 then gives every input entry variance 1 (notebook 04, section 1).
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Source ids ``(B, S)`` -> memory ``(B, S, D)``."""
        return self.encoder(self.src_pos(self.src_embed(src)), src_mask)

    def decode(
        self,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None,
        tgt: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Memory ``(B, S, D)`` and target ids ``(B, T)`` -> logits ``(B, T, V)``."""
        hidden = self.decoder(self.tgt_pos(self.tgt_embed(tgt)), memory, src_mask, tgt_mask)  # (B, T, D)
        return self.generator(hidden)  # (B, T, D) -> (B, T, V)

    def init_cache(self, memory: torch.Tensor) -> KVCache:
        """An empty :class:`~transformer_lessons.kv_cache.KVCache` for ``memory (B, S, D)``, its cross-attention keys and values computed once.

        Shape:
            self-attention entries ``(B, Hkv, 0, Dh)``, cross-attention ``(B, Hkv, S, Dh)``, per layer:
            only the ``n_kv_heads`` shared heads (``Hkv = H`` in the paper).
        """
        layers = self.decoder.layers
        cross = [layer.cross_attn.project_kv(memory, memory) for layer in layers]  # per layer (B, Hkv, S, Dh) x 2
        B, Hkv, _, Dh = cross[0][0].shape
        empty = [memory.new_zeros(B, Hkv, 0, Dh) for _ in range(2 * len(layers))]  # (B, Hkv, 0, Dh)
        return KVCache(empty[: len(layers)], empty[len(layers) :], [k for k, _ in cross], [v for _, v in cross])

    def decode_step(self, cache: KVCache, src_mask: torch.Tensor | None, tokens: torch.Tensor) -> torch.Tensor:
        """Logits for the token after ``tokens``, reusing (and extending) ``cache``; use in eval mode.

        Equal, up to float rounding, to ``decode(memory, src_mask, prefix,
        causal_mask(t + T))[:, -1]`` where ``prefix`` is every token fed so far
        (see :mod:`transformer_lessons.kv_cache`). The new positions get the
        positional encoding of their index ``t, …, t + T - 1``, not ``0`` (with
        rotary positions: their queries and keys are rotated to those indices).

        Shape:
            tokens ``(B, T)``, the positions after the ``t`` in ``cache`` (usually
            ``T = 1``: the last token chosen), src_mask ``(B, 1, 1, S)`` or ``None``
            -> logits ``(B, V)`` of the last position.
        """
        x = self.tgt_pos(self.tgt_embed(tokens), offset=cache.length)  # (B, T, D) at positions t .. t + T - 1
        hidden = self.decoder.step(x, src_mask, cache)  # (B, T, D)
        return self.generator(hidden[:, -1])  # (B, D) -> (B, V)

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)

    # --- reading attention out, for plots and widgets ---------------------------

    def set_record_attention(self, record: bool | None) -> None:
        """Record attention weights always (``True``), never (``False``), or in eval mode only (``None``, the default)."""
        for module in self.modules():
            if isinstance(module, MultiHeadAttention):
                module.record_weights = record

    def attention_weights(self) -> dict[str, list[torch.Tensor]]:
        """The weights of the last forward pass, by kind and layer.

        Returns:
            ``{"encoder": [...], "decoder_self": [...], "cross": [...]}``, one
            tensor per layer: encoder ``(B, H, S, S)``, decoder self-attention
            ``(B, H, T, T)``, cross-attention ``(B, H, T, S)``.

        Raises:
            RuntimeError: if no weights were recorded (call ``model.eval()``
                before the forward pass, or ``set_record_attention(True)``).
        """
        weights = {
            "encoder": [layer.self_attn.attn_weights for layer in self.encoder.layers],
            "decoder_self": [layer.self_attn.attn_weights for layer in self.decoder.layers],
            "cross": [layer.cross_attn.attn_weights for layer in self.decoder.layers],
        }
        if any(w is None for ws in weights.values() for w in ws):
            raise RuntimeError(
                "no attention weights recorded: run the forward pass in eval mode (model.eval()) "
                "or call model.set_record_attention(True) first"
            )
        return weights

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def make_model(
    src_vocab_size: int,
    tgt_vocab_size: int,
    n_layers: int = 6,
    d_model: int = 512,
    d_ff: int = 2048,
    n_heads: int = 8,
    dropout: float = 0.1,
    max_len: int = 512,
    pe_base: float = 10000.0,
    positional: str = "sinusoidal",
    norm_first: bool = False,
    tie_embeddings: bool = True,
    norm: str = "layernorm",
    ffn: str = "relu",
    n_kv_heads: int | None = None,
) -> Transformer:
    """Build a Transformer with the paper's base hyper-parameters by default (Table 3).

    Every argument is a field of :class:`~transformer_lessons.config.ModelConfig`;
    to build from a preset use ``Transformer(PRESETS["tiny"], src_vocab_size, tgt_vocab_size)``.
    Weights are Xavier-uniform initialised.
    """
    config = ModelConfig(
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        d_ff=d_ff,
        dropout=dropout,
        max_len=max_len,
        pe_base=pe_base,
        positional=positional,  # type: ignore[arg-type]
        norm_first=norm_first,
        tie_embeddings=tie_embeddings,
        norm=norm,  # type: ignore[arg-type]
        ffn=ffn,  # type: ignore[arg-type]
        n_kv_heads=n_kv_heads,
    )
    return Transformer(config, src_vocab_size, tgt_vocab_size)
