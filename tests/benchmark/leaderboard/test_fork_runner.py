"""The default cell runner: cells forked from a server that imported the training code once."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark.leaderboard import fork_server, runner
from tests.benchmark.leaderboard.orphans import CELL, assert_cell_dies_with

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(not fork_server.fork_available(), reason="no fork server here")


def script(tmp_path: Path, text: str) -> str:
    path = tmp_path / "cell.py"
    path.write_text(text)
    return str(path)


def test_a_forked_cell_writes_its_log_with_its_threads_and_returns_its_status(
    tmp_path: Path,
) -> None:
    log = tmp_path / "cell.log"
    body = (
        "import os, torch\n"
        "print('threads', torch.get_num_threads(), os.getpgid(0) == os.getpid())\n"
    )
    assert runner.run_forked(runpy.run_path, (script(tmp_path, body),), log, 1) == 0
    assert log.read_text().split() == ["threads", "1", "True"]  # own process group
    failing = script(tmp_path, "import sys\nprint('bad input', file=sys.stderr)\nsys.exit(3)\n")
    assert runner.run_forked(runpy.run_path, (failing,), log, None) == 3
    assert log.read_text() == "bad input\n"
    with pytest.raises(runner.CellFailedError, match="exit status 2"):
        runner.fork_runner(["fit", "--no-such-option"], log, 1)  # the CLI's usage error
    assert "--no-such-option" in log.read_text()


def test_a_forked_cell_dies_with_a_killed_leaderboard_process(tmp_path: Path) -> None:
    pid_file = tmp_path / "cell.pid"
    cell = script(tmp_path, CELL.format(pid_file=str(pid_file)))
    parent = (
        "import runpy\nfrom pathlib import Path\n"
        "from benchmark.leaderboard import fork_server, runner\n"
        "fork_server.PRELOAD = []  # a server that imports nothing starts in a blink\n"
        "if __name__ == '__main__':\n"
        f"    log = Path({str(tmp_path / 'c.log')!r})\n"
        f"    runner.run_forked(runpy.run_path, ({cell!r},), log, 1)\n"
    )
    leaderboard_process = subprocess.Popen(
        [sys.executable, script(tmp_path.parent, parent)], cwd=REPO
    )
    assert_cell_dies_with(leaderboard_process, pid_file)
