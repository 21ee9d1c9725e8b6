"""Training a translation model: label smoothing, the learning-rate schedule, the loop, checkpoints.

The pieces, in the order a notebook meets them:

1. :class:`LabelSmoothingLoss` and :func:`smoothed_targets` (paper §5.4, ε_ls = 0.1).
2. :func:`noam_rate` and :func:`noam_scheduler`, the warm-up then inverse
   square-root learning rate (paper §5.3, Eq. 3).
3. :class:`TrainConfig` and :data:`TRAIN_PRESETS`, every training
   hyper-parameter in one place, with a ``quick`` (CPU) and a ``full`` (one GPU) preset.
4. :func:`train`, the loop: Adam, the schedule, gradient clipping, bf16 on a
   recent GPU (:func:`autocast_dtype`), validation loss and BLEU each epoch,
   checkpoints, resuming.
5. :func:`load_checkpoint` and :func:`export_for_inference`.

A checkpoint is a dict of plain Python types and tensors (state dicts, the
configs as dicts, the vocabularies as lists), so it loads with
``torch.load(path, weights_only=True)``: loading one never runs pickled code.
"""

from __future__ import annotations

import json
import math
import os
import platform
import random
import time
import warnings
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lessons.attention import MultiHeadAttention
from transformer_lessons.config import ModelConfig, compute_mode
from transformer_lessons.errors import CheckpointError, DivergedError
from transformer_lessons.loss import LabelSmoothingLoss, smoothed_targets
from transformer_lessons.model import Transformer
from transformer_lessons.schedule import noam_rate, noam_scheduler

if TYPE_CHECKING:  # data.py imports nothing heavy, but the loop needs it only when it runs
    from transformer_lessons.data import Corpus, Vocab

