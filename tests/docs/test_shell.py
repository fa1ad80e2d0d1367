"""The manual's shell subset expands variables as bash does."""

from __future__ import annotations

import pytest

from tests.docs.shell import commands


def test_a_variable_is_the_blocks_then_the_environments_then_empty(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CB_FROM_ENV", "env")
    monkeypatch.delenv("CB_UNSET", raising=False)
    (command,) = commands("CB_FROM_ENV=block\nsqueue -u $CB_FROM_ENV ${CB_UNSET} x$CB_UNSET")
    assert command.argv == ["squeue", "-u", "block", "", "x"]
    (command,) = commands("squeue -u $CB_FROM_ENV")
    assert command.argv == ["squeue", "-u", "env"]


def test_a_pipe_is_refused() -> None:
    with pytest.raises(ValueError, match="unsupported shell syntax"):
        commands("circlebench --help | head")
