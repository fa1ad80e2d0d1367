"""Leaderboard: suites, aggregation over seeds, Markdown, --check, resuming, locks, plots."""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from benchmark.launch import forked
from benchmark.leaderboard import command as leaderboard
from benchmark.leaderboard import numerics, runner
from benchmark.leaderboard.aggregate import aggregate_rows, ci95, compared, read_leaderboard
from benchmark.leaderboard.cells import CellWork, cell_args, suite_rows
from benchmark.leaderboard.check import compare
from benchmark.leaderboard.markdown import (
    format_cell,
    format_difference,
    leaderboard_markdown,
    terminal_summary,
)
from benchmark.leaderboard.plots import write_plots
from benchmark.leaderboard.suite import load_suite
from benchmark.training.rows import FLOOR_LOSS, read_results
from benchmark.tuning.groups import suite_names
from tests.benchmark.leaderboard.orphans import CELL, assert_cell_dies_with

REPO = Path(__file__).resolve().parents[3]
SETTINGS = {"dataset": "synthetic", "track": "end-to-end", "protocol": "same_set"}
SETTINGS |= {"labels": "pair-wise"}
SETTINGS |= {"backbone": "efficientnet_lite0", "pretrained": "none", "embedding_dim": "64"}
SETTINGS |= {"image_size": "32x32", "p": "4", "k": "4", "epochs": "2", "include_val": ""}


def row(cell_id: str, seed: int, r1: float, *, loss: str = "CircleLoss", **extra) -> dict:
    circle = {"m": 0.4, "gamma": 80, "source": None}
    params = json.dumps(circle if loss == "CircleLoss" else {"margin": 0.1})
    metrics = {"R@1": r1, "R@2": r1 + 10, "mAP": r1 / 2, "wall_time_s": 3.0, "run_dir": ""}
    names = {"cell_id": cell_id, "loss": loss, "loss_params": params, "seed": str(seed)}
    return {**names, **SETTINGS, **metrics, **extra}


def frame(*rows: dict) -> pd.DataFrame:
    table = pd.DataFrame(list(rows)).astype(str)
    for column in ("R@1", "R@2", "mAP", "wall_time_s"):
        table[column] = table[column].astype(float)
    return table


HAND_ROWS = frame(
    row("syn/circle/seed0", 0, 60.0),
    row("syn/circle/seed1", 1, 62.0),
    row("syn/circle/seed2", 2, 67.0),
    row("syn/triplet/seed0", 0, 50.0, loss="TripletLoss"),
)


def test_ci95_is_the_student_t_half_width() -> None:
    values = np.array([60.0, 62.0, 67.0])
    by_hand = stats.t.ppf(0.975, 2) * math.sqrt(((60 - 63) ** 2 + 1 + 16) / 2) / math.sqrt(3)
    assert ci95(pd.Series(values)) == pytest.approx(by_hand)
    assert by_hand == pytest.approx(8.9567, abs=1e-4)
    assert math.isnan(ci95(pd.Series([60.0])))


def test_aggregate_rows_means_and_intervals_per_experiment() -> None:
    board = aggregate_rows(HAND_ROWS).set_index("experiment")
    circle = board.loc["syn/circle"]
    assert (circle["group"], circle["n_seeds"], circle["seeds"]) == ("syn", 3, "0 1 2")
    assert circle["R@1_mean"] == pytest.approx(63.0)
    assert circle["R@2_mean"] == pytest.approx(73.0)
    assert circle["R@1_ci95"] == pytest.approx(8.9567, abs=1e-4)
    assert circle["mAP_mean"] == pytest.approx(31.5)
    assert board.loc["syn/triplet", "n_seeds"] == 1
    assert math.isnan(board.loc["syn/triplet", "R@1_ci95"])


def test_aggregate_rows_keeps_a_rerun_cells_last_row() -> None:
    rows = pd.concat([HAND_ROWS, frame(row("syn/triplet/seed0", 0, 40.0, loss="TripletLoss"))])
    board = aggregate_rows(rows).set_index("experiment")
    assert board.loc["syn/triplet", "R@1_mean"] == 40.0


def test_aggregate_rows_refuses_runs_with_different_settings() -> None:
    rows = pd.concat([HAND_ROWS, frame(row("syn/circle/seed3", 3, 61.0, epochs="5"))])
    with pytest.raises(ValueError, match=r"syn/circle disagree on epochs: \['2', '5'\]"):
        aggregate_rows(rows)


def test_aggregate_rows_lists_the_epochs_each_seed_chose_on_validation() -> None:
    """With a validation split each seed tests its best epoch's checkpoint: the epochs differ
    as an outcome, not because the config changed, so the board lists them."""
    chosen = frame(*[row(f"syn/val/seed{s}", s, 60.0 + s, epochs=str(e),
                         checkpoint=f"runs/{s}/checkpoints/best{'-v1' if s else ''}.ckpt")
                     for s, e in enumerate([4, 10, 3])])  # fmt: skip
    board = aggregate_rows(chosen).set_index("experiment")
    assert board.loc["syn/val", "epochs"] == "3 4 10"
    assert board.loc["syn/val", "R@1_mean"] == pytest.approx(61.0)
    last = chosen.assign(checkpoint="runs/checkpoints/last.ckpt")
    with pytest.raises(ValueError, match=r"syn/val disagree on epochs"):
        aggregate_rows(last)


