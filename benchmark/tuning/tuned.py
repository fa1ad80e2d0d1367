"""Tuned settings as data: a study's best setting, its summary and its trials, written to disk.

For a suite group's loss they live in `experiments/tuned/<group>/`: `<loss>.yaml`, a config
fragment (the best trial's values and chosen epoch count) that a tuned cell passes as a second
`--config`; `<loss>.json`, the summary (what was tuned for: a tuned cell refuses a file tuned
for another recipe; the budget, trial counts, best, median and default validation scores);
`<loss>.trials.csv`, every trial that ran, from which boards draw the optimisation history.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import yaml
from optuna.trial import FrozenTrial, TrialState

from benchmark.tuning.experiment import Budget, Experiment
from benchmark.tuning.study import DEFAULT, DUPLICATE_OF, RETRY_OF
from core.atomic import write_text

TUNED_DIR = Path("experiments/tuned")


@dataclass(frozen=True)
class TunedFiles:
    """The three files of one tuned loss: `<folder>/<stem>.{yaml,json,trials.csv}`."""

    folder: Path
    stem: str

    @property
    def config(self) -> Path:
        return self.folder / f"{self.stem}.yaml"

    @property
    def summary(self) -> Path:
        return self.folder / f"{self.stem}.json"

    @property
    def trials(self) -> Path:
        return self.folder / f"{self.stem}.trials.csv"

    def read_summary(self) -> dict[str, Any] | None:
        """The summary, or None before the loss is tuned."""
        return json.loads(self.summary.read_text()) if self.summary.is_file() else None


@dataclass(frozen=True)
class GroupStudies:
    """What boards show of a group's tuning: its budget, and per tuned loss (config stem) the
    study's summary and trials (`TunedFiles.read_summary`, `.trials`)."""

    budget: str
    summaries: dict[str, dict[str, Any]]
    trials: dict[str, pd.DataFrame]


def group_studies(group: str, stems: list[str], budget: str) -> GroupStudies:
    """The studies of `stems` in `group` that have been run (a loss not yet tuned is absent)."""
    summaries, trials = {}, {}
    for stem in stems:
        files = group_files(group, stem)
        summary = files.read_summary()
        if summary is not None and files.trials.is_file():
            summaries[stem] = summary
            trials[stem] = pd.read_csv(files.trials, keep_default_na=False)
    return GroupStudies(budget, summaries, trials)


def group_files(group: str, stem: str, root: Path = Path(".")) -> TunedFiles:
    """Where the tuned setting of a suite group's loss lives."""
    return TunedFiles(root / TUNED_DIR / group, stem)


# Options that change how a run reports, not what it trains: a suite may switch them for its
# cells (and so for `tune`) without making its tuned settings stale.
RUN_ONLY = ("--trainer.enable_progress_bar", "--wandb")


def recipe(config: Path, overrides: tuple[str, ...], root: Path = Path(".")) -> dict[str, Any]:
    """What a setting was tuned for: the config (path and SHA-256) and the overrides (the
    suite's and the group's) but the `RUN_ONLY` ones."""
    content = (root / config).read_bytes()
    return {
        "config": str(config),
        "config_sha256": hashlib.sha256(content).hexdigest(),
        "overrides": [o for o in overrides if o.split("=", 1)[0] not in RUN_ONLY],
    }


