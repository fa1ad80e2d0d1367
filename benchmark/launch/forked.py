"""A unit of work in a child of the fork server: its own process group, CPU threads and log.

A unit (`Work`: a leaderboard cell, a tuning fold) is picklable, runs when called in the
child, and says from here whether its result exists (`done`): that answer, not the exit status,
decides a run whose status the fork server lost (`exit_status`).

The child lets go of what it inherits from the server and would otherwise share with every
other child: the server's "client alive" pipe (`_forked_child`). multiprocessing ends a child
with `os._exit`, without the interpreter's exit functions: what a run opens it closes itself
(the training CLI finishes its W&B runs, `loggers.finish_wandb_runs`), and nothing a child
inherited from the server (W&B's media folder, made at import) is removed by the child's exit.
"""

from __future__ import annotations

import multiprocessing.forkserver
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from benchmark.launch.fork_server import fork_server
from benchmark.launch.processes import die_with_parent, tracked, use_threads

# What multiprocessing reports when the fork server loses a child's exit status: seen once in
# 345 leaderboard cells and once in 30 trials of a study, each time after the run had written
# its result. Then the result, written last and atomically, decides (`exit_status`).
LOST_STATUS = 255


class Work(Protocol):
    """A picklable unit of work: called in the child, it does the work and writes its result
    last; `done()`, called in this process, is whether that result exists."""

    def __call__(self) -> object: ...

    def done(self) -> bool: ...


@dataclass(frozen=True)
class Call:
    """`target(*args)` as `Work` without a result to look for: a lost status stays a failure."""

    target: Callable[..., object]
    args: tuple[object, ...] = ()

    def __call__(self) -> object:
        return self.target(*self.args)

    def done(self) -> bool:
        return False


def run_forked(work: Work, log: Path, threads: int | None) -> int:
    """Call `work()` in a child of the fork server (output to `log`, CPU threads `threads`, its
    own process group, killed if this process dies); its exit status (`exit_status`)."""
    context = fork_server()
    child = context.Process(target=_forked_child, args=(work, str(log), threads))
    child.start()
    assert child.pid is not None
    with tracked(child.pid):
        child.join()
    return exit_status(child.exitcode if child.exitcode is not None else -1, work, log)


def exit_status(reported: int, work: Work, log: Path) -> int:
    """The exit status of a forked run of `work`: the `reported` one, but 0 where that is
    `LOST_STATUS` and `work.done()`, since its result is the last thing a run writes; the
    log then ends with a line that says so."""
    if reported != LOST_STATUS or not work.done():
        return reported
    with log.open("a") as out:
        print(
            f"[circlebench] exit status {reported} (lost by the fork server?), but the result "
            "was written: the run counts as done",
            file=out,
        )
    return 0


def _forked_child(work: Work, log: str, threads: int | None) -> None:
    """In the forked child: own process group, death with the server, output to `log`."""
    os.setsid()  # a group of its own, so that processes.end_running can end it with its children
    # The server exits when its client (the process that runs the forks) dies, and the child
    # with it (PR_SET_PDEATHSIG), but only once no process holds the write end of the server's
    # "client alive" pipe, which multiprocessing hands to every child it forks: let go of it.
    # The stdlib's one private name here: read without a default, so that an upstream rename
    # fails every child loudly (tests/benchmark/launch/test_forked.py) instead of leaving the
    # pipe open and the children alive after their client.
    server = cast(Any, multiprocessing.forkserver._forkserver)
    os.close(server._forkserver_alive_fd)
    server._forkserver_alive_fd = None
    die_with_parent()
    use_threads(threads)  # the server's libraries are loaded: set the pools' sizes directly
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    work()
