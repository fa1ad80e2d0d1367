"""Search spaces: one per loss, every searched name an argument of that loss, defaults inside."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import optuna
import pytest
import yaml

from benchmark.tuning.space import LOSS_ARGS, SPACES_DIR, SearchSpace, load_space
from losses.external import pml_installed

ROOT = Path(__file__).resolve().parents[3]
FROZEN = ROOT / "experiments" / "synthetic" / "fine_grained" / "frozen"
EXAMPLES = ROOT / "experiments" / "examples"
SPACES = sorted(p for p in (ROOT / SPACES_DIR).glob("*.yaml") if p.stem != "training")


def _class(path: str) -> type:
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def _config_path(stem: str) -> Path:
    """The config a space is for: a frozen loss of ours, or an example wrapping another's."""
    ours = FROZEN / f"{stem}.yaml"
    return ours if ours.is_file() else EXAMPLES / f"{stem}.yaml"


def _config(stem: str) -> dict:
    config = yaml.safe_load(_config_path(stem).read_text())
    if config["model"]["loss"]["class_path"] == "losses.ExternalLoss" and not pml_installed():
        pytest.skip('the wrapped loss needs pytorch-metric-learning: pip install -e ".[pml]"')
    return config


def _loss_config(stem: str) -> dict:
    return _config(stem)["model"]["loss"]


def test_every_frozen_loss_has_a_space_and_every_space_a_config() -> None:
    assert {p.stem for p in FROZEN.glob("*.yaml")} <= {p.stem for p in SPACES}
    assert all(_config_path(p.stem).is_file() for p in SPACES)


def _loss_arguments(space: SearchSpace) -> dict[str, str]:
    """Parameter name -> its path below `model.loss.init_args` (the loss's own ones)."""
    prefix = LOSS_ARGS + "."
    return {
        p.name: p.path.removeprefix(prefix) for p in space.parameters if p.path.startswith(prefix)
    }


@pytest.mark.parametrize("file", SPACES, ids=lambda p: p.stem)
def test_every_searched_name_is_an_argument_of_its_loss(file: Path) -> None:
    space = load_space(file)
    config = _loss_config(file.stem)
    assert config["class_path"] == space.loss
    for name, path in _loss_arguments(space).items():
        node, parts = config, path.split(".")
        for i, part in enumerate(parts):  # `source.init_args.scale`: walk the nested classes
            if part == "init_args":
                continue
            arguments = inspect.signature(_class(node["class_path"]).__init__).parameters
            assert part in arguments, f"{file.name}: {name} is not an argument of {node}"
            if i + 1 < len(parts):
                node = node["init_args"][part]


@pytest.mark.parametrize("file", SPACES, ids=lambda p: p.stem)
def test_loss_lr_is_searched_exactly_when_the_loss_has_parameters(file: Path) -> None:
    config = _loss_config(file.stem)
    args = dict(config.get("init_args", {}))
    for nested in ("source", "loss"):  # class-level Circle's source, an ExternalLoss's loss
        if nested in args:
            part = args[nested]
            args[nested] = _class(part["class_path"])(**part["init_args"])
    loss = _class(config["class_path"])(**args)
    names = {p.name for p in load_space(file).parameters}
    assert ("loss_lr" in names) == any(True for _ in loss.parameters())


@pytest.mark.parametrize("file", SPACES, ids=lambda p: p.stem)
def test_the_configured_setting_is_a_point_of_the_space(file: Path) -> None:
    """The study's first trial is the loss as configured: it must be inside the space."""
    space = load_space(file)
    config = _config(file.stem)
    config["model"].setdefault("loss_lr", 1e-2)  # MetricLearningModule's defaults
    loss = config["model"]["loss"]
    # A loss argument the config leaves out takes its signature's default (soft_margin, mining).
    defaults = inspect.signature(_class(loss["class_path"])).parameters
    loss["init_args"] = {
        **{k: v.default for k, v in defaults.items() if v.default is not inspect.Parameter.empty},
        **loss.get("init_args", {}),
    }
    for p in space.parameters:
        value = config
        for part in p.path.split("."):
            value = value[part]
        d = p.distribution
        if isinstance(d, optuna.distributions.CategoricalDistribution):
            assert value in d.choices, f"{file.name}: {p.name}={value} not in {d.choices}"
            continue
        assert isinstance(d, optuna.distributions.FloatDistribution)
        assert d.low <= value <= d.high, (
            f"{file.name}: {p.name}={value} outside [{d.low}, {d.high}]"
        )


