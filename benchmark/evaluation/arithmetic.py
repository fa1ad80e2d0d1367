"""The shortlist's arithmetic: which low-precision product fills each similarity block.

Every arithmetic keeps the evaluator exact (`ranks` re-checks whatever its bound leaves
undecided); they differ in speed, and the speed depends on the hardware.
Each block score s̃ is within ε of the reference s (`similarity.shortlist_error`, with
x̂ = x̃ + δx: ε = ||x̃||·||δy|| + ||δx||·||ỹ|| + ||δx||·||δy|| on the measured copies, plus
float32 accumulation γ_D = D·2⁻²⁴/(1 - D·2⁻²⁴) for floating-point sums, plus 2⁻²⁴), and the
block's output rounding is added per threshold:

- `float32`: float32 products and output; δ = 0, so ε ≈ γ_D + 2⁻²⁴ (≈ 3·10⁻⁵ at D = 512).
- `bfloat16`: bfloat16 inputs (||δ|| ≈ 2⁻⁹), float32 sums; bfloat16 output on the CPU
  (rounding P·2⁻⁹, `output_error`), float32 on CUDA (bfloat16 before torch 2.8,
  `cuda_blocks`). ε ≈ 0.004-0.006.
- `float16`: float16 inputs (||δ|| ≈ 2⁻¹²), float32 sums and output (on a CPU, a float32
  product of the float16 values: exact products, the same bound). ε ≈ 0.0005.

`auto` takes float32 or bfloat16 by a rule on the device's facts (`choice`). float32 blocks use
numpy's BLAS or torch's, whichever `sgemm` measured faster (torch's below `SMALL_MACS`, where
the measurement would cost more than it could save). The argument `arithmetic=` of
`RetrievalEvaluator`, else the environment variable CIRCLEBENCH_EVAL_ARITHMETIC, overrides it;
a named arithmetic runs even where the hardware lacks it, in a slow form with the same bound.
int8 (fbgemm's u8 × s8 products) was one until issue 38: on no CPU measured was it faster than
float32 or native bfloat16 (docs/benchmarks/evaluation.md).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from benchmark.evaluation.bands import Block, Readout
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
# About 0.35 s of float32 products on 2 Zen 4 cores: below it, `auto` takes float32 and float32
# takes torch's product unmeasured. CUB's and Cars196's test sets are below, Market-1501, SOP
# and MSMT17 above. A frozen-track cell's 480 test images, far below, were evaluated in 0.02 s
# after sgemm's 0.38 s measurement.
SMALL_MACS = 2**35
_SGEMM: dict[int, str] = {}  # thread count -> sgemm's engine


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
    """ "numpy" or "torch": whose float32 product is faster on this CPU, measured once per
    thread count. numpy's BLAS (OpenBLAS in its wheels) ran 1.4x faster than torch's (MKL)
    on the busy 2-core EPYC, and as fast when it was quiet. Each engine's calls run back to
    back: taking turns, each call met the other engine's threads still spinning (with
    OpenBLAS's spin shortened, `benchmark/__init__.py`, that made torch's look faster on the
    quiet Zen 4, where numpy's is 1.5x faster in a whole float32 evaluation)."""
    threads = torch.get_num_threads()
    if threads not in _SGEMM:
        gen = torch.Generator().manual_seed(0)
        q, g = torch.randn(1024, 512, generator=gen), torch.randn(4096, 512, generator=gen)
        out = torch.empty(1024, 4096)
        products = {
            "numpy": lambda: np.matmul(q.numpy(), g.numpy().T, out=out.numpy()),
            "torch": lambda: torch.mm(q, g.T, out=out),
        }
        best = dict.fromkeys(products, float("inf"))
        for engine, product in products.items():
            for _ in range(4):
                start = time.perf_counter()
                product()
                best[engine] = min(best[engine], time.perf_counter() - start)
        _SGEMM[threads] = min(best, key=best.__getitem__)
    return _SGEMM[threads]


def block(name: str, device: torch.device, macs: int | None = None) -> Block:
    """The block function (query copy, gallery copy) -> Shortlist of arithmetic `name`, for an
    evaluation of `macs` multiply-adds (None: a large one). Every engine gives the same metrics
    (the re-check is exact), so a small evaluation's float32 takes torch's unmeasured."""
    if device.type == "cuda":
        return lambda query, gallery: CudaShortlist(gallery)
    measure = name == "float32" and (macs is None or macs >= SMALL_MACS)
    engine = sgemm() if measure else "torch"
    return lambda query, gallery: CpuShortlist(gallery, engine)


def faiss_block(device: torch.device) -> Block:
    """float32 blocks by faiss (`backend="faiss"`): BLAS on the CPU, faiss-gpu on CUDA."""
    return lambda query, gallery: FaissShortlist(gallery, device)


class CpuShortlist:
    """float32 or bfloat16 products on the CPU (float16 as a float32 product of its values).

    Two things halve the product's time (`bench eval`, SOP): one output buffer reused by every
    call (a fresh 250 MB block per call spends as long in page faults as in the product), and
    gallery tiles of `_TILE` columns written into it in place (oneDNN keeps a tile's operands
    in cache; one product over 60k columns runs at two thirds of the speed). The returned block
    is a view of the buffer: valid until the next call.
    """

    _TILE = 8192

    def __init__(self, gallery: LowCopy, engine: str = "torch") -> None:
        self._gallery = gallery.values
        self._out = torch.bfloat16 if self._gallery.dtype == torch.bfloat16 else torch.float32
        self._buffer = torch.empty(0, dtype=self._out)
        self._numpy = engine == "numpy" and self._gallery.dtype == torch.float32

    def readout(self, lowest: float, highest: float) -> Readout:
        return self._out

    def __call__(self, q: Tensor, start: int) -> Tensor:
        g = self._gallery[start:]
        size = q.shape[0] * g.shape[0]
        if self._buffer.numel() < size:
            self._buffer = torch.empty(size, dtype=self._out)
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
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()
