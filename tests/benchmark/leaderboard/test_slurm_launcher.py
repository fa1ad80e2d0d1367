"""The Slurm launcher without a cluster: the job script against the trainer's parsed config,
options and their errors, sacct's states, failures reported and rerun, what a task runs."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from benchmark.launch import slurm
from benchmark.launch.slurm import JobState, SlurmOptions, job_states, submit_array
from benchmark.launch.slurm_tasks import CallTask
from benchmark.leaderboard import command as leaderboard
from benchmark.leaderboard import slurm_cells
from benchmark.leaderboard.cells import CellWork, cell_args
from benchmark.leaderboard.slurm_cells import CellTask, resumable_run
from benchmark.leaderboard.suite import load_suite
from benchmark.training.cli import CircleBenchCLI
from benchmark.training.rows import read_results
from tests.benchmark.leaderboard.test_leaderboard import fake_fit, project  # noqa: F401

REPO = Path(__file__).resolve().parents[3]


def test_the_job_script_asks_slurm_for_what_the_trainer_will_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two nodes of 4 GPUs: Slurm is asked for 4 tasks and 4 GPUs per node on 2 nodes, and the
    cell's command line, as the training CLI parses it, trains on 4 GPUs per node on 2 nodes."""
    extra: dict[str, str | bool] = {"account": "proj", "exclusive": True}
    options = SlurmOptions(partition="gpu", gpus=4, nodes=2, cpus=10, time_min=600,
                           max_parallel=3, extra=extra)  # fmt: skip
    script = submitted_script(tmp_path / "plain", monkeypatch, options, count=10, threads=None)
    for line in ["--array=0-9%3", "--nodes=2", "--ntasks-per-node=4", "--gpus-per-node=4",
                 "--cpus-per-task=10", "--time=600", "--partition=gpu", "--account=proj",
                 "--exclusive", "--requeue", "--signal=USR2@90"]:  # fmt: skip
        assert f"#SBATCH {line}" in script
    assert any(line.startswith("srun ") for line in script)  # one process per Slurm task
    assert f"export PYTHONPATH={REPO}${{PYTHONPATH:+:$PYTHONPATH}}" in script
    assert not any("NUM_THREADS" in line for line in script)  # torch's default threads
    threaded = submitted_script(tmp_path / "threaded", monkeypatch, options, count=10, threads=2)
    assert "export OMP_NUM_THREADS=2 MKL_NUM_THREADS=2" in threaded
    monkeypatch.setattr("sys.argv", ["circlebench"])  # pytest's own would read as stray arguments
    config = REPO / "experiments/synthetic/fine_grained/circle_class.yaml"
    cell = load_suite_cell(tmp_path, config)
    args = cell_args(cell, tmp_path / "rows.csv", tmp_path / "runs") + options.trainer_args()
    args[2] = str(tmp_path / args[2])  # the config, relative to the suite's root
    parsed = CircleBenchCLI(args=args[1:], run=False, parse_only=True).config
    # The command line gives devices as "4", which Lightning reads as four devices (not GPU 4).
    assert (parsed.trainer.accelerator, int(parsed.trainer.devices)) == ("gpu", 4)
    assert parsed.trainer.num_nodes == 2
    cpu = SlurmOptions(cpus=2)
    assert cpu.trainer_args() == [] and cpu.tasks_per_node == 1
    parsed = CircleBenchCLI(args=args[1 : -len(options.trainer_args())], run=False,
                            parse_only=True).config  # fmt: skip
    assert (parsed.trainer.accelerator, parsed.trainer.devices) == ("cpu", 1)  # one task's


def submitted_script(
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    options: SlurmOptions,
    count: int,
    threads: int | None,
) -> list[str]:
    """The lines of the script that `submit_array` hands to `sbatch`, caught by a fake `sbatch`
    (and `srun`, which submitit looks for) first on PATH."""
    bin_dir, kept = root / "bin", root / "submitted.sh"
    bin_dir.mkdir(parents=True)
    (bin_dir / "sbatch").write_text(
        f'#!/bin/sh\ncp "$1" {shlex.quote(str(kept))}\necho "Submitted batch job 4242"\n'
    )
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
    for tool in ("sbatch", "srun"):
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    tasks = [CallTask(int, root / f"task{i}.log", threads) for i in range(count)]
    assert submit_array(tasks, root / "slurm", options, threads) == [
        f"4242_{i}" for i in range(count)
    ]
    return kept.read_text().splitlines()


