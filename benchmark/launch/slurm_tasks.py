"""What one Slurm array task runs on its node: a picklable callable (`CallTask`), or a subclass
that acts on restarts (a leaderboard cell's `CellTask`).

Requeues are submitit's and Slurm's (time limit, preemption, node failure); the task then starts
again with `SLURM_RESTART_COUNT` > 0 and a cell resumes from its own run's `last.ckpt`.
Lightning's auto-requeue (USR1) is kept out: its `hpc_ckpt_N.ckpt` in the `default_root_dir`
that every cell of a suite shares would resume any later run from another cell's checkpoint.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

from submitit.helpers import Checkpointable

from benchmark.launch.processes import redirected_fds, use_threads


class CallTask(Checkpointable):
    """One array task: `run()`, by default `function()`, with its output in `log` (appended to after
    a restart; rank k > 0 writes `<log stem>.rank<k>.log`) and `threads` CPU threads; what
    `run()` returns, which submitit keeps in the job's result file."""

    def __init__(self, function: Callable[[], object], log: Path, threads: int | None) -> None:
        self.function, self.log, self.threads = function, log, threads

    def __call__(self) -> object:
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
            use_threads(self.threads)  # as the local runner's forked runs do
            return self.run(restarts)

    def run(self, restarts: int) -> object:
        """The work; `restarts` counts the times Slurm started this task before."""
        return self.function()
