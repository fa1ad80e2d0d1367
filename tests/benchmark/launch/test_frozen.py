"""`launch.frozen`: imports without garbage collection, then frozen; the first time only."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

from benchmark.launch import frozen

REPO = Path(__file__).resolve().parents[3]


def fresh_process_prints(code: str) -> list[str]:
    """The words `code` prints in a fresh interpreter at the repository root."""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_the_block_runs_without_collections_and_what_it_leaves_is_frozen() -> None:
    gc.unfreeze()  # the test process's earlier freezes: start from none
    try:
        with frozen.paused():
            assert not gc.isenabled()
            kept = [[] for _ in range(1000)]
        assert gc.isenabled()
        assert gc.get_freeze_count() >= len(kept)
    finally:
        gc.unfreeze()


def test_a_module_is_imported_frozen_only_the_first_time() -> None:
    """Frozen later, an earlier command's garbage (a notebook, the test suite) would be kept
    forever; a fresh process freezes what the import made."""
    gc.unfreeze()
    try:
        assert frozen.import_frozen("benchmark.launch.frozen") is frozen
        assert gc.get_freeze_count() == 0 and gc.isenabled()
    finally:
        gc.unfreeze()
    probe = (
        "import gc, sys\n"
        "from benchmark.launch.frozen import import_frozen\n"
        "module = import_frozen('benchmark.training.cli')\n"
        "print(module is sys.modules['benchmark.training.cli'], gc.isenabled(),\n"
        "      gc.get_freeze_count() > 100_000)\n"
    )
    assert fresh_process_prints(probe) == ["True", "True", "True"]


def test_the_command_imports_its_module_frozen() -> None:
    probe = (
        "import gc\n"
        "from benchmark.cli import main\n"
        "main(['data', 'list'])\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 0)\n"
    )
    assert fresh_process_prints(probe)[-2:] == ["True", "True"]
