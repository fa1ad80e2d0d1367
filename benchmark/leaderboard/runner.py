"""The local launcher: a suite's unfinished cells (`cells.unfinished_cells`) in processes on this
machine, `jobs` at a time, each with its log (`cells.cell_log`); the terminal shows a progress
bar and one line per cell. By default (`fork_runner`) a cell is forked from a server that
imported the training stack once, which a fresh interpreter would spend longer on than a
frozen-track cell spends training.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from rich.console import Console

from benchmark.launch.forked import run_forked
from benchmark.launch.processes import (
    on_threads,
    print_failure,
    progress_bar,
    redirected_fds,
    run_in_own_group,
    thread_environment,
)
from benchmark.leaderboard.cells import (
    CellRunner,
    CellSettings,
    CellWork,
    RunSummary,
    cell_log,
    suite_lock,
    unfinished_cells,
)
from benchmark.leaderboard.suite import Cell


class CellFailedError(RuntimeError):
    """A cell's `fit` exited with an error; its log file says why."""


def subprocess_runner(cell: CellWork, log: Path, threads: int | None) -> None:
    """Run `python -m benchmark.training.cli <args>` in a fresh interpreter, in a process group
    that ends with this process (`processes.run_in_own_group`)."""
    env = dict(os.environ) | thread_environment(threads)
    command = [sys.executable, "-m", "benchmark.training.cli", *cell.args]
    returncode = run_in_own_group(command, log, env)
    if returncode != 0:
        raise CellFailedError(f"exit status {returncode}")


def fork_runner(cell: CellWork, log: Path, threads: int | None) -> None:
    """Run the cell in a process forked from the fork server, isolated as `subprocess_runner`
    but without importing the training stack again (a lost status: `forked.exit_status`)."""
    returncode = run_forked(cell, log, threads)
    if returncode != 0:
        raise CellFailedError(f"exit status {returncode}")


def in_process_runner(cell: CellWork, log: Path, threads: int | None) -> None:
    """Run the cell (`benchmark.training.cli.main(args)`) in this interpreter, its output sent
    to `log`."""
    import torch

    default_threads = torch.get_num_threads()
    with log.open("w") as out, redirected_fds(out.fileno()):
        try:
            torch.set_num_threads(threads or default_threads)
            cell()
        except SystemExit as exit_:
            if exit_.code not in (None, 0):
                raise CellFailedError(f"exit status {exit_.code}") from exit_
        except Exception as error:
            raise CellFailedError(f"{type(error).__name__}: {error}") from error
        finally:
            torch.set_num_threads(default_threads)


def run_cells(
    cells: list[Cell],
    settings: CellSettings,
    *,
    root: Path,
    console: Console,
    runner: CellRunner,
    jobs: int,
) -> RunSummary:
    """Run every unfinished cell whose data is present with `runner`, `jobs` at a time (each
    with the suite's threads); never stops at a failing cell."""
    summary = RunSummary()
    with suite_lock(settings.work_dir):
        todo, recipes = unfinished_cells(cells, settings, summary, root=root, console=console)
        # Floors (test only, the shortest cells) last: with `jobs` > 1 they fill the time the
        # last long cell would otherwise run alone.
        todo.sort(key=lambda cell: cell.command == "test")
        with progress_bar(console) as progress:
            bar = progress.add_task("cells", total=len(cells), completed=len(cells) - len(todo))

            def run(cell: Cell) -> None:
                progress.update(bar, description=cell.cell_id)
                log = cell_log(settings.work_dir, cell.cell_id)
                log.parent.mkdir(parents=True, exist_ok=True)
                work = settings.work(cell, recipes[cell.cell_id])
                start = time.perf_counter()
                try:
                    runner(work, log, settings.threads)
                    if not work.done():
                        raise CellFailedError(
                            f"{cell.command} ended but wrote no row to {settings.rows_csv}"
                        )
                    seconds = time.perf_counter() - start
                    summary.ran[cell.cell_id] = seconds
                    progress.console.print(f"[green]done[/] {cell.cell_id} in {seconds:.0f} s")
                except CellFailedError as error:
                    summary.failed[cell.cell_id] = f"{error}; log: {log}"
                    print_failure(progress.console, cell.cell_id, str(error), log)
                progress.advance(bar)

            on_threads(run, todo, jobs)
            progress.update(bar, description="cells")
    return summary
