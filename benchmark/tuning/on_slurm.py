"""`circlebench tune --launcher slurm --workers W`: W study workers per study as Slurm array tasks.

Each array task runs the local workers' loop (`study.work`), one trial at a time, on the study's
storage, which must be on the file system the nodes share: the journal and its budget lock
coordinate the workers. The submitting process creates each study and its default trial, waits
for the array, then alone writes the tuned files. A requeued worker starts again; its
interrupted trial is retried once (`study.recover_stale`).
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path

import optuna
from rich.console import Console

from benchmark.launch.slurm import SlurmOptions, submit_array, wait_for_jobs
from benchmark.launch.slurm_tasks import CallTask
from benchmark.tuning.objective import run_trial
from benchmark.tuning.study import Proposer, counted
from benchmark.tuning.study import work as study_work
from benchmark.tuning.task import Task

POLL_S = 10.0  # between two sacct calls while the workers run
FOLDER = Path("results/tuning/slurm")  # submitit's files of each job


def worker(task: Task, threads: int, index: int) -> None:
    """What array task `index` runs: trials of `task`'s study until its budget is spent, its
    sampler on a stream of its own (`study.stream_seed` mixes in `index`)."""
    experiment, study = task.experiment(), task.open_study()
    proposer = Proposer(task.budget, experiment.space.distributions(), worker=index)

    def objective(trial: optuna.Trial) -> float:
        return run_trial(trial, experiment, task.budget, task.work_dir, threads)

    def done(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        why = trial.user_attrs.get("error", "")
        print(f"trial {trial.number} {trial.state.name} {trial.value or ''} {why}", flush=True)

    stop = threading.Event()  # a Slurm job is stopped by Slurm, not by Ctrl-C
    study_work(study, task.storage, proposer, objective, stop=stop, done=done)
    print(f"{task.study}: budget of {task.budget.trials} trials spent", flush=True)


def tune_on_slurm(
    tasks: list[Task], workers: int, threads: int, options: SlurmOptions, console: Console
) -> dict[str, str]:
    """Run `workers` workers of each study as one Slurm job array and wait for them; why a
    study did not reach its budget (a worker's Slurm state and log), by study name."""
    for task in tasks:  # before any job: the default setting comes first, once
        task.start(console)
    calls = [  # (task, worker i's log, what it runs)
        (task, task.work_dir / "workers" / f"{i}.log", functools.partial(worker, task, threads, i))
        for task in tasks
        for i in range(workers)
    ]
    array = [CallTask(function, log, threads) for _, log, function in calls]
    jobs = submit_array(array, FOLDER, options, threads)
    console.print(f"submitted {len(jobs)} tuning worker(s) as Slurm job array "
                  f"{jobs[0].split('_')[0]}; waiting for them")  # fmt: skip
    try:
        ended = wait_for_jobs(jobs, poll_s=POLL_S)
    except KeyboardInterrupt:
        console.print("stopped waiting: the workers go on in Slurm; run the same command again "
                      "to wait for the study and write its tuned files")  # fmt: skip
        raise
    failed: dict[str, list[str]] = {}
    for (task, log, _), job in zip(calls, jobs, strict=True):
        if ended[job].state != "COMPLETED":
            line = f"worker {ended[job].describe()}; log: {log}"
            console.print(f"[red]FAIL[/] {task.study}: {line}", soft_wrap=True)
            failed.setdefault(task.study, []).append(line)
    short: dict[str, str] = {}
    for task in tasks:
        study = task.open_study()
        running = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)))
        finished = counted(study) - running  # RUNNING now: their workers are gone
        if finished < task.budget.trials:
            workers_said = "; ".join(failed.get(task.study, [])) or "no worker failed"
            short[task.study] = (
                f"{finished} of {task.budget.trials} trials finished ({workers_said}); run the "
                "same command again to resume: interrupted trials are tried again"
            )
    return short
