"""Every page of the manual runs: its Python, its files, its YAML and its commands.

The conventions (marks, shrinking) are in docs/development/docs.md and tests/docs/shrink.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.docs import runner, shell
from tests.docs.blocks import MODES, blocks, pages

PROJECT_COMMANDS = ("circlebench", "python -m benchmark.")
RUNNABLE = ("bash", "python", "yaml")


FAISS_PAGES = {"benchmarks/evaluation.md"}  # its commands compare with faiss's top-k search


def runnable_pages() -> list:
    return [
        pytest.param(p, marks=[pytest.mark.faiss] if p in FAISS_PAGES else [])
        for p in pages()
        if any(b.lang in RUNNABLE for b in blocks(p))
    ]


@pytest.mark.parametrize("page", runnable_pages())
def test_the_page_runs(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    runner.prepare(tmp_path, monkeypatch)
    namespace: dict = {"__name__": f"docs.{page}"}
    try:
        for block in blocks(page):
            runner.run_block(block, namespace, tmp_path)
    finally:
        runner.forget_modules(tmp_path)
        torch.set_num_threads(threads)  # a Lightning run may leave its settings behind
        torch.use_deterministic_algorithms(deterministic)


@pytest.mark.parametrize("page", pages())
def test_every_mark_is_known_and_says_why(page: str) -> None:
    for block in blocks(page):
        assert block.mode in MODES, f"{block.where}: unknown mark {block.mode!r}; use {MODES}"
        if block.mode != "run":
            assert block.reason, f"{block.where}: say why the block is {block.mode}"
            assert block.lang in RUNNABLE, f"{block.where}: a {block.lang!r} block never runs"


@pytest.mark.parametrize("page", pages())
def test_a_skipped_project_command_runs_elsewhere_on_its_page(page: str) -> None:
    """A circlebench command in a skipped block (beside `pip install`, say) must also be in a
    block of the same page that runs or parses it: every project command is at least parsed."""
    checked, skipped = set(), {}
    for block in blocks(page):
        if block.lang != "bash":
            continue
        for command in shell.commands(block.text):
            line = " ".join(command.argv)
            if line.startswith(PROJECT_COMMANDS):
                if block.mode == "skip":
                    skipped.setdefault(line, block.where)
                else:
                    checked.add(line)
    missing = {line: where for line, where in skipped.items() if line not in checked}
    assert not missing, f"run or parse these in a block marked parse-only: {missing}"


def test_the_pages_copy_of_a_suite_is_the_repositorys_plus_its_marked_lines() -> None:
    """A page that shows a whole suite file to edit (the runner writes it into the page's
    folder) shows the committed file, plus the lines it marks `# added`."""
    for page in pages():
        for block in blocks(page):
            if not block.title.startswith("experiments/suites/") or "# added" not in block.text:
                continue  # a page's own new suite, not an edit of the repository's
            committed = (runner.REPO / block.title).read_text().splitlines()
            shown = [x for x in block.text.splitlines() if not x.endswith("# added")]
            assert shown == committed, f"{block.where}: copy {block.title} again, then mark"
