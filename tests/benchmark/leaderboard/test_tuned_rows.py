"""Boards with tuned rows: cells of a group that tunes, references by setting, the tuning notes."""

from __future__ import annotations

import dataclasses
import html
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import wandb_workspaces.reports.v2 as wr
from matplotlib.container import BarContainer

from benchmark.leaderboard import command as leaderboard
from benchmark.leaderboard.aggregate import aggregate_rows, paired_difference
from benchmark.leaderboard.dashboard import build_view
from benchmark.leaderboard.markdown import leaderboard_markdown, terminal_summary
from benchmark.leaderboard.plots import optimisation_history, tuned_vs_default
from benchmark.leaderboard.report import write_report
from benchmark.leaderboard.suite import load_suite
from benchmark.tuning.experiment import Budget
from benchmark.tuning.tuned import GroupStudies, group_files, recipe
from tests.benchmark.leaderboard.test_leaderboard import fake_runner, frame, row
from tests.benchmark.leaderboard.wandb_records import offline_child_env, read_offline_run

BUDGET = "30 trials x 3 folds, <= 4 epochs, val MAP@R"
REPO = Path(__file__).resolve().parents[3]


def _rows() -> pd.DataFrame:
    """Floor, Circle and triplet as configured and as tuned, 3 seeds each."""
    rows = []
    values = {
        "g/floor": ("none (pretrained)", [40.0, 41.0, 39.0], ""),
        "g/circle": ("CircleLoss", [50.0, 52.0, 51.0], ""),
        "g/triplet": ("TripletLoss", [45.0, 44.0, 47.0], ""),
        "g/circle.tuned": ("CircleLoss", [53.0, 55.0, 52.0], BUDGET),
        "g/triplet.tuned": ("TripletLoss", [54.0, 53.0, 55.0], BUDGET),
    }
    for experiment, (loss, recalls, tuning) in values.items():
        for seed, r1 in enumerate(recalls):
            rows.append(row(f"{experiment}/seed{seed}", seed, r1, loss=loss, tuning=tuning))
    return frame(*rows)


def test_a_tuned_loss_is_compared_with_its_default_with_tuned_circle_and_the_floor() -> None:
    rows = _rows()
    board = aggregate_rows(rows).set_index("experiment")
    by_seed = {
        e: rows[rows["cell_id"].str.startswith(e + "/")].set_index("seed")["R@1"]
        for e in board.index
    }
    mean, ci, n = paired_difference(by_seed["g/triplet.tuned"], by_seed["g/triplet"])
    assert board.at["g/triplet.tuned", "R@1_vs_default_mean"] == pytest.approx(mean)
    assert board.at["g/triplet.tuned", "R@1_vs_default_ci95"] == pytest.approx(ci) and n == 3
    tuned_vs_tuned = paired_difference(by_seed["g/triplet.tuned"], by_seed["g/circle.tuned"])[0]
    assert board.at["g/triplet.tuned", "R@1_vs_circle_mean"] == pytest.approx(tuned_vs_tuned)
    for reference in ("circle", "floor", "default"):  # a default row is compared with nothing
        assert pd.isna(board.at["g/triplet", f"R@1_vs_{reference}_mean"])
    assert pd.isna(board.at["g/circle.tuned", "R@1_vs_circle_mean"])  # not its own reference
    floor = paired_difference(by_seed["g/circle.tuned"], by_seed["g/floor"])[0]
    assert board.at["g/circle.tuned", "R@1_vs_floor_mean"] == pytest.approx(floor)


def _studies() -> GroupStudies:
    summary = {
        "budget": {"metric": "MAP@R"},
        "default": {"value": 4.5},
        "median_value": 4.9,
        "best": {"value": 5.12, "epoch": 4, "params": {"margin": 0.0512345, "head_lr": 0.001}},
        "trials": {"complete": 29, "failed": 1, "pruned": 0, "interrupted": 2},
    }
    trials = pd.DataFrame(
        {"number": [0, 1, 2], "state": ["COMPLETE", "FAIL", "COMPLETE"], "value": [4.5, "", 5.12]}
    )
    return GroupStudies(BUDGET, {"triplet": summary}, {"triplet": trials})


def test_markdown_shows_the_setting_the_budget_and_how_hard_each_loss_was_to_tune() -> None:
    board = aggregate_rows(_rows())
    text = leaderboard_markdown(
        board, title="t", description="", paper=pd.DataFrame(), paper_datasets={},
        studies={"g": _studies()},
    )  # fmt: skip
    head = next(line for line in text.splitlines() if line.startswith("| loss | labels |"))
    assert "| setting |" in head and "Δ default R@1" in head
    tuned_line = next(
        line for line in text.splitlines() if "| tuned |" in line and "Triplet" in line
    )
    assert "+8.67 ± " in tuned_line  # tuned minus default, paired over the three seeds
    assert f"Tuning (`circlebench tune`): {BUDGET}; every loss the same" in text
    assert "| triplet | 4.50 | 4.90 | 5.12 | 4 | 30 (1) | margin=0.0512, head_lr=0.001 |" in text
    ((_, table),) = terminal_summary(board)
    assert table[0][:3] == ["loss", "labels", "setting"] and table[0][-1] == "Δ default R@1"


