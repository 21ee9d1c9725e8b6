"""Every setting of the course in one place: the model's sizes, a training run's choices, and their presets.

- :class:`ModelConfig` and :data:`PRESETS`: the Transformer's sizes. Paper: Vaswani et al.
  (2017), "Attention Is All You Need", Table 3 (base model).
- :class:`TrainConfig` and :data:`TRAIN_PRESETS`: every choice of a training run, with the
  ``quick`` (a CPU in a minute), ``laptop`` (your own translator: 10 minutes on a CPU), ``cpu``
  (the course's translator) and ``full`` (one GPU) presets.
- :func:`compute_mode`: the one knob that decides how much compute a lesson spends.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, fields, replace
from typing import Literal

#: The widest beam the course's beam search accepts. The paper uses 4 (§6.1); gains stop
#: long before 64, and each beam multiplies the decoder's work (a beam of 10,000 would hang).
MAX_BEAM_SIZE = 64
#: Paper §6.1: "We set the maximum output length during inference to input length + 50". Decoding
#: (``max_output_extra=``) and a run (``TrainConfig.max_output_extra``) both start from it.
MAX_OUTPUT_EXTRA = 50

#: What ``TrainConfig.precision`` may be: ``auto`` (bfloat16 on recent GPUs only), ``native`` (also on a CPU with
#: bfloat16 arithmetic in hardware), ``float32``, ``bfloat16``.
PRECISIONS = ("auto", "native", "float32", "bfloat16")
#: The training presets' names (TRAIN_PRESETS below), for messages that meet one where a mode was meant.
TRAIN_PRESET_NAMES = ("quick", "laptop", "cpu", "full")
# TrainConfig.schedule: the paper's, one that ends with the run's budget, or the paper's without its warm-up ramp
SCHEDULES = ("noam", "to_end", "noam_no_ramp")

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
    max_len: int = (
        512  # rows of the positional table: the longest sequence the model accepts (rotary has no table, no limit)
    )
    pe_base: float = (
        10000.0  # paper: 10000 in sin(pos / base^(2i/d_model)); some tutorials print 1000; rotary's base too
    )
    # Paper §3.5 tried "sinusoidal" and "learned", kept sinusoidal. "rotary": RoFormer (Su et al. 2021) adds nothing to
    # the embeddings and rotates each self-attention query and key by its position (pairs of dimensions, base pe_base);
    # cross-attention is not rotated.
    positional: Literal["sinusoidal", "learned", "rotary"] = "sinusoidal"
    norm_first: bool = False  # paper: post-LN, LayerNorm(x + Sublayer(x)); True is pre-LN
    # Paper §3.4: the output projection (pre-softmax linear) shares its weight matrix with the target embedding.
    # False gives the projection a matrix of its own (the copy task and the checks' small models use that).
    tie_embeddings: bool = True
    # --- since the paper: each off by default, each a departure used by today's models ---
    # Zhang & Sennrich (2019), "Root Mean Square Layer Normalization": x / sqrt(mean(x²) + eps) · g, no mean, no bias.
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"  # paper §3.1: LayerNorm (Ba et al. 2016)
    # Shazeer (2020), "GLU Variants Improve Transformer": W2(SiLU(W1 x) ⊙ W3 x), no biases, hidden width round(2 d_ff / 3)
    # so that its three matrices hold about the parameters of the ReLU network's two.
    ffn: Literal["relu", "swiglu"] = "relu"  # paper §3.3, Eq. 2: max(0, x W1 + b1) W2 + b2
    # Key/value heads, each shared by n_heads / n_kv_heads query heads: grouped-query attention (Ainslie et al. 2023,
    # "GQA"); 1 is multi-query attention (Shazeer 2019, "Fast Transformer Decoding: One Write-Head is All You Need").
    # In every attention layer, as Shazeer's multi-query translation model; it must divide n_heads. The decoder's
    # key/value cache shrinks by n_heads / n_kv_heads.
    n_kv_heads: int | None = None  # paper §3.2.2: None = n_heads, every head its own keys and values

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)

    def replace(self, **changes) -> "ModelConfig":
        return replace(self, **changes)


PRESETS: dict[str, ModelConfig] = {
    # Small enough to train on a laptop CPU in about a minute (the copy task).
    "tiny": ModelConfig(n_layers=2, d_model=32, n_heads=4, d_ff=64, dropout=0.0, max_len=64, tie_embeddings=False),
    # The paper's base model, 65M parameters with a 37k shared vocabulary.
    "base": ModelConfig(),
}


class ModeError(ValueError):
    """A compute mode that is not ``quick`` or ``full`` (from ``mode=`` or ``TRANSFORMER_LESSONS_MODE``)."""


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
        preset = (
            f"; {mode!r} is a training preset: choose it with --preset {mode} (Python: train({mode!r}))"
            if mode in TRAIN_PRESET_NAMES
            else ""
        )
        raise ModeError(f"compute mode must be 'quick' or 'full', got {mode!r} (set {MODE_ENV}=quick or full){preset}")
    return mode  # type: ignore[return-value]


# --------------------------------------------------------------------------------------
# Training runs
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainConfig:
    """Every choice of a training run. Defaults follow the paper where it has one."""

    model: ModelConfig = ModelConfig()  # sizes of the Transformer (tie_embeddings lives there)
    name: str = "custom"  # run name: the default output directory is runs/<name>
    # --- data ---
    min_freq: int = 2  # rarer training words become <unk>: ~8k German / ~6k English words remain
    drop_longer_than: int | None = (
        None  # drop *training* pairs with a side of more tokens; evaluation data is never filtered
    )
    limit: int | None = None  # use only the first `limit` training pairs (quick runs); None = all 29k
    max_tokens: int = 4096  # padded tokens per batch and side; the paper's 25k is for 4.5M-pair WMT
    bpe_merges: int | None = None  # subword units: byte-pair merges learned per language (None = whole words)
    # --- optimisation ---
    epochs: int = 30  # passes over the training data (a run may stop earlier on max_minutes)
    lr_factor: float = 1.0  # scales the Noam curve (paper: 1.0); peak = factor / sqrt(d_model * warmup)
    warmup: int = 4000  # linear warm-up steps (paper: 4000); post-LN Transformers diverge without it
    # "noam": the paper's curve (§5.3, Eq. 3), ~1/sqrt(step) after the warm-up, never ending; "to_end": the same warm-up
    # ramp times a straight line falling from 1 to 0 over the run's budget: max_minutes of training when set (the run
    # measures its own time, so a slower machine still ends annealed), else the epochs (schedule.to_end_rate);
    # "noam_no_ramp": the paper's curve at its peak from the first update (no warm-up, the same peak: notebook 14's lab).
    schedule: Literal["noam", "to_end", "noam_no_ramp"] = "noam"
    smoothing: float = 0.1  # label smoothing ε_ls (paper §5.4)
    clip_norm: float | None = 1.0  # clip the gradient norm: not in the paper, guards against rare loss spikes
    betas: tuple[float, float] = (0.9, 0.98)  # Adam β1, β2 (paper §5.3: β2 = 0.98, below the usual 0.999)
    eps: float = 1e-9  # Adam ε (paper §5.3)
    weight_decay: float = 0.0  # the paper uses plain Adam; AdamW decay (matrices only) if > 0
    # Scheduled sampling (Bengio et al. 2015; two passes for Transformers, Mihaylova & Martins 2019): each decoder
    # input after <bos> is the model's own argmax prediction with probability p instead of the true token.
    scheduled_sampling: float = 0.0  # p in [0, 1); paper: 0, plain teacher forcing (§3.1 "shifted right")
    scheduled_sampling_ramp: int = (
        0  # updates over which p rises linearly from 0 to scheduled_sampling (0: p from the start)
    )
    # --- evaluation ---
    eval_every: int = 1  # validation BLEU every k epochs (and at the last); val loss runs every epoch
    beam_size: int = 4  # final test decoding (paper §6.1: beam 4); 1 = greedy
    # Paper §6.1 tests the mean of the last 5 checkpoints' weights. N > 1 keeps the last N epochs' weights and tests
    # their mean (averaged.pt, averaging.py); 1 (the course's default) tests best.pt, the epoch of best validation BLEU.
    average_last: int = 1
    length_penalty: float = 0.6  # GNMT length penalty α for the beam (paper §6.1: 0.6)
    bleu_val_limit: int | None = None  # validation BLEU on the first k sentences only (None = all 1014)
    max_output_extra: int = (
        MAX_OUTPUT_EXTRA  # outputs stop at source length + this (paper §6.1); repeating models cost ~its square
    )
    # --- running ---
    seed: int = 0  # weights, dropout and batch order all follow from it
    compile: bool = False  # torch.compile the model on a GPU (faster steps, a minute of compiling first)
    # Mixed precision (not in the paper, which names no precision; its P100 GPUs had no bf16). "auto": bfloat16 autocast on GPUs with bf16
    # tensor cores (compute capability >= 8.0), float32 elsewhere, as every earlier run; "bfloat16": also on a CPU
    # (a step of the cpu preset's model ran 1.34x faster on the course's 2-core machine); "float32": never. The loss,
    # Adam's state and the weights stay float32 (hardware.autocast_for).
    # "native": as "auto", and bfloat16 on a CPU that computes it in hardware (hardware.cpu_has_native_bfloat16).
    precision: Literal["auto", "native", "float32", "bfloat16"] = "auto"
    max_minutes: float | None = (
        None  # stop once the run's training time (all resumed calls, evaluation excluded) reaches this, then evaluate
    )

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "TrainConfig":
        data = dict(data)
        if "max_len" in data:  # the name before 2026-11 (it meant three things in the package)
            data["drop_longer_than"] = data.pop("max_len")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown TrainConfig fields {unknown}; known: {sorted(known)}")
        if isinstance(data.get("model"), dict):
            data["model"] = ModelConfig(**data["model"])
        if "betas" in data:
            data["betas"] = tuple(data["betas"])
        return cls(**data)

    def replace(self, **changes) -> "TrainConfig":
        return replace(self, **changes)

    def __post_init__(self) -> None:
        for problem in _config_problems(self):
            raise ValueError(f"TrainConfig: {problem}")

    def changes_on_resume(self, saved: "TrainConfig") -> list[str]:
        """The fields that differ from ``saved`` (the run being resumed) and may not change, as ``field: saved -> now``.

        A resumed run must be the run it continues: only :data:`RESUMABLE_FIELDS`
        (how long to train, how to evaluate) may change between calls.
        """
        now, before = self.to_dict(), saved.to_dict()
        return [
            f"{k}: {before[k]!r} -> {now[k]!r}" for k in now if k not in RESUMABLE_FIELDS and now[k] != before.get(k)
        ]


#: What a resumed run may change: how long it trains, and how it is evaluated. Everything else
#: (the model, the data, the optimizer, the seed) would make the record describe a run that never happened.
RESUMABLE_FIELDS = frozenset(
    {"epochs", "max_minutes", "eval_every", "beam_size", "length_penalty", "bleu_val_limit", "max_output_extra"}
)


def _config_problems(c: "TrainConfig") -> list[str]:
    """What is wrong with ``c``'s numbers, each as "field must be ..., got ..."."""

    def whole(name: str, low: int, optional: bool = False) -> str | None:
        value = getattr(c, name)
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            return f"{name} must be a whole number >= {low}{' or None' if optional else ''}, got {value!r}"
        return None

    def real(
        name: str, low: float, high: float = math.inf, optional: bool = False, open_low: bool = False
    ) -> str | None:
        value = getattr(c, name)
        if value is None and optional:
            return None
        ok = (
            isinstance(value, (int, float))
            and math.isfinite(value)
            and (value > low if open_low else value >= low)
            and value <= high
        )
        if not ok:
            bound = f"{'>' if open_low else '>='} {low}" + (f" and <= {high}" if high != math.inf else "")
            return f"{name} must be a finite number {bound}{' or None' if optional else ''}, got {value!r}"
        return None

    checks = [
        whole("min_freq", 1),
        whole("drop_longer_than", 1, optional=True),
        whole("limit", 1, optional=True),
        whole("max_tokens", 1),
        whole("bpe_merges", 0, optional=True),
        whole("epochs", 1),
        whole("warmup", 1),
        whole("eval_every", 1),
        whole("beam_size", 1),
        whole("average_last", 1),
        whole("bleu_val_limit", 1, optional=True),
        whole("max_output_extra", 0),
        whole("seed", 0),
        real("lr_factor", 0.0, open_low=True),
        real("smoothing", 0.0, 0.999),
        real("clip_norm", 0.0, optional=True, open_low=True),
        real("eps", 0.0, open_low=True),
        real("weight_decay", 0.0),
        real("length_penalty", 0.0),
        real("max_minutes", 0.0, optional=True, open_low=True),
        real("scheduled_sampling", 0.0),
        whole("scheduled_sampling_ramp", 0),
    ]
    m = c.model
    if m.n_kv_heads is not None and not (
        isinstance(m.n_kv_heads, int) and m.n_kv_heads >= 1 and m.n_heads % m.n_kv_heads == 0
    ):
        checks.append(
            f"model.n_kv_heads must be a whole number >= 1 that divides n_heads ({m.n_heads}), got {m.n_kv_heads!r}"
        )
    if c.schedule not in SCHEDULES:
        checks.append(f"schedule must be one of {', '.join(SCHEDULES)}, got {c.schedule!r}")
    if c.precision not in PRECISIONS:
        checks.append(f"precision must be one of {', '.join(PRECISIONS)}, got {c.precision!r}")
    if isinstance(c.scheduled_sampling, (int, float)) and c.scheduled_sampling >= 1.0:
        checks.append(
            f"scheduled_sampling must be below 1 (1 would never show the decoder a true token), got {c.scheduled_sampling!r}"
        )
    if isinstance(c.beam_size, int) and c.beam_size > MAX_BEAM_SIZE:
        checks.append(f"beam_size must be at most {MAX_BEAM_SIZE}, got {c.beam_size} (the paper uses 4)")
    if not (len(c.betas) == 2 and all(isinstance(b, (int, float)) and 0.0 <= b < 1.0 for b in c.betas)):
        checks.append(f"betas must be two numbers in [0, 1), got {c.betas!r}")
    return [problem for problem in checks if problem]


