"""Results rows: columns, built from the objects that ran, atomic concurrent appends, hashes."""

from __future__ import annotations

import csv
import multiprocessing as mp
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from benchmark.evaluation.evaluator import EvaluationReport
from benchmark.evaluation.hardest_pairs import HardestPairs
from benchmark.evaluation.precision import ieee_float32
from benchmark.training.bninception import CHECKPOINT_URL
from benchmark.training.checkpoints import CheckpointInfo
from benchmark.training.cli import hashed_config
from benchmark.training.module import TestResult
from benchmark.training.results import (
    config_hash,
    git_sha,
    result_row,
    save_similarities,
    where_it_ran,
)
from benchmark.training.rows import FLOOR_LOSS, ResultRow, append_row
from core.devices import float32_modes
from datamodules import CachedFeatureDataModule, MSMT17DataModule
from losses import CircleLoss
from tests.datamodules._layouts import write_msmt17

CONTRACT_COLUMNS = [
    "cell_id", "dataset", "track", "protocol", "labels", "loss", "loss_params", "backbone",
    "pretrained",
    "embedding_dim", "image_size", "p", "k", "epochs", "seed", "include_val", "rerank", "tuning",
    "R@1", "R@2", "R@10", "mAP", "MAP@R", "R-Precision",
    "eval_backend", "skipped_queries", "checkpoint", "global_step", "wall_time_s", "git_sha",
    "config_hash", "run_dir", "cell_recipe", "device", "gpu", "precision",
]  # fmt: skip


def make_row(cell_id: str = "c0", **metrics: float) -> ResultRow:
    metrics = metrics or {"R@10": 90.0, "R@1": 50.0, "mAP": 40.0, "R@2": 60.0}
    return ResultRow(
        cell_id=cell_id, dataset="synthetic", track="end-to-end", protocol="same_set",
        labels="pair-wise",
        loss="CircleLoss", loss_params='{"gamma": 80, "m": 0.4}', backbone="efficientnet_lite0",
        pretrained="none", embedding_dim=64, image_size="32x32", p=4, k=2, epochs=1, seed=0,
        include_val="", metrics={**metrics, "MAP@R": 30.0, "R-Precision": 35.0},
        eval_backend="torch-cpu", wall_time_s=1.5, git_sha="abc", config_hash="123",
        run_dir="runs/x",
    )  # fmt: skip


def test_row_columns_follow_the_contract_with_recall_sorted_by_k(tmp_path: Path) -> None:
    append_row(tmp_path / "runs.csv", make_row())
    with open(tmp_path / "runs.csv", newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == CONTRACT_COLUMNS
    assert rows[0]["R@1"] == "50.0" and rows[0]["loss_params"] == '{"gamma": 80, "m": 0.4}'


def test_a_row_with_new_metrics_widens_the_header_and_keeps_old_rows(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    append_row(path, make_row("a", **{"R@1": 1.0}))
    append_row(path, make_row("b", **{"R@1": 2.0, "R@4": 3.0}))
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["cell_id"], r["R@1"], r["R@4"]) for r in rows] == [
        ("a", "1.0", ""),
        ("b", "2.0", "3.0"),
    ]


def test_a_registered_metric_gets_its_registry_place_among_the_columns(tmp_path: Path) -> None:
    append_row(tmp_path / "runs.csv", make_row(mINP=12.5, **{"R@1": 50.0}))
    with open(tmp_path / "runs.csv", newline="") as f:
        reader = csv.DictReader(f)
        (row,) = list(reader)
    names = list(reader.fieldnames or [])
    assert names[names.index("R-Precision") + 1 : names.index("eval_backend")] == ["mINP"]
    assert row["mINP"] == "12.5"


def _append_many(path: str, worker: int, count: int) -> None:
    for i in range(count):
        append_row(path, make_row(f"w{worker}-{i}"))


