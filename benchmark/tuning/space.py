"""Search spaces: `experiments/spaces/<loss>.yaml`, one per loss, over `training.yaml`'s knobs.

A space names the `loss:` class the experiment config must use, its `params:` (constructor
arguments of the loss, dotted paths below `model.loss.init_args` whose last part is the Optuna
name, each `{low, high}` with `log: true` or `int: true`, or `{choices: [...]}`), and the shared
`training:` knobs it uses, which `training.yaml` gives one range for every loss. An example:
docs/guides/tuning.md#search-spaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from benchmark.errors import read_yaml

SPACES_DIR = Path("experiments/spaces")
TRAINING = "training"  # the shared knobs' file stem
LOSS_ARGS = "model.loss.init_args"
_RANGE_KEYS = {"low", "high", "log", "int", "choices", "path"}


@dataclass(frozen=True)
class Parameter:
    """One searched value: its Optuna name, config path and distribution."""

    name: str
    path: str  # e.g. "model.loss.init_args.gamma"
    distribution: BaseDistribution

    def override(self, value: Any) -> str:
        """`--path=value` for the `circlebench fit` command line."""
        text = "null" if value is None else str(value).lower() if isinstance(value, bool) else value
        return f"--{self.path}={text}"


@dataclass(frozen=True)
class SearchSpace:
    """A loss's space: the class it is for and its parameters (own, then shared knobs)."""

    file: Path
    loss: str
    parameters: tuple[Parameter, ...]

    def distributions(self) -> dict[str, BaseDistribution]:
        """Each parameter's distribution by name, in order: what a trial is asked with."""
        return {p.name: p.distribution for p in self.parameters}

    def overrides(self, values: dict[str, Any]) -> list[str]:
        """The command-line overrides that apply `values` (by parameter name) to a config."""
        return [p.override(values[p.name]) for p in self.parameters]

    def values_in(self, config: dict) -> dict[str, Any]:
        """The values a parsed config (`CircleBenchCLI.config_dump`-like dict) gives each
        parameter: the loss's default setting, which a study tries first."""
        return {p.name: _lookup(config, p.path) for p in self.parameters}


def space_path(stem: str) -> Path:
    """Where the space of the experiment `stem` lives."""
    return SPACES_DIR / f"{stem}.yaml"


def load_space(file: Path) -> SearchSpace:
    """Parse a loss's space file and the shared knobs it names (from `training.yaml` beside it).

    Raises:
        FileNotFoundError: the file is absent (the message says how to write one).
        ValueError: an unknown key, knob or range, with the file and the fix.
    """
    if not file.is_file():
        raise FileNotFoundError(
            f"no search space at {file}: write one (a `loss:` class, `params:` with ranges, "
            f"`training:` knobs; see {SPACES_DIR}/circle.yaml and docs/guides/tuning.md) or "
            "pass --space FILE"
        )
    spec = read_yaml(file) or {}
    unknown = sorted(set(spec) - {"loss", "params", "training"})
    if unknown or not isinstance(spec.get("loss"), str):
        raise ValueError(
            f"{file}: a space has keys loss (a class path), params and training; got {sorted(spec)}"
        )
    params = [
        _parameter(name.rsplit(".", 1)[-1], f"{LOSS_ARGS}.{name}", rng, f"{file}: params.{name}")
        for name, rng in (spec.get("params") or {}).items()
    ]
    knobs = _training_knobs(file)
    for knob in spec.get("training") or []:
        if knob not in knobs:
            raise ValueError(f"{file}: training knob {knob!r} is not one of {sorted(knobs)}")
        params.append(knobs[knob])
    names = [p.name for p in params]
    if len(set(names)) != len(names):
        raise ValueError(f"{file}: parameter names repeat: {names}")
    return SearchSpace(file, spec["loss"], tuple(params))


def _training_knobs(space: Path) -> dict[str, Parameter]:
    """The shared knobs of a space, from the `training.yaml` beside it (`experiments/spaces/`),
    else, for a space written elsewhere (a derived one), the working folder's or this checkout's."""
    candidates = [space.parent, SPACES_DIR, Path(__file__).resolve().parents[2] / SPACES_DIR]
    files = [folder / f"{TRAINING}.yaml" for folder in candidates]
    file = next((f for f in files if f.is_file()), None)
    if file is None:
        raise FileNotFoundError(f"the shared training knobs file {files[0]} is missing")
    spec = read_yaml(file) or {}
    knobs = {}
    for name, rng in spec.items():
        if not isinstance(rng, dict) or "path" not in rng:
            raise ValueError(f"{file}: knob {name!r} needs a `path:` and a range")
        knobs[name] = _parameter(name, rng["path"], rng, f"{file}: {name}")
    return knobs


