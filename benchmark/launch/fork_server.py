"""The fork server that leaderboard cells and tuning folds are forked from.

It imports the training stack once and forks a process per run (`forked.run_forked`).
This module imports nothing heavy, so `circlebench leaderboard` can start the server first and
let it import while the command imports its own modules (`start_fork_server`).
"""

from __future__ import annotations

import functools
import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
from typing import cast

# What the fork server's runs need, imported once there (`preload`, which pauses and then
# freezes the garbage collector around them). `wandb.init` imports `wandb.sdk.launch` (and
# W&B's public API under it) on every call, and numba sets itself up at a run's first
# evaluation: both are paid once here instead.
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
    """A fork server that has imported the cells' code (it starts with the first cell, or with
    `start_fork_server`).

    The server is single-threaded and computes nothing, so forking it is safe where forking
    this process (whose pool threads wait on cells) would not be.
    """
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return cast(multiprocessing.context.ForkServerContext, context)


def start_fork_server() -> None:
    """Start the server now, in the background; a no-op where there is no fork server."""
    if fork_available():
        fork_server()
        multiprocessing.forkserver.ensure_running()
