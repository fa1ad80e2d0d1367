"""The README's "Two commands" are what CI runs (`.ci/run` reads them with
`.ci/readme_commands.py`): their shape is held here, their effect by CI itself."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location(
        "readme_commands", ROOT / ".ci/readme_commands.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ci_runs_the_readmes_two_commands() -> None:
    commands = _module().readme_commands(ROOT / "README.md")
    assert commands == [
        "pip install -e . && circlebench leaderboard --suite quick",
        'pip install -e ".[dev]" && pytest',
    ]
    assert ".ci/readme_commands.py README.md" in (ROOT / ".ci/run").read_text()


def test_a_readme_without_the_block_is_a_clear_error(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n## Two commands\n\nnone\n")
    with pytest.raises(ValueError, match="has no ```bash block"):
        _module().readme_commands(readme)
    readme.write_text("# x\n")
    with pytest.raises(ValueError, match="no '## Two commands' section"):
        _module().readme_commands(readme)
