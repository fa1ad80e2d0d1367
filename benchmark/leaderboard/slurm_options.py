"""`circlebench leaderboard` options that choose and shape the launcher (local or Slurm)."""

from __future__ import annotations

import argparse
import functools

from benchmark.leaderboard.cells import Launcher
from benchmark.leaderboard.slurm import SlurmOptions
from benchmark.leaderboard.slurm_cells import run_cells_on_slurm
from benchmark.leaderboard.suite import Suite

DEFAULT_TIME_MIN = 240
DEFAULT_CPUS = 8  # without the suite's threads: the paper configs' 8 data loader workers


def add_slurm_arguments(parser: argparse.ArgumentParser) -> None:
    """`--launcher`, `--status` and the Slurm request's options."""
    parser.add_argument(
        "--launcher",
        choices=["local", "slurm"],
        default="local",
        help="where cells run: processes on this machine (default), or one Slurm job array "
        "through submitit (the repository, results and Python environment on a file system "
        "shared with the nodes)",
    )
    parser.add_argument(
        "--status",
        action="store_true",
        help="with --launcher slurm: show where each cell stands (row written, job pending, "
        "running or failed with its Slurm state and log); run nothing",
    )
    slurm = parser.add_argument_group("Slurm (--launcher slurm)")
    slurm.add_argument("--partition", help="Slurm partition (default: the cluster's)")
    slurm.add_argument(
        "--gpus-per-cell",
        type=int,
        default=0,
        help="GPUs per node of each cell: one Slurm task and Lightning process per GPU, and "
        "--trainer.accelerator=gpu --trainer.devices=G added to the cell (default 0: CPUs)",
    )
    slurm.add_argument(
        "--nodes-per-cell",
        type=int,
        default=1,
        help="nodes per cell (DDP across nodes, --trainer.num_nodes=N); needs --gpus-per-cell",
    )
    slurm.add_argument(
        "--cpus-per-cell",
        type=int,
        help="CPUs per Slurm task (default: the suite's threads per cell, else "
        f"{DEFAULT_CPUS} for the data loader workers)",
    )
    slurm.add_argument(
        "--time",
        type=int,
        default=DEFAULT_TIME_MIN,
        metavar="MIN",
        help="time limit of one attempt of a cell, in minutes; a cell still training then is "
        f"requeued and resumes from its last epoch (default {DEFAULT_TIME_MIN})",
    )
    slurm.add_argument(
        "--max-parallel",
        type=int,
        metavar="N",
        help="cells running at once (the job array's throttle; default 256, submitit's)",
    )
    slurm.add_argument(
        "--slurm-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another sbatch option, e.g. account=myproject, qos=high, mem=32G, "
        "constraint=a100; KEY alone for a flag (exclusive); repeatable",
    )


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


def slurm_options(
    args: argparse.Namespace, parser: argparse.ArgumentParser, *, name: str, threads: int | None
) -> SlurmOptions:
    """The request that the Slurm options of `add_slurm_arguments` ask for each task (a cell,
    a tuning worker) of a job array named `name` whose tasks use `threads` CPU threads; a usage
    error (`parser.error`) for values Slurm cannot run."""
    extra: dict[str, str | bool] = {}
    for option in args.slurm_option:
        key, equals, value = option.partition("=")
        if not key or key.startswith("-") or (equals and not value):
            parser.error(
                f"--slurm-option {option!r}: expected KEY=VALUE (an sbatch long option without "
                "its dashes, e.g. account=myproject) or KEY alone for a flag"
            )
        extra[key] = value if equals else True
    try:
        return SlurmOptions(
            partition=args.partition,
            gpus=args.gpus_per_cell,
            nodes=args.nodes_per_cell,
            cpus=args.cpus_per_cell or threads or DEFAULT_CPUS,
            time_min=args.time,
            max_parallel=args.max_parallel,
            extra=extra,
            name=name,
        )
    except ValueError as error:
        parser.error(str(error))
