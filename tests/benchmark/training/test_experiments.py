"""Every experiment YAML parses (no model built, no file read) and holds the papers' settings."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from benchmark.leaderboard.suite import load_suite
from benchmark.training.cli import CircleBenchCLI
from benchmark.tuning.groups import suite_groups
from benchmark.tuning.tuned import recipe
from datamodules.catalog import DATASETS as DATASETS_BY_NAME
from losses.external import pml_installed

EXPERIMENTS = Path(__file__).resolve().parents[3] / "experiments"
# Suites, search spaces and tuned settings are not configs of their own: a tuned file is laid
# over the config it was tuned for (tested below), and spaces are read by benchmark.tuning.
NOT_CONFIGS = {"suites", "spaces", "tuned"}
CONFIGS = sorted(
    p
    for p in EXPERIMENTS.rglob("*.yaml")
    if p.name != "base.yaml" and not NOT_CONFIGS & set(p.relative_to(EXPERIMENTS).parts)
)
TUNED = sorted((EXPERIMENTS / "tuned").rglob("*.yaml"))
DATASETS = ("cub200", "cars196", "sop", "market1501", "msmt17")
LOSSES = {p.stem for p in (EXPERIMENTS / "synthetic" / "fine_grained").glob("*.yaml")}
CLASS_COUNTS = {"cub200": 100, "cars196": 98, "sop": 11318, "market1501": 751, "msmt17": 1041}
DATASET_OF = {cls.__name__: name for name, cls in DATASETS_BY_NAME.items()}  # by DataModule


@pytest.fixture(autouse=True)
def _bare_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    """LightningCLI warns when given args while sys.argv holds pytest's own."""
    monkeypatch.setattr(sys, "argv", ["circlebench"])


def parse(*args: str):
    return CircleBenchCLI(args=list(args), run=False, parse_only=True).config


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(EXPERIMENTS)))
def test_experiment_parses_over_base_yaml(path: Path) -> None:
    if "pytorch_metric_learning" in path.read_text() and not pml_installed():
        pytest.skip('pytorch-metric-learning not installed (pip install -e ".[pml]")')
    config = parse("--config", str(path))
    assert config.trainer.use_distributed_sampler is False  # from base.yaml
    assert config.model.loss.class_path.startswith("losses.")


@pytest.mark.parametrize("path", TUNED, ids=lambda p: str(p.relative_to(EXPERIMENTS)))
def test_tuned_settings_parse_over_the_config_they_were_tuned_for(path: Path) -> None:
    record = json.loads(path.with_suffix(".json").read_text())
    root = EXPERIMENTS.parent
    config = parse("--config", str(root / record["tuned_for"]["config"]), "--config", str(path))
    tuned = yaml.safe_load(path.read_text())
    for name, value in tuned["model"].get("loss", {}).get("init_args", {}).items():
        assert config.model.loss.init_args[name] == value, name
    assert config.trainer.max_epochs == tuned["trainer"]["max_epochs"]
    assert config.trainer.max_epochs <= record["budget"]["max_epochs"]


def test_every_dataset_has_every_loss_and_synthetic_has_both_modes() -> None:
    assert len(LOSSES) >= 15 and {"circle", "circle_class", "copernican_l2"} <= LOSSES
    for folder in (*DATASETS, "synthetic/fine_grained", "synthetic/reid"):
        assert {p.stem for p in (EXPERIMENTS / folder).glob("*.yaml")} == LOSSES, folder


@pytest.mark.parametrize("dataset", DATASETS)
def test_circle_configs_carry_the_papers_settings(dataset: str) -> None:
    fine = dataset in ("cub200", "cars196", "sop")
    for name in ("circle", "circle_class"):
        config = yaml.safe_load((EXPERIMENTS / dataset / f"{name}.yaml").read_text())
        embedder, loss = config["model"]["embedder"]["init_args"], config["model"]["loss"]
        assert embedder["backbone"] == ("bninception" if fine else "resnet50")
        assert (loss["init_args"]["m"], loss["init_args"]["gamma"]) == (
            (0.4, 80) if fine else (0.25, 256)
        )
        assert (config["data"]["init_args"]["p"], config["data"]["init_args"]["k"]) == (
            (16, 5) if fine else (16, 4)
        )
        if fine:
            assert embedder["embedding_dim"] == 512 and embedder["freeze_bn"] is True
        else:
            assert embedder["bnneck"] is True
    source = loss["init_args"]["source"]["init_args"]
    assert source["num_classes"] == CLASS_COUNTS[dataset]
    assert source["embedding_dim"] == embedder["embedding_dim"]


RECIPE_2025 = sorted(EXPERIMENTS.glob("*/dinov2/*.yaml"))


