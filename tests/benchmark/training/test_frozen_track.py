"""Frozen-backbone track end to end: `circlebench fit|test` on cached synthetic features."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmark.cli import main
from benchmark.evaluation import RetrievalEvaluator
from datamodules import SyntheticDataModule

FROZEN = (
    Path(__file__).resolve().parents[3] / "experiments" / "synthetic" / "fine_grained" / "frozen"
)
# test_efficientnet (256 features) at 32 px on 4 images per class: about a second per run.
TINY = [
    "--data.init_args.extractor.init_args.backbone=test_efficientnet",
    "--model.embedder.init_args.in_features=256",
    "--model.embedder.init_args.embedding_dim=256",
    "--data.init_args.images.init_args.image_size=32",
    "--data.init_args.images.init_args.images_per_class=4",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--wandb=false",
]
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(autouse=True)
def _bare_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    """LightningCLI warns when given args while sys.argv holds pytest's own."""
    monkeypatch.setattr(sys, "argv", ["circlebench"])


def circlebench(
    tmp: Path, weights: Path, command: str, config: Path, *args: str
) -> list[dict[str, str]]:
    """Run `circlebench <command>` on tiny cached features (`weights`: the `weights` fixture);
    return the rows of its results CSV so far."""
    csv_path = tmp / "runs.csv"
    main(
        [
            command,
            "--config",
            str(config),
            *TINY,
            f"--data.init_args.extractor.init_args.pretrained={weights}",
            f"--data.init_args.cache_dir={tmp / 'cache'}",
            f"--results_csv={csv_path}",
            f"--trainer.default_root_dir={tmp / 'runs'}",
            *args,
        ]
    )
    with open(csv_path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize(
    ("name", "extra"),
    [("circle", []), ("normface", ["--model.loss.init_args.embedding_dim=256"])],
)
def test_fast_dev_run_fit_on_cached_features(
    tmp_path: Path, weights: Path, name: str, extra: list[str]
) -> None:
    config = FROZEN / f"{name}.yaml"
    (row,) = circlebench(tmp_path, weights, "fit", config, "--trainer.fast_dev_run=1", *extra)
    assert row["dataset"] == "synthetic" and row["embedding_dim"] == "256"
    assert 0.0 <= float(row["R@1"]) <= 100.0
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 2  # training and test features


def test_a_second_run_reads_the_features_the_first_cached(tmp_path: Path, weights: Path) -> None:
    config = FROZEN / "circle.yaml"
    circlebench(tmp_path, weights, "fit", config, "--trainer.fast_dev_run=1")
    entries = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").glob("*.npy")}
    rows = circlebench(
        tmp_path, weights, "fit", config, "--trainer.fast_dev_run=1", "--seed_everything=1"
    )
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").glob("*.npy")} == entries
    assert len(rows) == 2 and rows[1]["seed"] == "1"


def test_the_identity_head_tests_the_zero_shot_floor(tmp_path: Path, weights: Path) -> None:
    (row,) = circlebench(
        tmp_path,
        weights,
        "test",
        FROZEN / "circle.yaml",
        "--model.embedder.init_args.kind=identity",
    )
    (entry,) = (tmp_path / "cache").glob("*.npy")  # `test` computes the test features only
    images = SyntheticDataModule(num_train_classes=40, num_test_classes=40, images_per_class=4)
    labels = torch.tensor(images.splits()[2].query.labels)
    features = torch.from_numpy(np.load(entry))  # [160, 256], as the backbone computed them
    expected = RetrievalEvaluator("same_set", (1,)).evaluate(features, labels)["R@1"]
    assert float(row["R@1"]) == pytest.approx(100 * expected, abs=1e-3)
