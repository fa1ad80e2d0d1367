"""`circlebench tune` end to end on tiny data: tuned files, resume after SIGKILL, no test set."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import timm
import torch
import yaml

from benchmark.tuning.command import main
from benchmark.tuning.study import open_storage
from tests.datamodules import _layouts

ROOT = Path(__file__).resolve().parents[3]
FROZEN = ROOT / "experiments" / "synthetic" / "fine_grained" / "frozen"
SPACES = ROOT / "experiments" / "spaces"
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Fixed weights of the tiny extractor (a frozen backbone's weights never follow a seed)."""
    torch.manual_seed(0)
    model = timm.create_model("test_efficientnet", pretrained=False, num_classes=0)
    path = tmp_path_factory.mktemp("weights") / "test_efficientnet.pth"
    torch.save(model.state_dict(), path)
    return path


def tiny_frozen(
    weights: Path, cache: Path, *, backbone: str = "test_efficientnet", features: int = 256
) -> list[str]:
    """Fit overrides: the frozen configs on 40 classes x 4 images at 32 px, with `backbone`'s
    weights from `weights` and its `features` pooled channels."""
    return [
        f"--data.init_args.extractor.init_args.backbone={backbone}",
        f"--data.init_args.extractor.init_args.pretrained={weights}",
        f"--data.init_args.cache_dir={cache}",
        f"--model.embedder.init_args.in_features={features}",
        f"--model.embedder.init_args.embedding_dim={features}",
        "--data.init_args.images.init_args.image_size=32",
        "--data.init_args.images.init_args.images_per_class=4",
        "--data.init_args.images.init_args.num_train_classes=40",
    ]


def tune_args(tmp: Path, stem: str, *budget: str) -> list[str]:
    return [
        "--config",
        str(FROZEN / f"{stem}.yaml"),
        "--space",
        str(SPACES / f"{stem}.yaml"),
        "--storage",
        str(tmp / "study.journal"),
        *budget,
    ]


