"""One study to run (`Task`): what `circlebench tune` resolves from its arguments, and what
the local workers and the Slurm workers (`on_slurm`) run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmark.tuning.experiment import Budget
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
