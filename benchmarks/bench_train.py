"""Training speed of the course's Transformer against ``torch.nn.Transformer``.

Both models get the same embeddings, positional encoding and output layer
(ours), the same configuration (a training preset's model), the same batches
(Multi30k through the TokenBatcher: from a corpus file saved by ``prepare``
with ``--corpus``, else tokenized here with spaCy, else random batches of the
same shape when neither the data nor spaCy is there), the same loss (label
smoothing) and the same optimizer (Adam with the Noam schedule). Only the encoder-decoder stack differs. We time
full training steps (forward, backward, clipping, update) after a few warm-up
steps and report target tokens per second. The two models take turns step by
step, every timed batch is stepped ``--rounds`` times by each, and its fastest
step counts, so that a neighbour's load on a shared machine hits both alike.

One difference we keep on purpose: ``nn.Transformer`` always ends its encoder
and decoder with a LayerNorm, which the paper's post-norm model (ours) has not.

    python benchmarks/bench_train.py                      # CPU, quick preset, 20 steps
    python benchmarks/bench_train.py --device cuda --preset full --steps 100 --corpus runs/multi30k_full.json.gz

On a GPU both run under the autocast :func:`transformer_lessons.run.train` uses
(bf16 on compute capability 8.0 and newer, float32 before).

With ``--compile`` the script then times ``torch.compile``d copies of both models
(``dynamic=True``, as ``train()`` compiles on a GPU) on the same batches and
prints their rates, their speedup over eager and their ratio. Compiling takes
minutes per model on a small CPU, so a first untimed pass over every batch
shape is spent on it. Where compiling fails (on a CPU, inductor
needs a C++ compiler) the script says why and keeps the eager figures.

    python benchmarks/bench_train.py --compile            # eager, then compiled, both models

``--precision`` picks the autocast of both models as ``train --precision`` does (``auto``:
bfloat16 on recent GPUs only). ``--compare-precision`` then also times our model in float32
against the same model under bfloat16 autocast, taking turns on the same batches, and prints
``ratio bfloat16 / float32``: what ``train --precision bfloat16`` buys per step on this machine.

    python benchmarks/bench_train.py --preset cpu --compare-precision --steps 10
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from torch import nn

from transformer_lessons.layers import Embeddings, PositionalEncoding
from transformer_lessons.model import Transformer
from transformer_lessons.specials import BOS_ID as BOS, EOS_ID as EOS, PAD_ID as PAD
from transformer_lessons.config import TRAIN_PRESETS
from transformer_lessons.hardware import autocast_for
from transformer_lessons.loss import LabelSmoothingLoss
from transformer_lessons.schedule import noam_scheduler
from transformer_lessons.train import train_step


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
            tgt_is_causal=True,  # it is: saves nn.Transformer checking it (a graph break under torch.compile)
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
            args.data_dir,
            min_freq=config.min_freq,
            limit=args.limit,
            splits=("train",),
            progress=False,
            bpe_merges=config.bpe_merges,
        )
        return (
            _batches_from(corpus, config, n),
            len(corpus.src_vocab),
            len(corpus.tgt_vocab),
            f"Multi30k (first {args.limit} training pairs)",
        )
    except (DataError, ImportError) as err:
        from transformer_lessons.data import make_batch

        print(f"(no Multi30k data: {str(err)[:100]}...; using random batches)")
        g = torch.Generator().manual_seed(0)
        vocab = 6000
        batches = []
        for _ in range(n):
            length = int(torch.randint(8, 20, (1,), generator=g))
            rows = max(1, config.max_tokens // (length + 1))
            pairs = [
                (
                    torch.randint(4, vocab, (length,), generator=g).tolist(),
                    torch.randint(4, vocab, (length,), generator=g).tolist(),
                )
                for _ in range(rows)
            ]
            batches.append(make_batch(pairs, PAD, BOS, EOS))
        return batches, vocab, vocab, "random batches"


def make_step(model: nn.Module, args, device, precision: str | None = None) -> Callable[[object], None]:
    """One training step of ``model`` on a batch, as ``train()`` steps: its own Adam, Noam schedule and loss.

    ``precision``: ``TrainConfig.precision`` for this model (default ``args.precision``).
    """
    config = TRAIN_PRESETS[args.preset]
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=config.betas, eps=config.eps)
    scheduler = noam_scheduler(optimizer, config.model.d_model, config.warmup, config.lr_factor)
    criterion = LabelSmoothingLoss(model.generator.out_features, PAD, config.smoothing)
    _, autocast = autocast_for(device, precision or args.precision)  # as train() does

    def step(batch) -> None:
        train_step(model, batch, criterion, optimizer, scheduler, config.clip_norm or 1e9, autocast)
        if device.type == "cuda":
            torch.cuda.synchronize()  # the update's kernels belong to this step, not to the other model's next one

    return step


def time_steps(
    models: dict[str, nn.Module], batches: list, args, device, n_warmup: int, precisions: dict | None = None
) -> dict[str, float]:
    """Target tokens per second of each model over ``batches[n_warmup:]``, the models taking turns step by step.

    Each timed batch is stepped ``args.rounds`` times per model and its fastest
    time counts: on a shared machine a neighbour's burst of load then slows one
    step of each model alike and is dropped, instead of one model's whole run.
    """
    steps = {name: make_step(model, args, device, (precisions or {}).get(name)) for name, model in models.items()}
    batches = [batch.to(device) for batch in batches]
    for batch in batches[:n_warmup]:
        for step in steps.values():
            step(batch)
    timed = batches[n_warmup:]
    best = {name: [float("inf")] * len(timed) for name in models}
    for r in range(args.rounds):
        order = list(steps) if r % 2 == 0 else list(reversed(steps))  # neither always goes first
        for i, batch in enumerate(timed):
            for name in order:
                start = time.perf_counter()
                steps[name](batch)
                best[name][i] = min(best[name][i], time.perf_counter() - start)
    tokens = sum(batch.n_tokens for batch in timed)
    return {name: tokens / sum(seconds) for name, seconds in best.items()}


def print_rates(ours: float, theirs: float, label: str = "") -> None:
    print(f"transformer_lessons.Transformer{label} : {ours:>10,.0f} target tokens/s")
    print(f"torch.nn.Transformer{label}            : {theirs:>10,.0f} target tokens/s")
    print(f"ratio ours / nn.Transformer{label}     : {ours / theirs:.2f}")


def compile_and_time(models: dict[str, nn.Module], eager: dict[str, float], batches, args, device) -> None:
    """Time ``torch.compile``d copies of ``models`` on the timed batches; print rates, speedups over ``eager`` and their ratio.

    A failure to compile (no C++ compiler for inductor on a CPU, an unsupported
    backend or op) is printed in one line instead of ending the benchmark.
    """
    timed = batches[args.warmup_steps :]
    print(
        f"torch.compile(backend={args.compile_backend!r}, dynamic=True): a first untimed pass over the {len(timed)} timed batches compiles every shape"
    )
    compiled = {}
    for name, model in models.items():
        start = time.perf_counter()
        try:
            compiled[name] = torch.compile(model, backend=args.compile_backend, dynamic=True)
            step = make_step(compiled[name], args, device)
            for batch in timed:  # compiles (and recompiles for new shapes) outside the timed steps
                step(batch.to(device))
        except Exception as err:  # noqa: BLE001 - any failure to compile is reported, not raised
            reason = " ".join(str(err).split())[:300] or type(err).__name__
            print(
                f"torch.compile failed for {name} on {device.type}, so no compiled figures: {type(err).__name__}: {reason}"
            )
            return
        print(f"  {name}: compiled and first pass in {time.perf_counter() - start:.0f} s")
    rates = time_steps(compiled, timed, args, device, n_warmup=0)
    print_rates(rates["ours"], rates["nn.Transformer"], label=" compiled")
    for name in models:
        print(f"speedup compiled / eager, {name:<14} : {rates[name] / eager[name]:.2f}x")


def compare_precision(config, src_v: int, tgt_v: int, batches, args, device) -> None:
    """Our model in float32 against the same model (same initial weights) under bfloat16 autocast, on the same batches."""
    copies = {}
    for precision in ("float32", "bfloat16"):
        torch.manual_seed(0)
        copies[precision] = Transformer(config, src_v, tgt_v).to(device)
    rates = time_steps(copies, batches, args, device, args.warmup_steps, precisions={p: p for p in copies})
    print(f"ours in float32                 : {rates['float32']:>10,.0f} target tokens/s")
    print(f"ours under bfloat16 autocast    : {rates['bfloat16']:>10,.0f} target tokens/s")
    print(f"ratio bfloat16 / float32        : {rates['bfloat16'] / rates['float32']:.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument(
        "--preset", choices=tuple(TRAIN_PRESETS), default="quick", help="model size and batch tokens (default quick)"
    )
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per model (default 20)")
    parser.add_argument("--warmup-steps", type=int, default=3, help="untimed steps first (default 3)")
    parser.add_argument("--limit", type=int, default=4000, help="training pairs to draw batches from (default 4000)")
    parser.add_argument("--data-dir", help="raw Multi30k files (default: $TRANSFORMER_LESSONS_DATA)")
    parser.add_argument(
        "--corpus",
        metavar="PATH",
        help="a corpus file saved by 'python -m transformer_lessons prepare' (no spaCy needed); replaces --data-dir",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="times each timed batch is stepped per model; its fastest step counts (default 2)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also time torch.compile'd copies of both models (slow to start: compiling)",
    )
    parser.add_argument(
        "--precision",
        choices=("auto", "float32", "bfloat16"),
        default="auto",
        help="autocast of both models, as train --precision (default auto)",
    )
    parser.add_argument(
        "--compare-precision", action="store_true", help="also time our model in float32 against bfloat16 autocast"
    )
    parser.add_argument(
        "--compile-backend",
        default="inductor",
        help="torch.compile backend with --compile (default inductor; 'eager' checks the plumbing fast)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.steps < 1:
        parser.error("--rounds and --steps must be at least 1")
    device = torch.device(args.device)
    config = TRAIN_PRESETS[args.preset].model
    batches, src_v, tgt_v, source = get_batches(args, args.warmup_steps + args.steps)

    torch.manual_seed(0)
    ours = Transformer(config, src_v, tgt_v).to(device)
    torch.manual_seed(0)
    theirs = TorchTransformer(config, src_v, tgt_v).to(device)
    print(f"preset {args.preset}: {config}")
    amp, _ = autocast_for(device, args.precision)
    print(
        f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else f'{torch.get_num_threads()} threads'}), "
        f"torch {torch.__version__}, autocast {str(amp).replace('torch.', '') if amp is not None else 'off (float32)'}"
    )
    print(
        f"batches: {source}, {TRAIN_PRESETS[args.preset].max_tokens} tokens max, {args.steps} timed steps after {args.warmup_steps} warm-up, "
        f"the models alternating step by step, best of {args.rounds} rounds per batch"
    )
    print(f"parameters: ours {ours.num_parameters():,}, nn.Transformer {sum(p.numel() for p in theirs.parameters()):,}")
    models = {"ours": ours, "nn.Transformer": theirs}
    eager = time_steps(models, batches, args, device, args.warmup_steps)
    print_rates(eager["ours"], eager["nn.Transformer"])
    if args.compare_precision:
        compare_precision(config, src_v, tgt_v, batches, args, device)
    if args.compile:
        compile_and_time(models, eager, batches, args, device)


if __name__ == "__main__":
    main()