def test_the_report_has_a_tuning_section_per_group_that_tunes(tmp_path: Path) -> None:
    board, rows = aggregate_rows(_rows()), _rows().assign(run_dir="")
    page = write_report(board, rows, tmp_path / "r.html", title="t", studies={"g": _studies()})
    page = page.read_text()
    budget = html.escape(BUDGET)
    assert "<h3>Tuning</h3>" in page and f"{budget}; every loss the same" in page
    assert "id='fig-0-tuned'" in page and "id='fig-0-history'" in page
    assert ">tuned<" in page and budget not in page.split("<h3>Tuning</h3>")[0]


def test_the_tuning_figures_draw_the_board_and_the_finished_trials() -> None:
    (ax,) = tuned_vs_default(aggregate_rows(_rows()), "R@1").axes
    bars = {c.get_label(): [p.get_height() for p in c] for c in ax.containers
            if isinstance(c, BarContainer)}  # fmt: skip
    assert [tick.get_text() for tick in ax.get_xticklabels()] == ["circle", "triplet"]
    assert bars["default"] == pytest.approx([51.0, 136 / 3])  # mean R@1 over the 3 seeds
    assert bars["tuned"] == pytest.approx([160 / 3, 54.0])
    (ax,) = optimisation_history(_studies()).axes
    (best,) = ax.get_lines()  # trial 1 failed: the dots and the best so far skip it
    assert best.get_xydata().tolist() == [[0, 4.5], [2, 5.12]]
    assert ax.collections[0].get_offsets().tolist() == [[0, 4.5], [2, 5.12]]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout with a suite whose group tunes its two configs."""
    (tmp_path / "experiments/syn").mkdir(parents=True)
    (tmp_path / "experiments/suites").mkdir()
    for name in ("circle", "triplet"):
        (tmp_path / f"experiments/syn/{name}.yaml").write_text("{}\n")
    (tmp_path / "experiments/suites/t.yaml").write_text(
        "seeds: [0, 1]\ngroups:\n  syn:\n    configs: experiments/syn/*.yaml\n"
        "    overrides: [--b=2]\n    tuning: {trials: 30, folds: 3, max_epochs: 4}\n"
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _tune(project: Path, stem: str, overrides: tuple[str, ...] = ("--b=2",)) -> Path:
    """Write the tuned files `circlebench tune --suite t --group syn` would."""
    files = group_files("syn", stem, project)
    files.folder.mkdir(parents=True, exist_ok=True)
    files.config.write_text("trainer: {max_epochs: 3}\n")
    summary = {
        "tuned_for": recipe(Path(f"experiments/syn/{stem}.yaml"), overrides, project),
        "budget": dataclasses.asdict(Budget(trials=30, folds=3, max_epochs=4)),
    }
    files.summary.write_text(json.dumps(summary))
    return files.config


def test_a_tuned_cell_waits_for_its_tuning_then_trains_the_tuned_setting(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []
    monkeypatch.setitem(leaderboard.RUNNERS, leaderboard.DEFAULT_ISOLATION, fake_runner(calls))
    cells = load_suite("t", project).cells()
    assert [c.cell_id for c in cells] == [
        f"syn/{stem}{setting}/seed{seed}"
        for stem in ("circle", "triplet") for setting in ("", ".tuned") for seed in (0, 1)
    ]  # fmt: skip
    assert "not tuned yet: run `circlebench tune --suite t --group syn --loss circle`" in str(
        cells[2].unavailable(project)
    )
    tuned = _tune(project, "circle")
    _tune(project, "triplet", overrides=("--b=1",))  # tuned for an older group entry
    assert cells[2].unavailable(project) is None
    assert "tuned for another config or overrides" in str(cells[6].unavailable(project))
    leaderboard.main(["--suite", "t", "--no-wandb"])
    ran = {a[a.index("--cell_id") + 1]: a for a in calls}
    assert set(ran) == {c.cell_id for c in cells} - {
        "syn/triplet.tuned/seed0",
        "syn/triplet.tuned/seed1",
    }
    args = ran["syn/circle.tuned/seed0"]
    assert args[-4:] == [
        "--config",
        str(tuned.relative_to(project)),
        "--tuning",
        Budget(30, 3, 4).describe(),
    ]
    assert "--config" not in ran["syn/circle/seed0"][3:]  # the default cell: its config only
    recipe_before = cells[2].recipe(project, None)
    tuned.write_text("trainer: {max_epochs: 2}\n")  # re-tuned: the tuned cells run again
    assert cells[2].recipe(project, None) != recipe_before
    assert cells[0].recipe(project, None) == load_suite("t", project).cells()[0].recipe(
        project, None
    )


def test_a_tuned_row_of_an_edited_config_is_removed_and_fails_the_check(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []
    monkeypatch.setitem(leaderboard.RUNNERS, leaderboard.DEFAULT_ISOLATION, fake_runner(calls))
    _tune(project, "circle")
    _tune(project, "triplet")
    leaderboard.main(["--suite", "t", "--no-wandb"])
    # Edited after tuning: the tuned setting was found for the old file, its rows are stale.
    (project / "experiments/syn/circle.yaml").write_text("trainer: {max_epochs: 5}\n")
    with pytest.raises(SystemExit, match="leaderboard check failed"):
        leaderboard.main(["--suite", "t", "--check", "--no-wandb"])
    leaderboard.main(["--suite", "t", "--no-wandb"])
    board = pd.read_csv(project / "results/suites/t/leaderboard.csv")
    assert "syn/circle.tuned" not in set(board["experiment"])
    assert {"syn/circle", "syn/triplet.tuned"} <= set(board["experiment"])


@pytest.mark.parametrize(
    ("tuning", "match"),
    [
        ("[30]", r"tuning must be a mapping"),
        ("{trials: 30, epochs: 4}", r"unexpected keyword argument 'epochs'"),
        ("{trials: 0}", r"trials must be an int >= 1"),
        ("{folds: 1}", r"folds must be >= 2"),
        ("{pruner: hyperband}", r"pruner must be none or wilcoxon"),
    ],
)
def test_bad_tuning_budgets_are_explained(project: Path, tuning: str, match: str) -> None:
    (project / "experiments/suites/b.yaml").write_text(
        f"groups:\n  syn: {{configs: experiments/syn/*.yaml, tuning: {tuning}}}\n"
    )
    with pytest.raises(ValueError, match=match):
        load_suite("b", project)


def test_a_group_can_run_its_losses_as_tuned_only(project: Path) -> None:
    (project / "experiments/suites/q.yaml").write_text(
        "seeds: [0]\ngroups:\n  syn:\n    configs: experiments/syn/*.yaml\n"
        "    tuning: {trials: 30}\n    settings: [tuned]\n"
    )
    cells = load_suite("q", project).cells()
    assert [c.cell_id for c in cells] == ["syn/circle.tuned/seed0", "syn/triplet.tuned/seed0"]


@pytest.mark.parametrize(
    "group",
    [
        "{configs: experiments/syn/*.yaml, tuning: {trials: 30}, settings: []}",
        "{configs: experiments/syn/*.yaml, tuning: {trials: 30}, settings: [best]}",
        "{configs: experiments/syn/*.yaml, tuning: {trials: 30}, settings: tuned}",
        "{configs: experiments/syn/*.yaml, settings: [tuned]}",
    ],
)
def test_bad_settings_are_explained(project: Path, group: str) -> None:
    (project / "experiments/suites/b.yaml").write_text(f"groups:\n  syn: {group}\n")
    with pytest.raises(ValueError, match=r"settings must be a non-empty list from \['default'"):
        load_suite("b", project)


def test_the_w_and_b_view_shows_each_study_the_history_logged(tmp_path: Path) -> None:
    """`tune` logs a study offline, in a process of its own (its exit completes the run's
    file); the view's tuning grid names keys that run has."""
    studies = _studies()
    summary = {**studies.summaries["triplet"], "space": "experiments/spaces/triplet.yaml"}
    studies.trials["triplet"].to_csv(tmp_path / "trials.csv", index=False)
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    script = (
        "import json, sys, pandas as pd; from pathlib import Path;"
        "from benchmark.tuning.history import log_history;"
        "t = pd.read_csv(sys.argv[1], keep_default_na=False);"
        "s = json.loads(Path(sys.argv[2]).read_text());"
        "sys.exit(log_history('g/triplet', s, t, Path(sys.argv[3])))"
    )
    env = offline_child_env(tmp_path) | {"PYTHONPATH": str(REPO)}
    paths = [str(tmp_path / n) for n in ("trials.csv", "summary.json", "w")]
    subprocess.run([sys.executable, "-c", script, *paths], env=env, check=True)
    (log,) = (tmp_path / "w").glob("wandb/offline-run-*/run-*.wandb")
    run = read_offline_run(log)
    assert (run.project, run.group, run.name, run.job_type) == (
        "circlebench-tuning", "g", "g/triplet", "tune",
    )  # fmt: skip
    assert run.config["circlebench.group"] == "g" and {"tune/value", "tune/best"} <= run.history
    view = build_view(aggregate_rows(_rows()), _rows().assign(run_dir=""), "t")
    grids = [b for b in view.blocks if isinstance(b, wr.PanelGrid)]
    (tuning,) = [g for g in grids if g.runsets[0].project == "circlebench-tuning"]
    logged = {y for panel in tuning.panels for y in panel.y}
    assert logged <= run.history