@pytest.mark.parametrize("path", RECIPE_2025, ids=lambda p: str(p.relative_to(EXPERIMENTS)))
def test_dinov2_configs_carry_the_2025_recipe(path: Path) -> None:
    """Berton et al. 2025 (their code's defaults): DINOv2 ViT-S/14's CLS token, every layer at
    Adam lr 1e-6, the classifier at lr 1, 256 images a step with 4 per class, 224 px, bf16."""
    config = yaml.safe_load(path.read_text())
    model, data = config["model"], config["data"]["init_args"]
    embedder = model["embedder"]["init_args"]
    assert embedder == {
        "backbone": "vit_small_patch14_dinov2.lvd142m",
        "embedding_dim": 384,  # the CLS token itself: a residual head starting at the identity
        "pretrained": "weights/vit_small_patch14_dinov2.lvd142m.safetensors",
        "pooling": "cls",
        "head": "residual",
    }
    assert model["optimizer"]["class_path"] == "torch.optim.Adam"
    assert (model["backbone_lr"], model["head_lr"], model["loss_lr"]) == (1e-6, 1e-6, 1.0)
    assert (data["p"] * data["k"], data["k"], data["image_size"]) == (256, 4, 224)
    assert config["trainer"]["precision"] == "bf16-mixed"
    assert path.parent.parent.name in DATASETS[:3]
    assert {p.stem for p in path.parent.glob("*.yaml")} == {
        "circle", "circle_class", "multi_similarity", "cosface", "arcface", "triplet",
    }  # fmt: skip


FROZEN_DINO = sorted(EXPERIMENTS.glob("*/dino_frozen/*.yaml"))


@pytest.mark.parametrize("path", FROZEN_DINO, ids=lambda p: str(p.relative_to(EXPERIMENTS)))
def test_frozen_dino_configs_cache_the_cls_token_of_dino_vit_s16(path: Path) -> None:
    """Hyp-ViT's frozen baseline: DINO ViT-S/16's CLS token, with a head that starts at the
    identity (so the floor is that token), at 224 px and the DINOv2 recipe's batches."""
    config = yaml.safe_load(path.read_text())
    data = config["data"]["init_args"]
    assert data["extractor"]["init_args"] == {
        "backbone": "vit_small_patch16_224.dino",
        "pretrained": "weights/vit_small_patch16_224.dino.safetensors",
        "pooling": "cls",
    }
    head = config["model"]["embedder"]["init_args"]
    assert head == {"in_features": 384, "embedding_dim": 384, "kind": "residual"}
    images = data["images"]["init_args"]
    assert (images["p"] * images["k"], images["image_size"]) == (256, 224)
    dinov2 = yaml.safe_load((path.parent.parent / "dinov2" / path.name).read_text())
    assert config["model"]["loss"] == dinov2["model"]["loss"]  # the same losses as end to end


def test_class_level_configs_give_the_dataset_class_count_and_embedding_size() -> None:
    for path in CONFIGS:
        config = yaml.safe_load(path.read_text())
        args = config["model"]["loss"]["init_args"]
        for wrapper in ("source", "loss"):  # Circle's similarity source, ExternalLoss's module
            args = args[wrapper]["init_args"] if wrapper in args else args
        if "num_classes" in args:
            data = config["data"]
            data = data["init_args"].get("images", data)  # the frozen track: its images
            dataset = DATASET_OF.get(data["class_path"].rsplit(".", 1)[-1])  # not the folder's
            expected = CLASS_COUNTS.get(dataset, data["init_args"].get("num_train_classes"))
            assert args["num_classes"] == expected, path
            size = args.get("embedding_dim", args.get("embedding_size"))  # PML's name
            assert size == config["model"]["embedder"]["init_args"]["embedding_dim"], path


def test_command_line_overrides_reach_the_loss() -> None:
    config = parse(
        "--config",
        str(EXPERIMENTS / "cub200" / "circle.yaml"),
        "--model.loss.init_args.gamma=64",
    )
    assert config.model.loss.init_args.gamma == 64


def test_command_line_overrides_reach_a_wrapped_loss(capsys) -> None:
    proxy_nca = str(EXPERIMENTS / "examples" / "proxy_nca.yaml")
    wrapped = "--model.loss.init_args.loss.init_args"
    config = parse("--config", proxy_nca, f"{wrapped}.scale=16")
    assert config.model.loss.init_args.loss.init_args.scale == 16
    with pytest.raises(SystemExit):
        parse("--config", proxy_nca, f"{wrapped}.scal=16")
    assert "scal" in capsys.readouterr().err


def test_the_proxy_anchor_search_space_reaches_the_wrapped_loss() -> None:
    """`tune` applies a space's `params` as `--model.loss.init_args.<name>=value` overrides."""
    if not pml_installed():
        pytest.skip('pytorch-metric-learning not installed (pip install -e ".[pml]")')
    space = yaml.safe_load((EXPERIMENTS / "spaces" / "proxy_anchor.yaml").read_text())
    config = EXPERIMENTS / "examples" / "proxy_anchor.yaml"
    assert space["loss"] == yaml.safe_load(config.read_text())["model"]["loss"]["class_path"]
    for name, bounds in space["params"].items():
        value = bounds["high"]  # not the config's own value
        parsed = parse("--config", str(config), f"--model.loss.init_args.{name}={value}")
        node = parsed.model.loss.init_args
        for part in name.split("."):
            node = node[part]
        assert node == value, name


