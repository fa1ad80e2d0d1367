"""Studies that survive: the budget, workers on one journal, failures, killed workers."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from benchmark.tuning.experiment import Budget
from benchmark.tuning.study import (
    DEFAULT,
    INTERRUPTED,
    LOCK_GRACE_S,
    RETRY_OF,
    STALE_S,
    Proposer,
    counted,
    create_study,
    enqueue_default,
    open_storage,
    recover_stale,
    work,
)
from benchmark.tuning.task import STAMP, Task
from benchmark.tuning.tuned import TunedFiles

BUDGET = Budget(trials=6, folds=2, max_epochs=1, startup_trials=2)
SPACE = {"x": FloatDistribution(0.0, 1.0)}


def _study(storage: str, budget: Budget = BUDGET) -> optuna.Study:
    return create_study("s", open_storage(storage), budget)


def _value(trial: optuna.Trial) -> float:
    return trial.suggest_float("x", 0.0, 1.0)


def _run(
    storage: str, objective=_value, budget: Budget = BUDGET, stop=None, space=None, worker=0
) -> optuna.Study:
    study = _study(storage, budget)
    proposer = Proposer(budget, space or SPACE, worker)
    work(study, storage, proposer, objective, stop=stop or threading.Event())
    return study


def _slow_value(trial: optuna.Trial) -> float:
    # Long enough that a worker forked a moment late on a busy machine still finds trials left.
    time.sleep(0.5)
    return _value(trial)


def _worker_process(storage: str) -> None:  # module level: started by multiprocessing
    _run(storage, objective=_slow_value)


def test_two_processes_on_one_journal_run_the_budget_once(tmp_path: Path) -> None:
    storage = str(tmp_path / "study.journal")
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_worker_process, args=(storage,)) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert [w.exitcode for w in workers] == [0, 0]
    trials = _study(storage).get_trials()
    assert len(trials) == BUDGET.trials == counted(_study(storage))
    assert sorted(t.number for t in trials) == list(range(BUDGET.trials))
    assert {t.state for t in trials} == {TrialState.COMPLETE}
    assert len({t.user_attrs["worker_pid"] for t in trials}) == 2  # both took part


def test_threads_of_one_process_share_the_budget(tmp_path: Path) -> None:
    storage = str(tmp_path / "study.journal")
    study, stop = _study(storage), threading.Event()
    proposer = Proposer(BUDGET, SPACE)
    threads = [
        threading.Thread(
            target=work, args=(study, storage, proposer, _value), kwargs={"stop": stop}
        )
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(study.get_trials()) == BUDGET.trials


def test_the_default_setting_is_enqueued_once_and_tried_first(tmp_path: Path) -> None:
    storage = str(tmp_path / "study.journal")
    study = _study(storage)
    enqueue_default(study, storage, {"x": 0.25})
    enqueue_default(study, storage, {"x": 0.25})  # a second worker, or a resumed study
    study = _run(storage)
    first = study.trials[0]
    assert first.params == {"x": 0.25} and first.user_attrs[DEFAULT] is True
    assert sum(DEFAULT in t.user_attrs for t in study.trials) == 1


def test_a_failing_setting_is_recorded_and_the_study_goes_on(tmp_path: Path) -> None:
    def objective(trial: optuna.Trial) -> float:
        x = _value(trial)
        if trial.number == 1:
            raise ValueError("CircleLoss: 12 of 40 embedding values are not finite (NaN or Inf)")
        return x

    study = _run(str(tmp_path / "study.journal"), objective)
    states = [t.state for t in study.trials]
    assert states.count(TrialState.FAIL) == 1 and len(states) == BUDGET.trials
    assert "ValueError: CircleLoss: 12 of 40" in study.trials[1].user_attrs["error"]
    assert counted(study) == BUDGET.trials  # a failure spends the budget


def _blocking_worker(storage: str, started: str) -> None:
    def objective(trial: optuna.Trial) -> float:
        _value(trial)
        Path(started).write_text(str(trial.number))
        while True:  # until SIGKILL
            time.sleep(0.05)

    _run(storage, objective)


def _killed_trial(tmp_path: Path, storage: str) -> int:
    """Start a worker, let it begin a trial, SIGKILL it; the trial's number."""
    started = tmp_path / f"started{len(list(tmp_path.glob('started*')))}"
    worker = multiprocessing.get_context("fork").Process(
        target=_blocking_worker, args=(storage, str(started))
    )
    worker.start()
    deadline = time.monotonic() + 120
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker.pid is not None
    os.kill(worker.pid, signal.SIGKILL)
    worker.join()
    return int(started.read_text())


