"""What the benchmark scripts share: their parser, timing and memory helpers, the machine line."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import threading
import time
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any, TypeVar

import torch

from benchmark.evaluation.arithmetic import cpu_field, cpu_flags, onednn_cap
from benchmark.manual import manual_line
from core.devices import chosen_device

T = TypeVar("T")


def bench_parser(what: str, doc: str | None = None, **kwargs: Any) -> argparse.ArgumentParser:
    """The parser of `python -m benchmark.bench <what>`, described by `doc`."""
    prog, epilog = f"python -m benchmark.bench {what}", manual_line(f"bench {what}")
    return argparse.ArgumentParser(prog=prog, description=doc, epilog=epilog, **kwargs)


def parsed_device(parser: argparse.ArgumentParser, name: str) -> torch.device:
    """The device `--device name` asks for ("auto": CUDA where torch sees it), or the parser's
    error where it asks for CUDA that is not there."""
    try:
        return chosen_device(name)
    except ValueError as error:
        parser.error(f"--device cuda: {error}; use --device cpu")


def median_seconds(fn: Callable[[], object], *, warmup: int = 3, repeat: int = 10) -> float:
    """Median wall time of `fn()` in seconds after `warmup` unmeasured calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def images_per_s(
    steps: Iterable[int], warmup: int, sync: Callable[[], object] = lambda: None
) -> float:
    """Images per second of the steps after the first `warmup`: `steps` runs them as it is
    iterated, each yielding its image count; `sync()` waits for the device before each clock."""
    steps = iter(steps)
    for _ in islice(steps, warmup):
        pass
    sync()
    start = time.perf_counter()
    images = sum(steps)
    sync()
    return images / (time.perf_counter() - start)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_increase(fn: Callable[[], T], *, interval_s: float = 0.002) -> tuple[T, int]:
    """Run `fn()` and return its result and the peak resident-memory increase in bytes.

    A sampling thread reads /proc/self/statm, so allocations shorter than `interval_s` may be
    missed; that is precise enough for the GB-scale figures the benchmarks report.
    """
    base = _rss_bytes()
    peak = base
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _rss_bytes())
            time.sleep(interval_s)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = fn()
    finally:
        done.set()
        sampler.join()
    peak = max(peak, _rss_bytes())
    return result, peak - base


# lscpu flags that decide which products are fast: AVX2, AVX-512, its BF16 and VNNI, AMX.
MATRIX_FLAGS = frozenset(
    {"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8"}
)


def machine() -> str:
    """One line naming the CPU (model name, torch's capability, a oneDNN ISA cap) and torch's
    thread count."""
    model = cpu_field("model name") or platform.processor() or platform.machine()
    capability, threads = torch.backends.cpu.get_cpu_capability(), torch.get_num_threads()
    flags = sorted(cpu_flags() & MATRIX_FLAGS)
    cap = onednn_cap()  # set: an older CPU emulated
    return (
        f"CPU {model} ({capability}; {' '.join(flags) or 'no AVX2'}"
        f"{f'; oneDNN capped at {cap}' if cap else ''}), torch "
        f"{torch.__version__}, {threads} threads"
    )


def gpu_peak(fn: Callable[[], T], device: str) -> tuple[T, int]:
    """Run `fn()`; its result and the peak increase of CUDA memory held by torch's allocator
    (`torch.cuda.max_memory_allocated`) in bytes, 0 when `device` is not "cuda". Memory that
    faiss allocates itself is not in it."""
    if device != "cuda":
        return fn(), 0
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    result = fn()
    torch.cuda.synchronize()
    return result, torch.cuda.max_memory_allocated() - before
