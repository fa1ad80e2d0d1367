"""`circlebench dashboard`: the W&B view's spec (golden file), its keys, publishing (fake store)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import wandb_workspaces.reports.v2 as wr
from wandb_workspaces import expr

from benchmark.cli import main as circlebench
from benchmark.leaderboard import dashboard
from benchmark.leaderboard.aggregate import aggregate_rows
from benchmark.leaderboard.dashboard import build_view, view_spec
from benchmark.leaderboard.wandb_views import publish, publish_within
from benchmark.training.rows import read_results
from tests.benchmark.leaderboard.hand_made import hand_made_suite
from tests.benchmark.leaderboard.wandb_records import offline_child_env, read_offline_run

GOLDEN = Path(__file__).parent / "golden" / "dashboard_t.json"
REPO = Path(__file__).resolve().parents[3]
EXPERIMENTS = REPO / "experiments"


def test_the_spec_of_a_hand_made_suite_matches_the_golden_file(tmp_path: Path) -> None:
    """Regenerate after a deliberate change: CIRCLEBENCH_UPDATE_GOLDEN=1 pytest -k golden."""
    board, rows = hand_made_suite(tmp_path)
    spec = json.dumps(view_spec(build_view(board, rows, "t")), indent=1) + "\n"
    if os.environ.get("CIRCLEBENCH_UPDATE_GOLDEN"):
        GOLDEN.write_text(spec)
    assert spec == GOLDEN.read_text(), "the view changed: check it, then update the golden file"


def test_one_section_per_group_with_its_cells_and_panels(tmp_path: Path) -> None:
    board, rows = hand_made_suite(tmp_path)
    view = build_view(board, rows, "t", entity="me")
    headings = [b.text for b in view.blocks if isinstance(b, wr.H1)]
    assert headings == [
        "Leaderboard",
        "syn: synthetic, end-to-end",
        "reid: synthetic_reid, end-to-end",
    ]
    grids = [b for b in view.blocks if isinstance(b, wr.PanelGrid)]
    (syn_runs,) = grids[1].runsets
    assert (syn_runs.entity, syn_runs.project, syn_runs.groupby) == (
        "me",
        "circlebench-synthetic",
        ["group"],
    )
    cells = [f"syn/{e}/seed{s}" for e in ("circle", "circle_class", "triplet") for s in (0, 1)]
    assert [(f.key.name, f.value) for f in _filters(syn_runs)] == [
        ("circlebench.suite", "t"),
        ("circlebench.cell_id", cells),
    ]
    titles = [p.title for p in grids[1].panels]
    assert titles[:3] == [
        f"test/{m} by loss (mean ± s.e. over seeds)" for m in ("R@1", "R@2", "mAP")
    ]
    assert "val/R@1 by loss" in titles  # syn logged a validation split
    assert not any(t.startswith("val/") for t in (p.title for p in grids[2].panels))  # reid did not
    (coordinates,) = [p for p in grids[1].panels if isinstance(p, wr.ParallelCoordinatesPlot)]
    assert [c.metric.name for c in coordinates.columns] == [
        "model.loss.init_args.gamma",
        "model.loss.init_args.m",
        "model.loss.init_args.margin",
        "test/R@1",
    ]


def _filters(runset: wr.Runset) -> list[expr.FilterExpr]:
    """The run set's filters (it keeps them as a string)."""
    return expr.string_to_filterexpr_list(str(runset.filters))


def _names(view: wr.Report) -> dict[str, set[str]]:
    """Every key the view's panels and run sets read, by where a run keeps it."""
    names: dict[str, set[str]] = {"history": set(), "summary": set(), "config": set()}
    for block in view.blocks:
        if (
            not isinstance(block, wr.PanelGrid)
            or block.runsets[0].project == "circlebench-leaderboard"
        ):
            continue  # the leaderboard's own run: `leaderboard` logs its table, not the cells
        for runset in block.runsets:
            names["config"] |= {f.key.name for f in _filters(runset)}
        for panel in block.panels:
            if isinstance(panel, wr.BarPlot):
                names["summary"] |= set(panel.metrics)
            elif isinstance(panel, wr.LinePlot):
                names["history"] |= {panel.x, *panel.y}
            elif isinstance(panel, wr.ParallelCoordinatesPlot):
                for column in panel.columns:
                    kind = "config" if isinstance(column.metric, wr.Config) else "summary"
                    names[kind].add(column.metric.name)
    return names


