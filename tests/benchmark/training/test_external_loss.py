"""ExternalLoss in training: the optimiser's loss group, the class-count check, real fits."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from torch import nn

from benchmark.training.module import check_num_classes
from experiments.examples.proxy_nca import ProxyNCALoss
from losses import ExternalLoss
from tests.benchmark.training.test_frozen_track import circlebench
from tests.benchmark.training.test_module import make_module
from tests.losses.test_external import pml_losses

EXAMPLES = Path(__file__).resolve().parents[3] / "experiments" / "examples"
WRAPPED = "--model.loss.init_args.loss.init_args"  # the wrapped loss's own arguments
# `circlebench`'s tiny extractor gives 256-d features (Lite0's are 1280-d); 40 classes, not 400.
SMALL = ["--data.init_args.images.init_args.num_train_classes=40", f"{WRAPPED}.num_classes=40"]
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore:Attribute '(embedder|loss)' is an instance"),
]


@pytest.fixture(autouse=True)
def _bare_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    """LightningCLI warns when given args while sys.argv holds pytest's own."""
    monkeypatch.setattr(sys, "argv", ["circlebench"])


def wrapped(kind: str) -> nn.Module:
    """A class-level module with 4 proxies of 8 dimensions: the user's example or PML's."""
    if kind == "user":
        return ProxyNCALoss(num_classes=4, embedding_dim=8)
    return pml_losses().ProxyAnchorLoss(num_classes=4, embedding_size=8)


@pytest.mark.parametrize("kind", ["user", "pml"])
def test_the_wrapped_proxies_train_in_the_loss_group_at_loss_lr(kind: str) -> None:
    inner = wrapped(kind)
    module = make_module(ExternalLoss(inner), head_lr=1e-3, loss_lr=0.5)
    groups = {g["name"]: g for g in module.configure_optimizers().param_groups}
    assert groups["loss"]["lr"] == 0.5
    assert [id(p) for p in groups["loss"]["params"]] == [id(inner.proxies)]
    assert any(key.endswith("loss.loss.proxies") for key in module.state_dict())


@pytest.mark.parametrize("kind", ["user", "pml"])
def test_a_wrapped_class_count_that_disagrees_with_the_data_names_the_override(kind) -> None:
    loss = ExternalLoss(wrapped(kind))
    check_num_classes(loss, 4)
    name = "ProxyNCALoss" if kind == "user" else "ProxyAnchorLoss"
    match = rf"^{name} has num_classes=4 .*{re.escape(WRAPPED)}\.num_classes=7$"
    with pytest.raises(ValueError, match=match):
        check_num_classes(loss, 7)


def test_a_pml_loss_that_hides_its_class_count_is_not_misread() -> None:
    """PML's ProxyNCALoss keeps num_classes = 0 (a placeholder): no check, and no false alarm."""
    check_num_classes(ExternalLoss(pml_losses().ProxyNCALoss(num_classes=4, embedding_size=8)), 4)


def test_fast_dev_run_fit_of_a_user_module_from_a_yaml(tmp_path: Path, weights: Path) -> None:
    config = EXAMPLES / "proxy_nca.yaml"
    (row,) = circlebench(
        tmp_path, weights, "fit", config, "--trainer.fast_dev_run=1", *SMALL,
        f"{WRAPPED}.embedding_dim=256",
    )  # fmt: skip
    assert (row["loss"], row["labels"]) == ("ProxyNCALoss", "class-level")
    assert json.loads(row["loss_params"]) == {"embedding_dim": 256, "num_classes": 40, "scale": 9.0}
    assert 0.0 <= float(row["R@1"]) <= 100.0
    assert Path(row["run_dir"]).parent.name == "ProxyNCALoss"


def test_fast_dev_run_fit_of_pml_proxy_anchor(tmp_path: Path, weights: Path) -> None:
    pml_losses()
    config = EXAMPLES / "proxy_anchor.yaml"
    (row,) = circlebench(
        tmp_path, weights, "fit", config, "--trainer.fast_dev_run=1", *SMALL,
        f"{WRAPPED}.embedding_size=256", f"{WRAPPED}.margin=0.2",
    )  # fmt: skip
    assert (row["loss"], row["labels"]) == ("ProxyAnchorLoss", "class-level")
    params = json.loads(row["loss_params"])
    assert (params["num_classes"], params["margin"], params["alpha"]) == (40, 0.2, 32)
    assert 0.0 <= float(row["R@1"]) <= 100.0


def test_a_wrapped_class_count_is_checked_against_the_data_in_fit(tmp_path, weights) -> None:
    # 30 training classes; the loss keeps the example's 400
    with pytest.raises(ValueError, match=rf"set {re.escape(WRAPPED)}\.num_classes=30$"):
        circlebench(
            tmp_path, weights, "fit", EXAMPLES / "proxy_nca.yaml",
            "--trainer.fast_dev_run=1", f"{WRAPPED}.embedding_dim=256",
            "--data.init_args.images.init_args.num_train_classes=30",
        )  # fmt: skip
