"""Spare torch a failing NVML load per optimiser step on hosts without NVML.

Lightning sets `PYTORCH_NVML_BASED_CUDA_CHECK=1` at import, so that asking whether CUDA is
available does not initialise CUDA in a process that may fork. `torch.optim` asks at every
`step()` (its graph-capture check), and with the variable set, torch's CUDA builds then try to
load `libnvidia-ml.so.1` each time; where that library is absent the load fails and torch asks
the CUDA runtime instead, exactly what it does without the variable. The failed load is paid
at every optimiser step, a visible share of a small step.
Measured: docs/benchmarks/training.md#where-a-frozen-track-cells-time-goes.
"""

from __future__ import annotations

import ctypes
import os

VARIABLE = "PYTORCH_NVML_BASED_CUDA_CHECK"


def skip_absent_nvml() -> None:
    """Clear Lightning's NVML-based CUDA check where NVML cannot load: the answer, and whether
    the process may still fork into CUDA work, stay the same (module docstring)."""
    if os.environ.get(VARIABLE) != "1":
        return
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        os.environ[VARIABLE] = "0"
