"""One study to run (`Task`): what `circlebench tune` resolves from its arguments, and what
the local workers and the Slurm workers (`on_slurm`) run."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import optuna
from rich.console import Console

from benchmark.tuning.experiment import Budget, Experiment, parse_experiment
from benchmark.tuning.space import describe, load_space
from benchmark.tuning.study import create_study, enqueue_default, open_storage
from benchmark.tuning.tuned import TunedFiles, recipe

RESULTS = Path("results/tuning")
STAMP = "circlebench"  # the study's user attribute: the recipe and budget its trials ran with


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
        """The study in its storage, created on first use and stamped with the recipe and budget
        its trials run with. A study stamped with others is refused: its trials would be
        counted against this budget and written as this config's tuned setting."""
        study = create_study(self.study, open_storage(self.storage), self.budget)
        mine = {"tuned_for": recipe(self.config, self.overrides), "budget": asdict(self.budget)}
        theirs = study.user_attrs.get(STAMP)
        if theirs is None:  # a new study (or one from before the stamp): it runs this recipe
            study.set_user_attr(STAMP, mine)
        elif theirs != mine:
            changed = [key for key in ("tuned_for", "budget") if theirs[key] != mine[key]]
            what = " and ".join({"tuned_for": "config or overrides", "budget": "budget"}[k]
                                for k in changed)  # fmt: skip
            raise ValueError(
                f"study {self.study!r} in {self.storage} ran its trials with another {what} "
                f"({', '.join(f'{k}: {theirs[k]}' for k in changed)}); delete it to tune "
                "again from scratch, or keep it and pass --storage with a new journal file"
            )
        return study

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
