"""Loggers for a run: a CSV logger always (its folder is the run directory), W&B when asked.

W&B never prompts and never waits on the network: unless the user configured it (`WANDB_MODE`,
`WANDB_API_KEY`, or a saved `wandb login`), runs are written offline under the run directory and
can be uploaded later with `wandb sync <run_dir>/wandb/offline-run-*`. With credentials but no
route to the W&B server (checked with one connection of at most `PROBE_TIMEOUT_S`), the run
goes offline too, with one line saying so, instead of failing after W&B's own time-outs.

A W&B run carries what dashboards group and filter by (`RunLabels`): config key `circlebench`,
group `<dataset>/<loss>`, name `<dataset>/<loss>/seed<seed>`, `job_type` train or evaluate.
"""

from __future__ import annotations

import netrc
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

import yaml
from pytorch_lightning import LightningModule, Trainer
from pytorch_lightning.cli import SaveConfigCallback
from pytorch_lightning.loggers import CSVLogger, Logger, WandbLogger
from pytorch_lightning.utilities import rank_zero_only


def wandb_has_credentials() -> bool:
    """True if an API key is set (`WANDB_API_KEY`) or saved by `wandb login` (`~/.netrc`)."""
    if os.environ.get("WANDB_API_KEY"):
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
    """A folder name unique across concurrent runs: UTC time and process id, and in a Slurm
    job its id (unique on the cluster: cells on two nodes may start in the same second with
    the same process id)."""
    job = os.environ.get("SLURM_JOB_ID")
    return f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{os.getpid()}" + (
        f"-j{job}" if job else ""
    )


@dataclass(frozen=True)
class RunLabels:
    """What a run's W&B record is grouped and filtered by; `benchmark.leaderboard.dashboard`
    builds its views from these fields.

    Args:
        loss: the experiment's name, its config file's stem (`experiments/<dataset>/<loss>.yaml`,
            so `circle` and `circle_class` differ), or the loss class without a config file; a
            suite's cell: its experiment (`floor` for the untrained floor, not its config's).
        cell_id: the leaderboard cell (`<group>/<config stem>/seed<seed>`); "" outside a suite.
        git_sha: the code's revision (`benchmark.training.results.git_sha`).
    """

    dataset: str
    loss: str
    loss_class: str
    paradigm: str
    track: str
    seed: int
    suite: str
    cell_id: str
    git_sha: str
    job_type: Literal["train", "evaluate"]


def build_loggers(
    save_dir: str | Path, labels: RunLabels, *, wandb: bool, version: str
) -> list[Logger]:
    """CSV logger in `save_dir/<dataset>/<loss class>/<version>` and, if `wandb`, a W&B logger
    there too (project `circlebench-<dataset>`, the run labelled as the module docstring says)."""
    name = f"{labels.dataset}/{labels.loss_class}"
    csv_logger = CSVLogger(save_dir=save_dir, name=name, version=version)
    if not wandb:
        return [csv_logger]
    settle_wandb_mode()
    run_dir = Path(csv_logger.log_dir)
    if getattr(rank_zero_only, "rank", 0) == 0:  # other DDP ranks never write there
        # The CSV writer warns that a folder with files in it holds earlier logs; W&B's files
        # are about to be there, so it checks now, while only an earlier run's could be. It
        # makes the folder, which W&B then writes to.
        _ = csv_logger.experiment
    config: dict[str, Any] = asdict(labels)
    group = f"{labels.dataset}/{labels.loss}"
    wandb_logger = WandbLogger(
        project=f"circlebench-{labels.dataset}",
        save_dir=str(run_dir),
        group=group,
        name=f"{group}/seed{labels.seed}",
        job_type=config.pop("job_type"),  # W&B's own field
        # under its own key: Lightning logs the hyper-parameters at the top level
        config={"circlebench": config},
    )
    return [csv_logger, wandb_logger]


def settle_wandb_mode() -> Literal["online", "offline"] | None:
    """Set `WANDB_MODE` for this process before W&B starts, and return it (None when it is
    `disabled` or a mode W&B rejects): offline without an account or when the server cannot be
    reached, else what the user chose. The rule of every W&B run of the suite."""
    if not (os.environ.get("WANDB_MODE") or wandb_has_credentials()):
        os.environ["WANDB_MODE"] = "offline"
    elif os.environ.get("WANDB_MODE", "online") == "online" and not wandb_server_reachable():
        os.environ["WANDB_MODE"] = "offline"
        print(
            "W&B: credentials found but the server cannot be reached; logging offline "
            "(upload later with `wandb sync <run_dir>/wandb/offline-run-*`)",
            file=sys.stderr,
        )
    os.environ.setdefault("WANDB_SILENT", "true")
    mode = os.environ.get("WANDB_MODE", "online")
    return "online" if mode == "online" else "offline" if mode == "offline" else None


def finish_wandb_runs(loggers: list[Logger], *, failed: bool) -> None:
    """Close `wandb.run` if `loggers` hold a W&B logger: an open run outlives its Trainer, and
    the next WandbLogger of the process would log into it (Lightning reuses `wandb.run`)."""
    if not any(isinstance(logger, WandbLogger) for logger in loggers):
        return
    import wandb

    if wandb.run is not None:  # the run the logger started (or reused: Lightning's rule)
        wandb.run.finish(exit_code=1 if failed else 0)


class ConfigToLoggersCallback(SaveConfigCallback):
    """Save `config.yaml` in the run directory and log the full resolved config to W&B."""

    def save_config(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        config = yaml.safe_load(self.parser.dump(self.config, skip_none=False))
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                logger.log_hyperparams(config)
