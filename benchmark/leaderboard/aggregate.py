"""Results rows → leaderboard table: mean and 95 % confidence interval over seeds, and paired
differences to the group's references.

A leaderboard row is one experiment (the cell id without its seed), whose runs must agree on
every settings column but `epochs` where each tested its validation split's best checkpoint.
The interval is Student's t, `mean ± t(0.975, n-1) · s / √n` (ddof=1), empty for one seed.
Seeds pair runs across a group's experiments, so a difference to a reference (`REFERENCES`: the
floor, tuned pair-wise Circle loss and, for `<stem>.tuned`, the same loss as configured) is the
paired t interval of d_s = x_s − y_s over the seeds both ran:
`<metric>_vs_<reference>_mean` and `_ci95`. Only losses tuned with the group's equal budget are
compared (`compared`); a configured setting is shown, with only its tuned row's `vs_default`.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from scipy import stats

from benchmark.evaluation.metrics import metric_columns
from benchmark.training.rows import FLOOR_LOSS, SETTINGS_COLUMNS
from core.atomic import replaced

TUNED = ".tuned"  # the experiment suffix of a loss as tuned (`suite.Cell.experiment`)


def experiments(rows: pd.DataFrame) -> pd.Series:
    """The experiment (`<group>/<config stem>`) of each row: its cell id without the seed."""
    return rows["cell_id"].str.rsplit("/", n=1).str[0]


def stem(experiment: str) -> str:
    """An experiment's name within its group: its config stem, `.tuned` included."""
    return experiment.rsplit("/", 1)[-1]


def is_tuned(entry: pd.Series) -> bool:
    """Whether the experiment trained the setting its group's tuning budget found."""
    value = entry.get("tuning", "")
    return not pd.isna(value) and bool(str(value))


def compared(board: pd.DataFrame) -> pd.DataFrame:
    """The experiments that enter a group's comparisons: its tuned losses and, where it has
    any, its floor. A group without a tuned loss compares nothing."""
    tuned = board.apply(is_tuned, axis=1) if len(board) else pd.Series(dtype=bool)
    groups_with_tuned = set(board.loc[tuned, "group"]) if len(board) else set()
    floor = (board["loss"] == FLOOR_LOSS) & board["group"].isin(groups_with_tuned)
    return board[tuned | floor]


def board_metrics(entries: pd.DataFrame, *, others: bool = False) -> list[str]:
    """The registry's metrics with a `<metric>_mean` value in `entries`, in registry order;
    `others`: then every other `<name>_mean` with a value (`wall_time_s`, differences)."""
    means = [c[: -len("_mean")] for c in entries if c.endswith("_mean")]
    known = metric_columns(means)
    ordered = (known + [m for m in means if m not in known]) if others else known
    return [m for m in ordered if entries[f"{m}_mean"].notna().any()]


def _floor(entry: pd.Series, group: pd.DataFrame) -> pd.Series:
    return (group["loss"] == FLOOR_LOSS) & is_tuned(entry)


def _circle(entry: pd.Series, group: pd.DataFrame) -> pd.Series:
    pairwise = (group["loss"] == "CircleLoss") & (group["labels"] == "pair-wise")
    return pairwise & (group["tuning"] == entry["tuning"]) & is_tuned(entry)


def _default(entry: pd.Series, group: pd.DataFrame) -> pd.Series:
    own = str(entry["experiment"]).removesuffix(TUNED)
    return (group["experiment"] == own) & str(entry["experiment"]).endswith(TUNED)


# The references an experiment is compared with: name -> its candidates among the group's
# experiments (the first in the rows' order is taken, the suite's order for `suite_rows`; an
# experiment is never its own reference).
REFERENCES = {"floor": _floor, "circle": _circle, "default": _default}


def ci95(values: pd.Series) -> float:
    """Half-width of the two-sided 95 % Student-t interval of the mean; NaN for one value."""
    values = values.dropna()
    n = len(values)
    if n < 2:
        return math.nan
    return float(stats.t.ppf(0.975, n - 1) * values.std(ddof=1) / math.sqrt(n))


