"""The groups of a suite file (`experiments/suites/<name>.yaml`, described in
`benchmark.leaderboard.suite`): the configs, overrides and data of each, and the tuning budget a
group declares for its losses, which `circlebench tune --suite S --group G` spends."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from benchmark.errors import read_yaml
from benchmark.tuning.experiment import Budget
from benchmark.tuning.tuned import group_files, recipe

SUITES_DIR = Path("experiments/suites")
_GROUP_KEYS = {"configs", "overrides", "config_overrides", "requires", "paper_dataset", "floor"}
_GROUP_KEYS |= {"seeds", "tuning", "settings"}
SETTINGS = ("default", "tuned")  # a loss as configured, and as tuned for its group


@dataclass(frozen=True)
class Group:
    """Experiments on one dataset setting; `requires`: the paths that must exist to run them
    (the data, and local weights files where the configs name them)."""

    name: str
    configs: tuple[Path, ...]
    overrides: tuple[str, ...]  # the suite's, then the group's: what its cells and `tune` run
    config_overrides: dict[str, tuple[str, ...]]
    requires: tuple[Path, ...]
    paper_dataset: str | None
    floor: Path | None = None
    seeds: tuple[int, ...] | None = None  # None: the suite's
    tuning: Budget | None = None  # the budget of every loss; None: default settings only
    suite: str = ""  # the suite that declares it, named in the `tune` command it suggests
    settings: tuple[str, ...] = SETTINGS  # which of a tuned group's settings get cells

    def overrides_for(self, config: Path) -> tuple[str, ...]:
        """The group's overrides, then those of this config."""
        return (*self.overrides, *self.config_overrides.get(config.stem, ()))

    def missing_data(self, root: Path) -> Path | None:
        """The first required path (resolved against `root`) that is absent, else None."""
        for path in self.requires:
            if not (root / path).exists():
                return (root / path).resolve()
        return None

    @property
    def requires_text(self) -> str:
        """The required paths as one string for tables: `data/sop, weights/x.safetensors`."""
        return ", ".join(str(p) for p in self.requires)

    def untuned(self, config: Path, root: Path) -> str | None:
        """Why the tuned setting of `config` cannot be used (absent, or tuned for another
        config, overrides or budget), else None."""
        files = group_files(self.name, config.stem, root)
        summary = files.read_summary()
        command = f"circlebench tune --suite {self.suite} --group {self.name} --loss {config.stem}"
        if summary is None or not files.config.is_file():
            return f"not tuned yet: run `{command}`"
        if summary["tuned_for"] != recipe(config, self.overrides_for(config), root):
            return f"{files.summary} was tuned for another config or overrides: run `{command}`"
        if self.tuning is not None and summary["budget"] != asdict(self.tuning):
            return f"{files.summary} was tuned with another budget: run `{command}`"
        return None


def suite_names(root: Path = Path(".")) -> list[str]:
    """Names of the suites defined under `root/experiments/suites/`."""
    return sorted(p.stem for p in (root / SUITES_DIR).glob("*.yaml"))


def suite_path(name: str, root: Path = Path(".")) -> Path:
    """`root/experiments/suites/<name>.yaml`; a KeyError naming the suites if it is absent."""
    path = root / SUITES_DIR / f"{name}.yaml"
    if not path.is_file():
        raise KeyError(
            f"unknown suite {name!r}; choose one of {suite_names(root)} "
            f"(read from {(root / SUITES_DIR).resolve()}; run from the repository root)"
        )
    return path


def suite_groups(name: str, root: Path = Path(".")) -> tuple[Group, ...]:
    """The groups of suite `name`, parsed as the leaderboard parses them."""
    path = suite_path(name, root)
    spec = read_yaml(path) or {}
    suite_overrides = strings(spec.get("overrides", []), f"{path}: overrides")
    return tuple(
        parse_group(g, gspec, root, path, suite_overrides)
        for g, gspec in (spec.get("groups") or {}).items()
    )


def parse_group(
    name: str, spec: dict, root: Path, path: Path, suite_overrides: tuple[str, ...] = ()
) -> Group:
    """Group `name` of the suite file `path`; its overrides follow the suite's, as in a cell's
    `fit` line, so that `tune` trains what the cells train."""
    where = f"{path}: group {name!r}"
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: expected a mapping with `configs:`, got {spec!r}")
    check_keys(spec, _GROUP_KEYS, where)
    patterns = spec.get("configs")
    if not patterns:
        raise ValueError(f"{where}: `configs:` is missing; give a glob or a list of YAML paths")
    configs: list[Path] = []
    for pattern in [patterns] if isinstance(patterns, str) else patterns:
        matches = sorted(root.glob(pattern)) if any(c in pattern for c in "*?[") else []
        if not matches and (root / pattern).is_file():
            matches = [root / pattern]
        if not matches:
            raise FileNotFoundError(f"{where}: no config matches {pattern!r} under {root}")
        configs += [m.relative_to(root) for m in matches]
    per_config = spec.get("config_overrides") or {}
    unknown = sorted(set(per_config) - {c.stem for c in configs})
    if unknown:
        raise ValueError(
            f"{where}: config_overrides names {unknown}, which are not among its configs "
            f"{sorted(c.stem for c in configs)}"
        )
    requires = spec.get("requires") or []
    if not isinstance(requires, list):
        requires = [requires]
    if not all(isinstance(r, str) and r for r in requires):
        raise ValueError(
            f"{where}: requires must be a path or a list of paths, got {spec['requires']!r}"
        )
    chosen = spec.get("settings", SETTINGS)
    settings = tuple(chosen) if isinstance(chosen, (list, tuple)) else ()
    if "settings" in spec and (
        not settings or not set(settings) <= set(SETTINGS) or "tuning" not in spec
    ):
        raise ValueError(
            f"{where}: settings must be a non-empty list from {list(SETTINGS)}, beside a "
            f"`tuning:` budget; got {chosen!r}"
        )
    floor = spec.get("floor")
    if floor is not None and not (root / floor).is_file():
        raise FileNotFoundError(f"{where}: floor config {floor!r} not found under {root}")
    return Group(
        name=name,
        configs=tuple(configs),
        overrides=(*suite_overrides, *strings(spec.get("overrides", []), f"{where}: overrides")),
        config_overrides={
            stem: strings(value, f"{where}: config_overrides.{stem}")
            for stem, value in per_config.items()
        },
        requires=tuple(Path(r) for r in requires),
        paper_dataset=spec.get("paper_dataset"),
        floor=Path(floor) if floor is not None else None,
        seeds=seed_list(spec["seeds"], f"{where}: seeds") if "seeds" in spec else None,
        tuning=_budget(spec["tuning"], f"{where}: tuning") if "tuning" in spec else None,
        suite=path.stem,
        settings=settings,
    )


def _budget(value: object, where: str) -> Budget:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a mapping like {{trials: 30, folds: 3}}, got {value!r}")
    try:
        return Budget(**value)
    except TypeError as error:  # an unknown key
        raise ValueError(f"{where}: {error}; keys: {list(Budget.__dataclass_fields__)}") from None
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None


def seed_list(value: object, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(s, int) for s in value):
        raise ValueError(f"{where} must be a non-empty list of integers, got {value!r}")
    return tuple(value)


def check_keys(spec: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")


def strings(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where} must be a list of command-line strings, got {value!r}")
    return tuple(value)