def load_suite_cell(root: Path, config: Path):
    """The cell of `config` (copied into `root`) in a suite of one group, one seed."""
    (root / "experiments/suites").mkdir(parents=True)
    shutil.copy(config, root / "experiments")
    (root / "experiments/suites/g.yaml").write_text(
        f"groups:\n  g: {{configs: [experiments/{config.name}]}}\n"
    )
    return load_suite("g", root).cells()[0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nodes": 2}, r"a task on 2 nodes trains with DDP.*give it GPUs \(--gpus-per-cell\)"),
        ({"gpus": -1}, r"Slurm gpus must be at least 0, got -1"),
        ({"cpus": 0}, r"Slurm cpus must be at least 1, got 0"),
        ({"max_parallel": 0}, r"Slurm max_parallel must be at least 1, got 0"),
    ],
)
def test_slurm_options_refuse_what_cannot_run(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SlurmOptions(**kwargs)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--launcher", "slurm", "--jobs", "2"], "with --launcher slurm use --max-parallel"),
        (["--status"], "--status shows a Slurm run's jobs: add --launcher slurm"),
        (["--launcher", "slurm", "--slurm-option=--account=x"], "expected KEY=VALUE"),
        (["--launcher", "slurm", "--slurm-option", "mem="], "expected KEY=VALUE"),
        (["--launcher", "slurm", "--nodes-per-cell", "2"], "give it GPUs"),
        (["--launcher", "slurm", "--cpus-per-cell", "0"], "Slurm cpus must be at least 1, got 0"),
    ],
)
def test_launcher_options_that_do_not_fit_are_usage_errors(
    project: Path,  # noqa: F811
    flags: list[str],
    message: str,
    capsys: pytest.CaptureFixture,
) -> None:
    with pytest.raises(SystemExit):
        leaderboard.main(["--suite", "t", *flags])
    assert message in capsys.readouterr().err


SACCT = """JobID|State|NodeList|ExitCode|Elapsed
7_0|COMPLETED|n1|0:0|1-02:03:04
7_0.batch|COMPLETED|n1|0:0|1-02:03:04
7_1|CANCELLED by 0|n2|0:15|00:51
7_2|TIMEOUT|n1|0:15|04:00:09
7_3|NODE_FAIL|n3|0:0|00:00:00
7_[4-6%2]|PENDING|None assigned|0:0|00:00:00
"""


def test_job_states_read_sacct_then_squeue(monkeypatch: pytest.MonkeyPatch) -> None:
    commands = []

    def slurm_commands(command, **kwargs):
        commands.append(command)
        if command[0] == "squeue":  # 8_0 just submitted: only the queue knows it yet
            return subprocess.CompletedProcess(command, 0, "8_0|PENDING|\n", "")
        return subprocess.CompletedProcess(command, 0, SACCT, "")

    monkeypatch.setattr(slurm.subprocess, "run", slurm_commands)
    assert job_states(["7_5"])["7_5"].active  # pending in accounting
    assert len(commands) == 1 and commands[0][-1] == "--jobs=7"  # one call, one array
    states = job_states(["7_1", "7_2", "7_3", "7_5", "7_0"])
    assert commands[-1][0] == "squeue"  # ended ones are asked of the queue too
    assert states["7_1"].describe() == "CANCELLED (job 7_1 on n2, exit 0:15)"
    assert states["7_2"].describe() == "TIMEOUT (job 7_2 on n1, exit 0:15)"
    assert states["7_3"].state == "NODE_FAIL" and not states["7_3"].active
    assert states["7_5"].active and states["7_5"].describe() == "PENDING (job 7_5, exit 0:0)"
    assert not states["7_0"].active and list(states)[-2:] == ["7_5", "7_0"]
    assert states["7_0"].elapsed_s == 86400 + 2 * 3600 + 3 * 60 + 4
    assert (states["7_1"].elapsed_s, states["7_2"].elapsed_s) == (51, 4 * 3600 + 9)
    assert job_states([]) == {}
    states = job_states(["8_0", "7_9"])
    assert commands[-1][:3] == ["squeue", "--noheader", "--format=%i|%T|%N"]
    assert states["8_0"].active and states["7_9"] == JobState("7_9", "UNKNOWN")

    def missing(command, **kwargs):
        raise FileNotFoundError(command[0])

    monkeypatch.setattr(slurm.subprocess, "run", missing)
    with pytest.raises(SystemExit, match=r"sacct not found: .* run it on a machine of the cluster"):
        job_states(["7_1"])

    def disabled(command, **kwargs):
        raise subprocess.CalledProcessError(1, command, "", "Slurm accounting storage is disabled")

    monkeypatch.setattr(slurm.subprocess, "run", disabled)
    with pytest.raises(SystemExit, match=r"accounting storage is disabled\): .*slurmdbd"):
        job_states(["7_1"])


