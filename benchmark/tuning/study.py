"""Optuna studies that survive: journal-file or RDB storage, workers, heartbeats, resume.

Every worker loops (`work`): under the study's budget lock, recover the trials of dead workers
(`recover_stale`), stop at `budget.trials` distinct settings (`counted`), else ask for a setting
not yet tried (`Proposer`); outside the lock, run it and tell Optuna how it ended. So workers
together run exactly the budget, and no setting twice but the one retry of a trial whose worker
died. The rules in full: docs/guides/tuning.md#studies-that-survive.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.trial import FrozenTrial, TrialState

from benchmark.tuning.experiment import Budget

HEARTBEAT_S = 60.0
STALE_S = 600.0
INTERRUPTED = "interrupted"  # why the trial this one retries was interrupted
RETRY_OF = "retry_of"  # the number of the interrupted trial a retry repeats
DEFAULT = "default_setting"  # user attribute of the enqueued default trial
DUPLICATE_OF = "duplicate_of"  # a redrawn proposal: the trial whose setting it repeated
MAX_REDRAWS = 100  # proposals in a row that repeat a setting before the space counts as spent

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


def create_study(name: str, storage: BaseStorage, budget: Budget) -> optuna.Study:
    """The study `name` in `storage` (created, or loaded to resume) with the budget's sampler."""
    pruner = (
        optuna.pruners.WilcoxonPruner(p_threshold=0.1)
        if budget.pruner == "wilcoxon"
        else optuna.pruners.NopPruner()
    )
    return optuna.create_study(
        study_name=name,
        storage=storage,
        sampler=make_sampler(budget, budget.sampler_seed),
        pruner=pruner,
        direction="maximize",
        load_if_exists=True,
    )


def make_sampler(budget: Budget, seed: int) -> optuna.samplers.TPESampler:
    """The budget's TPE sampler, seeded with `seed`."""
    return optuna.samplers.TPESampler(
        seed=seed,
        n_startup_trials=budget.startup_trials,
        multivariate=True,
        constant_liar=True,  # parallel workers do not all sample next to the same best trial
    )


def stream_seed(seed: int, started: int, worker: int) -> int:
    """The sampler seed of worker `worker` (0 locally, the array index on Slurm) when it joins a
    study in which `started` trials have begun.

    The first worker of a new study keeps the budget's own seed, so a study run in one go
    proposes what it always did; any other gets a stream of its own, mixed from all three: a
    resumed study, or a second worker, would otherwise replay the draws that already ran.
    """
    if started == 0 and worker == 0:
        return seed
    return int(np.random.SeedSequence([seed % 2**32, started, worker]).generate_state(1)[0])


def setting(trial: FrozenTrial | optuna.Trial) -> tuple[tuple[str, Any], ...]:
    """What a trial tries: its values by name, in a comparable form."""
    return tuple(sorted(trial.params.items()))