def test_a_killed_workers_trial_is_rerun_and_not_counted(tmp_path: Path) -> None:
    storage = str(tmp_path / "study.journal")
    killed = _killed_trial(tmp_path, storage)
    assert _study(storage).trials[killed].state == TrialState.RUNNING  # left behind
    study = _run(storage)  # resume: recovers, then finishes the budget
    trials = study.trials
    assert trials[killed].state == TrialState.FAIL
    (retry,) = [t for t in trials if t.user_attrs.get(RETRY_OF) == killed]
    assert retry.params == trials[killed].params and retry.state == TrialState.COMPLETE
    assert "is gone" in retry.user_attrs[INTERRUPTED]
    assert counted(study) == BUDGET.trials
    assert sum(t.state == TrialState.COMPLETE for t in trials) == BUDGET.trials


def test_a_setting_that_kills_its_worker_twice_counts_as_failed(tmp_path: Path) -> None:
    storage = str(tmp_path / "study.journal")
    first = _killed_trial(tmp_path, storage)
    recover_stale(_study(storage))  # enqueues the retry
    second = _killed_trial(tmp_path, storage)  # the retry is asked first, and dies too
    study = _study(storage)
    assert study.trials[second].user_attrs[RETRY_OF] == first
    recover_stale(study)
    trials = _study(storage).trials
    assert trials[second].state == TrialState.FAIL
    assert not [t for t in trials if t.user_attrs.get(RETRY_OF) == second]  # no third try
    assert counted(_study(storage)) == 1  # the second failure spends the budget


def test_a_worker_elsewhere_is_stale_only_after_its_heartbeat_stops(tmp_path: Path) -> None:
    study = _study(str(tmp_path / "study.journal"))
    trial = study.ask()
    _value(trial)
    now = time.time()
    for key, value in {"worker_host": "node7", "worker_pid": 4242, "heartbeat": now}.items():
        trial.set_user_attr(key, value)
    assert recover_stale(study, now=now + STALE_S - 1) == []
    assert recover_stale(study, now=now + STALE_S + 1) == [trial.number]
    (retry,) = [t for t in study.get_trials() if t.state == TrialState.WAITING]
    assert "no heartbeat from worker node7:4242" in retry.user_attrs[INTERRUPTED]


@pytest.mark.parametrize("fails", [False, True])
def test_a_late_worker_whose_trial_was_failed_as_stale_goes_on(tmp_path: Path, fails) -> None:
    """A suspended job or a clock ahead: another worker failed this trial as stale and enqueued
    its retry; the late worker's own writes to the trial must not stop its study."""
    first = threading.Event()

    def objective(trial: optuna.Trial) -> float:
        if not first.is_set():
            first.set()
            recover_stale(trial.study, now=time.time() + 2 * STALE_S)
            if fails:
                raise RuntimeError("this fold failed")
        trial.set_user_attr("best_epoch", 1)  # what the objective records after its folds
        return _value(trial)

    trials = _run(str(tmp_path / "study.journal"), objective=objective).get_trials()
    assert sum(RETRY_OF in t.user_attrs for t in trials) == 1
    assert sum(t.state == TrialState.COMPLETE for t in trials) == BUDGET.trials


