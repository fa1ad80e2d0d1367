"""numba's parallel loops on as many threads as torch's ops.

numba starts one thread per core at import, whatever `torch.set_num_threads` says; two such
processes sharing cores make every barrier of a parallel loop wait on a descheduled thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numba
import torch


@contextlib.contextmanager
def like_torch() -> Iterator[None]:
    """Within the block, numba's parallel loops use `torch.get_num_threads()` threads (at most
    numba's own pool); the calling thread's previous setting comes back after it."""
    threads = torch.get_num_threads()
    before = numba.get_num_threads()
    # The first call starts numba's OpenMP pool, which resets OpenMP's thread count: torch's.
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    pool = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]  # set at import
    numba.set_num_threads(max(1, min(threads, pool)))
    try:
        yield
    finally:
        numba.set_num_threads(before)
