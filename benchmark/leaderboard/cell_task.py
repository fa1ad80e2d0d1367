"""A leaderboard cell as a Slurm array task. Restarted by Slurm, it does nothing if the cell's row
is written, else its `fit` resumes from the `last.ckpt` of the cell's own run folder."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from benchmark.launch.slurm_tasks import CallTask
from benchmark.leaderboard.cells import CellWork, row_recipes
from benchmark.training.checkpoints import LAST, newest_run


class CellTask(CallTask):
    """A leaderboard cell's `CellWork`, run in this process and after a restart resumed from its
    run under `run_root` (its `--trainer.default_root_dir`); returns the node's numerics
    fingerprint, which the leaderboard stores beside a board made on Slurm."""

    function: CellWork

    def __init__(
        self, work: CellWork, log: Path, threads: int | None, *, recipe: str, run_root: Path
    ) -> None:
        super().__init__(work, log, threads)
        self.recipe, self.run_root = recipe, run_root

    def run(self, restarts: int) -> str:
        from benchmark.leaderboard import numerics

        work = self.function
        if row_recipes(work.rows_csv).get(work.cell_id) == self.recipe:  # a restart after the end
            print(f"[circlebench] {work.cell_id} already has its row in {work.rows_csv}")
            return numerics.fingerprint()
        run = resumable_run(self.run_root, work.cell_id, self.recipe) if restarts else None
        if run is not None and work.args[0] == "fit":
            print(f"[circlebench] restarted: resuming {run} from its {LAST}", flush=True)
            work = dataclasses.replace(work, args=[*work.args, f"--ckpt_path={run}"])
        work()
        return numerics.fingerprint()


def resumable_run(run_root: Path, cell_id: str, recipe: str) -> Path | None:
    """The newest run folder under `run_root` of this cell and recipe (from its saved
    `config.yaml`) that has a `checkpoints/last.ckpt`; None when no epoch was finished."""

    def ours(config: dict) -> bool:
        return config.get("cell_id") == cell_id and config.get("cell_recipe") == recipe

    return newest_run(run_root, ours, depth=3)
