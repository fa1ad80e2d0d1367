"""The local launcher: a suite's cells in processes on this machine, `jobs` at a time.

A cell is finished when the suite's rows CSV holds a row with its `cell_id`, so an interrupted
suite resumes where it stopped (`cells.unfinished_cells`). Each cell's output goes to
`<logs>/<cell id>.log`; the terminal shows only the progress bar and one line per cell.

Cells run in processes of their own. By default (`fork_runner`) each is forked from a server
process that imported the training stack once: a fresh `python -m benchmark.training.cli`
spends about 10 s importing Lightning, torchvision and timm on the 2-core machine, more than a
frozen-track cell spends training.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from benchmark.leaderboard.cells import (
    CellSettings,
    RunSummary,
    cell_args,
    cell_log,
    has_row,
    redirected_fds,
    suite_lock,
    unfinished_cells,
)
from benchmark.leaderboard.fork_server import fork_server
from benchmark.leaderboard.suite import Cell

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
LOST_STATUS = 255  # what multiprocessing reports when it cannot read a forked child's status
_ACTIVE: set[int] = set()  # process groups of the cells running now (their leaders' pids)
_ACTIVE_LOCK = threading.Lock()


class CellFailedError(RuntimeError):
    """A cell's `fit` exited with an error; its log file says why."""


class StatusLostError(CellFailedError):
    """The fork server lost a cell's exit status: multiprocessing then reports 255. Seen once
    in 345 cells, after the cell had written its row; the row decides (see `_run_one`)."""


