"""`--plan`: what a suite or a tuning study will run, and its GPU-hours, before anything starts.

Every cell and study is resolved from the suite file and the configs (read as YAML, with the
suite's `--key=value` overrides applied: dataset, backbone, image size, P x K, epochs,
precision), the real datasets' official split sizes (`DatasetInfo.counts`), and a table of
measured images/s per backbone and GPU, `results/throughput.csv` (the rows of
`python -m benchmark.bench backbones --csv`, each with its device, torch version, date and
source).

A run's GPU time is its training images (the train split, each epoch) over the table's
training rate plus its evaluated images (the test split once; while tuning, the validation fold
after each epoch) over its extraction rate, both scaled from the table's image size by the pixel
count. Loaders, start-up, checkpoints and evaluation's similarity product are not counted: the
figure is a lower bound of the GPU's own time.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmark.errors import read_yaml
from benchmark.leaderboard.suite import Cell, Group, Suite
from benchmark.tuning.experiment import Budget

THROUGHPUT = Path("results/throughput.csv")


@dataclass(frozen=True)
class Workload:
    """What one run of a config computes: images trained and evaluated, on which network."""

    dataset: str | None  # a real dataset's name, None for synthetic data
    backbone: str
    pixels: int  # of one image
    batch: int  # P x K
    precision: str
    epochs: int
    train_images: int  # the train split
    test_images: int  # query (+ gallery) split(s)


def workload(config: Path, overrides: tuple[str, ...], root: Path = Path(".")) -> Workload:
    """The Workload of `config` under `overrides` (those of the form `--a.b=value`)."""
    from datamodules.catalog import DATASETS  # the datasets' sizes, without Lightning

    spec = read_yaml(root / config) or {}
    for word in overrides:
        if word.startswith("--") and "=" in word:
            path, value = word[2:].split("=", 1)
            _set(spec, path.split("."), yaml.safe_load(value))
    data = spec.get("data") or {}
    args = data.get("init_args") or {}
    images = (args.get("images") or {}).get("init_args") or args  # cached features: the images
    embedder = ((spec.get("model") or {}).get("embedder") or {}).get("init_args") or {}
    extractor = (args.get("extractor") or {}).get("init_args") or {}  # the frozen track's
    trainer = spec.get("trainer") or {}
    by_class = {cls.__name__: cls for cls in DATASETS.values()}
    cls = by_class.get(str(data.get("class_path", "")).rsplit(".", 1)[-1])
    info = getattr(cls, "info", None)  # the real datasets' DatasetInfo
    counts = info.counts if info is not None else {}
    size = images.get("image_size", 224)
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    return Workload(
        dataset=cls.dataset_name if cls is not None else None,
        backbone=str(embedder.get("backbone") or extractor.get("backbone", "?")),
        pixels=int(height) * int(width),
        batch=int(images.get("p", 16)) * int(images.get("k", 4)),
        precision=str(trainer.get("precision", "32-true")),
        epochs=int(trainer.get("max_epochs", 1)),
        train_images=counts.get("train", (0, 0))[0],
        test_images=sum(counts.get(s, (0, 0))[0] for s in ("query", "gallery")),
    )


def _set(node: dict, path: list[str], value: Any) -> None:
    for part in path[:-1]:
        if not isinstance(node.get(part), dict):
            return  # an override of a key the file does not have: not one the plan reads
        node = node[part]
    if isinstance(node.get(path[-1]), dict) and isinstance(value, str):
        node[path[-1]]["class_path"] = value  # `--data=datamodules.X`: another class
    else:
        node[path[-1]] = value


@dataclass(frozen=True)
class Rate:
    """Measured images/s of a backbone on a device, at `pixels` per image."""

    device: str
    batch: int
    train: float
    extract: float
    pixels: int
    source: str


def read_rates(table: Path = THROUGHPUT) -> dict[str, list[Rate]]:
    """The throughput table by backbone; empty when the file is absent."""
    rates: dict[str, list[Rate]] = {}
    if not table.is_file():
        return rates
    with table.open(newline="") as f:
        for row in csv.DictReader(f):
            size = int(row["image_size"])
            rates.setdefault(row["backbone"], []).append(
                Rate(
                    row["device"],
                    int(row["batch"]),
                    float(row["train_images_per_s"]),
                    float(row["extract_images_per_s"]),
                    size * size,
                    f"{row['source']}, batch {row['batch']}, {row['precision']}, torch "
                    f"{row['torch']}, {row['date']}",
                )
            )
    return rates


def rate_for(work: Workload, rates: dict[str, list[Rate]]) -> dict[str, Rate]:
    """Per device, the table's row for the run's backbone whose batch is nearest its P x K."""
    found: dict[str, tuple[int, Rate]] = {}
    for rate in rates.get(work.backbone, []):
        distance = abs(rate.batch - work.batch)
        if rate.device not in found or distance < found[rate.device][0]:
            found[rate.device] = (distance, rate)
    return {device: rate for device, (_, rate) in found.items()}


def run_hours(work: Workload, rate: Rate, *, epochs: int | None = None) -> float:
    """GPU-hours of one run (train split x epochs, the config's unless given; 0 for a floor's
    test; then the test split once) at `rate`."""
    scale = rate.pixels / work.pixels
    train = work.train_images * (work.epochs if epochs is None else epochs) / (rate.train * scale)
    return (train + work.test_images / (rate.extract * scale)) / 3600


def study_hours(work: Workload, budget: Budget, rate: Rate) -> float:
    """GPU-hours of one loss's study: trials x folds, each fold training (K-1)/K of the train
    split and validating the rest after every epoch, up to the budget's epoch cap."""
    scale = rate.pixels / work.pixels
    held = work.train_images / budget.folds
    train = (work.train_images - held) * budget.max_epochs / (rate.train * scale)
    validate = held * budget.max_epochs / (rate.extract * scale)
    return budget.trials * budget.folds * (train + validate) / 3600


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
            split = f" (runs {_hours(hours)}, tuning {_hours(studies)})" if studies else ""
            lines.append(f"    {device}: {_hours(hours + studies)}{split}")
        if not runs:
            lines.append("    no GPU-hours: synthetic data (a CPU group), or no measured rate")
    for device, hours in totals.items():
        lines.append(f"total on one {device}: {_hours(hours)} (a lower bound: GPU compute only)")
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


def study_plan(config: Path, overrides: tuple[str, ...], budget: Budget, study: str) -> str:
    """The plan of one study: its budget, the images a trial trains, GPU-hours per device."""
    work = workload(config, overrides)
    lines = [f"{study}: {budget.describe()}; {work.backbone}, {work.batch} images a step"]
    if work.dataset is None:
        return lines[0] + "; synthetic data (CPU): no GPU-hours estimate"
    found = rate_for(work, read_rates())
    for device, rate in found.items():
        lines.append(f"  {device}: {_hours(study_hours(work, budget, rate))}")
    if not found:
        lines.append(f"  no measured images/s for {work.backbone} in {THROUGHPUT}")
    return "\n".join(lines)


def _hours(hours: float) -> str:
    return f"{hours:,.1f} GPU-hours" if hours >= 0.1 else f"{math.ceil(hours * 60)} GPU-minutes"
