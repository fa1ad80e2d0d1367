"""What a study tunes and with what budget: an experiment config in its group, and the budget.

`parse_experiment` reads the config (with the group's overrides) once, through the training CLI's
parser: the loss's default setting (tried first), where the image DataModule takes its fold, and
which `num_classes` a fold must shrink.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from benchmark.tuning.space import SearchSpace
from datamodules.splits import fold_sizes

Pruner = Literal["none", "wilcoxon"]


@dataclass(frozen=True)
class Budget:
    """What every loss of a group gets: the same trials, folds, epoch cap, metric and sampler.

    `trials` counts distinct settings that finished (complete, pruned or failed): a trial
    interrupted by a dead worker is run again and not counted, a proposal that repeats a
    setting is redrawn (`study.Proposer`). The default setting, tried first, is one of the
    `startup_trials`.
    """

    trials: int = 30
    folds: int = 3  # class-disjoint folds of the training classes: each trial trains K times
    max_epochs: int = 12  # the cap of every fold; a shorter one biased the synthetic ranking
    metric: str = "MAP@R"  # maximised on validation, as the evaluator names it
    pruner: Pruner = "none"  # or "wilcoxon": Optuna's WilcoxonPruner over the fold scores
    sampler_seed: int = 0  # of the TPE sampler
    startup_trials: int = 10  # random trials before TPE models the results
    seed: int = 0  # `seed_everything` of every fold run

    def __post_init__(self) -> None:
        for name in ("trials", "folds", "max_epochs", "startup_trials"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"tuning budget: {name} must be an int >= 1, got {value!r}")
        if self.folds < 2:
            raise ValueError(f"tuning budget: folds must be >= 2, got {self.folds}")
        if self.pruner not in ("none", "wilcoxon"):
            raise ValueError(f"tuning budget: pruner must be none or wilcoxon, got {self.pruner!r}")

    def describe(self) -> str:
        """One line for rows and boards: `30 trials x 3 folds, <= 6 epochs, val MAP@R, ...`."""
        pruning = "no pruning" if self.pruner == "none" else "Wilcoxon pruning over folds"
        return (
            f"{self.trials} trials x {self.folds} folds, <= {self.max_epochs} epochs, "
            f"val {self.metric}, TPE ({self.startup_trials} random first, seed "
            f"{self.sampler_seed}), {pruning}"
        )


@dataclass(frozen=True)
class Experiment:
    """What a study tunes: a config, the overrides that place it in its group, its space.

    `datamodule` is the config path prefix of the image DataModule's arguments, which take the
    fold (`data.init_args.`, or `data.init_args.images.init_args.` for cached features);
    `class_counts` the paths of the loss's `num_classes` and the training class count each
    holds, overridden per fold, which trains on fewer classes.
    """

    config: Path
    overrides: tuple[str, ...]
    space: SearchSpace
    datamodule: str
    class_counts: tuple[tuple[str, int], ...]
    defaults: dict[str, Any]  # the config's own values of the space: tried first

    def fold_args(
        self, values: dict[str, Any], budget: Budget, fold: int, run_root: Path
    ) -> list[str]:
        """The `circlebench fit` command line of one fold of the setting `values`."""
        counts = [
            f"--{path}={total - fold_sizes(total, budget.folds)[fold]}"
            for path, total in self.class_counts
        ]
        return [
            "fit", "--config", str(self.config), "--seed_everything", str(budget.seed),
            *self.overrides, *self.space.overrides(values),
            f"--{self.datamodule}folds={budget.folds}", f"--{self.datamodule}fold={fold}", *counts,
            f"--trainer.max_epochs={budget.max_epochs}", "--trainer.check_val_every_n_epoch=1",
            "--trainer.enable_checkpointing=false", "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false", f"--trainer.default_root_dir={run_root}",
            "--test_after_fit=false", "--wandb=false",
        ]  # fmt: skip


def parse_experiment(config: Path, overrides: tuple[str, ...], space: SearchSpace) -> Experiment:
    """The Experiment of `config` under `overrides`, and the values it gives the space.

    Raises:
        ValueError: the config's loss is not the space's, or a searched name is not set by it.
    """
    parsed = parsed_config(config, overrides)
    # A cached-feature DataModule takes its splits (and the fold) from the images it wraps.
    images = parsed["data"].get("init_args", {}).get("images")
    cached = isinstance(images, dict) and "class_path" in images
    loss = parsed["model"]["loss"]["class_path"]
    if loss != space.loss:
        raise ValueError(
            f"the search space {space.file} is for {space.loss}, but {config} trains {loss}; "
            "pass the space of this loss with --space"
        )
    return Experiment(
        config=config,
        overrides=overrides,
        space=space,
        datamodule="data.init_args.images.init_args." if cached else "data.init_args.",
        class_counts=tuple(class_count_paths(parsed["model"]["loss"], "model.loss")),
        defaults=space.values_in(parsed),
    )


def parsed_config(config: Path, overrides: tuple[str, ...]) -> dict[str, Any]:
    """`config` under `overrides` as the training CLI parses it (defaults filled in)."""
    from benchmark.training.cli import CircleBenchCLI  # Lightning: imported when tuning only

    cli = CircleBenchCLI(args=["--config", str(config), *overrides], run=False, parse_only=True)
    return yaml.safe_load(cli.parser.dump(cli.config, format="yaml"))


def class_count_paths(node: dict, path: str) -> list[tuple[str, int]]:
    """`(config path, value)` of every `num_classes` in a loss's config, nested parts included
    (a class-level Circle loss's `source`, a wrapped loss)."""
    found = []
    args = node.get("init_args") or {}
    for key, value in args.items():
        if key == "num_classes" and isinstance(value, int):
            found.append((f"{path}.init_args.num_classes", value))
        elif isinstance(value, dict) and "class_path" in value:
            found += class_count_paths(value, f"{path}.init_args.{key}")
    return found
