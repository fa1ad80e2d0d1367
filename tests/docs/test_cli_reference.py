"""Every command's --help names its manual page, and every option it prints is documented."""

from __future__ import annotations

import re
import sys
import unicodedata
from pathlib import Path

import pytest

from benchmark.bench.__main__ import BENCHMARKS
from benchmark.bench.__main__ import main as bench_main
from benchmark.cli import COMMANDS, TRAINING, main, usage
from benchmark.manual import PAGES, SERVE_URL, manual_line, page_url
from tests.docs.blocks import DOCS

REPO = DOCS.parent
REFERENCE = DOCS / "reference" / "cli.md"
# The section of reference/cli.md that documents each command's options.
SECTIONS = {
    **{name: "## `circlebench fit`, `validate`, `test`" for name in TRAINING},
    "leaderboard": "## `circlebench leaderboard`",
    "tune": "## `circlebench tune`",
    "dashboard": "## `circlebench dashboard`",
    "data": "## `circlebench data`",
    "bench": "## `python -m benchmark.bench`",
}
DATA_COMMANDS = ("list", "info", "verify", "download")
_OPTION_LINE = re.compile(r"^  (-{1,2}[A-Za-z][^\s,]*(?:[ ,][^ ].*?)?)(?:\s{2,}|$)")
_OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w.-]*)")


def help_text(argv: list[str], capsys: pytest.CaptureFixture, run=main) -> str:
    """What `argv --help` prints, whitespace collapsed (argparse wraps long lines)."""
    with pytest.raises(SystemExit) as stop:
        run(argv)
    assert stop.value.code in (0, None)
    out = capsys.readouterr().out
    return out


def options(text: str) -> set[str]:
    """The options a --help lists, as `--name` (`--name+` list forms folded into `--name`)."""
    found = set()
    for line in text.splitlines():
        if match := _OPTION_LINE.match(line):
            found |= {o.rstrip("+") for o in _OPTION.findall(match[1])}
    return found


def section(heading: str) -> str:
    text = REFERENCE.read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end > 0 else None]


def documented(option: str, text: str) -> bool:
    return re.search("`" + re.escape(option) + r"(?![\w.-])", text) is not None


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(autouse=True)
def _bare_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["circlebench"])  # LightningCLI compares args with it


def test_circlebench_help_names_every_command_page(capsys: pytest.CaptureFixture) -> None:
    main(["--help"])
    out = capsys.readouterr().out
    assert out.strip() == usage().strip()
    for name in COMMANDS:
        assert name in PAGES, f"add the manual page of {name!r} to PAGES in benchmark/manual.py"
        page = PAGES[name]
        assert re.search(rf"^  {name} +docs/{re.escape(page)} +{re.escape(page_url(page))}$",
                         out, re.M), f"circlebench --help: no page for {name}"  # fmt: skip
    assert "mkdocs serve" in out and SERVE_URL in out


@pytest.mark.parametrize("name", [n for n in COMMANDS if n not in TRAINING])
def test_each_command_help_names_its_page_and_documents_its_options(
    name: str, capsys: pytest.CaptureFixture
) -> None:
    text = help_text([name, "--help"], capsys)
    assert manual_line(name) in flat(text)
    missing = [o for o in options(text) if not documented(o, section(SECTIONS[name]))]
    assert not missing, f"circlebench {name}: document {missing} in {REFERENCE.name}"


@pytest.mark.parametrize("command", DATA_COMMANDS)
def test_each_data_command_help_names_its_page_and_documents_its_options(
    command: str, capsys: pytest.CaptureFixture
) -> None:
    text = help_text(["data", command, "--help"], capsys)
    assert manual_line("data") in flat(text)
    missing = [o for o in options(text) if not documented(o, section(SECTIONS["data"]))]
    assert not missing, f"circlebench data {command}: document {missing}"


@pytest.mark.parametrize("name", TRAINING)
def test_training_help_names_its_page_and_documents_our_options(
    name: str, capsys: pytest.CaptureFixture
) -> None:
    """LightningCLI: every option but the Trainer's own `--trainer.*` (Lightning's)."""
    text = help_text([name, "--help"], capsys)
    assert manual_line(name) in flat(text)
    ours = {o for o in options(text) if not o.startswith("--trainer.")}
    assert {"--config", "--print_config", "--model.loss", "--data", "--results_csv"} <= ours
    missing = sorted(o for o in ours if not documented(o, section(SECTIONS[name])))
    assert not missing, f"circlebench {name}: document {missing} in {REFERENCE.name}"


@pytest.mark.parametrize("what", ["", *BENCHMARKS])
def test_each_benchmark_help_names_its_page_and_documents_its_options(
    what: str, capsys: pytest.CaptureFixture
) -> None:
    text = help_text([what, "--help"] if what else ["--help"], capsys, run=bench_main)
    assert manual_line(f"bench {what}".strip()) in flat(text)
    missing = [o for o in options(text) if not documented(o, section(SECTIONS["bench"]))]
    assert not missing, f"python -m benchmark.bench {what}: document {missing}"


def slug(heading: str) -> str:
    """Python-Markdown's toc anchor of a heading (what mkdocs links to)."""
    text = re.sub(r"`|\*", "", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    return {
        slug(line.lstrip("#")) for line in page.read_text().splitlines() if line.startswith("#")
    }


@pytest.mark.parametrize("command", sorted(PAGES))
def test_every_help_page_and_anchor_exists(command: str) -> None:
    path, _, anchor = PAGES[command].partition("#")
    assert (DOCS / path).is_file(), f"{command}: docs/{path} does not exist"
    assert not anchor or anchor in anchors(DOCS / path), f"{command}: no #{anchor} in {path}"


def test_page_urls_follow_mkdocs_directory_urls() -> None:
    assert page_url("index.md") == SERVE_URL
    assert page_url("training/index.md") == SERVE_URL + "training/"
    assert page_url("leaderboards/report.md#wb-dashboard") == (
        SERVE_URL + "leaderboards/report/#wb-dashboard"
    )


def test_readme_links_into_the_manual_resolve() -> None:
    """The front door's relative links (GitHub and offline): every file and anchor exists."""
    readme = (REPO / "README.md").read_text()
    links = re.findall(r"\]\(((?!https?:)[^)#\s]+)(?:#([^)\s]+))?\)", readme)
    assert len(links) > 20
    for target, anchor in links:
        path = REPO / target
        assert path.exists(), f"README links to {target}, which does not exist"
        if anchor and path.suffix == ".md":
            assert anchor in anchors(path), f"README links to {target}#{anchor}: no such anchor"
    assert len(readme.splitlines()) < 250, "the README is the front door: keep it under 250 lines"