def aggregate_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per experiment: settings, `n_seeds`, `seeds`, `<metric>_mean`, `<metric>_ci95`;
    the latest row of a cell wins.

    Raises:
        ValueError: when runs of one experiment disagree on a settings column (a config
            changed between runs); the message names the column and the rows file to prune.
    """
    rows = rows[rows["cell_id"] != ""].drop_duplicates("cell_id", keep="last")
    metrics = metric_columns(rows.columns)
    experiment = experiments(rows)
    out = []
    for name, runs in rows.groupby(experiment, sort=False):
        record: dict[str, object] = {"experiment": name, "group": name.split("/")[0]}
        for column in SETTINGS_COLUMNS:
            values = sorted(set(runs[column])) if column in runs else [""]
            if len(values) > 1 and column == "epochs" and _chosen_on_validation(runs):
                # each seed's best validation epoch: an outcome of the run, not a setting
                values = [" ".join(sorted(values, key=int))]
            if len(values) > 1:
                raise ValueError(
                    f"runs of {name} disagree on {column}: {values}; the config changed between "
                    f"runs: delete that experiment's rows from the rows CSV and rerun"
                )
            record[column] = values[0]
        record["n_seeds"] = len(runs)
        record["seeds"] = " ".join(sorted(runs["seed"], key=int))
        for metric in metrics:
            record[f"{metric}_mean"] = runs[metric].mean()
            record[f"{metric}_ci95"] = ci95(runs[metric])
        if "wall_time_s" in runs:
            record["wall_time_s_mean"] = runs["wall_time_s"].mean()
        out.append(record)
    board = pd.DataFrame(out)
    if not out:
        return board
    by_seed = {name: runs.set_index("seed") for name, runs in rows.groupby(experiment, sort=False)}
    paired: dict[str, list[float]] = {}  # `<metric>_vs_<reference>_mean` / `_ci95`
    for name, candidates in REFERENCES.items():
        found = []
        for _, entry in board.iterrows():
            group = board[board["group"] == entry["group"]]
            hits = group[candidates(entry, group)]["experiment"].tolist()
            found.append(hits[0] if hits and hits[0] != entry["experiment"] else None)
        for metric in metrics:
            pairs = [
                paired_difference(by_seed[own][metric], by_seed[ref][metric])[:2]
                if ref is not None
                else (math.nan, math.nan)
                for own, ref in zip(board["experiment"], found, strict=True)
            ]
            paired[f"{metric}_vs_{name}_mean"] = [mean for mean, _ in pairs]
            paired[f"{metric}_vs_{name}_ci95"] = [ci for _, ci in pairs]
    return board.assign(**paired)


def _chosen_on_validation(runs: pd.DataFrame) -> bool:
    """Whether every run tested the checkpoint its validation split chose (`best.ckpt`, or
    `best-v<n>.ckpt` after a resume), whose epoch differs from seed to seed."""
    if "checkpoint" not in runs:
        return False
    names = runs["checkpoint"].astype(str).map(lambda path: Path(path).name)
    return bool(names.str.fullmatch(r"best(-v\d+)?\.ckpt").all())


def paired_difference(values: pd.Series, reference: pd.Series) -> tuple[float, float, int]:
    """Mean and 95 % CI half-width of `values - reference` over the seeds (index) both have,
    and how many seeds that is."""
    both = values.index.intersection(reference.index)
    differences = values[both] - reference[both]
    return float(differences.mean()) if len(both) else math.nan, ci95(differences), len(both)


def write_csv(board: pd.DataFrame, path: Path) -> None:
    """Write the leaderboard atomically, 4 decimals."""
    with replaced(path) as tmp:
        board.to_csv(tmp, index=False, float_format="%.4f")


def read_leaderboard(path: Path) -> pd.DataFrame:
    """A leaderboard CSV written by `write_csv`: text columns verbatim, metric columns float."""
    board = pd.read_csv(path, dtype=str, keep_default_na=False)
    for column in board.columns:
        if column.endswith(("_mean", "_ci95")):
            board[column] = pd.to_numeric(board[column].replace("", math.nan))
    return board
