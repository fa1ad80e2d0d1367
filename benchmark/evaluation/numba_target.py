"""Importing this module readies numba's CPU target: its typing and lowering registries, which
numba otherwise fills at the first compiled call of every process (0.26 s on the 2-core Zen 4,
a third of a frozen-track cell's evaluation). The leaderboard's fork server imports it once, for
every cell it forks. It starts no thread (the compiled kernels' thread pool starts at their
first call), so the server stays safe to fork.
"""

from numba.core.registry import cpu_target

cpu_target.typing_context.refresh()
cpu_target.target_context.refresh()
