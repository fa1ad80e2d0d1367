"""What one Slurm array task runs on its node: a leaderboard cell, or any callable.

Preemption is submitit's job, not Lightning's. Slurm signals a job (USR2, 90 s) before its time
limit; submitit's handler calls the task's `checkpoint` (`Checkpointable`: the same task again)
and requeues the job with `scontrol requeue`. Slurm itself requeues a preempted job or one whose
node failed (`--requeue`). Either way the task starts again with `SLURM_RESTART_COUNT` > 0, and a
cell's `fit` then resumes from the `last.ckpt` of its own run folder, which the training code
rewrites after every epoch: the resumed run ends with the uninterrupted run's weights.
Lightning's `SLURMEnvironment` auto-requeue (on USR1) is kept out: it saves `hpc_ckpt_N.ckpt`
in `default_root_dir`, which every cell of a suite shares, and any later run there would
resume from whichever cell's checkpoint is newest.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import yaml
from submitit.helpers import Checkpointable

from benchmark.leaderboard.cells import redirected_fds
from benchmark.training.checkpoints import LAST
from benchmark.training.results import read_results


class SlurmTask(Checkpointable):
    """One array task: `run()` with its output in `log` (appended to after a restart) and
    `threads` CPU threads; rank k > 0 of a multi-GPU task writes `<log stem>.rank<k>.log`.

    Returns the numerics fingerprint of the node (`numerics.fingerprint`), which the
    leaderboard stores beside a board made on Slurm instead of its own machine's.
    """

    def __init__(self, log: Path, threads: int | None) -> None:
        self.log, self.threads = log, threads

    def __call__(self) -> str:
        restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        rank = int(os.environ.get("SLURM_PROCID") or 0)
        log = self.log if rank == 0 else self.log.with_name(f"{self.log.stem}.rank{rank}.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        if signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL:
            # Lightning installs its auto-requeue handler only where USR1 has none.
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        with open(log, "a" if restarts else "w") as out, redirected_fds(out.fileno()):
            job = os.environ.get("SLURM_ARRAY_JOB_ID", os.environ.get("SLURM_JOB_ID", "?"))
            task = os.environ.get("SLURM_ARRAY_TASK_ID")
            print(
                f"[circlebench] Slurm job {job}{'_' + task if task else ''}, rank {rank}, "
                f"on {socket.gethostname()}, attempt {restarts + 1}",
                flush=True,
            )
            import torch

            from benchmark.leaderboard import numerics

            if self.threads is not None:  # as the local runner's forked cells do
                torch.set_num_threads(self.threads)
                os.environ |= {"OMP_NUM_THREADS": str(self.threads)}
                os.environ |= {"MKL_NUM_THREADS": str(self.threads)}
            self.run(restarts)
            return numerics.fingerprint()

    def run(self, restarts: int) -> None:
        """The work; `restarts` counts the times Slurm started this task before."""
        raise NotImplementedError


class CallTask(SlurmTask):
    """Any picklable callable without arguments, e.g. a tuning worker."""

    def __init__(self, function: Callable[[], object], log: Path, threads: int | None) -> None:
        super().__init__(log, threads)
        self.function = function

    def run(self, restarts: int) -> None:
        self.function()


class CellTask(SlurmTask):
    """A leaderboard cell: `python -m benchmark.training.cli <args>` in this process.

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

    def run(self, restarts: int) -> None:
        rows = read_results(self.rows_csv)
        made = rows[rows["cell_id"] == self.cell_id].get("cell_recipe", [])
        if self.recipe in set(made):  # restarted after writing its row: nothing left to do
            print(f"[circlebench] {self.cell_id} already has its row in {self.rows_csv}")
            return
        args = list(self.args)
        run = resumable_run(self.run_root, self.cell_id, self.recipe) if restarts else None
        if run is not None and args[0] == "fit":
            print(f"[circlebench] restarted: resuming {run} from its {LAST}", flush=True)
            args.append(f"--ckpt_path={run}")
        from benchmark.training.cli import main as cli_main

        sys.argv = sys.argv[:1]  # submitit's folder there would read as a stray CLI argument
        cli_main(args)


def resumable_run(run_root: Path, cell_id: str, recipe: str) -> Path | None:
    """The newest run folder under `run_root` of this cell and recipe (from its saved
    `config.yaml`) that has a `checkpoints/last.ckpt`; None when no epoch was finished."""
    lasts = sorted(
        run_root.glob(f"*/*/*/checkpoints/{LAST}"), key=lambda p: p.stat().st_mtime, reverse=True
    )
    for last in lasts:
        saved = last.parents[1] / "config.yaml"
        config = yaml.safe_load(saved.read_text()) if saved.is_file() else {}
        if config.get("cell_id") == cell_id and config.get("cell_recipe") == recipe:
            return last.parents[1]
    return None
