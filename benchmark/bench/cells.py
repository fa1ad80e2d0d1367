"""Leaderboard cells per minute in both tracks, and the feature cache's build time and hit rate.

Part of `python -m benchmark.bench train` (`--cells N`, 0 to skip). Each track runs N seeds of
its quick-suite Circle config as leaderboard cells, one after another with 1 thread each, in a
fresh temporary folder and feature cache. In `frozen` the first cell builds the cache (reported
apart) and the others should only read it (the hit rate); they run with the fork-server runner
and, as the baseline, a fresh interpreter per cell (`--isolation subprocess`). `end-to-end`
runs the fork-server runner only. Measured: docs/benchmarks/training.md.
"""

from __future__ import annotations

import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmark.leaderboard.cells import CellRunner, CellWork
from benchmark.leaderboard.runner import fork_runner, subprocess_runner

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments" / "synthetic" / "fine_grained"
TRACKS = {
    "frozen": EXPERIMENTS / "frozen" / "circle.yaml",
    "end-to-end": EXPERIMENTS / "circle.yaml",
}
# "feature cache: computed synthetic train (4800 images, 49.1 s) <path>"
_CACHE_LINE = re.compile(r"feature cache: (computed|read) .*\((\d+) images, ([\d.]+) s\)")


@dataclass
class CellTiming:
    seconds: float
    computed: int  # cache entries this cell computed
    read: int  # cache entries it read
    build_seconds: float  # spent computing entries


def run_cell(config: Path, seed: int, work: Path, runner: CellRunner) -> CellTiming:
    """One leaderboard cell of `config` with `seed` under `work`, timed; its cache events."""
    log = work / "logs" / f"{config.stem}-{seed}-{time.monotonic_ns()}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    rows_csv, cell_id = work / "rows.csv", f"bench/{config.stem}/{seed}"
    args = [
        "fit", "--config", str(config), "--seed_everything", str(seed),
        "--results_csv", str(rows_csv), "--cell_id", cell_id,
        f"--trainer.default_root_dir={work / 'runs'}", "--wandb=false",
        "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false",
    ]  # fmt: skip
    if "frozen" in config.parts:
        args.append(f"--data.init_args.cache_dir={work / 'cache'}")
    start = time.perf_counter()
    runner(CellWork(args, rows_csv, cell_id), log, 1)
    seconds = time.perf_counter() - start
    events = _CACHE_LINE.findall(log.read_text(errors="replace"))
    computed = [float(s) for kind, _, s in events if kind == "computed"]
    read = sum(kind == "read" for kind, _, _ in events)
    return CellTiming(seconds, len(computed), read, sum(computed))


def per_minute(timings: list[CellTiming]) -> float:
    return 60 * len(timings) / sum(t.seconds for t in timings)


def report(cells: int) -> None:
    """Print cells per minute of both tracks (see the module docstring)."""
    if cells < 2:
        raise SystemExit("--cells must be 0 (skip) or at least 2: one builds the cache")
    print(f"leaderboard cells, 1 thread each, one at a time ({cells} seeds per track)")
    with tempfile.TemporaryDirectory(prefix="circlebench-bench-cells-") as tmp:
        work = Path(tmp)
        first = run_cell(TRACKS["frozen"], 0, work, fork_runner)
        print(
            f"  frozen, first cell     {first.seconds:6.1f} s: built {first.computed} cache "
            f"entries in {first.build_seconds:.1f} s (the fork server started with it)"
        )
        fork = [run_cell(TRACKS["frozen"], s, work, fork_runner) for s in range(1, cells)]
        fresh = [run_cell(TRACKS["frozen"], s, work, subprocess_runner) for s in range(1, cells)]
        hits = sum(t.read for t in fork + fresh)
        lookups = hits + sum(t.computed for t in fork + fresh)
        print(f"  frozen, cache hits     {hits}/{lookups} after the first cell")
        print(
            f"  frozen, fork server    {per_minute(fork):6.1f} cells/min  "
            f"({per_minute(fork) / per_minute(fresh):.2f}× fresh interpreters)"
        )
        print(f"  frozen, fresh interp.  {per_minute(fresh):6.1f} cells/min  (baseline)")
        e2e = [run_cell(TRACKS["end-to-end"], s, work, fork_runner) for s in range(cells)]
        print(f"  end-to-end, fork       {per_minute(e2e):6.1f} cells/min")
