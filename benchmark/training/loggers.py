"""Loggers for a run: a CSV logger always (its folder is the run directory), W&B when asked.

W&B never prompts and never waits on the network: unless the user configured it (`WANDB_MODE`,
`WANDB_API_KEY`, or a saved `wandb login`), runs are written offline under the run directory and
can be uploaded later with `wandb sync <run_dir>/wandb/offline-run-*`. With credentials but no
route to the W&B server (checked with one connection of at most `PROBE_TIMEOUT_S`), the run
goes offline too, with one line saying so, instead of failing after W&B's own time-outs.
"""

from __future__ import annotations

import netrc
import os
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import yaml
from pytorch_lightning import LightningModule, Trainer
from pytorch_lightning.cli import SaveConfigCallback
from pytorch_lightning.loggers import CSVLogger, Logger, WandbLogger
from pytorch_lightning.utilities import rank_zero_only


def wandb_is_configured() -> bool:
    """True if the user chose a W&B mode or has credentials (env var or `~/.netrc`)."""
    if os.environ.get("WANDB_MODE") or os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


PROBE_TIMEOUT_S = 3.0


def wandb_server_reachable(timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the W&B server (`WANDB_BASE_URL` or api.wandb.ai) opens."""
    url = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai")
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((url.hostname or "api.wandb.ai", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def run_version() -> str:
    """A folder name unique across concurrent runs: UTC time and process id."""
    return f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{os.getpid()}"


def build_loggers(
    save_dir: str | Path, dataset: str, loss: str, *, wandb: bool, version: str
) -> list[Logger]:
    """CSV logger in `save_dir/<dataset>/<loss>/<version>` and, if `wandb`, a W&B logger there too.

    W&B: project `circlebench-<dataset>`, group `<loss>`, run name `<version>`.
    """
    csv_logger = CSVLogger(save_dir=save_dir, name=f"{dataset}/{loss}", version=version)
    if not wandb:
        return [csv_logger]
    if not wandb_is_configured():
        os.environ["WANDB_MODE"] = "offline"  # no account: never prompt, never reach the network
    elif os.environ.get("WANDB_MODE", "online") == "online" and not wandb_server_reachable():
        os.environ["WANDB_MODE"] = "offline"
        print(
            "W&B: credentials found but the server cannot be reached; logging offline "
            "(upload later with `wandb sync <run_dir>/wandb/offline-run-*`)",
            file=sys.stderr,
        )
    os.environ.setdefault("WANDB_SILENT", "true")
    run_dir = Path(csv_logger.log_dir)
    if getattr(rank_zero_only, "rank", 0) == 0:  # other DDP ranks never write there
        run_dir.mkdir(parents=True, exist_ok=True)
    wandb_logger = WandbLogger(
        project=f"circlebench-{dataset}", group=loss, name=version, save_dir=str(run_dir)
    )
    return [csv_logger, wandb_logger]


class ConfigToLoggersCallback(SaveConfigCallback):
    """Save `config.yaml` in the run directory and log the full resolved config to W&B."""

    def save_config(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        config = yaml.safe_load(self.parser.dump(self.config, skip_none=False))
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                logger.log_hyperparams(config)