BUDGET = "30 trials x 3 folds"  # a tuned row's `tuning`: the budget its setting was found with
PAIRED_ROWS = frame(
    *[row(f"syn/floor/seed{s}", s, f, loss=FLOOR_LOSS, labels="", epochs="0")
      for s, f in enumerate([30.0, 34.0, 31.0, 29.0])],
    *[row(f"syn/circle/seed{s}", s, c, tuning=BUDGET)
      for s, c in enumerate([41.0, 43.5, 40.0, 42.0])],
    *[row(f"syn/triplet/seed{s}", s, t, loss="TripletLoss", tuning=BUDGET)
      for s, t in enumerate([35.0, 44.0, 30.0])],
)  # fmt: skip


def test_paired_differences_match_scipy_on_hand_made_seeds() -> None:
    board = aggregate_rows(PAIRED_ROWS).set_index("experiment")
    circle, floor = [41.0, 43.5, 40.0, 42.0], [30.0, 34.0, 31.0, 29.0]
    low, high = stats.ttest_rel(circle, floor).confidence_interval(0.95)
    assert board.loc["syn/circle", "R@1_vs_floor_mean"] == pytest.approx((low + high) / 2)
    assert board.loc["syn/circle", "R@1_vs_floor_ci95"] == pytest.approx((high - low) / 2)
    # triplet ran seeds 0-2 only: paired with the floor's and Circle's seeds 0-2
    low, high = stats.ttest_rel([35.0, 44.0, 30.0], circle[:3]).confidence_interval(0.95)
    assert board.loc["syn/triplet", "R@1_vs_circle_mean"] == pytest.approx((low + high) / 2)
    assert board.loc["syn/triplet", "R@1_vs_circle_ci95"] == pytest.approx((high - low) / 2)
    assert math.isnan(board.loc["syn/floor", "R@1_vs_floor_mean"])  # no self-comparison
    assert math.isnan(board.loc["syn/circle", "R@1_vs_circle_mean"])


def test_the_circle_reference_is_the_suites_first_whatever_finished_first(tmp_path) -> None:
    """Two tuned pair-wise Circle experiments in a group: the one the suite lists first is the
    reference, whichever cell finished (and so was written) first."""
    ablation = [row(f"syn/circle_m025/seed{s}", s, c, tuning=BUDGET)
                for s, c in enumerate([50.0, 51.0, 49.0, 50.5])]  # fmt: skip
    rows = pd.concat([frame(*ablation), PAIRED_ROWS])  # the ablation finished first
    rows_csv = tmp_path / "rows.csv"
    rows.to_csv(rows_csv, index=False)
    names = [*rows["cell_id"][len(ablation) :], *rows["cell_id"][: len(ablation)]]
    cells = [SimpleNamespace(cell_id=name) for name in names]  # the suite lists circle first
    board = aggregate_rows(suite_rows(rows_csv, cells)).set_index("experiment")
    circle = [41.0, 43.5, 40.0]
    assert board.loc["syn/triplet", "R@1_vs_circle_mean"] == pytest.approx(
        np.mean(np.subtract([35.0, 44.0, 30.0], circle))
    )


def test_an_untuned_row_is_shown_and_compared_with_nothing() -> None:
    """A configured setting had no budget spent on it: no difference to the floor or to Circle,
    and no place in the plots; a tuned row keeps its differences, `vs_default` included."""
    untuned = [row(f"syn/triplet_default/seed{s}", s, 33.0 + s, loss="TripletLoss")
               for s in range(3)]  # fmt: skip
    board = aggregate_rows(pd.concat([PAIRED_ROWS, frame(*untuned)])).set_index("experiment")
    for column in ("R@1_vs_floor_mean", "R@1_vs_circle_mean", "R@1_vs_default_mean"):
        assert math.isnan(board.loc["syn/triplet_default", column])
    assert not math.isnan(board.loc["syn/triplet", "R@1_vs_floor_mean"])
    shown = set(compared(board.reset_index())["experiment"])
    assert shown == {"syn/floor", "syn/circle", "syn/triplet"}
    text = leaderboard_markdown(board.reset_index(), title="T", description="",
                                paper=pd.DataFrame(), paper_datasets={})  # fmt: skip
    assert "The `default` rows run each loss's configured setting" in text


def test_a_group_without_tuned_rows_is_an_untuned_pipeline_check(tmp_path: Path) -> None:
    untuned = PAIRED_ROWS.assign(tuning="")
    board = aggregate_rows(untuned)
    deltas = [c for c in board if "_vs_" in c and c.endswith("_mean")]
    assert board[deltas].isna().all().all()
    assert compared(board).empty
    text = leaderboard_markdown(board, title="T", description="", paper=pd.DataFrame(),
                                paper_datasets={})  # fmt: skip
    assert "An untuned pipeline check" in text and "| Δ floor" not in text
    ((_, table),) = terminal_summary(board)
    assert table[0] == ["loss", "labels", "seeds", "R@1"]
    assert write_plots(board, untuned, tmp_path) == []


