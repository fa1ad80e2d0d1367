"""The one check that a cell dies with its killed leaderboard process (any runner)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

# What a cell runs: write its pid, then outlive any deadline below unless it is killed.
CELL = "import os, time\nopen({pid_file!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n"


def assert_cell_dies_with(leaderboard_process: subprocess.Popen, pid_file: Path) -> None:
    """Wait for the cell to write `pid_file`, SIGKILL `leaderboard_process`, and fail unless
    the cell is gone within 30 s (it would sleep for ten minutes)."""
    deadline = time.monotonic() + 120
    while not pid_file.is_file() or not pid_file.read_text():
        assert time.monotonic() < deadline and leaderboard_process.poll() is None
        time.sleep(0.05)
    cell_pid = int(pid_file.read_text())
    leaderboard_process.kill()
    leaderboard_process.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(cell_pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail(f"cell {cell_pid} outlived the killed leaderboard process")