def test_reid_circle_settings_are_inside_the_circle_space() -> None:
    """The re-ID group's Circle settings (m 0.25, gamma 256) start its studies."""
    ranges = {
        p.name: p.distribution for p in load_space(ROOT / SPACES_DIR / "circle.yaml").parameters
    }
    assert ranges["m"].low <= 0.25 <= ranges["m"].high  # type: ignore[attr-defined]
    assert ranges["gamma"].low <= 256 <= ranges["gamma"].high  # type: ignore[attr-defined]


def _write(folder: Path, text: str, training: str | None = None) -> Path:
    (folder / "training.yaml").write_text(
        training or "head_lr: {path: model.head_lr, low: 1.0e-5, high: 1.0e-2, log: true}\n"
    )
    path = folder / "mine.yaml"
    path.write_text(text)
    return path


def test_a_space_reads_ranges_choices_and_shared_knobs(tmp_path: Path) -> None:
    file = _write(
        tmp_path,
        "loss: losses.TripletLoss\nparams:\n  margin: {low: 0.1, high: 0.5}\n"
        "  soft_margin: {choices: [false, true]}\n"
        "  source.init_args.k: {low: 1, high: 4, int: true}\n"
        "training: [head_lr]\n",
    )
    space = load_space(file)
    assert [p.name for p in space.parameters] == ["margin", "soft_margin", "k", "head_lr"]
    assert _loss_arguments(space) == {
        "margin": "margin",
        "soft_margin": "soft_margin",
        "k": "source.init_args.k",
    }
    assert space.overrides({"margin": 0.3, "soft_margin": True, "k": 2, "head_lr": 1e-3}) == [
        f"--{LOSS_ARGS}.margin=0.3",
        f"--{LOSS_ARGS}.soft_margin=true",
        f"--{LOSS_ARGS}.source.init_args.k=2",
        "--model.head_lr=0.001",
    ]
    values = optuna.create_study().ask(space.distributions()).params
    assert 0.1 <= values["margin"] <= 0.5 and values["k"] in range(1, 5)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("loss: losses.TripletLoss\nmargins: {}\n", r"a space has keys loss .*params and training"),
        ("params: {}\n", r"a space has keys loss \(a class path\)"),
        ("loss: x\nparams:\n  a: {low: 2, high: 1}\n", r"params.a: needs numbers low < high"),
        ("loss: x\nparams:\n  a: {low: 0, high: 1, log: true}\n", r"a log range needs low > 0"),
        ("loss: x\nparams:\n  a: {low: 0, high: 1, step: 2}\n", r"expected \{low, high"),
        ("loss: x\ntraining: [loss_lr]\n", r"training knob 'loss_lr' is not one of \['head_lr'\]"),
        ("loss: x\nparams:\n  head_lr: {low: 0, high: 1}\ntraining: [head_lr]\n", r"names repeat"),
    ],
)
def test_bad_spaces_are_explained(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        load_space(_write(tmp_path, text))


def test_a_missing_space_says_how_to_write_one(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no search space at .*write one.*--space FILE"):
        load_space(tmp_path / "nope.yaml")


def test_a_loss_without_a_space_gets_one_around_its_arguments(tmp_path: Path) -> None:
    """Floats around their configured values (log for scales and values above 1), the shared
    knobs, loss_lr where the loss has classes; integers and booleans left alone."""
    from benchmark.tuning.space import derived_space

    loss = {
        "class_path": "losses.ExternalLoss",
        "init_args": {
            "loss": {
                "class_path": "my.ProxyLoss",
                "init_args": {
                    "num_classes": 40, "embedding_dim": 256, "scale": 9.0, "margin": 0.1,
                    "beta": 0.5, "k": 3, "normalize": True, "offset": 0.0, "bias": -1.0,
                },
            },
        },
    }  # fmt: skip
    file = derived_space(loss, tmp_path / "spaces" / "mine.space.yaml")
    space = load_space(file)
    assert space.loss == "losses.ExternalLoss"
    assert [p.name for p in space.parameters] == [
        "scale", "margin", "beta", "head_lr", "weight_decay", "loss_lr"
    ]  # fmt: skip
    by_name = {p.name: p for p in space.parameters}
    assert by_name["scale"].path == "model.loss.init_args.loss.init_args.scale"
    scale, margin, beta = (by_name[n].distribution for n in ("scale", "margin", "beta"))
    assert (scale.low, scale.high, scale.log) == (2.25, 36.0, True)
    assert (margin.low, margin.high, margin.log) == (0.05, 0.2, False)
    assert beta.log  # an inverse temperature: log whatever its value
    plain = derived_space({"class_path": "losses.CircleLoss", "init_args": {"m": 0.25}},
                          tmp_path / "circle.space.yaml")  # fmt: skip
    assert [p.name for p in load_space(plain).parameters] == ["m", "head_lr", "weight_decay"]
