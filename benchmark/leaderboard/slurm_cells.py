"""The Slurm launcher: its options, and a suite's unfinished cells as one job array of
`CellTask`s, waited for and reported.

Each cell's job is recorded in `<work>/slurm/jobs.json`; a cell is done when its row is in the
rows CSV, else failed once its job has stayed ended for `slurm.SETTLE_S`. The jobs outlive this
process: the next command (or `--status`) waits for those still pending or running. A task
restarted by Slurm does nothing if its cell's row is written, else its `fit` resumes from the
`last.ckpt` of the cell's own run folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from submitit import SlurmJob
from submitit.core.utils import pickle_load

from benchmark.launch import slurm
from benchmark.launch.processes import print_failure, progress_bar
from benchmark.launch.slurm import JobWatch, SlurmOptions, cancel, job_states, submit_array
from benchmark.launch.slurm_options import add_slurm_request, slurm_options
from benchmark.launch.slurm_tasks import CallTask
from benchmark.leaderboard.cells import (
    CellSettings,
    CellWork,
    Launcher,
    RunSummary,
    cell_log,
    row_recipes,
    suite_lock,
    unfinished_cells,
)
from benchmark.leaderboard.suite import Cell, Suite
from benchmark.training.checkpoints import LAST, newest_run
from core.atomic import write_text

POLL_S = 10.0  # between two sacct calls while waiting; one call covers every job
LEDGER = Path("slurm", "jobs.json")  # in a suite's work folder: each cell's latest job


def add_slurm_arguments(parser: argparse.ArgumentParser) -> None:
    """`--launcher`, `--status` and the Slurm request's options."""
    add_slurm_request(parser, "cell", nodes=True)
    parser.add_argument(
        "--status",
        action="store_true",
        help="with --launcher slurm: show where each cell stands (row written, job pending, "
        "running or failed with its Slurm state and log); run nothing",
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


@dataclass(frozen=True)
class Submitted:
    """A cell's latest job: its id (`<array>_<index>`) and the cell's recipe then."""

    job: str
    recipe: str


def read_ledger(work_dir: Path) -> dict[str, Submitted]:
    """Each cell's latest job, by cell id (none before the first Slurm run)."""
    path = work_dir / LEDGER
    entries = json.loads(path.read_text()) if path.is_file() else {}
    return {cell: Submitted(**entry) for cell, entry in entries.items()}


def _write_ledger(work_dir: Path, ledger: dict[str, Submitted]) -> None:
    entries = {cell: asdict(entry) for cell, entry in sorted(ledger.items())}
    write_text(work_dir / LEDGER, json.dumps(entries, indent=1) + "\n")


class CellTask(CallTask):
    """A leaderboard cell's `CellWork`, run in this process and after a restart resumed from its
    run under `run_root` (its `--trainer.default_root_dir`); returns the node's numerics
    fingerprint, which the leaderboard stores beside a board made on Slurm."""

    function: CellWork

    def __init__(
        self, work: CellWork, log: Path, threads: int | None, *, recipe: str, run_root: Path
    ) -> None:
        super().__init__(work, log, threads)
        self.recipe, self.run_root = recipe, run_root

    def run(self, restarts: int) -> str:
        from benchmark.leaderboard import numerics

        work = self.function
        if row_recipes(work.rows_csv).get(work.cell_id) == self.recipe:  # a restart after the end
            print(f"[circlebench] {work.cell_id} already has its row in {work.rows_csv}")
            return numerics.fingerprint()
        run = resumable_run(self.run_root, work.cell_id, self.recipe) if restarts else None
        if run is not None and work.args[0] == "fit":
            print(f"[circlebench] restarted: resuming {run} from its {LAST}", flush=True)
            work = dataclasses.replace(work, args=[*work.args, f"--ckpt_path={run}"])
        work()
        return numerics.fingerprint()


def resumable_run(run_root: Path, cell_id: str, recipe: str) -> Path | None:
    """The newest run folder under `run_root` of this cell and recipe (from its saved
    `config.yaml`) that has a `checkpoints/last.ckpt`; None when no epoch was finished."""

    def ours(config: dict) -> bool:
        return config.get("cell_id") == cell_id and config.get("cell_recipe") == recipe

    return newest_run(run_root, ours, depth=3)


def run_cells_on_slurm(
    cells: list[Cell],
    settings: CellSettings,
    options: SlurmOptions,
    *,
    root: Path,
    console: Console,
) -> RunSummary:
    """Submit the unfinished cells not already pending or running as one array, wait for all
    of them, and say what became of each (`RunSummary`, with the nodes' numerics fingerprint).
    """
    summary = RunSummary()
    work = settings.work_dir
    with suite_lock(work):
        todo, recipes = unfinished_cells(cells, settings, summary, root=root, console=console)
        ledger = read_ledger(work)
        states = job_states(ledger[c.cell_id].job for c in todo if c.cell_id in ledger)
        waiting, submit, outdated = {}, [], []
        for cell in todo:
            entry = ledger.get(cell.cell_id)
            state = states.get(entry.job) if entry else None
            if entry and state is not None and state.active:
                if entry.recipe == recipes[cell.cell_id]:
                    waiting[cell.cell_id] = entry.job
                    line = f"[cyan]waiting[/] {cell.cell_id}: {state.describe()}"
                    console.print(line, soft_wrap=True)
                    continue
                outdated.append(entry.job)  # its row would be stale: it is not waited for
            elif entry and state is not None:
                console.print(
                    f"[yellow]again[/] {cell.cell_id}: last job {state.describe()}", soft_wrap=True
                )
            submit.append(cell)
        if outdated:
            cancel(outdated)
            console.print(f"cancelled {len(outdated)} job(s) of cells whose recipe changed")
        if submit:
            tasks = [
                CellTask(
                    settings.work(cell, recipes[cell.cell_id], options.trainer_args()),
                    cell_log(work, cell.cell_id),
                    settings.threads,
                    recipe=recipes[cell.cell_id],
                    run_root=settings.run_root,
                )
                for cell in submit
            ]
            jobs = submit_array(tasks, work / "slurm", options, settings.threads)
            for cell, job in zip(submit, jobs, strict=True):
                ledger[cell.cell_id] = Submitted(job, recipes[cell.cell_id])
                waiting[cell.cell_id] = job
            _write_ledger(work, ledger)
            array = jobs[0].split("_")[0]
            console.print(f"submitted {len(submit)} cell(s) as Slurm job array {array}")
        _wait(waiting, len(cells), settings, summary, console)
    return summary


def _wait(
    jobs: dict[str, str], total: int, settings: CellSettings, summary: RunSummary, console: Console
) -> None:
    """Poll the jobs (cell id -> job id) until each has ended; record done or failed."""
    if not jobs:
        return
    fingerprints: set[str] = set()
    remaining = dict(jobs)
    watch = JobWatch(job_states)
    try:
        with progress_bar(console) as progress:
            bar = progress.add_task("cells", total=total, completed=total - len(jobs))
            while remaining:
                states = watch.states(remaining.values())
                ended = {c: j for c, j in remaining.items() if j in states and not states[j].active}
                # Read after the states: a job that has ended wrote its row before it did.
                rows = row_recipes(settings.rows_csv) if ended else {}
                for cell_id, job in ended.items():
                    state = states[job]
                    done = cell_id in rows
                    if not done and watch.ended_for(job) < slurm.SETTLE_S:
                        continue  # accounting may not have heard of a requeue yet
                    del remaining[cell_id]
                    progress.advance(bar)
                    log = cell_log(settings.work_dir, cell_id)
                    if done:
                        summary.ran[cell_id] = state.elapsed_s
                        fingerprints |= _fingerprint(settings.work_dir / "slurm", job)
                        line = f"[green]done[/] {cell_id} in {state.elapsed_s:.0f} s"
                        line += f" ({state.describe()})"
                        progress.console.print(line, soft_wrap=True)
                        continue
                    why = state.describe() + ("" if state.state != "COMPLETED" else ", no row")
                    summary.failed[cell_id] = f"{why}; log: {log}"
                    print_failure(progress.console, cell_id, f"{why}; log: {log}", log)
                running = sum(s.state == "RUNNING" for s in states.values())
                progress.update(bar, description=f"cells ({running} running)")
                if remaining:
                    time.sleep(POLL_S)
    except KeyboardInterrupt:
        console.print(
            f"stopped waiting: {len(remaining)} cell(s) go on in Slurm and will write their "
            "rows; run the same command again (or add --status) to pick them up",
            soft_wrap=True,
        )
        raise
    if fingerprints:  # several nodes with different kernels: a mix no single machine has
        summary.numerics = "+".join(sorted(fingerprints))


def _fingerprint(folder: Path, job_id: str) -> set[str]:
    """The numerics fingerprint the job's task returned, from submitit's result file."""
    result = SlurmJob(folder=folder / "%j", job_id=job_id, tasks=[0]).paths.result_pickle
    if not result.is_file():
        return set()
    outcome, value = pickle_load(result)
    return {value} if outcome == "success" and isinstance(value, str) else set()


def print_status(
    cells: list[Cell], settings: CellSettings, *, root: Path, console: Console
) -> None:
    """Where each cell stands, from the rows, `jobs.json` and `sacct`; runs nothing."""
    made = row_recipes(settings.rows_csv)
    ledger = read_ledger(settings.work_dir)
    states = job_states(ledger[c.cell_id].job for c in cells if c.cell_id in ledger)
    counts: Counter[str] = Counter()
    for cell in cells:
        recipe = cell.recipe(root, settings.threads)
        entry = ledger.get(cell.cell_id)
        state = states.get(entry.job) if entry else None
        why = cell.unavailable(root)
        detail = ""
        if made.get(cell.cell_id) in ("", recipe):
            what = "done"
        elif why is not None:
            what, detail = "skipped", why
        elif state is not None and entry is not None and entry.recipe == recipe:
            what, detail = state.state, state.describe()
            if not state.active:
                detail += f"; log: {cell_log(settings.work_dir, cell.cell_id)}"
        elif cell.cell_id in made:
            what, detail = "stale", "its row was made by another recipe"
        else:
            what = "to run"
        counts[what] += 1
        if what != "done":
            line = f"{what:<10} {cell.cell_id}  {detail}"
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print(", ".join(f"{n} {what}" for what, n in counts.items()))