def _parameter(name: str, path: str, rng: object, where: str) -> Parameter:
    """A Parameter from a `{low, high[, log][, int]}` or `{choices}` mapping."""
    if not isinstance(rng, dict) or set(rng) - _RANGE_KEYS:
        raise ValueError(
            f"{where}: expected {{low, high[, log][, int]}} or {{choices: [...]}}, got {rng!r}"
        )
    distribution: BaseDistribution
    if "choices" in rng:
        distribution = CategoricalDistribution(rng["choices"])
    else:
        low, high = rng.get("low"), rng.get("high")
        if not isinstance(low, int | float) or not isinstance(high, int | float) or low >= high:
            raise ValueError(f"{where}: needs numbers low < high, got low={low!r} high={high!r}")
        if rng.get("log") and low <= 0:
            raise ValueError(f"{where}: a log range needs low > 0, got {low}")
        log = bool(rng.get("log", False))
        distribution = (
            IntDistribution(int(low), int(high), log=log)
            if rng.get("int")
            else FloatDistribution(float(low), float(high), log=log)
        )
    return Parameter(name, path, distribution)


def _lookup(config: dict, path: str) -> Any:
    """`config["model"]["loss"]["init_args"]["m"]` for `model.loss.init_args.m`; KeyError
    naming the path when the config has no such value."""
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(
                f"the config has no value at {path!r} (stopped at {part!r}); the space names a "
                "parameter this config does not set: is the space for another loss?"
            )
        node = node[part]
    return node


# Names of arguments searched on a log scale whatever their value (inverse temperatures,
# scales): their effect is multiplicative.
LOG_NAMES = ("scale", "gamma", "alpha", "beta", "temperature", "s")
# Structural arguments, never searched.
STRUCTURAL = ("num_classes", "embedding_dim", "in_features", "out_features")


def derived_space(loss: dict, file: Path) -> Path:
    """Write to `file` the default space of a loss without one, and return `file`.

    Derived from the constructor arguments its config gives (`loss`: the parsed config's
    `model.loss`, adapter included): each float argument `v > 0` gets a range around it, on a
    log scale `[v/4, 4v]` for scales (`LOG_NAMES`, or any `v > 1`), else linear `[v/2, 2v]`;
    integers, booleans, zeros and negatives are left as configured. The shared knobs
    `head_lr` and `weight_decay` follow, and `loss_lr` where the loss has parameters of its
    own (it takes `num_classes`: proxies, a classifier, centres).
    """
    params: dict[str, dict[str, Any]] = {}
    has_classes = _derive(loss.get("init_args") or {}, "", params)
    lines = [
        f"# The default space of {loss['class_path']}, derived by `circlebench tune` from the",
        "# constructor arguments of its config (benchmark.tuning.space.derived_space): ranges",
        "# around the configured values. Copy it to experiments/spaces/<config stem>.yaml to",
        "# change it.",
    ]
    spec = {
        "loss": loss["class_path"],
        "params": params,
        "training": ["head_lr", "weight_decay", *(["loss_lr"] if has_classes else [])],
    }
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text("\n".join(lines) + "\n" + yaml.safe_dump(spec, sort_keys=False))
    return file


def _derive(args: dict, prefix: str, params: dict[str, dict[str, Any]]) -> bool:
    """Add the ranges of `args` (below `prefix`) to `params`; whether a `num_classes` is among
    them, nested parts included."""
    has_classes = False
    for name, value in args.items():
        if isinstance(value, dict) and "class_path" in value:
            nested = _derive(value.get("init_args") or {}, f"{prefix}{name}.init_args.", params)
            has_classes = has_classes or nested
        elif name == "num_classes":
            has_classes = True
        elif isinstance(value, float) and value > 0 and name not in STRUCTURAL:
            if name in LOG_NAMES or value > 1:
                params[f"{prefix}{name}"] = {"low": value / 4, "high": value * 4, "log": True}
            else:
                params[f"{prefix}{name}"] = {"low": value / 2, "high": value * 2}
    return has_classes


def describe(space: SearchSpace) -> str:
    """One line per parameter: `name  [low, high] (log)` or its choices, for the terminal."""
    out = []
    for p in space.parameters:
        d = p.distribution
        if isinstance(d, CategoricalDistribution):
            out.append(f"  {p.name}: one of {list(d.choices)}")
        elif isinstance(d, FloatDistribution | IntDistribution):
            out.append(f"  {p.name}: [{d.low:g}, {d.high:g}]{' log' if d.log else ''}  ({p.path})")
    return "\n".join(out)
