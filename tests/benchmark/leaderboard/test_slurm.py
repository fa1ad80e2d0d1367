"""The Slurm launcher against a real one-node Slurm (`conftest.slurm`): a suite's rows equal the
local launcher's, a requeued cell resumes from its last checkpoint, a rerun submits nothing,
`--check` reruns on Slurm, a cancelled cell is reported and alone resubmitted, jobs outlive a
killed leaderboard and the next run picks them up, two `tune` workers share one journal."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pandas as pd
import pytest

from benchmark.launch.slurm import SlurmOptions, job_states, submit_array
from benchmark.launch.slurm_tasks import CallTask
from benchmark.leaderboard import command as leaderboard
from benchmark.leaderboard import slurm_cells
from benchmark.leaderboard.slurm_cells import read_ledger
from benchmark.training.rows import read_results
from benchmark.tuning import on_slurm
from benchmark.tuning.command import main as tune
from benchmark.tuning.study import open_storage
from tests.benchmark.leaderboard.slurm_cluster import SlurmCluster
from tests.benchmark.tuning.test_command import tiny_frozen, tune_args, weights  # noqa: F401

REPO = Path(__file__).resolve().parents[3]
FINE = REPO / "experiments" / "synthetic" / "fine_grained"
TINY = [  # a cell of a few seconds: tests/benchmark/training/test_checkpoints.py's tiny model
    "--model.embedder.init_args.backbone=test_efficientnet",
    "--model.embedder.init_args.pretrained=false",
    "--model.embedder.init_args.head=linear",
    "--data.init_args.image_size=32",
    "--data.init_args.images_per_class=4",
    "--data.init_args.eval_batch_size=64",
    "--data.init_args.batches_per_epoch=2",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--wandb=false",
]
JOBS = "tests.benchmark.leaderboard.slurm_jobs"
# Real cells on a busy 2-core machine: the module's suites take minutes, not the default 300 s.
pytestmark = [pytest.mark.slurm, pytest.mark.timeout(1800)]
# Columns that say where, when and how a row was made, not what it measured: `auto` picks the
# evaluator's arithmetic by timing it on the data, and every arithmetic ranks exactly.
WHERE = ["wall_time_s", "run_dir", "checkpoint", "eval_backend"]


def callback(name: str, **init_args: object) -> str:
    spec = [{"class_path": f"{JOBS}.{name}", "init_args": init_args}]
    return f"--trainer.callbacks={json.dumps(spec)}"


def write_suite(project: Path, name: str, groups: str, epochs: int) -> None:
    """A suite of one seed, one thread per cell, the tiny model, over `groups` (YAML)."""
    (project / "experiments/syn").mkdir(parents=True, exist_ok=True)
    (project / "experiments/suites").mkdir(exist_ok=True)
    for config in ("circle_class", "triplet"):
        shutil.copy(FINE / f"{config}.yaml", project / "experiments/syn")
    overrides = json.dumps([*TINY, f"--trainer.max_epochs={epochs}"])
    text = f"seeds: [0]\nthreads: 1\noverrides: {overrides}\ngroups:\n{groups}"
    (project / f"experiments/suites/{name}.yaml").write_text(text)


@pytest.fixture(scope="module")
def runs(slurm: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Suite `t` (a floor and a fit of two epochs whose first Slurm attempt is signalled, as
    before a time limit, in its second epoch) run by the local launcher into `local/` and by
    the Slurm launcher into `slurm/`; yields the project folder, the current directory."""
    project = tmp_path_factory.mktemp("project")
    signalled = callback("SignalOnce", epoch=1)
    write_suite(project, "t", "  syn:\n    configs: [experiments/syn/circle_class.yaml]\n"
                "    floor: experiments/syn/circle_class.yaml\n"
                f"    config_overrides: {{circle_class: ['{signalled}']}}\n", epochs=2)  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(project)
        patch.setattr(slurm_cells, "POLL_S", 1.0)
        leaderboard.main(["--suite", "t", "--no-wandb", "--results-dir", "local"])
        leaderboard.main(["--suite", "t", "--no-wandb", "--results-dir", "slurm", "--launcher",
                          "slurm", "--time", "10"])  # fmt: skip
        yield project


