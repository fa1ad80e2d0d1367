"""A leaderboard cell as a Slurm array task (`launch.slurm_tasks.SlurmTask`).

Restarted by Slurm (preemption, time limit, node failure), the task does nothing if the cell's
row is already written, else its `fit` resumes from the `last.ckpt` of the cell's own run
folder, found by the cell id and recipe saved in the run's `config.yaml`.
"""

from __future__ import annotations

from pathlib import Path

from benchmark.launch.slurm_tasks import SlurmTask
from benchmark.leaderboard.cells import row_recipes
from benchmark.training.checkpoints import LAST, newest_run


class CellTask(SlurmTask):
    """A leaderboard cell: `python -m benchmark.training.cli <args>` in this process.

    Returns the numerics fingerprint of the node (`numerics.fingerprint`), which the
    leaderboard stores beside a board made on Slurm instead of its own machine's.

    Args:
        args: the cell's command line (`cells.cell_args`) and the launcher's additions.
        run_root: the cell's `--trainer.default_root_dir`, searched for its run to resume.
    """

    def __init__(
        self,
        args: list[str],
        log: Path,
        threads: int | None,
        *,
        cell_id: str,
        recipe: str,
        rows_csv: Path,
        run_root: Path,
    ) -> None:
        super().__init__(log, threads)
        self.args, self.cell_id, self.recipe = args, cell_id, recipe
        self.rows_csv, self.run_root = rows_csv, run_root

    def run(self, restarts: int) -> str:
        from benchmark.leaderboard import numerics

        if row_recipes(self.rows_csv).get(self.cell_id) == self.recipe:  # a restart after the end
            print(f"[circlebench] {self.cell_id} already has its row in {self.rows_csv}")
            return numerics.fingerprint()
        args = list(self.args)
        run = resumable_run(self.run_root, self.cell_id, self.recipe) if restarts else None
        if run is not None and args[0] == "fit":
            print(f"[circlebench] restarted: resuming {run} from its {LAST}", flush=True)
            args.append(f"--ckpt_path={run}")
        from benchmark.training.cli import main as cli_main

        cli_main(args)
        return numerics.fingerprint()


def resumable_run(run_root: Path, cell_id: str, recipe: str) -> Path | None:
    """The newest run folder under `run_root` of this cell and recipe (from its saved
    `config.yaml`) that has a `checkpoints/last.ckpt`; None when no epoch was finished."""

    def ours(config: dict) -> bool:
        return config.get("cell_id") == cell_id and config.get("cell_recipe") == recipe

    return newest_run(run_root, ours, depth=3)
