"""Leaderboard suites: `experiments/suites/<name>.yaml` (format: docs/leaderboards/suites.md)
parsed into the cells it runs, a grid of experiment configs × seeds grouped by their data.

A cell is one `fit` run, `<group>/<config stem>/seed<seed>`, or for a group that tunes also
`<group>/<config stem>.tuned/seed<seed>` with the committed tuned setting as a second
`--config` (skipped, with a reason, until its loss is tuned). A group with a `floor` also gets
one `test` cell per seed, `<group>/floor/seed<seed>`: that config untrained. A results row
carries its cell's id (`cell_id`: the cell is done) and recipe (`cell_recipe`, `Cell.recipe`:
a row made by an older suite entry or config is stale).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from benchmark.errors import read_yaml
from benchmark.tuning.groups import Group, check_keys, parse_group, seed_list, strings, suite_path
from benchmark.tuning.tuned import group_files

_SUITE_KEYS = {"description", "seeds", "overrides", "output", "threads", "groups", "check_seeds"}
FLOOR = "floor"  # the config stem of a group's floor cells


@dataclass(frozen=True)
class Cell:
    """One run of the grid: `fit` a config, or `test` the group's floor config untrained."""

    group: Group
    config: Path
    seed: int
    overrides: tuple[str, ...]
    command: Literal["fit", "test"] = "fit"
    tuned: bool = False  # the loss as tuned for its group, not as configured

    @property
    def experiment(self) -> str:
        """The leaderboard row this cell contributes to: `<group>/<config stem>` (`floor`),
        `<group>/<config stem>.tuned` for the tuned setting."""
        if self.command == "test":
            return f"{self.group.name}/{FLOOR}"
        return f"{self.group.name}/{self.config.stem}{'.tuned' if self.tuned else ''}"

    @property
    def tuned_config(self) -> Path | None:
        """The tuned setting's config fragment of a tuned cell (repository-relative)."""
        return group_files(self.group.name, self.config.stem).config if self.tuned else None

    def unavailable(self, root: Path) -> str | None:
        """Why this cell cannot run here (its data is absent, its loss not tuned), else None."""
        missing = self.group.missing_data(root)
        if missing is not None:
            return f"data absent: {missing}"
        return self.group.untuned(self.config, root) if self.tuned else None

    @property
    def cell_id(self) -> str:
        return f"{self.experiment}/seed{self.seed}"

    def recipe(self, root: Path, threads: int | None) -> str:
        """What the cell computes, as 16 hex digits: its command, config file (path and
        content), overrides, seed and CPU threads (results depend on them). A row with another
        recipe under this cell's id was made by an older suite entry or config."""

        def content(path: Path) -> str:  # of an absent file: b"" (then the cell fails, saying why)
            file = root / path
            return hashlib.sha256(file.read_bytes() if file.is_file() else b"").hexdigest()

        what: list[object] = [self.command, str(self.config), content(self.config)]
        what += [list(self.overrides), self.seed, threads]
        tuned = self.tuned_config
        if tuned is not None:  # a re-tuned setting is another recipe
            what += [str(tuned), content(tuned)]
        return hashlib.sha256(json.dumps(what).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Suite:
    """A parsed suite file: its groups, seeds and where its outputs go."""

    name: str
    description: str
    seeds: tuple[int, ...]
    output: Path
    threads: int | None
    groups: tuple[Group, ...]
    check_seeds: tuple[int, ...] | None = None  # None: `--check` reruns every cell

    def restricted_to(self, seeds: tuple[int, ...]) -> Suite:
        """This suite with only the cells of `seeds` (in groups that run them)."""

        def kept(chosen: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(s for s in chosen if s in seeds)

        groups = tuple(
            dataclasses.replace(g, seeds=kept(g.seeds if g.seeds is not None else self.seeds))
            for g in self.groups
        )
        return dataclasses.replace(self, seeds=kept(self.seeds), groups=groups)

    def cells(self) -> list[Cell]:
        """Every cell, group by group (its floor first), config by config, seed by seed."""
        cells = []
        for group in self.groups:
            seeds = group.seeds if group.seeds is not None else self.seeds
            if group.floor is not None:
                overrides = group.overrides_for(group.floor)
                cells += [Cell(group, group.floor, s, overrides, "test") for s in seeds]
            for config in group.configs:
                overrides = group.overrides_for(config)
                if group.tuning is None or "default" in group.settings:
                    cells += [Cell(group, config, seed, overrides) for seed in seeds]
                if group.tuning is not None and "tuned" in group.settings:
                    cells += [Cell(group, config, seed, overrides, tuned=True) for seed in seeds]
        return cells


def load_suite(name: str, root: Path = Path("."), seeds: list[int] | None = None) -> Suite:
    """Parse `root/experiments/suites/<name>.yaml`; `seeds` replaces the file's seeds."""
    path = suite_path(name, root)
    spec = read_yaml(path) or {}
    check_keys(spec, _SUITE_KEYS, f"{path}")
    if not spec.get("groups"):
        raise ValueError(f"{path}: no `groups:`; a suite needs at least one group of configs")
    overrides = strings(spec.get("overrides", []), f"{path}: overrides")  # each group's first
    groups = tuple(
        parse_group(gname, gspec, root, path, overrides) for gname, gspec in spec["groups"].items()
    )
    chosen = seed_list(seeds if seeds is not None else spec.get("seeds", [0]), f"{path}: seeds")
    if seeds is not None:  # --seeds replaces every group's seeds too
        groups = tuple(dataclasses.replace(g, seeds=None) for g in groups)
    suite = Suite(
        name=name,
        description=str(spec.get("description", "")).strip(),
        seeds=chosen,
        output=Path(spec.get("output", f"suites/{name}")),
        threads=spec.get("threads"),
        groups=groups,
        check_seeds=seed_list(spec["check_seeds"], f"{path}: check_seeds")
        if "check_seeds" in spec
        else None,
    )
    if suite.threads is not None and (not isinstance(suite.threads, int) or suite.threads < 1):
        raise ValueError(f"{path}: threads must be a positive integer, got {suite.threads!r}")
    ids = [cell.cell_id for cell in suite.cells()]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"{path}: cell ids repeat {duplicates}; give each config a unique name")
    return suite
