"""Importing this module readies numba's CPU target: its typing and lowering registries, which
numba otherwise fills at the first compiled call of every process, a one-off cost larger than
a small evaluation's own (measured: a frozen-track cell's test phase in
docs/benchmarks/training.md#a-cells-seconds-phase-by-phase-2026-11-26). The leaderboard's
fork server imports it once, for every cell it forks. It starts no thread (the compiled
kernels' thread pool starts at their first call), so the server stays safe to fork.
"""

from numba.core.registry import cpu_target

cpu_target.typing_context.refresh()
cpu_target.target_context.refresh()