def write_tuned(
    study: optuna.Study, experiment: Experiment, budget: Budget, files: TunedFiles
) -> dict[str, Any]:
    """Write the three files from `study` (atomically); its summary. Raises ValueError when no
    trial completed (every setting failed: the summary's trials say why)."""
    trials = study.get_trials(deepcopy=False)
    write_text(files.trials, trials_csv(trials, experiment))
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    if not complete:
        raise ValueError(
            f"study {study.study_name}: no trial completed ({len(trials)} trials); see "
            f"{files.trials} for their errors"
        )
    best = study.best_trial
    summary = {
        "study": study.study_name,
        "tuned_for": recipe(experiment.config, experiment.overrides),
        "space": str(experiment.space.file),
        "budget": asdict(budget),
        "budget_text": budget.describe(),
        "trials": _counts(trials),
        "best": _trial(best),
        "median_value": round(
            statistics.median(float(t.value) for t in complete if t.value is not None), 4
        ),
        "default": next((_trial(t) for t in complete if DEFAULT in t.user_attrs), None),
        "trial_seconds": round(sum(float(t.user_attrs.get("seconds", 0)) for t in trials), 1),
    }
    write_text(files.summary, json.dumps(summary, indent=2) + "\n")
    write_text(files.config, tuned_config(best, experiment, summary))
    return summary


def tuned_config(best: FrozenTrial, experiment: Experiment, summary: dict[str, Any]) -> str:
    """The best setting as a config fragment, with a header saying where it comes from."""
    tree: dict[str, Any] = {}
    for parameter in experiment.space.parameters:
        node = tree
        *parents, leaf = parameter.path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = best.params[parameter.name]
    tree.setdefault("trainer", {})["max_epochs"] = best.user_attrs["best_epoch"]
    budget = summary["budget"]
    header = (
        f"# Tuned by `circlebench tune` (study {summary['study']}): trial {best.number} of\n"
        f"# {summary['budget_text']}.\n"
        f"# Mean validation {budget['metric']} over the folds: best {best.value:.2f}, median "
        f"trial {summary['median_value']:.2f}"
        + (f", default setting {summary['default']['value']:.2f}" if summary["default"] else "")
        + f".\n# Summary: {Path(summary['space']).name} space; "
        f"{summary['trials']['complete']} trials complete, {summary['trials']['failed']} failed, "
        f"{summary['trials']['pruned']} pruned. Generated: do not edit by hand; re-tune.\n"
    )
    return header + yaml.safe_dump(tree, sort_keys=False)


def trials_csv(trials: list[FrozenTrial], experiment: Experiment) -> str:
    """One row per trial: what a board plots (history) and what a reader checks (errors)."""
    names = [p.name for p in experiment.space.parameters]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    head = ["number", "state", "value", "best_epoch", "fold_values", *names, "seconds"]
    writer.writerow([*head, "default", "retry_of", "error"])
    for t in trials:
        if t.state in (TrialState.WAITING, TrialState.RUNNING) or DUPLICATE_OF in t.user_attrs:
            continue
        writer.writerow(
            [
                t.number,
                t.state.name,
                "" if t.value is None else round(t.value, 4),
                t.user_attrs.get("best_epoch", ""),
                " ".join(str(v) for v in t.user_attrs.get("fold_values", [])),
                *[t.params.get(n, "") for n in names],
                t.user_attrs.get("seconds", ""),
                int(DEFAULT in t.user_attrs),
                t.user_attrs.get(RETRY_OF, ""),
                t.user_attrs.get("error", ""),
            ]
        )
    return out.getvalue()


def _counts(trials: list[FrozenTrial]) -> dict[str, int]:
    retried = {t.user_attrs[RETRY_OF] for t in trials if RETRY_OF in t.user_attrs}
    failed = [t for t in trials if t.state == TrialState.FAIL and DUPLICATE_OF not in t.user_attrs]
    return {
        "complete": sum(t.state == TrialState.COMPLETE for t in trials),
        "pruned": sum(t.state == TrialState.PRUNED for t in trials),
        "failed": sum(t.number not in retried for t in failed),
        "interrupted": sum(t.number in retried for t in failed),
        "redrawn": sum(DUPLICATE_OF in t.user_attrs for t in trials),
    }


def _trial(t: FrozenTrial) -> dict[str, Any]:
    return {
        "number": t.number,
        "value": round(float(t.value or 0.0), 4),
        "epoch": t.user_attrs.get("best_epoch"),
        "fold_values": t.user_attrs.get("fold_values"),
        "params": t.params,
    }
