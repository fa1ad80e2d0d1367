"""Runs in process groups of their own, their CPU threads and their output. `end_running` ends
the groups on Ctrl-C or an error here; if this process is killed outright, Linux sends each run
SIGKILL (`PR_SET_PDEATHSIG`), so no orphan goes on to write results later."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from pathlib import Path
from typing import TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
LOG_TAIL = 15  # lines of a failed run's log shown in the terminal
_ACTIVE: set[int] = set()  # process groups of the runs going on now (their leaders' pids)
_ACTIVE_LOCK = threading.Lock()
T = TypeVar("T")


@contextlib.contextmanager
def tracked(pid: int) -> Iterator[None]:
    """Count the process group led by `pid` among the running ones meanwhile (`end_running`)."""
    with _ACTIVE_LOCK:
        _ACTIVE.add(pid)
    try:
        yield
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE.discard(pid)


def run_in_own_group(command: list[str], log: Path, env: dict[str, str]) -> int:
    """Run `command` (output to `log`) in a new process group that dies with this process;
    its exit status."""
    with log.open("w") as out:
        run = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        with tracked(run.pid):
            return run.wait()


def end_running() -> None:
    """SIGKILL the process group of every run still going on (on Ctrl-C or an error here)."""
    with _ACTIVE_LOCK:
        for pid in _ACTIVE:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def on_threads(
    call: Callable[[T], object],
    items: Iterable[T],
    workers: int,
    stop: Callable[[], object] = lambda: None,
) -> None:
    """call(item) for each item on `workers` threads that wait on runs. On Ctrl-C or an error,
    `stop()` and `end_running()` before it propagates: the runs end now, not when they finish."""
    pool = futures.ThreadPoolExecutor(max_workers=workers)
    try:
        pending = {pool.submit(call, item) for item in items}
        while pending:  # in slices, so that Ctrl-C reaches this thread; the first error ends all
            done, pending = futures.wait(pending, 0.5, futures.FIRST_EXCEPTION)
            for future in done:
                future.result()
    except BaseException:
        stop()
        end_running()
        raise
    finally:
        pool.shutdown(cancel_futures=True)


def die_with_parent() -> None:
    """In the child: ask Linux for SIGKILL when the parent dies."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def thread_environment(threads: int | None) -> dict[str, str]:
    """The variables that size torch's OpenMP and MKL pools to `threads` when they start; none
    for None (torch's default)."""
    if threads is None:
        return {}
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def use_threads(threads: int | None) -> None:
    """Give this process `threads` CPU threads (None: leave them): torch's pools now, since its
    libraries are loaded, and any pool that starts later through the environment."""
    if threads is None:
        return
    import torch

    torch.set_num_threads(threads)
    os.environ |= thread_environment(threads)


@contextlib.contextmanager
def redirected_fds(target: int) -> Iterator[None]:
    """Send this process's stdout and stderr to the file descriptor `target` meanwhile (at the
    descriptor level, so that C extensions and logging handlers follow)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    for fd in saved:
        os.dup2(target, fd)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)


def terminal_console() -> Console:
    """A console on a duplicate of stdout, so the progress bar survives `redirected_fds`."""
    return Console(file=os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1))


def progress_bar(console: Console) -> Progress:
    """The bar of a launcher's runs on `console`: what runs, a bar, done of all, time elapsed."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    return Progress(*columns, TimeElapsedColumn(), console=console)


def print_failure(console: Console, name: str, why: str, log: Path) -> None:
    """`FAIL <name>: <why>`, then the last `LOG_TAIL` lines of the run's `log`, indented."""
    tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL:] if log.is_file() else []
    console.print(f"[red]FAIL[/] {name}: {why}", soft_wrap=True)
    console.print("\n".join(f"    {line}" for line in tail), markup=False, highlight=False)
