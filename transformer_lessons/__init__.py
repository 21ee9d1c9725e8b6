"""transformer_lessons: the reference Transformer that the course notebooks build.

One module per concept (see the README's map). Importing the package is cheap:
no plotting library, spaCy or network work happens here; `viz`, `data` and
friends are imported by name when a notebook needs them.
"""

from transformer_lessons.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_lessons.console import printable_streams
from transformer_lessons.config import PRESETS, ModelConfig, compute_mode
from transformer_lessons.exercises import hint
from transformer_lessons.learner_progress import progress
from transformer_lessons.masks import causal_mask, padding_mask, target_mask
from transformer_lessons.model import Transformer, make_model

__version__ = "0.1.0"

printable_streams()  # a Latin-1 or cp1252 console prints "?" for ✔ instead of failing (console.py)

__all__ = [
    "MultiHeadAttention",
    "ModelConfig",
    "PRESETS",
    "Transformer",
    "causal_mask",
    "compute_mode",
    "hint",
    "make_model",
    "padding_mask",
    "progress",
    "scaled_dot_product_attention",
    "target_mask",
]
