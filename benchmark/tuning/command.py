"""`circlebench tune`: tune a loss with an equal budget on class-disjoint folds, resumably.

`--config CONFIG` tunes one experiment config with the budget of the flags (study `<stem>` in
`results/tuning/<stem>.journal`, its tuned files beside it); `--suite S --group G [--loss STEM
...]` tunes losses of a suite group with the group's overrides and `tuning:` budget (studies
`<group>/<stem>`, tuned files in `experiments/tuned/<group>/`, where the suite's tuned cells read
them). Running the same command again resumes a study; with `--launcher slurm` its workers are
the tasks of one Slurm job array (`on_slurm`). See docs/guides/tuning.md.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

import optuna
import pandas as pd
from rich.console import Console

from benchmark.errors import ArgumentParser
from benchmark.launch.processes import on_threads, progress_bar, terminal_console
from benchmark.launch.slurm_options import add_slurm_request, slurm_options
from benchmark.manual import manual_line
from benchmark.tuning.experiment import Budget, Experiment, parsed_config
from benchmark.tuning.gpu_hours import study_plan
from benchmark.tuning.groups import suite_groups
from benchmark.tuning.history import log_history
from benchmark.tuning.objective import run_trial
from benchmark.tuning.on_slurm import tune_on_slurm
from benchmark.tuning.space import derived_space, space_path
from benchmark.tuning.study import Proposer, counted, work
from benchmark.tuning.task import RESULTS, Task
from benchmark.tuning.tuned import TunedFiles, group_files, write_tuned

# The budget flags of --config mode, by argparse name: the `Budget` field each sets.
BUDGET_FLAGS = {
    "trials": "trials",
    "folds": "folds",
    "epochs": "max_epochs",
    "metric": "metric",
    "pruner": "pruner",
    "sampler_seed": "sampler_seed",
}


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="circlebench tune",
        description="Tune a loss's hyper-parameters with an equal budget on class-disjoint "
        "folds of the training classes (Optuna TPE; the test set is never built). "
        "Arguments after `--` are passed to every fold's `circlebench fit` (--config mode).",
        epilog=manual_line("tune"),
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--config", type=Path, help="the experiment config to tune")
    what.add_argument("--suite", help="tune losses of this suite's --group, with its budget")
    parser.add_argument("--group", help="--suite: the group whose losses are tuned")
    parser.add_argument("--loss", nargs="+", help="--suite: only these config stems")
    budget = parser.add_argument_group("budget (--config mode; a suite group declares its own)")
    budget.add_argument("--trials", type=int, help="finished trials (default 30)")
    budget.add_argument("--folds", type=int, help="class-disjoint folds (default 3)")
    budget.add_argument("--epochs", type=int, help="epoch cap of every fold (default 12)")
    budget.add_argument("--metric", help="validation metric maximised (default MAP@R)")
    budget.add_argument("--pruner", choices=["none", "wilcoxon"], help="default none")
    budget.add_argument("--sampler-seed", type=int, help="TPE seed (default 0)")
    parser.add_argument(
        "--space",
        type=Path,
        help="search space (default experiments/spaces/<config stem>.yaml, else one derived "
        "from the loss's constructor arguments)",
    )
    parser.add_argument("--storage", help="journal file or RDB URL (default results/tuning/)")
    parser.add_argument("--study", help="study name (default: the config stem)")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="trials run at once (default 1); with --launcher slurm, the array tasks per study, "
        "each running one trial at a time",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="CPU threads per fold run (default 1)"
    )
    parser.add_argument(
        "--output", type=Path, help="--config: folder of the tuned files (default: the storage's)"
    )
    parser.add_argument(
        "--no-wandb", action="store_true", help="do not log the history to W&B (offline by default)"
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="run nothing: print each study's budget and expected GPU-hours",
    )
    add_slurm_request(parser, "worker", nodes=False)
    return parser


def main(argv: list[str] | None = None) -> None:
    """Entry point of `circlebench tune`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    ours, fit_overrides = argv[:split], argv[split + 1 :]
    parser = build_parser()
    args = parser.parse_args(ours)
    if args.workers < 1 or args.threads < 1:
        parser.error(f"--workers and --threads must be >= 1, got {args.workers}, {args.threads}")
    tasks = parser.loaded(
        lambda: (
            suite_tasks(args, fit_overrides) if args.suite else [config_task(args, fit_overrides)]
        )
    )
    if args.plan:
        for task in tasks:
            print(study_plan(task.config, task.overrides, task.budget, task.study))
        return
    options = (
        slurm_options(args, parser, name="circlebench-tune", threads=args.threads, one_task=True)
        if args.launcher == "slurm"
        else None
    )
    console = terminal_console()
    short: dict[str, str] = {}
    if options is not None:
        short = tune_on_slurm(tasks, args.workers, args.threads, options, console)
    for task in tasks:
        if task.study in short:
            continue
        if options is not None:  # the trials ran in Slurm: only the tuned files to write
            summary = _write(task, task.open_study(), task.experiment(), console)
        else:
            summary = tune(task, workers=args.workers, threads=args.threads, console=console)
        if not args.no_wandb:
            trials = pd.read_csv(task.files.trials, keep_default_na=False)
            why = log_history(task.study, summary, trials, task.work_dir)
            if why is not None:
                console.print(f"W&B: history of {task.study} not logged ({why})")
    if short:
        raise SystemExit(
            "studies short of their budget:\n"
            + "\n".join(f"  {study}: {why}" for study, why in short.items())
        )


