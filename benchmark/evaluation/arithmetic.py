"""The shortlist's arithmetic: which low-precision product fills each similarity block.

Every arithmetic keeps the evaluator exact (`ranks` re-checks whatever its bound leaves
undecided); they differ in speed, which depends on the hardware. `float32` multiplies float32
unit vectors; `bfloat16` and `float16` round them and sum in float32 (bfloat16 blocks come out
in bfloat16 on the CPU, and a CPU multiplies float16 values as float32). Each one's bound
(`similarity.shortlist_error` and `output_error`) is tabled in docs/evaluation/exactness.md.

`auto` takes float32 or bfloat16 by a rule on the device's facts (`choice`); the argument
`arithmetic=` of `RetrievalEvaluator`, else the environment variable CIRCLEBENCH_EVAL_ARITHMETIC,
overrides it. A named arithmetic runs even where the hardware lacks it, in a slow form with the
same bound.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from benchmark.evaluation.bands import Block
from benchmark.evaluation.cuda_blocks import CudaShortlist
from benchmark.evaluation.faiss_blocks import FaissShortlist
from benchmark.evaluation.precision import ieee_float32
from benchmark.evaluation.similarity import LowCopy

Arithmetic = Literal["auto", "bfloat16", "float16", "float32"]
ARITHMETICS: tuple[str, ...] = ("auto", "bfloat16", "float16", "float32")
ENV_VAR = "CIRCLEBENCH_EVAL_ARITHMETIC"
LOW_DTYPES = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
}
# Below it, `auto` takes float32 whatever the device: CUB's and Cars196's test sets are below,
# Market-1501, SOP and MSMT17 above (docs/evaluation/exactness.md).
SMALL_MACS = 2**35


def refusal(value: str, where: str) -> str:
    """Why `value` (from `where`) is not an arithmetic, and the fix."""
    gone = " (int8 was removed: it was never faster than auto's pick)" if value == "int8" else ""
    return f"{where} must be one of {list(ARITHMETICS)}, got {value!r}{gone}"


def requested(argument: str) -> str:
    """The arithmetic asked for: `argument`, or if it is "auto" the environment variable's."""
    if argument not in ARITHMETICS:
        raise ValueError(refusal(argument, "arithmetic"))
    if argument != "auto":
        return argument
    env = os.environ.get(ENV_VAR, "auto").strip() or "auto"
    if env not in ARITHMETICS:
        raise ValueError(refusal(env, ENV_VAR) + "; set it to one of those or unset it")
    return env


def sgemm() -> str:
    """ "numpy" or "torch": whose float32 product the CPU blocks use, by the CPU's vendor, never
    by a timing: numpy's BLAS (OpenBLAS) on AMD, torch's (MKL) elsewhere, the faster on each
    kind (docs/benchmarks/evaluation.md)."""
    return "numpy" if cpu_field("vendor_id") == "AuthenticAMD" else "torch"


def block(device: torch.device, *, faiss: bool = False) -> Block:
    """The block function (gallery copy) -> Shortlist on `device`: faiss's float32
    product (`backend="faiss"`), else torch's in the copies' dtype, float32 on the CPU by
    `sgemm`'s engine (every engine gives the same metrics: the re-check is exact)."""
    if faiss:
        return lambda gallery: FaissShortlist(gallery, device)
    if device.type == "cuda":
        return CudaShortlist
    engine = sgemm()
    return lambda gallery: CpuShortlist(gallery, engine)


class CpuShortlist:
    """float32 or bfloat16 products on the CPU (float16 as a float32 product of its values).

    One output buffer is reused by every call (a fresh block per call spends as long in page
    faults as in the product), filled in gallery tiles of `_TILE` columns (a tile's operands stay
    in cache). The returned block is a view of the buffer: valid until the next call.
    """

    _TILE = 8192

    def __init__(self, gallery: LowCopy, engine: str = "torch") -> None:
        self._gallery = gallery.values
        self.readout = torch.bfloat16 if self._gallery.dtype == torch.bfloat16 else torch.float32
        self._buffer = torch.empty(0, dtype=self.readout)
        self._numpy = engine == "numpy" and self._gallery.dtype == torch.float32

    def __call__(self, q: Tensor, start: int) -> Tensor:
        g = self._gallery[start:]
        size = q.shape[0] * g.shape[0]
        if self._buffer.numel() < size:
            self._buffer = torch.empty(size, dtype=self.readout)
        out = self._buffer[:size].view(q.shape[0], g.shape[0])
        upcast = g.dtype == torch.float16  # exact: float16 products fit in float32
        q = q.float() if upcast else q
        if self._numpy:  # numpy's BLAS writes into the strided buffer slice as well
            q_np, g_np, out_np = q.numpy(), g.numpy(), out.numpy()
            for c in range(0, g.shape[0], self._TILE):
                np.matmul(q_np, g_np[c : c + self._TILE].T, out=out_np[:, c : c + self._TILE])
            return out
        with ieee_float32():
            for c in range(0, g.shape[0], self._TILE):
                tile = g[c : c + self._TILE]
                tile = tile.float() if upcast else tile
                torch.mm(q, tile.T, out=out[:, c : c + self._TILE])
        return out


def cpu_flags() -> set[str]:
    """The CPU's feature flags (x86 `flags`, ARM `Features`) from /proc/cpuinfo; empty elsewhere."""
    return set((cpu_field("flags") or cpu_field("Features")).split())


ISA_CAPS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")  # oneDNN's name for it, and its old one


def onednn_cap() -> str:
    """The ISA that the environment caps oneDNN at (`ONEDNN_MAX_CPU_ISA`, else `DNNL_MAX_CPU_ISA`),
    upper-case; "" when neither is set."""
    return next((os.environ[n].strip().upper() for n in ISA_CAPS if os.environ.get(n)), "")


def cpu_field(key: str) -> str:
    """The value of the first /proc/cpuinfo line named `key`; "" where there is none."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == key:
            return value.strip()
    return ""
