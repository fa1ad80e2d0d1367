"""The fork server that leaderboard cells and tuning folds are forked from (`forked.run_forked`):
it imports the training stack once. This module imports nothing heavy (`start_fork_server`)."""

from __future__ import annotations

import functools
import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
from typing import cast

# What the server's runs need, imported once there (`preload`). `wandb.init` imports
# `wandb.sdk.launch` on every call, and numba sets itself up at a run's first evaluation.
SERVER_IMPORTS = [
    "benchmark.training.cli",
    "wandb.sdk.launch",
    "benchmark.evaluation.numba_target",
    "losses._circle_cpu",  # the Circle loss's compiled passes (`import losses` leaves them out)
]
PRELOAD = ["benchmark.launch.preload"]  # what multiprocessing imports in the server


def fork_available() -> bool:
    """Whether this platform has multiprocessing's fork server (Linux and macOS do)."""
    return "forkserver" in multiprocessing.get_all_start_methods()


@functools.cache
def fork_server() -> multiprocessing.context.ForkServerContext:
    """The fork server (started by the first fork, or `start_fork_server`): single-threaded and
    idle, so safe to fork where this process, whose pool threads wait on cells, is not."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return cast(multiprocessing.context.ForkServerContext, context)


def start_fork_server() -> None:
    """Start the server now, in the background; a no-op where there is no fork server."""
    if fork_available():
        fork_server()
        multiprocessing.forkserver.ensure_running()
