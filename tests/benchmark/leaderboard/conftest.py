"""The test Slurm: one cluster for the whole session, started on first use."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from tests.benchmark.leaderboard import slurm_cluster


@pytest.fixture(scope="session")
def slurm() -> Iterator[slurm_cluster.SlurmCluster]:
    """A running one-node Slurm with accounting, its `SLURM_CONF` in the environment of this
    process (so of the jobs it submits); skips, saying why, where it cannot start."""
    why = slurm_cluster.unavailable()
    if why is not None:
        pytest.skip(why)
    cluster = slurm_cluster.start()
    saved = os.environ.get("SLURM_CONF")
    os.environ |= cluster.env
    try:
        with cluster.requeued_jobs_start_at_once():
            yield cluster
    finally:
        # A W&B service that a later test started inherited SLURM_CONF, and the cluster's
        # janitor kills every process that has it: close W&B's connection first, or its
        # exit-time teardown prints a "Connection lost" traceback after the session's results.
        if "wandb" in sys.modules:
            sys.modules["wandb"].teardown()
        cluster.stop()
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
