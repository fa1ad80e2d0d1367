"""A fold's result decides whether it ran, whatever exit status the fork server reports."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest

from benchmark.launch.forked import LOST_STATUS, exit_status
from benchmark.tuning import objective
from benchmark.tuning.experiment import Budget
from benchmark.tuning.objective import FoldFailedError, FoldWork, choose_epoch, run_fold
from benchmark.tuning.study import create_study

BUDGET = Budget(trials=1, folds=2, max_epochs=3)


def _fork(status: int, curve: list[float] | None) -> Callable[..., int]:
    """A fork runner whose fold writes `curve` (none: it writes nothing) and whose status the
    fork server reports as `status`, read as `forked.run_forked` reads it."""

    def fork(work: FoldWork, log: Path, threads: int | None) -> int:
        log.write_text("ValueError: the fold's own error\n" if curve is None else "done\n")
        if curve is not None:
            work.result.write_text(json.dumps({"curve": curve, "run_dir": "runs/x"}))
        return exit_status(status, work, log)

    return fork


def test_a_lost_status_after_the_result_was_written_is_a_finished_fold(tmp_path: Path) -> None:
    fork = _fork(LOST_STATUS, [0.1, 0.3, 0.2])
    assert run_fold([], tmp_path / "fold0.log", BUDGET, fork, 1) == [0.1, 0.3, 0.2]
    assert "the run counts as done" in (tmp_path / "fold0.log").read_text()


@pytest.mark.parametrize("status", [LOST_STATUS, 1])
def test_a_fold_without_its_result_fails_with_its_logged_error(tmp_path: Path, status) -> None:
    log = tmp_path / "fold0.log"
    log.with_suffix(".json").write_text(json.dumps({"curve": [1.0, 1.0, 1.0]}))  # an older run's
    with pytest.raises(FoldFailedError, match=f"the fold's own error \\(exit status {status}"):
        run_fold([], log, BUDGET, _fork(status, None), 1)


def test_a_failed_status_fails_the_fold_even_with_a_result(tmp_path: Path) -> None:
    with pytest.raises(FoldFailedError, match="exit status 1"):
        run_fold([], tmp_path / "fold0.log", BUDGET, _fork(1, [0.1, 0.2, 0.3]), 1)


def test_a_short_or_nan_curve_fails_the_fold(tmp_path: Path) -> None:
    for curve in ([0.1, 0.2], [0.1, float("nan"), 0.3]):
        with pytest.raises(FoldFailedError, match="validated"):
            run_fold([], tmp_path / "fold0.log", BUDGET, _fork(0, curve), 1)


def test_the_epoch_is_the_best_mean_over_folds_the_earliest_on_a_tie() -> None:
    assert choose_epoch([[1.0, 3.0, 2.0], [1.0, 1.0, 2.0]]) == (2, 2.0)
    assert choose_epoch([[1.0, 2.0], [2.0, 1.0]]) == (1, 1.5)
    with pytest.raises(FoldFailedError, match="different numbers of epochs"):
        choose_epoch([[1.0, 2.0], [1.0]])


def test_wilcoxon_never_prunes_a_trial_that_ran_every_fold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pruner compares each fold's best, the objective takes the mean curve's best: after
    the last fold a trial (here 9.0 against 7.5) could be pruned, with nothing saved, and lose
    its place as the best."""
    budget = Budget(trials=2, folds=4, max_epochs=2, pruner="wilcoxon")
    study = create_study("s", optuna.storages.InMemoryStorage(), budget)
    experiment = SimpleNamespace(fold_args=lambda *args: [])
    for curves in ([[10, 5], [5, 10], [10, 5], [5, 10]], [[9, 9]] * 4):
        folds = iter(curves)
        monkeypatch.setattr(objective, "run_fold", lambda *args, folds=folds: next(folds))
        trial = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
        value = objective.run_trial(trial, experiment, budget, tmp_path, 1)  # type: ignore[arg-type]
        study.tell(trial, value)
    assert (study.best_trial.number, study.best_value) == (1, 9.0)
