"""The machine line every benchmark prints first."""

from __future__ import annotations

import pytest
import torch

from benchmark.bench.timing import machine
from benchmark.evaluation import arithmetic


def test_the_machine_line_names_torch_s_capability_threads_and_an_onednn_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in arithmetic.ISA_CAPS:
        monkeypatch.delenv(name, raising=False)
    line = machine()
    assert torch.backends.cpu.get_cpu_capability() in line
    assert f"{torch.get_num_threads()} threads" in line and "oneDNN" not in line
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", " avx2")  # emulating an AVX2-only CPU says so
    assert "; oneDNN capped at AVX2)" in machine()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE")  # oneDNN's own name comes first
    assert "; oneDNN capped at AVX512_CORE)" in machine()
