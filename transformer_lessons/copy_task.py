"""The copy task: the smallest problem that needs every part of the Transformer.

The model reads a random sequence of symbols and must write it back. Solving it
needs the encoder (to read), cross-attention (to look up the symbol at the
position being written), causal self-attention and positions (to know which
position that is). A trained model's cross-attention follows the diagonal:
a band that sharpens with training (notebook 07 measures it).
"""

from __future__ import annotations

import torch
from torch import nn

from transformer_lessons.config import PRESETS, ModelConfig
from transformer_lessons.masks import causal_mask
from transformer_lessons.model import Transformer

PAD_ID = 0  # unused by the symbols, so padding never collides with data
BOS_ID = 1  # the decoder's first input
FIRST_SYMBOL = 2  # symbols are 2 .. vocab_size - 1


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


def make_copy_model(vocab_size: int = 12, config: ModelConfig | None = None, seed: int = 0) -> Transformer:
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
) -> list[float]:
    """Train ``model`` on freshly sampled copy batches; returns the loss of every step.

    Adam with the paper's betas (0.9, 0.98) and a linear warm-up then inverse
    square-root decay (the shape of the paper's schedule, §5.3, with a peak
    rate that suits a tiny model).
    """
    from tqdm.auto import tqdm

    generator = torch.Generator().manual_seed(seed)
    vocab_size = model.src_vocab_size
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, (warmup / (step + 1)) ** 0.5)
    )
    loss_fn = nn.CrossEntropyLoss()
    tgt_mask = causal_mask(length)  # (L, L): no padding in this task, only the future is hidden
    model.train()
    losses = []
    bar = tqdm(range(steps), desc="copy task", disable=not progress)
    for _ in bar:
        src, tgt_in, tgt_out = copy_batch(batch_size, length, vocab_size, generator)
        logits = model(src, tgt_in, None, tgt_mask)  # (B, L, V)
        loss = loss_fn(logits.reshape(-1, vocab_size), tgt_out.reshape(-1))  # (B*L, V) vs (B*L,)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
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
    out = greedy_decode(model, src, None, max_len=length, bos_id=BOS_ID)[:, 1:]  # drop <bos>: (B, L)
    return (out == tgt_out).float().mean().item()
