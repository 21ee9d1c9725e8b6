"""Where a training step's time goes, and how much of the machine it uses.

One training step of a preset's model (``cpu`` or ``laptop``) is taken apart on real batches
of that preset, and each part is timed on its own, forward and backward, at the shapes the
step gives it:

- **data**: taking the next batch from the ``TokenBatcher`` (shuffled, padded, moved to the device);
- **attention**: every multi-head attention sublayer (projections, scores, softmax, weighted sum);
- **feed-forward**: every position-wise feed-forward sublayer;
- **output + loss**: the output projection to the vocabulary, log-softmax and label-smoothed loss;
- **optimizer**: gradient clipping, Adam's update, zeroing the gradients;
- **the rest**: the whole step minus those parts (embeddings, positions, layer norms, residual
  sums, autocast's casts, the framework's own overhead).

Each part's floating-point operations are counted from its matrix products (a forward pass's
``2·m·k·n`` per product, three times that with the backward pass; padded positions count,
since the machine computes them), and divided by its time. The machine's peak is measured in
the same run: the best rate of a 2048×2048 matrix product in float32 and in bfloat16 with the
same threads. The last line is the step's **utilisation**: its rate over the peak of the
precision it computes in.

``--compare-attention`` times the whole step twice, taking turns on the same batches: with the attention's kernel
rule of :func:`transformer_lessons.attention.fused_sdpa` (bfloat16 on a CPU takes PyTorch's plain kernel) and with
PyTorch's own choice (its fused kernel), and prints the ratio: the speed-up this profile led to.

``--compare-adam`` also times the step with each of PyTorch's Adam implementations (a loop
over the tensors, ``foreach``, ``fused``) on the same batches, taking turns, and prints each
one's step time against the loop's: what :func:`transformer_lessons.train.make_optimizer` picks.

    python benchmarks/bench_profile.py --preset laptop --corpus runs/multi30k_cpu.json.gz
    python benchmarks/bench_profile.py --preset laptop --compare-attention
    python benchmarks/bench_profile.py --preset cpu --precision float32 --compare-adam
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

import transformer_lessons.attention as attention_module
from transformer_lessons.attention import MultiHeadAttention
from transformer_lessons.config import TRAIN_PRESETS
from transformer_lessons.hardware import autocast_for
from transformer_lessons.layers import PositionwiseFeedForward
from transformer_lessons.loss import LabelSmoothingLoss
from transformer_lessons.model import Transformer
from transformer_lessons.rotary import apply_rotary
from transformer_lessons.schedule import noam_scheduler
from transformer_lessons.specials import PAD_ID as PAD
from transformer_lessons.train import adam_implementations, make_optimizer, train_step


def best_of(fn, repeats: int) -> float:
    """The fastest of ``repeats`` timed calls of ``fn`` (after one untimed call), in seconds."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def matmul_peak(dtype: torch.dtype, n: int = 2048, repeats: int = 5) -> float:
    """This machine's rate for an ``n × n`` matrix product in ``dtype``, in GFLOP/s (the best of ``repeats``)."""
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    return 2 * n**3 / best_of(lambda: torch.mm(a, b), repeats) / 1e9


def linear_flops(module: torch.nn.Module, rows: int) -> float:
    """Forward FLOPs of every ``nn.Linear`` in ``module`` applied to ``rows`` vectors."""
    return sum(2 * rows * m.in_features * m.out_features for m in module.modules() if isinstance(m, torch.nn.Linear))


class Recorder:
    """Forward hooks that keep each attention and feed-forward sublayer's inputs from one forward pass."""

    def __init__(self, model: Transformer):
        self.calls: list[tuple[str, torch.nn.Module, tuple, dict]] = []
        self.handles = [
            m.register_forward_hook(self._keep(kind), with_kwargs=True)
            for m in model.modules()
            for kind in [self._kind(m)]
            if kind
        ]

    @staticmethod
    def _kind(m: torch.nn.Module) -> str | None:
        if isinstance(m, MultiHeadAttention):
            return "attention"
        if isinstance(m, PositionwiseFeedForward):
            return "feed-forward"
        return None

    def _keep(self, kind: str):
        def hook(module, args, kwargs, output):
            self.calls.append((kind, module, *same_tensors_anew(args, kwargs, lambda t: t.detach())))

        return hook

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def sublayer_flops(kind: str, module: torch.nn.Module, args: tuple) -> float:
    """Forward FLOPs of one recorded call: its linear layers, plus the attention's two products."""
    query = args[0]
    q_rows = query.shape[0] * query.shape[1]
    if kind != "attention":
        return linear_flops(module, q_rows)
    key = args[1]
    k_rows = key.shape[0] * key.shape[1]
    flops = linear_flops(module.w_q, q_rows) + linear_flops(module.w_o, q_rows)
    flops += linear_flops(module.w_k, k_rows) + linear_flops(module.w_v, k_rows)
    return flops + 2 * 2 * query.shape[0] * query.shape[1] * key.shape[1] * query.shape[-1]  # Q·Kᵀ, weights·V


