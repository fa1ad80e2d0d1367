"""A tiny random ViT through `circlebench fit`, the frozen track, a suite and `tune`, on synthetic
data.

The ViT-S/14 configs run with timm's `test_vit` (patch 16, 64-d tokens, 6 blocks) at 32 px in its
place: the same code path (token backbone, CLS pooling, no BatchNorm) in about a second.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import save_file

from benchmark.cli import main
from benchmark.leaderboard.aggregate import read_leaderboard
from benchmark.leaderboard.command import main as leaderboard
from benchmark.tuning.command import main as tune
from tests.benchmark.tuning.test_command import tiny_frozen

VIT = (
    Path(__file__).resolve().parents[3] / "experiments" / "synthetic" / "fine_grained" / "vit_small"
)
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(autouse=True)
def _bare_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    """LightningCLI warns when given args while sys.argv holds pytest's own."""
    monkeypatch.setattr(sys, "argv", ["circlebench"])


@pytest.fixture(scope="module")
def vit_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fixed tiny ViT as a safetensors file, as a user's downloaded weights would be."""
    torch.manual_seed(0)
    model = timm.create_model("test_vit", pretrained=False, img_size=32)
    path = tmp_path_factory.mktemp("weights") / "test_vit.safetensors"
    save_file(model.state_dict(), path)
    return path


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def frozen_args(weights: Path, cache: Path) -> list[str]:
    return tiny_frozen(weights, cache, backbone="test_vit", features=64)


@pytest.mark.parametrize("pooling", ["cls", "cls_patch_mean"])
def test_fit_trains_a_tiny_vit_end_to_end(tmp_path: Path, vit_weights: Path, pooling: str) -> None:
    main(
        [
            "fit",
            "--config",
            str(VIT / "circle.yaml"),
            "--model.embedder.init_args.backbone=test_vit",
            f"--model.embedder.init_args.pretrained={vit_weights}",
            f"--model.embedder.init_args.pooling={pooling}",
            "--model.embedder.init_args.layer_decay=0.75",
            "--data.init_args.image_size=32",
            "--data.init_args.images_per_class=4",
            "--trainer.max_epochs=1",
            "--trainer.limit_train_batches=2",
            *QUIET,
            "--wandb=false",
            f"--results_csv={tmp_path / 'runs.csv'}",
            f"--trainer.default_root_dir={tmp_path / 'runs'}",
        ]
    )
    (row,) = rows(tmp_path / "runs.csv")
    assert row["backbone"] == "test_vit" and row["pretrained"] == str(vit_weights)
    assert 0.0 <= float(row["R@1"]) <= 100.0


def test_the_frozen_track_caches_vit_features_and_trains_a_head(
    tmp_path: Path, vit_weights: Path
) -> None:
    main(
        [
            "fit",
            "--config",
            str(VIT / "frozen" / "circle.yaml"),
            *frozen_args(vit_weights, tmp_path / "cache"),
            "--trainer.fast_dev_run=1",
            *QUIET,
            "--wandb=false",
            f"--results_csv={tmp_path / 'runs.csv'}",
            f"--trainer.default_root_dir={tmp_path / 'runs'}",
        ]
    )
    (row,) = rows(tmp_path / "runs.csv")
    assert row["embedding_dim"] == "64" and 0.0 <= float(row["R@1"]) <= 100.0
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 2  # training and test features


@pytest.mark.timeout(900)
def test_tune_runs_trials_on_cached_vit_features(
    tmp_path: Path, vit_weights: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    spaces = VIT.parents[2] / "spaces"
    tune(
        [
            *["--config", str(VIT / "frozen" / "circle.yaml")],
            *["--space", str(spaces / "circle.yaml")],
            *["--storage", str(tmp_path / "study.journal")],
            *["--trials", "2", "--folds", "2", "--epochs", "1", "--workers", "1"],
            "--",
            *frozen_args(vit_weights, tmp_path / "cache"),
        ]
    )
    summary = json.loads((tmp_path / "circle.json").read_text())
    assert summary["trials"]["complete"] == 2 and summary["budget"]["folds"] == 2


@pytest.mark.timeout(900)
def test_a_suite_runs_tiny_vit_cells_and_their_floors(
    tmp_path: Path, vit_weights: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ViT-S/14 configs as a suite's groups, end to end and frozen, each with its floor."""
    for src, dst in [(VIT / "circle.yaml", "vit"), (VIT / "frozen" / "circle.yaml", "vit_frozen")]:
        (tmp_path / "experiments" / dst).mkdir(parents=True)
        (tmp_path / "experiments" / dst / "circle.yaml").write_text(src.read_text())
    end_to_end = [
        "--model.embedder.init_args.backbone=test_vit",
        f"--model.embedder.init_args.pretrained={vit_weights}",
        "--data.init_args.image_size=32",
        "--data.init_args.images_per_class=4",
        "--trainer.limit_train_batches=2",
    ]
    frozen = [*frozen_args(vit_weights, tmp_path / "cache"), "--trainer.limit_train_batches=2"]
    suites = tmp_path / "experiments" / "suites"
    suites.mkdir()
    (suites / "vit.yaml").write_text(
        json.dumps(
            {
                "seeds": [0],
                "overrides": [*QUIET, "--trainer.max_epochs=1"],
                "groups": {
                    "e2e": {
                        "configs": "experiments/vit/*.yaml",
                        "floor": "experiments/vit/circle.yaml",
                        "overrides": end_to_end,
                    },
                    "frozen": {
                        "configs": "experiments/vit_frozen/*.yaml",
                        "floor": "experiments/vit_frozen/circle.yaml",
                        "overrides": frozen,
                    },
                },
            }
        )
    )
    monkeypatch.chdir(tmp_path)
    leaderboard(["--suite", "vit", "--no-wandb", "--jobs", "1", "--isolation", "in-process"])
    board = read_leaderboard(tmp_path / "results/suites/vit/leaderboard.csv")
    assert sorted(board["experiment"]) == [
        "e2e/circle",
        "e2e/floor",
        "frozen/circle",
        "frozen/floor",
    ]
    assert board["R@1_mean"].between(0, 100).all()
