"""What the Slurm tests run inside jobs: callbacks put in cells (as `--trainer.callbacks`) that
cause faults at a known point of training instead of a timed one.

The callbacks do nothing outside a Slurm job, so a local run of the same cell is the
uninterrupted reference.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback

WAIT_S = 300.0


def _first_slurm_attempt() -> bool:
    return "SLURM_JOB_ID" in os.environ and int(os.environ.get("SLURM_RESTART_COUNT") or 0) == 0


def _job_id() -> str:
    array, index = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{index}" if array and index else os.environ["SLURM_JOB_ID"]


class SignalOnce(Callback):
    """On its job's first attempt, when training epoch `epoch` (0-based) starts, have Slurm send
    the job `signal` (`USR2`: what it sends before the time limit; submitit then requeues it)
    and wait until that ends this attempt."""

    def __init__(self, epoch: int, signal: str = "USR2") -> None:
        self.epoch, self.signal = epoch, signal

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.current_epoch != self.epoch or not _first_slurm_attempt():
            return
        subprocess.run(["scancel", f"--signal={self.signal}", _job_id()], check=True)
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            time.sleep(0.1)  # submitit's signal handler ends this attempt from here
        raise RuntimeError(f"SIG{self.signal} did not end the attempt within {WAIT_S} s")


class WaitForFile(Callback):
    """In a Slurm job, block when training starts until `path` exists (or `WAIT_S` passed), so
    that a test can act on a cell known to be running."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if "SLURM_JOB_ID" not in os.environ:
            return
        deadline = time.monotonic() + WAIT_S
        while not self.path.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
