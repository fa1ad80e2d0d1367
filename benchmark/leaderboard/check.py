"""`--check`: a regenerated leaderboard against the committed one, cell by cell, metric by metric.

Metric means are compared in percentage points; a cell on one side only fails, unless its data
is absent here or was absent when the board was committed (both reported). Where the float
kernels match the committed board's (`numerics`), every value must be within `tolerance`;
elsewhere values move by chance, so each must stay within VALUE_PP, each cell's mean |delta|
within CELL_MEAN_PP and the mean of all within MEAN_PP (docs/leaderboards/check.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from benchmark.training.rows import SETTINGS_COLUMNS

VALUE_PP, CELL_MEAN_PP, MEAN_PP = 12.0, 5.0, 2.0  # other float kernels: see the docstring


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
    same_numerics: bool = True
    diffs: list[MetricDiff] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def failing(self, diff: MetricDiff) -> bool:
        """A value that fails the check by itself: beyond `tolerance` on a same-numerics
        machine, beyond VALUE_PP elsewhere, present on one side only anywhere."""
        return diff.beyond(self.tolerance if self.same_numerics else VALUE_PP)

    def _compared(self) -> list[MetricDiff]:
        """The values present on both sides (a finite delta)."""
        return [d for d in self.diffs if not math.isnan(d.delta)]

    def cell_means(self) -> dict[str, float]:
        """Mean |delta| per cell over its metrics present on both sides."""
        per_cell: dict[str, list[float]] = {}
        for d in self._compared():
            per_cell.setdefault(d.experiment, []).append(abs(d.delta))
        return {name: sum(v) / len(v) for name, v in per_cell.items()}

    def mean_delta(self) -> float:
        compared = self._compared()
        return sum(abs(d.delta) for d in compared) / len(compared) if compared else 0.0

    @property
    def ok(self) -> bool:
        if self.failures or any(self.failing(d) for d in self.diffs):
            return False
        if self.same_numerics:
            return True
        worst = max(self.cell_means().values(), default=0.0)
        return worst <= CELL_MEAN_PP and self.mean_delta() <= MEAN_PP

    def lines(self) -> list[str]:
        """A readable report: every value that changed, then failures, notes and a verdict."""
        changed = [d for d in self.diffs if d.beyond(0.0)]
        out = []
        if changed:
            width = max(len(d.experiment) for d in changed)
            out.append(f"{'cell':<{width}}  {'metric':<11} committed  regenerated    delta")
            for d in changed:
                mark = "  FAIL" if self.failing(d) else ""
                out.append(
                    f"{d.experiment:<{width}}  {d.metric:<11} {d.committed:>9.2f}  "
                    f"{d.regenerated:>11.2f}  {d.delta:>+7.2f}{mark}"
                )
        out += [f"FAIL: {f}" for f in self.failures] + [f"note: {n}" for n in self.notes]
        compared = self._compared()
        top = max(compared, key=lambda d: abs(d.delta), default=None)
        largest = "0.00 pp" if top is None else (
            f"{abs(top.delta):.2f} pp ({top.experiment} {top.metric})"
        )  # fmt: skip
        if self.same_numerics:
            rule = f"tolerance {self.tolerance:g} pp per value"
        else:
            cells = self.cell_means()
            worst = max(cells, key=cells.__getitem__, default="-")
            rule = (
                f"other numerics: per value limit {VALUE_PP:g} pp, mean |delta| "
                f"{self.mean_delta():.2f} pp (limit {MEAN_PP:g}), worst cell {worst} "
                f"{cells.get(worst, 0.0):.2f} pp (limit {CELL_MEAN_PP:g})"
            )
        out.append(
            f"{'OK' if self.ok else 'FAILED'}: {len(self.diffs)} values compared, "
            f"{len(changed)} changed, largest |delta| {largest} ({rule})"
        )
        return out


def compare(
    committed: pd.DataFrame,
    regenerated: pd.DataFrame,
    *,
    tolerance: float,
    skipped: dict[str, str],
    same_numerics: bool = True,
) -> CheckReport:
    """Compare two leaderboards (from `read_leaderboard`); `tolerance` in percentage points,
    `skipped` maps experiments not run here to why, `same_numerics` says whether this machine's
    float kernels match the committed board's."""
    report = CheckReport(tolerance, same_numerics)
    old = committed.set_index("experiment")
    new = regenerated.set_index("experiment")
    for name in old.index.difference(new.index, sort=False):
        if name in skipped:
            report.notes.append(f"{name}: skipped, {skipped[name]}")
        else:
            report.failures.append(f"{name}: in the committed leaderboard but not regenerated")
    made_with = set(old["requires"]) if "requires" in old else set()  # data the board had
    for name in new.index.difference(old.index, sort=False):
        requires = new.at[name, "requires"] if "requires" in new else ""
        if requires and requires not in made_with:
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
        for column in (*SETTINGS_COLUMNS, "n_seeds"):
            before, after = (str(b.at[name, column]) if column in b else "" for b in (old, new))
            if before != after:
                report.failures.append(f"{name}: {column} changed from {before!r} to {after!r}")
        for column in metrics:
            was, now = (float(b.at[name, column]) if column in b else math.nan for b in (old, new))
            if not (math.isnan(was) and math.isnan(now)):  # absent on both: nothing to say
                report.diffs.append(MetricDiff(name, column[: -len("_mean")], was, now))
    return report