# --------------------------------------------------------------------------------------
# 3. Configuration and presets
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainConfig:
    """Every choice of a training run. Defaults follow the paper where it has one."""

    model: ModelConfig = ModelConfig()  # sizes of the Transformer (tie_embeddings lives there)
    name: str = "custom"  # run name: the default output directory is runs/<name>
    # --- data ---
    min_freq: int = 2  # rarer training words become <unk>: ~8k German / ~6k English words remain
    max_len: int | None = None  # drop longer *training* pairs (tokens); evaluation data is never filtered
    limit: int | None = None  # use only the first `limit` training pairs (quick runs); None = all 29k
    max_tokens: int = 4096  # padded tokens per batch and side; the paper's 25k is for 4.5M-pair WMT
    bpe_merges: int | None = None  # subword units: byte-pair merges learned per language (None = whole words)
    # --- optimisation ---
    epochs: int = 30  # passes over the training data (a run may stop earlier on max_minutes)
    lr_factor: float = 1.0  # scales the Noam curve (paper: 1.0); peak = factor / sqrt(d_model * warmup)
    warmup: int = 4000  # linear warm-up steps (paper: 4000); post-LN Transformers diverge without it
    smoothing: float = 0.1  # label smoothing ε_ls (paper §5.4)
    clip_norm: float | None = 1.0  # clip the gradient norm: not in the paper, guards against rare loss spikes
    betas: tuple[float, float] = (0.9, 0.98)  # Adam β1, β2 (paper §5.3: β2 = 0.98, below the usual 0.999)
    eps: float = 1e-9  # Adam ε (paper §5.3)
    weight_decay: float = 0.0  # the paper uses plain Adam; AdamW decay (matrices only) if > 0
    # --- evaluation ---
    eval_every: int = 1  # validation BLEU every k epochs (and at the last); val loss runs every epoch
    beam_size: int = 4  # final test decoding (paper §6.1: beam 4); 1 = greedy
    length_penalty: float = 0.6  # GNMT length penalty α for the beam (paper §6.1: 0.6)
    bleu_val_limit: int | None = None  # validation BLEU on the first k sentences only (None = all 1014)
    max_output_extra: int = 50  # outputs stop at source length + this (paper §6.1: 50); repeating models cost ~its square
    # --- running ---
    seed: int = 0  # weights, dropout and batch order all follow from it
    compile: bool = False  # torch.compile the model on a GPU (faster steps, a minute of compiling first)
    max_minutes: float | None = None  # stop once the run's training time (all resumed calls, evaluation excluded) reaches this, then evaluate

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown TrainConfig fields {unknown}; known: {sorted(known)}")
        data = dict(data)
        if isinstance(data.get("model"), dict):
            data["model"] = ModelConfig(**data["model"])
        if "betas" in data:
            data["betas"] = tuple(data["betas"])
        return cls(**data)

    def replace(self, **changes) -> "TrainConfig":
        return replace(self, **changes)


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
    # The record of the run is results/cpu/.
    "cpu": TrainConfig(
        name="cpu",
        model=ModelConfig(n_layers=3, d_model=256, n_heads=8, d_ff=512, dropout=0.1, max_len=256, tie_embeddings=True),
        limit=None,
        bpe_merges=4000,
        max_tokens=2048,
        epochs=40,
        lr_factor=0.7,  # peak 0.7 / sqrt(256 * 800) = 1.5e-3, then ~1/sqrt(step)
        warmup=800,
        eval_every=2,
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
    #   quick model on all 29k pairs for 5 epochs: test sacreBLEU 27.5 with words,
    #   29.3 with 2000 merges, 31.1 with 4000, 27.6 with 8000 (scripts/compare_bpe.py,
    #   recorded in results/bpe_comparison/; notebook 08 has the table).
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


def prepare_corpus_for(
    config: "TrainConfig | str | None" = None, data_dir: str | os.PathLike | None = None, progress: bool = True, limit: int | None = None
) -> "Corpus":
    """The corpus a run with ``config`` trains on: :func:`~transformer_lessons.data.prepare_corpus`
    with the config's ``min_freq``, ``max_len``, ``limit`` and ``bpe_merges`` (``limit`` here overrides the config's)."""
    from transformer_lessons.data import prepare_corpus

    config = get_train_config(config)
    return prepare_corpus(
        data_dir,
        min_freq=config.min_freq,
        max_len=config.max_len,
        limit=limit if limit is not None else config.limit,
        progress=progress,
        bpe_merges=config.bpe_merges,
    )


def _warn_if_corpus_differs(corpus: "Corpus", config: TrainConfig) -> None:
    # A corpus prepared elsewhere (e.g. --corpus on a GPU machine) records how it was made.
    made = {k: corpus.info[k] for k in ("min_freq", "max_len", "limit", "bpe_merges") if k in corpus.info}
    differs = {k: (v, getattr(config, k)) for k, v in made.items() if v != getattr(config, k)}
    if differs:
        detail = ", ".join(f"{k}={v!r} (config: {c!r})" for k, (v, c) in differs.items())
        warnings.warn(
            f"the corpus was prepared with {detail}; training on it as it is. For the config's settings, prepare it with "
            f"prepare_corpus_for(config) (command line: prepare --preset {config.name})",
            stacklevel=3,
        )


def default_out_dir(name: str) -> Path:
    """Where a run named ``name`` writes by default: ``runs/<name>`` under the current directory."""
    return Path(os.environ.get("TRANSFORMER_LESSONS_RUNS", "runs")) / name


# --------------------------------------------------------------------------------------
# 4. Checkpoints
# --------------------------------------------------------------------------------------

CHECKPOINT_FORMAT = "transformer_lessons.checkpoint"
CHECKPOINT_VERSION = 1


def _vocab_from_dict(data: dict, what: str) -> "Vocab":
    from transformer_lessons.data import DataError, Vocab

    try:
        return Vocab.from_dict(data)
    except DataError as err:
        raise CheckpointError(f"the checkpoint's {what} vocabulary is damaged: {err}") from err


def check_state_fits(model: nn.Module, state: dict[str, torch.Tensor], src_vocab_size: int | None = None, tgt_vocab_size: int | None = None) -> None:
    """Raise :class:`CheckpointError` naming every difference between ``state`` and ``model``.

    Checks the vocabulary sizes against the embedding tables first (the
    commonest mismatch: a checkpoint from a run with another ``min_freq`` or
    ``limit``), then the parameter names and shapes.
    """
    problems = []
    for key, size, what in (("src_embed.table.weight", src_vocab_size, "source"), ("tgt_embed.table.weight", tgt_vocab_size, "target")):
        if size is not None and key in state and state[key].shape[0] != size:
            problems.append(f"the {what} vocabulary has {size} tokens but the checkpoint's {key} has {state[key].shape[0]} rows")
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shapes = [f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(v.shape)}" for k, v in expected.items() if k in state and state[k].shape != v.shape]
    if missing:
        problems.append(f"missing parameters {missing[:5]}{' …' if len(missing) > 5 else ''}")
    if unexpected:
        problems.append(f"unexpected parameters {unexpected[:5]}{' …' if len(unexpected) > 5 else ''}")
    if shapes:
        problems.append(f"shape mismatches {shapes[:5]}{' …' if len(shapes) > 5 else ''}")
    if problems:
        raise CheckpointError("the checkpoint does not fit the model: " + "; ".join(problems))


def read_checkpoint(path: str | os.PathLike, map_location: str | torch.device | None = "cpu") -> dict:
    """The raw checkpoint dict, loaded with ``weights_only=True``; bad files raise :class:`CheckpointError`."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # zip/pickle errors, truncation, and "unsupported global" from weights_only
        raise CheckpointError(f"{path} is not a readable checkpoint ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})") from err
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} is not a transformer_lessons checkpoint (no 'format': {CHECKPOINT_FORMAT!r})")
    if ckpt.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(f"{path} has checkpoint version {ckpt.get('version')!r}; this code reads version {CHECKPOINT_VERSION}")
    for key in ("model", "model_config", "src_vocab", "tgt_vocab"):
        if key not in ckpt:
            raise CheckpointError(f"{path} lacks the entry {key!r}; it is damaged or was written by other code")
    return ckpt


def load_checkpoint(path: str | os.PathLike, device: str | torch.device | None = None) -> tuple[Transformer, "Vocab", "Vocab", dict]:
    """Rebuild a trained model and its vocabularies from a checkpoint file.

    Works for the training checkpoints (``last.pt``, ``best.pt``) and for
    :func:`export_for_inference` files. The model comes back in eval mode, in
    float32, on ``device`` (default: CUDA if available, else CPU).

    Returns:
        ``(model, src_vocab, tgt_vocab, info)``; ``info`` holds everything else
        (``train_config``, ``step``, ``epoch``, ``history``, ``path``, …).

    Raises:
        CheckpointError: the file is missing or unreadable, or its weights do
            not fit the model its config describes (the message lists what differs).
    """
    device = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ckpt = read_checkpoint(path)
    try:
        config = ModelConfig(**ckpt["model_config"])
    except TypeError as err:
        raise CheckpointError(f"{path}: its model config does not match this code's ModelConfig ({err})") from err
    src_vocab = _vocab_from_dict(ckpt["src_vocab"], "source")
    tgt_vocab = _vocab_from_dict(ckpt["tgt_vocab"], "target")
    model = Transformer(config, len(src_vocab), len(tgt_vocab))
    state = dict(ckpt["model"])
    if config.tie_embeddings and "generator.weight" not in state and "tgt_embed.table.weight" in state:
        state["generator.weight"] = state["tgt_embed.table.weight"]  # exports store the tied matrix once
    check_state_fits(model, state, len(src_vocab), len(tgt_vocab))
    model.load_state_dict(state)  # copies (and casts fp16 -> fp32) into the fresh parameters
    model.to(device).eval()
    info = {k: v for k, v in ckpt.items() if k not in ("model", "optimizer", "scheduler", "rng", "src_vocab", "tgt_vocab")}
    info["path"] = str(path)
    return model, src_vocab, tgt_vocab, info


def _save_atomic(obj: Any, path: Path) -> None:
    # Write then rename: an interruption mid-save never leaves half a checkpoint.
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def export_for_inference(checkpoint: str | os.PathLike, path: str | os.PathLike, dtype: torch.dtype = torch.float16) -> int:
    """Write a small checkpoint for translation only: weights in ``dtype``, no optimizer state.

    The tied target embedding / output projection is stored once. The file
    loads with :func:`load_checkpoint` like any other (weights come back as
    float32). Returns the file's size in bytes (commit it only if small: < 20 MB).
    """
    ckpt = read_checkpoint(checkpoint)
    state = {}
    for key, tensor in ckpt["model"].items():
        if key == "generator.weight" and ckpt["model_config"].get("tie_embeddings"):
            continue
        state[key] = tensor.to(dtype) if tensor.is_floating_point() else tensor
    keep = ("model_config", "train_config", "src_vocab", "tgt_vocab", "step", "epoch", "best_val_bleu", "best_epoch", "history")
    small = {k: ckpt[k] for k in keep if k in ckpt}
    small.update(format=CHECKPOINT_FORMAT, version=CHECKPOINT_VERSION, model=state, dtype=str(dtype).replace("torch.", ""))
    _save_atomic(small, Path(path))
    return Path(path).stat().st_size


# --------------------------------------------------------------------------------------
# 5. The training loop
# --------------------------------------------------------------------------------------


def _progress_bar():
    """``tqdm.auto.tqdm``, or a silent stand-in where tqdm is not installed (a bare GPU box)."""
    try:
        from tqdm.auto import tqdm

        return tqdm
    except ImportError:

        class _Silent:
            def __init__(self, *args, **kwargs):
                pass

            def update(self, n=1):
                pass

            def set_postfix(self, **kwargs):
                pass

            def close(self):
                pass

        return _Silent


class _Stop(Exception):
    """Internal: leave the epoch loop early (max_steps reached)."""


#: The clock training time is measured with (a module attribute, so a test can drive it).
_clock = time.perf_counter


def autocast_dtype(device_type: str, capability: tuple[int, int] | None = None) -> torch.dtype | None:
    """The dtype :func:`train` runs autocast in on this device, or ``None`` for plain float32.

    bfloat16 on NVIDIA GPUs of compute capability 8.0 or newer (Ampere, e.g. A100,
    RTX 30xx, and later: H100), which have bf16 tensor cores. Older GPUs (Colab's
    free T4 is 7.5) have none and emulate bf16 slower than they run float32, so
    they train in float32. (float16 autocast would be faster there, but it needs
    loss scaling, ``torch.amp.GradScaler``, with the gradients unscaled before
    clipping and overflowing steps skipped: a second training step we keep out of
    a course's loop.) CPUs train in float32 too.

    Args:
        device_type: ``"cuda"`` or ``"cpu"`` (``torch.device.type``).
        capability: ``torch.cuda.get_device_capability(device)``, e.g. ``(9, 0)`` for an H100.
    """
    if device_type != "cuda" or capability is None:
        return None
    return torch.bfloat16 if tuple(capability) >= (8, 0) else None


def autocast_for(device: torch.device):
    """``(dtype, autocast)`` for training on ``device``: :func:`autocast_dtype`'s choice, and a
    callable that opens the matching ``torch.autocast`` context (a no-op context for float32).
    """
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    dtype = autocast_dtype(device.type, capability)
    if dtype is None:
        return None, nullcontext
    return dtype, lambda: torch.autocast(device.type, dtype=dtype)


@contextmanager
def fused_attention(model: Transformer):
    """Inside the block no attention layer records its weights, so all take the fused kernel.

    In eval mode :class:`~transformer_lessons.attention.MultiHeadAttention`
    keeps each call's weights for the plots, computing them with an explicit
    softmax, which is slower than ``F.scaled_dot_product_attention``.
    Validation and test decoding need only the outputs (the same up to float
    rounding). Each layer's own setting comes back afterwards.
    """
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    before = [m.record_weights for m in layers]
    model.set_record_attention(False)
    try:
        yield model
    finally:
        for layer, record in zip(layers, before):
            layer.record_weights = record


def _make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    if config.weight_decay > 0:
        # Decay matrices only: shrinking biases and LayerNorm gains towards 0 is not regularisation.
        decay = [p for p in model.parameters() if p.dim() >= 2]
        rest = [p for p in model.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": rest, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=1.0, betas=config.betas, eps=config.eps)
    return torch.optim.Adam(model.parameters(), lr=1.0, betas=config.betas, eps=config.eps)


def _rng_state() -> dict:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    # RNG states are CPU ByteTensors even when the checkpoint was mapped to the GPU.
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def train_step(model: nn.Module, batch, criterion: nn.Module, optimizer: torch.optim.Optimizer, scheduler=None,
               clip_norm: float | None = None, autocast=nullcontext) -> torch.Tensor:
    """One update of ``model`` on ``batch``: the training step of every loop in the course.

    Forward (teacher forcing: the decoder reads ``batch.tgt_in`` and is scored on
    ``batch.tgt_out``), the loss, backward, gradient clipping, the optimizer's
    update and the schedule's. ``batch`` is a :class:`~transformer_lessons.data.Batch`
    or anything with its ``src, tgt_in, tgt_out, src_mask, tgt_mask``.

    A NaN or infinite loss (or gradient norm) raises :class:`DivergedError`
    *before* the optimizer changes a weight, so the model stays as it was.

    Returns:
        The loss, a detached 0-dim tensor on the model's device.
    """
    model.train()
    with autocast():
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (B, T, V)
        loss = criterion(logits, batch.tgt_out)
    if not torch.isfinite(loss):
        raise DivergedError(f"the loss is {loss.item()}")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip_norm:
        norm = nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        if not torch.isfinite(norm):
            optimizer.zero_grad(set_to_none=True)
            raise DivergedError(f"the gradient norm is {norm.item()} (the loss was {loss.item():.4g})")
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.detach()


@torch.no_grad()
def validation_loss(model: Transformer, corpus: "Corpus", split: str, criterion: LabelSmoothingLoss, max_tokens: int, device: torch.device, autocast=nullcontext) -> tuple[float, float]:
    """Teacher-forced ``(label-smoothed loss, perplexity)`` per target token on ``split``.

    The perplexity is ``exp`` of the plain cross-entropy (no smoothing), the
    number the paper's Table 3 reports.
    """
    model.eval()
    total, nll, tokens = 0.0, 0.0, 0
    for batch in corpus.batcher(split, max_tokens, shuffle=False, max_len=model.config.max_len):  # BLEU still sees every pair
        batch = batch.to(device)
        with autocast():
            logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (B, T, V)
        total += criterion(logits, batch.tgt_out, reduction="sum").item()
        nll += F.cross_entropy(logits.float().flatten(0, 1), batch.tgt_out.flatten(), ignore_index=criterion.pad_id, reduction="sum").item()
        tokens += batch.n_tokens
    return total / max(tokens, 1), math.exp(min(nll / max(tokens, 1), 50.0))


def train(
    config: TrainConfig | str | None = None,
    corpus: "Corpus | None" = None,
    out_dir: str | os.PathLike | None = None,
    device: str | torch.device | None = None,
    resume: bool = True,
    progress: bool = True,
    max_minutes: float | None = None,
    max_steps: int | None = None,
    data_dir: str | os.PathLike | None = None,
    evaluate_test: bool = True,
    log: bool | None = None,
) -> dict:
    """Train a German→English Transformer on Multi30k and evaluate it.

    Each epoch: one pass over the shuffled training batches (Adam, the Noam
    schedule, gradient clipping; autocast in :func:`autocast_dtype`'s choice,
    bf16 on Ampere or newer GPUs, float32 elsewhere), then the validation
    loss, and every ``eval_every`` epochs the validation BLEU of greedy
    decoding. ``out_dir`` receives ``last.pt`` (everything needed to
    resume) after every epoch, ``best.pt`` (the weights with the best
    validation BLEU), ``history.json``, and at the end ``metrics.json`` with the
    test BLEU of ``best.pt`` (beam ``config.beam_size``) and
    ``test_hypotheses.txt``.

    Resuming: when ``out_dir/last.pt`` exists and ``resume`` is true, the run
    continues exactly where it stopped (weights, optimizer, schedule, step,
    position inside the epoch, history, random state, time spent so far);
    raising ``epochs`` extends a finished run. Ctrl-C (``KeyboardInterrupt``)
    saves ``last.pt`` first and then re-raises, so an interrupted run loses nothing.

    Args:
        config: a :class:`TrainConfig`, a preset name (``"quick"``/``"full"``),
            or ``None`` for the preset of :func:`~transformer_lessons.config.compute_mode`.
        corpus: a prepared :class:`~transformer_lessons.data.Corpus`; default
            :func:`prepare_corpus_for` (the config's ``min_freq``, ``max_len``,
            ``limit`` and ``bpe_merges``).
        out_dir: where checkpoints and logs go (default ``runs/<config.name>``).
        device: default CUDA if available, else CPU.
        resume: continue from ``out_dir/last.pt`` if it exists.
        progress: tqdm progress bars with the live loss.
        max_minutes: stop once the run's training time reaches this many
            minutes (default ``config.max_minutes``), then evaluate as usual.
            It counts every call of a resumed run, and not the evaluation: a run
            stopped by it continues only when called with a larger value.
        max_steps: stop after this many updates in total, save ``last.pt``
            and return without the test evaluation (for tests and demos of resuming).
        data_dir: raw Multi30k files (see :func:`transformer_lessons.data.fetch`).
        evaluate_test: decode the test set at the end.
        log: print one line per epoch, on resuming, on a time-limit stop and
            for the test score (default: as ``progress``). The lines are printed
            whole and flushed, apart from the bars, so ``log=True,
            progress=False`` makes a clean log file.

    Returns:
        dict with ``history`` (one dict per epoch: epoch, step, train_loss,
        val_loss, val_ppl, val_bleu, lr, tokens_per_s, epoch_time_s, and
        elapsed_s, the wall time since the run began, all calls together),
        ``test`` (BLEU, signature, tutorial BLEU; ``None`` when skipped),
        ``best_epoch``, ``best_val_bleu``, ``step``, ``train_time_s`` (all
        calls), ``stopped`` (``"done"``, ``"time_limit"`` or ``"max_steps"``),
        ``out_dir``.
    """
    from transformer_lessons.decode import evaluate

    config = get_train_config(config)
    log = progress if log is None else log
    out = Path(out_dir) if out_dir is not None else default_out_dir(config.name)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    max_minutes = max_minutes if max_minutes is not None else config.max_minutes
    if corpus is None:
        corpus = prepare_corpus_for(config, data_dir, progress)
    else:
        _warn_if_corpus_differs(corpus, config)
    src_vocab, tgt_vocab = corpus.src_vocab, corpus.tgt_vocab
    for split in ("train", "val"):
        if split not in corpus.pairs:
            raise ValueError(f"the corpus has no {split!r} split; prepare it with splits including {split!r}")

    # --- model, optimizer, schedule: fresh or from last.pt ---
    call_start = _clock()
    torch.manual_seed(config.seed)
    random.seed(config.seed)
    model = Transformer(config.model, len(src_vocab), len(tgt_vocab)).to(device)
    optimizer = _make_optimizer(model, config)
    scheduler = noam_scheduler(optimizer, config.model.d_model, config.warmup, config.lr_factor)
    step, epoch, batch_in_epoch = 0, 0, 0
    sums = {"loss": 0.0, "tokens": 0, "time": 0.0}  # the epoch in progress
    totals = {"train_s": 0.0, "wall_s": 0.0}  # the whole run before this call: training time, wall time
    history: list[dict] = []
    best_bleu, best_epoch = -1.0, None
    last_path, best_path = out / "last.pt", out / "best.pt"
    if resume and last_path.is_file():
        start_over = f"delete {last_path}, or start over with resume=False (command line: --no-resume)"
        try:
            ckpt = read_checkpoint(last_path, map_location=device)
        except CheckpointError as err:
            raise CheckpointError(f"cannot resume: {err}; {start_over}") from err
        missing = [k for k in ("optimizer", "scheduler", "step", "epoch", "batch_in_epoch", "epoch_sums", "history", "rng") if k not in ckpt]
        if missing:
            raise CheckpointError(f"cannot resume: {last_path} lacks the training state {missing} (is it a best.pt or an export?); {start_over}")
        if ckpt.get("model_config") != config.model.to_dict():
            raise CheckpointError(
                f"{last_path} was trained with model {ckpt.get('model_config')}, not {config.model.to_dict()}; "
                "use another out_dir, or resume=False (--no-resume) to start over"
            )
        if _vocab_from_dict(ckpt["src_vocab"], "source") != src_vocab or _vocab_from_dict(ckpt["tgt_vocab"], "target") != tgt_vocab:
            raise CheckpointError(
                f"{last_path} was trained with other vocabularies (source {len(ckpt['src_vocab']['itos'])}, target "
                f"{len(ckpt['tgt_vocab']['itos'])} tokens; this corpus: {len(src_vocab)}, {len(tgt_vocab)}): "
                "prepare the corpus with the run's min_freq/limit/max_len/bpe_merges, or start over with resume=False"
            )
        check_state_fits(model, ckpt["model"], len(src_vocab), len(tgt_vocab))
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        step, epoch, batch_in_epoch = ckpt["step"], ckpt["epoch"], ckpt["batch_in_epoch"]
        sums = dict(ckpt["epoch_sums"])
        history = list(ckpt["history"])
        best_bleu, best_epoch = ckpt["best_val_bleu"], ckpt["best_epoch"]
        # Checkpoints written before these were stored: rebuild them from the history.
        totals["train_s"] = ckpt.get("train_time_s", sum(h["epoch_time_s"] for h in history) + sums["time"])
        totals["wall_s"] = ckpt.get("wall_time_s", history[-1]["elapsed_s"] if history else 0.0)
        _set_rng_state(ckpt["rng"])
        if log:
            print(f"resuming {last_path}: epoch {epoch + 1}, step {step}", flush=True)

    criterion = LabelSmoothingLoss(len(tgt_vocab), tgt_vocab.pad_id, config.smoothing)
    use_cuda = device.type == "cuda"
    amp_dtype, autocast = autocast_for(device)
    step_model = torch.compile(model, dynamic=True) if (config.compile and use_cuda) else model
    for split in ("train", "val"):
        skipped = corpus.too_long(split, config.model.max_len)
        if skipped:
            warnings.warn(
                f"{skipped} {split} pair(s) have a side of {config.model.max_len} or more tokens, more than the model's "
                f"max_len={config.model.max_len} holds with <bos>/<eos>; they are left out of "
                f"{'training' if split == 'train' else 'the validation loss (BLEU still translates them, cut to fit)'}. "
                "Raise model.max_len or set max_len to filter the training data.",
                stacklevel=2,
            )
    batcher = corpus.batcher("train", config.max_tokens, shuffle=True, seed=config.seed, max_len=config.model.max_len)
    n_params = model.num_parameters()

    def wall_seconds() -> float:
        return totals["wall_s"] + (_clock() - call_start)

    def checkpoint_dict(with_training_state: bool = True) -> dict:
        ckpt = {
            "format": CHECKPOINT_FORMAT,
            "version": CHECKPOINT_VERSION,
            "model_config": config.model.to_dict(),
            "train_config": config.to_dict(),
            "src_vocab": src_vocab.to_dict(),
            "tgt_vocab": tgt_vocab.to_dict(),
            "model": model.state_dict(),
            "step": step,
            "epoch": epoch,
            "history": history,
            "best_val_bleu": best_bleu,
            "best_epoch": best_epoch,
        }
        if with_training_state:
            ckpt.update(
                optimizer=optimizer.state_dict(),
                scheduler=scheduler.state_dict(),
                batch_in_epoch=batch_in_epoch,
                epoch_sums=dict(sums),
                rng=_rng_state(),
                train_time_s=totals["train_s"],  # the run's training time so far, every call together
                wall_time_s=wall_seconds(),
            )
        return ckpt

    pending = {"loss": torch.zeros((), device=device), "since": _clock()}  # this epoch, not yet in sums

    def flush() -> None:
        # Move the device-side loss sum and the elapsed training time into `sums` and `totals` (one sync).
        sums["loss"] += pending["loss"].item()
        now = _clock()
        sums["time"] += now - pending["since"]
        totals["train_s"] += now - pending["since"]
        pending["loss"].zero_()
        pending["since"] = now

    def time_is_up() -> bool:
        # The run's training time (all calls) against the cap; the clock runs only while training.
        return max_minutes is not None and totals["train_s"] + (_clock() - pending["since"]) >= 60 * max_minutes

    def save_last() -> None:
        flush()
        _save_atomic(checkpoint_dict(), last_path)
        (out / "history.json").write_text(json.dumps(history, indent=1))

    stopped = "done"
    try:
        while epoch < config.epochs:
            model.train()
            batcher.set_epoch(epoch)  # each epoch's order depends only on (seed, epoch): resumable
            bar = _progress_bar()(total=len(batcher), desc=f"epoch {epoch + 1}/{config.epochs}", disable=not progress, leave=False, initial=batch_in_epoch)
            pending["since"] = _clock()
            for i, batch in enumerate(batcher):
                if i < batch_in_epoch:
                    continue  # already trained on before the interruption
                if time_is_up():  # checked before the step: a run resumed with no time left trains nothing
                    stopped = "time_limit"
                    break
                batch = batch.to(device)
                with autocast():
                    logits = step_model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (B, T, V)
                    loss = criterion(logits, batch.tgt_out)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if config.clip_norm:
                    nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
                optimizer.step()
                scheduler.step()
                step += 1
                batch_in_epoch = i + 1
                pending["loss"] += loss.detach() * batch.n_tokens  # summed on the device: no sync every step
                sums["tokens"] += batch.n_tokens
                bar.update(1)
                if progress and (step % 10 == 0 or i + 1 == len(batcher)):
                    bar.set_postfix(loss=f"{loss.item():.3f}", lr=f"{scheduler.get_last_lr()[0]:.2e}")
                if max_steps is not None and step >= max_steps:
                    stopped = "max_steps"
                    break
            flush()
            bar.close()
            if stopped == "max_steps":
                raise _Stop
            if stopped == "time_limit":  # inside an epoch: keep its position, do not log it as an epoch
                save_last()
                if log:
                    print(
                        f"time limit: {totals['train_s'] / 60:.1f} min of training (max_minutes={max_minutes}) used up in epoch "
                        f"{epoch + 1} after {batch_in_epoch}/{len(batcher)} batches, step {step}; saved {last_path}",
                        flush=True,
                    )
                break
            if time_is_up():
                stopped = "time_limit"  # the budget ended with this epoch: evaluate it as the last one

            # --- end of an epoch: validation, history, checkpoints ---
            val_bleu = None
            last_epoch = epoch + 1 == config.epochs or stopped != "done"
            with fused_attention(model):  # no attention weights kept: the fused kernel, faster
                val_loss, val_ppl = validation_loss(model, corpus, "val", criterion, config.max_tokens, device, autocast)
                if (epoch + 1) % config.eval_every == 0 or last_epoch:
                    limit = config.bleu_val_limit
                    val_bleu = evaluate(model, "val", corpus=corpus, src_vocab=src_vocab, tgt_vocab=tgt_vocab, beam_size=1, limit=limit, max_extra=config.max_output_extra)["bleu"]
            history.append(
                {
                    "epoch": epoch + 1,
                    "step": step,
                    "train_loss": sums["loss"] / max(sums["tokens"], 1),
                    "val_loss": val_loss,
                    "val_ppl": val_ppl,
                    "val_bleu": val_bleu,
                    "lr": scheduler.get_last_lr()[0],
                    "tokens_per_s": sums["tokens"] / max(sums["time"], 1e-9),
                    "epoch_time_s": sums["time"],
                    "elapsed_s": wall_seconds(),  # since the run began, every call together
                }
            )
            if log:
                h = history[-1]
                bleu_text = f", val BLEU {val_bleu:.2f}" if val_bleu is not None else ""
                print(
                    f"epoch {h['epoch']:>3}  step {step:>6}  train loss {h['train_loss']:.3f}  val loss {val_loss:.3f} "
                    f"(ppl {val_ppl:.1f}){bleu_text}  {h['tokens_per_s']:,.0f} tok/s",
                    flush=True,
                )
            if val_bleu is not None and val_bleu > best_bleu:
                best_bleu, best_epoch = val_bleu, epoch + 1
                _save_atomic(checkpoint_dict(with_training_state=False), best_path)
            epoch += 1
            batch_in_epoch = 0
            sums = {"loss": 0.0, "tokens": 0, "time": 0.0}
            pending["since"] = _clock()  # validation time is not training time
            save_last()
            if stopped != "done":
                if log:
                    print(f"time limit: {totals['train_s'] / 60:.1f} min of training (max_minutes={max_minutes}) used up after epoch {epoch}", flush=True)
                break
    except _Stop:
        save_last()
    except KeyboardInterrupt:
        save_last()
        print(f"\ninterrupted: saved {last_path} (step {step}); run again with resume to continue", flush=True)
        raise

    result = {
        "history": history,
        "step": step,
        "best_epoch": best_epoch,
        "best_val_bleu": best_bleu if best_epoch is not None else None,
        "train_time_s": totals["train_s"],
        "stopped": stopped,
        "out_dir": str(out),
        "test": None,
    }
    if stopped == "max_steps" or not evaluate_test or "test_2016_flickr" not in corpus.text:
        return result

    # --- the final test: the best weights, the paper's beam ---
    eval_model = model
    if best_path.is_file():
        eval_model, _, _, _ = load_checkpoint(best_path, device)
    with fused_attention(eval_model):
        test = evaluate(
            eval_model, "test_2016_flickr", corpus=corpus, src_vocab=src_vocab, tgt_vocab=tgt_vocab,
            beam_size=config.beam_size, length_penalty=config.length_penalty, progress=progress, max_extra=config.max_output_extra,
        )
    (out / "test_hypotheses.txt").write_text("\n".join(test.pop("hypotheses")) + "\n", encoding="utf-8")
    test.pop("references", None)
    # Whole epochs from the history, plus the epoch a time limit stopped inside (its counts are in `sums`).
    tokens = sum(h["tokens_per_s"] * h["epoch_time_s"] for h in history) + sums["tokens"]
    partial = round(batch_in_epoch / len(batcher), 3) if batch_in_epoch else 0  # 0.5: half-way through the next epoch
    train_time = totals["train_s"]
    import sacrebleu

    metrics = {
        "preset": config.name,
        "test_2016_flickr": test,
        "best_epoch": best_epoch,
        "best_val_bleu": result["best_val_bleu"],
        "epochs": len(history) + partial,
        "epochs_completed": len(history),
        "steps": step,
        "stopped": stopped,
        "train_time_s": train_time,  # every call of the run together, evaluation excluded
        "wall_time_s": wall_seconds(),  # every call together, evaluation included
        "train_tokens_per_s": tokens / max(train_time, 1e-9),
        "parameters": n_params,
        "device": _device_name(device),
        "autocast": str(amp_dtype).replace("torch.", "") if amp_dtype is not None else "float32",
        "torch": torch.__version__,
        "sacrebleu": sacrebleu.__version__,
        "train_config": config.to_dict(),
        "corpus": {k: len(v) for k, v in corpus.pairs.items()} | {"src_vocab": len(src_vocab), "tgt_vocab": len(tgt_vocab)},
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1, ensure_ascii=False), encoding="utf-8")
    result["test"] = test
    result["metrics"] = metrics
    if log:
        print(
            f"test_2016_flickr: sacreBLEU {test['bleu']:.2f} ({test['signature']}); "
            f"tutorial BLEU (lowercased, tokenized) {test['tutorial_bleu']:.2f}",
            flush=True,
        )
    return result