def test_a_job_accounting_reports_ended_but_the_queue_requeued_is_active(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """slurmdbd learns of a requeue after the attempt's end: sacct says FAILED while squeue
    already holds the task pending again; the queue wins, and a task it reports ended keeps
    accounting's details."""

    def slurm_commands(command, **kwargs):
        if command[0] == "squeue":
            return subprocess.CompletedProcess(command, 0, "7_1|PENDING|\n7_2|COMPLETED|n1\n", "")
        table = "JobID|State|NodeList|ExitCode|Elapsed\n"
        table += "7_1|FAILED|n1|1:0|00:00:09\n7_2|FAILED|n1|1:0|00:00:08\n"
        return subprocess.CompletedProcess(command, 0, table, "")

    monkeypatch.setattr(slurm.subprocess, "run", slurm_commands)
    states = job_states(["7_1", "7_2"])
    assert states["7_1"].active and states["7_1"].state == "PENDING"
    assert states["7_2"].describe() == "FAILED (job 7_2 on n1, exit 1:0)"


def fake_clock(clock: list[float]) -> SimpleNamespace:
    """A `time` for the launcher's modules alone: `sleep` advances `clock[0]`, which
    `monotonic` reads. Patching the `time` module itself would let any other thread of the
    test process (a leftover from an earlier test) move the clock."""
    return SimpleNamespace(
        monotonic=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s)
    )


