"""A forked unit of work whose exit status the fork server lost: its own result decides."""

from __future__ import annotations

import multiprocessing.forkserver
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmark.launch import fork_server, forked

pytestmark = pytest.mark.skipif(not fork_server.fork_available(), reason="no fork server here")


@dataclass(frozen=True)
class LosesItsStatus:
    """Work that ends with the status the fork server reports when it lost the real one,
    after writing its result if `writes`."""

    result: Path
    writes: bool

    def __call__(self) -> None:
        if self.writes:
            self.result.write_text("done")
        os._exit(forked.LOST_STATUS)

    def done(self) -> bool:
        return self.result.is_file()


@pytest.mark.parametrize(("writes", "status"), [(True, 0), (False, forked.LOST_STATUS)])
def test_a_lost_status_is_a_success_only_where_the_result_was_written(
    tmp_path: Path, writes: bool, status: int
) -> None:
    log = tmp_path / "run.log"
    assert forked.run_forked(LosesItsStatus(tmp_path / "result", writes), log, 1) == status
    assert ("the run counts as done" in log.read_text()) == writes


def test_a_call_has_no_result_so_its_lost_status_stays_a_failure(tmp_path: Path) -> None:
    work = forked.Call(os._exit, (forked.LOST_STATUS,))
    assert forked.run_forked(work, tmp_path / "run.log", 1) == forked.LOST_STATUS


def test_a_failure_the_server_reported_stays_one_even_with_a_result(tmp_path: Path) -> None:
    (tmp_path / "result").write_text("done")
    work = LosesItsStatus(tmp_path / "result", writes=True)
    assert forked.exit_status(1, work, tmp_path / "run.log") == 1


def _alive_pipe_held(out: Path) -> None:
    out.write_text(repr(multiprocessing.forkserver._forkserver._forkserver_alive_fd))  # type: ignore[attr-defined]


def test_a_child_lets_go_of_the_servers_client_alive_pipe(tmp_path: Path) -> None:
    """The one private name of the stdlib that the launcher touches: if multiprocessing renames
    it, the child fails here (exit status 1) instead of silently keeping the pipe open."""
    out = tmp_path / "alive_fd"
    assert forked.run_forked(forked.Call(_alive_pipe_held, (out,)), tmp_path / "run.log", 1) == 0
    assert out.read_text() == "None"
