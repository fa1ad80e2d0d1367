"""report.html: self-contained, one sortable table per group, figures; checked in Chromium too."""

from __future__ import annotations

import base64
import re
import shutil
from pathlib import Path

import pytest

from benchmark.leaderboard.plots import KINDS, write_plots
from benchmark.leaderboard.report import write_report
from tests.benchmark.leaderboard.hand_made import EXPERIMENTS, hand_made_suite

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Debian's Chromium, never a browser that Playwright downloads; nothing may reach the network.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip
# A figure of the page: group index, kind, PNG bytes (base64).
IMAGE = re.compile(r"id='fig-(\d)-(\w+)'><img alt='[^']+' src='data:image/png;base64,([^']+)'")


@pytest.fixture
def report(tmp_path: Path) -> Path:
    board, rows = hand_made_suite(tmp_path)
    return write_report(
        board, rows, tmp_path / "report.html", title="Leaderboard: suite t", fingerprint="abc123"
    )


def test_the_page_is_self_contained_with_a_table_and_figures_per_group(report: Path) -> None:
    page = report.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing to fetch
    assert page.count("<table class='board'>") == 2
    assert page.count("<tbody><tr>") == 2
    syn, reid = page.split("<h2>")[1:]
    assert syn.count("<tr>") == 1 + 3 and reid.count("<tr>") == 1 + 2  # header + experiments
    assert "62.00 ± 12.71" in syn  # circle: R@1 61 and 63 over 2 seeds, t(0.975, 1) = 12.706
    for kind in KINDS:
        assert f"id='fig-0-{kind}'" in page and f"id='fig-1-{kind}'" in page
    assert "numerics fingerprint <code>abc123</code>" in page
    assert "backbone <code>efficientnet_lite0</code>" in page and "seeds <code>0 1</code>" in page


def test_the_page_shows_the_plots_files_byte_for_byte(report: Path, tmp_path: Path) -> None:
    (tmp_path / "again").mkdir()
    board, rows = hand_made_suite(tmp_path / "again")  # the same runs, in another folder
    files = write_plots(board, rows, tmp_path / "plots")
    groups = {"0": "syn", "1": "reid"}
    images = IMAGE.findall(report.read_text())
    shown = {f"{kind}_{groups[index]}.png": base64.b64decode(data) for index, kind, data in images}
    assert shown == {path.name: path.read_bytes() for path in files}


def test_the_page_inlines_figures_drawn_for_the_files(tmp_path: Path) -> None:
    """`leaderboard` draws each figure once: the page takes the bytes it is given."""
    board, rows = hand_made_suite(tmp_path)
    drawn = {"syn": {"recall_at_k": b"syn-recall"}, "reid": {}}
    page = write_report(board, rows, tmp_path / "r.html", title="t", drawn=drawn).read_text()
    images = IMAGE.findall(page)
    assert [(i, kind, base64.b64decode(data)) for i, kind, data in images] == [
        ("0", "recall_at_k", b"syn-recall")
    ]


def test_runs_without_folders_still_give_tables_and_recall(tmp_path: Path) -> None:
    board, rows = hand_made_suite(tmp_path)
    path = write_report(board, rows.assign(run_dir=""), tmp_path / "r.html", title="t")
    page = path.read_text()
    assert page.count("<table class='board'>") == 2
    assert "fig-0-recall_at_k" in page
    assert "fig-0-sp_sn_training" not in page and "fig-0-sp_sn_scatter" not in page
    assert "numerics fingerprint <code>not recorded</code>" in page


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium: `apt-get install chromium` (.ci/run)")
def test_the_page_in_a_headless_browser(report: Path, tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    problems: list[str] = []
    fetched: list[str] = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda error: problems.append(str(error)))
            page.on("request", lambda request: fetched.append(request.url))
            page.goto(report.as_uri())  # returns once the page and its images have loaded
            widths = page.eval_on_selector_all("figure img", "all => all.map(i => i.naturalWidth)")
            assert len(widths) == 2 * len(KINDS) and min(widths) > 0  # every PNG decoded
            tables = page.locator("table.board")
            groups = {e.split("/")[0] for e in EXPERIMENTS}
            assert tables.count() == len(groups)
            counts = [tables.nth(i).locator("tbody tr").count() for i in range(tables.count())]
            assert counts == [3, 2]
            syn = tables.nth(0)
            column = syn.locator("th").all_inner_texts().index("R@1")

            def r1_column() -> list[str]:
                return syn.locator(f"tbody tr td:nth-child({column + 1})").all_inner_texts()

            assert r1_column() == ["62.00 ± 12.71", "71.50 ± 6.35", "56.50 ± 19.06"]
            syn.locator("th", has_text="R@1").first.click()  # largest first
            assert r1_column() == ["71.50 ± 6.35", "62.00 ± 12.71", "56.50 ± 19.06"]
            syn.locator("th", has_text="R@1").first.click()
            assert r1_column() == ["56.50 ± 19.06", "62.00 ± 12.71", "71.50 ± 6.35"]
            page.screenshot(path=tmp_path / "report.png", full_page=True)
        finally:
            browser.close()
    assert problems == []
    assert [url for url in fetched if not url.startswith(("file:", "data:"))] == []
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_provenance_is_one_line_with_the_revisions_folded_away() -> None:
    import pandas as pd

    from benchmark.leaderboard.report import provenance

    rows = pd.DataFrame({"git_sha": ["a" * 40] * 3 + ["b" * 40 + "+dirty", ""]})
    text = provenance(rows)
    assert "<summary>Code: 2 revisions made the 4 rows; 1 row from uncommitted code" in text
    assert f"<li><code>{'a' * 40}</code>: 3 rows</li>" in text
    assert "all committed" in provenance(rows.iloc[:3])
    assert "not recorded" in provenance(pd.DataFrame({"x": [1]}))
