"""A study's optimisation history in W&B: one run per study, one step per finished trial.

Project `circlebench-tuning`, run name the study, config `circlebench` (group, loss, study),
`budget` and `space`; per trial (step = trial number) `tune/value` (absent for a failed or
pruned trial) and `tune/best`. Logged whole when a study finishes. Offline unless the user
configured W&B (`settle_wandb_mode`); a W&B problem is reported and skipped: the journal and
`experiments/tuned/` are the record.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from benchmark.training.loggers import settle_wandb_mode

PROJECT = "circlebench-tuning"


def log_history(
    study: str, summary: dict[str, Any], trials: pd.DataFrame, directory: Path
) -> str | None:
    """Log the study's trials to W&B; None when logged, else why not."""
    mode = settle_wandb_mode()
    if mode is None:
        return f"W&B mode {os.environ['WANDB_MODE']!r}"
    group, _, loss = study.rpartition("/")
    try:
        import wandb

        directory.mkdir(parents=True, exist_ok=True)
        run = wandb.init(
            project=PROJECT,
            name=study,
            group=group or loss,
            job_type="tune",
            mode=mode,
            dir=str(directory),
            config={
                "circlebench": {"group": group, "loss": loss, "study": study},
                "budget": summary["budget"],
                "space": summary["space"],
            },
            settings=wandb.Settings(init_timeout=30, silent=True),
        )
        best = float("-inf")
        for _, trial in trials.sort_values("number").iterrows():
            record: dict[str, float] = {}
            if trial["state"] == "COMPLETE" and str(trial["value"]) != "":
                record["tune/value"] = float(trial["value"])
                best = max(best, record["tune/value"])
            if best > float("-inf"):
                record["tune/best"] = best
            run.log(record, step=int(trial["number"]))
        run.summary.update({"best_value": summary["best"]["value"]})
        run.finish()
    except Exception as error:  # W&B is optional: the journal is the record
        return f"{type(error).__name__}: {error}"
    return None
