"""Fixtures shared by every test folder."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """`../shared/data` beside the checkout; the test is skipped where it does not exist."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data subsets not present at {SHARED_DATA}")
    return SHARED_DATA
