"""`circlebench leaderboard --suite NAME`: run a suite's grid and aggregate its rows over seeds.

Outputs, with `R` = `--results-dir` and `O` = the suite's `output` (default `suites/<name>`):
`R/suites/<name>/rows.csv` (one results row per cell), `R/suites/<name>/{runs,logs}/` (run
folders and cell logs, not committed), and `R/O/leaderboard.csv`, `R/O/leaderboard.md`,
`R/O/plots/*.png`. `--check` reruns the suite in a temporary folder and compares its
leaderboard with `R/O/leaderboard.csv`.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path
from typing import Literal

import pandas as pd
from rich.console import Console

from benchmark.errors import ArgumentParser
from benchmark.launch.fork_server import fork_available
from benchmark.launch.forked import Call, run_forked
from benchmark.launch.processes import terminal_console
from benchmark.leaderboard import numerics
from benchmark.leaderboard.aggregate import aggregate_rows, read_leaderboard, write_csv
from benchmark.leaderboard.cells import (
    CellRunner,
    CellSettings,
    Launcher,
    RunSummary,
    suite_rows,
)
from benchmark.leaderboard.check import compare
from benchmark.leaderboard.markdown import leaderboard_markdown, terminal_summary
from benchmark.leaderboard.plan import suite_plan
from benchmark.leaderboard.plots import drawn_figures, write_plots
from benchmark.leaderboard.report import write_report
from benchmark.leaderboard.runner import (
    fork_runner,
    in_process_runner,
    run_cells,
    subprocess_runner,
)
from benchmark.leaderboard.slurm_cells import add_slurm_arguments, print_status, slurm_launcher
from benchmark.leaderboard.suite import Suite, load_suite
from benchmark.manual import manual_line
from benchmark.tuning.tuned import group_studies
from core.atomic import write_text
from core.devices import usable_cores

DEFAULT_TOLERANCE = 1.0  # percentage points: one flipped query of 160; docs/leaderboards/check.md
RUNNERS: dict[str, CellRunner] = {
    "fork": fork_runner,
    "subprocess": subprocess_runner,
    "in-process": in_process_runner,
}
DEFAULT_ISOLATION = "fork" if fork_available() else "subprocess"


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="circlebench leaderboard",
        description="Run a suite (experiments/suites/NAME.yaml) and write its leaderboard.",
        epilog=manual_line("leaderboard"),
    )
    parser.add_argument("--suite", required=True, help="suite name, e.g. quick, ci, paper")
    parser.add_argument(
        "--check",
        action="store_true",
        help="rerun the suite in a temporary folder and compare with the committed leaderboard",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help="--check: largest allowed |difference| of a metric mean, in percentage points",
    )
    parser.add_argument("--results-dir", type=Path, default=Path("results"))
    parser.add_argument("--seeds", type=int, nargs="+", help="replace the suite's seeds")
    parser.add_argument("--no-wandb", action="store_true", help="no W&B, in cells or leaderboard")
    parser.add_argument(
        "--aggregate-only",
        "--fold-only",  # its name before 2026-11-24
        action="store_true",
        help="run nothing; aggregate the rows already there",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="cells run at once (default: the usable cores divided by the suite's threads per "
        "cell; 1 with --isolation in-process)",
    )
    parser.add_argument(
        "--isolation",
        choices=sorted(RUNNERS),
        default=DEFAULT_ISOLATION,
        help="each cell in a process forked from a server that imported the training code once "
        "(default where the platform can fork), in a fresh interpreter, or in this one",
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="run nothing: print every group's cells, tuning budget, data check and expected "
        "GPU-hours (from results/throughput.csv)",
    )
    add_slurm_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    """Entry point of `circlebench leaderboard`."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.jobs is not None and (
        args.jobs < 1 or (args.jobs > 1 and args.isolation == "in-process")
    ):
        parser.error(f"--jobs must be 1, or more without --isolation in-process; got {args.jobs}")
    suite = parser.loaded(lambda: load_suite(args.suite, Path("."), args.seeds))
    if args.plan:
        print(suite_plan(suite))
        return
    on_slurm = slurm_launcher(args, suite, parser)  # None: the local one
    if args.jobs is None:
        args.jobs = default_jobs(suite.threads) if args.isolation != "in-process" else 1
    console = terminal_console()
    work = args.results_dir / "suites" / suite.name
    if args.status:
        settings = CellSettings(work / "rows.csv", work, threads=suite.threads)
        print_status(suite.cells(), settings, root=Path("."), console=console)
        return
    runner = RUNNERS[args.isolation]
    launcher = on_slurm or functools.partial(run_cells, runner=runner, jobs=args.jobs)
    if args.check:
        check(suite, args.results_dir, args.tolerance, console, launcher, on_slurm is not None)
        return
    run = None if args.aggregate_only else launcher
    board, summary = build(suite, args.results_dir, console, run, wandb=not args.no_wandb)
    if not args.no_wandb:
        # Where cells were to be forked here, the fork server started with the command; starting
        # it for the table alone costs more than the imports it would save.
        forked = args.isolation == "fork" and on_slurm is None and not args.aggregate_only
        log_wandb_table(board, suite.name, work, console, forked=forked)
    console.print(
        f"{len(summary.ran)} run, {len(summary.resumed)} already done, "
        f"{len(summary.failed)} failed, {len(summary.skipped)} experiment(s) skipped"
    )
    for experiment, reason in summary.skipped.items():
        console.print(f"skipped {experiment}: {reason}")
    if summary.failed:
        details = "\n".join(f"  {cell}: {why}" for cell, why in summary.failed.items())
        raise SystemExit(f"{len(summary.failed)} cell(s) failed:\n{details}")


