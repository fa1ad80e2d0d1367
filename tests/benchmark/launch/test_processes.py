"""`on_threads`: the thread pool of the local cell and tuning launchers."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from benchmark.launch.processes import on_threads, run_in_own_group


def test_every_item_runs_on_at_most_the_workers_given() -> None:
    lock, running, most, seen = threading.Lock(), [0], [0], []

    def call(item: int) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
            seen.append(item)

    on_threads(call, range(6), 2)
    assert sorted(seen) == list(range(6))
    assert most[0] == 2


def test_an_error_stops_the_rest_and_ends_the_runs_going_on(tmp_path: Path) -> None:
    stopped, codes = threading.Event(), []
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]

    def call(item: int) -> None:
        if item == 0:
            codes.append(run_in_own_group(sleeper, tmp_path / "sleep.log", {}))
        else:
            time.sleep(0.5)  # the sleeper has started
            raise RuntimeError("cell 1 broke")

    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="cell 1 broke"):
        on_threads(call, range(2), 2, stopped.set)
    assert stopped.is_set()
    assert codes == [-9]  # SIGKILLed with its group, not left to finish
    assert time.perf_counter() - start < 30