@pytest.mark.timeout(900)
def test_tune_writes_a_setting_that_fit_accepts(
    tmp_path: Path, weights: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    classes = [
        "--model.loss.init_args.source.init_args.num_classes=40",
        "--model.loss.init_args.source.init_args.embedding_dim=256",
    ]
    budget = ["--trials", "2", "--folds", "2", "--epochs", "2", "--workers", "2"]
    main(
        [
            *tune_args(tmp_path, "circle_class", *budget),
            "--",
            *tiny_frozen(weights, tmp_path / "c"),
            *classes,
        ]
    )
    summary = json.loads((tmp_path / "circle_class.json").read_text())
    assert summary["trials"] == {
        "complete": 2,
        "pruned": 0,
        "failed": 0,
        "interrupted": 0,
        "redrawn": 0,
    }
    assert summary["budget"]["folds"] == 2 and summary["default"]["number"] in (0, 1)
    assert summary["default"]["params"]["m"] == 0.4  # the configured setting was tried
    tuned = yaml.safe_load((tmp_path / "circle_class.yaml").read_text())
    assert set(tuned["model"]["loss"]["init_args"]) == {"m", "gamma"}
    assert tuned["trainer"]["max_epochs"] in (1, 2)
    header = (tmp_path / "circle_class.trials.csv").read_text().splitlines()[0]
    assert header.startswith("number,state,value,best_epoch,fold_values,m,gamma,head_lr")
    # only the training classes were ever embedded: one cache entry (the training split)
    assert len(list((tmp_path / "c").glob("*.npy"))) == 1
    # the tuned setting is a config fragment `fit` takes after the experiment's own
    from benchmark.cli import main as circlebench

    monkeypatch.setattr(sys, "argv", ["circlebench"])
    circlebench(
        [
            "fit",
            "--config",
            str(FROZEN / "circle_class.yaml"),
            *tiny_frozen(weights, tmp_path / "c"),
            *classes,
            "--config",
            str(tmp_path / "circle_class.yaml"),
            "--trainer.fast_dev_run=1",
            "--wandb=false",
            f"--results_csv={tmp_path / 'rows.csv'}",
            f"--trainer.default_root_dir={tmp_path / 'runs'}",
        ]
    )
    assert (tmp_path / "rows.csv").is_file()


def test_tuning_needs_no_test_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """End-to-end (images, a backbone trained): CUB with every test image deleted."""
    root = _layouts.write_cub(tmp_path / "data", classes=6)
    for folder in sorted((root / "images").iterdir())[4:]:  # classes 5 and 6: the test classes
        shutil.rmtree(folder)
    monkeypatch.chdir(tmp_path)
    config = ROOT / "experiments" / "synthetic" / "fine_grained" / "circle.yaml"
    main(
        [
            "--config",
            str(config),
            "--space",
            str(SPACES / "circle.yaml"),
            "--storage",
            str(tmp_path / "study.journal"),
            *["--trials", "1", "--folds", "2", "--epochs", "1"],
            "--",
            "--data=datamodules.CUB200DataModule",
            f"--data.init_args.root={root}",
            "--data.init_args.train_classes=4",
            "--data.init_args.p=2",
            "--data.init_args.k=2",
            "--data.init_args.image_size=32",
            "--data.init_args.num_workers=0",
            "--model.embedder.init_args.backbone=test_efficientnet",
            "--model.embedder.init_args.pretrained=false",
            "--model.embedder.init_args.head=linear",
        ]
    )
    summary = json.loads((tmp_path / "circle.json").read_text())
    assert summary["trials"]["complete"] == 1


@pytest.mark.timeout(900)  # two tune processes, each starting a fork server: slow on a busy CPU
def test_a_sigkilled_tune_resumes_without_repeating_a_trial(tmp_path: Path, weights: Path) -> None:
    args = [
        sys.executable,
        "-m",
        "benchmark.cli",
        "tune",
        *tune_args(tmp_path, "triplet", "--trials", "2", "--folds", "2", "--epochs", "1"),
        "--output",
        str(tmp_path),
        "--",
        *tiny_frozen(weights, tmp_path / "c"),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen(args, cwd=tmp_path, env=env, start_new_session=True)
    journal = tmp_path / "study.journal"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and first.poll() is None:
        if journal.is_file() and _complete(journal) >= 1:
            break
        time.sleep(0.5)
    os.killpg(first.pid, signal.SIGKILL)  # the tune process and its fold processes
    first.wait()
    done_before = _complete(journal)
    assert done_before == 1
    subprocess.run(args, cwd=tmp_path, env=env, check=True)
    study = optuna.load_study(study_name="triplet", storage=open_storage(str(journal)))
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) == 2
    assert len({json.dumps(t.params, sort_keys=True) for t in complete}) == 2  # none repeated
    assert json.loads((tmp_path / "triplet.json").read_text())["trials"]["complete"] == 2


def _complete(journal: Path) -> int:
    study = optuna.load_study(study_name="triplet", storage=open_storage(str(journal)))
    return sum(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (
            ["--suite", "ci", "--group", "synthetic_reid_frozen", "--trials", "8"],
            r"--trials: a suite",
        ),
        (["--suite", "ci", "--group", "nope"], r"--group 'nope': suite 'ci' has groups"),
        (["--suite", "ci", "--group", "synthetic_reid"], r"declares no `tuning:` budget"),
        (
            ["--suite", "ci", "--group", "synthetic_reid_frozen", "--loss", "circel"],
            r"--loss \['circel'\]: not in group",
        ),
        (["--config", "nowhere.yaml"], r"--config nowhere.yaml: no such file"),
        (["--config", str(FROZEN / "circle.yaml"), "--group", "g"], r"go with --suite"),
        (["--config", str(FROZEN / "circle.yaml"), "--folds", "1"], r"folds must be >= 2"),
        (["--config", str(FROZEN / "circle.yaml"), "--workers", "0"], r"--workers and --threads"),
        (
            [
                "--config",
                str(FROZEN / "circle.yaml"),
                "--launcher",
                "slurm",
                "--cpus-per-worker",
                "0",
            ],
            r"Slurm cpus must be at least 1, got 0",
        ),
    ],
)
def test_bad_commands_are_explained(
    args: list[str], match: str, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit):
        main(args)
    assert __import__("re").search(match, capsys.readouterr().err)


@pytest.mark.timeout(900)
def test_a_loss_of_your_own_is_tuned_in_a_space_derived_from_its_arguments(
    tmp_path: Path, weights: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    """The repository's own example, Proxy-NCA through the adapter, has no space file: tune
    derives one, prints it before the study starts, and tunes in it."""
    monkeypatch.chdir(tmp_path)
    classes = [
        "--model.loss.init_args.loss.init_args.num_classes=40",
        "--model.loss.init_args.loss.init_args.embedding_dim=256",
    ]
    main(
        [
            "--config", str(ROOT / "experiments/examples/proxy_nca.yaml"),
            "--storage", str(tmp_path / "study.journal"),
            "--trials", "2", "--folds", "2", "--epochs", "1", "--no-wandb",
            "--", *tiny_frozen(weights, tmp_path / "c"), *classes,
        ]
    )  # fmt: skip
    out = capfd.readouterr().out
    space = yaml.safe_load((tmp_path / "proxy_nca.space.yaml").read_text())
    assert space["params"] == {"loss.init_args.scale": {"low": 2.25, "high": 36.0, "log": True}}
    assert space["training"] == ["head_lr", "weight_decay", "loss_lr"]
    assert "searching the space derived from the loss's arguments" in out
    assert "scale: [2.25, 36] log" in out
    summary = json.loads((tmp_path / "proxy_nca.json").read_text())
    assert summary["trials"]["complete"] == 2
    assert summary["space"] == str(tmp_path / "proxy_nca.space.yaml")
