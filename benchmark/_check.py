"""`--check`: a regenerated leaderboard against the committed one, cell by cell, metric by metric.

Metric means are compared in absolute percentage points. Cells present on one side only fail,
except cells whose data is absent here (skipped, reported) and cells that need data the
committed leaderboard was produced without (reported, so the committer can add them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from benchmark._fold import SETTINGS


@dataclass(frozen=True)
class MetricDiff:
    """One compared value; `delta` = regenerated − committed, in percentage points."""

    experiment: str
    metric: str
    committed: float
    regenerated: float

    @property
    def delta(self) -> float:
        return self.regenerated - self.committed

    def beyond(self, tolerance: float) -> bool:
        if math.isnan(self.committed) or math.isnan(self.regenerated):
            return math.isnan(self.committed) != math.isnan(self.regenerated)
        return abs(self.delta) > tolerance


@dataclass
class CheckReport:
    """Everything `--check` found; `ok` is False when anything must fail the check."""

    tolerance: float
    diffs: list[MetricDiff] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures and not any(d.beyond(self.tolerance) for d in self.diffs)

    def lines(self) -> list[str]:
        """A readable report: every value that changed, then failures, notes and a verdict."""
        changed = [d for d in self.diffs if d.beyond(0.0)]
        out = []
        if changed:
            width = max(len(d.experiment) for d in changed)
            out.append(f"{'cell':<{width}}  {'metric':<11} committed  regenerated    delta")
            for d in changed:
                mark = "  FAIL" if d.beyond(self.tolerance) else ""
                out.append(
                    f"{d.experiment:<{width}}  {d.metric:<11} {d.committed:>9.2f}  "
                    f"{d.regenerated:>11.2f}  {d.delta:>+7.2f}{mark}"
                )
        out += [f"FAIL: {f}" for f in self.failures] + [f"note: {n}" for n in self.notes]
        finite = [abs(d.delta) for d in self.diffs if not math.isnan(d.delta)]
        largest = max(finite, default=0.0)
        out.append(
            f"{'OK' if self.ok else 'FAILED'}: {len(self.diffs)} values compared, "
            f"{len(changed)} changed, largest |delta| {largest:.2f} pp "
            f"(tolerance {self.tolerance:g} pp)"
        )
        return out


def compare(
    committed: pd.DataFrame,
    regenerated: pd.DataFrame,
    *,
    tolerance: float,
    skipped: dict[str, str],
) -> CheckReport:
    """Compare two leaderboards (as from `read_leaderboard`).

    Args:
        tolerance: largest allowed |regenerated − committed| per metric mean, in percentage
            points.
        skipped: experiment → reason, for experiments not run here because their data is absent.
    """
    report = CheckReport(tolerance)
    old = committed.set_index("experiment")
    new = regenerated.set_index("experiment")
    for name in old.index.difference(new.index, sort=False):
        if name in skipped:
            report.notes.append(f"{name}: skipped, {skipped[name]}")
        else:
            report.failures.append(f"{name}: in the committed leaderboard but not regenerated")
    for name in new.index.difference(old.index, sort=False):
        requires = new.at[name, "requires"] if "requires" in new else ""
        if requires:
            report.notes.append(
                f"{name}: regenerated but not committed; the committed leaderboard was made "
                f"without {requires}: rerun the suite with that data present and commit"
            )
        else:
            report.failures.append(f"{name}: regenerated but missing from the committed file")
    metrics = sorted(
        {c for c in [*old.columns, *new.columns] if c.endswith("_mean") and c != "wall_time_s_mean"}
    )
    for name in old.index.intersection(new.index, sort=False):
        for column in (*SETTINGS, "n_seeds"):
            before, after = _text(old, name, column), _text(new, name, column)
            if before != after:
                report.failures.append(f"{name}: {column} changed from {before!r} to {after!r}")
        for column in metrics:
            report.diffs.append(
                MetricDiff(
                    name, column[: -len("_mean")], _num(old, name, column), _num(new, name, column)
                )
            )
    return report


def _text(board: pd.DataFrame, name: str, column: str) -> str:
    return str(board.at[name, column]) if column in board else ""


def _num(board: pd.DataFrame, name: str, column: str) -> float:
    return float(board.at[name, column]) if column in board else math.nan
