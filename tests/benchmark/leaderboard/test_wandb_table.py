"""The leaderboard's W&B table: an offline run, logged in this process or in a forked child."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from benchmark.launch import fork_server
from benchmark.launch.forked import Call, run_forked
from benchmark.leaderboard.command import log_wandb_table
from tests.benchmark.leaderboard.wandb_records import read_offline_run

BOARD = pd.DataFrame({"group": ["g", "g"], "loss": ["CircleLoss", "none"], "R@1": [40.5, None]})


@pytest.mark.parametrize(
    "forked",
    [
        pytest.param(True, marks=pytest.mark.skipif(not fork_server.fork_available(), reason="")),
        False,
    ],
    ids=["forked", "in-process"],
)
def test_the_table_is_an_offline_run_of_its_own(
    forked: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    if forked:  # after a cell: each forked child runs W&B's exit, which removes its media folder
        assert run_forked(Call(print, ("a cell",)), tmp_path / "cell.log", 1) == 0
    console = Console(record=True)
    log_wandb_table(BOARD, "t", tmp_path, console, forked=forked)
    assert "not logged" not in console.export_text()
    if not forked:  # `finish` only informs this process's W&B service, which closes the run's
        import wandb  # file later; teardown waits for the service to exit (and frees it now)

        wandb.teardown()
    (path,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    run = read_offline_run(path)
    assert (run.project, run.name, run.job_type) == (
        "circlebench-leaderboard", "leaderboard-t", "leaderboard"
    )  # fmt: skip
    assert {"leaderboard/_type", "leaderboard/nrows"} <= run.history


def test_a_failing_forked_logger_is_reported_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not fork_server.fork_available():
        pytest.skip("no fork server here")
    monkeypatch.setenv("WANDB_MODE", "offline")
    (tmp_path / "wandb").write_text("a file where W&B's folder goes")
    console = Console(record=True, width=400)
    log_wandb_table(BOARD, "t", tmp_path, console, forked=True)
    log = tmp_path / "wandb-table.log"
    assert f"W&B: leaderboard table not logged (exit status 1; see {log})" in console.export_text()
    assert "Error" in log.read_text()
