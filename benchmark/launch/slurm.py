"""Slurm through submitit: what each array task asks for, submitting an array of tasks
(`slurm_tasks`), and the jobs' states from Slurm's accounting (`sacct`).

An array task is one job of `nodes × tasks_per_node` Slurm tasks running the same callable: one
Lightning process per GPU (ranked by Lightning's `SLURMEnvironment`), or one for `one_task`.
Jobs run in the submitting directory with this checkout first on `PYTHONPATH` (a shared disk).
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import submitit
from submitit.core.utils import FailedJobError
from submitit.slurm.slurm import SlurmInfoWatcher

from benchmark.launch.processes import thread_environment
from benchmark.launch.slurm_tasks import CallTask

CODE_ROOT = Path(__file__).resolve().parents[2]  # the checkout the jobs import
# Requeues at the time limit (submitit's countdown): a longer cell resumes up to this many times.
MAX_TIME_LIMIT_REQUEUES = 3
# sacct states of a job that may still run (Slurm's job state codes); any other state is final.
ACTIVE_STATES = frozenset(
    {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED"}
    | {"COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT", "STOPPED"}
)
# How long a job neither sacct nor squeue lists must stay so before a wait takes it as ended
# (a requeued array task is briefly invisible to both).
UNKNOWN_GRACE_S = 60.0
# How long a job must stay ended before a wait reports it failed: during a requeue, accounting
# can call the last attempt FAILED, and squeue miss a beat, before the job runs again.
SETTLE_S = 15.0


@dataclass(frozen=True)
class SlurmOptions:
    """What each array task (one cell, one tuning worker) asks Slurm for."""

    partition: str | None = None
    gpus: int = 0  # per node of one task (0: CPUs), each with its Slurm task (`tasks_per_node`)
    nodes: int = 1  # per array task (Lightning's `num_nodes`); more than 1 needs GPUs
    cpus: int = 1  # per Slurm task (`cpus-per-task`): threads plus data loader workers
    time_min: int = 240  # time limit of one attempt
    max_parallel: int | None = None  # array tasks running at once (`%N`); None: submitit's 256
    # more `#SBATCH --KEY=VALUE` lines; the value True writes a bare `--KEY`
    extra: dict[str, str | bool] = field(default_factory=dict)
    name: str = "circlebench"
    one_task: bool = False  # one Slurm task per job whatever its GPUs (a tuning worker forks)

    def __post_init__(self) -> None:
        limits = {"gpus": 0, "nodes": 1, "cpus": 1, "time_min": 1, "max_parallel": 1}
        for what, least in limits.items():
            if (value := getattr(self, what)) is not None and value < least:
                raise ValueError(f"Slurm {what} must be at least {least}, got {value}")
        if self.nodes > 1 and self.gpus == 0:
            raise ValueError(
                f"a task on {self.nodes} nodes trains with DDP, one process per GPU: give it "
                "GPUs (--gpus-per-cell) or run it on one node"
            )

    @property
    def tasks_per_node(self) -> int:
        """Slurm tasks per node: one Lightning process per GPU, one on CPUs or for `one_task`."""
        return 1 if self.one_task else max(1, self.gpus)

    def trainer_args(self) -> list[str]:
        """The `--trainer.*` options that make Lightning use what the job asks Slurm for; none
        on CPUs, where the configs' own single device is what one Slurm task has."""
        if self.gpus == 0:
            return []
        return ["--trainer.accelerator=gpu", f"--trainer.devices={self.gpus}",
                f"--trainer.num_nodes={self.nodes}"]  # fmt: skip

    def parameters(self, workdir: Path, threads: int | None) -> dict[str, Any]:
        """submitit's `SlurmExecutor.update_parameters` arguments for these options."""
        setup = [f"export PYTHONPATH={shlex.quote(str(CODE_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}"]
        if variables := thread_environment(threads):
            setup.append("export " + " ".join(f"{k}={v}" for k, v in variables.items()))
        parameters: dict[str, Any] = {
            "job_name": self.name,
            "time": self.time_min,
            "nodes": self.nodes,
            "ntasks_per_node": self.tasks_per_node,
            "cpus_per_task": self.cpus,
            "setup": setup,
            # Preemption and node failures requeue the job (it resumes), whatever the default.
            "additional_parameters": {
                "chdir": str(workdir.resolve()),
                "requeue": True,
                **self.extra,
            },
        }
        if self.partition:
            parameters["partition"] = self.partition
        if self.gpus:
            parameters["gpus_per_node"] = self.gpus
        if self.max_parallel is not None:
            parameters["array_parallelism"] = self.max_parallel
        return parameters


