"""Every study gets its full budget of distinct settings: resumed after a SIGKILL (in the random
start-up phase and in the TPE phase), with local workers, and as processes of a Slurm array.

The space is small and discrete (4 x 4 integer settings), so that TPE, which exploits the best
region, proposes settings already tried, and a resumed sampler that replayed the first
process's draws would repeat them: both happened before proposals were redrawn.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
import warnings
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from benchmark.tuning import study
from benchmark.tuning.experiment import Budget
from benchmark.tuning.study import (
    DUPLICATE_OF,
    Proposer,
    counted,
    create_study,
    enqueue_default,
    open_storage,
    setting,
    stream_seed,
    work,
)
from benchmark.tuning.tuned import _counts

BUDGET = Budget(trials=10, folds=2, max_epochs=1, startup_trials=4)
GRID = {"x": IntDistribution(0, 3), "y": IntDistribution(0, 3)}
DEFAULT = {"x": 1, "y": 1}


def _value(trial: optuna.Trial) -> float:
    x, y = trial.suggest_int("x", 0, 3), trial.suggest_int("y", 0, 3)
    return -((x - 3) ** 2) - (y - 2) ** 2  # one best setting: TPE keeps proposing near it


def _study(storage: str) -> optuna.Study:
    study = create_study("s", open_storage(storage), BUDGET)
    enqueue_default(study, storage, DEFAULT)
    return study


def _run(storage: str, objective=_value, worker: int = 0) -> optuna.Study:
    study = _study(storage)
    proposer = Proposer(BUDGET, GRID, worker)
    work(study, storage, proposer, objective, stop=threading.Event())
    return study


def _assert_full_budget_of_distinct_settings(storage: str) -> None:
    trials = _study(storage).get_trials()
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == BUDGET.trials
    assert len({setting(t) for t in complete}) == BUDGET.trials, [t.params for t in complete]
    redrawn = [t for t in trials if DUPLICATE_OF in t.user_attrs]
    for t in redrawn:  # kept as a record, never run, spending nothing
        assert t.state == TrialState.FAIL and "redrawn: trial" in t.user_attrs["error"]
        assert setting(t) == setting(trials[t.user_attrs[DUPLICATE_OF]])
    assert _counts(trials)["redrawn"] == len(redrawn)
    assert counted(_study(storage)) == BUDGET.trials


def _blocking_worker(storage: str, runs: int, started: str) -> None:
    """Run `runs` trials, then block in the next one until SIGKILL."""
    done = [0]

    def objective(trial: optuna.Trial) -> float:
        if done[0] == runs:
            Path(started).write_text(str(trial.number))
            while True:
                time.sleep(0.05)
        done[0] += 1
        return _value(trial)

    _run(storage, objective)


@pytest.mark.parametrize("runs", [2, 6], ids=["random-start-up", "tpe"])
def test_a_study_resumed_after_a_kill_runs_its_budget_of_distinct_settings(
    tmp_path: Path, runs: int
) -> None:
    storage, started = str(tmp_path / "study.journal"), tmp_path / "started"
    worker = multiprocessing.get_context("fork").Process(
        target=_blocking_worker, args=(storage, runs, str(started))
    )
    worker.start()
    deadline = time.monotonic() + 120
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker.pid is not None and started.exists()
    os.kill(worker.pid, signal.SIGKILL)
    worker.join()
    killed = int(started.read_text())
    assert _study(storage).trials[killed].state == TrialState.RUNNING
    _run(storage)  # the same command again, in a process of its own as a user would
    _assert_full_budget_of_distinct_settings(storage)
    retried = [t for t in _study(storage).trials if t.user_attrs.get("retry_of") == killed]
    assert len(retried) == 1  # the one repetition allowed: the killed trial, run again


def test_two_local_workers_run_distinct_settings(tmp_path: Path) -> None:
    storage = str(tmp_path / "study.journal")
    study = _study(storage)
    proposer = Proposer(BUDGET, GRID)  # threads of one process share it, as `tune` does

    def slow(trial: optuna.Trial) -> float:
        time.sleep(0.05)  # both workers have a trial running at once
        return _value(trial)

    threads = [
        threading.Thread(
            target=work,
            args=(study, storage, proposer, slow),
            kwargs={"stop": threading.Event()},
        )
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _assert_full_budget_of_distinct_settings(storage)


def _array_task(storage: str, index: int) -> None:  # module level: a process of its own
    def slow(trial: optuna.Trial) -> float:
        time.sleep(0.05)
        return _value(trial)

    _run(storage, slow, worker=index)


def test_two_processes_of_a_slurm_array_run_distinct_settings(tmp_path: Path) -> None:
    storage = str(tmp_path / "study.journal")
    _study(storage)  # the submitting process creates the study and its default first
    context = multiprocessing.get_context("fork")
    tasks = [context.Process(target=_array_task, args=(storage, i)) for i in range(2)]
    for t in tasks:
        t.start()
    for t in tasks:
        t.join(timeout=120)
    assert [t.exitcode for t in tasks] == [0, 0]
    _assert_full_budget_of_distinct_settings(storage)
    pids = {t.user_attrs["worker_pid"] for t in _study(storage).trials if t.value is not None}
    assert len(pids) == 2  # both took part


def test_a_study_with_repeated_settings_runs_on_to_its_distinct_budget(tmp_path: Path) -> None:
    """A study tuned before redrawing (two complete trials of one setting) counts the setting
    once, so resuming it runs the trials it is short of."""
    storage = str(tmp_path / "study.journal")
    study = _study(storage)
    for _ in range(2):
        study.enqueue_trial({"x": 2, "y": 2})
    for _ in range(3):  # the default and the repeated setting
        trial = study.ask(GRID)
        study.tell(trial, _value(trial))
    assert counted(study) == 2
    _run(storage)
    trials = _study(storage).get_trials()
    assert sum(t.state == TrialState.COMPLETE for t in trials) == BUDGET.trials + 1
    assert counted(_study(storage)) == BUDGET.trials


def test_a_space_smaller_than_the_budget_is_a_clear_error(tmp_path: Path) -> None:
    storage = str(tmp_path / "study.journal")
    study = create_study("s", open_storage(storage), BUDGET)
    proposer = Proposer(BUDGET, {"c": CategoricalDistribution(["a", "b"])})
    with pytest.raises(RuntimeError, match="fewer distinct settings"):
        work(study, storage, proposer, lambda t: 1.0, stop=threading.Event())
    complete = [t for t in study.get_trials() if t.state == TrialState.COMPLETE]
    assert sorted(t.params["c"] for t in complete) == ["a", "b"]


def test_a_study_run_in_one_go_draws_the_budget_seeds_stream() -> None:
    assert stream_seed(7, 0, 0) == 7  # what a study run in one go always proposed
    seeds = {stream_seed(7, started, worker) for started in (0, 3) for worker in (0, 1)}
    assert len(seeds) == 4  # a resumed study and each array task draw their own
    assert stream_seed(7, 3, 1) == stream_seed(7, 3, 1)  # deterministic


def test_the_first_proposals_are_those_of_the_seeded_sampler(tmp_path: Path) -> None:
    """Asking with every distribution at once draws what the objective's suggestions drew
    before: the committed studies, run in one go, stay as they are."""
    space = {"m": FloatDistribution(0.05, 0.6), "g": FloatDistribution(8.0, 512.0, log=True)}
    plain = optuna.create_study(sampler=create_study("p", open_storage(str(tmp_path / "p")),
                                                     BUDGET).sampler)  # fmt: skip
    before = []
    for _ in range(3):
        trial = plain.ask()
        values = {n: trial.suggest_float(n, d.low, d.high, log=d.log) for n, d in space.items()}
        before.append(values)
        plain.tell(trial, 0.0)
    study = create_study("s", open_storage(str(tmp_path / "s")), BUDGET)
    proposer = Proposer(BUDGET, space)
    now = []
    for _ in range(3):
        trial = proposer.ask(study)
        now.append(trial.params)
        study.tell(trial, 0.0)
    assert now == before


def test_no_committed_study_ran_a_setting_twice() -> None:
    """Every loss of every group had its full budget of distinct settings."""
    import csv

    root = Path(__file__).resolve().parents[3] / "experiments" / "tuned"
    files = sorted(root.glob("*/*.trials.csv"))
    assert files
    for file in files:
        with file.open(newline="") as f:
            rows = [r for r in csv.DictReader(f) if r["state"] == "COMPLETE"]
        fixed = {"number", "state", "value", "best_epoch", "fold_values", "seconds", "default",
                 "retry_of", "error"}  # fmt: skip
        settings = [tuple((k, v) for k, v in r.items() if k not in fixed) for r in rows]
        assert len(set(settings)) == len(settings), f"{file}: a setting ran twice"


def test_a_budget_lock_left_by_a_killed_worker_is_broken_after_the_grace_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker SIGKILLed while it held the budget lock leaves the lock behind; the next one
    waits out the grace period instead of spinning forever on it."""
    monkeypatch.setattr(study, "LOCK_GRACE_S", 1)
    journal = str(tmp_path / "study.journal")
    child = multiprocessing.get_context("fork").Process(target=_hold_and_die, args=(journal,))
    child.start()
    child.join()
    assert (tmp_path / "study.journal.budget.lock").is_symlink()  # left behind
    start = time.monotonic()
    with warnings.catch_warnings():  # Optuna warns that 1 s is a short grace period
        warnings.simplefilter("ignore")
        with study.budget_lock(journal):
            pass
    assert time.monotonic() - start < 10


def _hold_and_die(journal: str) -> None:
    with study.budget_lock(journal):
        os.kill(os.getpid(), signal.SIGKILL)
