"""Where the manual explains each command: its page under `docs/` and its `mkdocs serve` URL.

There is no hosted site: `pip install -e ".[docs]" && mkdocs serve` serves `docs/` at
`SERVE_URL`, and the Markdown files read as they are on GitHub or in an editor. Every `--help`
names its page from here; `tests/docs/test_cli_reference.py` checks that each page and anchor
exists.
"""

from __future__ import annotations

SERVE_URL = "http://127.0.0.1:8000/"

# command (as typed after `circlebench`, or `bench` for `python -m benchmark.bench`) -> page
PAGES = {
    "circlebench": "reference/cli.md",
    "fit": "training/index.md",
    "validate": "training/index.md",
    "test": "training/index.md",
    "leaderboard": "leaderboards/index.md",
    "tune": "guides/tuning.md",
    "dashboard": "leaderboards/report.md#wb-dashboard",
    "data": "datasets/data-command.md",
    "bench": "benchmarks/index.md",
    "bench losses": "benchmarks/losses.md",
    "bench data": "benchmarks/data.md",
    "bench eval": "benchmarks/evaluation.md",
    "bench train": "benchmarks/training.md",
    "bench gpu": "benchmarks/gpu.md",
    "bench backbones": "benchmarks/training.md",
}


def page_url(page: str) -> str:
    """The `mkdocs serve` URL of a page path under docs/ (`a/b.md#x` -> `SERVE_URL`a/b/#x)."""
    path, _, anchor = page.partition("#")
    stem = path.removesuffix(".md")
    if stem == "index" or stem.endswith("/index"):
        stem = stem.removesuffix("index")
    else:
        stem += "/"
    return SERVE_URL + stem + (f"#{anchor}" if anchor else "")


def manual_line(command: str) -> str:
    """One line for a `--help`: the page that explains `command`, as a file and as a URL."""
    page = PAGES[command]
    return f"manual: docs/{page} (with `mkdocs serve`: {page_url(page)})"
