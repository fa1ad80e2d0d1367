"""The results CSV: one row per finished run (`ResultRow`), appended atomically by concurrent
writers and read back as a table; importing this module does not import Lightning.

A row, the unit the leaderboard aggregates, carries everything that makes two runs comparable,
the metrics in percent, and where it came from (git sha, config hash, run directory).
"""

from __future__ import annotations

import csv
import fcntl
import io
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import pandas as pd

from benchmark.evaluation.metrics import metric_columns
from core.atomic import write_text

# Columns after the metrics: how the numbers were obtained, not what was run.
# The last three say where it ran (rows written before them have them empty; metrics computed
# on a GPU or under TF32 differ slightly, so they are recorded but not a setting).
PROVENANCE_COLUMNS = (
    "eval_backend", "skipped_queries", "checkpoint", "global_step", "wall_time_s", "git_sha",
    "config_hash", "run_dir", "cell_recipe", "device", "gpu", "precision",
)  # fmt: skip
FLOOR_LOSS = "none (pretrained)"  # the loss column of an untrained model's row
Rows = list[dict[str, Any]]  # CSV rows by column name, as `csv.DictReader` gives them


@dataclass(frozen=True)
class ResultRow:
    """One finished run; metrics in percent, keyed as the evaluator names them (`R@1`)."""

    cell_id: str
    dataset: str
    track: str  # "end-to-end" (the backbone trained) or "frozen" (cached backbone features)
    protocol: str
    labels: str
    loss: str
    loss_params: str
    backbone: str
    pretrained: str
    embedding_dim: int
    image_size: str
    p: int
    k: int
    epochs: int
    seed: int
    include_val: str
    # The gallery's order: "" by similarity, else the re-ranking and its parameters. A setting,
    # not provenance like eval_backend: backends return the same numbers, re-ranking does not.
    rerank: str = ""
    # "" for the loss as configured; for a setting found by `circlebench tune`, its budget
    # (`Budget.describe()`): a setting, since it decides what was trained.
    tuning: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    eval_backend: str = ""
    skipped_queries: int = 0  # queries without a positive in the gallery: not in the metrics
    checkpoint: str = ""  # the evaluated weights; "" for the untrained model
    global_step: int = 0  # optimiser steps behind those weights
    wall_time_s: float = 0.0
    git_sha: str = ""
    config_hash: str = ""
    run_dir: str = ""
    cell_recipe: str = ""  # the leaderboard cell's recipe (`suite.Cell.recipe`); "" outside one
    device: str = ""  # "cpu" or "cuda", with "×N" for N DDP processes
    gpu: str = ""  # the CUDA device's name; "" on the CPU
    precision: str = ""  # the Trainer's, with the float32 modes (`devices.precision_label`)

    def as_flat_dict(self) -> dict[str, str | int | float]:
        """Columns in a fixed order: identity, metrics in registry order, provenance."""
        row = asdict(self)
        metrics = row.pop("metrics")
        ordered = metric_columns(metrics)
        ordered += sorted(set(metrics) - set(ordered))  # metrics the registry does not know
        head = {k: v for k, v in row.items() if k not in PROVENANCE_COLUMNS}
        tail = {k: row[k] for k in PROVENANCE_COLUMNS}
        return {**head, **{k: round(metrics[k], 4) for k in ordered}, **tail}


# The columns that make two rows comparable: every field but the cell, seed, metrics, provenance.
SETTINGS_COLUMNS = tuple(
    f.name
    for f in fields(ResultRow)
    if f.name not in ("cell_id", "seed", "metrics", *PROVENANCE_COLUMNS)
)


def append_row(path: str | Path, row: ResultRow) -> None:
    """Append `row` to the CSV at `path`, safe when several processes finish at once
    (`_rewrite`); the header widens if this row brings new metric columns."""
    new = row.as_flat_dict()

    def add(header: list[str], rows: Rows) -> tuple[list[str], Rows]:
        return [*header, *(k for k in new if k not in header)], [*rows, new]

    _rewrite(path, add)


def drop_rows(path: str | Path, cell_ids: set[str]) -> None:
    """Remove the rows of `cell_ids` from the CSV at `path` (`_rewrite`)."""
    _rewrite(path, lambda header, rows: (header, [r for r in rows if r["cell_id"] not in cell_ids]))


def _rewrite(path: str | Path, edit: Callable[[list[str], Rows], tuple[list[str], Rows]]) -> None:
    """Replace the CSV at `path` by `edit(header, rows)` of its content (none if absent).

    An exclusive `fcntl` lock on a sidecar `.lock` file serialises writers across processes;
    the new content replaces the CSV atomically (`write_text`), so a reader never sees half.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rows: Rows = []
        header: list[str] = []
        if path.exists():
            with open(path, newline="") as f:
                reader = csv.DictReader(f)
                header = list(reader.fieldnames or [])
                rows = list(reader)
        header, rows = edit(header, rows)
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=header, restval="", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        write_text(path, buffer.getvalue())


def read_results(path: str | Path) -> pd.DataFrame:
    """Rows written by `append_row`: text columns verbatim, metric columns and wall time float.

    A missing file reads as no rows (with the `cell_id` column, so callers can filter).
    """
    path = Path(path)
    if not path.is_file():
        return pd.DataFrame(columns=["cell_id"])
    rows = pd.read_csv(path, dtype=str, keep_default_na=False)
    for column in [*metric_columns(rows.columns), "wall_time_s"]:
        if column in rows:
            rows[column] = pd.to_numeric(rows[column].replace("", math.nan))
    return rows


def run_metrics(run_dir: str | Path, nrows: int | None = None) -> pd.DataFrame:
    """Every value a run logged (Lightning's `metrics.csv`) across its resumes: the logs kept
    before each resume (`metrics-<n>.csv`, `keep_earlier_metrics`) first. Empty when none;
    `nrows`: at most that many rows of each log (0: the columns only)."""
    run = Path(run_dir)
    earlier = sorted(run.glob("metrics-*.csv"), key=lambda p: int(p.stem.split("-")[1]))
    parts = [pd.read_csv(p, nrows=nrows) for p in [*earlier, run / "metrics.csv"] if p.is_file()]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def keep_earlier_metrics(run_dir: Path) -> None:
    """Before a run resumes in `run_dir`: its `metrics.csv`, which Lightning's CSV writer deletes
    when it starts there, becomes `metrics-<n>.csv` (n: the resumes before this one)."""
    path = run_dir / "metrics.csv"
    if path.is_file():
        path.rename(run_dir / f"metrics-{len(list(run_dir.glob('metrics-*.csv')))}.csv")
