"""The report's tuning figures of a group: its studies and what tuning changed on the test set.

`tuned_vs_default` draws, per loss, the first test metric of its default and its tuned rows
side by side (mean, 95 % CI whiskers); `optimisation_history` draws each loss's study: every
trial's validation score and the best so far (Optuna's history plot, for all losses at once).
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from benchmark.leaderboard.aggregate import TUNED
from benchmark.tuning.tuned import GroupStudies

_SETTINGS = {"default": "#9e9e9e", "tuned": "#1f77b4"}


def tuned_vs_default(entries: pd.DataFrame, metric: str) -> go.Figure | None:
    """Per loss with a tuned row: default and tuned bars of `metric` with 95 % CI whiskers."""
    names = entries["experiment"].str.rsplit("/", n=1).str[-1]
    tuned = names[names.str.endswith(TUNED)].str.removesuffix(TUNED).tolist()
    if not tuned:
        return None
    figure = go.Figure()
    for label, suffix in (("default", ""), ("tuned", TUNED)):
        rows = [entries[names == f"{stem}{suffix}"] for stem in tuned]
        means = [float(r[f"{metric}_mean"].iloc[0]) if len(r) else math.nan for r in rows]
        cis = [float(r[f"{metric}_ci95"].iloc[0]) if len(r) else math.nan for r in rows]
        figure.add_bar(
            x=tuned,
            y=[None if math.isnan(m) else round(m, 4) for m in means],
            error_y={"type": "data", "array": [None if math.isnan(c) else c for c in cis]},
            name=label,
            marker_color=_SETTINGS[label],
            hovertemplate="%{x}: %{y:.2f} ± %{error_y.array:.2f}<extra>" + label + "</extra>",
        )
    figure.update_layout(
        title=f"Test {metric}: each loss as configured and as tuned (mean, 95 % CI)",
        yaxis_title=metric,
        barmode="group",
        height=380,
        margin={"t": 60, "b": 60},
        template="plotly_white",
    )
    return figure


def optimisation_history(studies: GroupStudies) -> go.Figure | None:
    """Per loss: each finished trial's validation score (dots) and the best so far (line)."""
    if not studies.trials:
        return None
    figure = go.Figure()
    metric = "val " + next(iter(studies.summaries.values()))["budget"]["metric"]
    for stem, trials in studies.trials.items():
        done = trials[trials["state"] == "COMPLETE"].sort_values("number")
        values = done["value"].astype(float)
        figure.add_scatter(
            x=done["number"].tolist(),
            y=values.round(4).tolist(),
            mode="markers",
            name=stem,
            legendgroup=stem,
            marker={"size": 5, "opacity": 0.45},
            hovertemplate=f"{stem} trial %{{x}}: %{{y:.2f}}<extra></extra>",
        )
        figure.add_scatter(
            x=done["number"].tolist(),
            y=values.cummax().round(4).tolist(),
            mode="lines",
            name=f"{stem} best",
            legendgroup=stem,
            showlegend=False,
            line={"shape": "hv"},
            hovertemplate=f"{stem} best after trial %{{x}}: %{{y:.2f}}<extra></extra>",
        )
    figure.update_layout(
        title=f"Optimisation history: {metric} of each trial (dots) and the best so far (line)",
        xaxis_title="trial",
        yaxis_title=metric,
        height=420,
        margin={"t": 60, "b": 50},
        template="plotly_white",
    )
    return figure
