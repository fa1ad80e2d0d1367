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
- `int8`: one scale per copy (peak |x̂_d| / levels): 7-bit queries × 8-bit gallery items, the
  unsigned × signed products of fbgemm with exact int32 sums (no γ_D), requantised to uint8
  levels of step ≈ 1/250 of the thresholds' span (`Levels`: ½ level plus 4·2⁻²⁴ relative).
  ε ≈ 0.04 for unit vectors, so ~10x more pairs go to the float32 re-check than for bfloat16.

`auto` takes float32 or bfloat16 by a rule on the device's facts (`choice`). float32 blocks use
numpy's BLAS or torch's, whichever `sgemm` measured faster (torch's below `SMALL_MACS`, where
the measurement would cost more than it could save). The argument `arithmetic=` of
`RetrievalEvaluator`, else the environment variable CIRCLEBENCH_EVAL_ARITHMETIC, overrides it;
a named arithmetic runs even where the hardware lacks it, in a slow form with the same bound
(the int8 products exactly emulated).
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from benchmark.evaluation.bands import Block, Readout
from benchmark.evaluation.cuda_blocks import CudaShortlist
from benchmark.evaluation.faiss_blocks import FaissShortlist
from benchmark.evaluation.precision import ieee_float32
from benchmark.evaluation.similarity import Levels, LowCopy

Arithmetic = Literal["auto", "bfloat16", "float16", "float32", "int8"]
ARITHMETICS: tuple[str, ...] = ("auto", "bfloat16", "float16", "float32", "int8")
ENV_VAR = "CIRCLEBENCH_EVAL_ARITHMETIC"
LOW_DTYPES = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
    "int8": torch.int8,
}
# About 0.35 s of float32 products on 2 Zen 4 cores: below it, `auto` takes float32 and float32
# takes torch's product unmeasured. CUB's and Cars196's test sets are below, Market-1501, SOP
# and MSMT17 above. A frozen-track cell's 480 test images, far below, were evaluated in 0.02 s
# after sgemm's 0.38 s measurement.
SMALL_MACS = 2**35
_SGEMM: dict[int, str] = {}  # thread count -> sgemm's engine


def requested(argument: str) -> str:
    """The arithmetic asked for: `argument`, or if it is "auto" the environment variable's."""
    if argument not in ARITHMETICS:
        raise ValueError(f"arithmetic must be one of {list(ARITHMETICS)}, got {argument!r}")
    if argument != "auto":
        return argument
    env = os.environ.get(ENV_VAR, "auto").strip() or "auto"
    if env not in ARITHMETICS:
        raise ValueError(
            f"{ENV_VAR}={env!r} is not an arithmetic; set it to one of {list(ARITHMETICS)} "
            "or unset it"
        )
    return env


def resolve(argument: str, device: torch.device) -> str:
    """The arithmetic to run on `device` as requested, or "auto" for `choice`'s rule. int8
    from the environment is a preference: on CUDA it leaves the choice to `auto`."""
    name = requested(argument)
    if name == "int8" and device.type != "cpu":
        if argument == "int8":
            raise ValueError(
                "arithmetic='int8' is a CPU shortlist (fbgemm); on CUDA use 'float16', "
                "'bfloat16', 'float32' or 'auto'"
            )
        # The environment variable is a preference for the machine's CPU evaluations.
        warnings.warn(
            f"{ENV_VAR}=int8 names a CPU shortlist; this CUDA evaluation takes "
            "auto's arithmetic instead",
            stacklevel=3,
        )
        name = "auto"
    return name


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
    if name == "int8":
        return lambda query, gallery: Int8Shortlist(query, gallery, fbgemm=_has_fbgemm())
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