def submit_array(
    tasks: Sequence[CallTask], folder: Path, options: SlurmOptions, threads: int | None
) -> list[str]:
    """Submit `tasks` as one job array (one task per array index); their job ids, in order.

    submitit keeps each task's pickle, result and Slurm output under `folder/<job id>/`.
    """
    try:
        executor = submitit.SlurmExecutor(
            folder=folder / "%j", max_num_timeout=MAX_TIME_LIMIT_REQUEUES
        )
    except RuntimeError as error:  # submitit's "Could not detect srun"
        raise SystemExit(
            f"--launcher slurm: {error}: run the command on a machine of the Slurm cluster "
            "(a login node), or leave out --launcher slurm to run the cells here"
        ) from error
    executor.update_parameters(**options.parameters(Path.cwd(), threads))
    try:
        with executor.batch():
            jobs = [executor.submit(task) for task in tasks]
    except FailedJobError as error:
        raise SystemExit(
            f"sbatch refused the job array: {error}; check --partition, --time and the "
            "--slurm-option values against `sinfo` and your cluster's documentation"
        ) from error
    return [job.job_id for job in jobs]


@dataclass(frozen=True)
class JobState:
    """What Slurm's accounting says of one array task."""

    job_id: str
    state: str  # sacct's State, first word: COMPLETED, CANCELLED, TIMEOUT, NODE_FAIL, ...
    node: str = ""
    exit_code: str = ""  # sacct's ExitCode, "status:signal"
    elapsed_s: float = 0.0  # run time of its latest attempt (sacct's Elapsed)

    @property
    def active(self) -> bool:
        """Whether the job may still run (pending, running, requeued, ...)."""
        return self.state in ACTIVE_STATES

    def describe(self) -> str:
        """`CANCELLED (job 7_1 on node3, exit 0:15)`, for messages."""
        where = f" on {self.node}" if self.node and self.node != "None assigned" else ""
        code = f", exit {self.exit_code}" if self.exit_code else ""
        return f"{self.state} (job {self.job_id}{where}{code})"


def job_states(job_ids: Iterable[str]) -> dict[str, JobState]:
    """The state of each of `job_ids` (`<array>_<index>` or plain ids): from `sacct`, else from
    `squeue` (a job accounting has not recorded yet), else `UNKNOWN`. A job that the queue holds
    as active is active, whatever accounting says (it hears of a requeue late)."""
    ids = list(job_ids)
    if not ids:
        return {}
    arrays = ",".join(sorted({job_id.split("_")[0] for job_id in ids}))
    command = ["sacct", "--parsable2", "--format=JobID,State,NodeList,ExitCode,Elapsed"]
    command += [f"--jobs={arrays}"]
    try:
        output = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    except FileNotFoundError as error:
        raise SystemExit(
            "sacct not found: the Slurm launcher reads job states from Slurm's accounting; run "
            "it on a machine of the cluster"
        ) from error
    except subprocess.CalledProcessError as error:
        raise SystemExit(
            f"sacct failed ({error.stderr.strip()}): the Slurm launcher needs Slurm's job "
            "accounting (slurmdbd) to learn how jobs ended; ask your cluster's administrators"
        ) from error
    known = _read_states(output.stdout)
    if any(job_id not in known or not known[job_id].active for job_id in ids):
        command = ["squeue", "--noheader", "--format=%i|%T|%N", f"--jobs={arrays}"]
        queued = subprocess.run(command, capture_output=True, text=True, timeout=120)
        # squeue fails on ids it no longer knows: then it has nothing to add
        queue = queued.stdout if queued.returncode == 0 else ""
        in_queue = _read_states("JobID|State|NodeList\n" + queue)
        known = in_queue | known
        known |= {job_id: state for job_id, state in in_queue.items() if state.active}
    return {job_id: known.get(job_id, JobState(job_id, "UNKNOWN")) for job_id in ids}


