"""`skip_absent_nvml`: Lightning's NVML-based CUDA check is cleared only where NVML cannot load,
and torch's answer to "is CUDA available?" is the same either way."""

from __future__ import annotations

import ctypes

import pytest
import torch

from benchmark.training import nvml


def absent(name: str) -> ctypes.CDLL:
    raise OSError(f"{name}: cannot open shared object file")


def test_the_check_is_cleared_where_nvml_cannot_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(nvml.VARIABLE, "1")
    monkeypatch.setattr(nvml.ctypes, "CDLL", absent)
    with_check = torch.cuda.is_available()
    nvml.skip_absent_nvml()
    assert nvml.os.environ[nvml.VARIABLE] == "0"
    assert torch.cuda.is_available() == with_check


def test_the_check_stays_where_nvml_loads_or_was_not_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loaded: list[str] = []
    monkeypatch.setattr(nvml.ctypes, "CDLL", loaded.append)
    monkeypatch.setenv(nvml.VARIABLE, "1")
    nvml.skip_absent_nvml()
    assert nvml.os.environ[nvml.VARIABLE] == "1" and loaded == ["libnvidia-ml.so.1"]
    monkeypatch.delenv(nvml.VARIABLE)
    nvml.skip_absent_nvml()
    assert nvml.VARIABLE not in nvml.os.environ and len(loaded) == 1
