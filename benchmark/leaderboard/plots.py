"""Leaderboard figures: Recall@K, s_p / s_n during training, final (s_n, s_p) (Circle paper,
Fig. 4 and 5), one of each kind per group over the experiments it compares, drawn once
(`drawn_figures`): `write_plots` writes them as `<kind>_<group>.png` and the HTML report inlines
the same PNG bytes, with a tuning group's `tuned_vs_default` and `optimisation_history`.
Figures are `matplotlib.figure.Figure`s: no pyplot state, no backend to choose on headless
machines.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.colors import TABLEAU_COLORS
from matplotlib.figure import Figure

from benchmark.leaderboard.aggregate import TUNED, board_metrics, compared, stem
from benchmark.leaderboard.run_logs import final_similarities, runs_of, training_curves
from benchmark.tuning.tuned import GroupStudies

KINDS = ("recall_at_k", "sp_sn_training", "sp_sn_scatter")  # the file name's `<kind>_<group>`
DPI = 100
# One style per experiment (`Axes.set_prop_cycle(**LINES)`): the ten Tableau colours solid, then
# dashed, then dotted; a group compares up to 16 experiments, and colours alone repeat after ten.
LINES = {
    "color": list(TABLEAU_COLORS) * 3,
    "linestyle": [style for style in ("-", "--", ":") for _ in TABLEAU_COLORS],
}


def drawn_figures(board: pd.DataFrame, rows: pd.DataFrame) -> dict[str, dict[str, bytes]]:
    """Each group's figures of the experiments it compares, as PNG bytes by kind in `KINDS`
    order: drawn once for the files (`write_plots`) and the report alike. A kind the runs left
    nothing for (no run folders on this machine) is left out."""
    drawn = {}
    for group, entries in compared(board).groupby("group", sort=False):
        runs = runs_of(rows, entries)
        figures = (recall_plot(entries), training_curves_plot(runs), similarity_scatter_plot(runs))
        drawn[str(group)] = {
            kind: png(figure)
            for kind, figure in zip(KINDS, figures, strict=True)
            if figure is not None
        }
    return drawn


def write_plots(
    board: pd.DataFrame,
    rows: pd.DataFrame,
    out_dir: Path,
    drawn: dict[str, dict[str, bytes]] | None = None,
) -> list[Path]:
    """Write each group's figures of the experiments it compares (`drawn`, or `drawn_figures`);
    returns the files written (runs without logs get none)."""
    drawn = drawn_figures(board, rows) if drawn is None else drawn
    out_dir.mkdir(parents=True, exist_ok=True)
    for group in set(board["group"].astype(str)) - set(drawn):  # an earlier run's, now stale
        for kind in KINDS:
            (out_dir / f"{kind}_{group}.png").unlink(missing_ok=True)
    written = []
    for group, figures in drawn.items():
        for kind, data in figures.items():
            path = out_dir / f"{kind}_{group}.png"
            path.write_bytes(data)
            written.append(path)
    return written


def png(figure: Figure) -> bytes:
    """The figure as PNG at `DPI`: the bytes of the file and of the report's image alike."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def recall_plot(entries: pd.DataFrame) -> Figure:
    """R@K (mean, 95 % CI bars) against K on a log axis, one line per experiment."""
    recalls = [m for m in board_metrics(entries) if m.startswith("R@")]
    ks = [int(m[2:]) for m in recalls]
    fig = Figure(figsize=(7.5, 4))
    ax = fig.subplots()
    ax.set_prop_cycle(**LINES)
    for _, row in entries.iterrows():
        means = [float(row[f"{m}_mean"]) for m in recalls]
        errors = np.nan_to_num([float(row[f"{m}_ci95"]) for m in recalls])
        ax.errorbar(ks, means, yerr=errors, marker="o", capsize=3, label=stem(row["experiment"]))
    ax.set_xscale("log", base=2 if max(ks, default=1) <= 64 else 10)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set(xlabel="K", ylabel="Recall@K (%)", title=f"Recall@K, {entries['group'].iloc[0]}")
    # beside the axes: sixteen entries inside would hide the lines; long handles show the dashes
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1), handlelength=3)
    fig.tight_layout()
    return fig


