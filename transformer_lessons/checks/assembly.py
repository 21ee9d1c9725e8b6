"""Check for the full model's forward pass, assembled from its two halves (paper §3, Figure 1).

``Transformer.encode`` runs the source embeddings, positions and the encoder stack;
``Transformer.decode`` runs the target embeddings, positions, the decoder stack and
the generator (the final Linear of §3.4), so it returns logits. The exercise wires
the two; the reference is the model's own ``forward``. The bug simulations call the
same two methods with the wrong inputs or masks.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from transformer_lessons.checks.common import (
    Bug,
    call_answer,
    diagnose,
    exercise,
    expect_tensor,
    expect_unchanged,
    known_bug,
    shape_of,
)
from transformer_lessons.masks import padding_mask, target_mask
from transformer_lessons.model import Transformer, make_model

_PAD = 0
_VOCAB = 11  # source and target share it, so the "wrong input" bugs can run
_D_MODEL = 16  # not _VOCAB: hidden states (B, T, D) and logits (B, T, V) have different shapes

_WIRING = (
    "the encoder turns the source into the memory (B, S, D); the decoder reads tgt_in against it and gives "
    "the logits (B, T, V)[[: memory = model.encode(src, src_mask) -> (B, S, D); "
    "model.decode(memory, src_mask, tgt_in, tgt_mask) -> logits (B, T, V)]]"
)
_HIDDEN = (
    "your output has shape (B, T, d_model): those are the decoder's hidden states. The model's decode already "
    "ends with the generator, the Linear layer that scores every target token (§3.4): return what decode "
    "returns, (B, T, V)[[: return model.decode(memory, src_mask, tgt_in, tgt_mask)]]"
)
_SOFTMAX = (
    "return the logits, not probabilities: model.decode already gives the pre-softmax scores (B, T, V), and "
    "cross-entropy applies the (log-)softmax itself; a softmax before it squashes the loss and its gradients"
)


def _case(B: int, S: int, T: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """src (B, S) and tgt_in (B, T), with padding in some rows, and their masks."""
    src = torch.randint(1, _VOCAB, (B, S), generator=generator)  # (B, S), ids 1.. (0 is <pad>)
    tgt_in = torch.randint(1, _VOCAB, (B, T), generator=generator)  # (B, T)
    src[1, S - 2 :] = _PAD  # padding the encoder must not attend to
    src[2, S - 3 :] = _PAD
    tgt_in[2, T - 2 :] = _PAD
    return src, tgt_in, padding_mask(src, _PAD), target_mask(tgt_in, _PAD)


def _assembly_bugs(model: Transformer, src, tgt_in, src_mask, tgt_mask) -> list[Bug]:
    """The common wiring mistakes: each hint, and what that wiring returns."""
    memory = model.encode(src, src_mask)  # (B, S, D)

    def wired(enc_in=src, enc_mask=src_mask, cross_mask=src_mask, dec_in=tgt_in, self_mask=tgt_mask):
        return lambda: model.decode(model.encode(enc_in, enc_mask), cross_mask, dec_in, self_mask)

    return [
        (
            "the cross-attention got tgt_mask: decode's second argument is the mask over the SOURCE keys the decoder "
            "reads, src_mask (B, 1, 1, S)[[: model.decode(memory, src_mask, tgt_in, tgt_mask)]]",
            wired(cross_mask=tgt_mask),
        ),
        (
            "src_mask and tgt_mask are swapped in decode: the source's mask comes before the target"
            "[[: model.decode(memory, src_mask, tgt_in, tgt_mask)]]",
            wired(cross_mask=tgt_mask, self_mask=src_mask),
        ),
        (
            "src_mask is missing in decode (None): the cross-attention then reads the source's padding"
            "[[: model.decode(memory, src_mask, tgt_in, tgt_mask)]]",
            wired(cross_mask=None),
        ),
        (
            "src_mask is missing in encode (None): the encoder then attends to the source's padding"
            "[[: model.encode(src, src_mask)]]",
            wired(enc_mask=None),
        ),
        (
            "src_mask is missing in both encode and decode (None): pass it to both, the encoder's self-attention and "
            "the decoder's cross-attention read the same source",
            wired(enc_mask=None, cross_mask=None),
        ),
        ("the encoder's mask is src_mask, not tgt_mask[[: model.encode(src, src_mask)]]", wired(enc_mask=tgt_mask)),
        (
            "tgt_mask is missing in decode (None): without the causal mask every position sees the target's future"
            "[[: model.decode(memory, src_mask, tgt_in, tgt_mask)]]",
            wired(self_mask=None),
        ),
        (
            "the encoder reads the SOURCE, not the target[[: memory = model.encode(src, src_mask), not model.encode(tgt_in, ...)]]",
            wired(enc_in=tgt_in),
        ),
        (
            "the encoder reads the SOURCE, with its mask, not the target"
            "[[: memory = model.encode(src, src_mask), not model.encode(tgt_in, ...)]]",
            wired(enc_in=tgt_in, enc_mask=tgt_mask),
        ),
        (
            "the decoder reads the TARGET (shifted right), not the source"
            "[[: model.decode(memory, src_mask, tgt_in, tgt_mask), not src]]",
            wired(dec_in=src),
        ),
        ("src and tgt_in are swapped: the encoder reads src, the decoder tgt_in", wired(enc_in=tgt_in, dec_in=src)),
        (_SOFTMAX, lambda: model.decode(memory, src_mask, tgt_in, tgt_mask).softmax(dim=-1)),
        (_SOFTMAX, lambda: F.log_softmax(model.decode(memory, src_mask, tgt_in, tgt_mask), dim=-1)),
    ]


@exercise(
    "transformer_forward",
    "encode the source with model.encode, then decode tgt_in against that memory with model.decode",
)
def check_transformer_forward(fn: Callable[..., torch.Tensor]) -> str:
    """Check the full model's forward pass, assembled from ``model.encode`` and ``model.decode`` (Figure 1).

    Expected signature: ``fn(model, src, tgt_in, src_mask, tgt_mask) -> logits (B, T, V)``:
    ``memory = model.encode(src, src_mask)``, then
    ``model.decode(memory, src_mask, tgt_in, tgt_mask)``, which ends with the generator
    and returns pre-softmax logits: the same as ``model(src, tgt_in, src_mask, tgt_mask)``.

    Shape:
        src ``(B, S)``, tgt_in ``(B, T)``, src_mask ``(B, 1, 1, S)``, tgt_mask
        ``(B, 1, T, T)`` -> logits ``(B, T, V)``.

    Args:
        fn: the learner's function.

    Returns:
        None. Prints one line when the answer is right, and "not implemented
        yet" while ``fn`` still raises NotImplementedError.

    Raises:
        ExerciseError: naming the likely bug (tgt_mask given to the cross-attention,
            src_mask left out, the encoder reading tgt_in or the decoder src, the
            decoder's hidden states instead of logits, a softmax on the logits).
    """
    model = make_model(
        _VOCAB, _VOCAB, n_layers=2, d_model=_D_MODEL, d_ff=32, n_heads=2, dropout=0.0, tie_embeddings=False
    ).eval()
    generator = torch.Generator().manual_seed(0)
    # S == T first: a mask or an input in the wrong place then runs, and the simulations can name it.
    for B, S, T in ((3, 6, 6), (3, 7, 5)):
        src, tgt_in, src_mask, tgt_mask = _case(B, S, T, generator)
        inputs = {"src": src, "tgt_in": tgt_in, "src_mask": src_mask, "tgt_mask": tgt_mask}
        originals = {name: t.clone() for name, t in inputs.items()}
        out = call_answer(fn, model, src, tgt_in, src_mask, tgt_mask, hint=_WIRING)
        expect_unchanged(originals, inputs)
        if isinstance(out, torch.Tensor) and shape_of(out) == (B, T, _D_MODEL):
            raise known_bug(_HIDDEN)
        what = f"the logits for S={S}, T={T}"
        out = expect_tensor(
            out,
            what,
            (B, T, _VOCAB),
            torch.float32,
            shape_hint=f"one score per target token at every target position: {_WIRING}",
        )
        diagnose(
            out,
            model(src, tgt_in, src_mask, tgt_mask),
            _assembly_bugs(model, src, tgt_in, src_mask, tgt_mask),
            what,
            f"expected model(src, tgt_in, src_mask, tgt_mask): {_WIRING}",
        )
    return "logits against model(src, tgt_in, src_mask, tgt_mask) with padded sources and targets, S = T and S != T"
