"""One trial of a study: its setting trained on each class-disjoint fold, and an epoch chosen.

Fold f is `circlebench fit` of the experiment config with the trial's overrides and `folds=K,
fold=f` on its image DataModule (the test split is never built), up to the budget's epoch cap
with a validation pass after every epoch (no test, checkpoint or W&B), in a process forked from
the fork server. The trial's value is the best point of the mean validation curve over folds,
and that epoch is the setting's `max_epochs` (as Musgrave et al. stop early on validation).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna

from benchmark.launch.forked import Work, run_forked
from benchmark.training.rows import run_metrics
from benchmark.tuning.experiment import Budget, Experiment
from core.atomic import write_text

# (work, log, threads) -> exit status: how a fold's process is started (`forked.run_forked`)
ForkRunner = Callable[[Work, Path, "int | None"], int]


class FoldFailedError(RuntimeError):
    """A fold's `fit` failed; the message is the error its log ends with."""


def run_trial(
    trial: optuna.Trial, experiment: Experiment, budget: Budget, work: Path, threads: int | None
) -> float:
    """Train and validate the trial's setting on every fold; its value (mean over folds at
    the chosen epoch). Raises optuna.TrialPruned when the pruner stops it, FoldFailedError
    when a fold fails. The trial was asked with every distribution of the space
    (`study.Proposer`), so its params are the setting."""
    values = trial.params
    folder = work / f"trial{trial.number:04d}"
    start = time.perf_counter()
    curves: list[list[float]] = []
    for fold in range(budget.folds):
        args = experiment.fold_args(values, budget, fold, folder / "runs")
        if fold == 0:
            trial.set_user_attr("command", "circlebench " + " ".join(args))
        curves.append(run_fold(args, folder / f"fold{fold}.log", budget, run_forked, threads))
        trial.set_user_attr("fold_curves", [[round(v, 4) for v in c] for c in curves])
        trial.report(max(curves[-1]), fold)  # a fold's best: pruning sees finished folds only
        # After the last fold nothing is left to save: the finished trial competes for best.
        last = fold == budget.folds - 1
        if budget.pruner == "wilcoxon" and not last and trial.should_prune():
            raise optuna.TrialPruned(f"pruned after fold {fold}")
    epoch, value = choose_epoch(curves)
    trial.set_user_attr("best_epoch", epoch)
    trial.set_user_attr("fold_values", [round(c[epoch - 1], 4) for c in curves])
    trial.set_user_attr("seconds", round(time.perf_counter() - start, 1))
    return value


def choose_epoch(curves: list[list[float]]) -> tuple[int, float]:
    """(epoch 1..E, value) of the best mean over folds; the earliest epoch on a tie."""
    lengths = {len(c) for c in curves}
    if len(lengths) != 1 or 0 in lengths:
        raise FoldFailedError(f"folds validated different numbers of epochs: {sorted(lengths)}")
    means = [sum(values) / len(values) for values in zip(*curves, strict=True)]
    best = max(range(len(means)), key=lambda e: (means[e], -e))
    return best + 1, means[best]


def run_fold(
    args: list[str], log: Path, budget: Budget, fork: ForkRunner, threads: int | None
) -> list[float]:
    """The fold's validation metric after each epoch, from a forked `fit` (`FoldWork`), whose
    result is `<log stem>.json`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    work = FoldWork(args, log.with_suffix(".json"), budget.metric)
    work.result.unlink(missing_ok=True)  # a rerun's result, not an older one, must decide
    status = fork(work, log, threads)
    if status != 0 or not work.done():
        raise FoldFailedError(f"{last_error(log)} (exit status {status}; log: {log})")
    curve = json.loads(work.result.read_text())["curve"]
    if len(curve) != budget.max_epochs or not all(math.isfinite(v) for v in curve):
        raise FoldFailedError(
            f"validated {len(curve)} of {budget.max_epochs} epochs ({curve}); log: {log}"
        )
    return [float(v) for v in curve]


@dataclass(frozen=True)
class FoldWork:
    """One fold's `fit` as a unit of work (`forked.Work`): called in the fold's process, it
    runs the fit, then writes the per-epoch validation curve to `result`; done once that file
    exists."""

    args: list[str]
    result: Path
    metric: str

    def __call__(self) -> None:
        from benchmark.training.cli import CircleBenchCLI

        cli = CircleBenchCLI(args=self.args)
        curve = validation_curve(Path(cli.run_dir), self.metric)
        write_text(self.result, json.dumps({"curve": curve, "run_dir": str(cli.run_dir)}))

    def done(self) -> bool:
        return self.result.is_file()


def validation_curve(run_dir: Path, metric: str) -> list[float]:
    """`val/<metric>` after each epoch, in epoch order, from a run's CSV logs."""
    column = f"val/{metric}"
    log = run_metrics(run_dir)
    if column not in log or log[column].isna().all():
        raise FoldFailedError(f"{run_dir}/metrics.csv has no {column}: the fold never validated")
    by_epoch = log.dropna(subset=[column]).groupby("epoch")[column].last()
    return [float(v) for v in by_epoch.sort_index()]


def last_error(log: Path) -> str:
    """The last line of `log` naming an exception (`ValueError: ...`), else its last line."""
    lines = [x.strip() for x in log.read_text(errors="replace").splitlines() if x.strip()]
    errors = [x for x in lines if "Error: " in x or x.startswith(("Error", "RuntimeError"))]
    return (errors or lines or ["the fold's process wrote nothing"])[-1][:500]
