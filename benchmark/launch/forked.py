"""A unit of work (`Work`) in a child of the fork server: its own process group, threads and log.

The child ends with `os._exit`, without exit functions: what a run opens it closes itself (the
training CLI finishes its W&B runs), and nothing it inherited from the server is removed.
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

# What multiprocessing reports when the fork server loses a child's exit status (rarely, after
# the run wrote its result): then the result, written last and atomically, decides.
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
    """`reported`, but 0 where that is `LOST_STATUS` and `work.done()`; the log then says so."""
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
    # The server (and with it the child) exits when its client dies, but only once no process
    # holds the write end of its "client alive" pipe, which every child inherits: let go of it.
    # multiprocessing's one private name here, read without a default: a rename upstream fails
    # every child loudly (tests/benchmark/launch/test_forked.py) instead of keeping the pipe.
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
