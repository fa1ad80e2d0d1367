"""Two-process CPU DDP (gloo): one row, and the gathered evaluation equals a single-process one."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "experiments" / "synthetic" / "reid" / "circle_class.yaml"
TINY = [
    "--model.embedder.init_args.backbone=test_efficientnet",
    "--model.embedder.init_args.pretrained=false",
    # the configs' residual head keeps Lite0's 1280 features; the tiny model has 256
    "--model.embedder.init_args.head=linear",
    "--data.init_args.image_size=32",
    "--data.init_args.images_per_class=8",
    "--data.init_args.num_test_classes=13",  # 104 images: eval batches split unevenly
    "--data.init_args.eval_batch_size=16",
    # 2 validation ids: one batch per validation set, so rank 1 embeds none and still gathers
    "--data.init_args.val_classes=2",
    "--model.loss.init_args.source.init_args.num_classes=38",
    "--data.init_args.batches_per_epoch=2",
    "--trainer.max_epochs=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--wandb=false",
]
METRICS = ("R@1", "R@5", "R@10", "mAP", "MAP@R", "R-Precision")


def circlebench(tmp: Path, *args: str) -> tuple[list[dict[str, str]], str]:
    """Run `python -m benchmark.cli <args>` as a user would; return the results rows and output."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "benchmark.cli", *args, "--config", str(CONFIG), *TINY]
    command += [f"--results_csv={tmp / 'runs.csv'}", f"--trainer.default_root_dir={tmp / 'runs'}"]
    done = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(tmp / "runs.csv", newline="") as f:
        return list(csv.DictReader(f)), done.stdout + done.stderr


@pytest.mark.timeout(300)
def test_two_process_ddp_fit_writes_one_row_with_the_single_process_metrics(tmp_path) -> None:
    rows, output = circlebench(
        tmp_path,
        "fit",
        "--trainer.accelerator=cpu",
        "--trainer.devices=2",
        "--trainer.strategy=ddp",
    )
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in output
    assert len(rows) == 1  # rank 0 alone writes
    metrics_csv = Path(rows[0]["run_dir"]) / "metrics.csv"
    assert "val/R@1" in metrics_csv.read_text().splitlines()[0]
    (checkpoint,) = (tmp_path / "runs").rglob("last.ckpt")
    single = circlebench(tmp_path, "test", f"--ckpt_path={checkpoint}")[0][-1]
    for metric in METRICS:  # gathered from both ranks, each test image exactly once
        assert float(rows[0][metric]) == pytest.approx(float(single[metric]), abs=1e-3), metric
