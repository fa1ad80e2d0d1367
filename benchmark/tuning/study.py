"""Optuna studies that survive: journal-file or RDB storage, workers, heartbeats, resume.

Storage is Optuna's journal file (safe for several processes on one file system, unlike SQLite)
unless an RDB URL is given. Every worker runs this loop: under the study's budget lock, recover
trials whose worker died, stop once the finished and running trials reach the budget, else ask
for a trial (the default setting, enqueued when the study is created, comes first); outside the
lock, run it and tell Optuna how it ended. So:

- two workers never run one trial (Optuna hands each asked trial to one caller) and together
  run exactly `budget.trials` (the count and the ask happen under one lock);
- a worker killed outright (SIGKILL, a lost node) leaves its trial RUNNING; the next worker to
  look marks it FAIL as `interrupted` and enqueues its setting again, once; interrupted trials do
  not count, so a resumed study repeats no finished trial and runs its full budget;
- a trial whose setting raises (a NaN loss, an out-of-memory error, a bad value) is FAIL with
  the error in its `error` attribute and counts: a space that yields broken settings spends
  its own budget.

A worker's liveness: on the same host, its process id; elsewhere, a heartbeat it writes into
its running trials every `HEARTBEAT_S` seconds, stale after `STALE_S`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.trial import FrozenTrial, TrialState

from benchmark.tuning.experiment import Budget

HEARTBEAT_S = 60.0
STALE_S = 600.0
INTERRUPTED = "interrupted"  # why the trial this one retries was interrupted
RETRY_OF = "retry_of"  # the number of the interrupted trial a retry repeats
DEFAULT = "default_setting"  # user attribute of the enqueued default trial

optuna.logging.set_verbosity(optuna.logging.WARNING)  # our progress bar says what matters


def open_storage(url: str) -> BaseStorage:
    """An RDB storage for `sqlite:///...`, `postgresql://...` URLs, else a journal file at `url`.

    SQLite is refused for several workers by Optuna's FAQ, not by us: it works for one.
    """
    if "://" in url:
        return RDBStorage(url)
    path = Path(url)
    path.parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(path)))


@dataclass(frozen=True)
class Worker:
    """Who runs a trial: written into it so that other workers can tell whether it is alive."""

    host: str
    pid: int

    @staticmethod
    def here() -> Worker:
        return Worker(socket.gethostname(), os.getpid())

    def attrs(self) -> dict[str, object]:
        return {"worker_host": self.host, "worker_pid": self.pid, "heartbeat": time.time()}


def create_study(name: str, storage: BaseStorage, budget: Budget) -> optuna.Study:
    """The study `name` in `storage` (created, or loaded to resume) with the budget's sampler."""
    sampler = optuna.samplers.TPESampler(
        seed=budget.sampler_seed,
        n_startup_trials=budget.startup_trials,
        multivariate=True,
        constant_liar=True,  # parallel workers do not all sample next to the same best trial
    )
    pruner = (
        optuna.pruners.WilcoxonPruner(p_threshold=0.1)
        if budget.pruner == "wilcoxon"
        else optuna.pruners.NopPruner()
    )
    study = optuna.create_study(
        study_name=name,
        storage=storage,
        sampler=sampler,
        pruner=pruner,
        direction="maximize",
        load_if_exists=True,
    )
    return study


@contextlib.contextmanager
def budget_lock(storage_url: str) -> Iterator[None]:
    """Held while a worker counts trials and asks for one; a symlink lock beside a journal file
    works across hosts on a shared file system (Optuna's own journal lock)."""
    path = storage_url if "://" not in storage_url else _rdb_lock_path(storage_url)
    lock = JournalFileSymlinkLock(f"{path}.budget")
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _rdb_lock_path(url: str) -> str:
    """A lock file for an RDB study: in the working folder (one host's workers coordinate)."""
    folder = Path(".circlebench-tune-locks")
    folder.mkdir(exist_ok=True)
    return str(folder / url.replace("/", "_").replace(":", "_"))


def counted(study: optuna.Study) -> int:
    """Trials that spend the budget: finished (complete, pruned, failed, but not a failure
    whose setting was enqueued again after its worker died) and running (alive: stale ones are
    recovered first)."""
    trials = study.get_trials(deepcopy=False)
    retried = {t.user_attrs[RETRY_OF] for t in trials if RETRY_OF in t.user_attrs}
    return sum(
        t.state != TrialState.WAITING and not (t.state == TrialState.FAIL and t.number in retried)
        for t in trials
    )