def default_jobs(threads_per_cell: int | None) -> int:
    """Cells to run at once: every usable core busy, none shared (cells are CPU-bound)."""
    cores = usable_cores()
    return max(1, cores // (threads_per_cell or cores))


def build(
    suite: Suite, results_dir: Path, console: Console, run: Launcher | None, *, wandb: bool
) -> tuple[pd.DataFrame, RunSummary]:
    """Run the suite's unfinished cells with `run` (None: aggregate only; `wandb`: the cells log
    to W&B) and write its leaderboard files."""
    work = results_dir / "suites" / suite.name
    rows_csv = work / "rows.csv"
    cells = suite.cells()
    summary = RunSummary()
    if run is not None:
        settings = CellSettings(
            rows_csv, work, wandb=wandb, threads=suite.threads, suite=suite.name
        )
        summary = run(cells, settings, root=Path("."), console=console)
    rows = suite_rows(rows_csv, cells)
    board = aggregate_rows(rows)
    if board.empty:
        missing = f"no rows for suite {suite.name!r} in {rows_csv}"
        if run is None:  # --aggregate-only, before any run wrote a row
            raise FileNotFoundError(
                f"{missing}: nothing to aggregate; run `circlebench leaderboard --suite "
                f"{suite.name}` first (or pass the folder that holds its rows with --results-dir)"
            )
        console.print(f"{missing}; nothing to aggregate")
        return board, summary
    # rows are in the order cells finished; the suite's order reads better
    order = {cell.experiment: i for i, cell in enumerate(cells)}
    board = board.sort_values("experiment", key=lambda s: s.map(order))
    requires = {g.name: g.requires_text for g in suite.groups}
    board.insert(2, "requires", board["group"].map(requires))
    out = results_dir / suite.output
    write_csv(board, out / "leaderboard.csv")
    if summary.ran:  # the machine that trained; aggregating elsewhere keeps the stored fingerprint
        made = summary.numerics or numerics.fingerprint()
        kept = set(rows["cell_id"]) - set(summary.ran)  # rows an earlier run made
        numerics.write(out, numerics.merged(numerics.read(out), made) if kept else made)
    paper_csv = results_dir / "paper_reference.csv"
    paper = pd.DataFrame()
    if paper_csv.is_file():
        paper = pd.read_csv(paper_csv, dtype={"value": float}, keep_default_na=False)
    studies = {  # of every group that tunes
        g.name: group_studies(g.name, [c.stem for c in g.configs], g.tuning.describe())
        for g in suite.groups
        if g.tuning is not None
    }
    markdown = leaderboard_markdown(
        board,
        title=f"Leaderboard: suite `{suite.name}`",
        description=suite.description,
        paper=paper,
        paper_datasets={g.name: g.paper_dataset for g in suite.groups if g.paper_dataset},
        studies=studies,
    )
    write_text(out / "leaderboard.md", markdown)
    drawn = drawn_figures(board, rows)
    plots = write_plots(board, rows, out / "plots", drawn)
    report = write_report(
        board,
        rows,
        work / "report.html",
        title=f"Leaderboard: suite {suite.name}",
        description=suite.description,
        fingerprint=numerics.read(out),
        studies=studies,
        drawn=drawn,
    )
    for group, table in terminal_summary(board):
        console.print(f"\n[bold]{group}[/]")
        widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
        for line in table:
            text = "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True))
            console.print(text, markup=False, highlight=False, soft_wrap=True)
    console.print(f"wrote {out / 'leaderboard.csv'}, {out / 'leaderboard.md'}, {len(plots)} plots")
    console.print(f"wrote {report}: open it in a browser")
    return board, summary


def check(
    suite: Suite,
    results_dir: Path,
    tolerance: float,
    console: Console,
    launcher: Launcher,
    on_slurm: bool,
) -> None:
    """Regenerate the suite in a temporary folder (in `results_dir`, which Slurm jobs can reach,
    `on_slurm`) and compare with the committed leaderboard; with the suite's `check_seeds`,
    only those seeds' cells, against the committed rows of the same cells."""
    committed_csv = results_dir / suite.output / "leaderboard.csv"
    if not committed_csv.is_file():
        raise SystemExit(
            f"--check: no committed leaderboard at {committed_csv}; run "
            f"`circlebench leaderboard --suite {suite.name}` and commit its files first"
        )
    checked = suite.restricted_to(suite.check_seeds) if suite.check_seeds else suite
    shared = results_dir if on_slurm else None
    scratch = Path(tempfile.mkdtemp(prefix=f"circlebench-check-{suite.name}-", dir=shared))
    if checked is not suite:
        committed_csv = _committed_subset(checked, results_dir, scratch / "committed", console)
        console.print(f"--check: rerunning the cells of seeds {list(checked.seeds)} only")
    _, summary = build(checked, scratch, console, launcher, wandb=False)
    fresh_csv = scratch / suite.output / "leaderboard.csv"
    committed = read_leaderboard(committed_csv)
    fresh = read_leaderboard(fresh_csv) if fresh_csv.is_file() else committed[:0]
    made_with = numerics.read(results_dir / suite.output)
    here = summary.numerics or numerics.fingerprint()  # of the machines that reran the cells
    same_machine = made_with == here
    # Only absent data excuses a committed experiment; an outdated tuning fails the check.
    absent = {c.experiment for c in checked.cells() if c.group.missing_data(Path(".")) is not None}
    skipped = {e: why for e, why in summary.skipped.items() if e in absent}
    report = compare(
        committed, fresh, tolerance=tolerance, skipped=skipped, same_numerics=same_machine
    )
    if not same_machine:
        report.notes.append(
            f"this machine's float kernels differ from those that made the committed "
            f"leaderboard (numerics fingerprint {here}, committed {made_with or 'none'}): "
            f"training diverges by a few ulps per step, so cells are compared by their mean "
            f"|delta| instead (see docs/leaderboards/check.md#another-machine)"
        )
    report.failures += [f"{cell}: run failed ({why})" for cell, why in summary.failed.items()]
    for line in report.lines():
        console.print(line, markup=False, highlight=False)
    if not report.ok:
        raise SystemExit(f"leaderboard check failed; regenerated files kept in {scratch}")
    shutil.rmtree(scratch)


def _committed_subset(suite: Suite, results_dir: Path, scratch: Path, console: Console) -> Path:
    """The leaderboard of the committed rows of `suite`'s cells, aggregated in `scratch`."""
    rows_csv = results_dir / "suites" / suite.name / "rows.csv"
    if not rows_csv.is_file():
        raise SystemExit(
            f"--check with check_seeds needs the committed rows at {rows_csv}; run "
            f"`circlebench leaderboard --suite {suite.name}` and commit that file too"
        )
    work = scratch / "suites" / suite.name
    work.mkdir(parents=True)
    shutil.copyfile(rows_csv, work / "rows.csv")
    build(suite, scratch, console, None, wandb=False)
    return scratch / suite.output / "leaderboard.csv"


def log_wandb_table(
    board: pd.DataFrame, suite_name: str, work: Path, console: Console, *, forked: bool = False
) -> None:
    """Log the leaderboard as a `wandb.Table`, in the mode every W&B run takes
    (`settle_wandb_mode`); a W&B problem is printed and skipped. `forked`: in a child of the
    fork server, which has imported W&B already, its output in `work/wandb-table.log`."""
    from benchmark.training.loggers import settle_wandb_mode  # imports Lightning

    chosen = settle_wandb_mode()
    if chosen is None or board.empty:  # disabled, or a mode W&B rejects
        return
    work.mkdir(parents=True, exist_ok=True)
    if forked:
        log = work / "wandb-table.log"
        status = run_forked(Call(_log_table, (board, suite_name, work, chosen)), log, threads=1)
        if status != 0:
            console.print(f"W&B: leaderboard table not logged (exit status {status}; see {log})")
        return
    try:
        _log_table(board, suite_name, work, chosen)
    except Exception as error:  # W&B is optional; the files are the leaderboard of record
        console.print(f"W&B: leaderboard table not logged ({type(error).__name__}: {error})")


def _log_table(
    board: pd.DataFrame, suite_name: str, work: Path, mode: Literal["online", "offline"]
) -> None:
    import wandb

    run = wandb.init(
        project="circlebench-leaderboard",
        name=f"leaderboard-{suite_name}",
        job_type="leaderboard",
        mode=mode,
        dir=str(work),
        settings=wandb.Settings(init_timeout=30, silent=True),
    )
    cells = board.astype(object).where(board.notna(), None)  # W&B columns keep one type
    run.log({"leaderboard": wandb.Table(dataframe=cells)})
    run.finish()
