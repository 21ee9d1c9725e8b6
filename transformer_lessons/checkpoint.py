"""Checkpoints: saving a run, loading a trained model back, and exporting a small file to translate with.

A checkpoint is a dict of plain Python types and tensors (state dicts, the
configs as dicts, the vocabularies as lists), so it loads with
``torch.load(path, weights_only=True)``: loading one never runs pickled code.
Every file is written atomically (:mod:`transformer_lessons.atomic`), and a
checkpoint whose weights are not finite is never loaded.

- :func:`save_checkpoint`: write one (atomically).
- :func:`read_checkpoint`: the raw dict, with a plain answer for anything that is not a checkpoint.
- :func:`load_checkpoint`: the model and its vocabularies, ready to translate.
- :func:`export_for_inference`: a small float16 copy without the training state.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from transformer_lessons.atomic import atomic_write
from transformer_lessons.config import ModelConfig
from transformer_lessons.errors import CheckpointError, DataError
from transformer_lessons.model import Transformer

if TYPE_CHECKING:
    from transformer_lessons.data import Vocab

CHECKPOINT_FORMAT = "transformer_lessons.checkpoint"
CHECKPOINT_VERSION = 1
#: What a file must hold to be rebuilt into a model.
REQUIRED_KEYS = ("model", "model_config", "src_vocab", "tgt_vocab")
#: The training state in ``last.pt`` beside the weights; ``best.pt`` and exports have none of it.
TRAINING_STATE_KEYS = ("optimizer", "scheduler", "rng", "batch_in_epoch", "epoch_sums")


def save_checkpoint(ckpt: dict, path: str | os.PathLike) -> Path:
    """Write ``ckpt`` to ``path`` atomically: the old file stays whole until the new one is complete.

    An ``OSError`` (a full disk, a read-only folder) leaves no temporary file behind and goes on to the
    caller, naming ``path``. ``torch.save`` reports a write that failed half-way (a full disk, mostly)
    as a ``RuntimeError`` from its zip writer ("PytorchStreamWriter failed writing file ..."): that
    one becomes an ``OSError`` too, naming ``path`` and the space left on its disk.
    """
    try:
        return atomic_write(path, lambda tmp: torch.save(ckpt, tmp))
    except RuntimeError as err:
        if not _WRITER_FAILED.search(str(err)):
            raise
        raise OSError(errno.EIO, _why_not_written(Path(path), err), str(path)) from err


#: What torch.save's zip writer (caffe2's inline_container.cc) says when a write to the file fails.
_WRITER_FAILED = re.compile(r"PytorchStreamWriter failed|file write failed|inline_container|unexpected pos")


def _why_not_written(path: Path, err: RuntimeError) -> str:
    """The reason printed after the file's name: what failed, the free space, that nothing was replaced, what to do."""
    try:
        free = f"with the partial file removed, {shutil.disk_usage(path.parent).free / 1e6:,.0f} MB are free there"
    except OSError:
        free = "its free space is unknown"
    detail = (
        str(err).splitlines()[0].split("] ", 1)[-1].strip(" .")
    )  # "[enforce fail at inline_container.cc:672] . x" -> "x"
    kept = f"the earlier {path.name} is intact" if path.is_file() else "no file was left"
    return (
        f"could not be written, PyTorch's writer failed ({detail}): most likely the disk is full ({free}). "
        f"Nothing was replaced ({kept}); free some space and run the same command again"
    )


