"""What importing `benchmark` sets for the libraries it loads after it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("given", "expected"), [(None, "24"), ("30", "30")])
def test_openblas_spin_is_shortened_unless_the_user_set_it(
    given: str | None, expected: str
) -> None:
    """OpenBLAS's threads spin 2^28 cycles after each product by default, taking a small
    machine's cores from the evaluator's next steps; the package asks for 2^24 before numpy
    loads, and leaves a user's own value alone."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    if given is not None:
        env["OPENBLAS_THREAD_TIMEOUT"] = given
    code = "import benchmark, os, sys; assert 'numpy' not in sys.modules; "
    code += "print(os.environ['OPENBLAS_THREAD_TIMEOUT'])"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected
