"""Leaderboard table → Markdown: mean ± 95 % CI per metric, the paper's number beside ours."""

from __future__ import annotations

import json
import math

import pandas as pd

from benchmark.leaderboard.aggregate import REFERENCES, board_metrics, is_tuned
from benchmark.training.rows import FLOOR_LOSS
from benchmark.tuning.tuned import GroupStudies

_REFERENCE_NAMES = {"floor": "floor", "circle": "Circle", "default": "default"}
# Settings shown once in a group's heading when all its rows share them, else as a column.
_SHARED: tuple[str, ...] = ("dataset", "protocol", "backbone", "pretrained", "embedding_dim")
_SHARED += ("image_size", "p", "k", "epochs", "include_val", "rerank")


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
    mean, ci = _as_written(mean), _as_written(ci)
    text = f"{mean:.2f}" if math.isnan(ci) else f"{mean:.2f} ± {ci:.2f}"
    return text if paper is None else f"{text} (paper {paper:g})"


def _as_written(value: float) -> float:
    """`value` as leaderboard.csv holds it (`aggregate.write_csv`, 4 decimals), so that means
    the CSV writes equal are shown equal: 41.12502 and 41.125 (a tie of two means of 4-decimal
    rows) are 41.1250 there, not 41.13 and 41.12 here."""
    return round(float(value), 4)


def format_difference(mean: float, ci: float) -> str:
    """`+3.20 ± 1.10 *`: a paired difference, starred when its 95 % CI excludes 0."""
    if math.isnan(mean):
        return "–"
    mean, ci = _as_written(mean), _as_written(ci)
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
    studies: dict[str, GroupStudies] | None = None,
) -> str:
    """The whole leaderboard page: one table per group, in the order of `board`, with the
    paper's numbers for the groups in `paper_datasets` (group → dataset) and the tuning of
    the groups in `studies`."""
    lines = [f"# {title}", ""]
    if description:
        lines += [description, ""]
    lines += [
        "Metrics in percent: mean ± half-width of the 95 % Student-t confidence interval over "
        "seeds (no interval for one seed). `(paper x)` is the number the paper reports for the "
        "same dataset, loss and labels, shown only where the suite declares its data comparable. "
        "`none (pretrained)` is the group's floor: the same network and evaluation with no "
        "training. A `tuned` row trains the setting `circlebench tune` found for its loss on "
        "class-disjoint folds of the training classes (never the test classes), with the budget "
        "its group states, the same for every loss of the group; only tuned rows are compared. "
        "`Δ floor` and `Δ Circle` are paired differences of the first metric (per seed, then "
        "mean ± 95 % CI) to the floor and to tuned pair-wise Circle loss; `Δ default`, of a tuned "
        "loss to the same loss as configured; `*` marks an interval that excludes 0. A "
        "`default` row (the configured setting, no budget spent finding it) is shown, not "
        "compared.",
        "",
    ]
    for group, rows in board.groupby("group", sort=False):
        lines += _group_table(str(group), rows, paper, paper_datasets.get(str(group)))
        if studies and str(group) in studies:
            intro, head, tuning = tuning_rows(studies[str(group)])
            lines += [intro, "", *_table(head, tuning), ""]
    return "\n".join(lines)


def setting(row: pd.Series) -> str:
    """`tuned` for a row trained with a tuned setting, else `default`."""
    return "tuned" if is_tuned(row) else "default"


def tuning_rows(studies: GroupStudies) -> tuple[str, list[str], list[list[str]]]:
    """How each loss of a group was tuned, as (a sentence with the budget, header, rows): per
    loss the validation score of its configured setting, of the median trial and of the best
    (how hard it was to tune), the best's epochs and values."""
    metric = "val " + next((s["budget"]["metric"] for s in studies.summaries.values()), "")
    intro = (
        f"Tuning (`circlebench tune`): {studies.budget}; every loss the same. Validation "
        f"scores are the mean {metric} over the folds at the chosen epoch: the configured "
        "setting's, the median trial's and the best's, with its epoch count and values."
    )
    head = ["loss", f"{metric}: default", "median", "best", "epochs", "trials (failed)"]
    head.append("tuned setting")
    rows = []
    for stem, summary in studies.summaries.items():
        default, best, counts = summary["default"], summary["best"], summary["trials"]
        trials = counts["complete"] + counts["failed"] + counts["pruned"]
        params = ", ".join(f"{k}={_short(v)}" for k, v in best["params"].items())
        rows.append(
            [
                stem,
                f"{default['value']:.2f}" if default else "–",
                f"{summary['median_value']:.2f}",
                f"{best['value']:.2f}",
                str(best["epoch"]),
                f"{trials} ({counts['failed']})",
                params,
            ]
        )
    return intro, head, rows


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return [*lines, *("| " + " | ".join(row) + " |" for row in rows)]


