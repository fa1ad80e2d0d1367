"""numba's parallel loops follow torch's thread count (a leaderboard cell's 1) and restore it."""

from __future__ import annotations

import subprocess
import sys

import numba
import pytest
import torch

import losses as L
from benchmark.evaluation import RetrievalEvaluator
from core.threads import like_torch


@pytest.fixture
def one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def numba_threads_seen(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The thread counts numba's parallel loops were given."""
    seen: list[int] = []
    monkeypatch.setattr(numba, "set_num_threads", seen.append)
    return seen


def test_inside_the_block_numba_gets_torchs_threads_then_its_own_again(
    one_torch_thread: None, numba_threads_seen: list[int]
) -> None:
    with like_torch():
        assert numba_threads_seen == [1]
    assert len(numba_threads_seen) == 2  # numba's own count again


def test_the_compiled_circle_loss_runs_on_torchs_threads(
    one_torch_thread: None, numba_threads_seen: list[int]
) -> None:
    x = torch.randn(16, 8, requires_grad=True)
    L.CircleLoss(m=0.25, gamma=64)(x, torch.arange(4).repeat_interleave(4)).backward()
    assert numba_threads_seen[::2] == [1, 1]  # forward, backward; each restores afterwards


def test_the_evaluator_runs_on_torchs_threads(
    one_torch_thread: None, numba_threads_seen: list[int]
) -> None:
    emb = torch.randn(40, 8)
    RetrievalEvaluator("same_set", (1,), ("recall",)).evaluate(emb, torch.arange(40) % 5)
    assert numba_threads_seen[0] == 1


def test_starting_numbas_pool_leaves_torchs_thread_count_alone() -> None:
    """numba's first thread call starts its OpenMP pool, resetting OpenMP's thread count."""
    code = (
        "import torch, numba\n"
        "torch.set_num_threads(1)\n"
        "from core.threads import like_torch\n"
        "with like_torch():\n"
        "    print(torch.get_num_threads(), numba.get_num_threads())\n"
        "print(torch.get_num_threads())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "1", "1"]