def _why_unreadable(path: Path, err: Exception) -> str:
    """A plain sentence for a file ``torch.load(weights_only=True)`` refused."""
    text = str(err)
    blocked = re.search(r"GLOBAL ([\w.]+)", text)  # "unsupported GLOBAL posix.system whose module posix is blocked"
    if blocked:
        return (
            f"{path} asks to run code ({blocked.group(1)}) when loaded, which a checkpoint never needs: it was refused "
            "and not loaded. Use only checkpoints you trained or got from a source you trust"
        )
    head = path.read_bytes()[:64]
    if head.startswith(b"version https://git-lfs"):
        return f"{path} is a Git LFS pointer, not the checkpoint itself: run 'git lfs pull', or download the file"
    if head[:2] != b"PK":
        return f"{path} is not a PyTorch checkpoint (it is not a zip archive made by torch.save); it may be another kind of file"
    return f"{path} is a damaged PyTorch checkpoint (truncated or corrupt: {type(err).__name__}); train or download it again"


def read_checkpoint(path: str | os.PathLike, map_location: str | torch.device | None = "cpu") -> dict:
    """The raw checkpoint dict, loaded with ``weights_only=True``; anything else raises :class:`CheckpointError`."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder, not a checkpoint file (did you mean {path / 'best.pt'}?)")
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    if path.stat().st_size == 0:
        raise CheckpointError(
            f"{path} is empty (0 bytes): a save was cut off or the copy failed; train or download it again"
        )
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # zip/pickle errors, truncation, and "unsupported global" from weights_only
        raise CheckpointError(_why_unreadable(path, err)) from err
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"{path} is a PyTorch file but not a transformer_lessons checkpoint (no 'format': {CHECKPOINT_FORMAT!r})"
        )
    if ckpt.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(
            f"{path} has checkpoint version {ckpt.get('version')!r}; this code reads version {CHECKPOINT_VERSION}"
        )
    for key in REQUIRED_KEYS:
        if key not in ckpt:
            raise CheckpointError(f"{path} lacks the entry {key!r}; it is damaged or was written by other code")
    return ckpt


def non_finite_tensors(state: dict[str, torch.Tensor]) -> list[str]:
    """Names of the floating-point tensors in ``state`` that hold a NaN or an infinity."""
    return [
        k
        for k, v in state.items()
        if torch.is_tensor(v) and v.is_floating_point() and not bool(torch.isfinite(v).all())
    ]


def vocab_from_dict(data: dict, what: str) -> "Vocab":
    """A :class:`~transformer_lessons.data.Vocab` from a checkpoint's dict; a damaged one raises :class:`CheckpointError`."""
    from transformer_lessons.data import Vocab

    try:
        return Vocab.from_dict(data)
    except (DataError, ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"the checkpoint's {what} vocabulary is damaged: {err}") from err


def check_state_fits(
    model: nn.Module,
    state: dict[str, torch.Tensor],
    src_vocab_size: int | None = None,
    tgt_vocab_size: int | None = None,
) -> None:
    """Raise :class:`CheckpointError` naming every difference between ``state`` and ``model``.

    Checks the vocabulary sizes against the embedding tables first (the
    commonest mismatch: a checkpoint from a run with another ``min_freq`` or
    ``limit``), then the parameter names and shapes.
    """
    problems = []
    for key, size, what in (
        ("src_embed.table.weight", src_vocab_size, "source"),
        ("tgt_embed.table.weight", tgt_vocab_size, "target"),
    ):
        if size is not None and key in state and state[key].shape[0] != size:
            problems.append(
                f"the {what} vocabulary has {size} tokens but the checkpoint's {key} has {state[key].shape[0]} rows"
            )
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shapes = [
        f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(v.shape)}"
        for k, v in expected.items()
        if k in state and state[k].shape != v.shape
    ]
    for what, items in (
        ("missing parameters", missing),
        ("unexpected parameters", unexpected),
        ("shape mismatches", shapes),
    ):
        if items:
            problems.append(f"{what} {items[:5]}{' …' if len(items) > 5 else ''}")
    if problems:
        raise CheckpointError("the checkpoint does not fit the model: " + "; ".join(problems))


