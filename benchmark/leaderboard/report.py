"""The leaderboard as one self-contained page, `results/suites/<suite>/report.html`: figures as
`data:` URIs and a script that sorts a table by a clicked header, so it opens with no network.
Per group: the settings its rows share, a table of the rest and of `mean ± ci95` per metric, the
figures of `plots.py`, and for a group that tunes its tuning table and figures.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

import pandas as pd

from benchmark.leaderboard.aggregate import board_metrics, stem
from benchmark.leaderboard.markdown import (
    format_cell,
    format_params,
    setting,
    tuning_rows,
    untuned_note,
)
from benchmark.leaderboard.plots import drawn_figures, optimisation_history, png, tuned_vs_default
from benchmark.tuning.tuned import GroupStudies
from core.atomic import write_text

# Board columns that are not settings: identity and bookkeeping, shown elsewhere on the page.
_NOT_SETTINGS = ("experiment", "group", "requires", "n_seeds", "seeds")
# Each figure's alt text, by kind: what a reader who cannot see the image is missing.
_ALT = {
    "recall_at_k": "Recall@K against K, mean and 95 % CI over seeds, one line per loss",
    "sp_sn_training": "mean s_p and s_n of each training step, one line per loss",
    "sp_sn_scatter": "final (s_n, s_p) of each test query, one panel per loss, with Circle "
    "loss's decision boundary in its panels",
    "tuned": "the first test metric of each loss as configured and as tuned, 95 % CI",
    "history": "each tuning trial's validation score and the best so far, per loss",
}


def write_report(
    board: pd.DataFrame,
    rows: pd.DataFrame,
    path: Path,
    *,
    title: str,
    description: str = "",
    fingerprint: str | None = None,
    studies: dict[str, GroupStudies] | None = None,
    drawn: dict[str, dict[str, bytes]] | None = None,
) -> Path:
    """Write the page of `board` (one row per experiment) and its runs' `rows` atomically;
    `studies` are the tuning studies of the groups that tune, `drawn` the groups' figures
    (`plots.drawn_figures`, drawn here when None)."""
    drawn = drawn_figures(board, rows) if drawn is None else drawn
    body = [f"<h1>{_e(title)}</h1>"]
    if description:
        body.append(f"<p>{_e(description)}</p>")
    body.append(_facts([("numerics fingerprint", fingerprint or "not recorded")]))
    body.append(provenance(rows))
    body.append(
        "<p class='note'>Metrics in percent: mean ± half-width of the 95 % Student-t "
        "confidence interval over seeds (none for one seed). Click a column header to sort.</p>"
    )
    for index, (group, entries) in enumerate(board.groupby("group", sort=False)):
        body.append(f"<section id='group-{index}'><h2>{_e(str(group))}</h2>")
        body.append(_facts(_group_facts(entries)))
        body += [f"<p class='note'>{_e(line)}</p>" for line in untuned_note(entries) if line]
        body.append(_table(entries))
        figures = dict(drawn.get(str(group), {}))  # they compare tuned losses only
        if studies and str(group) in studies:
            intro, head, table = tuning_rows(studies[str(group)])
            # "–" (no value) sorts last, like a missing metric, and leaves the column numeric
            cells = [[_td(t, "" if t == "–" else None, wrap=True) for t in row] for row in table]
            body.append(f"<h3>Tuning</h3><p>{_e(intro)}</p>{_html_table(head, cells)}")
            metrics = board_metrics(entries, others=True)
            tuning = {
                "tuned": tuned_vs_default(entries, metrics[0]) if metrics else None,
                "history": optimisation_history(studies[str(group)]),
            }
            figures |= {kind: png(figure) for kind, figure in tuning.items() if figure is not None}
        body += [_image(f"fig-{index}-{kind}", kind, figure) for kind, figure in figures.items()]
        body.append("</section>")
    page = {"title": _e(title), "style": _STYLE, "script": _SCRIPT}
    write_text(path, _PAGE.format(body="\n".join(body), **page))
    return path


def _settings(entries: pd.DataFrame) -> list[str]:
    """Settings columns (anything but identity, metrics and CIs), in the board's order."""
    return [c for c in entries if c not in _NOT_SETTINGS and not c.endswith(("_mean", "_ci95"))]


def _group_facts(entries: pd.DataFrame) -> list[tuple[str, str]]:
    """The settings every row of the group shares, its seeds, and the data it needs."""
    facts = []
    for column in _settings(entries):
        values = entries[column].astype(str).unique()
        if len(values) == 1 and not _empty(values[0]):
            text = format_params(values[0]) if column == "loss_params" else values[0]
            facts.append((column, text))
    seeds = sorted({s for seeds in entries["seeds"].astype(str) for s in seeds.split()}, key=int)
    facts.append(("seeds", " ".join(seeds)))
    if "requires" in entries and str(entries["requires"].iloc[0]):
        facts.append(("needs", str(entries["requires"].iloc[0])))
    return facts


def _empty(value: object) -> bool:
    return str(value) in ("", "nan", "None")