def _offline_cell(tmp_path: Path, command: str, cell_id: str, *options: str):
    """`command` on circle.yaml as suite t's cell `cell_id`, in its own process with W&B
    offline, as a leaderboard cell runs (its exit completes the run's file): its rows and
    the offline run read back from that `.wandb` file."""
    env = offline_child_env(tmp_path) | {"OMP_NUM_THREADS": "1"}
    rows_csv = tmp_path / "rows.csv"
    args = [
        sys.executable, "-m", "benchmark.training.cli", command,
        "--config", str(EXPERIMENTS / "synthetic/fine_grained/circle.yaml"),
        "--model.embedder.init_args.backbone=test_efficientnet",
        "--model.embedder.init_args.pretrained=false", "--model.embedder.init_args.head=linear",
        "--data.init_args.image_size=32",
        "--data.init_args.images_per_class=4", "--data.init_args.eval_batch_size=64",
        *options,
        "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false",
        f"--results_csv={rows_csv}",
        f"--trainer.default_root_dir={tmp_path / 'runs'}", "--wandb=true",
        "--suite", "t", "--cell_id", cell_id,
    ]  # fmt: skip
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_results(rows_csv)
    (log,) = Path(rows["run_dir"].iloc[0]).glob("wandb/offline-run-*/run-*.wandb")
    return rows, read_offline_run(log)


def test_every_panel_names_what_an_offline_run_logs(tmp_path: Path) -> None:
    """A real `fit`; its `.wandb` file, not a list typed here, has the keys."""
    rows, run = _offline_cell(
        tmp_path, "fit", "syn/circle/seed0",
        "--data.init_args.val_classes=10", "--data.init_args.batches_per_epoch=1",
        "--trainer.max_epochs=1", "--trainer.log_every_n_steps=1",  # its one step logs train/*
    )  # fmt: skip
    assert (run.project, run.group) == ("circlebench-synthetic", "synthetic/circle")
    assert (run.name, run.job_type) == ("synthetic/circle/seed0", "train")
    assert run.config["circlebench.suite"] == "t" and run.config["circlebench.seed"] == 0
    assert run.config["circlebench.cell_id"] == "syn/circle/seed0"
    assert run.config["circlebench.track"] == "end-to-end"
    assert run.config["circlebench.paradigm"] == "pair-wise"
    assert len(str(run.config["circlebench.git_sha"])) >= 40  # the repository's revision
    names = _names(build_view(aggregate_rows(rows), rows, "t"))
    assert "val/R@1" in names["history"] and "train/sp_mean" in names["history"]
    assert names["history"] - run.history == set()
    assert names["summary"] - run.summary == set()
    assert names["config"] - set(run.config) == set()


def test_the_floor_is_a_w_and_b_group_of_its_own(tmp_path: Path) -> None:
    """A floor cell tests circle.yaml untrained: labelled by its config, it would share the
    trained Circle runs' group, and the dashboard's per-loss bars would average the two."""
    _, run = _offline_cell(tmp_path, "test", "syn/floor/seed0")
    assert (run.group, run.name) == ("synthetic/floor", "synthetic/floor/seed0")


class FakeStore:
    """A W&B server that keeps views in a dict and records every call."""

    def __init__(self) -> None:
        self.views: dict[str, str] = {}  # id -> title
        self.calls: list[tuple[str, ...]] = []

    def default_entity(self) -> str:
        return "me"

    def find(self, entity: str, project: str, title: str) -> str | None:
        self.calls.append(("find", entity, project, title))
        return next((i for i, t in self.views.items() if t == title), None)

    def save(self, view: wr.Report) -> str:
        self.calls.append(("save", view.entity, view.id))
        view.id = view.id or f"view{len(self.views) + 1}"
        self.views[view.id] = view.title
        return f"https://wandb.example/{view.entity}/{view.project}/reports/{view.id}"


