"""`circlebench fit|test` end to end on tiny synthetic data: every loss, rows, resume, W&B."""

from __future__ import annotations

import csv
import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import benchmark.leaderboard.command
from benchmark.cli import forks_runs_here, main
from benchmark.launch import fork_server

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
FINE = sorted((EXPERIMENTS / "synthetic" / "fine_grained").glob("*.yaml"))
CLASS_LEVEL = {"circle_class", "softmax", "normface", "cosface", "arcface", "center"}
CLASS_LEVEL |= {"copernican", "copernican_l2"}
# The synthetic configs with a backbone, images and data small enough for ~1 s per run.
TINY = [
    "--model.embedder.init_args.backbone=test_efficientnet",
    "--model.embedder.init_args.pretrained=false",
    # the configs' residual head keeps Lite0's 1280 features; the tiny model has 256
    "--model.embedder.init_args.head=linear",
    "--data.init_args.image_size=32",
    "--data.init_args.images_per_class=4",
    "--data.init_args.eval_batch_size=64",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--wandb=false",
]
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def circlebench(tmp: Path, command: str, config: Path, *args: str) -> list[dict[str, str]]:
    """Run `circlebench <command>` in-process; return the rows of its results CSV so far."""
    csv_path = tmp / "runs.csv"
    main(
        [
            command,
            "--config",
            str(config),
            *TINY,
            f"--results_csv={csv_path}",
            f"--trainer.default_root_dir={tmp / 'runs'}",
            *args,
        ]
    )
    with open(csv_path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("config", FINE, ids=lambda p: p.stem)
def test_fast_dev_run_fit_writes_one_row_for_every_loss(tmp_path: Path, config: Path) -> None:
    (row,) = circlebench(tmp_path, "fit", config, "--trainer.fast_dev_run=1", "--cell_id=c")
    assert row["cell_id"] == "c" and row["dataset"] == "synthetic"
    assert row["labels"] == ("class-level" if config.stem in CLASS_LEVEL else "pair-wise")
    assert row["backbone"] == "test_efficientnet" and row["image_size"] == "32x32"
    assert 0.0 <= float(row["R@1"]) <= 100.0 and row["eval_backend"]
    with np.load(Path(row["run_dir"]) / "similarities.npz") as sims:
        assert sims["sp"].shape == sims["sn"].shape and sims["sp"].size > 0


@pytest.mark.parametrize("name", ["circle_class", "triplet"])
def test_reid_mode_evaluates_query_against_gallery(tmp_path: Path, name: str) -> None:
    config = EXPERIMENTS / "synthetic" / "reid" / f"{name}.yaml"
    (row,) = circlebench(
        tmp_path, "fit", config, "--trainer.fast_dev_run=1", "--data.init_args.images_per_class=8"
    )  # 4 cameras: 4 images per id would all be queries
    assert (row["dataset"], row["protocol"]) == ("synthetic_reid", "query_gallery")
    assert row["R@5"] != "" and row["mAP"] != ""


def test_re_ranking_and_min_p_chosen_on_the_command_line_reach_the_row(tmp_path: Path) -> None:
    config = EXPERIMENTS / "synthetic" / "reid" / "triplet.yaml"
    (row,) = circlebench(
        tmp_path, "fit", config, "--trainer.fast_dev_run=1", "--data.init_args.images_per_class=8",
        "--model.rerank=k-reciprocal", "--model.eval_metrics=[recall,mAP,mINP]",
    )  # fmt: skip
    assert row["rerank"] == "k-reciprocal k1=20 k2=6 lambda=0.3"
    assert 0.0 <= float(row["mINP"]) <= float(row["mAP"]) <= 100.0 and "MAP@R" not in row


def test_overrides_are_recorded_in_the_row_and_change_the_config_hash(tmp_path: Path) -> None:
    config = EXPERIMENTS / "synthetic" / "fine_grained" / "circle.yaml"
    circlebench(tmp_path, "fit", config, "--trainer.fast_dev_run=1")
    rows = circlebench(
        tmp_path, "fit", config, "--trainer.fast_dev_run=1", "--model.loss.init_args.gamma=64"
    )
    assert json.loads(rows[1]["loss_params"])["gamma"] == 64
    assert rows[0]["config_hash"] != rows[1]["config_hash"]


def test_a_class_count_that_disagrees_with_the_data_is_an_actionable_error(tmp_path) -> None:
    config = EXPERIMENTS / "synthetic" / "fine_grained" / "cosface.yaml"
    with pytest.raises(ValueError, match=r"set --model\.loss\.init_args\.num_classes=30"):
        circlebench(
            tmp_path,
            "fit",
            config,
            "--trainer.fast_dev_run=1",
            "--data.init_args.num_train_classes=30",
        )


def test_resumed_training_and_test_from_checkpoint_reproduce_the_metrics(tmp_path: Path) -> None:
    config = EXPERIMENTS / "synthetic" / "fine_grained" / "circle_class.yaml"
    # base.yaml logs the train/* values every 10 steps; these runs have 2 a epoch
    short = ["--data.init_args.batches_per_epoch=2", "--trainer.log_every_n_steps=1"]
    straight = circlebench(tmp_path / "a", "fit", config, *short, "--trainer.max_epochs=2")[0]
    circlebench(tmp_path / "b", "fit", config, *short, "--trainer.max_epochs=1")
    (first_half,) = (tmp_path / "b" / "runs").rglob("last.ckpt")
    resumed = circlebench(
        tmp_path / "b", "fit", config, *short, "--trainer.max_epochs=2", f"--ckpt_path={first_half}"
    )[-1]
    (final,) = (tmp_path / "a" / "runs").rglob("last.ckpt")
    tested = circlebench(tmp_path / "a", "test", config, *short, f"--ckpt_path={final}")[-1]
    metrics = ("R@1", "R@2", "R@4", "R@8", "mAP", "MAP@R", "R-Precision")
    assert [resumed[m] for m in metrics] == [straight[m] for m in metrics]
    assert [tested[m] for m in metrics] == [straight[m] for m in metrics]
    assert float(straight["R@1"]) > 0.0 and straight["epochs"] == "2"
    metrics_csv = Path(straight["run_dir"]) / "metrics.csv"
    header = metrics_csv.read_text().splitlines()[0].split(",")
    assert {"train/loss", "train/sp_mean", "train/sn_mean", "train/active_fraction"} <= set(header)


def test_a_validation_split_selects_the_checkpoint_the_test_set_evaluates(tmp_path) -> None:
    config = EXPERIMENTS / "synthetic" / "fine_grained" / "circle.yaml"
    (row,) = circlebench(
        tmp_path, "fit", config, "--data.init_args.val_classes=10",
        "--data.init_args.batches_per_epoch=1", "--trainer.max_epochs=2",
    )  # fmt: skip
    run_dir = Path(row["run_dir"])
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    header = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "val/R@1" in header and "test/R@1" in header


def test_wandb_runs_offline_without_an_account(tmp_path, monkeypatch) -> None:
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_SILENT"):
        monkeypatch.setenv(name, "")  # recorded, so the teardown restores the original
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc login
    config = EXPERIMENTS / "synthetic" / "fine_grained" / "triplet.yaml"
    words = ["--wandb=true", "--data.init_args.batches_per_epoch=1", "--trainer.max_epochs=1"]
    (row,) = circlebench(tmp_path, "fit", config, *words)
    assert os.environ["WANDB_MODE"] == "offline"
    assert list((Path(row["run_dir"]) / "wandb").glob("offline-run-*/run-*.wandb"))
    # A second run in the same interpreter (a leaderboard's in-process cells, a notebook) gets a
    # W&B run of its own: the first was closed, not left open for Lightning to log into again.
    import wandb

    assert wandb.run is None
    (_, second) = circlebench(tmp_path, "fit", config, *words, "--seed_everything=1")
    assert list((Path(second["run_dir"]) / "wandb").glob("offline-run-*/run-*.wandb"))
    assert wandb.run is None


def test_dispatcher_sends_leaderboard_arguments_and_rejects_unknown_commands(monkeypatch) -> None:
    seen: list[list[str]] = []
    started: list[bool] = []
    monkeypatch.setattr(benchmark.leaderboard.command, "main", seen.append)
    monkeypatch.setattr(fork_server, "start_fork_server", lambda: started.append(True))
    main(["leaderboard", "--suite", "quick"])
    assert seen == [["--suite", "quick"]]
    assert started == [True]  # before the command's imports: cells fork from it
    main(["leaderboard", "--suite", "quick", "--aggregate-only"])
    assert started == [True]  # runs nothing here
    assert forks_runs_here("tune", ["--suite", "ci", "--workers", "2"])
    assert not forks_runs_here("tune", ["--launcher=slurm"])
    assert not forks_runs_here("leaderboard", ["--suite", "ci", "--isolation", "subprocess"])
    assert not forks_runs_here("data", ["list"])
    with pytest.raises(SystemExit, match="unknown command 'fitt'; choose one of: fit, validate"):
        main(["fitt"])


def test_from_the_shell_and_from_python_the_training_cli_is_handed_the_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The dispatcher hands the training CLI the words after `circlebench` either way; handed
    words, it parses them alone (no warning that sys.argv holds words too: the next test)."""
    import benchmark.training.cli

    seen: list[list[str] | None] = []
    monkeypatch.setattr(benchmark.training.cli, "main", seen.append)
    monkeypatch.setattr(sys, "argv", ["circlebench", "fit", "--config", "x.yaml"])
    main()
    main(["test", "--config", "y.yaml"])
    assert seen == [["fit", "--config", "x.yaml"], ["test", "--config", "y.yaml"]]


def test_a_cell_handed_its_words_does_not_warn_about_sys_argv(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A leaderboard's cells (and tune's folds, and the bench commands, which build the CLI
    themselves) run where sys.argv is another command line: the words handed to the training
    CLI are its whole command line, and sys.argv is left as it was."""
    from benchmark.training.cli import CircleBenchCLI
    from benchmark.training.cli import main as training_main

    argv = ["circlebench", "leaderboard", "--suite", "quick"]
    monkeypatch.setattr(sys, "argv", argv)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(SystemExit, match="0"):
            training_main(["fit", "--help"])
        cli = CircleBenchCLI(args=["--config", str(FINE[0])], run=False, parse_only=True)
    assert "--config" in capsys.readouterr().out
    assert cli.config["model"]["loss"]["class_path"]
    assert not [w for w in caught if "args parameter" in str(w.message)]
    assert sys.argv == argv