def _short(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _group_table(
    group: str, rows: pd.DataFrame, paper: pd.DataFrame, paper_dataset: str | None
) -> list[str]:
    shared = [c for c in _SHARED if c in rows and rows[c].nunique() == 1 and rows[c].iloc[0]]
    pk = "p" in shared and "k" in shared  # one fact, P×K; else the shared one of the two
    facts = ", ".join(f"{c} `{rows[c].iloc[0]}`" for c in shared if not (pk and c in ("p", "k")))
    if pk:
        facts += f", P×K `{rows['p'].iloc[0]}×{rows['k'].iloc[0]}`"
    if "requires" in rows and rows["requires"].iloc[0]:
        facts += f"; needs `{rows['requires'].iloc[0]}`"
    head, body = _columns(rows, paper, paper_dataset)
    return [f"## {group}", "", facts, "", *untuned_note(rows), *_table(head, body), ""]


def _columns(
    rows: pd.DataFrame, paper: pd.DataFrame, paper_dataset: str | None
) -> tuple[list[str], list[list[str]]]:
    """A group's table (header, rows): per row its loss, labels, setting, params, the `_SHARED`
    settings that vary, seeds, every metric, the first metric's differences and seconds per run."""
    varying = [c for c in _SHARED if c in rows and rows[c].nunique() > 1]
    # `paper` (`results/paper_reference.csv`: one published number per row, `loss` our class
    # name): the first number for this dataset, loss class, labels and metric
    mine = paper[paper["dataset"] == paper_dataset] if paper_dataset and len(paper) else paper[:0]
    published = {(r.loss, r.labels, r.metric): float(r.value) for r in mine[::-1].itertuples()}
    metrics = board_metrics(rows)
    deltas = _references(rows, metrics[0]) if metrics else []
    delta_heads = [f"Δ {_REFERENCE_NAMES[r]} {metrics[0]}" for r in deltas]
    tuned = rows.apply(is_tuned, axis=1).any()
    settings = ["setting"] if tuned else []
    head = ["loss", "labels", *settings, "params", *varying, "seeds", *metrics, *delta_heads]
    head += ["s/run"]
    body = []
    for _, row in rows.iterrows():
        cells = [row["loss"], row["labels"], *([setting(row)] if tuned else [])]
        cells.append(format_params(row["loss_params"]))
        cells += [str(row[c]) for c in varying] + [str(row["n_seeds"])]
        for m in metrics:
            ref = published.get((row["loss"], row["labels"], m))
            cells.append(format_cell(row[f"{m}_mean"], row[f"{m}_ci95"], ref))
        for r in deltas:
            prefix = f"{metrics[0]}_vs_{r}"
            cells.append(format_difference(row[f"{prefix}_mean"], row[f"{prefix}_ci95"]))
        wall = row.get("wall_time_s_mean", math.nan)
        cells.append("–" if pd.isna(wall) else f"{float(wall):.0f}")
        body.append(cells)
    return head, body


def _references(rows: pd.DataFrame, metric: str) -> list[str]:
    """The references (`aggregate.REFERENCES`) that some row of `rows` has a difference to."""
    return [r for r in REFERENCES if rows.get(f"{metric}_vs_{r}_mean", pd.Series()).notna().any()]


def untuned_note(rows: pd.DataFrame) -> list[str]:
    """Why a group's untuned rows carry no difference (`aggregate.compared`), as a paragraph."""
    tuned = rows.apply(is_tuned, axis=1)
    losses = rows["loss"] != FLOOR_LOSS
    if tuned.any() and (losses & ~tuned).any():
        return [
            "The `default` rows run each loss's configured setting, not tuned with the group's "
            "budget: shown for reference, not compared (no Δ floor, no Δ Circle, not in the "
            "plots).",
            "",
        ]
    if not tuned.any() and losses.any():
        return [
            "An untuned pipeline check: every loss runs its configured setting, with no tuning "
            "budget, so the losses are shown and not compared (no Δ floor, no Δ Circle, no "
            "plots). These rows show that each loss trains end to end in this track.",
            "",
        ]
    return []


def terminal_summary(board: pd.DataFrame) -> list[tuple[str, list[list[str]]]]:
    """Per group, one row per loss: the first metric ± CI and its differences to the floor and
    to pair-wise Circle loss: what the command prints when it has aggregated the board."""
    tables = []
    for group, rows in board.groupby("group", sort=False):
        metrics = board_metrics(rows)
        if not metrics:
            continue
        head, body = _columns(rows, pd.DataFrame(), None)
        shown = {"loss", "labels", "setting", "seeds", metrics[0]}
        keep = [i for i, name in enumerate(head) if name in shown or name.startswith("Δ ")]
        tables.append((str(group), [[line[i] for i in keep] for line in [head, *body]]))
    return tables