def test_markdown_marks_differences_whose_interval_excludes_zero() -> None:
    text = leaderboard_markdown(
        aggregate_rows(PAIRED_ROWS), title="T", description="", paper=pd.DataFrame(),
        paper_datasets={},
    )  # fmt: skip
    assert "| Δ floor R@1 | Δ Circle R@1 |" in text
    circle_line = next(line for line in text.splitlines() if line.startswith("| CircleLoss"))
    assert "+10.62 ± 2.86 *" in circle_line  # Circle beats the floor, CI excludes 0
    triplet_line = next(line for line in text.splitlines() if line.startswith("| TripletLoss"))
    assert "*" not in triplet_line.split("|")[-3]  # vs Circle: the interval straddles 0
    assert format_difference(1.0, 2.0) == "+1.00 ± 2.00" and format_difference(-3.0, 2.0)[-1] == "*"


def test_the_terminal_summary_shows_each_loss_beside_the_floor() -> None:
    ((_, table),) = terminal_summary(aggregate_rows(PAIRED_ROWS))
    head = ["loss", "labels", "setting", "seeds", "R@1", "Δ floor R@1", "Δ Circle R@1"]
    assert table[0] == head
    circle = next(line for line in table if line[0] == "CircleLoss")
    assert circle[2] == "tuned" and circle[5] == "+10.62 ± 2.86 *" and circle[6] == "–"
    assert any(line[0] == "none (pretrained)" and line[5] == "–" for line in table)


def test_markdown_shows_paper_numbers_only_for_declared_datasets() -> None:
    board = aggregate_rows(HAND_ROWS)
    paper = pd.DataFrame(
        [{"dataset": "cub200", "loss": "CircleLoss", "labels": "pair-wise", "metric": "R@1"}]
    ).assign(value=66.7)
    text = leaderboard_markdown(
        board, title="T", description="", paper=paper, paper_datasets={"syn": "cub200"}
    )
    assert "| CircleLoss | pair-wise | m=0.4, gamma=80 | 3 | 63.00 ± 8.96 (paper 66.7) |" in text
    assert "| TripletLoss | pair-wise | margin=0.1 | 1 | 50.00 | 60.00 |" in text
    assert "backbone `efficientnet_lite0`" in text and "P×K `4×4`" in text
    plain = leaderboard_markdown(board, title="T", description="", paper=paper, paper_datasets={})
    assert "paper 66.7" not in plain
    other_k = frame(*HAND_ROWS.to_dict("records"), row("syn/circle_k2/seed0", 0, 55.0, k="2"))
    text = leaderboard_markdown(
        aggregate_rows(other_k), title="T", description="", paper=paper, paper_datasets={}
    )
    assert "p `4`" in text and "P×K" not in text  # K varies: P is still a shared fact


def test_means_the_csv_writes_equal_are_shown_equal() -> None:
    """leaderboard.csv holds 4 decimals: 41.12502 and 41.125 are both 41.1250 there."""
    assert format_cell(41.12502, 0.62, None) == format_cell(41.125, 0.62, None) == "41.12 ± 0.62"
    assert format_difference(8.37502, 2.25) == format_difference(8.375, 2.25) == "+8.38 ± 2.25 *"


def test_a_registered_metric_in_the_rows_reaches_the_board_and_its_table() -> None:
    """mINP is one registry entry: aggregation and Markdown find it there, in registry order."""
    seeds = [row(f"syn/circle/seed{s}", s, 60.0, mINP=20 + 10 * s) for s in (0, 1)]
    rows = frame(*seeds)
    rows["mINP"] = rows["mINP"].astype(float)
    board = aggregate_rows(rows)
    assert board.loc[0, "mINP_mean"] == 25.0
    text = leaderboard_markdown(board, title="T", description="", paper=pd.DataFrame(),
                                paper_datasets={})  # fmt: skip
    assert "| seeds | R@1 | R@2 | mAP | mINP | s/run |" in text
    assert f"| 25.00 ± {stats.t.ppf(0.975, 1) * 5:.2f} | 3 |" in text  # s = 5√2, n = 2


def test_re_ranked_runs_show_their_re_ranking_and_never_average_with_plain_ones() -> None:
    rerank = "k-reciprocal k1=20 k2=6 lambda=0.3"
    board = aggregate_rows(frame(row("reid/circle/seed0", 0, 60.0, rerank=rerank)))
    text = leaderboard_markdown(board, title="T", description="", paper=pd.DataFrame(),
                                paper_datasets={})  # fmt: skip
    assert f"rerank `{rerank}`" in text
    seeds = [row(f"reid/circle/seed{s}", s, 60.0, rerank=r) for s, r in enumerate((rerank, ""))]
    with pytest.raises(ValueError, match="reid/circle disagree on rerank"):
        aggregate_rows(frame(*seeds))
    plain = leaderboard_markdown(aggregate_rows(HAND_ROWS), title="T", description="",
                                 paper=pd.DataFrame(), paper_datasets={})  # fmt: skip
    assert "rerank" not in plain


