"""`--plan`: a suite's cells, budgets, data checks and GPU-hours, resolved without running."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from benchmark.leaderboard.plan import suite_plan
from benchmark.leaderboard.suite import load_suite
from benchmark.tuning.command import main as tune_main
from benchmark.tuning.experiment import Budget
from benchmark.tuning.gpu_hours import (
    Rate,
    Workload,
    cache_hours,
    precision_note,
    rate_for,
    read_rates,
    run_hours,
    study_hours,
    workload,
)

ROOT = Path(__file__).resolve().parents[3]
RATE = Rate("GPU X", batch=80, train=1000.0, extract=4000.0, pixels=224 * 224, source="test",
            precision="bf16-mixed")  # fmt: skip


def test_a_paper_config_is_read_with_its_dataset_size() -> None:
    work = workload(Path("experiments/cub200/circle.yaml"), (), ROOT)
    assert work == Workload("cub200", "bninception", 224 * 224, 80, "bf16-mixed", 40, 5864, 5924)
    reid = workload(Path("experiments/market1501/circle.yaml"), ("--trainer.max_epochs=3",), ROOT)
    assert (reid.dataset, reid.epochs, reid.test_images) == ("market1501", 3, 3368 + 15913)


def test_hours_are_images_over_the_measured_rates() -> None:
    work = Workload("cub200", "bninception", 224 * 224, 80, "bf16-mixed", 40, 5864, 5924)
    assert run_hours(work, RATE) == pytest.approx((5864 * 40 / 1000 + 5924 / 4000) / 3600)
    half = Workload("x", "bninception", 224 * 112, 80, "bf16-mixed", 1, 1000, 0)
    assert run_hours(half, RATE) == pytest.approx(1000 / 2000 / 3600)  # half the pixels
    budget = Budget(trials=50, folds=4, max_epochs=40)
    fold = (5864 * 3 / 4 * 40 / 1000 + 5864 / 4 * 40 / 4000) / 3600
    assert study_hours(work, budget, RATE) == pytest.approx(50 * 4 * fold)


FROZEN_CUB = """
data:
  class_path: datamodules.CachedFeatureDataModule
  init_args:
    images:
      class_path: datamodules.CUB200DataModule
      init_args: {root: data/cub200, p: 64, k: 4, image_size: 224}
    extractor:
      class_path: benchmark.training.embedders.BackboneFeatures
      init_args: {backbone: vit_small_patch16_224.dino, pooling: cls}
    views: 4
trainer: {max_epochs: 20, precision: bf16-mixed}
"""


def test_a_frozen_track_config_costs_its_feature_cache_once(tmp_path: Path) -> None:
    """The cache holds each training image in each view and the test split; the heads and the
    studies train on cached features, with no backbone pass."""
    (tmp_path / "frozen.yaml").write_text(FROZEN_CUB)
    work = workload(Path("frozen.yaml"), (), tmp_path)
    assert (work.dataset, work.backbone, work.batch, work.views) == (
        "cub200", "vit_small_patch16_224.dino", 256, 4,
    )  # fmt: skip
    assert (work.train_images, work.test_images, work.epochs) == (5864, 5924, 20)
    assert run_hours(work, RATE) == 0.0
    assert study_hours(work, Budget(trials=50, folds=4, max_epochs=20), RATE) == 0.0
    assert cache_hours(work, RATE) == pytest.approx((5864 * 4 + 5924) / 4000 / 3600)
    two = workload(Path("frozen.yaml"), ("--data.init_args.views=2",), tmp_path)
    assert two.views == 2 and two.cache != work.cache


def test_a_weights_tag_reads_its_architectures_rate() -> None:
    """The throughput table is per architecture; `.lvd142m` names weights, not another net."""
    rates = {"vit_small_patch14_dinov2": [RATE]}
    tagged = Workload("cub200", "vit_small_patch14_dinov2.lvd142m", 224 * 224, 256, "bf16-mixed",
                      40, 5864, 5924)  # fmt: skip
    assert rate_for(tagged, rates) == {"GPU X": RATE}
    assert rate_for(tagged, {"vit_small_patch14_dinov2.lvd142m": [RATE], **rates}) == {
        "GPU X": RATE
    }
    assert rate_for(dataclasses.replace(tagged, backbone="vit_base_patch14_dinov2"), rates) == {}


def test_a_cpu_suite_with_tuning_asks_for_no_gpu_rate() -> None:
    """The default job's suite is synthetic data with a tuning budget: no GPU-hours, and no
    request to measure its backbone on a GPU."""
    text = suite_plan(load_suite("quick", ROOT), ROOT)
    assert "no GPU-hours: synthetic data" in text
    assert "no measured images/s" not in text and "another precision" not in text


def test_lightnings_older_precision_names_are_read_as_the_tables() -> None:
    """`--trainer.precision=32` (the CPU advice of the configs) is the table's 32-true."""
    config = Path("experiments/cub200/circle.yaml")
    for given, name in [("32", "32-true"), ("bf16", "bf16-mixed"), ("16-mixed", "16-mixed")]:
        assert workload(config, (f"--trainer.precision={given}",), ROOT).precision == name


