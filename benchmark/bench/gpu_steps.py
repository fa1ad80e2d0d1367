"""The records of `python -m benchmark.bench gpu`: a step it plans and what the step measured.

Apart from `gpu.py` (the plan and the table) and `gpu_runs.py` (the measurements, which import
Lightning), so that both can use them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Section = Literal["train", "loaders", "eval"]


@dataclass(frozen=True)
class Step:
    """One measurement. train: `precision`, `channels_last` and `loop` (fit, bare or compute);
    loaders: `data` (synthetic or jpeg); eval: `case` and `path` (an arithmetic, faiss, or
    `faiss-top-k`, the peer)."""

    section: Section
    name: str
    loop: str = ""
    precision: str = ""
    channels_last: bool = False
    data: str = ""
    case: str = ""
    path: str = ""


@dataclass(frozen=True)
class Result:
    """What a step measured: images/s (train, loaders) or seconds (eval), the GPU memory peak
    in bytes, and for eval whether the metrics equal the CPU evaluator's (None for a peer)."""

    step: Step
    value: float
    gpu_peak: int = 0
    equal: bool | None = None
    note: str = ""
