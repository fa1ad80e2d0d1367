"""The default cell runner: cells forked from a server that imported the training code once."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark.launch import fork_server, forked
from benchmark.leaderboard import runner
from benchmark.leaderboard.cells import CellWork
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
    assert forked.run_forked(forked.Call(runpy.run_path, (script(tmp_path, body),)), log, 1) == 0
    assert log.read_text().split() == ["threads", "1", "True"]  # own process group
    failing = script(tmp_path, "import sys\nprint('bad input', file=sys.stderr)\nsys.exit(3)\n")
    assert forked.run_forked(forked.Call(runpy.run_path, (failing,)), log, None) == 3
    assert log.read_text() == "bad input\n"
    with pytest.raises(runner.CellFailedError, match="exit status 2"):
        cell = CellWork(["fit", "--no-such-option"], tmp_path / "rows.csv", "syn/circle/seed0")
        runner.fork_runner(cell, log, 1)  # the CLI's usage error
    assert "--no-such-option" in log.read_text()


def test_a_forked_cell_dies_with_a_killed_leaderboard_process(tmp_path: Path) -> None:
    pid_file = tmp_path / "cell.pid"
    cell = script(tmp_path, CELL.format(pid_file=str(pid_file)))
    parent = (
        "import runpy\nfrom pathlib import Path\n"
        "from benchmark.launch import fork_server, forked\n"
        "fork_server.PRELOAD = []  # a server that imports nothing starts in a blink\n"
        "if __name__ == '__main__':\n"
        f"    log = Path({str(tmp_path / 'c.log')!r})\n"
        f"    forked.run_forked(forked.Call(runpy.run_path, ({cell!r},)), log, 1)\n"
    )
    leaderboard_process = subprocess.Popen(
        [sys.executable, script(tmp_path.parent, parent)], cwd=REPO
    )
    assert_cell_dies_with(leaderboard_process, pid_file)


def test_the_numba_preload_readies_the_target_without_starting_a_thread() -> None:
    """The fork server is forked for every cell: its preloads after the imports must start no
    thread of their own (a forked child would inherit a pool without its threads), and this one
    must leave numba ready."""
    if not Path("/proc/self/task").is_dir():
        pytest.skip("no /proc to count threads in")
    last = "benchmark.evaluation.numba_target"
    others = fork_server.SERVER_IMPORTS[: fork_server.SERVER_IMPORTS.index(last)]
    probe = (
        "import importlib, os, numba.np.ufunc.parallel as parallel\n"
        "from numba.core.registry import cpu_target\n"
        f"for name in {others!r}:\n"
        "    importlib.import_module(name)\n"
        "before = len(os.listdir('/proc/self/task'))\n"
        f"importlib.import_module({last!r})\n"
        "print(len(os.listdir('/proc/self/task')) - before, parallel._is_initialized,\n"
        "      cpu_target.target_context._registries != {})\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "False", "True"]


def test_a_forked_cell_does_not_collect_the_servers_objects(tmp_path: Path) -> None:
    """The server imports without garbage collection and freezes what its imports made (its one
    preload, `launch.preload`); its cells collect their own garbage."""
    assert fork_server.PRELOAD == ["benchmark.launch.preload"]
    log = tmp_path / "cell.log"
    body = (
        "import gc, sys\n"
        "print(gc.get_freeze_count() > 100_000, 'benchmark.training.cli' in sys.modules,\n"
        "      gc.isenabled())\n"
    )
    assert forked.run_forked(forked.Call(runpy.run_path, (script(tmp_path, body),)), log, 1) == 0
    assert log.read_text().split() == ["True", "True", "True"]