def load_checkpoint(
    path: str | os.PathLike, device: str | torch.device | None = None
) -> tuple[Transformer, "Vocab", "Vocab", dict]:
    """Rebuild a trained model and its vocabularies from a checkpoint file.

    Works for the training checkpoints (``last.pt``, ``best.pt``) and for
    :func:`export_for_inference` files. The model comes back in eval mode, in
    float32, on ``device`` (default: CUDA if available, else CPU).

    Returns:
        ``(model, src_vocab, tgt_vocab, info)``; ``info`` holds everything else
        (``train_config``, ``step``, ``epoch``, ``history``, ``path``, …).

    Raises:
        CheckpointError: the file is missing or unreadable, its config builds no
            model, its weights are not finite (the run that wrote it diverged), or they do not fit the model
            its config describes (the message lists what differs).
    """
    device = (
        torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    )
    ckpt = read_checkpoint(path)
    try:
        config = ModelConfig(**ckpt["model_config"])
    except TypeError as err:
        raise CheckpointError(f"{path}: its model config does not match this code's ModelConfig ({err})") from err
    src_vocab = vocab_from_dict(ckpt["src_vocab"], "source")
    tgt_vocab = vocab_from_dict(ckpt["tgt_vocab"], "target")
    try:
        model = Transformer(config, len(src_vocab), len(tgt_vocab))
    except (
        Exception
    ) as err:  # a config no model can have (n_heads not dividing d_model, positional='banana', a size < 1)
        raise CheckpointError(
            f"{path}: its model config cannot build a model ({err}); the file is damaged or was written by other code: "
            "train it again, or use another checkpoint"
        ) from err
    state = dict(ckpt["model"])
    if config.tie_embeddings and "generator.weight" not in state and "tgt_embed.table.weight" in state:
        state["generator.weight"] = state["tgt_embed.table.weight"]  # exports store the tied matrix once
    check_state_fits(model, state, len(src_vocab), len(tgt_vocab))
    bad = non_finite_tensors(state)
    if bad:
        raise CheckpointError(
            f"{path} holds NaN or infinite weights ({', '.join(bad[:3])}{' …' if len(bad) > 3 else ''}): the run that wrote it "
            "diverged. Use an earlier checkpoint (best.pt), or train again with a lower lr_factor or a longer warmup"
        )
    model.load_state_dict(state)  # copies (and casts fp16 -> fp32) into the fresh parameters
    model.to(device).eval()
    info = {k: v for k, v in ckpt.items() if k not in ("model", "src_vocab", "tgt_vocab", *TRAINING_STATE_KEYS)}
    info["path"] = str(path)
    return model, src_vocab, tgt_vocab, info


def export_for_inference(
    checkpoint: str | os.PathLike, path: str | os.PathLike, dtype: torch.dtype = torch.float16
) -> int:
    """Write a small checkpoint for translation only: weights in ``dtype``, no optimizer state.

    The tied target embedding / output projection is stored once. The file
    loads with :func:`load_checkpoint` like any other (weights come back as
    float32). Returns the file's size in bytes (commit it only if small: < 20 MB).
    """
    ckpt = read_checkpoint(checkpoint)
    state: dict[str, Any] = {}
    for key, tensor in ckpt["model"].items():
        if key == "generator.weight" and ckpt["model_config"].get("tie_embeddings"):
            continue
        state[key] = tensor.to(dtype) if tensor.is_floating_point() else tensor
    keep = (
        "model_config",
        "train_config",
        "src_vocab",
        "tgt_vocab",
        "step",
        "epoch",
        "best_val_bleu",
        "best_epoch",
        "history",
    )
    small = {k: ckpt[k] for k in keep if k in ckpt}
    small.update(
        format=CHECKPOINT_FORMAT, version=CHECKPOINT_VERSION, model=state, dtype=str(dtype).replace("torch.", "")
    )
    save_checkpoint(small, path)
    return Path(path).stat().st_size


__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "CheckpointError",
    "check_state_fits",
    "export_for_inference",
    "load_checkpoint",
    "non_finite_tensors",
    "read_checkpoint",
    "save_checkpoint",
    "vocab_from_dict",
]
