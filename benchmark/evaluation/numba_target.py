"""Importing this module fills numba's CPU typing and lowering registries, which numba otherwise
fills at every process's first compiled call; the leaderboard's fork server imports it once for
every cell it forks. It starts no thread, so the server stays safe to fork."""

from numba.core.registry import cpu_target

cpu_target.typing_context.refresh()
cpu_target.target_context.refresh()
