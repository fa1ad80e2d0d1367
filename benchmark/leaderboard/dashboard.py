"""`circlebench dashboard --suite NAME`: the suite's W&B view as code (`wandb-workspaces`).

The view is a W&B report (only a report gives each panel grid its own run set): the table that
`circlebench leaderboard` logged, then per group a panel grid over the group's runs (by their
config `circlebench.suite` and `circlebench.cell_id`), grouped by loss: test metrics (mean ±
standard error: W&B draws no t interval), validation curves, training s_p and s_n, loss
hyper-parameters, and a group's tuning histories. The spec goes to
`results/suites/<suite>/dashboard.json`; `--publish` saves it (a view of the same title is
updated), bounded in time and without prompts (`wandb_views`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pandas as pd
import wandb_workspaces.reports.v2 as wr
from wandb_workspaces import expr

from benchmark.errors import ArgumentParser
from benchmark.leaderboard.aggregate import TUNED, aggregate_rows, board_metrics
from benchmark.leaderboard.cells import suite_rows
from benchmark.leaderboard.run_logs import logged_columns, runs_of
from benchmark.leaderboard.suite import load_suite
from benchmark.leaderboard.wandb_views import ViewStore, WandbViewStore, publish_within
from benchmark.manual import manual_line
from benchmark.training.loggers import wandb_has_credentials, wandb_server_reachable
from benchmark.tuning.history import PROJECT as HISTORY_PROJECT
from core.atomic import write_text

LEADERBOARD_PROJECT = "circlebench-leaderboard"  # where `leaderboard` logs its table
SPEC_FILE = "dashboard.json"
RESULTS = Path("results")  # the default --results-dir
X_AXIS = "trainer/global_step"  # Lightning's W&B logger steps every metric by it
SIZES = ("num_classes", "embedding_dim")  # loss arguments that are shapes, not hyper-parameters


def build_view(board: pd.DataFrame, rows: pd.DataFrame, suite: str, entity: str = "") -> wr.Report:
    """The view of a suite's `board` and its results `rows` (whose run folders, where present,
    say which validation metrics to chart); `entity` owns the projects ("": filled in on
    publishing)."""
    board_runs = wr.Runset(
        entity=entity,
        project=LEADERBOARD_PROJECT,
        name="leaderboard",
        filters=expr.And(expr.Metric("Name") == f"leaderboard-{suite}"),
    )
    table = wr.WeavePanelSummaryTable(table_name="leaderboard", layout=wr.Layout(w=24, h=12))
    table_grid = wr.PanelGrid(runsets=[board_runs], panels=[table])
    blocks: list[Any] = [wr.H1("Leaderboard"), table_grid]
    for group, entries in board.groupby("group", sort=False):
        blocks += _group_section(str(group), entries, runs_of(rows, entries), suite, entity)
    view = wr.Report(
        project=LEADERBOARD_PROJECT,
        entity=entity,
        title=f"circlebench: suite {suite}",
        description=f"Made by `circlebench dashboard --suite {suite}`; a publish replaces it.",
        blocks=blocks,
        width="fluid",
    )
    _stable_ids(view, suite)
    return view


def _group_section(
    group: str, entries: pd.DataFrame, runs: pd.DataFrame, suite: str, entity: str
) -> list[Any]:
    """Heading, facts and the panel grid of one leaderboard group."""
    datasets = sorted(set(entries["dataset"].astype(str)))
    tracks = sorted(set(entries["track"].astype(str)))
    seeds = sorted({s for text in entries["seeds"].astype(str) for s in text.split()}, key=int)
    cells = sorted(
        f"{experiment}/seed{seed}"
        for experiment, text in zip(entries["experiment"], entries["seeds"], strict=True)
        for seed in str(text).split()
    )
    filters = expr.And(
        expr.Config("circlebench.suite") == suite,
        expr.Config("circlebench.cell_id").isin(cells),
    )
    runsets = [
        wr.Runset(
            entity=entity,
            project=f"circlebench-{dataset}",
            name=f"{group} ({dataset})",
            filters=filters,
            groupby=["group"],  # `<dataset>/<loss>`: one bar or line per loss
        )
        for dataset in datasets
    ]
    metrics = board_metrics(entries)
    panels = _metric_panels(metrics, logged_columns(runs))
    params = _hyper_parameters(entries)
    if params and metrics:
        panels.append(_parallel_coordinates(params, metrics[0]))
    heading = f"{group}: {', '.join(datasets)}, {', '.join(tracks)}"
    facts = f"{len(entries)} experiments, seeds {' '.join(seeds)}"
    blocks = [wr.H1(heading), wr.P(facts), wr.PanelGrid(runsets=runsets, panels=panels)]
    if entries["experiment"].str.endswith(TUNED).any():
        blocks += _tuning_grid(suite, group, entity)
    return blocks


def _tuning_grid(suite: str, group: str, entity: str) -> list[Any]:
    """The group's studies (`benchmark.tuning.history`: one run per loss): each trial's
    validation score and the best so far. Tuned and default runs already stand apart in the
    bars above (W&B group `<dataset>/<loss>.tuned`)."""
    studies = wr.Runset(
        entity=entity,
        project=HISTORY_PROJECT,
        name=f"{group} studies",
        filters=expr.And(expr.Config("circlebench.group") == group),
    )
    panels: list[Any] = [
        wr.LinePlot(title="best validation score so far, per study (x: trial)", y=["tune/best"]),
        wr.LinePlot(title="each trial's validation score (x: trial)", y=["tune/value"]),
    ]
    note = f"Tuning: the studies of `circlebench tune --suite {suite} --group {group}`."
    return [wr.P(note), wr.PanelGrid(runsets=[studies], panels=panels)]


def _metric_panels(metrics: list[str], logged: set[str]) -> list[Any]:
    """Bars of the test metrics, lines of the validation metrics logged, s_p and s_n curves."""
    panels: list[Any] = [
        wr.BarPlot(
            title=f"test/{m} by loss (mean ± s.e. over seeds)",
            metrics=[f"test/{m}"],
            orientation="v",
            groupby_aggfunc="mean",
            groupby_rangefunc="stderr",
        )
        for m in metrics
    ]
    panels += [
        wr.LinePlot(
            title=f"val/{m} by loss",
            x=X_AXIS,
            y=[f"val/{m}"],
            groupby_aggfunc="mean",
            groupby_rangefunc="stderr",
        )
        for m in metrics
        if f"val/{m}" in logged
    ]
    return panels + [
        wr.LinePlot(
            title=f"{name} during training by loss (Circle paper, Fig. 4)",
            x=X_AXIS,
            y=[key],
            groupby_aggfunc="mean",
            smoothing_type="exponential",
            smoothing_factor=0.8,
        )
        for key, name in (("train/sp_mean", "mean s_p"), ("train/sn_mean", "mean s_n"))
    ]


def _parallel_coordinates(params: list[str], metric: str) -> wr.ParallelCoordinatesPlot:
    """The loss hyper-parameters (as the runs' config holds them), then the test metric."""
    columns = [
        wr.ParallelCoordinatesPlotColumn(metric=wr.Config(f"model.loss.init_args.{p}"))
        for p in params
    ]
    columns.append(wr.ParallelCoordinatesPlotColumn(metric=wr.SummaryMetric(f"test/{metric}")))
    return wr.ParallelCoordinatesPlot(title="loss hyper-parameters", columns=columns)


def _hyper_parameters(entries: pd.DataFrame) -> list[str]:
    """Numeric loss arguments of the group's experiments (sources and shapes left out), sorted."""
    names: set[str] = set()
    for text in entries["loss_params"].astype(str):
        params = json.loads(text) if text.startswith("{") else {}
        # exact types: JSON's true/false load as bool, a subclass of int but no hyper-parameter
        names |= {k for k, v in params.items() if type(v) in (int, float) and k not in SIZES}
    return sorted(names)


def _stable_ids(view: wr.Report, suite: str) -> None:
    """Ids from the blocks' positions instead of random ones: the spec is the same on every
    build, so a golden file can pin it and a publish changes only what changed."""
    for b, block in enumerate(view.blocks):
        if isinstance(block, wr.PanelGrid):
            for r, runset in enumerate(block.runsets):
                runset._id = _id(f"{suite}/{b}/runset/{r}")
            for p, panel in enumerate(block.panels):
                if isinstance(panel, wr.interface.Panel):
                    panel._id = _id(f"{suite}/{b}/panel/{p}")


def _id(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:11]


def view_spec(view: wr.Report) -> dict[str, Any]:
    """What `--publish` would save, as JSON-ready data, with the package version that made it."""
    spec = view._to_model().model_dump(by_alias=True, exclude_none=True, mode="json")
    return {"wandb_workspaces": version("wandb-workspaces"), "view": spec}


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="circlebench dashboard",
        description="Write a suite's W&B view as JSON; --publish saves it to W&B.",
        epilog=manual_line("dashboard"),
    )
    parser.add_argument("--suite", required=True, help="suite name, e.g. quick, ci, paper")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    parser.add_argument("--entity", default="", help="W&B entity (default: your default entity)")
    parser.add_argument(
        "--publish", action="store_true", help="save the view to W&B (needs `wandb login`)"
    )
    return parser