def config_task(args: argparse.Namespace, fit_overrides: list[str]) -> Task:
    """The study of `--config`, with the budget of the flags."""
    if args.group or args.loss:
        raise ValueError("--group and --loss go with --suite, not --config")
    if not args.config.is_file():
        raise FileNotFoundError(f"--config {args.config}: no such file")
    chosen = {field: getattr(args, flag) for flag, field in BUDGET_FLAGS.items()}
    budget = Budget(**{k: v for k, v in chosen.items() if v is not None})
    study = args.study or args.config.stem
    storage = args.storage or str(RESULTS / f"{study}.journal")
    folder = args.output or (Path(storage).parent if "://" not in storage else RESULTS)
    files = TunedFiles(folder, study.rsplit("/", 1)[-1])
    return study_task(args.space, args.config, tuple(fit_overrides), budget, study, storage, files)


def study_task(
    space: Path | None,
    config: Path,
    overrides: tuple[str, ...],
    budget: Budget,
    study: str,
    storage: str,
    files: TunedFiles,
) -> Task:
    """The Task of one study. Its space is `space` (`--space`), else the loss's own
    (`experiments/spaces/<config stem>.yaml`), else one derived from the loss's constructor
    arguments (`space.derived_space`), written beside the tuned files."""
    derived = space is None and not space_path(config.stem).is_file()
    if derived:
        loss = parsed_config(config, overrides)["model"]["loss"]
        space = derived_space(loss, files.folder / f"{files.stem}.space.yaml")
    return Task(
        config=config,
        overrides=overrides,
        space=space or space_path(config.stem),
        budget=budget,
        study=study,
        storage=storage,
        files=files,
        derived=derived,
    )


def suite_tasks(args: argparse.Namespace, fit_overrides: list[str]) -> list[Task]:
    """One study per chosen loss of the suite group, with the group's overrides and budget."""
    given = [f"--{f.replace('_', '-')}" for f in BUDGET_FLAGS if getattr(args, f) is not None]
    if given or fit_overrides or args.output or args.study:
        raise ValueError(
            f"{' '.join(given) or 'these options'}: a suite group declares its budget and "
            "overrides in the suite file (its `tuning:` entry), the same for every loss; edit it "
            "there, or tune a single config with --config"
        )
    groups = {group.name: group for group in suite_groups(args.suite)}
    if args.group not in groups:
        raise ValueError(f"--group {args.group!r}: suite {args.suite!r} has groups {list(groups)}")
    group = groups[args.group]
    if group.tuning is None:
        raise ValueError(
            f"group {group.name!r} of suite {args.suite!r} declares no `tuning:` budget; add one "
            "(e.g. `tuning: {trials: 30, folds: 3, max_epochs: 6}`)"
        )
    stems = {c.stem: c for c in group.configs}
    unknown = sorted(set(args.loss or ()) - set(stems))
    if unknown:
        raise ValueError(
            f"--loss {unknown}: not in group {group.name!r}; choose from {sorted(stems)}"
        )
    missing = group.missing_data(Path("."))
    if missing is not None and not args.plan:
        raise FileNotFoundError(f"group {group.name!r} needs {missing}, which is absent")
    if missing is not None:
        print(f"data absent: {missing} (`circlebench data info` says how to get it)")
    return [
        study_task(
            args.space,
            stems[stem],
            group.overrides_for(stems[stem]),
            group.tuning,
            f"{group.name}/{stem}",
            args.storage or str(RESULTS / group.name / f"{stem}.journal"),
            group_files(group.name, stem),
        )
        for stem in args.loss or list(stems)
    ]


def tune(task: Task, *, workers: int, threads: int, console: Console) -> dict:
    """Run (or resume) the study of `task` to its budget, write its tuned files; their summary."""
    experiment, study = task.start(console)
    stop = threading.Event()

    def objective(trial: optuna.Trial) -> float:
        return run_trial(trial, experiment, task.budget, task.work_dir, threads)

    with progress_bar(console) as progress:
        bar = progress.add_task(task.study, total=task.budget.trials)

        def done(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
            progress.update(bar, completed=counted(study), description=_line(task, study))
            if trial.state != optuna.trial.TrialState.COMPLETE:
                why = trial.user_attrs.get("error", "")
                progress.console.print(f"trial {trial.number} {trial.state.name}: {why}")

        progress.update(bar, completed=counted(study), description=_line(task, study))
        proposer = Proposer(task.budget, experiment.space.distributions())  # one per process

        def worker(_: int) -> None:
            work(study, task.storage, proposer, objective, stop=stop, done=done)

        on_threads(worker, range(workers), workers, stop.set)  # stop: no new trial
    return _write(task, study, experiment, console)


def _write(task: Task, study: optuna.Study, experiment: Experiment, console: Console) -> dict:
    summary = write_tuned(study, experiment, task.budget, task.files)
    best, trials = summary["best"], summary["trials"]
    console.print(
        f"{task.study}: best val {task.budget.metric} {best['value']:.2f} (trial {best['number']}, "
        f"{best['epoch']} epochs), median {summary['median_value']:.2f}; {trials['complete']} "
        f"complete, {trials['failed']} failed, {trials['pruned']} pruned; wrote {task.files.config}"
    )
    return summary


def _line(task: Task, study: optuna.Study) -> str:
    complete = [t for t in study.get_trials(deepcopy=False) if t.value is not None]
    if not complete:
        return task.study
    best = max(complete, key=lambda t: t.value or 0.0)
    return f"{task.study} best {best.value:.2f} (#{best.number})"
