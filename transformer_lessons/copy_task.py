"""The copy task: a first problem for the whole Transformer, small enough to train in seconds on a CPU.

The model reads a random sequence of symbols and must write it back. Solving it
needs positions and cross-attention: the decoder's position ``t`` carries the
positional encoding ``PE_t``, the source's position ``t`` carries it too, and
cross-attention that matches them reads the symbol to write. Self-attention is
not needed: with every self-attention sublayer replaced by zeros the tiny model
still copies (notebook 07, section 7, trains it). So the task shows what
cross-attention does, not what self-attention is for. A trained model's
cross-attention follows the diagonal, as a band rather than a sharp line
(notebook 07 measures it once, after training).
"""

from __future__ import annotations

import torch

from transformer_lessons.config import PRESETS, ModelConfig
from transformer_lessons.data import Batch
from transformer_lessons.loss import LabelSmoothingLoss
from transformer_lessons.masks import causal_mask
from transformer_lessons.model import Transformer
from transformer_lessons.schedule import noam_scheduler
from transformer_lessons.specials import BOS_ID, PAD_ID, SPECIALS
from transformer_lessons.train import train_step

# The ids of every vocabulary in the course (transformer_lessons.specials): 0 <unk>, 1 <pad>,
# 2 <bos>, 3 <eos>. The copy task uses <pad> (in the lesson's masks) and <bos>; its symbols
# come after the four specials, so padding never collides with data.
FIRST_SYMBOL = len(SPECIALS)  # symbols are 4 .. vocab_size - 1
COPY_VOCAB = FIRST_SYMBOL + 10  # the specials and ten symbols, A to J


def copy_batch(batch_size: int, length: int, vocab_size: int, generator: torch.Generator | None = None):
    """A batch of random symbol sequences and the decoder's input/target for copying them.

    Returns:
        ``(src, tgt_in, tgt_out)``, each LongTensor ``(B, L)``: ``tgt_out`` is
        ``src`` itself and ``tgt_in`` is ``src`` shifted right behind ``<bos>``
        (teacher forcing: at step ``t`` the decoder sees the true symbols ``< t``).
    """
    src = torch.randint(FIRST_SYMBOL, vocab_size, (batch_size, length), generator=generator)  # (B, L)
    bos = torch.full((batch_size, 1), BOS_ID, dtype=torch.long)
    tgt_in = torch.cat([bos, src[:, :-1]], dim=1)  # (B, L): <bos> s_0 … s_{L-2}
    return src, tgt_in, src.clone()


def copy_training_batch(
    batch_size: int, length: int, vocab_size: int, generator: torch.Generator | None = None
) -> Batch:
    """:func:`copy_batch` as a :class:`~transformer_lessons.data.Batch` for :func:`~transformer_lessons.train.train_step`:
    no padding, so no source mask, and a causal target mask ``(L, L)``."""
    src, tgt_in, tgt_out = copy_batch(batch_size, length, vocab_size, generator)
    return Batch(
        src=src, tgt_in=tgt_in, tgt_out=tgt_out, src_mask=None, tgt_mask=causal_mask(length), n_tokens=tgt_out.numel()
    )


def make_copy_model(vocab_size: int = COPY_VOCAB, config: ModelConfig | None = None, seed: int = 0) -> Transformer:
    """A Transformer with the ``tiny`` preset (or ``config``) and a shared source/target vocabulary."""
    torch.manual_seed(seed)
    return Transformer(config or PRESETS["tiny"], vocab_size, vocab_size)


def train_copy_model(
    model: Transformer,
    steps: int = 600,
    batch_size: int = 64,
    length: int = 10,
    lr: float = 3e-3,
    warmup: int = 50,
    seed: int = 0,
    progress: bool = True,
    unrelated_source: bool = False,
) -> list[float]:
    """Train ``model`` on freshly sampled copy batches; returns the loss of every step.

    The course's one training step (:func:`~transformer_lessons.train.train_step`)
    with Adam and the paper's betas (0.9, 0.98), and the paper's schedule (§5.3,
    :func:`~transformer_lessons.schedule.noam_scheduler`) scaled so that it peaks
    at ``lr`` after ``warmup`` steps: a rate that suits a tiny model. The loss is
    plain cross-entropy (no label smoothing: there is nothing to be unsure about).
    No gradient clipping. Near zero loss the loss can jump for a few steps and come back
    down (notebook 07 shows it); a likely cause is that Adam divides each step by the root
    of the recent squared gradients, so its steps do not shrink when the gradients do.
    Clipping would not stop it (a run with the gradient norm clipped at 1.0 still jumped).

    With ``unrelated_source=True`` every batch's source is replaced by fresh random
    symbols, unrelated to the target: there is nothing to copy, and the only way to
    predict the target is to read it from the decoder's own input (notebook 07, a model
    without the causal mask).
    """
    from tqdm.auto import tqdm

    generator = torch.Generator().manual_seed(seed)
    vocab_size = model.src_vocab_size
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)
    # noam_rate at step `warmup` is factor / sqrt(d_model * warmup): with d_model=1 and factor lr·sqrt(warmup)
    # the curve peaks at exactly `lr` there (any model, even one that wraps a Transformer).
    scheduler = noam_scheduler(optimizer, d_model=1, warmup=warmup, factor=lr * warmup**0.5)
    criterion = LabelSmoothingLoss(vocab_size, PAD_ID, smoothing=0.0)
    losses = []
    bar = tqdm(range(steps), desc="copy task", disable=not progress)
    for _ in bar:
        batch = copy_training_batch(batch_size, length, vocab_size, generator)
        if unrelated_source:  # noise in place of the source: (B, L), independent of the target
            batch.src = torch.randint(FIRST_SYMBOL, vocab_size, batch.src.shape, generator=generator)
        losses.append(train_step(model, batch, criterion, optimizer, scheduler).item())
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
    model.eval()
    return losses


@torch.no_grad()
def copy_accuracy(model: Transformer, n: int = 200, length: int = 10, seed: int = 1) -> float:
    """Share of symbols copied correctly by greedy decoding on ``n`` fresh sequences."""
    from transformer_lessons.decode import greedy_decode

    model.eval()
    generator = torch.Generator().manual_seed(seed)
    src, _, tgt_out = copy_batch(n, length, model.src_vocab_size, generator)
    out = greedy_decode(model, src, None, max_new_tokens=length, bos_id=BOS_ID)[:, 1:]  # drop <bos>: (B, L)
    return (out == tgt_out).float().mean().item()