def same_tensors_anew(args: tuple, kwargs: dict, new) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` with each tensor replaced by ``new(tensor)``, once per tensor: self-attention's
    ``query is key is value`` stays true (the layer takes its one-product path on it)."""
    made: dict[int, object] = {}

    def one(t):
        if not isinstance(t, torch.Tensor):
            return t
        if id(t) not in made:
            made[id(t)] = new(t)
        return made[id(t)]

    return tuple(one(a) for a in args), {k: one(v) for k, v in kwargs.items()}


def time_forward_backward(module, args, kwargs, autocast, repeats: int) -> float:
    """Seconds for the module's forward and backward pass on these inputs (the inputs need gradients, as in a step)."""
    inputs, kwargs = same_tensors_anew(
        args, kwargs, lambda t: t.clone().requires_grad_(True) if t.is_floating_point() else t
    )

    def once():
        with autocast():
            out = module(*inputs, **kwargs)
        out = out[0] if isinstance(out, tuple) else out
        out.float().sum().backward()

    return best_of(once, repeats)


def attention_inside(module, args, kwargs, amp_dtype, repeats: int) -> tuple[float, float, float]:
    """Seconds of one attention call's two inner parts, forward and backward, at its shapes: PyTorch's
    ``scaled_dot_product_attention`` in the kernel the layer uses (``fused_sdpa``: scores, mask, softmax, weighted
    sum) and the rotation of queries and keys (0 without rotary positions); and the first part's FLOPs."""
    query, key = args[0], args[1]
    mask = args[3] if len(args) > 3 else kwargs.get("mask")
    B, T, _ = query.shape
    S, H, Dh = key.shape[1], module.n_heads, module.d_head
    dtype = amp_dtype or torch.float32
    q = torch.randn(B, H, T, Dh, dtype=dtype, requires_grad=True)
    k = torch.randn(B, H, S, Dh, dtype=dtype, requires_grad=True)
    v = torch.randn(B, H, S, Dh, dtype=dtype, requires_grad=True)

    def fused():
        attention_module.fused_sdpa(q, k, v, mask).float().sum().backward()

    def rotate():
        (
            apply_rotary(q, 0, module.rotary_base).float().sum() + apply_rotary(k, 0, module.rotary_base).float().sum()
        ).backward()

    rotary = best_of(rotate, repeats) if module.rotary_base is not None else 0.0
    return best_of(fused, repeats), rotary, 3 * 4 * B * H * T * S * Dh


def profile(args) -> dict:
    config = TRAIN_PRESETS[args.preset]
    config = config.replace(precision=args.precision) if args.precision else config
    device = torch.device("cpu")
    corpus = load_corpus(args)
    batcher = corpus.batcher("train", config.max_tokens, shuffle=True, seed=0, max_len=config.model.max_len)
    batches = []
    data_seconds = []
    it = iter(batcher)
    for _ in range(args.steps):
        start = time.perf_counter()
        batches.append(next(it).to(device))
        data_seconds.append(time.perf_counter() - start)
    torch.manual_seed(0)
    model = Transformer(config.model, len(corpus.src_vocab), len(corpus.tgt_vocab)).to(device)
    amp_dtype, autocast = autocast_for(device, config.precision)
    criterion = LabelSmoothingLoss(len(corpus.tgt_vocab), PAD, config.smoothing)
    optimizer = make_optimizer(model, config)
    scheduler = noam_scheduler(optimizer, config.model.d_model, config.warmup, config.lr_factor)

    def step(batch):
        train_step(model, batch, criterion, optimizer, scheduler, config.clip_norm, autocast)

    for batch in batches[:2]:
        step(batch)  # warm-up
    parts = {k: 0.0 for k in ("attention", "feed-forward", "output + loss", "optimizer")}
    flops = {k: 0.0 for k in parts}
    inside = {"attention: SDPA": 0.0, "attention: rotary": 0.0}  # parts of the attention's time
    inside_flops = {"attention: SDPA": 0.0, "attention: rotary": 0.0}
    whole = 0.0
    for batch in batches:
        whole += best_of(lambda: step(batch), args.repeats)
        recorder = Recorder(model)
        with torch.no_grad(), autocast():
            memory = model.encode(batch.src, batch.src_mask)
            hidden = model.decoder(model.tgt_pos(model.tgt_embed(batch.tgt_in)), memory, batch.src_mask, batch.tgt_mask)
        recorder.remove()
        for kind, module, a, kw in recorder.calls:
            parts[kind] += time_forward_backward(module, a, kw, autocast, args.repeats)
            flops[kind] += 3 * sublayer_flops(kind, module, a)
            if kind == "attention":
                fused, rotary, fused_flops = attention_inside(module, a, kw, amp_dtype, args.repeats)
                inside["attention: SDPA"] += fused
                inside["attention: rotary"] += rotary
                inside_flops["attention: SDPA"] += fused_flops
        hidden = hidden.detach().float().requires_grad_(True)

        def output_and_loss():
            with autocast():
                logits = model.generator(hidden)
            criterion(logits, batch.tgt_out).backward()

        parts["output + loss"] += best_of(output_and_loss, args.repeats)
        flops["output + loss"] += 3 * linear_flops(model.generator, batch.tgt_out.numel())

        def update():
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=False)

        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        parts["optimizer"] += best_of(update, args.repeats)
    model.zero_grad()
    n = len(batches)
    tokens = sum(b.n_tokens for b in batches) / n
    padded = sum(b.tgt_out.numel() for b in batches) / n
    return {
        "config": config,
        "amp_dtype": amp_dtype,
        "whole": whole / n,
        "data": sum(data_seconds) / n,
        "parts": {k: v / n for k, v in parts.items()},
        "flops": {k: v / n for k, v in flops.items()},
        "inside": {k: v / n for k, v in inside.items()},
        "inside_flops": {k: v / n for k, v in inside_flops.items()},
        "tokens": tokens,
        "padded": padded,
    }


def load_corpus(args):
    if args.corpus:
        from transformer_lessons.data import Corpus

        return Corpus.load(args.corpus)
    from transformer_lessons.run import prepare_corpus_for

    return prepare_corpus_for(args.preset, args.data_dir, progress=False)


def report(r: dict, peaks: dict[str, float]) -> float:
    precision = "bfloat16" if r["amp_dtype"] == torch.bfloat16 else "float32"
    peak = peaks[precision]
    whole, parts = r["whole"], r["parts"]
    rest = max(whole - sum(parts.values()), 0.0)
    print(
        f"a step of the {r['config'].name} preset's model ({precision}): {whole * 1e3:.0f} ms, "
        f"{r['tokens']:.0f} target tokens ({r['padded']:.0f} with padding), {r['tokens'] / whole:,.0f} target tokens/s"
    )
    print(f"{'part':<15}{'ms':>8}{'share':>8}{'GFLOP':>8}{'GFLOP/s':>9}")
    for name in parts:
        t, f = parts[name], r["flops"][name]
        print(f"{name:<15}{t * 1e3:>8.1f}{t / whole:>8.0%}{f / 1e9:>8.2f}{f / t / 1e9:>9.1f}")
        if name == "attention":
            for sub, t in r["inside"].items():
                f = r["inside_flops"][sub]
                rate = f"{f / t / 1e9:>9.1f}" if f and t else ""
                print(
                    f"  {sub.split(': ')[1]:<13}{t * 1e3:>8.1f}{t / whole:>8.0%}{f / 1e9:>8.2f}{rate}   (inside attention)"
                )
    print(f"{'the rest':<15}{rest * 1e3:>8.1f}{rest / whole:>8.0%}")
    print(f"{'data (apart)':<15}{r['data'] * 1e3:>8.1f}{r['data'] / whole:>8.0%}   (the batcher, before the step)")
    total = sum(r["flops"].values())
    achieved = total / whole / 1e9
    print(
        f"matmul peak here, {torch.get_num_threads()} threads: float32 {peaks['float32']:.0f} GFLOP/s, bfloat16 {peaks['bfloat16']:.0f} GFLOP/s"
    )
    print(f"the step: {total / 1e9:.2f} GFLOP in {whole * 1e3:.0f} ms = {achieved:.1f} GFLOP/s")
    print(f"utilisation (the step's rate / the {precision} peak): {achieved / peak:.3f}")
    return achieved / peak


def take_turns(variants: dict, args) -> dict[str, float]:
    """Mean seconds of a step of each variant (name -> (setup, model, optimizer, scheduler)): they take turns on
    the same batches, each batch's fastest of ``args.repeats`` counting, after two untimed warm-up batches."""
    config = TRAIN_PRESETS[args.preset]
    config = config.replace(precision=args.precision) if args.precision else config
    corpus = load_corpus(args)
    batcher = corpus.batcher("train", config.max_tokens, shuffle=True, seed=0, max_len=config.model.max_len)
    batches = [b for _, b in zip(range(args.steps + 2), batcher)]
    _, autocast = autocast_for(torch.device("cpu"), config.precision)
    criterion = LabelSmoothingLoss(len(corpus.tgt_vocab), PAD, config.smoothing)
    runs = {}
    for name, (setup, optimizer_options) in variants.items():
        torch.manual_seed(0)
        model = Transformer(config.model, len(corpus.src_vocab), len(corpus.tgt_vocab))
        optimizer = torch.optim.Adam(
            model.parameters(), lr=1.0, betas=config.betas, eps=config.eps, **optimizer_options
        )
        runs[name] = (
            setup,
            model,
            optimizer,
            noam_scheduler(optimizer, config.model.d_model, config.warmup, config.lr_factor),
        )
    best = {name: [float("inf")] * args.steps for name in runs}
    for r in range(args.repeats + 1):
        for i, batch in enumerate(batches):
            for name in runs if r % 2 == 0 else reversed(list(runs)):
                setup, model, optimizer, scheduler = runs[name]
                setup()
                start = time.perf_counter()
                train_step(model, batch, criterion, optimizer, scheduler, config.clip_norm, autocast)
                if r and i >= 2:
                    best[name][i - 2] = min(best[name][i - 2], time.perf_counter() - start)
    attention_module.CPU_BFLOAT16_MATH_KERNEL = True
    return {name: sum(seconds) / len(seconds) for name, seconds in best.items()}


def compare_attention(args) -> None:
    """The whole step with the course's kernel rule for attention, and with PyTorch's fused kernel always."""

    def rule(on: bool):
        return lambda: setattr(attention_module, "CPU_BFLOAT16_MATH_KERNEL", on)

    seconds = take_turns({"fused kernel always": (rule(False), {}), "the course's rule": (rule(True), {})}, args)
    for name, s in seconds.items():
        print(f"attention, {name:<20}: {s * 1e3:7.1f} ms a step")
    ratio = seconds["fused kernel always"] / seconds["the course's rule"]
    print(f"ratio (fused always) / (the course's rule): {ratio:.2f}")


def compare_adam(args) -> None:
    """The whole step with each Adam implementation, taking turns on the same batches; each against the loop's."""
    seconds = take_turns({name: (lambda: None, options) for name, options in adam_implementations().items()}, args)
    for name, s in seconds.items():
        print(f"Adam, {name:<8}: {s * 1e3:7.1f} ms a step, ratio loop / {name} {seconds['loop'] / s:.3f}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=("laptop", "cpu", "quick"), default="laptop")
    p.add_argument("--corpus", type=Path, help="a corpus file saved by `prepare` (default: the course's cache)")
    p.add_argument("--data-dir", help="the raw Multi30k folder (default: as prepare finds it)")
    p.add_argument("--precision", choices=("native", "float32", "bfloat16"), help="default: the preset's")
    p.add_argument("--steps", type=int, default=4, help="batches to profile (default 4)")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats of each part; the fastest counts")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2, the course's machine)")
    p.add_argument("--compare-adam", action="store_true", help="also time the step with each Adam implementation")
    p.add_argument(
        "--compare-attention", action="store_true", help="also time the step with and without the attention kernel rule"
    )
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    peaks = {"float32": matmul_peak(torch.float32), "bfloat16": matmul_peak(torch.bfloat16)}
    report(profile(args), peaks)
    if args.compare_attention:
        compare_attention(args)
    if args.compare_adam:
        compare_adam(args)


if __name__ == "__main__":
    main()
