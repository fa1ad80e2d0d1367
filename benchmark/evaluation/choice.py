"""`auto`: the shortlist arithmetic by a rule on the device's facts, never by a timing.

float32 below `SMALL_MACS` multiply-adds (a small evaluation's products cost less than another
arithmetic's copies and scans save); above it bfloat16 where the device multiplies it natively
(x86 AVX-512-BF16 or AMX, ARM BF16, CUDA compute capability ≥ 8; on a CPU, with oneDNN free to
use those instructions: `onednn_bfloat16`), float32 elsewhere (converted bfloat16 blocks cost
more than float32's own). Every arithmetic is exact, so the rule moves time and memory, never the
metrics. The measurements per CPU kind: docs/benchmarks/evaluation.md.
"""

from __future__ import annotations

import torch

from benchmark.evaluation.arithmetic import SMALL_MACS, cpu_flags, onednn_cap
from benchmark.evaluation.sets import EvaluationSets

# /proc/cpuinfo flags of native bfloat16 products: x86 AVX-512-BF16 and AMX, ARM BF16.
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
# oneDNN's x86 ISA caps below AVX512_CORE_BF16: capped there, it converts bfloat16 in software.
NO_BF16_ISAS = frozenset(
    {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}
)


def choose(sets: EvaluationSets, device: torch.device) -> str:
    """The arithmetic `auto` runs for these sets on `device` (see the module docstring)."""
    if product_macs(sets) < SMALL_MACS:
        return "float32"
    return "bfloat16" if native_bfloat16(device) else "float32"


def native_bfloat16(device: torch.device) -> bool:
    """Whether `device` multiplies bfloat16 natively: on a CPU, by its feature flags (torch's
    capability string says AVX512 for CPUs with and without AVX-512-BF16, so it cannot tell)."""
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device)[0] >= 8
    return bool(cpu_flags() & BF16_FLAGS) and onednn_bfloat16()


def onednn_bfloat16() -> bool:
    """Whether torch's bfloat16 CPU products may use the CPU's bfloat16 instructions: they run in
    oneDNN, unless it is switched off (`torch.backends.mkldnn`) or capped below them
    (`ONEDNN_MAX_CPU_ISA=AVX2`, how the house emulates an AVX2-only CPU). Either way torch
    computes them in software, slower than float32's products."""
    enabled = torch.backends.mkldnn.is_available() and bool(torch.backends.mkldnn.enabled)
    return enabled and onednn_cap() not in NO_BF16_ISAS


def product_macs(sets: EvaluationSets) -> int:
    """Multiply-adds of the evaluation's shortlist products (same_set computes each pair once)."""
    n_q, n_g, dim = sets.query.shape[0], sets.gallery.shape[0], sets.query.shape[1]
    pairs = n_q * (n_q + 1) // 2 if sets.same_set else n_q * n_g
    return pairs * dim
