"""The report's tuning figures of a group: what tuning changed (`tuned_vs_default`) and each
loss's study (`optimisation_history`, Optuna's history plot for all losses at once)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from benchmark.leaderboard.aggregate import TUNED
from benchmark.leaderboard.plots import LINES
from benchmark.tuning.tuned import GroupStudies

_SETTINGS = {"default": "#9e9e9e", "tuned": "#1f77b4"}
_WIDTH = 0.4  # of a bar; a loss's two bars fill 0.8 of its slot


def tuned_vs_default(entries: pd.DataFrame, metric: str) -> Figure | None:
    """Per loss with a tuned row: default and tuned bars of `metric` with 95 % CI whiskers."""
    names = entries["experiment"].str.rsplit("/", n=1).str[-1]
    tuned = names[names.str.endswith(TUNED)].str.removesuffix(TUNED).tolist()
    if not tuned:
        return None
    figure = Figure(figsize=(max(6.0, 0.8 * len(tuned) + 2), 4))
    ax = figure.subplots()
    slots = np.arange(len(tuned))
    for offset, label, suffix in ((-0.5, "default", ""), (0.5, "tuned", TUNED)):
        rows = [entries[names == f"{stem}{suffix}"] for stem in tuned]
        means = [float(r[f"{metric}_mean"].iloc[0]) if len(r) else math.nan for r in rows]
        cis = [float(r[f"{metric}_ci95"].iloc[0]) if len(r) else math.nan for r in rows]
        errors = [0.0 if math.isnan(c) else c for c in cis]
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
    for stem, trials in studies.trials.items():
        done = trials[trials["state"] == "COMPLETE"].sort_values("number")
        values = done["value"].astype(float)
        (best,) = ax.step(done["number"], values.cummax(), where="post", label=stem)
        ax.scatter(done["number"], values, s=10, alpha=0.45, color=best.get_color())
    ax.set(xlabel="trial", ylabel=metric)
    ax.set_title(f"Optimisation history: {metric} of each trial (dots), best so far (line)")
    ax.legend(fontsize="small", ncols=2)
    figure.tight_layout()
    return figure
