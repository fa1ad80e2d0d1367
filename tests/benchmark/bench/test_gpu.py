"""`python -m benchmark.bench gpu` on the CPU: its arguments, its plan, its table, its exit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmark.bench import gpu
from benchmark.bench.__main__ import main as bench_main
from benchmark.bench.gpu_steps import Result, Step
from benchmark.evaluation.arithmetic import ENV_VAR

SYNTHETIC = Path(gpu.EXPERIMENTS) / "synthetic" / "fine_grained" / "circle.yaml"


def test_defaults_are_the_papers_fine_grained_config_on_every_core() -> None:
    args = gpu.parse([])
    assert args.config == gpu.DEFAULT_CONFIG and args.config.name == "circle.yaml"
    assert (args.steps, args.warmup, args.skip) == (200, 20, [])
    assert args.workers >= 1


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--steps", "0"], "--steps must be >= 1, got 0"),
        (["--warmup", "-1"], "--warmup must be >= 0"),
        (["--config", "nowhere.yaml"], "--config nowhere.yaml: no such file"),
        (["--case", "market"], "invalid choice: 'market'"),
    ],
)
def test_bad_arguments_are_usage_errors(
    argv: list[str], match: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        gpu.parse(argv)
    assert stop.value.code == 2 and match in capsys.readouterr().err


def test_the_plan_runs_each_section_in_order() -> None:
    steps = gpu.plan(gpu.parse(["--workers", "16"]))
    assert [s.section for s in steps] == ["train"] * 6 + ["loaders"] * 2 + ["eval"] * 12
    train = [(s.loop, s.precision, s.channels_last) for s in steps[:6]]
    assert train == [
        ("fit", "32-true", False),
        ("fit", "bf16-mixed", False),
        ("fit", "bf16-mixed", True),
        ("bare", "bf16-mixed", True),
        ("compute", "bf16-mixed", True),
        ("compute", "32-true", False),
    ]
    assert [s.data for s in steps[6:8]] == ["synthetic", "jpeg"]
    assert "16 workers" in steps[6].name
    sop = [s.path for s in steps[8:14]]
    assert sop == ["float32", "float16", "bfloat16", "auto", "faiss", "faiss-top-k"]
    assert {s.case for s in steps[8:14]} == {"sop"} and steps[14].case == "msmt17"


def test_faiss_steps_leave_the_plan_when_faiss_has_no_gpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """faiss-cpu on a CUDA machine: its steps would time the CPU, so they go, and say how to
    get them; with GPU support they stay."""
    from benchmark.evaluation import faiss_blocks

    steps = gpu.plan(gpu.parse(["--skip", "train", "--skip", "loaders"]))
    monkeypatch.setattr(faiss_blocks, "import_faiss", lambda: object())  # any faiss build
    monkeypatch.setattr(faiss_blocks, "faiss_has_gpu", lambda faiss: False)
    kept = gpu.without_cpu_faiss(steps)
    assert [s.path for s in kept] == ["float32", "float16", "bfloat16", "auto"] * 2
    assert 'pip install "circlebench[gpu]"' in capsys.readouterr().out
    monkeypatch.setattr(faiss_blocks, "faiss_has_gpu", lambda faiss: True)
    assert gpu.without_cpu_faiss(steps) == steps

    def no_faiss() -> None:
        raise ImportError('faiss is not installed; pip install "circlebench[gpu]"')

    monkeypatch.setattr(faiss_blocks, "import_faiss", no_faiss)
    assert gpu.without_cpu_faiss(steps) == kept  # no faiss at all: its steps go, with the fix
    assert "faiss is not installed" in capsys.readouterr().out
    train = gpu.plan(gpu.parse(["--skip", "eval"]))
    assert gpu.without_cpu_faiss(train) == train  # --skip eval needs none


def test_skipped_sections_and_chosen_cases_leave_the_plan() -> None:
    steps = gpu.plan(gpu.parse(["--skip", "train", "--skip", "loaders", "--case", "msmt17"]))
    assert {s.section for s in steps} == {"eval"} and {s.case for s in steps} == {"msmt17"}


def test_the_table_gives_each_figure_against_its_baseline() -> None:
    results = [
        Result(Step("train", "fit bf16-mixed", "fit", "bf16-mixed"), 900.0, 3 * 2**30),
        Result(Step("train", "bare loop", "bare", "bf16-mixed"), 1000.0),
        Result(Step("train", "compute only", "compute", "bf16-mixed"), 1200.0),
        Result(Step("loaders", "generated images", data="synthetic"), 2400.0),
        Result(Step("loaders", "JPEG folder", data="jpeg"), 600.0),
        Result(Step("eval", "sop bfloat16", case="sop", path="bfloat16"), 0.5, 2**30, True),
        Result(Step("eval", "sop float16", case="sop", path="float16"), 0.8, 0, False),
        Result(Step("eval", "sop faiss-gpu top-k", case="sop", path="faiss-top-k"), 1.0),
    ]
    text = gpu.table(results)
    lines = {line.split("  ")[0].strip(): line for line in text.splitlines()}
    assert "0.90x bare loop" in lines["fit bf16-mixed"] and "GPU peak  3.00 GiB" in text
    assert "2.00x GPU compute" in lines["generated images"]
    assert "0.50x GPU compute" in lines["JPEG folder"]
    assert "x 2.00 vs faiss-gpu top-k  = CPU" in lines["sop bfloat16"]
    assert "DIFFERS FROM CPU" in lines["sop float16"]
    assert "loaders keep the GPU busy (1200 images/s): NO" in text  # the JPEG loader is slower
    headers = [line.split()[1] for line in text.splitlines() if line.startswith("-- ")]
    assert headers == ["train", "loaders", "eval"]
    without_faiss = [r for r in results if r.step.path != "faiss-top-k"]
    without_faiss.append(Result(Step("eval", "sop float32", case="sop", path="float32"), 0.4))
    assert "x 0.80 vs float32" in gpu.table(without_faiss)  # the baseline left where faiss went


def test_without_cuda_it_says_so_and_exits_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    bench_main(["gpu", "--steps", "5"])  # returns: exit status 0
    assert "torch sees no CUDA device here" in capsys.readouterr().out


def test_the_dispatcher_knows_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        bench_main(["gpu", "--help"])
    assert stop.value.code == 0 and "--skip" in capsys.readouterr().out


@pytest.mark.faiss  # its faiss-top-k peer
def test_the_runner_measures_on_the_cpu_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The measuring code is device-generic: its evaluation and loader steps, small, on the CPU
    (the evaluator's answer is checked against its CPU reference)."""
    from benchmark.bench.gpu_runs import Runner

    monkeypatch.setenv(ENV_VAR, "float32")  # the reference's `auto` without its probe

    argv = ["--config", str(SYNTHETIC), "--workers", "0", "--subset", "0.003", "--repeat", "1"]
    argv += ["--steps", "1", "--warmup", "0"]  # one batch per loader pass
    args = gpu.parse([*argv, "--case", "sop"])
    runner = Runner(args, torch.device("cpu"))
    steps = [s for s in gpu.plan(args) if s.path in ("float32", "faiss-top-k") or s.data]
    results = [runner.run(step) for step in steps if step.data != "jpeg"]
    evaluated = {r.step.path: r for r in results if r.step.section == "eval"}
    assert evaluated["float32"].equal is True and evaluated["float32"].value > 0
    assert evaluated["faiss-top-k"].equal is None
    (loader,) = [r for r in results if r.step.section == "loaders"]
    assert loader.value > 0 and loader.gpu_peak == 0


def test_training_runs_render_their_images_once() -> None:
    """Each training run builds its module afresh but serves the same pre-rendered images."""
    from benchmark.bench.gpu_runs import Runner

    args = gpu.parse(["--config", str(SYNTHETIC), "--workers", "0", "--steps", "1"])
    runner = Runner(args, torch.device("cpu"))
    first, second = (runner._model(channels_last=False)[1] for _ in range(2))
    first.setup("fit")
    second.setup("fit")
    assert first.train_dataloader().dataset is second.train_dataloader().dataset
