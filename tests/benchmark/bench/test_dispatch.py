"""`python -m benchmark.bench WHAT ...`: the first word picks the benchmark, the rest is its own."""

from __future__ import annotations

import pytest

from benchmark.bench.__main__ import main


def test_help_after_the_benchmark_name_is_that_benchmarks_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["losses", "--help"])
    assert stop.value.code == 0
    assert "--batch-sizes" in capsys.readouterr().out


def test_an_unknown_benchmark_is_refused_with_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["speed"])
    assert "invalid choice: 'speed'" in capsys.readouterr().err


@pytest.mark.parametrize("benchmark", ["train", "eval", "backbones"])
def test_device_cuda_without_cuda_is_a_usage_error(
    benchmark: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as stop:
        main([benchmark, "--device", "cuda"])
    assert stop.value.code == 2
    assert "--device cuda: torch sees no CUDA device; use --device cpu" in capsys.readouterr().err
