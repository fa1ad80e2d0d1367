"""Leaderboard table → Markdown: mean ± 95 % CI per metric, the paper's number beside ours."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from benchmark.evaluation.metrics import metric_columns

# Settings shown once in a group's heading when all its rows share them, else as a column.
_SHARED: tuple[str, ...] = ("dataset", "protocol", "backbone", "pretrained", "embedding_dim")
_SHARED += ("image_size", "p", "k", "epochs", "include_val", "rerank")


def read_paper_reference(path: Path) -> pd.DataFrame:
    """`results/paper_reference.csv`: one published number per row; `loss` is our class name."""
    return pd.read_csv(path, dtype={"value": float}, keep_default_na=False)


def paper_value(
    paper: pd.DataFrame, dataset: str | None, loss: str, labels: str, metric: str
) -> float | None:
    """The paper's number for this dataset, loss class, labels and metric, if it reports one."""
    if dataset is None or paper.empty:
        return None
    hit = paper[
        (paper["dataset"] == dataset)
        & (paper["loss"] == loss)
        & (paper["labels"] == labels)
        & (paper["metric"] == metric)
    ]
    return float(hit["value"].iloc[0]) if len(hit) else None


def format_params(loss_params: str) -> str:
    """`{"m": 0.4, "gamma": 80}` → `m=0.4, gamma=80`; sources by class name, no None."""
    try:
        params = json.loads(loss_params) if loss_params else {}
    except json.JSONDecodeError:
        return loss_params
    if not isinstance(params, dict):
        return str(params)
    parts = []
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, dict):  # a class_path/init_args block, e.g. the similarity source
            value = str(value.get("class_path", value)).rsplit(".", 1)[-1]
        parts.append(f"{key}={value}")
    return ", ".join(parts)


def format_cell(mean: float, ci: float, paper: float | None) -> str:
    """`66.10 ± 0.80 (paper 66.7)`; no interval for one seed, `–` for a missing metric."""
    if math.isnan(mean):
        return "–"
    text = f"{mean:.2f}" if math.isnan(ci) else f"{mean:.2f} ± {ci:.2f}"
    return text if paper is None else f"{text} (paper {paper:g})"


def format_difference(mean: float, ci: float) -> str:
    """`+3.20 ± 1.10 *`: a paired difference, starred when its 95 % CI excludes 0."""
    if math.isnan(mean):
        return "–"
    if math.isnan(ci):
        return f"{mean:+.2f}"
    return f"{mean:+.2f} ± {ci:.2f}" + (" *" if abs(mean) > ci else "")


def leaderboard_markdown(
    board: pd.DataFrame,
    *,
    title: str,
    description: str,
    paper: pd.DataFrame,
    paper_datasets: dict[str, str],
) -> str:
    """The whole leaderboard page: one table per group, in the order of `board`.

    Args:
        paper_datasets: group name → the paper dataset its numbers are compared with; groups
            absent here (synthetic data, subsets) show no paper numbers.
    """
    lines = [f"# {title}", ""]
    if description:
        lines += [description, ""]
    lines += [
        "Metrics in percent: mean ± half-width of the 95 % Student-t confidence interval over "
        "seeds (no interval for one seed). `(paper x)` is the number the paper reports for the "
        "same dataset, loss and labels, shown only where the suite declares its data comparable. "
        "`none (pretrained)` is the group's floor: the same network and evaluation with no "
        "training. `Δ floor` and `Δ Circle` are paired differences of the first metric (per seed, "
        "then mean ± 95 % CI) to the floor and to pair-wise Circle loss; `*` marks an interval "
        "that excludes 0.",
        "",
    ]
    for group, rows in board.groupby("group", sort=False):
        lines += _group_table(str(group), rows, paper, paper_datasets.get(str(group)))
    return "\n".join(lines)


def _group_table(
    group: str, rows: pd.DataFrame, paper: pd.DataFrame, paper_dataset: str | None
) -> list[str]:
    shared = [c for c in _SHARED if c in rows and rows[c].nunique() == 1 and rows[c].iloc[0]]
    varying = [c for c in _SHARED if c in rows and rows[c].nunique() > 1]
    facts = ", ".join(f"{c} `{rows[c].iloc[0]}`" for c in shared if c not in ("p", "k"))
    if "p" in shared and "k" in shared:
        facts += f", P×K `{rows['p'].iloc[0]}×{rows['k'].iloc[0]}`"
    if "requires" in rows and rows["requires"].iloc[0]:
        facts += f"; needs `{rows['requires'].iloc[0]}`"
    metrics = [m for m in metric_columns([c[:-5] for c in rows if c.endswith("_mean")])]
    metrics = [m for m in metrics if rows[f"{m}_mean"].notna().any()]
    deltas = [
        r for r in ("floor", "circle")
        if metrics and rows.get(f"{metrics[0]}_vs_{r}_mean", pd.Series()).notna().any()
    ]  # fmt: skip
    delta_heads = [f"Δ {'floor' if r == 'floor' else 'Circle'} {metrics[0]}" for r in deltas]
    head = ["loss", "labels", "params", *varying, "seeds", *metrics, *delta_heads, "s/run"]
    lines = [f"## {group}", "", facts, "", "| " + " | ".join(head) + " |"]
    lines.append("|" + "---|" * len(head))
    for _, row in rows.iterrows():
        cells = [row["loss"], row["labels"], format_params(row["loss_params"])]
        cells += [str(row[c]) for c in varying] + [str(row["n_seeds"])]
        for m in metrics:
            ref = paper_value(paper, paper_dataset, row["loss"], row["labels"], m)
            cells.append(format_cell(row[f"{m}_mean"], row[f"{m}_ci95"], ref))
        for r in deltas:
            prefix = f"{metrics[0]}_vs_{r}"
            cells.append(format_difference(row[f"{prefix}_mean"], row[f"{prefix}_ci95"]))
        wall = row.get("wall_time_s_mean", math.nan)
        cells.append("–" if pd.isna(wall) else f"{float(wall):.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def terminal_summary(board: pd.DataFrame) -> list[tuple[str, list[list[str]]]]:
    """Per group, one row per loss: the first metric ± CI and its differences to the floor and
    to pair-wise Circle loss: what the command prints when it has aggregated the board."""
    tables = []
    for group, rows in board.groupby("group", sort=False):
        metrics = metric_columns([c[:-5] for c in rows if c.endswith("_mean")])
        metrics = [m for m in metrics if rows[f"{m}_mean"].notna().any()]
        if not metrics:
            continue
        first = metrics[0]
        head = ["loss", "labels", "seeds", first, f"Δ floor {first}", f"Δ Circle {first}"]
        body = [head]
        for _, row in rows.iterrows():
            deltas = [
                format_difference(
                    row.get(f"{first}_vs_{r}_mean", math.nan),
                    row.get(f"{first}_vs_{r}_ci95", math.nan),
                )
                for r in ("floor", "circle")
            ]
            mean_ci = format_cell(row[f"{first}_mean"], row[f"{first}_ci95"], None)
            body.append(
                [str(row["loss"]), str(row["labels"]), str(row["n_seeds"]), mean_ci, *deltas]
            )
        tables.append((str(group), body))
    return tables
