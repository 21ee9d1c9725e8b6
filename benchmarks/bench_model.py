"""Time our encoder-decoder stack against torch.nn.Transformer with the same configuration.

What is compared: the two stacks (encoder + decoder layers) on the same already-embedded
inputs, with the same weights, the same masks and the same batch. Embeddings, positional
encoding and the output projection are left out: they are the same few ops in any
implementation and would only dilute the difference. nn.Transformer always ends each stack
with a LayerNorm; with the paper's post-norm layers our stacks have none, so for a like-for-
like function the reference's two final norms are replaced by nn.Identity (with --norm-first
both have them). Before timing, the script checks in float32 that both compute the same output,
and exits with status 1 if they do not.

Modes:
  train      forward + backward, dropout on; our attention uses the fused F.scaled_dot_product_attention
  eval-rec   forward + backward in eval mode; our attention takes the recording path
             (explicit softmax, weights kept for plots), the reference is unchanged
  infer      forward only under torch.no_grad() in eval mode (ours records weights; the
             reference may take its own inference fast path)
  infer-fused  the same with our weight recording switched off (record_weights=False), so
             our attention uses F.scaled_dot_product_attention as in training

Run:  python benchmarks/bench_model.py [--preset small|tiny|base] [--batch 32] [--src-len 32] ...
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings

import torch
from torch import nn

from transformer_lessons.attention import MultiHeadAttention
from transformer_lessons.config import PRESETS, ModelConfig
from transformer_lessons.masks import padding_mask, target_mask
from transformer_lessons.model import Decoder, Encoder

# "small" is the default: big enough for the attention and matmuls to dominate, small
# enough to finish in well under a minute on a 2-core CPU.
BENCH_PRESETS = {
    "small": ModelConfig(n_layers=3, d_model=256, n_heads=4, d_ff=1024, dropout=0.1, tie_embeddings=False),
    "tiny": PRESETS["tiny"],
    "base": PRESETS["base"],
}
PAD = 0
# Float32 outputs computed in a different order differ by about 1e-6 of their size (LayerNorm keeps them
# near 1); a wrong weight, mask or sublayer order differs by far more.
SAME_FUNCTION_RTOL = 1e-4


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=sorted(BENCH_PRESETS), default="small")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--src-len", type=int, default=16)
    p.add_argument("--tgt-len", type=int, default=16)
    p.add_argument("--iters", type=int, default=5, help="timed iterations per mode and model (median reported)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    p.add_argument("--norm-first", action="store_true", help="pre-norm layers in both models")
    p.add_argument("--modes", default="train,eval-rec,infer,infer-fused")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch.set_num_threads; 0 keeps torch's default. "
        "1 by default: on a busy small machine more threads oversubscribe the cores and the timings explode",
    )
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def copy_weights(encoder: Encoder, decoder: Decoder, ref: nn.Transformer) -> None:
    """Copy our weights into nn.Transformer (its in_proj packs W^Q, W^K, W^V in one matrix)."""

    def attention(ours, theirs: nn.MultiheadAttention) -> None:
        theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
        theirs.out_proj.load_state_dict(ours.w_o.state_dict())

    with torch.no_grad():
        for ours, theirs in zip(encoder.layers, ref.encoder.layers):
            attention(ours.self_attn, theirs.self_attn)
            theirs.linear1.load_state_dict(ours.feed_forward.w_1.state_dict())
            theirs.linear2.load_state_dict(ours.feed_forward.w_2.state_dict())
            for sub, norm in zip(ours.sublayers, (theirs.norm1, theirs.norm2)):
                norm.load_state_dict(sub.norm.state_dict())
        for ours, theirs in zip(decoder.layers, ref.decoder.layers):
            attention(ours.self_attn, theirs.self_attn)
            attention(ours.cross_attn, theirs.multihead_attn)
            theirs.linear1.load_state_dict(ours.feed_forward.w_1.state_dict())
            theirs.linear2.load_state_dict(ours.feed_forward.w_2.state_dict())
            for sub, norm in zip(ours.sublayers, (theirs.norm1, theirs.norm2, theirs.norm3)):
                norm.load_state_dict(sub.norm.state_dict())
        if isinstance(encoder.norm, nn.Identity):
            ref.encoder.norm = nn.Identity()
            ref.decoder.norm = nn.Identity()
        else:
            ref.encoder.norm.load_state_dict(encoder.norm.state_dict())
            ref.decoder.norm.load_state_dict(decoder.norm.state_dict())


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    args = parse_args()
    # nn.Transformer's inference fast path warns that nested tensors are a prototype; not our concern here.
    warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    c = BENCH_PRESETS[args.preset].replace(norm_first=args.norm_first)
    B, S, T, D = args.batch, args.src_len, args.tgt_len, c.d_model

    encoder = Encoder(c.n_layers, D, c.n_heads, c.d_ff, c.dropout, c.norm_first)
    decoder = Decoder(c.n_layers, D, c.n_heads, c.d_ff, c.dropout, c.norm_first)
    ours = nn.ModuleDict({"encoder": encoder, "decoder": decoder})
    ref = nn.Transformer(
        d_model=D,
        nhead=c.n_heads,
        num_encoder_layers=c.n_layers,
        num_decoder_layers=c.n_layers,
        dim_feedforward=c.d_ff,
        dropout=c.dropout,
        activation="relu",
        layer_norm_eps=1e-5,
        batch_first=True,
        norm_first=c.norm_first,
    )
    copy_weights(encoder, decoder, ref)
    ours.to(device)
    ref.to(device)

    # Embedded inputs and token ids with ragged lengths, so the padding masks matter.
    src_x = torch.randn(B, S, D, device=device)
    tgt_x = torch.randn(B, T, D, device=device)
    src_ids = torch.ones(B, S, dtype=torch.long, device=device)
    tgt_ids = torch.ones(B, T, dtype=torch.long, device=device)
    for b in range(B):
        src_ids[b, torch.randint(S // 2 + 1, S + 1, ()).item() :] = PAD
        tgt_ids[b, torch.randint(T // 2 + 1, T + 1, ()).item() :] = PAD
    src_mask = padding_mask(src_ids, PAD)  # (B, 1, 1, S), True = may attend
    tgt_mask = target_mask(tgt_ids, PAD)  # (B, 1, T, T)
    # nn.Transformer reads True as "blocked": invert ours. Per-head masks go in as (B*H, T, T).
    ref_kwargs = dict(
        tgt_mask=(~tgt_mask).expand(B, c.n_heads, T, T).reshape(B * c.n_heads, T, T),
        src_key_padding_mask=~src_mask[:, 0, 0, :],
        memory_key_padding_mask=~src_mask[:, 0, 0, :],
    )

    def run_ours() -> torch.Tensor:
        return decoder(tgt_x, encoder(src_x, src_mask), src_mask, tgt_mask)

    def run_ref() -> torch.Tensor:
        return ref(src_x, tgt_x, **ref_kwargs)

    # Same function? In float32, before --dtype's rounding can hide a real difference; eval mode, so
    # dropout is off; only rows of real target tokens are compared.
    ours.eval(), ref.eval()
    with torch.no_grad():
        real = tgt_ids != PAD
        expected = run_ref()[real]  # (real target tokens, D)
        diff = (run_ours()[real] - expected).abs().max().item()
        tolerance = SAME_FUNCTION_RTOL * expected.abs().max().item()
    if not diff <= tolerance:  # written so that a NaN difference fails too
        sys.exit(
            f"not the same function: max |ours - nn.Transformer| = {diff:.2e} (float32, eval, real target rows) "
            f"exceeds {tolerance:.2e} = {SAME_FUNCTION_RTOL:g} x the largest output; check copy_weights and the masks"
        )
    ours.to(dtype)
    ref.to(dtype)
    src_x, tgt_x = src_x.to(dtype), tgt_x.to(dtype)

    def step(fn, backward: bool) -> None:
        if backward:
            fn().float().square().mean().backward()
        else:
            with torch.no_grad():
                fn()

    modes = {
        # mode: (train mode, backward, our record_weights, note)
        "train": (True, True, None, "fwd+bwd, dropout on; ours: fused F.sdpa"),
        "eval-rec": (False, True, None, "fwd+bwd, eval; ours: recording path"),
        "infer": (False, False, None, "fwd only, no_grad; ours: recording path"),
        "infer-fused": (False, False, False, "fwd only, no_grad; ours: fused F.sdpa"),
    }
    rows = []
    for mode in args.modes.split(","):
        training, backward, record, note = modes[mode]
        for module in ours.modules():
            if isinstance(module, MultiHeadAttention):
                module.record_weights = record  # None: record in eval mode only (the default)
        ours.train(training)
        ref.train(training)
        times = {"ours": [], "nn": []}
        for i in range(args.warmup + args.iters):
            # Interleaved, so drifting clocks or a busy machine hit both alike.
            for name, fn, module in (("ours", run_ours, ours), ("nn", run_ref, ref)):
                module.zero_grad(set_to_none=True)
                sync(device)
                t0 = time.perf_counter()
                step(fn, backward)
                sync(device)
                if i >= args.warmup:
                    times[name].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        rows.append((mode, med["ours"], med["nn"], med["ours"] / med["nn"], note))

    n_params = sum(p.numel() for p in ours.parameters())
    print(f"torch {torch.__version__} | device {device} | dtype {args.dtype} | threads {torch.get_num_threads()}")
    print(
        f"preset {args.preset}: n_layers={c.n_layers} d_model={D} n_heads={c.n_heads} d_ff={c.d_ff} "
        f"dropout={c.dropout} norm_first={c.norm_first} | batch {B} src_len {S} tgt_len {T} | "
        f"{n_params / 1e6:.2f}M parameters in the stacks"
    )
    print(
        f"same function: max |ours - nn.Transformer| = {diff:.2e} (float32, eval, real target rows; "
        f"tolerance {tolerance:.2e})"
    )
    print(f"median of {args.iters} iterations after {args.warmup} warm-up, milliseconds per step\n")
    print(f"{'mode':<11} {'ours ms':>9} {'nn ms':>9} {'ours/nn':>8}  what")
    for mode, a, b, r, note in rows:
        print(f"{mode:<11} {a:>9.1f} {b:>9.1f} {r:>8.2f}  {note}")


if __name__ == "__main__":
    main()
