"""What the launchers of a suite's cells (`runner` here, `slurm_cells` on Slurm) share: a cell's
command line and log, which cells are unfinished, the suite lock, the run summary."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from rich.console import Console

from benchmark.leaderboard.suite import Cell
from benchmark.training.rows import drop_rows, read_results

if TYPE_CHECKING:
    import pandas as pd

# (the cell, log file, CPU threads or None for torch's default) -> None;
# raises CellFailedError.
CellRunner = Callable[["CellWork", Path, "int | None"], None]


@dataclass(frozen=True)
class CellWork:
    """One cell's `circlebench fit|test` (`cell_args`) as a unit of work (`forked.Work`): done
    once the rows CSV holds its row, the last thing a run writes."""

    args: list[str]
    rows_csv: Path
    cell_id: str

    def __call__(self) -> None:
        from benchmark.training.cli import main as cli_main

        cli_main(self.args)

    def done(self) -> bool:
        return self.cell_id in row_recipes(self.rows_csv)


class Launcher(Protocol):
    """Runs a suite's unfinished cells somewhere (`runner.run_cells` here, with its runner and
    `jobs`; `slurm_cells.run_cells_on_slurm` on a cluster) and says what became of each."""

    def __call__(
        self, cells: list[Cell], settings: CellSettings, *, root: Path, console: Console
    ) -> RunSummary: ...


@dataclass
class RunSummary:
    """What happened to each cell: run (with seconds), resumed, skipped (reason) or failed."""

    ran: dict[str, float] = field(default_factory=dict)
    resumed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    # The numerics fingerprint of the machines that ran the cells where they are not this one
    # (Slurm nodes); None: this machine's.
    numerics: str | None = None


def cell_args(
    cell: Cell,
    rows_csv: Path,
    run_root: Path,
    *,
    wandb: bool = True,
    suite: str = "",
    recipe: str = "",
) -> list[str]:
    """The `circlebench fit|test` command line of one cell; its run folder goes under `run_root`,
    its W&B config records `suite` and its row `recipe`; a tuned cell adds its tuned setting and
    the budget it was tuned with."""
    config, tuning = cell.tuned_config, cell.group.tuning
    tuned = (
        ["--config", str(config), "--tuning", tuning.describe()]
        if config is not None and tuning is not None
        else []
    )
    return [
        cell.command,
        *("--config", str(cell.config), "--seed_everything", str(cell.seed)),
        *("--results_csv", str(rows_csv), "--cell_id", cell.cell_id),
        *(["--cell_recipe", recipe] if recipe else []),
        *(["--suite", suite] if suite else []),
        f"--trainer.default_root_dir={run_root}",
        f"--wandb={str(wandb).lower()}",
        *cell.overrides,
        *tuned,  # after every override, so that the tuned values win
    ]


@dataclass(frozen=True)
class CellSettings:
    """How every cell of one suite run is run and where it writes."""

    rows_csv: Path
    work_dir: Path
    wandb: bool = True
    threads: int | None = None
    suite: str = ""

    @property
    def run_root(self) -> Path:
        """Every cell's `--trainer.default_root_dir`, where a restarted cell finds its run."""
        return self.work_dir / "runs"

    def work(self, cell: Cell, recipe: str, extra: Sequence[str] = ()) -> CellWork:
        """The cell's `CellWork` in this suite run, `extra` options (a launcher's) appended."""
        args = cell_args(
            cell, self.rows_csv, self.run_root, wandb=self.wandb, suite=self.suite, recipe=recipe
        )
        return CellWork([*args, *extra], self.rows_csv, cell.cell_id)


@contextlib.contextmanager
def suite_lock(work_dir: Path) -> Iterator[None]:
    """Hold `<work_dir>/leaderboard.lock` while a suite runs: a second command on the same suite
    would train every cell twice and overwrite the first one's logs, so it is refused."""
    work_dir.mkdir(parents=True, exist_ok=True)
    with open(work_dir / "leaderboard.lock", "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            raise SystemExit(
                f"another leaderboard command is running this suite ({lock.read().strip()}, "
                f"lock {work_dir / 'leaderboard.lock'}); wait for it to finish or stop it"
            ) from None
        lock.truncate(0)
        lock.write(f"pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        lock.flush()
        yield


def unfinished_cells(
    cells: list[Cell], settings: CellSettings, summary: RunSummary, *, root: Path, console: Console
) -> tuple[list[Cell], dict[str, str]]:
    """The cells to run now, and every cell's recipe. Stale rows (another recipe) of cells whose
    data is present are removed; `summary` records cells with a row as resumed and cells that cannot
    run (`Cell.unavailable`) as skipped."""
    recorded = row_recipes(settings.rows_csv)
    recipes = {cell.cell_id: cell.recipe(root, settings.threads) for cell in cells}
    unavailable = {cell.cell_id: cell.unavailable(root) for cell in cells}
    # A cell whose data is absent keeps its row; one whose tuning is outdated loses it (and is
    # skipped until tuned again): its row was made by a setting that no longer holds.
    present = {cell.cell_id for cell in cells if cell.group.missing_data(root) is None}
    stale = {c for c, r in recorded.items() if r and c in present and r != recipes[c]}
    if stale:
        drop_rows(settings.rows_csv, stale)
        console.print(
            f"[yellow]stale[/] {len(stale)} row(s) made before their cell's suite entry or "
            f"config changed, removed to run again: {', '.join(sorted(stale)[:5])}"
            + (", ..." if len(stale) > 5 else "")
        )
    done = set(recorded) - stale
    todo = []
    for cell in cells:
        why = unavailable[cell.cell_id]
        if cell.cell_id in done:
            summary.resumed.append(cell.cell_id)
        elif why is not None:
            summary.skipped[cell.experiment] = why
            console.print(f"[yellow]skip[/] {cell.cell_id}: {why}")
        else:
            todo.append(cell)
    return todo, recipes


def row_recipes(rows_csv: Path) -> dict[str, str]:
    """Cell id -> the recipe (`Cell.recipe`) its row in the rows CSV was made by, the latest row
    of a cell winning; "" for a row made before rows recorded recipes, which counts as made by
    the cell's recipe now (nothing says otherwise)."""
    rows = read_results(rows_csv)
    made_by = rows["cell_recipe"] if "cell_recipe" in rows else [""] * len(rows)
    return dict(zip(rows["cell_id"], made_by, strict=True))


def suite_rows(rows_csv: Path, cells: Sequence[Cell]) -> pd.DataFrame:
    """The rows of `rows_csv` that `cells` made (other suites' cells may share the file), in
    the suite's order, a rerun cell's rows in theirs: what `aggregate_rows` takes first (a
    group's Circle reference) then never depends on which cell finished first."""
    rows = read_results(rows_csv)
    order = {cell.cell_id: i for i, cell in enumerate(cells)}
    rows = rows[rows["cell_id"].isin(order)]
    return rows.sort_values("cell_id", key=lambda ids: ids.map(order), kind="stable")


def cell_log(work_dir: Path, cell_id: str) -> Path:
    """Where a cell's output goes: `<work_dir>/logs/<cell id with / as __>.log`."""
    return work_dir / "logs" / f"{cell_id.replace('/', '__')}.log"