def subprocess_runner(args: list[str], log: Path, threads: int | None) -> None:
    """Run `python -m benchmark.training.cli <args>` in a fresh interpreter (no shared state).

    The cell runs in its own process group, which ends with this process: Ctrl-C or SIGTERM
    here ends the whole group, and if this process is killed outright the kernel sends the cell
    SIGKILL (Linux `PR_SET_PDEATHSIG`), so no orphan goes on to append a row later.
    """
    env = dict(os.environ)
    if threads is not None:  # read by torch's OpenMP and MKL pools when they start
        env |= {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    returncode = run_in_own_group([sys.executable, "-m", "benchmark.training.cli", *args], log, env)
    if returncode != 0:
        raise CellFailedError(f"exit status {returncode}")


def fork_runner(args: list[str], log: Path, threads: int | None) -> None:
    """Run `benchmark.training.cli.main(args)` in a process forked from the fork server.

    Same isolation as `subprocess_runner` (a process and process group of its own per cell,
    ended with this process), without importing the training stack again for every cell.
    """
    returncode = run_forked(_cell_main, (args,), log, threads)
    if returncode == LOST_STATUS:
        raise StatusLostError(f"exit status {returncode} (lost by the fork server?)")
    if returncode != 0:
        raise CellFailedError(f"exit status {returncode}")


def run_forked(
    target: Callable[..., object], args: Sequence[object], log: Path, threads: int | None
) -> int:
    """Call `target(*args)` in a child of the fork server (output to `log`, CPU threads
    `threads`, its own process group, killed if this process dies); its exit status."""
    context = fork_server()
    child = context.Process(target=_forked_child, args=(target, tuple(args), str(log), threads))
    child.start()
    assert child.pid is not None
    with _ACTIVE_LOCK:
        _ACTIVE.add(child.pid)
    try:
        child.join()
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE.discard(child.pid)
    return child.exitcode if child.exitcode is not None else -1


def _forked_child(
    target: Callable[..., object], args: tuple[object, ...], log: str, threads: int | None
) -> None:
    """In the forked child: own process group, death with the server, output to `log`."""
    os.setsid()  # a group of its own, so that end_running_cells can end it with its children
    # The server exits when its client (this process's leaderboard) dies, and the cell with it
    # (PR_SET_PDEATHSIG), but only once no process holds the write end of the server's
    # "client alive" pipe, which multiprocessing hands to every child it forks: let go of it.
    server = cast(Any, multiprocessing.forkserver._forkserver)
    if getattr(server, "_forkserver_alive_fd", None) is not None:
        os.close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None
    _die_with_parent()
    _own_wandb_media_folder()
    if threads is not None:  # the server's libraries are loaded: set the pools' sizes directly
        import torch

        torch.set_num_threads(threads)
        os.environ |= {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        target(*args)
    finally:  # multiprocessing ends the child with os._exit: run what an interpreter's exit runs
        atexit._run_exitfuncs()  # (wandb finishes its offline run there)


def _own_wandb_media_folder() -> None:
    """Give this child a W&B media folder of its own. W&B makes one temporary folder for the
    files of tables and images when it is imported (here: by the server) and removes it at exit;
    a child that ran that exit removed it for every later child, whose first table then failed
    to write. Nothing to do where W&B is not loaded, or keeps its media elsewhere."""
    private = sys.modules.get("wandb.sdk.data_types._private")
    media = getattr(private, "MEDIA_TMP", None)
    if isinstance(media, tempfile.TemporaryDirectory):
        media.name = tempfile.mkdtemp("wandb-media")  # what its exit-time cleanup removes


def _cell_main(args: list[str]) -> None:
    from benchmark.training.cli import main as cli_main

    cli_main(args)


def run_in_own_group(command: list[str], log: Path, env: dict[str, str]) -> int:
    """Run `command` (output to `log`) in a new process group that dies with this process;
    its exit status."""
    with log.open("w") as out:
        cell = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        with _ACTIVE_LOCK:
            _ACTIVE.add(cell.pid)
        try:
            return cell.wait()
        finally:
            with _ACTIVE_LOCK:
                _ACTIVE.discard(cell.pid)


def end_running_cells() -> None:
    """SIGKILL the process group of every cell still running (on Ctrl-C or an error here)."""
    with _ACTIVE_LOCK:
        for pid in _ACTIVE:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux for SIGKILL when the parent dies."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def in_process_runner(args: list[str], log: Path, threads: int | None) -> None:
    """Call `benchmark.training.cli.main(args)` in this interpreter, its output sent to `log`."""
    import torch

    from benchmark.training.cli import main as cli_main

    default_threads = torch.get_num_threads()
    with log.open("w") as out, redirected_fds(out.fileno()):
        try:
            torch.set_num_threads(threads or default_threads)
            cli_main(args)
        except SystemExit as exit_:
            if exit_.code not in (None, 0):
                raise CellFailedError(f"exit status {exit_.code}") from exit_
        except Exception as error:
            raise CellFailedError(f"{type(error).__name__}: {error}") from error
        finally:
            torch.set_num_threads(default_threads)


def terminal_console() -> Console:
    """A console on a duplicate of stdout, so the progress bar survives `redirected_fds`."""
    return Console(file=os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1))


def run_cells(
    cells: list[Cell], settings: CellSettings, *, root: Path, console: Console, jobs: int = 1
) -> RunSummary:
    """Run every unfinished cell whose data is present; never stops at a failing cell.

    Args:
        jobs: cells run at once (each with the suite's threads); 1 runs them one after another.
    """
    summary = RunSummary()
    with suite_lock(settings.work_dir):
        _run_unfinished(cells, settings, summary, root=root, console=console, jobs=jobs)
    return summary


def _run_unfinished(
    cells: list[Cell],
    settings: CellSettings,
    summary: RunSummary,
    *,
    root: Path,
    console: Console,
    jobs: int,
) -> None:
    todo, recipes = unfinished_cells(cells, settings, summary, root=root, console=console)
    # Floors last: a floor only tests, so it is shorter than any cell that trains (and tests) in
    # its group, and with `jobs` > 1 the short cells at the end fill the time the last long one
    # would otherwise run alone (the default job ended with one core idle for 8 s of 184).
    todo.sort(key=lambda cell: cell.command == "test")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("cells", total=len(cells), completed=len(cells) - len(todo))

        def run(cell: Cell) -> None:
            progress.update(task, description=cell.cell_id)
            _run_one(cell, recipes[cell.cell_id], settings, summary, progress.console)
            progress.advance(task)

        pool = ThreadPoolExecutor(max_workers=jobs)  # its threads only wait on processes
        try:
            list(pool.map(run, todo))
        except BaseException:  # Ctrl-C: end the cells now, not when they finish
            end_running_cells()
            raise
        finally:
            pool.shutdown(cancel_futures=True)
        progress.update(task, description="cells")


def _run_one(
    cell: Cell, recipe: str, settings: CellSettings, summary: RunSummary, console: Console
) -> None:
    log = cell_log(settings.work_dir, cell.cell_id)
    log.parent.mkdir(parents=True, exist_ok=True)
    runs = settings.work_dir / "runs"
    args = cell_args(
        cell, settings.rows_csv, runs, wandb=settings.wandb, suite=settings.suite, recipe=recipe
    )
    start = time.perf_counter()
    try:
        try:
            settings.runner(args, log, settings.threads)
        except StatusLostError as error:  # the row, written last, says whether the cell ran
            if not has_row(settings.rows_csv, cell.cell_id):
                raise
            console.print(f"[yellow]note[/] {cell.cell_id}: {error}, but its row was written")
        if not has_row(settings.rows_csv, cell.cell_id):
            raise CellFailedError(f"{cell.command} ended but wrote no row to {settings.rows_csv}")
    except CellFailedError as error:
        summary.failed[cell.cell_id] = f"{error}; log: {log}"
        tail = log.read_text(errors="replace").splitlines()[-15:] if log.is_file() else []
        console.print(f"[red]FAIL[/] {cell.cell_id}: {error}")
        console.print("\n".join(f"    {line}" for line in tail), markup=False, highlight=False)
        return
    seconds = time.perf_counter() - start
    summary.ran[cell.cell_id] = seconds
    console.print(f"[green]done[/] {cell.cell_id} in {seconds:.0f} s")