def test_a_job_slurm_briefly_forgets_is_waited_for_not_taken_as_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A requeued array task can be missing from sacct and squeue for a moment: a wait takes
    an UNKNOWN job as ended only once it has stayed unknown for the grace period."""
    clock = [100.0]
    answers = iter(["UNKNOWN", "UNKNOWN", "RUNNING", "UNKNOWN", "UNKNOWN", "UNKNOWN"])

    def states(job_ids):
        return {job_id: JobState(job_id, next(answers)) for job_id in job_ids}

    monkeypatch.setattr(slurm, "time", fake_clock(clock))
    assert slurm.UNKNOWN_GRACE_S == 60.0
    watch = slurm.JobWatch(states)
    assert watch.states(["7_1"]) == {}  # unknown since 100 s
    clock[0] = 150.0
    assert watch.states(["7_1"]) == {}
    assert watch.states(["7_1"])["7_1"].active  # seen again: the grace starts over
    clock[0] = 200.0
    assert watch.states(["7_1"]) == {}
    clock[0] = 259.0
    assert watch.states(["7_1"]) == {}
    clock[0] = 260.0
    assert watch.states(["7_1"]) == {"7_1": JobState("7_1", "UNKNOWN")}


def test_wait_for_jobs_waits_out_an_unknown_job(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    answers = iter(["UNKNOWN", "UNKNOWN", "COMPLETED"])
    monkeypatch.setattr(
        slurm, "job_states", lambda ids: {i: JobState(i, next(answers)) for i in ids}
    )
    monkeypatch.setattr(slurm, "time", fake_clock(clock))
    assert slurm.wait_for_jobs(["7_1"], poll_s=10.0) == {"7_1": JobState("7_1", "COMPLETED")}


def test_a_cell_that_looks_failed_while_requeued_is_waited_for(
    project: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture,
) -> None:
    """Accounting calls a requeued attempt FAILED (and the queue misses the job) for a moment:
    a cell without its row is reported failed only once its job has stayed ended for
    `SETTLE_S`, so the requeued attempt runs to its row; a job that stays ended is failed."""
    clock = [0.0]
    monkeypatch.setattr(slurm, "time", fake_clock(clock))
    monkeypatch.setattr(slurm_cells, "time", fake_clock(clock))
    fates = {  # per poll, 5 s apart: one requeued cell, one that failed for good (0 s: all run)
        "syn/circle/seed0": ["RUNNING", "FAILED", "FAILED", "PENDING", "RUNNING", "COMPLETED"],
        "syn/circle/seed1": ["RUNNING", "FAILED"],
    }
    tasks_of: dict[str, CellTask] = {}
    write = fake_fit([])

    def submit_array(tasks, folder, options, threads):
        jobs = [f"1_{i}" for i in range(len(tasks))]
        tasks_of.update(zip(jobs, tasks, strict=True))
        return jobs

    def states(jobs):
        out = {}
        for job in jobs:
            task = tasks_of[job]
            fate = fates.get(task.function.cell_id, ["COMPLETED"])
            state = fate.pop(0) if len(fate) > 1 else fate[0]
            if state == "COMPLETED":
                write(task.function.args, task.log, task.threads)
            out[job] = JobState(job, state)
        return out

    monkeypatch.setattr(slurm_cells, "submit_array", submit_array)
    monkeypatch.setattr(slurm_cells, "job_states", states)
    monkeypatch.setattr(slurm_cells, "POLL_S", 5.0)
    monkeypatch.setattr(slurm, "SETTLE_S", 15.0)
    with pytest.raises(SystemExit, match="1 cell") as failed:
        leaderboard.main(["--suite", "t", "--no-wandb", "--launcher", "slurm"])
    assert "syn/circle/seed1: FAILED (job 1_1" in str(failed.value)
    assert "done syn/circle/seed0" in capfd.readouterr().out
    # seed1 was first seen ended at 5 s and reported at 20 s; seed0's row came at 25 s
    assert clock[0] == 25.0
    assert len(read_results(project / "results/suites/t/rows.csv")) == 3


def test_time_limit_and_node_failure_are_reported_and_only_those_cells_rerun(
    project: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture,
) -> None:
    """Slurm stands in: submitted cells run at once (`fake_fit`) unless they are to fail, and
    sacct says what the cluster would."""
    fate = {"syn/triplet/seed0": "TIMEOUT", "syn/triplet/seed1": "NODE_FAIL"}  # by cell
    submitted: list[list[str]] = []
    ends: dict[str, str] = {}  # by job
    write = fake_fit([])

    def submit_array(tasks, folder, options, threads):
        assert threads is None and options.cpus == 8  # the suite does not pin threads
        submitted.append([task.function.cell_id for task in tasks])
        jobs = [f"{len(submitted)}_{i}" for i in range(len(tasks))]
        for job, task in zip(jobs, tasks, strict=True):
            ends[job] = fate.get(task.function.cell_id, "COMPLETED")
            if ends[job] == "COMPLETED":
                write(task.function.args, task.log, task.threads)
        return jobs

    def states(jobs):
        return {j: JobState(j, ends[j], "n1", "0:15") for j in jobs}

    monkeypatch.setattr(slurm_cells, "submit_array", submit_array)
    monkeypatch.setattr(slurm_cells, "job_states", states)
    monkeypatch.setattr(slurm_cells, "POLL_S", 0.0)
    monkeypatch.setattr(slurm, "SETTLE_S", 0.0)
    with pytest.raises(SystemExit, match="2 cell") as failed:
        leaderboard.main(["--suite", "t", "--no-wandb", "--launcher", "slurm"])
    log = "results/suites/t/logs/syn__triplet__seed0.log"
    assert f"syn/triplet/seed0: TIMEOUT (job 1_2 on n1, exit 0:15); log: {log}" in str(failed.value)
    assert "syn/triplet/seed1: NODE_FAIL (job 1_3 on n1" in str(failed.value)
    assert "FAIL syn/triplet/seed0: TIMEOUT" in capfd.readouterr().out
    fate.clear()
    leaderboard.main(["--suite", "t", "--no-wandb", "--launcher", "slurm"])
    assert submitted[1] == ["syn/triplet/seed0", "syn/triplet/seed1"]
    out = capfd.readouterr().out
    assert "again syn/triplet/seed0: last job TIMEOUT (job 1_2" in out
    assert "2 run, 2 already done, 0 failed" in out
    assert len(read_results(project / "results/suites/t/rows.csv")) == 4


def test_a_pending_job_of_a_changed_cell_is_cancelled_and_the_cell_submitted_again(
    project: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ledger = {"syn/circle/seed0": slurm_cells.Submitted("5_0", "an old recipe")}
    slurm_cells._write_ledger(project / "results/suites/t", ledger)
    cancelled, write = [], fake_fit([])

    def submit_array(tasks, folder, options, threads):
        for task in tasks:
            write(task.function.args, task.log, task.threads)
        return [f"6_{i}" for i in range(len(tasks))]

    def states(jobs):
        return {j: JobState(j, "PENDING" if j == "5_0" else "COMPLETED") for j in jobs}

    monkeypatch.setattr(slurm_cells, "submit_array", submit_array)
    monkeypatch.setattr(slurm_cells, "job_states", states)
    monkeypatch.setattr(slurm_cells, "cancel", cancelled.extend)
    leaderboard.main(["--suite", "t", "--no-wandb", "--launcher", "slurm"])
    assert cancelled == ["5_0"]
    assert slurm_cells.read_ledger(project / "results/suites/t")["syn/circle/seed0"].job == "6_0"


def run_folder(root: Path, version: str, cell_id: str, recipe: str, *, last: bool = True) -> Path:
    run = root / "synthetic" / "CircleLoss" / version
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"cell_id": cell_id, "cell_recipe": recipe}))
    if last:
        (run / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    return run


def test_a_restarted_cell_resumes_its_own_run_and_a_cell_with_a_row_does_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tmp_path / "runs"
    mine = run_folder(runs, "1", "g/circle/seed0", "r1")
    run_folder(runs, "2", "g/circle/seed1", "r1")  # another cell
    run_folder(runs, "3", "g/circle/seed0", "r0")  # this cell's older recipe
    run_folder(runs, "4", "g/circle/seed0", "r1", last=False)  # killed in its first epoch
    assert resumable_run(runs, "g/circle/seed0", "r1") == mine
    assert resumable_run(runs, "g/circle/seed2", "r1") is None
    calls: list[list[str]] = []
    monkeypatch.setattr("benchmark.training.cli.main", calls.append)
    rows = tmp_path / "rows.csv"
    work = CellWork(["fit", "--a=1"], rows, "g/circle/seed0")
    task = CellTask(work, tmp_path / "c.log", None, recipe="r1", run_root=runs)
    task.run(restarts=0)
    task.run(restarts=1)
    assert calls == [["fit", "--a=1"], ["fit", "--a=1", f"--ckpt_path={mine}"]]
    rows.write_text("cell_id,cell_recipe\ng/circle/seed0,r1\n")
    task.run(restarts=1)  # restarted after its row was written
    assert len(calls) == 2


def test_a_task_logs_each_attempt_with_its_threads_and_keeps_lightning_off_usr1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import torch

    seen = []
    log = tmp_path / "logs" / "w.log"
    work = lambda: seen.append((torch.get_num_threads(), print("working"))) or "done"  # noqa: E731
    task = CallTask(work, log, 1)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # the task sets them: restored after
        monkeypatch.setenv(name, os.environ.get(name, "1"))
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "9")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    threads, usr1 = torch.get_num_threads(), signal.getsignal(signal.SIGUSR1)
    try:
        with capsys.disabled():  # print() reaches file descriptor 1, as in a job
            result = task()
            assert signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN
            monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
            task()
            monkeypatch.setenv("SLURM_PROCID", "1")
            task()
    finally:
        torch.set_num_threads(threads)
        signal.signal(signal.SIGUSR1, usr1)
    lines = log.read_text().splitlines()
    assert lines[0].startswith("[circlebench] Slurm job 9_2, rank 0, on ")
    assert "attempt 1" in lines[0]
    assert lines[1] == "working" and "attempt 2" in lines[2] and lines[3] == "working"
    assert "rank 1" in (tmp_path / "logs" / "w.rank1.log").read_text()
    assert [s[0] for s in seen] == [1, 1, 1] and result == "done"  # what the work returned


def test_run_folders_of_slurm_jobs_carry_the_job_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two cells starting in the same second on two nodes may have the same process id."""
    from benchmark.training.loggers import run_version

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert run_version().endswith(f"-{os.getpid()}")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    assert run_version().endswith(f"-{os.getpid()}-j4242")