def _read_states(table: str) -> dict[str, JobState]:
    """`JobState`s from `|`-separated columns under a header (sacct's or squeue's)."""
    info = SlurmInfoWatcher().read_info(table)  # expands pending ranges like 7_[2-9%2]
    return {
        job_id: JobState(
            job_id,
            (stats.get("State") or "UNKNOWN").split()[0],  # "CANCELLED by 0"
            stats.get("NodeList", ""),
            stats.get("ExitCode", ""),
            _seconds(stats.get("Elapsed", "")),
        )
        for job_id, stats in info.items()
    }


def _seconds(elapsed: str) -> float:
    """Seconds of sacct's `[D-][HH:]MM:SS` (0 for an empty field)."""
    days, _, clock = elapsed.rpartition("-")
    parts = [float(part) for part in clock.split(":") if part]
    return sum(part * 60**i for i, part in enumerate(reversed(parts))) + 86400 * float(days or 0)


class JobWatch:
    """`job_states` for a wait that polls: a job unknown to both `sacct` and `squeue` is left
    out (undecided) until it has stayed unknown for `UNKNOWN_GRACE_S` (a requeue can hide it);
    `ended_for` says how long a job has been seen ended (a wait holds off for `SETTLE_S`)."""

    def __init__(self, poll: Callable[[Iterable[str]], dict[str, JobState]]) -> None:
        self.poll = poll  # `job_states`
        self._unknown_since: dict[str, float] = {}
        self._ended_since: dict[str, float] = {}

    def states(self, job_ids: Iterable[str]) -> dict[str, JobState]:
        """The states of `job_ids` that are known, or unknown for longer than the grace."""
        now = time.monotonic()
        states = {}
        for job_id, state in self.poll(job_ids).items():
            if state.active:
                self._ended_since.pop(job_id, None)
            else:
                self._ended_since.setdefault(job_id, now)
            if state.state != "UNKNOWN":
                self._unknown_since.pop(job_id, None)
            elif now - self._unknown_since.setdefault(job_id, now) < UNKNOWN_GRACE_S:
                continue
            states[job_id] = state
        return states

    def ended_for(self, job_id: str) -> float:
        """Seconds since `job_id` was first seen ended without being seen active since (0 when
        it was last seen active or never polled)."""
        since = self._ended_since.get(job_id)
        return 0.0 if since is None else time.monotonic() - since


def wait_for_jobs(job_ids: Sequence[str], poll_s: float = 10.0) -> dict[str, JobState]:
    """Poll `job_states` every `poll_s` seconds until every job of `job_ids` has stayed ended
    for `SETTLE_S`; their final states (`COMPLETED`, `FAILED`, `CANCELLED`, ...)."""
    watch = JobWatch(job_states)
    while True:
        states = watch.states(job_ids)
        if len(states) == len(set(job_ids)) and all(
            not state.active and watch.ended_for(job_id) >= SETTLE_S
            for job_id, state in states.items()
        ):
            return states
        time.sleep(poll_s)


def cancel(job_ids: Iterable[str]) -> None:
    """`scancel` these jobs (array tasks)."""
    subprocess.run(["scancel", *job_ids], capture_output=True, timeout=120, check=False)