def test_a_rate_at_the_runs_precision_comes_before_a_nearer_batch() -> None:
    """A table with float32 and bfloat16 rows: each run is costed at its own precision, and a
    plan says when the table has only another precision's images/s."""
    fp32 = dataclasses.replace(RATE, batch=256, train=300.0, precision="32-true")
    rates = {"resnet50": [fp32, RATE]}
    work = Workload("cub200", "resnet50", 224 * 224, 256, "bf16-mixed", 40, 5864, 5924)
    assert rate_for(work, rates) == {"GPU X": RATE}
    assert rate_for(dataclasses.replace(work, precision="32-true"), rates) == {"GPU X": fp32}
    assert precision_note(work, RATE) == ""
    assert precision_note(work, fp32) == " (images/s measured at 32-true; this run is bf16-mixed)"


def test_the_paper_suite_has_floors_budgets_and_gpu_hours(tmp_path: Path) -> None:
    table = tmp_path / "throughput.csv"
    table.write_text(
        "backbone,device,precision,image_size,batch,train_images_per_s,extract_images_per_s,"
        "torch,date,source\n"
        "bninception,GPU X,bf16-mixed,224,80,1000,4000,2.11,2026-11-27,test\n"
        "resnet50,GPU X,bf16-mixed,224,64,2000,8000,2.11,2026-11-27,test\n"
    )
    suite = load_suite("paper", ROOT)
    assert all(g.floor is not None and g.tuning is not None for g in suite.groups)
    assert {g.tuning.trials for g in suite.groups if g.tuning} == {50}
    text = suite_plan(suite, ROOT, table)
    assert "cub200: 15 configs, 45 fits + 45 tuned fits + 3 floor tests" in text
    assert "tuning 50 trials x 4 folds, <= 40 epochs" in text
    assert text.count("    GPU X: ") == 5 and "total on one GPU X: " in text
    assert len(read_rates(table)["resnet50"]) == 1
    assert read_rates(table)["resnet50"][0].precision == "bf16-mixed"
    assert "another precision" not in text
    fp32 = load_suite("paper", ROOT)
    fp32 = dataclasses.replace(  # a suite-level override reaches every group's cells
        fp32,
        groups=tuple(
            dataclasses.replace(g, overrides=(*g.overrides, "--trainer.precision=32-true"))
            for g in fp32.groups
        ),
    )
    assert "images/s for ['bninception at 32-true', 'resnet50 at 32-true'] measured at " in (
        suite_plan(fp32, ROOT, table)
    )


def test_tune_plans_a_paper_study_without_its_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cluster guide's command, planned on a machine without CUB-200-2011."""
    (tmp_path / "experiments").symlink_to(ROOT / "experiments")
    (tmp_path / "results").mkdir()
    (tmp_path / "results/throughput.csv").write_text((ROOT / "results/throughput.csv").read_text())
    monkeypatch.chdir(tmp_path)
    tune_main(["--suite", "paper", "--group", "cub200", "--loss", "circle", "--plan"])
    out = capsys.readouterr().out
    assert "data absent" in out and "cub200/circle: 50 trials x 4 folds" in out
    assert "GPU-hours" in out
    assert not (tmp_path / "results/tuning").exists()  # nothing ran