def boards(committed_r1: float, regenerated_r1: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    old = aggregate_rows(frame(row("syn/circle/seed0", 0, committed_r1))).assign(requires="")
    new = aggregate_rows(frame(row("syn/circle/seed0", 0, regenerated_r1))).assign(requires="")
    return old, new


def test_check_passes_within_and_fails_beyond_tolerance() -> None:
    report = compare(*boards(60.0, 60.3), tolerance=0.5, skipped={})
    assert report.ok
    assert any("syn/circle" in line and "+0.30" in line for line in report.lines())
    report = compare(*boards(60.0, 61.0), tolerance=0.5, skipped={})
    assert not report.ok
    assert any(line.endswith("+1.00  FAIL") and "R@1" in line for line in report.lines())
    assert report.lines()[-1].startswith("FAILED: 3 values compared, 3 changed")


def test_check_on_other_numerics_compares_cell_means() -> None:
    """Another machine's float kernels: single values may move beyond the tolerance, a cell's
    mean |delta| may not (the rows' three metrics move by 1, 1 and ½ times the R@1 shift)."""
    report = compare(*boards(60.0, 62.0), tolerance=0.5, skipped={}, same_numerics=False)
    assert report.ok and report.cell_means() == {"syn/circle": pytest.approx(5 / 3)}
    assert "other numerics: per value limit 12 pp, mean |delta| 1.67 pp" in report.lines()[-1]
    assert not any(line.endswith("FAIL") for line in report.lines())
    report = compare(*boards(60.0, 68.0), tolerance=0.5, skipped={}, same_numerics=False)
    assert not report.ok  # 6.7 pp on average over the cell: a real change
    old, new = boards(60.0, 60.0)
    new.loc[0, "mAP_mean"] = float("nan")  # a metric gone is a failure whatever the machine
    report = compare(old, new, tolerance=0.5, skipped={}, same_numerics=False)
    assert not report.ok and report.lines()[-2].endswith("FAIL")


def test_check_on_other_numerics_bounds_each_value_too() -> None:
    """One value 13 pp away fails even where the cell and overall means are within theirs."""
    rows = [row(f"syn/c{i}/seed0", 0, 60.0) for i in range(10)]
    old = aggregate_rows(frame(*rows)).assign(requires="")
    new = old.copy()
    new.loc[3, "R@1_mean"] += 13.0
    report = compare(old, new, tolerance=0.5, skipped={}, same_numerics=False)
    assert report.cell_means()["syn/c3"] < 5 and report.mean_delta() < 2
    assert not report.ok
    assert any(line.endswith("+13.00  FAIL") for line in report.lines())
    assert "largest |delta| 13.00 pp (syn/c3 R@1)" in report.lines()[-1]
    new.loc[3, "R@1_mean"] -= 2.0  # 11 pp: within chance on other hardware
    assert compare(old, new, tolerance=0.5, skipped={}, same_numerics=False).ok


def test_check_fails_missing_and_extra_cells_but_reports_absent_data() -> None:
    old, new = boards(60.0, 60.0)
    extra = aggregate_rows(frame(row("cub/circle/seed0", 0, 30.0))).assign(requires="../data/cub")
    report = compare(old, new[:0], tolerance=0.5, skipped={})
    assert report.failures == ["syn/circle: in the committed leaderboard but not regenerated"]
    report = compare(old, new[:0], tolerance=0.5, skipped={"syn/circle": "data absent: /x"})
    assert report.ok and report.notes == ["syn/circle: skipped, data absent: /x"]
    report = compare(old, pd.concat([new, extra]), tolerance=0.5, skipped={})
    assert report.ok and "made without ../data/cub" in report.notes[0]
    # A board that holds cub/circle had the data: a cub experiment missing from it is a failure.
    both = pd.concat([extra, extra.assign(experiment="cub/triplet")])
    report = compare(pd.concat([old, extra]), pd.concat([new, both]), tolerance=0.5, skipped={})
    assert report.failures == ["cub/triplet: regenerated but missing from the committed file"]
    report = compare(pd.concat([old, extra]).assign(requires=""), old, tolerance=0.5, skipped={})
    assert not report.ok
    report = compare(old, new.assign(epochs="9"), tolerance=0.5, skipped={})
    assert report.failures == ["syn/circle: epochs changed from '2' to '9'"]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny checkout: two configs and a suite `t` with one group needing absent data."""
    (tmp_path / "experiments/syn").mkdir(parents=True)
    (tmp_path / "experiments/suites").mkdir()
    for name in ("circle", "triplet"):
        (tmp_path / f"experiments/syn/{name}.yaml").write_text("{}\n")
    (tmp_path / "experiments/suites/t.yaml").write_text(
        "seeds: [0, 1]\noverrides: [--trainer.max_epochs=2]\ngroups:\n"
        "  syn: {configs: experiments/syn/*.yaml}\n"
        "  cub: {configs: [experiments/syn/circle.yaml], requires: ../absent_data}\n"
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def fake_runner(calls: list[list[str]]):
    """`fake_fit` as a cell runner (`cells.CellRunner`)."""
    fit = fake_fit(calls)

    def run(cell: CellWork, log: Path, threads: int | None) -> None:
        fit(cell.args, log, threads)

    return run


def fake_fit(calls: list[list[str]]):
    """A cell's `fit` that writes what `fit` writes: a row, metrics.csv and similarities.npz."""

    lock = threading.Lock()  # `--jobs 2` runs two cells at once

    def run(args: list[str], log: Path, threads: int | None) -> None:
        with lock:
            write(args)

    def write(args: list[str]) -> None:
        calls.append(args)
        value = dict(itertools.pairwise(args))
        root = Path(next(a for a in args if a.startswith("--trainer.default_root_dir="))[27:])
        run_dir = root / value["--cell_id"] / str(len(calls))  # a fresh folder per run, as fit
        run_dir.mkdir(parents=True)
        steps = np.arange(20)
        log_frame = pd.DataFrame({"step": steps, "train/sp_mean": 0.5 + steps / 50})
        log_frame.assign(**{"train/sn_mean": 0.3 - steps / 100}).to_csv(run_dir / "metrics.csv")
        rng = np.random.default_rng(0)
        np.savez(run_dir / "similarities.npz", sp=rng.uniform(0.3, 1, 50), sn=rng.uniform(0, 1, 50))
        loss = "TripletLoss" if "triplet" in value["--cell_id"] else "CircleLoss"
        seed = int(value["--seed_everything"])
        recipe = value.get("--cell_recipe", "")
        result = row(value["--cell_id"], seed, 50.0 + seed, loss=loss, run_dir=str(run_dir))
        result["cell_recipe"] = recipe
        path = Path(value["--results_csv"])
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists()
        with path.open("a", newline="") as f:
            writer = csv.DictWriter(f, list(result))
            if new:
                writer.writeheader()
            writer.writerow(result)

    return run


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The command lines of the cells run: `fake_fit` stands in for the default runner."""
    seen: list[list[str]] = []
    monkeypatch.setitem(leaderboard.RUNNERS, leaderboard.DEFAULT_ISOLATION, fake_runner(seen))
    return seen


def test_a_group_floor_adds_one_test_cell_per_seed(project: Path) -> None:
    (project / "experiments/suites/f.yaml").write_text(
        "seeds: [0, 1]\ngroups:\n"
        "  syn: {configs: experiments/syn/*.yaml, floor: experiments/syn/circle.yaml}\n"
    )
    cells = load_suite("f", project).cells()
    assert [(c.cell_id, c.command) for c in cells[:2]] == [
        ("syn/floor/seed0", "test"), ("syn/floor/seed1", "test"),
    ]  # fmt: skip
    assert [c.command for c in cells[2:]] == ["fit"] * 4
    (project / "experiments/suites/g.yaml").write_text(
        "seeds: [0]\ngroups:\n  a: {configs: experiments/syn/circle.yaml, seeds: [3, 4]}\n"
        "  b: {configs: experiments/syn/circle.yaml}\n"
    )
    assert [c.cell_id for c in load_suite("g", project).cells()] == [
        "a/circle/seed3", "a/circle/seed4", "b/circle/seed0",
    ]  # fmt: skip
    assert {c.seed for c in load_suite("g", project, seeds=[9]).cells()} == {9}
    args = cell_args(cells[0], project / "rows.csv", project / "runs")
    assert args[:3] == ["test", "--config", "experiments/syn/circle.yaml"]
    (project / "experiments/suites/f.yaml").write_text(
        "groups:\n  syn: {configs: experiments/syn/*.yaml, floor: experiments/syn/none.yaml}\n"
    )
    with pytest.raises(FileNotFoundError, match=r"floor config 'experiments/syn/none\.yaml'"):
        load_suite("f", project)


def test_suite_cells_expand_globs_and_seeds(project: Path) -> None:
    suite = load_suite("t", project)
    assert [c.cell_id for c in suite.cells()] == [
        "syn/circle/seed0", "syn/circle/seed1", "syn/triplet/seed0", "syn/triplet/seed1",
        "cub/circle/seed0", "cub/circle/seed1",
    ]  # fmt: skip
    assert suite.cells()[0].overrides == ("--trainer.max_epochs=2",)
    assert [c.seed for c in load_suite("t", project, seeds=[7]).cells()] == [7, 7, 7]
    (project / "experiments/suites/u.yaml").write_text(
        "overrides: [--a=1]\ngroups:\n  syn:\n    configs: experiments/syn/*.yaml\n"
        "    overrides: [--b=2]\n    config_overrides: {triplet: [--c=3]}\n"
    )
    overrides = [c.overrides for c in load_suite("u", project).cells()]
    assert overrides == [("--a=1", "--b=2"), ("--a=1", "--b=2", "--c=3")]


def test_requires_takes_a_list_and_names_the_first_absent_path(project: Path) -> None:
    """Data and a local weights file: a group runs only when every path is there."""
    (project / "data").mkdir()
    (project / "experiments/suites/w.yaml").write_text(
        "groups:\n  cub: {configs: experiments/syn/circle.yaml, "
        "requires: [data, weights/vit.safetensors]}\n"
    )
    group = load_suite("w", project).groups[0]
    assert group.requires == (Path("data"), Path("weights/vit.safetensors"))
    assert group.requires_text == "data, weights/vit.safetensors"
    assert group.missing_data(project) == project.resolve() / "weights/vit.safetensors"
    (project / "weights").mkdir()
    (project / "weights/vit.safetensors").write_bytes(b"")
    assert group.missing_data(project) is None
    assert load_suite("t", project).groups[1].requires == (Path("../absent_data"),)
    (project / "experiments/suites/w.yaml").write_text(
        "groups:\n  cub: {configs: experiments/syn/circle.yaml, requires: [data, 3]}\n"
    )
    with pytest.raises(ValueError, match=r"requires must be a path or a list of paths"):
        load_suite("w", project)


def test_suite_errors_name_the_problem(project: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(KeyError, match=r"unknown suite 'nope'; choose one of \['t'\]"):
        load_suite("nope", project)
    with pytest.raises(SystemExit):
        leaderboard.main(["--suite", "nope"])
    assert "choose one of ['t']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        leaderboard.main(["--suite", "t", "--jobs", "2", "--isolation", "in-process"])
    assert "--jobs must be 1, or more without --isolation in-process" in capsys.readouterr().err
    suite_file = project / "experiments/suites/t.yaml"
    suite_file.write_text("groups:\n  syn: {configs: experiments/syn/*.yml}\n")
    with pytest.raises(FileNotFoundError, match=r"no config matches 'experiments/syn/\*.yml'"):
        load_suite("t", project)
    suite_file.write_text("epochs: 3\ngroups:\n  syn: {configs: experiments/syn/*.yaml}\n")
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['epochs'\]"):
        load_suite("t", project)
    suite_file.write_text(
        "groups:\n  syn: {configs: experiments/syn/*.yaml, config_overrides: {circel: []}}\n"
    )
    with pytest.raises(ValueError, match=r"names \['circel'\], which are not among its configs"):
        load_suite("t", project)


def test_suite_runs_once_then_resumes(project: Path, calls: list[list[str]]) -> None:
    leaderboard.main(["--suite", "t", "--no-wandb"])
    assert [a[a.index("--cell_id") + 1] for a in calls] == [
        "syn/circle/seed0", "syn/circle/seed1", "syn/triplet/seed0", "syn/triplet/seed1",
    ]  # fmt: skip
    # the `cub` group needs ../absent_data, so it was skipped
    assert calls[0][:3] == ["fit", "--config", "experiments/syn/circle.yaml"]
    assert calls[0][-2:] == ["--wandb=false", "--trainer.max_epochs=2"]
    assert calls[0][calls[0].index("--suite") + 1] == "t"  # W&B dashboards filter by it
    board = read_leaderboard(project / "results/suites/t/leaderboard.csv")
    assert list(board["experiment"]) == ["syn/circle", "syn/triplet"]
    assert board["R@1_mean"].tolist() == [50.5, 50.5]
    plots = sorted(p.name for p in (project / "results/suites/t/plots").iterdir())
    assert plots == []  # an untuned group compares nothing: no plots (aggregate.compared)
    assert "<table class='board'>" in (project / "results/suites/t/report.html").read_text()
    leaderboard.main(["--suite", "t", "--no-wandb"])
    assert len(calls) == 4  # everything was done
    rows_csv = project / "results/suites/t/rows.csv"
    rows = read_results(rows_csv)
    rows[rows["cell_id"] != "syn/triplet/seed1"].to_csv(rows_csv, index=False)
    leaderboard.main(["--suite", "t", "--no-wandb"])
    assert [a[a.index("--cell_id") + 1] for a in calls[4:]] == ["syn/triplet/seed1"]


def test_floors_run_after_the_cells_that_train(project: Path, calls: list[list[str]]) -> None:
    """A floor only tests, so it is the shortest cell of its group: run last, the floors fill
    the time the last long cell would otherwise run alone beside idle cores."""
    (project / "experiments/suites/f.yaml").write_text(
        "seeds: [0, 1]\ngroups:\n"
        "  syn: {configs: experiments/syn/*.yaml, floor: experiments/syn/circle.yaml}\n"
    )
    leaderboard.main(["--suite", "f", "--no-wandb", "--jobs", "1"])
    assert [a[a.index("--cell_id") + 1] for a in calls] == [
        "syn/circle/seed0", "syn/circle/seed1", "syn/triplet/seed0", "syn/triplet/seed1",
        "syn/floor/seed0", "syn/floor/seed1",
    ]  # fmt: skip
    board = read_leaderboard(project / "results/suites/f/leaderboard.csv")
    assert list(board["experiment"]) == ["syn/floor", "syn/circle", "syn/triplet"]


def test_the_wandb_table_is_logged_from_the_fork_server_only_where_cells_fork_here(
    project: Path, calls: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--aggregate-only starts no fork server (starting one for the table alone costs more than
    logging it in this process), nor does another isolation."""
    forked: list[bool] = []
    monkeypatch.setattr(leaderboard, "log_wandb_table", lambda *a, **k: forked.append(k["forked"]))
    leaderboard.main(["--suite", "t"])
    leaderboard.main(["--suite", "t", "--aggregate-only"])
    leaderboard.main(["--suite", "t", "--isolation", "subprocess"])
    leaderboard.main(["--suite", "t", "--no-wandb"])
    assert forked == [leaderboard.DEFAULT_ISOLATION == "fork", False, False]


def test_a_row_made_before_its_suite_entry_changed_runs_again(
    project: Path, calls: list[list[str]], capfd: pytest.CaptureFixture
) -> None:
    leaderboard.main(["--suite", "t", "--no-wandb"])
    rows_csv = project / "results/suites/t/rows.csv"
    assert read_results(rows_csv)["cell_recipe"].str.fullmatch("[0-9a-f]{16}").all()
    # An edited config file: only its cells run again, and their old rows are gone.
    (project / "experiments/syn/triplet.yaml").write_text("trainer: {max_epochs: 5}\n")
    leaderboard.main(["--suite", "t", "--no-wandb"])
    assert [a[a.index("--cell_id") + 1] for a in calls[4:]] == [
        "syn/triplet/seed0", "syn/triplet/seed1",
    ]  # fmt: skip
    assert "stale" in capfd.readouterr().out
    rows = read_results(rows_csv)
    assert sorted(rows["cell_id"]) == sorted(set(rows["cell_id"]))  # one row per cell
    # A changed suite entry (its overrides): every cell of it runs again.
    suite_file = project / "experiments/suites/t.yaml"
    suite_file.write_text(suite_file.read_text().replace("max_epochs=2", "max_epochs=3"))
    leaderboard.main(["--suite", "t", "--no-wandb"])
    assert len(calls) == 10 and len(read_results(rows_csv)) == 4
    # A stale row of a cell whose data is absent stays: nothing could make it again.
    rows = read_results(rows_csv)
    cub = rows.iloc[[0]].assign(cell_id="cub/circle/seed0", cell_recipe="0" * 16)
    pd.concat([rows, cub]).to_csv(rows_csv, index=False)
    leaderboard.main(["--suite", "t", "--no-wandb"])
    assert len(calls) == 10 and "cub/circle/seed0" in set(read_results(rows_csv)["cell_id"])
    # A row from before recipes were recorded counts as done.
    rows = read_results(rows_csv).assign(cell_recipe="")
    rows.to_csv(rows_csv, index=False)
    leaderboard.main(["--suite", "t", "--no-wandb"])
    assert len(calls) == 10


def test_check_regenerates_and_compares(
    project: Path, calls: list[list[str]], capfd: pytest.CaptureFixture
) -> None:
    leaderboard.main(["--suite", "t", "--no-wandb"])
    leaderboard.main(["--suite", "t", "--check", "--no-wandb", "--jobs", "2"])
    assert len(calls) == 8  # the check reran every cell in a temporary folder
    committed = project / "results/suites/t/leaderboard.csv"
    board = read_leaderboard(committed)
    board.loc[0, "R@1_mean"] += 0.6
    board.to_csv(committed, index=False)
    with pytest.raises(SystemExit, match="leaderboard check failed"):
        leaderboard.main(["--suite", "t", "--check", "--tolerance", "0.5", "--no-wandb"])
    leaderboard.main(["--suite", "t", "--check", "--tolerance", "1", "--no-wandb"])
    # Made on a machine with other float kernels: the 0.6 pp of one value is within chance.
    stored = project / "results/suites/t" / numerics.FILE_NAME
    assert stored.read_text().strip() == numerics.fingerprint()
    stored.write_text("0123456789ab\n")
    leaderboard.main(["--suite", "t", "--fold-only", "--no-wandb"])
    assert stored.read_text() == "0123456789ab\n"  # folding trains nothing: it is kept
    board.to_csv(committed, index=False)  # the +0.6 pp again (folding rewrote the board)
    leaderboard.main(["--suite", "t", "--check", "--tolerance", "0.5", "--no-wandb"])
    assert "committed 0123456789ab" in capfd.readouterr().out


def test_check_seeds_rerun_those_cells_against_their_committed_rows(
    project: Path, calls: list[list[str]]
) -> None:
    suite_file = project / "experiments/suites/t.yaml"
    suite_file.write_text("check_seeds: [1]\n" + suite_file.read_text())
    leaderboard.main(["--suite", "t", "--no-wandb"])
    leaderboard.main(["--suite", "t", "--check", "--no-wandb"])
    assert [a[a.index("--cell_id") + 1] for a in calls[4:]] == [
        "syn/circle/seed1", "syn/triplet/seed1",
    ]  # fmt: skip
    rows_csv = project / "results/suites/t/rows.csv"
    rows = pd.read_csv(rows_csv)
    rows.loc[rows["cell_id"] == "syn/circle/seed0", "R@1"] += 5  # not rerun: not compared
    rows.to_csv(rows_csv, index=False)
    leaderboard.main(["--suite", "t", "--check", "--no-wandb"])
    rows.loc[rows["cell_id"] == "syn/circle/seed1", "R@1"] += 5
    rows.to_csv(rows_csv, index=False)
    with pytest.raises(SystemExit, match="leaderboard check failed"):
        leaderboard.main(["--suite", "t", "--check", "--no-wandb"])
    rows_csv.unlink()
    with pytest.raises(SystemExit, match="check_seeds needs the committed rows"):
        leaderboard.main(["--suite", "t", "--check", "--no-wandb"])


def test_plots_are_written_from_logs(tmp_path: Path) -> None:
    fake_fit([])(["--cell_id", "syn/circle/seed0", "--seed_everything", "0", "--results_csv",
                  str(tmp_path / "rows.csv"), f"--trainer.default_root_dir={tmp_path / 'run'}"],
                 tmp_path / "log", None)  # fmt: skip
    rows = read_results(tmp_path / "rows.csv").assign(tuning=BUDGET)  # only tuned rows plot
    written = write_plots(aggregate_rows(rows), rows, tmp_path / "plots")
    assert [p.name for p in written] == [
        "recall_at_k_syn.png",
        "sp_sn_training_syn.png",
        "sp_sn_scatter_syn.png",
    ]
    assert all(p.stat().st_size > 1000 for p in written)
    without_logs = write_plots(
        aggregate_rows(rows), rows.assign(run_dir="/nowhere"), tmp_path / "p2"
    )
    assert [p.name for p in without_logs] == ["recall_at_k_syn.png"]


@pytest.mark.parametrize("name", suite_names(REPO))
def test_every_committed_suite_parses(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    suite = load_suite(name)
    assert suite.cells(), f"suite {name} has no cells"


def test_new_rows_beside_rows_of_other_numerics_make_a_mixed_board(
    project: Path, calls: list[list[str]]
) -> None:
    """Cells added on another machine to a board made elsewhere: the board is no longer one
    machine's, and a rerun of all of it on one machine is."""
    leaderboard.main(["--suite", "t", "--no-wandb"])
    stored = project / "results/suites/t" / numerics.FILE_NAME
    stored.write_text("0123456789ab\n")  # as if the rows were made elsewhere
    rows_csv = project / "results/suites/t/rows.csv"
    rows = read_results(rows_csv)
    rows[rows["cell_id"] != "syn/circle/seed0"].to_csv(rows_csv, index=False)
    leaderboard.main(["--suite", "t", "--no-wandb"])  # reruns that one cell here
    here = numerics.fingerprint()
    assert stored.read_text().strip() == "+".join(sorted(["0123456789ab", here]))
    assert numerics.merged("b+a", "a") == "a+b" and numerics.merged(None, "a") == "a"
    rows_csv.unlink()
    leaderboard.main(["--suite", "t", "--no-wandb"])
    assert stored.read_text().strip() == here


def test_numerics_fingerprint_is_stable_and_stored_beside_the_board(tmp_path: Path) -> None:
    value = numerics.fingerprint()
    assert value == numerics.fingerprint() and len(value) == 12 and int(value, 16) >= 0
    assert numerics.read(tmp_path) is None  # a leaderboard made before fingerprints
    numerics.write(tmp_path, value)
    assert numerics.read(tmp_path) == value
    assert [p.name for p in tmp_path.iterdir()] == [numerics.FILE_NAME]  # no temporary left


def test_a_second_command_on_a_running_suite_is_refused(tmp_path: Path) -> None:
    work = tmp_path / "suites" / "t"
    refused = pytest.raises(SystemExit, match="another leaderboard command is running this suite")
    with runner.suite_lock(work), refused, runner.suite_lock(work):
        pass  # never reached: the second lock refuses


def test_a_cell_dies_with_a_killed_leaderboard_process(tmp_path: Path) -> None:
    """SIGKILL of the leaderboard leaves no orphan cell to append a row later."""
    pid_file = tmp_path / "cell.pid"
    cell = CELL.format(pid_file=str(pid_file))
    parent = (
        "import sys; from pathlib import Path; from benchmark.leaderboard.runner import "
        f"run_in_own_group; run_in_own_group([sys.executable, '-c', {cell!r}], "
        f"Path({str(tmp_path / 'cell.log')!r}), {{}})"
    )
    leaderboard_process = subprocess.Popen([sys.executable, "-c", parent], cwd=REPO)
    assert_cell_dies_with(leaderboard_process, pid_file)


def test_jobs_default_to_the_usable_cores_per_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert leaderboard.default_jobs(1) == 4
    assert leaderboard.default_jobs(2) == 2
    assert leaderboard.default_jobs(8) == 1
    assert leaderboard.default_jobs(None) == 1  # a cell with torch's default threads: all cores


def test_a_lost_exit_status_counts_only_when_the_cell_wrote_its_row(
    project: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    """The default (fork) runner, with the fork server's lost status standing in for a fork."""
    writes = fake_fit([])

    def lost(cell: CellWork, log: Path, threads: int | None) -> int:
        log.write_text("training\n")
        if cell.cell_id == "syn/circle/seed0":  # writes its row, then its status is lost
            writes(cell.args, log, threads)
        return forked.exit_status(forked.LOST_STATUS, cell, log)

    monkeypatch.setattr(runner, "run_forked", lost)
    with pytest.raises(SystemExit):  # the three cells without a row failed
        leaderboard.main(["--suite", "t", "--no-wandb"])
    rows = read_results(project / "results/suites/t/rows.csv")
    assert list(rows["cell_id"]) == ["syn/circle/seed0"]
    out = capfd.readouterr().out
    assert "done syn/circle/seed0" in out and "FAIL syn/circle/seed0" not in out
    assert "FAIL syn/circle/seed1: exit status 255" in out
    logs = project / "results/suites/t/logs"
    assert "the run counts as done" in (logs / "syn__circle__seed0.log").read_text()
    assert (logs / "syn__circle__seed1.log").read_text() == "training\n"