TRAIN_PRESETS: dict[str, TrainConfig] = {
    # A 2-core CPU in about a minute: a small model on the first 6000 pairs for
    # 8 epochs (~750 updates). It learns frequent words and sentence shapes
    # (test BLEU ~14), enough to see every part of the pipeline work; not a translator.
    "quick": TrainConfig(
        name="quick",
        model=ModelConfig(n_layers=2, d_model=128, n_heads=4, d_ff=256, dropout=0.1, max_len=128, tie_embeddings=True),
        limit=6000,
        max_tokens=1024,
        epochs=8,
        lr_factor=0.3,  # peak 0.3 / sqrt(128 * 100) = 2.7e-3: a tiny model takes a high rate, not 6e-3
        warmup=100,  # ~95 updates per epoch: warm up during the first epoch
        eval_every=4,
        beam_size=1,  # greedy: beam search costs CPU time the quick run does not have
        bleu_val_limit=300,
        max_output_extra=10,  # a half-trained model repeats itself; +10 tokens is ample for a real translation
    ),
    # Your own translator in 10 minutes of training on a 2-core CPU (issue 31; results/laptop/ has its runs and the
    # pilots that chose it). The cpu preset's data (the same subword units, from the same cache) and model family, but:
    # - the "to_end" schedule: a 300-update warm-up ramp times a straight line that reaches zero when the 10 minutes
    #   are spent (the run measures its own time, so a slower laptop still ends annealed, with fewer updates); in the
    #   pilots it scored like the paper's curve, and was kept for that guarantee;
    # - 2 layers each side, not 3: ~1.35x the updates per minute, and in the pilots (one seed each, on a GPU, each
    #   given the updates of 10 CPU minutes) better than 3 or 4 layers;
    # - no dropout: in those pilots dropout 0.1 cost 3 validation BLEU over ~1,250 updates (3 layers);
    # - "native" precision: bfloat16 where the CPU computes it in hardware (1.34x the steps here; Linux only), float32 elsewhere;
    # - validation BLEU every 2 epochs on 500 sentences (a learner watches it rise), and best.pt tested, as in cpu.
    "laptop": TrainConfig(
        name="laptop",
        model=ModelConfig(
            n_layers=2,
            d_model=256,
            n_heads=8,
            d_ff=512,
            dropout=0.0,
            max_len=256,
            tie_embeddings=True,
            positional="rotary",
        ),
        limit=None,
        bpe_merges=4000,
        max_tokens=2048,
        epochs=30,  # a ceiling: the 10 minutes end the run first on a CPU (5.5 epochs in results/laptop/, before
        # the attention speed-up of benchmarks/bench_profile.py; more since)
        lr_factor=0.7,  # at most 0.7 / sqrt(256 * 300) = 2.5e-3; about 2.0e-3 at update 300, the budget spent meanwhile
        warmup=300,
        schedule="to_end",
        eval_every=2,
        bleu_val_limit=500,
        beam_size=4,
        length_penalty=0.6,
        max_minutes=10.0,
        precision="native",
    ),
    # The course's translator as trained on a 2-core CPU in 90 minutes of training.
    # Why it is not the `full` model: on the 2-core machine that trained it, a step of
    # the `full` model (3 layers, d_ff 1024) on 2048 tokens took ~3.3 s (~600 target
    # tokens/s; 2 threads reach only ~37 GFLOP/s there), so 90 minutes would be ~6 epochs
    # and ~1,700 updates, and on a CPU the number of updates limits the score more than
    # the tokens do (a reference run of the `full` model: 2,216 updates, test sacreBLEU
    # 34.6, validation BLEU still rising). So:
    # - the feed-forward inner width halved to 512: the model costs ~25% less per token
    #   and keeps its depth (3+3 layers) and its 8 heads to explore;
    # - 2048-token batches: ~260 updates per epoch instead of ~130, at nearly the same
    #   tokens per second, with the peak rate lowered to match (~1.5e-3);
    # - warm-up 800 updates (3 epochs), not 2000;
    # - dropout 0.1 (the paper's): ~10 epochs are too few for 0.2's regularisation to pay;
    # - validation BLEU every 2 epochs on the first 500 sentences: greedy decoding costs
    #   a minute or more here, and it only picks the checkpoint.
    # The first course model (results/cpu/) was this recipe with the paper's sinusoids, no averaging, validation
    # every 2 epochs, on a machine shared with other work (874 target tokens/s, 2,676 updates): 39.12.
    # Since notebook 14's lab (results/since_2017/), the course's model (results/cpu_rotary/) adds:
    # - rotary positions (Su et al. 2021): in the lab, +2.97 test BLEU with 3 seeds each (p = 0.023), and a lower
    #   validation loss at equal updates (notebook 14; its first run alone, +3.6, was not yet evidence: p = 0.11);
    # - the mean of the last 5 epochs' weights (paper §6.1 averages 5 checkpoints);
    # - validation BLEU every 4 epochs (it only picks best.pt, which averaging does not use; evaluation time
    #   does not count against the 90 minutes, but it does against the wall clock);
    # - 60 epochs at most, so that the 90-minute limit ends the run on a fast machine too.
    # It was trained with --precision bfloat16, 1.31x the steps of float32 on the CPU that trained it (which
    # has avx512_bf16 instructions).
    # Since issue 31, the course's model (results/cpu_dropout/: 44.06 against 41.68, paired p <= 0.0001) changes two
    # things against overfitting, both chosen from GPU pilots (results/laptop/pilots_gpu.json, C1-C3). Validation loss
    # was lowest at epoch 13 of 38 in results/cpu_rotary/, at epoch 36 of 38 in results/cpu_dropout/.
    # - dropout 0.2, not 0.1: the run now lasts ~38 epochs (not the ~10 of the first recipe), and under 0.1 it overfit;
    # - the to_end schedule: the warm-up ramp, then a straight line to 0 at the 90-minute limit (Eq. 3 never ends).
    # And two settings so that `train --preset cpu` is that run:
    # - precision "native": bfloat16 where the CPU has bfloat16 instructions (as that run's), float32 elsewhere, where
    #   autocast may run slower;
    # - 100 epochs at most, so that the 90-minute limit, and not the epoch count, ends the run and its schedule.
    "cpu": TrainConfig(
        name="cpu",
        model=ModelConfig(
            n_layers=3,
            d_model=256,
            n_heads=8,
            d_ff=512,
            dropout=0.2,
            max_len=256,
            tie_embeddings=True,
            positional="rotary",
        ),
        limit=None,
        bpe_merges=4000,
        max_tokens=2048,
        epochs=100,
        lr_factor=0.7,  # Eq. 3's ramp to 0.7 / sqrt(256 * 800) = 1.5e-3 at update 800, times a line from 1 to 0 over the
        # time limit (to_end): the rate peaks at ~1.4e-3 and reaches 0 when the 90 minutes are spent
        warmup=800,
        schedule="to_end",
        precision="native",
        eval_every=4,
        average_last=5,
        bleu_val_limit=500,
        beam_size=4,
        length_penalty=0.6,
        max_minutes=90.0,
    ),
    # One GPU (an H100), about 15 minutes, aiming at sacreBLEU >= 36 (cased,
    # detokenized) on test_2016_flickr. Why these numbers:
    # - Multi30k is small (29k pairs, ~370k target tokens, ~6k English and ~8k
    #   German words at min_freq 2). The paper's base model (65M parameters)
    #   memorises it; published Multi30k setups that score well use 3-6 layers of
    #   width 256-512 with heavy dropout (0.1-0.3) and label smoothing 0.1. A
    #   3-layer, 256-wide model with 8 heads (~7M parameters with the embeddings)
    #   and dropout 0.2 sits in that range, and its fp16 export is < 20 MB.
    # - Subwords: 4000 BPE merges per language (~4k pieces each, <unk> on 0.04% of
    #   validation tokens instead of 4.6% / 2.1% for words). Measured on CPU with the
    #   quick model on all 29k pairs for 5 epochs, one run each: test sacreBLEU 27.5
    #   with words, 29.3 with 2000 merges, 31.0 with 4000, 27.6 with 8000; validation
    #   BLEU picks 4000 too (scripts/compare_bpe.py, results/bpe_comparison/). Much
    #   of the gain over words is how 13a scores <unk>; notebook 08 reads the table.
    # - Tying the target embedding and the output projection (paper §3.4) removes
    #   a million parameters that would otherwise each see few updates.
    # - 4096 tokens per batch is ~250 sentences, ~120 updates per epoch; 80 epochs
    #   are ~10k updates. Small batches and many epochs suit small data better
    #   than the paper's 25k-token batches.
    # - warmup 2000 with factor 0.7 peaks at 1e-3 (0.7 / sqrt(256 * 2000)) after
    #   ~16 epochs and decays to ~4.5e-4; post-LN at this width trains stably there.
    # - Greedy validation BLEU every epoch picks the best checkpoint; the test set
    #   is decoded once, at the end, with the paper's beam 4 and α = 0.6.
    # - An eager step of this model is launch-bound (~10-20 ms); 80 epochs are
    #   well inside 15 minutes, and max_minutes=15 guarantees it.
    "full": TrainConfig(
        name="full",
        model=ModelConfig(n_layers=3, d_model=256, n_heads=8, d_ff=1024, dropout=0.2, max_len=256, tie_embeddings=True),
        limit=None,
        bpe_merges=4000,
        max_tokens=4096,
        epochs=80,
        lr_factor=0.7,
        warmup=2000,
        eval_every=1,
        beam_size=4,
        length_penalty=0.6,
        max_minutes=15.0,
        # float32, not "auto" (which picks bfloat16 on an H100): this small model is launch-bound there, and
        # autocast's extra casts cost more than its matmuls save. On one H100 (torch 2.11), bfloat16 / float32 per
        # step was 0.86 (bench_train --compare-precision), and alone for 1.2 minutes a float32 run made 3,061
        # updates (test BLEU 38.97), a bfloat16 run 1,793 (32.63): results/since_2017_full/. results/full was
        # trained under "auto", so in bfloat16.
        precision="float32",
    ),
}


def get_train_config(config: "TrainConfig | str | None" = None) -> TrainConfig:
    """A :class:`TrainConfig` from itself, a preset name, or ``None`` (the preset of :func:`compute_mode`)."""
    if isinstance(config, TrainConfig):
        return config
    name = config if config is not None else compute_mode()
    if name not in TRAIN_PRESETS:
        raise ValueError(f"unknown training preset {name!r}; choose one of {', '.join(TRAIN_PRESETS)}")
    return TRAIN_PRESETS[name]