def test_a_suite_on_slurm_writes_the_rows_of_the_local_launcher(runs: Path) -> None:
    local = read_results(runs / "local/suites/t/rows.csv").set_index("cell_id").sort_index()
    on_slurm = read_results(runs / "slurm/suites/t/rows.csv").set_index("cell_id").sort_index()
    assert list(on_slurm.index) == ["syn/circle_class/seed0", "syn/floor/seed0"]
    pd.testing.assert_frame_equal(on_slurm.drop(columns=WHERE), local.drop(columns=WHERE))
    assert on_slurm["run_dir"].str.startswith("slurm/suites/t/runs/").all()
    boards = [
        pd.read_csv(runs / f"{where}/suites/t/leaderboard.csv") for where in ("local", "slurm")
    ]
    metrics = [c for c in boards[0].columns if c.startswith(("R@", "mAP"))]
    pd.testing.assert_frame_equal(boards[1][metrics], boards[0][metrics])


def test_a_requeued_cell_resumes_from_its_last_checkpoint(runs: Path, slurm: SlurmCluster) -> None:
    """Signalled in epoch 2 of 2, the cell was requeued by submitit, restarted from the end of
    epoch 1 (`last.ckpt`) and ended with the weights of the local, uninterrupted run (above)."""
    log = (runs / "slurm/suites/t/logs/syn__circle_class__seed0.log").read_text()
    assert "Caught signal SIGUSR2" in log and "Requeued job" in log
    assert "attempt 2" in log and "restarted: resuming slurm/suites/t/runs/" in log
    assert "Restored all states from the checkpoint" in log
    job = read_ledger(runs / "slurm/suites/t")["syn/circle_class/seed0"].job
    history = slurm.command("sacct", "--duplicates", "--noheader", "--parsable2",
                            "--format=JobID,State", f"--jobs={job}")  # fmt: skip
    assert [line for line in history.split() if "." not in line] == [
        f"{job}|REQUEUED", f"{job}|COMPLETED"
    ]  # fmt: skip
    row = read_results(runs / "slurm/suites/t/rows.csv").set_index("cell_id")
    assert row.loc["syn/circle_class/seed0", "global_step"] == "4"  # 2 epochs of 2 steps


def test_a_rerun_submits_nothing_and_status_shows_every_cell_done(
    runs: Path, capfd: pytest.CaptureFixture
) -> None:
    ledger = read_ledger(runs / "slurm/suites/t")
    common = ["--suite", "t", "--no-wandb", "--results-dir", "slurm", "--launcher", "slurm"]
    leaderboard.main(common)
    assert read_ledger(runs / "slurm/suites/t") == ledger
    assert "0 run, 2 already done, 0 failed" in capfd.readouterr().out
    leaderboard.main([*common, "--status"])
    assert capfd.readouterr().out.strip().endswith("2 done")


def test_check_reruns_the_suite_on_slurm(runs: Path, capfd: pytest.CaptureFixture) -> None:
    leaderboard.main(["--suite", "t", "--check", "--results-dir", "slurm", "--launcher", "slurm"])
    out = capfd.readouterr().out
    assert "submitted 2 cell(s) as Slurm job array" in out and "FAIL" not in out
    assert not list((runs / "slurm").glob("circlebench-check-*"))  # removed once passed


