"""`circlebench leaderboard --plan`: per group of a suite its cells, studies and data, and their
GPU-hours (`tuning.gpu_hours`, a lower bound), a feature cache counted once per extractor."""

from __future__ import annotations

from pathlib import Path

from benchmark.leaderboard.suite import Cell, Suite
from benchmark.tuning.gpu_hours import (
    THROUGHPUT,
    Rate,
    Workload,
    architecture,
    cache_hours,
    hours_text,
    precision_note,
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
    elsewhere: set[str] = set()  # "resnet50 at 32-true": rated at another precision only
    cached: set[tuple] = set()  # feature caches already counted (shared across groups)
    for group in suite.groups:
        mine = [c for c in cells if c.group.name == group.name]
        lines.append(_group_line(group, mine, root))
        parts = _group_hours(group, mine, suite, rates, root, unknown, elsewhere, cached)
        for device, part in parts.items():
            hours = sum(part.values())
            totals[device] = totals.get(device, 0.0) + hours
            shown = {name: h for name, h in part.items() if h}  # runs alone need no split
            split = ", ".join(f"{name} {hours_text(h)}" for name, h in shown.items())
            split = f" ({split})" if set(shown) - {"runs"} else ""
            lines.append(f"    {device}: {hours_text(hours)}{split}")
        if not parts:
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
    if elsewhere:
        lines.append(
            f"images/s for {sorted(elsewhere)} measured at another precision only: the hours use "
            f"them; run `python -m benchmark.bench backbones --backbone NAME --precision P --csv "
            f"{table}` on the GPU"
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
    elsewhere: set[str],
    cached: set[tuple],
) -> dict[str, dict[str, float]]:
    """GPU-hours per device of the group's runs (fits and floors), of the frozen track's
    feature caches not counted before (`cached`, updated), and of its tuning. `unknown` and
    `elsewhere` collect the backbones with no measured rate and those rated at another
    precision only."""
    parts: dict[str, dict[str, float]] = {}

    def add(device: str, part: str, hours: float) -> None:
        mine = parts.setdefault(device, {"runs": 0.0})
        mine[part] = mine.get(part, 0.0) + hours

    def rated(work: Workload) -> dict[str, Rate]:
        if work.dataset is None:
            return {}  # synthetic data: a CPU suite, timed by its own job
        found = rate_for(work, rates)
        if not found:
            unknown.add(architecture(work.backbone))
        if any(precision_note(work, rate) for rate in found.values()):
            elsewhere.add(f"{architecture(work.backbone)} at {work.precision}")
        return found

    read: dict[tuple[Path, tuple[str, ...]], Workload] = {}  # a config's seeds share one
    for cell in cells:
        key = (cell.config, cell.overrides)
        work = read[key] = read.get(key) or workload(cell.config, cell.overrides, root)
        found = rated(work)
        epochs = 0 if cell.command == "test" else None  # a floor trains nothing
        if cell.tuned and group.tuning:
            epochs = group.tuning.max_epochs
        for device, rate in found.items():
            add(device, "runs", run_hours(work, rate, epochs=epochs))
            if work.views and (device, work.cache) not in cached:
                cached.add((device, work.cache))
                add(device, "feature cache", cache_hours(work, rate))
    if group.tuning is not None:
        for config in group.configs:
            work = workload(config, group.overrides_for(config), root)
            for device, rate in rated(work).items():
                add(device, "tuning", study_hours(work, group.tuning, rate))
    return parts
