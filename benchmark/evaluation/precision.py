"""The product arithmetic the shortlist bounds assume, whatever precision the caller allowed.

`similarity.shortlist_error` bounds float32 sums of exact products, which TF32/bfloat16 modes
for float32 products (`torch.set_float32_matmul_precision`, the legacy `allow_tf32`, torch ≥
2.9's `fp32_precision`) and cuBLAS's reduced-precision reductions break. torch ≥ 2.9 refuses a
product when its legacy and new TF32 settings disagree, so they are changed only through
`torch.set_float32_matmul_precision`, which sets both, and restored value by value.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

# cuBLAS flags that let bfloat16/float16 products sum in less than float32.
_REDUCTIONS = (
    "allow_bf16_reduced_precision_reduction",
    "allow_fp16_reduced_precision_reduction",
    "allow_fp16_accumulation",  # torch ≥ 2.7
)


def _fp32_backends() -> list[Any]:
    """The backends with a per-backend `fp32_precision` setting (torch ≥ 2.9)."""
    found = [torch.backends.cuda.matmul, getattr(torch.backends.mkldnn, "matmul", None)]
    return [b for b in found if b is not None and _has(b, "fp32_precision")]


def _reduction(matmul: Any, name: str) -> Any:
    """A cuBLAS flag's value as it can be set back: with its split-K part where torch has one."""
    value = getattr(matmul, name)
    return (value, getattr(matmul, f"{name}_split_k")) if _has(matmul, f"{name}_split_k") else value


def _has(backend: Any, name: str) -> bool:
    try:
        getattr(backend, name)
    except (AttributeError, RuntimeError):
        return False
    return True


@contextlib.contextmanager
def ieee_float32() -> Iterator[None]:
    """float32 products in IEEE float32 and float32 sums for bfloat16/float16 products, on the
    CPU (oneDNN) and CUDA (cuBLAS) alike; every setting is put back on exit."""
    matmul = torch.backends.cuda.matmul
    per_backend = [(b, b.fp32_precision) for b in _fp32_backends()]
    try:
        legacy: str | None = torch.get_float32_matmul_precision()
    except RuntimeError:  # torch ≥ 2.9 with per-backend settings the legacy value cannot name
        legacy = None
    reductions = {name: _reduction(matmul, name) for name in _REDUCTIONS if _has(matmul, name)}
    torch.set_float32_matmul_precision("highest")
    for name in reductions:
        setattr(matmul, name, False)
    try:
        yield
    finally:
        for name, value in reductions.items():
            setattr(matmul, name, value)
        if legacy is not None:
            torch.set_float32_matmul_precision(legacy)
        for backend, value in per_backend:
            backend.fp32_precision = value