def _spending(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The trials that spend the budget: finished (complete, pruned, failed by an error) or
    running; not waiting, not a failure whose setting was enqueued again after its worker died,
    not a redrawn proposal."""
    retried = {t.user_attrs[RETRY_OF] for t in trials if RETRY_OF in t.user_attrs}
    return [
        t
        for t in trials
        if t.state != TrialState.WAITING
        and not (
            t.state == TrialState.FAIL and (t.number in retried or DUPLICATE_OF in t.user_attrs)
        )
    ]


def counted(study: optuna.Study) -> int:
    """The distinct settings that spend the budget (`_spending`): two trials of one setting
    count once."""
    return len({setting(t) for t in _spending(study.get_trials(deepcopy=False))})


class Proposer:
    """Asks a study for trials whose setting no finished or running trial has, under the
    budget lock, for every worker (thread) of one process. Its first call seeds the sampler
    (`stream_seed`); each asks with every distribution of `space` at once, so the values are
    known before the trial runs."""

    def __init__(
        self, budget: Budget, space: Mapping[str, BaseDistribution], worker: int = 0
    ) -> None:
        self.budget, self.space, self.worker = budget, dict(space), worker
        self._seeded = False

    def ask(self, study: optuna.Study) -> optuna.Trial:
        """A new trial, its values drawn. Raises RuntimeError when MAX_REDRAWS proposals in a
        row repeat settings: the space holds fewer distinct settings than the budget."""
        trials = study.get_trials(deepcopy=False)
        if not self._seeded:
            started = sum(t.state != TrialState.WAITING for t in trials)
            seed = stream_seed(self.budget.sampler_seed, started, self.worker)
            study.sampler = make_sampler(self.budget, seed)
            self._seeded = True
        taken = {setting(t): t for t in _spending(trials)}
        for _ in range(MAX_REDRAWS):
            trial = study.ask(self.space)
            same = taken.get(setting(trial))
            if same is None:
                return trial
            trial.set_user_attr(DUPLICATE_OF, same.number)
            trial.set_user_attr(
                "error", f"redrawn: trial {same.number} ({same.state.name}) has this setting"
            )
            study.tell(trial, state=TrialState.FAIL)
        raise RuntimeError(
            f"study {study.study_name}: {MAX_REDRAWS} proposals in a row repeated settings "
            f"already tried, so its space holds fewer distinct settings than the budget of "
            f"{self.budget.trials}; widen the space or lower the trials"
        )


# A budget lock older than this was left by a killed worker (a holder only counts and asks).
LOCK_GRACE_S = 30


@contextlib.contextmanager
def budget_lock(storage_url: str) -> Iterator[None]:
    """Held while a worker counts trials and asks for one: Optuna's symlink lock beside a
    journal file, which works across hosts on a shared file system. A lock left by a killed
    worker is broken after `LOCK_GRACE_S`, dated by the file it points to, which must exist.
    An RDB study's lock is in the working folder: one host's workers coordinate."""
    path = storage_url
    if "://" in storage_url:
        Path(".circlebench-tune-locks").mkdir(exist_ok=True)
        path = ".circlebench-tune-locks/" + storage_url.replace("/", "_").replace(":", "_")
    Path(f"{path}.budget").touch()
    lock = JournalFileSymlinkLock(f"{path}.budget", grace_period=LOCK_GRACE_S)
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def recover_stale(study: optuna.Study, now: float | None = None) -> list[int]:
    """Fail the RUNNING trials whose worker is dead and enqueue their settings again, marked
    `retry_of` with the reason (a retry interrupted in turn is not retried: it counts as a
    failure, so a setting that kills its worker cannot stall the study); their numbers."""
    now = time.time() if now is None else now
    recovered = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        why = _dead_worker(trial, now)
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


def _dead_worker(trial: FrozenTrial, now: float) -> str | None:
    """Why `trial`'s worker (named in it by `work`) is dead, or None when it may be alive."""
    host, pid = trial.user_attrs.get("worker_host"), trial.user_attrs.get("worker_pid")
    started = trial.datetime_start.timestamp() if trial.datetime_start else now
    beat = float(trial.user_attrs.get("heartbeat", started))
    another_here = host == socket.gethostname() and pid != os.getpid()
    if another_here and isinstance(pid, int) and not _alive(pid):
        return f"interrupted: worker {host}:{pid} is gone (killed, or its machine stopped)"
    # `work` names itself in a trial under the budget lock, right after asking for it: a trial
    # still unnamed once such a lock would be broken was asked by a worker killed in between.
    if host is None and now - started > LOCK_GRACE_S:
        return f"interrupted: its worker died while asking for it ({now - started:.0f} s ago)"
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


@contextlib.contextmanager
def _heartbeat(trial: optuna.Trial) -> Iterator[None]:
    """Stamp `heartbeat` into `trial` every HEARTBEAT_S while the block runs (its objective)."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_S):
            with contextlib.suppress(UpdateFinishedTrialError):  # failed as stale meanwhile
                trial.set_user_attr("heartbeat", time.time())

    thread = threading.Thread(target=beat, daemon=True, name="tune-heartbeat")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def work(
    study: optuna.Study,
    storage_url: str,
    proposer: Proposer,
    objective: Callable[[optuna.Trial], float],
    *,
    stop: threading.Event,
    done: Callable[[optuna.Study, FrozenTrial], None] | None = None,
) -> None:
    """Run trials of `study` until it has `proposer.budget.trials` distinct settings (the loop
    in the module docstring). Once `stop` is set (Ctrl-C), a trial ending in an error is left
    RUNNING: its folds were killed, and a later `tune` recovers it as interrupted."""
    while not stop.is_set():
        with budget_lock(storage_url):
            recover_stale(study)
            if counted(study) >= proposer.budget.trials:
                return
            trial = proposer.ask(study)
            trial.set_user_attr("worker_host", socket.gethostname())
            trial.set_user_attr("worker_pid", os.getpid())
            trial.set_user_attr("heartbeat", time.time())
        try:
            with _heartbeat(trial):
                value = objective(trial)
        except UpdateFinishedTrialError:
            pass  # another worker failed it as stale meanwhile: its retry runs the setting again
        except optuna.TrialPruned:
            study.tell(trial, state=TrialState.PRUNED, skip_if_finished=True)
        except Exception as error:  # a FAIL that counts, recorded; the study goes on
            if stop.is_set():
                return
            with contextlib.suppress(UpdateFinishedTrialError):
                trial.set_user_attr("error", f"{type(error).__name__}: {error}"[:1000])
            study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
        else:
            # skip_if_finished: another worker may have failed it as stale (a late heartbeat);
            # the first word stands, and the retry it enqueued runs the setting again.
            study.tell(trial, value, skip_if_finished=True)
        if done is not None:
            done(study, study.get_trials(deepcopy=False)[trial.number])


def enqueue_default(study: optuna.Study, storage_url: str, values: dict[str, object]) -> None:
    """Enqueue the loss's default setting as the study's first trial (once per study)."""
    with budget_lock(storage_url):
        if not study.get_trials(deepcopy=False):
            study.enqueue_trial(dict(values), user_attrs={DEFAULT: True})
