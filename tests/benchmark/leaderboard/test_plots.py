"""The leaderboard's figures (`plots.py`), read back from what each draws on its axes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from benchmark.leaderboard.plots import recall_plot, similarity_scatter_plot, training_curves_plot
from tests.benchmark.leaderboard.hand_made import hand_made_suite


def test_recall_at_k_draws_each_experiment_s_means_against_k(tmp_path: Path) -> None:
    board, _ = hand_made_suite(tmp_path)
    (ax,) = recall_plot(board[board["group"] == "syn"]).axes
    drawn = {c.get_label(): c.lines[0].get_xydata().tolist() for c in ax.containers}
    # R@2 is R@1 + 9 in every hand-made row
    assert drawn == {
        "circle": [[1, 62.0], [2, 71.0]],
        "triplet": [[1, 71.5], [2, 80.5]],
        "circle_class": [[1, 56.5], [2, 65.5]],
    }


def test_training_curves_are_the_mean_over_seeds_of_each_step(tmp_path: Path) -> None:
    _, rows = hand_made_suite(tmp_path)
    ax_p, ax_n = training_curves_plot(rows[rows["cell_id"].str.startswith("syn/")]).axes
    assert [line.get_label() for line in ax_p.get_lines()] == ["circle", "triplet", "circle_class"]
    steps = np.arange(30)
    sp = ax_p.get_lines()[0].get_ydata()  # seeds 0 and 1 log 0.4 + step / 60 + 0.01 * seed
    np.testing.assert_allclose(sp, 0.4 + steps / 60 + 0.005)
    np.testing.assert_allclose(ax_n.get_lines()[0].get_ydata(), 0.3 - steps / 120)


def test_the_scatter_draws_circle_loss_s_boundary_and_the_diagonal_elsewhere(
    tmp_path: Path,
) -> None:
    _, rows = hand_made_suite(tmp_path)
    figure = similarity_scatter_plot(rows[rows["cell_id"].str.startswith("syn/")])
    panels = {ax.get_title(): ax for ax in figure.axes}
    assert list(panels) == ["circle", "triplet", "circle_class"]
    for title, ax in panels.items():
        (line,) = ax.get_lines()
        s_n, s_p = line.get_xydata().T
        if title == "triplet":
            np.testing.assert_allclose(s_p, s_n)
        else:  # Circle loss, m = 0.4: s_n² + (s_p − 1)² = 2m²
            np.testing.assert_allclose(s_n**2 + (s_p - 1) ** 2, 2 * 0.4**2)
        assert len(ax.collections[0].get_offsets()) == 80  # every test query, seed 0


def test_each_of_sixteen_experiments_gets_its_own_line_style() -> None:
    names = [f"g/loss{i}" for i in range(16)]  # a ci board group: 15 tuned losses and the floor
    means = {"R@1_mean": 50.0, "R@1_ci95": 1.0, "R@2_mean": 60.0, "R@2_ci95": 1.0}
    (ax,) = recall_plot(pd.DataFrame({"group": "g", "experiment": names, **means})).axes
    styles = {(str(c.lines[0].get_color()), c.lines[0].get_linestyle()) for c in ax.containers}
    assert len(styles) == len(names)
