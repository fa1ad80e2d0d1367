"""One study to run (`Task`): what `circlebench tune` resolves from its arguments, and what
the local workers and the Slurm workers (`on_slurm`) run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import optuna
from rich.console import Console

from benchmark.tuning.experiment import Budget, Experiment, parse_experiment
from benchmark.tuning.space import describe, load_space
from benchmark.tuning.study import create_study, enqueue_default, open_storage
from benchmark.tuning.tuned import TunedFiles

RESULTS = Path("results/tuning")


@dataclass(frozen=True)
class Task:
    """One study to run: the config, its overrides, space, budget, and where things go."""

    config: Path
    overrides: tuple[str, ...]
    space: Path
    budget: Budget
    study: str
    storage: str
    files: TunedFiles
    derived: bool = False  # the space was derived from the loss's arguments (no file)

    @property
    def work_dir(self) -> Path:
        """Fold logs of the study's trials (not committed)."""
        return RESULTS / self.study

    def experiment(self) -> Experiment:
        """The config with its overrides, over the search space."""
        return parse_experiment(self.config, self.overrides, load_space(self.space))

    def open_study(self) -> optuna.Study:
        """The study in its storage, created on first use."""
        return create_study(self.study, open_storage(self.storage), self.budget)

    def start(self, console: Console) -> tuple[Experiment, optuna.Study]:
        """`experiment()` and `open_study()`, with the loss's default setting enqueued as the
        study's first trial (once per study), announced: what comes before any worker runs."""
        experiment, study = self.experiment(), self.open_study()
        enqueue_default(study, self.storage, experiment.defaults)
        console.print(f"[bold]{self.study}[/]: {self.budget.describe()}; storage {self.storage}")
        if self.derived:
            console.print(
                f"no experiments/spaces/{self.config.stem}.yaml: searching the space derived from "
                f"the loss's arguments (written to {self.space}):\n{describe(experiment.space)}",
                soft_wrap=True,
            )
        return experiment, study
