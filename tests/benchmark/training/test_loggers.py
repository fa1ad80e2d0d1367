"""W&B never blocks a run: offline without an account, offline (one line) when unreachable."""

from __future__ import annotations

import os
import socket
import warnings
from pathlib import Path

import pytest
from pytorch_lightning.loggers import WandbLogger

from benchmark.training.loggers import RunLabels, build_loggers, wandb_server_reachable

LABELS = RunLabels(
    dataset="synthetic", loss="circle_class", loss_class="CircleLoss", paradigm="class-level",
    track="end-to-end", seed=2, suite="ci", cell_id="syn/circle_class/seed2", git_sha="abc",
    job_type="train",
)  # fmt: skip


@pytest.fixture
def wandb_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_SILENT"):
        monkeypatch.setenv(name, "")  # recorded, so the teardown restores the original
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc login
    return monkeypatch


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_credentials_without_a_reachable_server_log_offline_with_one_line(
    wandb_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wandb_env.setenv("WANDB_API_KEY", "x" * 40)
    wandb_env.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{closed_port()}")
    assert not wandb_server_reachable()
    loggers = build_loggers(tmp_path, LABELS, wandb=True, version="v")
    assert os.environ["WANDB_MODE"] == "offline" and len(loggers) == 2
    assert "server cannot be reached; logging offline" in capsys.readouterr().err


def test_a_reachable_server_keeps_the_users_mode(
    wandb_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        wandb_env.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert wandb_server_reachable()


def test_no_account_logs_offline_silently(
    wandb_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build_loggers(tmp_path, LABELS, wandb=True, version="v")
    assert os.environ["WANDB_MODE"] == "offline" and capsys.readouterr().err == ""


def test_labels_name_group_and_configure_the_wandb_run(
    wandb_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    csv_logger, wandb_logger = build_loggers(tmp_path, LABELS, wandb=True, version="v")
    assert Path(csv_logger.log_dir) == tmp_path / "synthetic" / "CircleLoss" / "v"
    init = wandb_logger._wandb_init  # what wandb.init will get; no run is started here
    assert (init["project"], init["group"]) == ("circlebench-synthetic", "synthetic/circle_class")
    assert (init["name"], init["job_type"]) == ("synthetic/circle_class/seed2", "train")
    assert init["config"]["circlebench"] == {
        "dataset": "synthetic", "loss": "circle_class", "loss_class": "CircleLoss",
        "paradigm": "class-level", "track": "end-to-end", "seed": 2, "suite": "ci",
        "cell_id": "syn/circle_class/seed2", "git_sha": "abc",
    }  # fmt: skip


def test_a_new_run_folder_logs_without_warnings_an_earlier_one_warns(
    wandb_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """W&B's files land in the run folder before the first CSV metrics: no warning about
    earlier logs for them; a folder that already held files before the run still gets
    Lightning's warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        csv_logger, wandb_logger = build_loggers(tmp_path, LABELS, wandb=True, version="new")
        (Path(csv_logger.log_dir) / "wandb").mkdir()
        csv_logger.log_metrics({"train/loss": 1.0}, step=0)
        csv_logger.save()
    assert isinstance(wandb_logger, WandbLogger)
    earlier = tmp_path / "synthetic" / "CircleLoss" / "old"
    earlier.mkdir(parents=True)
    (earlier / "metrics.csv").write_text("step\n0\n")
    with pytest.warns(UserWarning, match="exists and is not empty"):
        build_loggers(tmp_path, LABELS, wandb=True, version="old")
