"""`bench train --cells`: cells timed through a runner, cache events read from their logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmark.bench import cells
from benchmark.leaderboard.cells import CellWork


def test_a_cell_reports_what_its_log_says_the_cache_did(tmp_path: Path) -> None:
    seen: list[list[str]] = []

    def runner(cell: CellWork, log: Path, threads: int | None) -> None:
        seen.append(cell.args)
        log.write_text(
            "feature cache: computed synthetic train (4800 images, 49.5 s) /c/a.npy\n"
            "feature cache: read synthetic query (480 images, 0.0 s) /c/b.npy\n"
            "feature cache: computed synthetic query (480 images, 4.5 s) /c/c.npy\n"
        )

    timing = cells.run_cell(cells.TRACKS["frozen"], 3, tmp_path, runner)
    assert (timing.computed, timing.read, timing.build_seconds) == (2, 1, 54.0)
    assert f"--data.init_args.cache_dir={tmp_path / 'cache'}" in seen[0]
    assert seen[0][seen[0].index("--seed_everything") + 1] == "3"
    cells.run_cell(cells.TRACKS["end-to-end"], 0, tmp_path, runner)
    assert not any(a.startswith("--data.init_args.cache_dir") for a in seen[1])
    assert cells.per_minute([cells.CellTiming(10.0, 0, 1, 0.0)] * 3) == pytest.approx(6.0)
    assert all(path.is_file() for path in cells.TRACKS.values())


def test_fewer_than_two_cells_cannot_show_a_cache_hit() -> None:
    with pytest.raises(SystemExit, match=r"--cells must be 0 \(skip\) or at least 2"):
        cells.report(1)