def test_concurrent_appends_lose_no_row_and_leave_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    ctx = mp.get_context("fork")
    workers = [ctx.Process(target=_append_many, args=(str(path), w, 15)) for w in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
        assert w.exitcode == 0
    with open(path, newline="") as f:
        ids = sorted(r["cell_id"] for r in csv.DictReader(f))
    assert ids == sorted(f"w{w}-{i}" for w in range(4) for i in range(15))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.csv", "runs.csv.lock"]


def test_config_hash_ignores_where_a_run_is_recorded_but_not_what_it_computes() -> None:
    base = {
        "seed_everything": 0,
        "results_csv": "a.csv",
        "cell_id": "x",
        "trainer": {"max_epochs": 1, "default_root_dir": "runs"},
        "data": {"init_args": {"root": "/data", "p": 4}},
    }
    moved = {
        **base,
        "results_csv": "b.csv",
        "cell_id": "y",
        "trainer": {"max_epochs": 1, "default_root_dir": "elsewhere"},
        "data": {"init_args": {"root": "/mnt", "p": 4}},
    }
    cached = {"data": {"init_args": {"cache_dir": "/a", "images": {"init_args": {"root": "/d"}}}}}
    cached_moved = {
        "data": {"init_args": {"cache_dir": "/b", "images": {"init_args": {"root": "/e"}}}}
    }
    assert config_hash(hashed_config(cached)) == config_hash(hashed_config(cached_moved))
    changed = {**base, "seed_everything": 1}
    assert config_hash(hashed_config(base)) == config_hash(hashed_config(moved))
    assert config_hash(hashed_config(base)) != config_hash(hashed_config(changed))
    assert len(config_hash(base)) == 12


def test_git_sha_is_a_commit_of_this_checkout_or_empty_outside_git(tmp_path: Path) -> None:
    sha = git_sha()
    assert sha == "" or len(sha.removesuffix("+dirty")) == 40
    assert git_sha(tmp_path) == ""


def test_a_checkout_is_dirty_only_when_what_runs_differs(tmp_path: Path) -> None:
    """A run rewrites the committed results files itself, and the manual does not run: neither
    makes its rows `+dirty`; a changed config or module does."""

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    for name in ("results/rows.csv", "docs/page.md", "README.md", "experiments/c.yaml", "m.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("committed\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c")
    clean = git_sha(tmp_path / "docs")  # any folder of the checkout
    assert len(clean) == 40
    for name in ("results/rows.csv", "docs/page.md", "README.md"):
        (tmp_path / name).write_text("a run, or a reader, changed this\n")
    (tmp_path / "untracked.py").write_text("not committed, not imported\n")
    assert git_sha(tmp_path) == clean
    for name in ("experiments/c.yaml", "m.py"):
        (tmp_path / name).write_text("changed\n")
        assert git_sha(tmp_path) == clean + "+dirty"
        git("checkout", "-q", "--", name)


def test_result_row_reads_the_objects_that_ran() -> None:
    """Provenance comes from the embedder and the evaluator's report, not from config strings:
    a BN-Inception loaded with `pretrained: true` records Cadene's URL, not "timm-hub"."""
    embedder = SimpleNamespace(
        backbone_name="bninception", pretrained_source=CHECKPOINT_URL, embedding_dim=512
    )
    report = EvaluationReport({"R@1": 0.5, "mAP": 0.25}, "torch-cpu", queries=9, skipped_queries=1,
                              rerank="k-reciprocal k1=20 k2=6 lambda=0.3")  # fmt: skip
    model = SimpleNamespace(
        protocol="same_set", loss=CircleLoss(), embedder=embedder,
        test_result=TestResult(report, HardestPairs(np.zeros(1), np.zeros(1))),
        trainer=fake_trainer(torch.device("cpu"), 1, "32-true"),
    )  # fmt: skip
    data = SimpleNamespace(
        dataset_name="cub200", track="end-to-end", image_size=(224, 200), p=16, k=5
    )
    provenance = {"wall_time_s": 1.0, "git_sha": "", "config_hash": "", "run_dir": "r"}
    trained = CheckpointInfo("r/checkpoints/last.ckpt", epoch=3, global_step=30)
    row = result_row(
        model, data, cell_id="", loss_params="{}", trained=trained, seed=1, provenance=provenance
    )
    assert (row.pretrained, row.backbone, row.embedding_dim) == (CHECKPOINT_URL, "bninception", 512)
    assert row.rerank == "k-reciprocal k1=20 k2=6 lambda=0.3"
    assert (row.metrics, row.eval_backend, row.skipped_queries) == (
        {"R@1": 50.0, "mAP": 25.0}, "torch-cpu", 1,
    )  # fmt: skip
    assert (row.image_size, row.labels, row.loss, row.include_val) == (
        "224x200", "pair-wise", "CircleLoss", "",
    )  # fmt: skip
    assert (row.epochs, row.checkpoint, row.global_step) == (3, trained.path, 30)
    assert (row.device, row.gpu) == ("cpu", "")
    assert row.precision.startswith("32-true (matmul ")
    floor = result_row(
        model, data, cell_id="", loss_params="{}", trained=None, seed=1, provenance=provenance
    )
    assert (floor.loss, floor.labels, floor.loss_params, floor.epochs) == (FLOOR_LOSS, "", "", 0)
    assert (floor.checkpoint, floor.metrics) == ("", row.metrics)


@pytest.mark.parametrize("include_val", [False, True])
def test_a_frozen_msmt17_row_records_include_val(tmp_path: Path, include_val: bool) -> None:
    """The frozen track wraps MSMT17's datamodule: its include_val (which training images) is
    still a setting of the row, so seeds trained on different sets do not fold together."""
    images = MSMT17DataModule(root=write_msmt17(tmp_path), include_val=include_val)
    extractor = SimpleNamespace(backbone_name="resnet50", pretrained_source="x")
    frozen = CachedFeatureDataModule(images, extractor)  # type: ignore[arg-type]
    report = EvaluationReport({"R@1": 0.5}, "torch-cpu", queries=4, skipped_queries=0)
    model = SimpleNamespace(
        protocol="query_gallery", loss=CircleLoss(), embedder=SimpleNamespace(embedding_dim=8),
        test_result=TestResult(report, HardestPairs(np.zeros(1), np.zeros(1))),
        trainer=fake_trainer(torch.device("cpu"), 1, "32-true"),
    )  # fmt: skip
    row = result_row(model, frozen, cell_id="", loss_params="{}", trained=None, seed=0,
                     provenance={})  # fmt: skip
    assert (row.track, row.include_val) == ("frozen", str(include_val))


def fake_trainer(device: torch.device, world_size: int, precision: str) -> SimpleNamespace:
    return SimpleNamespace(
        strategy=SimpleNamespace(root_device=device), world_size=world_size, precision=precision
    )


def test_rows_say_where_they_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    """Device, GPU name and precision with TF32 named: cuDNN convolutions default to TF32, and
    Lightning's suggested `allow_tf32` makes matrix products TF32 too."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H100 80GB HBM3")
    ran = where_it_ran(fake_trainer(torch.device("cuda", 0), 2, "bf16-mixed"))
    assert ran == {
        "device": "cuda ×2",
        "gpu": "NVIDIA H100 80GB HBM3",
        "precision": "bf16-mixed (matmul ieee, conv tf32)",
    }
    with ieee_float32():  # puts the flags back afterwards
        torch.backends.cuda.matmul.allow_tf32 = True
        assert float32_modes("cuda") == "matmul tf32, conv tf32"
        torch.set_float32_matmul_precision("medium")
        assert float32_modes("cpu").startswith("matmul bf16")  # oneDNN's bfloat16 products


def test_result_row_needs_a_tested_model() -> None:
    model = SimpleNamespace(test_result=None)
    with pytest.raises(ValueError, match="has not been tested"):
        result_row(model, SimpleNamespace(), cell_id="", loss_params="", trained=None, seed=0,
                   provenance={})  # fmt: skip


def test_similarities_npz_holds_float_sp_and_sn(tmp_path: Path) -> None:
    save_similarities(tmp_path / "similarities.npz", np.array([0.5]), np.array([0.1]))
    with np.load(tmp_path / "similarities.npz") as data:
        assert sorted(data.files) == ["sn", "sp"] and data["sp"].dtype == np.float32
    assert [p.name for p in tmp_path.iterdir()] == ["similarities.npz"]


def test_rows_keep_the_users_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        append_row(tmp_path / "runs.csv", make_row())
    finally:
        os.umask(old)
    assert (tmp_path / "runs.csv").stat().st_mode & 0o777 == 0o644
