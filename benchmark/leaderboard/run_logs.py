"""What a leaderboard's runs logged, read from the run folders its rows name (`run_dir`; absent
ones are left out): `metrics.csv` (s_p and s_n per training step) and `similarities.npz` (each
test query's lowest positive `sp` and highest negative `sn` similarity)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from benchmark.leaderboard.aggregate import experiments
from benchmark.training.rows import run_metrics

CURVES = ("train/sp_mean", "train/sn_mean")
SMOOTHING = 50  # per-step batch statistics are noisy: a running mean over 1/50 of the steps


def runs_of(rows: pd.DataFrame, entries: pd.DataFrame) -> pd.DataFrame:
    """The results rows of the experiments of board `entries`."""
    return rows[experiments(rows).isin(entries["experiment"])] if len(rows) else rows


def training_curves(runs: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per experiment with logs: `train/sp_mean`, `train/sn_mean` by step, mean over its seeds,
    smoothed over 1/`SMOOTHING` of the steps; indexed by step."""
    curves = {}
    for name, cells in runs.groupby(experiments(runs), sort=False):
        logs = [run_metrics(str(d)) for d in cells.get("run_dir", []) if str(d)]
        logs = [log[["step", *CURVES]].dropna() for log in logs if {"step", *CURVES} <= set(log)]
        if logs:
            curve = pd.concat(logs).groupby("step").mean()
            window = max(1, len(curve) // SMOOTHING)
            curves[str(name)] = curve.rolling(window, min_periods=1).mean()
    return curves


def logged_columns(runs: pd.DataFrame) -> set[str]:
    """Every key that the runs' `metrics.csv` files hold (`val/R@1`, `train/sp_mean`, ...)."""
    run_dirs = [str(d) for d in runs.get("run_dir", []) if str(d)]
    return {c for d in run_dirs for c in run_metrics(d, nrows=0).columns}


@dataclass(frozen=True)
class FinalSimilarities:
    """The test queries' hardest similarities of one run: `sn [Q]`, `sp [Q]` (cosines)."""

    experiment: str
    sn: np.ndarray
    sp: np.ndarray
    circle_m: float | None  # Circle loss's margin m: its decision boundary; None for other losses


def final_similarities(runs: pd.DataFrame) -> list[FinalSimilarities]:
    """One per experiment with a `similarities.npz`: that of its lowest seed."""
    found = []
    for name, cells in runs.groupby(experiments(runs), sort=False):
        cells = cells.sort_values("seed", key=lambda s: s.astype(int))
        for _, cell in cells.iterrows():
            npz = Path(str(cell.get("run_dir", ""))) / "similarities.npz"
            if str(cell.get("run_dir", "")) and npz.is_file():
                with np.load(npz) as data:
                    found.append(
                        FinalSimilarities(str(name), data["sn"], data["sp"], circle_margin(cell))
                    )
                break
    return found


def circle_margin(cell: pd.Series) -> float | None:
    """m of a Circle loss row (from `loss_params`); None for any other loss."""
    if cell.get("loss") != "CircleLoss":
        return None
    try:
        return float(json.loads(cell.get("loss_params") or "{}")["m"])
    except (KeyError, TypeError, ValueError):
        return None
