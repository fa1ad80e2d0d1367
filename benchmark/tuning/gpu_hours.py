"""GPU-hours of a run and of a tuning study, before anything starts (`--plan`): a lower bound.

From the configs (YAML, with the suite's `--key=value` overrides), the real datasets' official
split sizes and the measured images/s of `results/throughput.csv` (rows of `python -m
benchmark.bench backbones --csv`), scaled by pixels from the table's image size. The frozen
track's backbone runs once, to fill the feature cache (`cache_hours`). Loaders, start-up,
checkpoints and the similarity product are not counted.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmark.errors import read_yaml
from benchmark.tuning.experiment import Budget

THROUGHPUT = Path("results/throughput.csv")
# Lightning's older names of a precision, as a config or `--trainer.precision=32` gives them.
PRECISION_NAMES = {"64": "64-true", "32": "32-true", "16": "16-mixed", "bf16": "bf16-mixed"}


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
    views: int = 0  # frozen track: cached views of each training image; 0: end to end

    @property
    def cache(self) -> tuple[str | None, str, int, int]:
        """What identifies the frozen track's feature cache (its cells and studies share it)."""
        return (self.dataset, self.backbone, self.pixels, self.views)


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
    cached = isinstance(args.get("images"), dict)  # the frozen track: features of these images
    image_data = args["images"] if cached else data
    images = image_data.get("init_args") or {}
    embedder = ((spec.get("model") or {}).get("embedder") or {}).get("init_args") or {}
    extractor = (args.get("extractor") or {}).get("init_args") or {}  # the frozen track's
    trainer = spec.get("trainer") or {}
    precision = trainer.get("precision", "32-true")
    by_class = {cls.__name__: cls for cls in DATASETS.values()}
    cls = by_class.get(str(image_data.get("class_path", "")).rsplit(".", 1)[-1])
    info = getattr(cls, "info", None)  # the real datasets' DatasetInfo
    counts = info.counts if info is not None else {}
    size = images.get("image_size", 224)
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    return Workload(
        dataset=cls.dataset_name if cls is not None else None,
        backbone=str(embedder.get("backbone") or extractor.get("backbone", "?")),
        pixels=int(height) * int(width),
        batch=int(images.get("p", 16)) * int(images.get("k", 4)),
        precision=PRECISION_NAMES.get(str(precision), str(precision)),
        epochs=int(trainer.get("max_epochs", 1)),
        train_images=counts.get("train", (0, 0))[0],
        test_images=sum(counts.get(s, (0, 0))[0] for s in ("query", "gallery")),
        views=int(args.get("views", 1)) if cached else 0,
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
    precision: str  # Lightning's name of the arithmetic it was measured in: "bf16-mixed"


def precision_note(work: Workload, rate: Rate) -> str:
    """What a plan says when `rate` was measured at another precision than the run's."""
    if rate.precision == work.precision:
        return ""
    return f" (images/s measured at {rate.precision}; this run is {work.precision})"


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
                    row["precision"],
                )
            )
    return rates


def architecture(backbone: str) -> str:
    """A timm name without its weights tag, as the throughput table names it:
    `vit_small_patch14_dinov2.lvd142m` -> `vit_small_patch14_dinov2`."""
    return backbone.split(".", 1)[0]


def rate_for(work: Workload, rates: dict[str, list[Rate]]) -> dict[str, Rate]:
    """Per device, the table's row for the run's backbone (its own name, else its architecture):
    at the run's precision where the device has one, and of those the one whose batch is nearest
    its P x K."""
    found: dict[str, tuple[tuple[bool, int], Rate]] = {}
    for rate in rates.get(work.backbone) or rates.get(architecture(work.backbone), []):
        distance = (rate.precision != work.precision, abs(rate.batch - work.batch))
        if rate.device not in found or distance < found[rate.device][0]:
            found[rate.device] = (distance, rate)
    return {device: rate for device, (_, rate) in found.items()}


def _hours(work: Workload, rate: Rate, trained: float, extracted: float) -> float:
    """GPU-hours of `trained` training and `extracted` embedding image passes at `rate`, its
    images/s scaled from its image size to the run's by pixels."""
    return (trained / rate.train + extracted / rate.extract) * work.pixels / rate.pixels / 3600


def run_hours(work: Workload, rate: Rate, *, epochs: int | None = None) -> float:
    """GPU-hours of one run (train split x epochs, the config's unless given; 0 for a floor's
    test; then the test split once) at `rate`; 0 on the frozen track (see `cache_hours`)."""
    if work.views:
        return 0.0
    trained = work.train_images * (work.epochs if epochs is None else epochs)
    return _hours(work, rate, trained, work.test_images)


def cache_hours(work: Workload, rate: Rate) -> float:
    """GPU-hours of the frozen track's feature cache: every training image in each cached view,
    and the test split, through the backbone once (0 end to end)."""
    return _hours(work, rate, 0, work.train_images * work.views + work.test_images)


def study_hours(work: Workload, budget: Budget, rate: Rate) -> float:
    """GPU-hours of one loss's study: trials x folds, each fold training (K-1)/K of the train
    split and validating the rest after every epoch, up to the budget's epoch cap; 0 on the
    frozen track, whose folds read the cached features of the whole train split."""
    if work.views:
        return 0.0
    held = work.train_images / budget.folds
    fold = _hours(
        work, rate, (work.train_images - held) * budget.max_epochs, held * budget.max_epochs
    )
    return budget.trials * budget.folds * fold


def study_plan(config: Path, overrides: tuple[str, ...], budget: Budget, study: str) -> str:
    """The plan of one study: its budget, the images a trial trains, GPU-hours per device."""
    work = workload(config, overrides)
    lines = [f"{study}: {budget.describe()}; {work.backbone}, {work.batch} images a step"]
    if work.dataset is None:
        return lines[0] + "; synthetic data (CPU): no GPU-hours estimate"
    found = rate_for(work, read_rates())
    for device, rate in found.items():
        if work.views:
            lines.append(
                f"  {device}: feature cache {hours_text(cache_hours(work, rate))} (once for every "
                "cell and study of this extractor and data); the trials train a head on cached "
                f"features, with no backbone pass{precision_note(work, rate)}"
            )
        else:
            hours = hours_text(study_hours(work, budget, rate))
            lines.append(f"  {device}: {hours}{precision_note(work, rate)}")
    if not found:
        lines.append(f"  no measured images/s for {architecture(work.backbone)} in {THROUGHPUT}")
    return "\n".join(lines)


def hours_text(hours: float) -> str:
    return f"{hours:,.1f} GPU-hours" if hours >= 0.1 else f"{math.ceil(hours * 60)} GPU-minutes"
