"""The figures of the HTML report (plotly): metric bars with CIs, s_p / s_n curves, (s_n, s_p).

Each returns a `plotly.graph_objects.Figure`, or None where the runs left nothing to draw (no
run folders on this machine). SVG traces only: WebGL (`scattergl`) needs a GPU context that
headless browsers and some laptops lack.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from benchmark.leaderboard.run_logs import final_similarities, training_curves

MAX_POINTS = 1000  # per scatter panel: evenly spaced queries; thousands of SVG points crawl
_COLUMNS = 4  # scatter panels per row
_PALETTE = (  # matplotlib's tab10, then four darker tab20b hues: 14 experiments per group
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39",
)  # fmt: skip


def _label(experiment: str) -> str:
    return experiment.rsplit("/", 1)[-1]


def metric_bars(entries: pd.DataFrame, metrics: list[str]) -> go.Figure | None:
    """One bar per experiment of the chosen metric (a menu picks it), whiskers the 95 % CI."""
    if not metrics:
        return None
    names = [_label(e) for e in entries["experiment"]]
    figure = go.Figure()
    for index, metric in enumerate(metrics):
        ci = entries.get(f"{metric}_ci95", pd.Series(math.nan, index=entries.index))
        figure.add_bar(
            x=names,
            y=entries[f"{metric}_mean"].astype(float).round(4).tolist(),
            error_y={"type": "data", "array": [_finite(v) for v in ci], "visible": True},
            name=metric,
            visible=index == 0,
            hovertemplate="%{x}: %{y:.2f} ± %{error_y.array:.2f}<extra>" + metric + "</extra>",
        )
    buttons = [
        {
            "label": metric,
            "method": "update",
            "args": [{"visible": [i == j for j in range(len(metrics))]}, {"yaxis.title": metric}],
        }
        for i, metric in enumerate(metrics)
    ]
    figure.update_layout(
        title="Test metrics, mean and 95 % CI over seeds",
        yaxis_title=metrics[0],
        updatemenus=[{"buttons": buttons, "x": 1.0, "xanchor": "right", "y": 1.15}],
        height=380,
        margin={"t": 70, "b": 60},
        template="plotly_white",
    )
    return figure


def _finite(value: object) -> float | None:
    number = float(value)  # type: ignore[arg-type]
    return None if math.isnan(number) else round(number, 4)


def training_curves_figure(runs: pd.DataFrame) -> go.Figure | None:
    """Mean s_p (left) and s_n (right) per training step, one colour per experiment."""
    curves = training_curves(runs)
    if not curves:
        return None
    figure = make_subplots(
        rows=1,
        cols=2,
        shared_xaxes=True,
        subplot_titles=("within-class similarity s_p", "between-class similarity s_n"),
    )
    for index, (name, curve) in enumerate(curves.items()):
        colour = _colour(index)
        for col, column in ((1, "train/sp_mean"), (2, "train/sn_mean")):
            figure.add_scatter(
                x=curve.index.tolist(),
                y=curve[column].round(5).tolist(),
                mode="lines",
                name=_label(name),
                legendgroup=name,
                showlegend=col == 1,
                line={"color": colour},
                row=1,
                col=col,
            )
    figure.update_xaxes(title_text="step")
    figure.update_yaxes(title_text="mean s_p", row=1, col=1)
    figure.update_yaxes(title_text="mean s_n", row=1, col=2)
    figure.update_layout(
        title="s_p and s_n during training (mean over seeds, smoothed)", template="plotly_white"
    )
    return figure


def similarity_scatter(runs: pd.DataFrame) -> go.Figure | None:
    """Final (s_n, s_p) of the test queries, one panel per experiment (its lowest seed).

    Circle loss panels draw its decision boundary, the circle s_n² + (s_p − 1)² = 2m² (centre
    (0, 1), radius √2·m); the others draw s_p = s_n.
    """
    panels = final_similarities(runs)
    if not panels:
        return None
    cols = _COLUMNS  # also for fewer panels: they stay square and small
    rows = math.ceil(len(panels) / cols)
    titles = [f"{_label(p.experiment)}, seed {p.seed}" + _margin(p.circle_m) for p in panels]
    figure = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=titles,
        horizontal_spacing=0.06,
        vertical_spacing=0.3 / rows,
    )
    theta = np.linspace(0.0, 2.0 * np.pi, 181)
    for index, panel in enumerate(panels):
        row, col = index // cols + 1, index % cols + 1
        keep = np.linspace(0, len(panel.sn) - 1, min(MAX_POINTS, len(panel.sn))).astype(int)
        figure.add_scatter(
            x=panel.sn[keep].round(4).tolist(),
            y=panel.sp[keep].round(4).tolist(),
            mode="markers",
            marker={"size": 3, "opacity": 0.45, "color": _colour(0)},
            name="queries",
            legendgroup="queries",
            showlegend=index == 0,
            hovertemplate="s_n %{x:.3f}, s_p %{y:.3f}<extra></extra>",
            row=row,
            col=col,
        )
        if panel.circle_m is not None:
            radius = math.sqrt(2.0) * panel.circle_m
            x, y, name = radius * np.cos(theta), 1.0 + radius * np.sin(theta), "Circle boundary"
            line = {"color": "#d62728", "width": 1.5}
        else:
            x, y, name = np.array([-1.0, 1.0]), np.array([-1.0, 1.0]), "s_p = s_n"
            line = {"color": "#444", "width": 1, "dash": "dot"}
        figure.add_scatter(
            x=x.round(4).tolist(),
            y=y.round(4).tolist(),
            mode="lines",
            line=line,
            name=name,
            hoverinfo="skip",
            row=row,
            col=col,
        )
        low = min(0.0, float(np.min(panel.sn)), float(np.min(panel.sp))) - 0.05  # cosines ≤ 1
        figure.update_xaxes(range=[low, 1.02], constrain="domain", row=row, col=col)
        axis = f"x{index + 1}" if index else "x"  # make_subplots numbers axes row by row
        figure.update_yaxes(range=[low, 1.02], scaleanchor=axis, row=row, col=col)
    figure.update_xaxes(title_text="s_n", row=rows)
    figure.update_yaxes(title_text="s_p", col=1)
    figure.update_layout(
        title="Final (s_n, s_p) of the test queries: highest negative, lowest positive",
        height=290 * rows + 110,
        showlegend=False,
        template="plotly_white",
    )
    return figure


def _margin(m: float | None) -> str:
    return "" if m is None else f", m={m:g}"


def _colour(index: int) -> str:
    return _PALETTE[index % len(_PALETTE)]