def training_curves_plot(runs: pd.DataFrame) -> Figure | None:
    """Mean s_p and s_n per training step (averaged over seeds), one line per experiment."""
    curves = training_curves(runs)
    if not curves:
        return None
    fig = Figure(figsize=(10, 4))
    ax_p, ax_n = fig.subplots(1, 2, sharex=True)
    ax_p.set_prop_cycle(**LINES)
    ax_n.set_prop_cycle(**LINES)
    for name, curve in curves.items():
        ax_p.plot(curve.index, curve["train/sp_mean"], label=stem(name))
        ax_n.plot(curve.index, curve["train/sn_mean"], label=stem(name))
    ax_p.set(xlabel="step", ylabel="mean s_p", title="within-class similarity s_p")
    ax_n.set(xlabel="step", ylabel="mean s_n", title="between-class similarity s_n")
    ax_p.legend(fontsize="small")
    fig.tight_layout()
    return fig


def similarity_scatter_plot(runs: pd.DataFrame) -> Figure | None:
    """Final (s_n, s_p) of the test queries, one panel per experiment (its lowest seed).

    Circle loss panels draw its decision boundary, the circle (s_n)² + (s_p − 1)² = 2m²
    (Eq. 8 with O_p = 1 + m, O_n = −m, Δ_p = 1 − m, Δ_n = m); the others draw s_p = s_n.
    """
    panels = final_similarities(runs)
    if not panels:
        return None
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(4 * cols, 4 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        sn, sp, m = panel.sn, panel.sp, panel.circle_m
        ax.scatter(sn, sp, s=4, alpha=0.4)
        if m is not None:
            theta = np.linspace(0, 2 * np.pi, 400)
            radius = math.sqrt(2) * m
            ax.plot(radius * np.cos(theta), 1 + radius * np.sin(theta), "r-", label=f"m={m:g}")
            ax.legend(fontsize="small", loc="lower right")
        else:
            ax.plot([-1, 1], [-1, 1], "k:", linewidth=1)
        low = min(0.0, float(np.min(sn)), float(np.min(sp))) - 0.05  # cosines: at most 1
        ax.set(xlim=(low, 1.02), ylim=(low, 1.02), aspect="equal", title=stem(panel.experiment))
        ax.set(xlabel="s_n (highest negative)", ylabel="s_p (lowest positive)")
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    return fig


_SETTINGS = {"default": "#9e9e9e", "tuned": "#1f77b4"}
_WIDTH = 0.4  # of a bar; a loss's two bars fill 0.8 of its slot


def tuned_vs_default(entries: pd.DataFrame, metric: str) -> Figure | None:
    """Per loss with a tuned row: default and tuned bars of `metric` with 95 % CI whiskers."""
    names = entries["experiment"].map(stem)
    tuned = names[names.str.endswith(TUNED)].str.removesuffix(TUNED).tolist()
    if not tuned:
        return None
    figure = Figure(figsize=(max(6.0, 0.8 * len(tuned) + 2), 4))
    ax = figure.subplots()
    slots = np.arange(len(tuned))
    by_name = entries.set_index(names)
    for offset, label, suffix in ((-0.5, "default", ""), (0.5, "tuned", TUNED)):
        shown = by_name.reindex([f"{loss}{suffix}" for loss in tuned])  # NaN: no such row
        means = shown[f"{metric}_mean"].to_numpy(float)
        errors = np.nan_to_num(shown[f"{metric}_ci95"].to_numpy(float))
        ax.bar(slots + offset * _WIDTH, means, _WIDTH, yerr=errors, capsize=3, label=label,
               color=_SETTINGS[label])  # fmt: skip
    ax.set_xticks(slots, tuned, rotation=30, ha="right")
    ax.set(ylabel=metric, title=f"Test {metric}: each loss as configured and as tuned")
    ax.legend(fontsize="small", title="mean, 95 % CI", title_fontsize="small")
    figure.tight_layout()
    return figure


def optimisation_history(studies: GroupStudies) -> Figure | None:
    """Per loss: each finished trial's validation score (dots) and the best so far (line)."""
    if not studies.trials:
        return None
    figure = Figure(figsize=(9, 4.5))
    ax = figure.subplots()
    ax.set_prop_cycle(**LINES)
    metric = "val " + next(iter(studies.summaries.values()))["budget"]["metric"]
    for loss, trials in studies.trials.items():
        done = trials[trials["state"] == "COMPLETE"].sort_values("number")
        values = done["value"].astype(float)
        (best,) = ax.step(done["number"], values.cummax(), where="post", label=loss)
        ax.scatter(done["number"], values, s=10, alpha=0.45, color=best.get_color())
    ax.set(xlabel="trial", ylabel=metric)
    ax.set_title(f"Optimisation history: {metric} of each trial (dots), best so far (line)")
    ax.legend(fontsize="small", ncols=2)
    figure.tight_layout()
    return figure
