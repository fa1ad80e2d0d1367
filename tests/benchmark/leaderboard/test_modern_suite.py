"""The `modern` suite: every cell resolves through the training CLI, every group has its floor
and one budget, and `--plan` prints its GPU-hours; without data, weights or network."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from benchmark.leaderboard.command import main as leaderboard_main
from benchmark.leaderboard.plan import suite_plan
from benchmark.leaderboard.suite import Cell, load_suite
from benchmark.training.cli import CircleBenchCLI
from benchmark.tuning.command import main as tune_main
from benchmark.tuning.experiment import Budget, parse_experiment
from benchmark.tuning.groups import Group
from benchmark.tuning.space import load_space, space_path
from datamodules.splits import fold_sizes

ROOT = Path(__file__).resolve().parents[3]
SUITE = load_suite("modern", ROOT)
WIDTH = {"vit_small_patch14_dinov2.lvd142m": 384, "vit_base_patch14_dinov2.lvd142m": 768}


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No network: a connection attempt fails the test, and LightningCLI sees no pytest argv."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"the modern suite's test tried to connect: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(sys, "argv", ["circlebench"])


def test_every_group_has_its_floor_data_weights_and_one_budget() -> None:
    assert len(SUITE.groups) == 10 and len(SUITE.cells()) == 468
    for group in SUITE.groups:
        assert group.floor is not None and group.floor.stem == "circle", group.name
        assert group.floor in group.configs, group.name  # the same pipeline, untrained
        data, weights = group.requires
        assert data.parts[0] == "data" and weights.parts[0] == "weights", group.name
        assert weights.suffix == ".safetensors", group.name
        assert group.tuning is not None
        assert (group.tuning.trials, group.tuning.folds) == (50, 4), group.name
        assert {c.stem for c in group.configs} == {
            "circle", "circle_class", "multi_similarity", "cosface", "arcface", "triplet",
        }  # fmt: skip
    epochs = {g.name: g.tuning.max_epochs for g in SUITE.groups if g.tuning}
    assert epochs["dinov2_s14_cub200"] == epochs["dinov2_b14_cars196"] == 40
    assert epochs["dinov2_s14_sop"] == epochs["dinov2_b14_sop"] == 20
    assert Budget(trials=50, folds=4, max_epochs=40) == SUITE.groups[0].tuning


def parsed(cell: Cell):
    """The cell's `fit` (or floor's `test`) configuration as the training CLI resolves it:
    config files, classes and every override; nothing is built and no file is read."""
    args = ["--config", str(ROOT / cell.config), *cell.overrides]
    return CircleBenchCLI(args=args, run=False, parse_only=True).config


# One cell of each (config, overrides): seeds and the tuned setting change neither.
CELLS = list({(c.config, c.overrides): c for c in SUITE.cells()}.values())


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: f"{c.group.name}/{c.config.stem}")
def test_every_cell_resolves_with_consistent_sizes(cell: Cell) -> None:
    config = parsed(cell)
    embedder = config.model.embedder.init_args
    loss = config.model.loss.init_args
    loss = loss.source.init_args if loss.get("source") else loss  # class-level Circle's proxies
    if "frozen" in cell.group.name:
        extractor = config.data.init_args.extractor.init_args
        assert extractor.backbone == "vit_small_patch16_224.dino"
        assert embedder.in_features == embedder.embedding_dim == 384
        weights = extractor.pretrained
    else:
        assert embedder.embedding_dim == WIDTH[embedder.backbone]  # the CLS token's width
        weights = embedder.pretrained
        assert config.model.backbone_lr == 1e-6
    assert Path(weights) in cell.group.requires  # the group waits for the file it loads
    if "embedding_dim" in loss:
        assert loss.embedding_dim == embedder.embedding_dim
    images = config.data.init_args
    images = images.images.init_args if "images" in images else images
    batch = 64 if cell.group.name.endswith("batch64") else 256
    assert (images.p * images.k, images.k, images.image_size) == (batch, 4, 224)


STUDIES = [(g, c) for g in SUITE.groups for c in g.configs]


@pytest.mark.parametrize(
    ("group", "config"), STUDIES, ids=[f"{g.name}/{c.stem}" for g, c in STUDIES]
)
def test_every_study_resolves_and_its_folds_parse(
    group: Group, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `circlebench tune --suite modern --group G` runs: the loss's own space over the
    config as the group places it, the default setting first, and each fold's command line."""
    monkeypatch.chdir(ROOT)
    overrides = group.overrides_for(config)  # the suite's, then the group's
    experiment = parse_experiment(config, overrides, load_space(space_path(config.stem)))
    assert experiment.defaults and None not in experiment.defaults.values()
    if "frozen" not in group.name:
        assert experiment.defaults.get("head_lr") == 1e-6  # the recipe's, tried first
    assert group.tuning is not None
    args = experiment.fold_args(experiment.defaults, group.tuning, 3, Path("runs"))
    fold = CircleBenchCLI(args=args[1:], run=False, parse_only=True).config
    classes = {"cub200": 100, "cars196": 98, "sop": 11318}[config.parts[1]]
    for path, total in experiment.class_counts:  # fold 3 trains on the other classes
        assert total == classes and path.endswith("num_classes")
        node = fold
        for part in path.split("."):
            node = node[part]
        assert node == classes - fold_sizes(classes, 4)[3]
    assert fold.trainer.max_epochs == group.tuning.max_epochs


def test_plan_prints_cells_and_gpu_hours_of_every_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """From the committed H100 rows of results/throughput.csv, on a machine with no data."""
    text = suite_plan(SUITE, ROOT)
    assert text.startswith("plan of suite 'modern': 468 cells in 10 groups")
    assert "dinov2_b14_sop: 6 configs, 18 fits + 18 tuned fits + 3 floor tests" in text
    assert "dino_frozen_cub200: 6 configs, 30 fits + 30 tuned fits + 5 floor tests" in text
    assert text.count("    NVIDIA H100 80GB HBM3: ") == 10
    assert "no measured images/s" not in text and "total on one NVIDIA H100 80GB HBM3: " in text
    assert text.count("(feature cache ") == 3  # the frozen groups: the backbone runs once
    (tmp_path / "experiments").symlink_to(ROOT / "experiments")
    (tmp_path / "results").mkdir()
    (tmp_path / "results/throughput.csv").write_text((ROOT / "results/throughput.csv").read_text())
    monkeypatch.chdir(tmp_path)
    leaderboard_main(["--suite", "modern", "--plan"])
    assert capsys.readouterr().out.strip() == suite_plan(SUITE, tmp_path)
    tune_main(["--suite", "modern", "--group", "dinov2_b14_cub200", "--loss", "cosface", "--plan"])
    out = capsys.readouterr().out
    assert "data absent" in out and "dinov2_b14_cub200/cosface: 50 trials x 4 folds" in out
    assert "vit_base_patch14_dinov2.lvd142m, 256 images a step" in out and "GPU-hours" in out
    assert not (tmp_path / "results/tuning").exists()  # nothing ran
