"""The options that choose and shape a launcher (local or Slurm), defined once for every
command that runs work as processes or Slurm array tasks (`leaderboard`, `tune`)."""

from __future__ import annotations

import argparse

from benchmark.launch.slurm import SlurmOptions

DEFAULT_TIME_MIN = 240
DEFAULT_CPUS = 8  # without the suite's threads: the paper configs' 8 data loader workers


def add_slurm_request(parser: argparse.ArgumentParser, unit: str, *, nodes: bool) -> None:
    """`--launcher local|slurm`, and the options of what each array task (a `unit`: cell,
    worker) asks Slurm for; `nodes` adds `--nodes-per-<unit>` (a cell's DDP across nodes)."""
    parser.add_argument(
        "--launcher",
        choices=["local", "slurm"],
        default="local",
        help=f"where the {unit}s run: processes on this machine (default), or one Slurm job array "
        "through submitit (the repository, results and Python environment on a file system "
        "shared with the nodes)",
    )
    slurm = parser.add_argument_group("Slurm (--launcher slurm)")
    slurm.add_argument("--partition", help="Slurm partition (default: the cluster's)")
    gpus_help = (
        "GPUs per node of each cell: one Slurm task and Lightning process per GPU, and "
        "--trainer.accelerator=gpu --trainer.devices=G added to the cell (default 0: CPUs)"
        if nodes
        else f"GPUs of each {unit}'s job, one Slurm task that sees them all; its fit runs use "
        "them as their config says (e.g. -- --trainer.accelerator=gpu; default 0: CPUs)"
    )
    slurm.add_argument(f"--gpus-per-{unit}", dest="slurm_gpus", type=int, default=0,
                       help=gpus_help)  # fmt: skip
    if nodes:
        slurm.add_argument(
            f"--nodes-per-{unit}",
            dest="slurm_nodes",
            type=int,
            default=1,
            help=f"nodes per {unit} (DDP across nodes, --trainer.num_nodes=N); needs "
            f"--gpus-per-{unit}",
        )
    slurm.add_argument(
        f"--cpus-per-{unit}",
        dest="slurm_cpus",
        type=int,
        help=f"CPUs per Slurm task (default: the {unit}'s threads, else "
        f"{DEFAULT_CPUS} for the data loader workers)",
    )
    slurm.add_argument(
        "--time",
        type=int,
        default=DEFAULT_TIME_MIN,
        metavar="MIN",
        help=f"time limit of one attempt of a {unit}, in minutes; one still running then is "
        f"requeued and resumes (default {DEFAULT_TIME_MIN})",
    )
    slurm.add_argument(
        "--max-parallel",
        type=int,
        metavar="N",
        help=f"{unit}s running at once (the job array's throttle; default 256, submitit's)",
    )
    slurm.add_argument(
        "--slurm-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another sbatch option, e.g. account=myproject, qos=high, mem=32G, "
        "constraint=a100; KEY alone for a flag (exclusive); repeatable",
    )


def slurm_options(
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
    *,
    name: str,
    threads: int | None,
    one_task: bool = False,
) -> SlurmOptions:
    """The request that the options of `add_slurm_request` ask for each task (a cell, a
    tuning worker: `one_task`) of a job array named `name` whose tasks use `threads` CPU
    threads; a usage error (`parser.error`) for values Slurm cannot run."""
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
            gpus=args.slurm_gpus,
            nodes=getattr(args, "slurm_nodes", 1),
            cpus=threads or DEFAULT_CPUS if args.slurm_cpus is None else args.slurm_cpus,
            time_min=args.time,
            max_parallel=args.max_parallel,
            extra=extra,
            name=name,
            one_task=one_task,
        )
    except ValueError as error:
        parser.error(str(error))
