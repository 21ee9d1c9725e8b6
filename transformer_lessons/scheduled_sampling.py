"""Scheduled sampling: let the decoder read some of its own predictions while it trains.

With teacher forcing (the paper's training, §3.1 "shifted right") the decoder
always reads the *true* previous tokens, but when it translates it reads its
*own*, mistakes included: it never practised recovering from a mistake (the
"exposure bias"). Bengio et al. (2015), "Scheduled Sampling for Sequence
Prediction with Recurrent Neural Networks", replace each true previous token by
the model's prediction with a probability that grows during training.

An RNN makes its predictions one step at a time as it trains; a Transformer
decodes every position of a teacher-forced batch in one pass. So, as in
Mihaylova & Martins (2019), "Scheduled Sampling for Transformers", training
takes two passes:

1. a teacher-forced pass without gradients gives the model's prediction for
   every position (:func:`model_predictions`);
2. each decoder input token after ``<bos>`` is replaced by the prediction for
   its position with probability ``p`` (never ``<bos>``, never padding;
   :func:`mix_inputs`), and the usual training step runs on that batch, scored
   against the true ``tgt_out`` as always.

Mihaylova & Martins feed a mix of the true tokens' *embeddings* and embeddings
made from the model's predictions; feeding the predicted token itself, as here,
is the simplest version. They report scores close to the teacher-forcing
baseline: this is an experiment to run, not a known gain.

:func:`scheduled_inputs` does both; the training loop calls it before
:func:`~transformer_lessons.train.train_step`, which stays the one training step.
``p`` follows :func:`scheduled_probability`: a linear ramp from 0 over
``ramp`` updates (Bengio et al.'s linear decay of the teacher-forcing
probability), then ``p`` for the rest of the run. ``p = 0`` is the paper's plain
teacher forcing, and then nothing here runs at all.

The draws use a generator seeded from ``(seed, step)`` (:func:`step_generator`),
not torch's global random state: a resumed run mixes exactly the tokens the
uninterrupted one did.
"""

from __future__ import annotations

import dataclasses
import hashlib
from contextlib import nullcontext

import torch

from transformer_lessons.decode import fused_attention
from transformer_lessons.model import Transformer


def scheduled_probability(p: float, ramp: int, step: int) -> float:
    """The probability of feeding a prediction at update ``step + 1`` (``step`` updates done).

    ``p * min(1, step / ramp)``: a linear ramp from 0 to ``p`` over the first
    ``ramp`` updates, then ``p``; ``ramp = 0`` uses ``p`` from the first update.
    """
    if p == 0:
        return 0.0
    return p if ramp <= 0 else p * min(1.0, step / ramp)


def step_generator(seed: int, step: int) -> torch.Generator:
    """A CPU generator for update ``step``, seeded from ``(seed, step)``: the same draws on any device and after a resume."""
    # A CPU generator keeps 32 bits of its seed: hash the pair into them (seed + step would repeat across seeds).
    mixed = int.from_bytes(hashlib.blake2b(f"{seed}:{step}".encode(), digest_size=4).digest(), "little")
    return torch.Generator().manual_seed(mixed)


@torch.no_grad()
def model_predictions(
    model: Transformer, batch, autocast=nullcontext, sample: bool = False, generator: torch.Generator | None = None
) -> torch.Tensor:
    """The first pass: the model's prediction for every target position, teacher-forced, without gradients.

    Made in eval mode (no dropout), as the model would predict when translating;
    the model's mode is restored afterwards.

    Args:
        sample: draw each prediction from the softmax instead of taking the argmax.

    Shape:
        ``(B, T)``: entry ``[:, t]`` is the prediction for ``tgt_out[:, t]``, that is
        for the token at ``tgt_in[:, t + 1]``.
    """
    was_training = model.training
    model.eval()
    try:
        with fused_attention(model), autocast():  # eval mode would otherwise keep every attention map
            logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (B, T, V)
    finally:
        model.train(was_training)
    if not sample:
        return logits.argmax(dim=-1)  # (B, T)
    probs = logits.float().softmax(dim=-1).flatten(0, 1)  # (B*T, V)
    where = generator.device if generator is not None else probs.device
    drawn = torch.multinomial(probs.to(where), 1, generator=generator).to(probs.device)  # (B*T, 1)
    return drawn.view(logits.shape[:2])  # (B, T)


def mix_inputs(
    tgt_in: torch.Tensor,
    predictions: torch.Tensor,
    p: float,
    pad_id: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The second pass's decoder input: each token after ``<bos>`` replaced by its prediction with probability ``p``.

    Position ``t >= 1`` of ``tgt_in`` holds the true token ``y_t``; the model's guess
    for it was made at position ``t - 1``, so it is ``predictions[:, t - 1]``. Never
    replaced: ``<bos>`` (position 0), padding, and a prediction that is itself
    ``<pad>`` (an untrained model may guess it; it is no token to read).

    Shape:
        tgt_in ``(B, T)``, predictions ``(B, T)`` -> ``(B, T)``; ``tgt_in`` is not modified.
    """
    guess = torch.cat([tgt_in[:, :1], predictions[:, :-1]], dim=1)  # (B, T): guess[:, t] is the guess for tgt_in[:, t]
    coin = torch.rand(
        tgt_in.shape, generator=generator, device=generator.device if generator is not None else tgt_in.device
    )
    replace = coin.to(tgt_in.device) < p  # (B, T)
    replace[:, 0] = False  # <bos> is no prediction
    if pad_id is not None:
        replace &= (tgt_in != pad_id) & (guess != pad_id)
    return torch.where(replace, guess, tgt_in)  # (B, T)


def scheduled_inputs(
    model: Transformer,
    batch,
    p: float,
    pad_id: int | None = None,
    generator: torch.Generator | None = None,
    autocast=nullcontext,
    sample: bool = False,
):
    """``batch`` with its decoder input mixed with the model's own predictions (probability ``p`` per token).

    Both passes of scheduled sampling for Transformers: :func:`model_predictions`,
    then :func:`mix_inputs`. ``tgt_out``, the masks and the rest are unchanged, so
    the result goes straight to :func:`~transformer_lessons.train.train_step`.
    With ``p == 0`` the batch itself comes back and no model pass runs.

    Args:
        batch: a :class:`~transformer_lessons.data.Batch` (or any dataclass with its fields).
        p: probability in ``[0, 1)`` of feeding a prediction instead of the true token.
        pad_id: the target padding id (never replaced, never fed).
        generator: the draws (default: torch's global random state); see :func:`step_generator`.
        sample: draw the predictions from the softmax instead of taking the argmax.
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"the scheduled sampling probability must be in [0, 1), got {p!r}")
    if p == 0:
        return batch
    predictions = model_predictions(model, batch, autocast, sample, generator)  # (B, T)
    return dataclasses.replace(batch, tgt_in=mix_inputs(batch.tgt_in, predictions, p, pad_id, generator))


__all__ = ["mix_inputs", "model_predictions", "scheduled_inputs", "scheduled_probability", "step_generator"]
