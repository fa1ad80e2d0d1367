"""What a computation ran on: the device, the GPU's name, and how float32 products were done.

Results rows and the feature cache's keys record these, since the same weights give other
features and metrics on a GPU, and under TF32 (10-bit mantissa products, the default of cuDNN
convolutions, and of matrix products after `torch.set_float32_matmul_precision("high")` or
`torch.backends.cuda.matmul.allow_tf32 = True`) than in IEEE float32.
"""

from __future__ import annotations

import os
from typing import Any

import torch

# torch.get_float32_matmul_precision() -> what the product does, per device type
_LEGACY_MATMUL = {
    "cuda": {"highest": "ieee", "high": "tf32", "medium": "tf32"},
    "cpu": {"highest": "ieee", "high": "tf32", "medium": "bf16"},
}


def _new_api(backend: Any) -> str:
    """A torch ≥ 2.9 per-backend `fp32_precision` ("none" defers to the generic setting), or
    "" where this torch has none."""
    try:
        value = str(backend.fp32_precision)
    except (AttributeError, RuntimeError):
        return ""
    if value == "none":
        value = str(getattr(torch.backends, "fp32_precision", "none"))
    return "ieee" if value == "none" else value


def matmul_mode(device_type: str) -> str:
    """How float32 matrix products run on `device_type` ("cuda" or "cpu"): ieee, tf32 or bf16."""
    backend = (
        torch.backends.cuda.matmul
        if device_type == "cuda"
        else getattr(torch.backends.mkldnn, "matmul", None)
    )
    found = _new_api(backend) if backend is not None else ""
    if found:
        return found
    table = _LEGACY_MATMUL["cuda" if device_type == "cuda" else "cpu"]
    return table[torch.get_float32_matmul_precision()]


def conv_mode(device_type: str) -> str:
    """How float32 convolutions run on `device_type`: ieee or tf32 (cuDNN's default)."""
    if device_type == "cuda":
        found = _new_api(getattr(torch.backends.cudnn, "conv", None))
        return found or ("tf32" if torch.backends.cudnn.allow_tf32 else "ieee")
    return _new_api(getattr(torch.backends.mkldnn, "conv", None)) or "ieee"


def chosen_device(choice: str) -> torch.device:
    """The device a `device` setting names: "cpu", "cuda", or for "auto" CUDA where torch sees
    it, else the CPU; ValueError for "cuda" without one (callers name their setting)."""
    cuda = torch.cuda.is_available()
    if choice == "cuda" and not cuda:
        raise ValueError("torch sees no CUDA device")
    return torch.device("cuda" if choice == "cuda" or (choice == "auto" and cuda) else "cpu")


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the OS has one), at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return cores or 1


def float32_modes(device_type: str) -> str:
    """`matmul M, conv C` for `device_type`, e.g. "matmul ieee, conv tf32" (CUDA's default)."""
    return f"matmul {matmul_mode(device_type)}, conv {conv_mode(device_type)}"


def gpu_name(device: torch.device) -> str:
    """The CUDA device's name ("NVIDIA H100 80GB HBM3"); "" for any other device."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else ""


def precision_label(trainer_precision: str, device_type: str) -> str:
    """A run's precision: the Trainer's ("32-true", "bf16-mixed") with the float32 modes,
    e.g. "bf16-mixed (matmul ieee, conv tf32)"."""
    return f"{trainer_precision} ({float32_modes(device_type)})"