def test_a_pml_config_without_pml_says_how_to_install_it(monkeypatch, capsys) -> None:
    for name in [n for n in sys.modules if n.split(".")[0] == "pytorch_metric_learning"]:
        monkeypatch.setitem(sys.modules, name, None)  # importing it now fails, as if absent
    monkeypatch.setitem(sys.modules, "pytorch_metric_learning", None)
    with pytest.raises(SystemExit):
        parse("--config", str(EXPERIMENTS / "examples" / "proxy_anchor.yaml"))
    assert 'pytorch-metric-learning is not installed: pip install -e ".[pml]"' in (
        capsys.readouterr().err
    )


def test_a_loss_that_is_not_ours_given_directly_points_to_the_adapter(capsys) -> None:
    circle = str(EXPERIMENTS / "synthetic" / "fine_grained" / "circle.yaml")
    with pytest.raises(SystemExit):
        parse("--config", circle, "--model.loss=experiments.examples.proxy_nca.ProxyNCALoss")
    assert "enters through the adapter: --model.loss=losses.ExternalLoss" in (
        capsys.readouterr().err
    )


def test_evaluation_metrics_and_re_ranking_are_chosen_on_the_command_line(capsys) -> None:
    market = str(EXPERIMENTS / "market1501" / "circle.yaml")
    config = parse("--config", market, "--model.rerank=k-reciprocal",
                   "--model.eval_metrics=[recall,mAP,mINP]")  # fmt: skip
    assert config.model.rerank == "k-reciprocal"
    assert config.model.eval_metrics == ["recall", "mAP", "mINP"]
    default = parse("--config", market).model
    assert (default.rerank, default.eval_metrics) == (None, None)
    with pytest.raises(SystemExit):
        parse("--config", market, "--model.rerank=kreciprocal")
    assert "kreciprocal" in capsys.readouterr().err


def test_unknown_keys_are_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(
            "--config", str(EXPERIMENTS / "cub200" / "circle.yaml"), "--model.loss.init_args.gama=1"
        )
    assert "gama" in capsys.readouterr().err


def test_the_old_embedder_class_path_still_parses(tmp_path) -> None:
    """Configs saved before the role packages name benchmark.embedders.Embedder."""
    config = EXPERIMENTS / "synthetic" / "fine_grained" / "circle.yaml"
    old = tmp_path / "old.yaml"
    old.write_text(
        config.read_text().replace("benchmark.training.embedders", "benchmark.embedders")
    )
    embedder = parse("--config", str(old))["model"]["embedder"]
    assert embedder["class_path"] == "benchmark.embedders.Embedder"


def test_an_unset_data_seed_follows_the_run_seed_and_a_set_one_stays() -> None:
    frozen = str(EXPERIMENTS / "synthetic" / "fine_grained" / "frozen" / "circle.yaml")
    images = "--data.init_args.images.init_args"
    assert (
        parse("--config", frozen, "--seed_everything=3").data.init_args.images.init_args.seed == 3
    )
    config = parse("--config", frozen, "--seed_everything=3", f"{images}.seed=7")
    assert config.data.init_args.images.init_args.seed == 7
    plain = str(EXPERIMENTS / "synthetic" / "fine_grained" / "circle.yaml")
    assert parse("--config", plain, "--seed_everything=2").data.init_args.seed == 2


@pytest.mark.parametrize("suite", ["quick", "ci"])
def test_the_cpu_suites_run_every_loss_as_tuned_for_its_current_config(suite: str) -> None:
    """A tuned cell is skipped when its setting was found for another config, overrides or
    budget: a change to the quick or ci suite must come with its losses re-tuned."""
    root = EXPERIMENTS.parent
    untuned = {
        f"{group.name}/{config.stem}": reason
        for group in suite_groups(suite, root)
        if group.tuning is not None
        for config in group.configs
        if (reason := group.untuned(config, root)) is not None
    }
    assert not untuned


def test_tune_trains_with_the_suites_overrides_as_the_cells_do() -> None:
    """The paper suite's cells train BN-Inception ImageNet-pretrained (a suite-level override
    on `pretrained: false` configs): `tune --suite paper` must tune that recipe, not the
    network from scratch. Switches of how a run reports stay out of the tuned recipe."""
    root = EXPERIMENTS.parent
    suite = load_suite("paper", root)
    cub = next(g for g in suite_groups("paper", root) if g.name == "cub200")
    pretrained = "--model.embedder.init_args.pretrained=true"
    for config in cub.configs:
        assert pretrained in cub.overrides_for(config)
        cell = next(c for c in suite.cells() if c.config == config and c.tuned)
        assert cell.overrides == cub.overrides_for(config)  # what tune runs is what cells run
    assert recipe(cub.configs[0], cub.overrides_for(cub.configs[0]), root)["overrides"] == [
        pretrained
    ]
