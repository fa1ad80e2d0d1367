"""Fixtures shared by every test folder."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from core.devices import usable_cores

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
HAS_FAISS = importlib.util.find_spec("faiss") is not None
# `-n auto` (pyproject's addopts) takes one worker per usable core, at most this many: past it,
# the Slurm file, which one worker runs whole, bounds the suite, and each worker holds a torch.
MAX_WORKERS = 4


def pytest_xdist_auto_num_workers() -> int:
    """The workers of `-n auto`: the cores this process may use, capped at MAX_WORKERS."""
    return min(MAX_WORKERS, usable_cores())


@pytest.hookimpl(tryfirst=True)  # before `-m faiss` selects by the marks added here
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that need faiss (marked `faiss`, and the evaluator's faiss paths) skip with the
    fix where it is not installed: `pip install -e ".[dev]"` leaves it out, since faiss-cpu and
    faiss-gpu must never be installed together. CI installs faiss-cpu and runs them too
    (`pytest -m faiss`)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and str(callspec.params.get("path", "")).endswith("faiss"):
            item.add_marker(pytest.mark.faiss)
        if not HAS_FAISS and item.get_closest_marker("faiss") is not None:
            item.add_marker(
                pytest.mark.skip(reason='needs faiss: pip install -e ".[cpu]" (".[gpu]" on CUDA)')
            )


@pytest.fixture(autouse=True)
def _seeded_torch() -> None:
    """Every test starts from the same global torch seed: modules built inside a test (a loss's
    proxies, a head's weights) are then the same in every run, whatever ran before."""
    torch.manual_seed(0)


@pytest.fixture
def shared_data() -> Path:
    """`../shared/data` beside the checkout; the test is skipped where it does not exist."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data subsets not present at {SHARED_DATA}")
    return SHARED_DATA
