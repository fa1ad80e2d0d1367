"""A call in a child of the fork server: its own process group, CPU threads and log.

The child lets go of what it inherits from the server and would otherwise share with every
other child: the server's "client alive" pipe (`_forked_child`). multiprocessing ends a child
with `os._exit`, without the interpreter's exit functions: what a run opens it closes itself
(the training CLI finishes its W&B runs, `loggers.finish_wandb_runs`), and nothing a child
inherited from the server (W&B's media folder, made at import) is removed by the child's exit.
"""

from __future__ import annotations

import multiprocessing.forkserver
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

from benchmark.launch.fork_server import fork_server
from benchmark.launch.processes import die_with_parent, tracked, use_threads

# What multiprocessing reports when the fork server loses a child's exit status: seen once in
# 345 leaderboard cells and once in 30 trials of a study, each time after the run had written
# its result. Then the result, written last and atomically, decides (`succeeded`).
LOST_STATUS = 255


def run_forked(
    target: Callable[..., object], args: Sequence[object], log: Path, threads: int | None
) -> int:
    """Call `target(*args)` in a child of the fork server (output to `log`, CPU threads
    `threads`, its own process group, killed if this process dies); its exit status."""
    context = fork_server()
    child = context.Process(target=_forked_child, args=(target, tuple(args), str(log), threads))
    child.start()
    assert child.pid is not None
    with tracked(child.pid):
        child.join()
    return child.exitcode if child.exitcode is not None else -1


def succeeded(status: int, wrote_result: Callable[[], bool]) -> bool:
    """Whether a forked run succeeded: exit status 0, or `LOST_STATUS` with its result written
    (`wrote_result()`), since the result is the last thing a run writes."""
    return status == 0 or (status == LOST_STATUS and wrote_result())


def _forked_child(
    target: Callable[..., object], args: tuple[object, ...], log: str, threads: int | None
) -> None:
    """In the forked child: own process group, death with the server, output to `log`."""
    os.setsid()  # a group of its own, so that processes.end_running can end it with its children
    # The server exits when its client (the process that runs the forks) dies, and the child
    # with it (PR_SET_PDEATHSIG), but only once no process holds the write end of the server's
    # "client alive" pipe, which multiprocessing hands to every child it forks: let go of it.
    server = cast(Any, multiprocessing.forkserver._forkserver)
    if getattr(server, "_forkserver_alive_fd", None) is not None:
        os.close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None
    die_with_parent()
    use_threads(threads)  # the server's libraries are loaded: set the pools' sizes directly
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    target(*args)