def leaderboard_process(project: Path, out: Path, *args: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "benchmark.cli", "leaderboard", "--suite", "f"]
    command += ["--no-wandb", "--launcher", "slurm", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(command, cwd=project, env=env, stdout=out.open("w"), stderr=-2)


def wait_until(condition, what: str, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.5)


def test_cancelled_cell_and_killed_leaderboard(
    slurm: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd
) -> None:
    """Two cells held at the start of training until a file exists. One is cancelled: the
    waiting leaderboard reports it with its Slurm state and log. The leaderboard is killed: the
    other job goes on. The next leaderboard waits for that job instead of submitting it again,
    resubmits only the cancelled cell, and every cell ends with one row."""
    flag = tmp_path / "go"
    held = callback("WaitForFile", path=str(flag))
    write_suite(tmp_path, "f", f"  syn:\n    configs: experiments/syn/*.yaml\n"
                f"    overrides: ['{held}']\n", epochs=1)  # fmt: skip
    monkeypatch.chdir(tmp_path)
    work = tmp_path / "results/suites/f"
    first = leaderboard_process(tmp_path, tmp_path / "first.out")
    cells = ["syn/circle_class/seed0", "syn/triplet/seed0"]
    wait_until(lambda: len(read_ledger(work)) == 2, "the array's submission")
    jobs = {cell: entry.job for cell, entry in read_ledger(work).items()}
    running = lambda: all(s.state == "RUNNING" for s in job_states(jobs.values()).values())  # noqa: E731
    wait_until(running, "both cells to run")
    slurm.command("scancel", jobs[cells[0]])
    report = f"FAIL {cells[0]}: CANCELLED (job {jobs[cells[0]]} on {slurm.node}"
    wait_until(lambda: report in (tmp_path / "first.out").read_text(), "the failure report")
    log = "results/suites/f/logs/syn__circle_class__seed0.log"
    assert f"; log: {log}" in (tmp_path / "first.out").read_text()
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert job_states([jobs[cells[1]]])[jobs[cells[1]]].state == "RUNNING"  # it goes on
    capfd.readouterr()
    leaderboard.main(["--suite", "f", "--launcher", "slurm", "--status"])
    status = capfd.readouterr().out
    assert f"CANCELLED  {cells[0]}  CANCELLED (job {jobs[cells[0]]}" in status
    assert f"; log: {log}" in status
    assert f"RUNNING    {cells[1]}  RUNNING (job {jobs[cells[1]]}" in status
    second = leaderboard_process(tmp_path, tmp_path / "second.out")
    wait_until(
        lambda: "submitted 1 cell(s)" in (tmp_path / "second.out").read_text(), "resubmission"
    )
    flag.touch()
    assert second.wait(timeout=600) == 0, (tmp_path / "second.out").read_text()
    out = (tmp_path / "second.out").read_text()
    assert f"waiting {cells[1]}: RUNNING (job {jobs[cells[1]]}" in out
    assert f"again {cells[0]}: last job CANCELLED" in out
    ledger = read_ledger(work)
    assert ledger[cells[1]].job == jobs[cells[1]] and ledger[cells[0]].job != jobs[cells[0]]
    assert sorted(read_results(work / "rows.csv")["cell_id"]) == cells  # one row each


def test_two_tuning_workers_share_one_journal(
    slurm: SlurmCluster,
    tmp_path: Path,
    weights: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture,
) -> None:
    """`tune --launcher slurm --workers 2`: two array tasks on one journal run the budget's
    trials, each once, and the submitting process writes the tuned files."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(on_slurm, "POLL_S", 1.0)
    budget = ["--trials", "3", "--folds", "2", "--epochs", "1", "--workers", "2"]
    slurm_args = ["--no-wandb", "--launcher", "slurm", "--time", "10"]
    tune([*tune_args(tmp_path, "triplet", *budget), "--output", str(tmp_path), *slurm_args,
          "--", *tiny_frozen(weights, tmp_path / "c")])  # fmt: skip
    out = capfd.readouterr().out
    assert "submitted 2 tuning worker(s) as Slurm job array" in out and "FAIL" not in out
    storage = open_storage(str(tmp_path / "study.journal"))
    study = optuna.load_study(study_name="triplet", storage=storage)
    trials = study.get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 3  # not one more
    assert len({json.dumps(t.params, sort_keys=True) for t in trials}) == 3
    work = tmp_path / "results/tuning/triplet"
    assert sorted(p.name for p in work.glob("trial*")) == [f"trial{i:04d}" for i in range(3)]
    for trial in work.glob("trial*"):  # each trial's folds ran once, by one worker
        assert sorted(p.name for p in trial.glob("fold*.log")) == ["fold0.log", "fold1.log"]
    for i in range(2):
        assert "budget of 3 trials spent" in (work / f"workers/{i}.log").read_text()
    assert json.loads((tmp_path / "triplet.json").read_text())["trials"]["complete"] == 3
    assert (tmp_path / "triplet.yaml").is_file()


def test_sbatch_refusing_the_array_says_what_to_check(slurm: SlurmCluster, tmp_path: Path) -> None:
    options = SlurmOptions(partition="no_such_partition")
    with pytest.raises(SystemExit, match=r"sbatch refused the job array: .*partition"):
        submit_array([CallTask(print, tmp_path / "log", None)], tmp_path / "slurm", options, None)
