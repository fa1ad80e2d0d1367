"""Interrupted runs resume exactly; checkpoints are checked against the config; rows say what
was evaluated (a subprocess per run: the process kills itself)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import timm
import torch

from benchmark.training.checkpoints import CheckpointInfo, check_matches_config, load_checkpoint
from benchmark.training.cli import hashed_config
from benchmark.training.rows import run_metrics
from tests.benchmark.tuning.test_command import tiny_frozen

ROOT = Path(__file__).resolve().parents[3]
FINE = ROOT / "experiments" / "synthetic" / "fine_grained"
TINY = [
    "--model.embedder.init_args.backbone=test_efficientnet",
    "--model.embedder.init_args.pretrained=false",
    # the configs' residual head keeps Lite0's 1280 features; the tiny model has 256
    "--model.embedder.init_args.head=linear",
    "--data.init_args.image_size=32",
    "--data.init_args.images_per_class=4",
    "--data.init_args.eval_batch_size=64",
    "--data.init_args.batches_per_epoch=2",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--wandb=false",
]
METRICS = ("R@1", "R@2", "R@4", "R@8", "mAP", "MAP@R", "R-Precision")


def circlebench(tmp: Path, *args: str, config: str = "circle_class") -> subprocess.CompletedProcess:
    """`python -m benchmark.cli <command> <options>` on a tiny synthetic config, one thread, in
    `tmp`; the options come last, so they override the config's and TINY's values."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "benchmark.cli",
        args[0],
        "--config",
        str(FINE / f"{config}.yaml"),
    ]
    command += [*TINY, f"--results_csv={tmp / 'runs.csv'}", f"--trainer.default_root_dir={tmp}"]
    command += args[1:]
    # A shell's background job (`cmd &`) starts with SIGINT ignored, and so would this run:
    # give it the default, as a terminal's Ctrl-C finds it.
    return subprocess.run(
        command, cwd=tmp, env=env, capture_output=True, text=True, timeout=300,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip


def rows(tmp: Path) -> list[dict[str, str]]:
    path = tmp / "runs.csv"
    return list(csv.DictReader(path.open(newline=""))) if path.is_file() else []


def signal_at(epoch: int, name: str) -> str:
    callback = {"class_path": "tests.benchmark.training.signals.SignalAtEpoch",
                "init_args": {"epoch": epoch, "name": name}}  # fmt: skip
    return f"--trainer.callbacks={json.dumps([callback])}"


def ok(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The uninterrupted 3-epoch run's row."""
    tmp = tmp_path_factory.mktemp("straight")
    ok(circlebench(tmp, "fit", "--trainer.max_epochs=3"))
    (row,) = rows(tmp)
    return row


def test_sigkill_in_epoch_2_then_ckpt_path_last_reproduces_the_uninterrupted_run(
    tmp_path: Path, straight: dict[str, str]
) -> None:
    killed = circlebench(tmp_path, "fit", "--trainer.max_epochs=3", signal_at(1, "SIGKILL"))
    assert killed.returncode == -9 and rows(tmp_path) == []
    (last,) = tmp_path.rglob("last.ckpt")
    assert CheckpointInfo.read(last).epoch == 1  # the first epoch finished, the second did not
    ok(circlebench(tmp_path, "fit", "--trainer.max_epochs=3", "--ckpt_path=last"))
    (resumed,) = rows(tmp_path)
    assert [resumed[m] for m in METRICS] == [straight[m] for m in METRICS]
    assert resumed["run_dir"] == str(last.parents[1])  # the same run folder goes on
    assert (resumed["epochs"], resumed["global_step"]) == ("3", "6")
    assert resumed["checkpoint"] == str(last)


def test_a_resumed_run_keeps_its_best_epoch_and_logs_and_a_test_row_the_models_p_and_k(
    tmp_path: Path,
) -> None:
    """last.ckpt is written after the best checkpoint's callback has seen this epoch's score, so
    a run resumed from it picks the uninterrupted run's best epoch, and its logs go on; testing
    that checkpoint with other P-K batches records the P and K it was trained with."""
    run = ["--data.init_args.batches_per_epoch=1", "--data.init_args.val_classes=10"]
    run += ["--model.head_lr=3", "--model.backbone_lr=1"]
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    ok(circlebench(tmp_path / "a", "fit", *run, "--trainer.max_epochs=3", config="circle"))
    ok(circlebench(tmp_path / "b", "fit", *run, "--trainer.max_epochs=1", config="circle"))
    (last,) = (tmp_path / "b").rglob("last.ckpt")
    resume = f"--ckpt_path={last.parents[1]}"
    ok(circlebench(tmp_path / "b", "fit", *run, "--trainer.max_epochs=3", resume, config="circle"))
    (straight_row,), (_, resumed) = rows(tmp_path / "a"), rows(tmp_path / "b")
    fields = ("epochs", "R@1", "mAP")
    assert [resumed[f] for f in fields] == [straight_row[f] for f in fields]
    assert Path(resumed["checkpoint"]).name == Path(straight_row["checkpoint"]).name == "best.ckpt"
    # Lightning's CSV writer deletes the metrics.csv it finds: the epoch before the resume is kept
    logged = run_metrics(last.parents[1]).dropna(subset=["val/R@1"])
    assert sorted(logged["epoch"]) == [0, 1, 2] and (last.parents[1] / "metrics-0.csv").is_file()
    pk = ["--data.init_args.p=4", "--data.init_args.k=2"]
    ckpt = f"--ckpt_path={straight_row['checkpoint']}"
    ok(circlebench(tmp_path / "a", "test", *run, ckpt, *pk, config="circle"))
    assert (rows(tmp_path / "a")[-1]["p"], rows(tmp_path / "a")[-1]["k"]) == ("8", "4")


def test_pretrained_weights_or_none_is_part_of_a_checkpoints_setting(tmp_path: Path) -> None:
    """Which weights started a run does not matter to its checkpoint; whether there were any
    does: they set the input normalisation and Lite0's BatchNorm epsilon."""
    embedder = {"class_path": "benchmark.training.embedders.Embedder",
                "init_args": {"backbone": "efficientnet_lite0", "pretrained": True}}  # fmt: skip
    state = {"state_dict": {}, "loops": {}, "hyper_parameters": {"embedder": embedder}}
    torch.save(state, tmp_path / "run.ckpt")

    def config(pretrained: object) -> dict:
        args = {**embedder["init_args"], "pretrained": pretrained}
        return {"model": {"embedder": {**embedder, "init_args": args}}, "data": {}}

    check_matches_config(tmp_path / "run.ckpt", config("/w.pth"), training=False)
    with pytest.raises(ValueError, match=r"model\.embedder"):
        check_matches_config(tmp_path / "run.ckpt", config(False), training=False)


def test_sigint_leaves_an_interrupted_checkpoint_and_no_row(tmp_path: Path) -> None:
    stopped = circlebench(tmp_path, "fit", "--trainer.max_epochs=3", signal_at(1, "SIGINT"))
    assert stopped.returncode != 0 and rows(tmp_path) == []
    names = sorted(p.name for p in tmp_path.rglob("*.ckpt"))
    assert names == ["interrupted.ckpt", "last.ckpt"]


def test_ckpt_path_last_without_an_earlier_run_says_what_to_do(tmp_path: Path) -> None:
    done = circlebench(tmp_path, "fit", "--trainer.max_epochs=1", "--ckpt_path=last")
    assert done.returncode != 0
    assert "no earlier run of this config" in done.stderr


@pytest.mark.parametrize("where", ["last", ".", "missing.ckpt"])
def test_test_without_a_checkpoint_file_stops_before_evaluating(tmp_path: Path, where) -> None:
    done = circlebench(tmp_path, "test", f"--ckpt_path={where}")
    assert done.returncode == 2 and rows(tmp_path) == []
    assert f"--ckpt_path {where}: test evaluates a checkpoint file" in done.stderr


def test_test_rows_record_the_checkpoint_and_share_the_fit_rows_config_hash(
    tmp_path: Path, straight: dict[str, str]
) -> None:
    checkpoint = straight["checkpoint"]
    ok(circlebench(tmp_path, "test", f"--ckpt_path={checkpoint}", "--trainer.max_epochs=3"))
    (tested,) = rows(tmp_path)
    assert [tested[m] for m in METRICS] == [straight[m] for m in METRICS]
    assert (tested["epochs"], tested["checkpoint"], tested["loss"]) == (
        "3",
        checkpoint,
        "CircleLoss",
    )
    assert tested["config_hash"] == straight["config_hash"]  # `verbose` is not hashed


def test_evaluation_settings_may_change_but_not_the_loss(
    tmp_path: Path, straight: dict[str, str]
) -> None:
    checkpoint = straight["checkpoint"]
    ok(circlebench(tmp_path, "test", f"--ckpt_path={checkpoint}", "--model.recall_ks=[1,3]"))
    (tested,) = rows(tmp_path)
    assert tested["R@3"] != "" and "R@8" not in tested
    other = circlebench(tmp_path, "test", f"--ckpt_path={checkpoint}", config="triplet")
    assert other.returncode != 0 and len(rows(tmp_path)) == 1
    assert "was trained with another setting than this config" in other.stderr
    assert "model.loss: checkpoint CircleLoss" in other.stderr


def test_testing_without_a_checkpoint_records_the_floor_with_a_warning(tmp_path: Path) -> None:
    done = circlebench(tmp_path, "test")
    ok(done)
    (floor,) = rows(tmp_path)
    assert (floor["loss"], floor["epochs"], floor["checkpoint"]) == ("none (pretrained)", "0", "")
    assert (floor["labels"], floor["loss_params"]) == ("", "")
    assert "records the untrained model as a floor" in done.stderr


def test_the_feature_cache_folder_may_differ_but_not_what_is_trained(tmp_path: Path) -> None:
    """cache_dir says where features are kept, as root says where images are: a checkpoint is
    evaluated with another one (and the config hash leaves both out), but not with other data
    or features. The frozen track saves its image DataModule and extractor as their config
    (`cli`), which is where a test row reads the checkpoint's P and K."""
    features = "datamodules.features.CachedFeatureDataModule"

    def data(root: str = "/x", p: int = 8, mode: str = "fine_grained", **extractor) -> dict:
        images = {"class_path": "datamodules.SyntheticDataModule",
                  "init_args": {"root": root, "p": p, "k": 4, "mode": mode}}  # fmt: skip
        args = {"pooling": "avg", "pretrained": "/w.pth", **extractor}
        extract = {"class_path": "benchmark.training.embedders.BackboneFeatures", "init_args": args}
        return {"images": images, "extractor": extract}

    saved = {"_class_path": features, "cache_dir": "/a", "views": 1, **data()}
    loops = {"fit_loop": {"epoch_progress": {"total": {"processed": 2}}}}
    state = {"state_dict": {}, "hyper_parameters": {}, "loops": loops, "global_step": 10}
    torch.save({**state, "datamodule_hyper_parameters": saved}, tmp_path / "run.ckpt")
    info = CheckpointInfo.read(tmp_path / "run.ckpt")
    assert (info.epoch, info.p, info.k) == (2, 8, 4)

    def config(**args: object) -> dict:
        return {"model": {}, "data": {"class_path": features, "init_args": args}}

    moved = config(cache_dir="/b", views=1, **data(root="/y", pretrained="/elsewhere/w.pth"))
    check_matches_config(tmp_path / "run.ckpt", moved, training=True)
    check_matches_config(tmp_path / "run.ckpt", config(**data(p=4)), training=False)
    for changed, match in [
        (data(p=4), r"\{'images.p': \(8, 4\)\}"),
        (data(mode="reid"), r"\{'images.mode': \('fine_grained', 'reid'\)\}"),
        (data(pooling="max"), r"\{'extractor.pooling': \('avg', 'max'\)\}"),
        (data(pretrained=False), r"\{'extractor.pretrained': \(True, False\)\}"),
    ]:
        with pytest.raises(ValueError, match=match):
            check_matches_config(tmp_path / "run.ckpt", config(**changed), training=True)
    located = config(cache_dir="/b", views=1, **data(root="/y"))
    assert hashed_config(located) == hashed_config(config(cache_dir="/a", views=1, **data()))


def test_a_frozen_runs_checkpoint_holds_its_images_and_extractor(tmp_path: Path) -> None:
    """What the check above compares is what a real frozen-track fit saves."""
    torch.manual_seed(0)
    weights = tmp_path / "test_efficientnet.pth"
    torch.save(timm.create_model("test_efficientnet", num_classes=0).state_dict(), weights)
    frozen = [
        "--config", str(FINE / "frozen" / "circle.yaml"),
        *tiny_frozen(weights, tmp_path / "cache"),
        "--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--test_after_fit=false",
        "--wandb=false", "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={tmp_path}", f"--results_csv={tmp_path / 'runs.csv'}",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "benchmark.cli", "fit", *frozen]
    ok(subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300))
    (ckpt,) = tmp_path.glob("**/checkpoints/last.ckpt")
    saved = load_checkpoint(ckpt)["datamodule_hyper_parameters"]
    assert saved["images"]["init_args"]["num_train_classes"] == 40
    assert saved["extractor"]["init_args"]["backbone"] == "test_efficientnet"
    assert CheckpointInfo.read(ckpt).p == saved["images"]["init_args"]["p"]