def recover_stale(study: optuna.Study, me: Worker, now: float | None = None) -> list[int]:
    """Fail the RUNNING trials whose worker is dead and enqueue their settings again, marked
    `retry_of` with the reason (a retry interrupted in turn is not retried: it counts as a
    failure, so a setting that kills its worker cannot stall the study); their numbers."""
    now = time.time() if now is None else now
    recovered = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        why = _dead_worker(trial, me, now)
        if why is None:
            continue
        study.tell(trial.number, state=TrialState.FAIL)
        if RETRY_OF not in trial.user_attrs:
            attrs: dict[str, object] = {RETRY_OF: trial.number, INTERRUPTED: why}
            if DEFAULT in trial.user_attrs:
                attrs[DEFAULT] = True
            study.enqueue_trial(trial.params, user_attrs=attrs)
        recovered.append(trial.number)
    return recovered


def _dead_worker(trial: FrozenTrial, me: Worker, now: float) -> str | None:
    """Why `trial`'s worker is dead, or None when it may be alive."""
    host, pid = trial.user_attrs.get("worker_host"), trial.user_attrs.get("worker_pid")
    started = trial.datetime_start.timestamp() if trial.datetime_start else now
    beat = float(trial.user_attrs.get("heartbeat", started))
    if host == me.host and isinstance(pid, int) and pid != me.pid and not _alive(pid):
        return f"interrupted: worker {host}:{pid} is gone (killed, or its machine stopped)"
    if now - beat > STALE_S:
        return f"interrupted: no heartbeat from worker {host}:{pid} for {now - beat:.0f} s"
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


class Heartbeat:
    """A thread that stamps `heartbeat` into this process's running trials every HEARTBEAT_S."""

    def __init__(self) -> None:
        self.trials: dict[int, optuna.Trial] = {}
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tune-heartbeat")

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def add(self, trial: optuna.Trial) -> None:
        with self._lock:
            self.trials[trial.number] = trial

    def discard(self, trial: optuna.Trial) -> None:
        with self._lock:
            self.trials.pop(trial.number, None)

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with self._lock:
                running = list(self.trials.values())
            for trial in running:
                with contextlib.suppress(RuntimeError):  # it finished meanwhile
                    trial.set_user_attr("heartbeat", time.time())


Objective = Callable[[optuna.Trial], float]
Done = Callable[[optuna.Study, FrozenTrial], None]


def work(
    study: optuna.Study,
    storage_url: str,
    budget: Budget,
    objective: Objective,
    heartbeat: Heartbeat,
    *,
    stop: threading.Event,
    done: Done | None = None,
) -> None:
    """Run trials of `study` until it has `budget.trials` (the loop in the module docstring).

    Once `stop` is set (Ctrl-C), a trial that then ends in an error is left RUNNING, not
    failed: its folds were killed, so a later `tune` recovers it as interrupted and reruns it.
    """
    me = Worker.here()
    while not stop.is_set():
        with budget_lock(storage_url):
            recover_stale(study, me)
            if counted(study) >= budget.trials:
                return
            trial = study.ask()
            for key, value in me.attrs().items():
                trial.set_user_attr(key, value)
        heartbeat.add(trial)
        try:
            value = objective(trial)
        except optuna.TrialPruned:
            study.tell(trial, state=TrialState.PRUNED, skip_if_finished=True)
        except Exception as error:  # recorded, and the study goes on: see the module docstring
            if stop.is_set():
                return
            trial.set_user_attr("error", f"{type(error).__name__}: {error}"[:1000])
            study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
        else:
            # skip_if_finished: another worker may have failed it as stale (a late heartbeat);
            # the first word stands, and the retry it enqueued runs the setting again.
            study.tell(trial, value, skip_if_finished=True)
        finally:
            heartbeat.discard(trial)
        if done is not None:
            done(study, study.get_trials(deepcopy=False)[trial.number])


def enqueue_default(study: optuna.Study, storage_url: str, values: dict[str, object]) -> None:
    """Enqueue the loss's default setting as the study's first trial (once per study)."""
    with budget_lock(storage_url):
        if not study.get_trials(deepcopy=False):
            study.enqueue_trial(dict(values), user_attrs={DEFAULT: True})
