"""A callback for tests: the run sends itself a signal when an epoch starts (a user's Ctrl-C,
a scheduler's SIGTERM, an OOM killer's SIGKILL), at a known point instead of a timed one."""

from __future__ import annotations

import os
import signal

import pytorch_lightning as pl
from pytorch_lightning.callbacks import Callback


class SignalAtEpoch(Callback):
    """Send `name` (e.g. "SIGKILL") to this process when training epoch `epoch` (0-based) starts."""

    def __init__(self, epoch: int, name: str) -> None:
        self.epoch, self.name = epoch, name

    def on_train_batch_start(self, trainer: pl.Trainer, *args: object) -> None:
        if trainer.current_epoch == self.epoch:
            os.kill(os.getpid(), getattr(signal, self.name))