def test_a_trial_whose_worker_died_before_naming_itself_is_rerun(tmp_path: Path) -> None:
    """A worker killed inside the budget lock, between `ask` and writing its name into the
    trial, left it RUNNING with no worker: once a lock would be broken, it is a dead one's."""
    study = _study(str(tmp_path / "study.journal"))
    trial = study.ask()
    _value(trial)
    assert trial.datetime_start is not None
    started = trial.datetime_start.timestamp()
    assert recover_stale(study, now=started + LOCK_GRACE_S - 1) == []
    assert recover_stale(study, now=started + LOCK_GRACE_S + 1) == [trial.number]
    (retry,) = [t for t in study.get_trials() if t.state == TrialState.WAITING]
    assert retry.user_attrs[RETRY_OF] == trial.number
    assert "died while asking for it" in retry.user_attrs[INTERRUPTED]


def test_after_ctrl_c_a_trial_is_left_for_resume_not_failed(tmp_path: Path) -> None:
    stop = threading.Event()

    def objective(trial: optuna.Trial) -> float:
        _value(trial)
        stop.set()  # Ctrl-C arrives while this trial's folds run; they are killed
        raise RuntimeError("fold killed")

    study = _run(str(tmp_path / "study.journal"), objective, stop=stop)
    assert [t.state for t in study.trials] == [TrialState.RUNNING]


def test_an_rdb_url_is_an_rdb_storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    assert isinstance(open_storage(url), optuna.storages.RDBStorage)
    budget = Budget(trials=2, folds=2, max_epochs=1, startup_trials=1)
    assert len(_run(url, budget=budget).trials) == 2


def test_optuna_dashboard_opens_a_study_as_it_is(tmp_path: Path) -> None:
    """`optuna-dashboard <journal>` (the command users run) lists our study and its trials."""
    storage = str(tmp_path / "study.journal")
    _run(storage)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # beside this interpreter too: a virtual environment's scripts, where it is not activated
    scripts = str(Path(sys.executable).parent)
    dashboard = shutil.which("optuna-dashboard") or shutil.which("optuna-dashboard", path=scripts)
    if dashboard is None:
        pytest.skip("optuna-dashboard is not installed (pip install -e '.[dev]')")
    server = subprocess.Popen(
        [dashboard, storage, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        studies = _get_json(f"http://127.0.0.1:{port}/api/studies")
        (study,) = studies["study_summaries"]
        assert study["study_name"] == "s"
        detail = _get_json(f"http://127.0.0.1:{port}/api/studies/{study['study_id']}")
        assert len(detail["trials"]) == BUDGET.trials
    finally:
        server.terminate()
        server.wait()


def _get_json(url: str) -> dict:
    """GET `url` once the server answers (it starts in a second or two)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return json.loads(response.read())
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_a_study_run_with_another_recipe_or_budget_is_refused(tmp_path: Path) -> None:
    """A journal holds which config, overrides and budget its trials ran with: `tune` with
    another budget or config on it would count and write those trials as this one's."""
    root = Path(__file__).resolve().parents[3]
    frozen = root / "experiments" / "synthetic" / "fine_grained" / "frozen"
    storage = str(tmp_path / "circle.journal")

    def task(config: str, budget: Budget, overrides: tuple[str, ...] = ()) -> Task:
        files = TunedFiles(tmp_path, "circle")
        return Task(
            frozen / config, overrides, tmp_path / "s.yaml", budget, "circle", storage, files
        )

    first = task("circle.yaml", BUDGET)
    study = first.open_study()
    study.enqueue_trial({"x": 0.5})
    assert first.open_study().user_attrs[STAMP]["budget"]["folds"] == 2  # resuming: accepted
    longer = Budget(trials=6, folds=2, max_epochs=3, startup_trials=2)
    with pytest.raises(ValueError, match=r"ran its trials with another budget \(budget: .*"):
        task("circle.yaml", longer).open_study()
    with pytest.raises(ValueError, match=r"another config or overrides \(tuned_for: .*circle"):
        task("triplet.yaml", BUDGET).open_study()
    with pytest.raises(ValueError, match=r"delete it .* or keep it and pass --storage"):
        task("circle.yaml", BUDGET, ("--trainer.max_epochs=2",)).open_study()