def test_a_second_publish_updates_the_same_view(tmp_path: Path) -> None:
    board, rows = hand_made_suite(tmp_path)
    store = FakeStore()
    first = publish(build_view(board, rows, "t", "me"), store)
    second = publish(build_view(board, rows, "t", "me"), store)
    assert first == second == "https://wandb.example/me/circlebench-leaderboard/reports/view1"
    assert store.views == {"view1": "circlebench: suite t"}
    assert store.calls == [
        ("find", "me", "circlebench-leaderboard", "circlebench: suite t"),
        ("save", "me", ""),
        ("find", "me", "circlebench-leaderboard", "circlebench: suite t"),
        ("save", "me", "view1"),
    ]


def test_a_hung_server_is_abandoned_after_the_time_out(tmp_path: Path) -> None:
    release = threading.Event()

    class HungStore(FakeStore):
        def find(self, entity: str, project: str, title: str) -> str | None:
            release.wait(30)  # a connection that never answers
            return None

    board, rows = hand_made_suite(tmp_path)
    done = publish_within(lambda entity: build_view(board, rows, "t", entity), HungStore, 0.2)
    release.set()
    assert done.error == "no answer within 0 s" and done.url == ""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout whose suite `t` has the hand-made suite's cells, and their rows."""
    for group, stems in (
        ("syn", ("circle", "triplet", "circle_class")),
        ("reid", ("circle", "softmax")),
    ):
        (tmp_path / "experiments" / group).mkdir(parents=True)
        for stem in stems:
            (tmp_path / f"experiments/{group}/{stem}.yaml").write_text("{}\n")
    (tmp_path / "experiments/suites").mkdir()
    (tmp_path / "experiments/suites/t.yaml").write_text(
        "seeds: [0, 1]\ngroups:\n  syn: {configs: experiments/syn/*.yaml}\n"
        "  reid: {configs: experiments/reid/*.yaml}\n"
    )
    work = tmp_path / "results/suites/t"
    work.mkdir(parents=True)
    hand_made_suite(work)
    monkeypatch.chdir(tmp_path)
    for name in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc login
    return tmp_path


def test_offline_the_command_writes_the_spec_and_says_how_to_publish(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    circlebench(["dashboard", "--suite", "t"])
    out = capsys.readouterr().out
    spec = project / "results/suites/t/dashboard.json"
    assert f"wrote {spec.relative_to(project)}" in out
    assert "circlebench dashboard --suite t --publish" in out
    board, rows = (
        aggregate_rows(read_results(spec.parent / "rows.csv")),
        read_results(spec.parent / "rows.csv"),
    )
    assert json.loads(spec.read_text()) == view_spec(build_view(board, rows, "t"))
    monkeypatch.setenv("WANDB_MODE", "offline")  # a mode is no account to save to
    with pytest.raises(SystemExit, match="no W&B credentials; run `wandb login`"):
        circlebench(["dashboard", "--suite", "t", "--publish"])
    with pytest.raises(SystemExit, match="no rows for suite 't'"):
        dashboard.main(["--suite", "t", "--results-dir", "elsewhere"])
    (project / "results").rename(project / "elsewhere")  # the hint keeps where the rows are
    dashboard.main(["--suite", "t", "--results-dir", "elsewhere", "--entity", "lab"])  # offline
    hint = "dashboard --suite t --results-dir elsewhere --entity lab --publish"
    assert hint in capsys.readouterr().out


def test_publish_saves_then_updates_through_the_command(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setattr(dashboard, "wandb_server_reachable", lambda: True)
    store = FakeStore()
    for _ in range(2):
        dashboard.main(["--suite", "t", "--publish"], store_factory=lambda: store)
    assert "saved the W&B view: https://wandb.example/me/" in capsys.readouterr().out
    assert [c[0] for c in store.calls] == ["find", "save", "find", "save"]
    assert list(store.views) == ["view1"]
    monkeypatch.setattr(dashboard, "wandb_server_reachable", lambda: False)
    with pytest.raises(SystemExit, match="server cannot be reached; nothing was saved"):
        dashboard.main(["--suite", "t", "--publish"], store_factory=lambda: store)
    assert len(store.calls) == 4
