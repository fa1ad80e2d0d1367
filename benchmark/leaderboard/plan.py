"""`circlebench leaderboard --plan`: what a suite will run, and its GPU-hours, before anything
starts: per group its cells, studies and data, with each run's and study's GPU-hours from
`tuning.gpu_hours` (a lower bound: the GPU's own time).
"""

from __future__ import annotations

from pathlib import Path

from benchmark.leaderboard.suite import Cell, Suite
from benchmark.tuning.gpu_hours import (
    THROUGHPUT,
    Rate,
    Workload,
    hours_text,
    rate_for,
    read_rates,
    run_hours,
    study_hours,
    workload,
)
from benchmark.tuning.groups import Group


def suite_plan(suite: Suite, root: Path = Path("."), table: Path = THROUGHPUT) -> str:
    """The plan of `suite`: per group its cells, studies, data and GPU-hours per device."""
    rates = read_rates(root / table)
    cells = suite.cells()
    lines = [f"plan of suite {suite.name!r}: {len(cells)} cells in {len(suite.groups)} groups"]
    totals: dict[str, float] = {}
    unknown: set[str] = set()
    for group in suite.groups:
        mine = [c for c in cells if c.group.name == group.name]
        lines.append(_group_line(group, mine, root))
        runs, tuning = _group_hours(group, mine, suite, rates, root, unknown)
        for device, hours in runs.items():
            studies = tuning.get(device, 0.0)
            totals[device] = totals.get(device, 0.0) + hours + studies
            split = f" (runs {hours_text(hours)}, tuning {hours_text(studies)})" if studies else ""
            lines.append(f"    {device}: {hours_text(hours + studies)}{split}")
        if not runs:
            lines.append("    no GPU-hours: synthetic data (a CPU group), or no measured rate")
    for device, hours in totals.items():
        lines.append(
            f"total on one {device}: {hours_text(hours)} (a lower bound: GPU compute only)"
        )
    if unknown:
        lines.append(
            f"no measured images/s for {sorted(unknown)} in {table}: run `python -m "
            f"benchmark.bench backbones --backbone NAME --csv {table}` on the GPU"
        )
    if rates:
        sources = sorted({r.source for rs in rates.values() for r in rs})
        more = " (and others)" if sources[1:] else ""
        lines.append(f"images/s from {table}: {sources[0]}{more}")
    return "\n".join(lines)


def _group_line(group: Group, cells: list[Cell], root: Path) -> str:
    fits = sum(c.command == "fit" and not c.tuned for c in cells)
    tuned = sum(c.tuned for c in cells)
    floors = sum(c.command == "test" for c in cells)
    missing = group.missing_data(root)
    data = f"data absent: {missing} (its cells skip)" if missing else "data present"
    budget = f"; tuning {group.tuning.describe()}" if group.tuning else "; no tuning budget"
    return (
        f"  {group.name}: {len(group.configs)} configs, {fits} fits + {tuned} tuned fits + "
        f"{floors} floor tests; {data}{budget}"
    )


def _group_hours(
    group: Group,
    cells: list[Cell],
    suite: Suite,
    rates: dict[str, list[Rate]],
    root: Path,
    unknown: set[str],
) -> tuple[dict[str, float], dict[str, float]]:
    """GPU-hours per device of the group's runs (fits and floors), and of its tuning."""
    hours: dict[str, float] = {}
    tuning: dict[str, float] = {}
    read: dict[tuple[Path, tuple[str, ...]], Workload] = {}  # a config's seeds share one
    for cell in cells:
        key = (cell.config, cell.overrides)
        work = read[key] = read.get(key) or workload(cell.config, cell.overrides, root)
        if work.dataset is None:
            continue  # synthetic data: a CPU suite, timed by its own job
        found = rate_for(work, rates)
        if not found:
            unknown.add(work.backbone)
        epochs = 0 if cell.command == "test" else None  # a floor trains nothing
        if cell.tuned and group.tuning:
            epochs = group.tuning.max_epochs
        for device, rate in found.items():
            hours[device] = hours.get(device, 0.0) + run_hours(work, rate, epochs=epochs)
    if group.tuning is not None:
        for config in group.configs:
            work = workload(config, (*suite.overrides, *group.overrides_for(config)), root)
            for device, rate in rate_for(work, rates).items():
                tuning[device] = tuning.get(device, 0.0) + study_hours(work, group.tuning, rate)
    return hours, tuning