class Int8Shortlist:
    """u8 × s8 products with exact int32 sums, requantised to uint8 levels (fbgemm).

    The gallery is packed once, in slabs of `_SLAB` columns (a block starting mid-slab computes
    the whole slab: at most `_SLAB` wasted columns per panel), and each slab's uint8 levels go
    into one reused buffer. Without fbgemm (`fbgemm=False`) the same levels are computed
    exactly in float64 (the slow form, for CPUs without it and for the tests).
    """

    _SLAB = 2048

    def __init__(self, query: LowCopy, gallery: LowCopy, *, fbgemm: bool) -> None:
        self._q_scale, self._g_scale, self._zero = query.scale, gallery.scale, query.zero
        self._reach = query.norm * gallery.norm
        self._gallery = gallery.values
        self._fbgemm = fbgemm
        self._levels = Levels.covering(-self._reach, self._reach, self._reach)
        self._packs: dict[int, object] = {}
        self._buffer = torch.empty(0, dtype=torch.uint8)

    def readout(self, lowest: float, highest: float) -> Readout:
        self._levels = Levels.covering(lowest, highest, self._reach)
        return self._levels

    def __call__(self, q: Tensor, start: int) -> Tensor:
        n = self._gallery.shape[0]
        size = q.shape[0] * (n - start)
        if self._buffer.numel() < size:
            self._buffer = torch.empty(size, dtype=torch.uint8)
        out = self._buffer[:size].view(q.shape[0], n - start)
        out_np = out.numpy()  # numpy copies the slabs in 3 ms where torch took 180 (2 threads)
        with _quantized_ops():
            xq = torch._make_per_tensor_quantized_tensor(q, self._q_scale, self._zero)
            for c in range(start - start % self._SLAB, n, self._SLAB):
                levels = self._slab(q, xq, c)  # [B, slab width]
                skip = max(start - c, 0)
                out_np[:, c + skip - start : c + levels.shape[1] - start] = levels[:, skip:]
        return out

    def _slab(self, q: Tensor, xq: Tensor, c: int) -> np.ndarray:
        g = self._gallery[c : c + self._SLAB]
        step, zero = self._levels.step, self._levels.zero
        if not self._fbgemm:
            multiplier = self._q_scale * self._g_scale / step
            return int8_levels(q, self._zero, g, multiplier, zero).numpy()
        if c not in self._packs:
            wq = torch._make_per_tensor_quantized_tensor(g, self._g_scale, 0)
            self._packs[c] = torch.ops.quantized.linear_prepack(wq, None)
        levels = torch.ops.quantized.linear(xq, self._packs[c], step, zero)  # quint8
        # Its bytes as uint8, without int_repr()'s copy.
        raw = torch.empty(0, dtype=torch.uint8)
        raw.set_(levels.untyped_storage(), levels.storage_offset(), levels.shape, levels.stride())
        return raw.numpy()


def int8_levels(q: Tensor, q_zero: int, g: Tensor, multiplier: float, zero: int) -> Tensor:
    """uint8 levels clamp(round(fp32(fp32(Σ (q - q_zero)·g) · fp32(multiplier))) + zero) [B, N],
    the sums exact in float64 (|Σ| < 2⁵³): what fbgemm's requantisation computes."""
    sums = (q.to(torch.float64) - q_zero) @ g.to(torch.float64).T
    scaled = sums.to(torch.float32) * torch.tensor(multiplier, dtype=torch.float32)
    return (torch.round(scaled) + zero).clamp_(0, 255).to(torch.uint8)


@contextlib.contextmanager
def _quantized_ops() -> Iterator[None]:
    """fbgemm as the quantized engine (its u8 × s8 kernels are the ones the bound is derived
    for), without the deprecation warning of quantized tensors (they are internal here), and
    allowed under `torch.use_deterministic_algorithms(True)` (a Lightning `deterministic: true`
    run): torch flags the quantized ops' output resize as nondeterministic, but their int32
    sums are exact and the levels a function of them, so every run gives the same block."""
    engine = torch.backends.quantized.engine
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*quantiz.*deprecated", category=UserWarning)
        if engine != "fbgemm" and _has_fbgemm():
            torch.backends.quantized.engine = "fbgemm"
        if deterministic:
            torch.use_deterministic_algorithms(False)
        try:
            yield
        finally:
            if deterministic:
                torch.use_deterministic_algorithms(True, warn_only=warn_only)
            if torch.backends.quantized.engine != engine:
                torch.backends.quantized.engine = engine


def _has_fbgemm() -> bool:
    return "fbgemm" in torch.backends.quantized.supported_engines


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
