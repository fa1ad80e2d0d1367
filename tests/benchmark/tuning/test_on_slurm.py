"""`circlebench tune --launcher slurm` without a cluster: what is submitted, and a study that
its workers left short of its budget (on the real test Slurm: leaderboard/test_slurm.py)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from benchmark.launch.slurm import JobState
from benchmark.tuning import on_slurm
from benchmark.tuning.command import main
from benchmark.tuning.study import open_storage
from tests.benchmark.tuning.test_command import tune_args


def test_failed_workers_are_reported_and_their_study_gets_no_tuned_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    submitted = []

    def submit_array(tasks, folder, options, threads):
        submitted.append((tasks, options))
        return [f"7_{i}" for i in range(len(tasks))]

    def wait_for_jobs(jobs, poll_s):
        return {
            job: JobState(job, "TIMEOUT" if job == "7_1" else "COMPLETED", "n1") for job in jobs
        }

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(on_slurm, "submit_array", submit_array)
    monkeypatch.setattr(on_slurm, "wait_for_jobs", wait_for_jobs)
    args = tune_args(tmp_path, "triplet", "--trials", "3", "--workers", "2", "--threads", "2")
    with pytest.raises(SystemExit, match=r"triplet: 0 of 3 trials finished \(worker TIMEOUT"):
        main([*args, "--output", str(tmp_path), "--no-wandb", "--launcher", "slurm",
              "--time", "30", "--slurm-option", "qos=low"])  # fmt: skip
    tasks, options = submitted[0]
    logs = [Path(f"results/tuning/triplet/workers/{i}.log") for i in range(2)]
    assert [task.log for task in tasks] == logs
    assert [task.function.args[2] for task in tasks] == [0, 1]  # each worker's sampler seed
    assert (options.cpus, options.time_min, options.tasks_per_node) == (2, 30, 1)
    assert options.extra == {"qos": "low"}
    out = capfd.readouterr().out
    log = "results/tuning/triplet/workers/1.log"
    assert f"FAIL triplet: worker TIMEOUT (job 7_1 on n1); log: {log}" in out
    study = optuna.load_study(
        study_name="triplet", storage=open_storage(str(tmp_path / "study.journal"))
    )
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.WAITING]  # the default
    assert not (tmp_path / "triplet.yaml").exists()
