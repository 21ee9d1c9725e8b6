"""Training speed of the course's Transformer against ``torch.nn.Transformer``.

Both models get the same embeddings, positional encoding and output layer
(ours), the same configuration (a training preset's model), the same batches
(Multi30k through the TokenBatcher: from a corpus file saved by ``prepare``
with ``--corpus``, else tokenized here with spaCy, else random batches of the
same shape when neither the data nor spaCy is there), the same loss (label
smoothing) and the same optimizer (Adam with the Noam schedule). Only the encoder-decoder stack differs. We time
full training steps (forward, backward, clipping, update) after a few warm-up
steps and report target tokens per second.

One difference we keep on purpose: ``nn.Transformer`` always ends its encoder
and decoder with a LayerNorm, which the paper's post-norm model (ours) has not.

    python benchmarks/bench_train.py                      # CPU, quick preset, 20 steps
    python benchmarks/bench_train.py --device cuda --preset full --steps 100 --corpus runs/multi30k_full.json.gz

On a GPU both run under the autocast :func:`transformer_lessons.train.train` uses
(bf16 on compute capability 8.0 and newer, float32 before).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from transformer_lessons.layers import Embeddings, PositionalEncoding
from transformer_lessons.model import Transformer
from transformer_lessons.specials import BOS_ID as BOS, EOS_ID as EOS, PAD_ID as PAD
from transformer_lessons.train import TRAIN_PRESETS, LabelSmoothingLoss, autocast_for, noam_scheduler, train_step


class TorchTransformer(nn.Module):
    """``nn.Transformer`` between our embeddings and output layer, taking our bool masks."""

    def __init__(self, config, src_vocab_size: int, tgt_vocab_size: int):
        super().__init__()
        c = config
        self.src_embed = Embeddings(src_vocab_size, c.d_model)
        self.tgt_embed = Embeddings(tgt_vocab_size, c.d_model)
        self.src_pos = PositionalEncoding(c.d_model, c.dropout, c.max_len, c.pe_base)
        self.tgt_pos = PositionalEncoding(c.d_model, c.dropout, c.max_len, c.pe_base)
        self.transformer = nn.Transformer(
            d_model=c.d_model,
            nhead=c.n_heads,
            num_encoder_layers=c.n_layers,
            num_decoder_layers=c.n_layers,
            dim_feedforward=c.d_ff,
            dropout=c.dropout,
            batch_first=True,
            norm_first=c.norm_first,
        )
        self.generator = nn.Linear(c.d_model, tgt_vocab_size)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        if c.tie_embeddings:
            self.generator.weight = self.tgt_embed.table.weight

    def forward(self, src, tgt, src_mask, tgt_mask):
        # Our masks say True = may attend; nn.Transformer's say True = blocked: invert once here.
        src_pad = ~src_mask[:, 0, 0, :]  # (B, 1, 1, S) -> (B, S)
        tgt_pad = tgt == PAD  # (B, T)
        causal = ~torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool, device=tgt.device).tril()  # (T, T)
        hidden = self.transformer(
            self.src_pos(self.src_embed(src)),
            self.tgt_pos(self.tgt_embed(tgt)),
            tgt_mask=causal,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )  # (B, T, D)
        return self.generator(hidden)  # (B, T, V)


def _batches_from(corpus, config, n: int) -> list:
    batcher = corpus.batcher("train", config.max_tokens, shuffle=True, seed=0, max_len=config.model.max_len)
    batches = []
    while len(batches) < n:
        batches.extend(batcher)
    return batches[:n]


def get_batches(args, n: int):
    """``n`` batches from Multi30k's first ``--limit`` training pairs, plus the vocab sizes and where they came from.

    From ``--corpus`` (a file saved by ``prepare``: no spaCy needed) if given; else
    tokenized here (spaCy); without data or spaCy, random batches of the same shape.
    """
    config = TRAIN_PRESETS[args.preset]
    if args.corpus:
        from transformer_lessons.data import Corpus, DataError

        try:
            corpus = Corpus.load(args.corpus)  # a missing or broken file is an error, never a silent fallback
        except DataError as err:
            raise SystemExit(f"error: {err}") from err
        corpus.pairs["train"] = corpus.pairs["train"][: args.limit]
        source = f"Multi30k from {args.corpus} (first {len(corpus.pairs['train'])} training pairs, bpe_merges={corpus.info.get('bpe_merges')})"
        return _batches_from(corpus, config, n), len(corpus.src_vocab), len(corpus.tgt_vocab), source
    try:
        from transformer_lessons.data import DataError, prepare_corpus

        corpus = prepare_corpus(
            args.data_dir, min_freq=config.min_freq, limit=args.limit, splits=("train",), progress=False, bpe_merges=config.bpe_merges
        )
        return _batches_from(corpus, config, n), len(corpus.src_vocab), len(corpus.tgt_vocab), f"Multi30k (first {args.limit} training pairs)"
    except (DataError, ImportError) as err:
        from transformer_lessons.data import make_batch

        print(f"(no Multi30k data: {str(err)[:100]}...; using random batches)")
        g = torch.Generator().manual_seed(0)
        vocab = 6000
        batches = []
        for _ in range(n):
            length = int(torch.randint(8, 20, (1,), generator=g))
            rows = max(1, config.max_tokens // (length + 1))
            pairs = [(torch.randint(4, vocab, (length,), generator=g).tolist(), torch.randint(4, vocab, (length,), generator=g).tolist()) for _ in range(rows)]
            batches.append(make_batch(pairs, PAD, BOS, EOS))
        return batches, vocab, vocab, "random batches"


def time_model(model, batches, args, device, n_warmup: int) -> float:
    """Target tokens per second over the timed steps."""
    config = TRAIN_PRESETS[args.preset]
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=config.betas, eps=config.eps)
    scheduler = noam_scheduler(optimizer, config.model.d_model, config.warmup, config.lr_factor)
    criterion = LabelSmoothingLoss(model.generator.out_features, PAD, config.smoothing)
    _, autocast = autocast_for(device)  # as train() does
    tokens, start = 0, None
    for i, batch in enumerate(batches):
        if i == n_warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start, tokens = time.perf_counter(), 0
        train_step(model, batch.to(device), criterion, optimizer, scheduler, config.clip_norm or 1e9, autocast)  # as train() steps
        tokens += batch.n_tokens
    if device.type == "cuda":
        torch.cuda.synchronize()
    return tokens / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--preset", choices=tuple(TRAIN_PRESETS), default="quick", help="model size and batch tokens (default quick)")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per model (default 20)")
    parser.add_argument("--warmup-steps", type=int, default=3, help="untimed steps first (default 3)")
    parser.add_argument("--limit", type=int, default=4000, help="training pairs to draw batches from (default 4000)")
    parser.add_argument("--data-dir", help="raw Multi30k files (default: $TRANSFORMER_LESSONS_DATA)")
    parser.add_argument("--corpus", metavar="PATH", help="a corpus file saved by 'python -m transformer_lessons prepare' (no spaCy needed); replaces --data-dir")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    config = TRAIN_PRESETS[args.preset].model
    batches, src_v, tgt_v, source = get_batches(args, args.warmup_steps + args.steps)

    torch.manual_seed(0)
    ours = Transformer(config, src_v, tgt_v).to(device)
    torch.manual_seed(0)
    theirs = TorchTransformer(config, src_v, tgt_v).to(device)
    print(f"preset {args.preset}: {config}")
    amp, _ = autocast_for(device)
    print(
        f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else f'{torch.get_num_threads()} threads'}), "
        f"torch {torch.__version__}, autocast {str(amp).replace('torch.', '') if amp is not None else 'off (float32)'}"
    )
    print(f"batches: {source}, {TRAIN_PRESETS[args.preset].max_tokens} tokens max, {args.steps} timed steps after {args.warmup_steps} warm-up")
    print(f"parameters: ours {ours.num_parameters():,}, nn.Transformer {sum(p.numel() for p in theirs.parameters()):,}")
    # Alternate the two a few times so a neighbour's load on the machine hits both alike.
    rounds = 2
    ours_rates, theirs_rates = [], []
    for _ in range(rounds):
        ours_rates.append(time_model(ours, batches, args, device, args.warmup_steps))
        theirs_rates.append(time_model(theirs, batches, args, device, args.warmup_steps))
    ours_rate, theirs_rate = max(ours_rates), max(theirs_rates)  # best of the rounds: the least disturbed
    print(f"transformer_lessons.Transformer : {ours_rate:>10,.0f} target tokens/s")
    print(f"torch.nn.Transformer            : {theirs_rate:>10,.0f} target tokens/s")
    print(f"ratio ours / nn.Transformer     : {ours_rate / theirs_rate:.2f}")


if __name__ == "__main__":
    main()
