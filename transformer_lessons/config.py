"""Model presets and the one knob that decides how much compute a lesson spends.

Paper: Vaswani et al. (2017), "Attention Is All You Need", Table 3 (base model).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from typing import Literal

#: Environment variable read by :func:`compute_mode`.
MODE_ENV = "TRANSFORMER_LESSONS_MODE"


@dataclass(frozen=True)
class ModelConfig:
    """Every size and option of a :class:`~transformer_lessons.model.Transformer`.

    Defaults are the paper's base model (Table 3); departures from the paper are
    named options that default to the paper's choice.
    """

    n_layers: int = 6  # N: identical layers in the encoder and in the decoder
    d_model: int = 512  # width of every residual stream; embeddings use it too
    n_heads: int = 8  # h: heads share d_model, so d_head = d_model / n_heads
    d_ff: int = 2048  # inner width of the position-wise feed-forward network
    # P_drop. Paper §5.4: on sublayer outputs and on embeddings+positions. Departures, both from tensor2tensor:
    # also on the attention weights (attention_dropout) and on the feed-forward's hidden activations (relu_dropout).
    dropout: float = 0.1
    max_len: int = 512  # rows of the positional table: the longest sequence the model accepts
    pe_base: float = 10000.0  # paper: 10000 in sin(pos / base^(2i/d_model)); some tutorials print 1000
    positional: Literal["sinusoidal", "learned"] = "sinusoidal"  # paper §3.5 tried both, kept sinusoidal
    norm_first: bool = False  # paper: post-LN, LayerNorm(x + Sublayer(x)); True is pre-LN
    tie_embeddings: bool = False  # paper §3.4 shares target embedding and output projection

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)

    def replace(self, **changes) -> "ModelConfig":
        return replace(self, **changes)


PRESETS: dict[str, ModelConfig] = {
    # Small enough to train on a laptop CPU in about a minute (the copy task).
    "tiny": ModelConfig(n_layers=2, d_model=32, n_heads=4, d_ff=64, dropout=0.0, max_len=64),
    # The paper's base model, 65M parameters with a 37k shared vocabulary.
    "base": ModelConfig(),
}


def compute_mode(mode: str | None = None) -> Literal["quick", "full"]:
    """The one knob that decides how much compute a notebook spends.

    ``quick`` is small enough for a 2-core CPU (tests, laptops, CI); ``full`` is
    what the lesson would do on a GPU. The choice, in order: the ``mode``
    argument; the environment variable ``TRANSFORMER_LESSONS_MODE``; ``full`` if
    a CUDA GPU is visible, else ``quick``.
    """
    mode = mode or os.environ.get(MODE_ENV, "").strip().lower() or None
    if mode is None:
        import torch

        mode = "full" if torch.cuda.is_available() else "quick"
    if mode not in ("quick", "full"):
        raise ValueError(f"compute mode must be 'quick' or 'full', got {mode!r} (set {MODE_ENV}=quick or full)")
    return mode  # type: ignore[return-value]
