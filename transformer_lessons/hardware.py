"""Which device a run uses, and the precision it computes in there.

- :func:`resolve_device`: a device string checked against what this machine has.
- :func:`autocast_dtype` / :func:`autocast_for`: bfloat16 on recent NVIDIA GPUs, float32 elsewhere,
  unless a run asks for a precision (``TrainConfig.precision``).
- :func:`cpu_has_native_bfloat16`: whether this CPU computes bfloat16 in hardware (``precision="native"``).
- :func:`device_name`: the device as a run's record names it.
"""

from __future__ import annotations

import platform
from contextlib import nullcontext
from pathlib import Path

import torch


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """``device`` as a :class:`torch.device` this machine has (default: CUDA if available, else CPU).

    Raises:
        ValueError: ``device`` is not a device name (``"gpu"``), or names one this
            machine lacks (``"cuda"`` without a GPU, ``"cuda:3"`` with one GPU). The
            message lists what is available.
    """
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    forms = "use cpu, cuda, cuda:N or mps"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"{device!r} is not a device; {forms}") from err
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"{device!r} needs a CUDA GPU and torch finds none on this machine; use cpu")
        if dev.index is not None and dev.index >= count:
            raise ValueError(
                f"{device!r} names GPU {dev.index}, but this machine has {count} (cuda:0 to cuda:{count - 1})"
            )
    elif dev.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ValueError(f"{device!r} (an Apple GPU) is not available on this machine; use cpu")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"{device!r} is not a device the course runs on; {forms}")
    return dev


def autocast_dtype(device_type: str, capability: tuple[int, int] | None = None) -> torch.dtype | None:
    """The dtype training runs autocast in on this device, or ``None`` for plain float32.

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


#: CPU flags (Linux /proc/cpuinfo) of bfloat16 arithmetic in hardware: AVX512-BF16 (Intel Cooper Lake and later
#: Xeons, AMD Zen 4 and later) and AMX (Intel Sapphire Rapids and later). Without them PyTorch converts.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_has_native_bfloat16(cpuinfo: str | None = None, system: str | None = None) -> bool:
    """Whether this CPU computes bfloat16 in hardware, so that bfloat16 autocast makes training steps faster.

    Linux: one of :data:`BF16_CPU_FLAGS` in ``/proc/cpuinfo`` (``cpuinfo`` replaces the file, for tests), or an Arm
    CPU's ``bf16`` feature. Elsewhere (Windows, macOS) ``False``: float32, the safe choice. On a Mac, PyTorch's
    float32 products already run on Apple's matrix units, and bfloat16 autocast was not measured to pay there.
    """
    if (system or platform.system()) != "Linux":
        return False
    try:
        text = cpuinfo if cpuinfo is not None else Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return False
    flags = {word for line in text.splitlines() if line.startswith(("flags", "Features")) for word in line.split()}
    return any(flag in flags for flag in (*BF16_CPU_FLAGS, "bf16"))  # "bf16": an Arm CPU's feature


def autocast_for(device: torch.device, precision: str = "auto"):
    """``(dtype, autocast)`` for training on ``device``: the dtype autocast computes in, and a
    callable that opens the matching ``torch.autocast`` context (a no-op context for float32).

    ``precision`` is ``TrainConfig.precision``: ``"auto"`` is :func:`autocast_dtype`'s choice,
    ``"native"`` is that choice or, on a CPU that computes bfloat16 in hardware
    (:func:`cpu_has_native_bfloat16`), bfloat16; ``"bfloat16"`` autocasts on any device (a CPU
    included), ``"float32"`` never does. Autocast
    runs the matrix products in bfloat16; the weights, their gradients and Adam's state stay
    float32, and the loss computes its log-softmax in float32 (:mod:`.loss`), as does the
    attention's softmax (the fused kernel accumulates in float32; the explicit one casts).
    """
    if precision == "float32":
        return None, nullcontext
    if precision == "bfloat16":
        dtype = torch.bfloat16
    elif precision in ("auto", "native"):
        capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
        dtype = autocast_dtype(device.type, capability)
        if precision == "native" and device.type == "cpu" and cpu_has_native_bfloat16():
            dtype = torch.bfloat16
    else:
        raise ValueError(f"precision must be auto, native, float32 or bfloat16, got {precision!r}")
    if dtype is None:
        return None, nullcontext
    return dtype, lambda: torch.autocast(device.type, dtype=dtype)


def device_name(device: torch.device) -> str:
    """``"NVIDIA H100 80GB HBM3"`` or ``"cpu (x86_64, 2 threads)"``: the device as a run's record names it."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


__all__ = ["autocast_dtype", "autocast_for", "cpu_has_native_bfloat16", "device_name", "resolve_device"]