def main(
    argv: list[str] | None = None, store_factory: Callable[[], ViewStore] = WandbViewStore
) -> None:
    """Entry point of `circlebench dashboard` (`store_factory`: the W&B server; tests: a fake)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    suite = parser.loaded(lambda: load_suite(args.suite, Path(".")))
    work = args.results_dir / "suites" / suite.name
    rows = suite_rows(work / "rows.csv", suite.cells())
    if rows.empty:
        raise SystemExit(
            f"no rows for suite {suite.name!r} in {work / 'rows.csv'}: run "
            f"`circlebench leaderboard --suite {suite.name}` first"
        )
    board = aggregate_rows(rows)
    spec_path = work / SPEC_FILE
    # entity-free: naming one makes wandb-workspaces ask the server (filled in on --publish)
    spec = view_spec(build_view(board, rows, suite.name))
    write_text(spec_path, json.dumps(spec, indent=1) + "\n")
    print(f"wrote {spec_path}: the W&B view of suite {suite.name!r} ({len(board)} experiments)")
    if not args.publish:
        again = f"circlebench dashboard --suite {suite.name}"  # the same rows and entity
        again += f" --results-dir {args.results_dir}" if args.results_dir != RESULTS else ""
        again += f" --entity {args.entity}" if args.entity else ""
        print(
            f"publish it with `{again} --publish` "
            "(needs W&B credentials: `wandb login` or WANDB_API_KEY)"
        )
        return
    if not wandb_has_credentials():  # WANDB_MODE alone is no account to save to
        raise SystemExit("--publish: no W&B credentials; run `wandb login` or set WANDB_API_KEY")
    if not wandb_server_reachable():
        raise SystemExit("--publish: the W&B server cannot be reached; nothing was saved")
    done = publish_within(
        lambda entity: build_view(board, rows, suite.name, args.entity or entity), store_factory
    )
    if done.error:
        raise SystemExit(f"--publish: the view was not saved ({done.error}); spec in {spec_path}")
    print(f"saved the W&B view: {done.url}")
