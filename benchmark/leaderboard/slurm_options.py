"""`circlebench leaderboard`'s launcher options: the shared ones (`launch.slurm_options`) and
`--status`, and the launcher they choose for a suite's cells."""

from __future__ import annotations

import argparse
import functools

from benchmark.launch.slurm_options import add_launcher_argument, add_slurm_request, slurm_options
from benchmark.leaderboard.cells import Launcher
from benchmark.leaderboard.slurm_cells import run_cells_on_slurm
from benchmark.leaderboard.suite import Suite


def add_slurm_arguments(parser: argparse.ArgumentParser) -> None:
    """`--launcher`, `--status` and the Slurm request's options."""
    add_launcher_argument(parser, "cells")
    parser.add_argument(
        "--status",
        action="store_true",
        help="with --launcher slurm: show where each cell stands (row written, job pending, "
        "running or failed with its Slurm state and log); run nothing",
    )
    add_slurm_request(parser, "cell", nodes=True)


def slurm_launcher(
    args: argparse.Namespace, suite: Suite, parser: argparse.ArgumentParser
) -> Launcher | None:
    """The Slurm launcher the options ask for, or None for the local one; a usage error
    (`parser.error`) for options that do not fit together."""
    if args.launcher == "local":
        if args.status:
            parser.error("--status shows a Slurm run's jobs: add --launcher slurm")
        return None
    if args.jobs is not None:
        parser.error(
            "--jobs sets how many cells run at once on this machine; with --launcher slurm "
            "use --max-parallel"
        )
    options = slurm_options(args, parser, name=f"circlebench-{suite.name}", threads=suite.threads)
    return functools.partial(run_cells_on_slurm, options=options)