def _table(entries: pd.DataFrame) -> str:
    shared = {name for name, _ in _group_facts(entries)}
    settings = [
        c for c in _settings(entries) if c not in shared and not entries[c].map(_empty).all()
    ]
    metrics = board_metrics(entries, others=True)
    rows = []
    for _, row in entries.iterrows():
        cells = [_td(stem(str(row["experiment"])))]
        for column in settings:
            text = setting(row) if column == "tuning" else str(row[column])  # budget: in notes
            shown = format_params(text) if column == "loss_params" else text
            cells.append(_td(shown, text, wrap=True))
        cells.append(_td(str(row["n_seeds"]), float(row["n_seeds"])))
        for metric in metrics:
            mean, ci = float(row[f"{metric}_mean"]), float(row.get(f"{metric}_ci95", math.nan))
            cells.append(_td(format_cell(mean, ci, None), "" if math.isnan(mean) else mean))
        rows.append(cells)
    return _html_table(["experiment", *settings, "seeds", *metrics], rows)


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    """A table sorted by a clicked (or focused and entered) header; `rows` of `_td` cells."""
    heads = "".join(f"<th scope='col' tabindex='0'>{_e(name)}</th>" for name in head)
    body = "".join(f"<tr>{''.join(cells)}</tr>" for cells in rows)
    table = f"<table class='board'><thead><tr>{heads}</tr></thead><tbody>{body}</tbody></table>"
    return f"<div class='scroll'>{table}</div>"


def _td(text: str, sort: str | float | None = None, *, wrap: bool = False) -> str:
    key = text if sort is None else (f"{sort:.6g}" if isinstance(sort, float) else sort)
    return f"<td data-sort='{_e(key)}'{' class=wrap' if wrap else ''}>{_e(text)}</td>"


def provenance(rows: pd.DataFrame) -> str:
    """One line on the code that made the rows (how many revisions, how many rows from
    uncommitted code), the revisions themselves folded away with their row counts."""
    shas = pd.Series([str(s) for s in rows.get("git_sha", []) if str(s) not in ("", "nan")])
    if shas.empty:
        return "<p class='note'>Code revision: not recorded.</p>"
    counts = shas.value_counts()
    dirty = int(sum(n for sha, n in counts.items() if str(sha).endswith("+dirty")))
    revisions = f"{len(counts)} revision{'s' if len(counts) > 1 else ''}"
    code = f"{dirty} row{'s' if dirty > 1 else ''} from uncommitted code (+dirty)" if dirty else ""
    line = f"Code: {revisions} made the {len(shas)} rows; {code or 'all committed'}."
    items = "".join(
        f"<li><code>{_e(str(sha))}</code>: {n} row{'s' if n > 1 else ''}</li>"
        for sha, n in counts.items()
    )
    return f"<details class='note'><summary>{_e(line)}</summary><ul>{items}</ul></details>"


def _facts(facts: list[tuple[str, str]]) -> str:
    items = "".join(f"<li>{_e(k)} <code>{_e(v)}</code></li>" for k, v in facts)
    return f"<ul class='facts'>{items}</ul>"


_e = html.escape  # quotes too: attributes are single-quoted


def _image(name: str, kind: str, image_png: bytes) -> str:
    data = base64.b64encode(image_png).decode("ascii")
    image = f"<img alt='{_e(_ALT[kind])}' src='data:image/png;base64,{data}'>"
    return f"<figure class='plot' id='{name}'>{image}</figure>"


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{style}</style>
</head>
<body>
{body}
<script>{script}</script>
</body>
</html>
"""

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; } h2 { margin-top: 2em; border-bottom: 1px solid #ccc; }
.note { color: #555; }
ul.facts { display: flex; flex-wrap: wrap; gap: 0.2em 1.4em; list-style: none; padding: 0;
           color: #555; }
ul.facts code { color: #111; background: #f2f2f2; padding: 0 0.3em; border-radius: 3px; }
table.board { border-collapse: collapse; margin: 1em 0; font-variant-numeric: tabular-nums; }
table.board th, table.board td { padding: 0.25em 0.6em; border-bottom: 1px solid #e4e4e4;
                                 text-align: left; white-space: nowrap; vertical-align: top; }
table.board td.wrap { white-space: normal; min-width: 8em; max-width: 24em; }
.scroll { overflow-x: auto; }
table.board th { cursor: pointer; user-select: none; background: #f4f4f4; }
table.board th[aria-sort=ascending]::after { content: " ▲"; }
table.board th[aria-sort=descending]::after { content: " ▼"; }
table.board tbody tr:hover { background: #f7fbff; }
figure.plot { margin: 1em 0; }
figure.plot img { max-width: 100%; height: auto; }
"""

# Sorting: numbers by value (first click: largest first), text alphabetically.
_SCRIPT = """
function sortTable(table, column, th) {
  const body = table.tBodies[0];
  const rows = Array.from(body.rows);
  const key = (row) => row.cells[column].dataset.sort;
  const numeric = rows.every((row) => key(row) === "" || !isNaN(Number(key(row))));
  const previous = th.getAttribute("aria-sort");
  const descending = previous ? previous === "ascending" : numeric;
  table.querySelectorAll("th").forEach((h) => h.removeAttribute("aria-sort"));
  th.setAttribute("aria-sort", descending ? "descending" : "ascending");
  rows.sort((a, b) => {
    const x = key(a), y = key(b);
    if (x === "" || y === "") return (x === "") - (y === "");  // missing values last
    const order = numeric ? Number(x) - Number(y) : x.localeCompare(y);
    return descending ? -order : order;
  });
  rows.forEach((row) => body.appendChild(row));
}
document.querySelectorAll("table.board").forEach((table) => {
  table.querySelectorAll("th").forEach((th, column) => {
    th.addEventListener("click", () => sortTable(table, column, th));
    th.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") sortTable(table, column, th);
    });
  });
});
"""
