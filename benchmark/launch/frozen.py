"""Python's garbage collector around the training stack's imports: paused, then frozen.

The imports make hundreds of thousands of objects that live as long as the process; frozen
(`gc.freeze`), no collection walks them, nor copies their pages in a forked run. Their garbage
is frozen too: collecting it would cost another full walk. Figures: docs/benchmarks/training.md.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
from collections.abc import Iterator
from types import ModuleType


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The block without automatic collections; what it leaves alive is frozen after it."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def import_frozen(name: str) -> ModuleType:
    """`importlib.import_module(name)`, paused and frozen only the first time: later, what is
    alive may be an earlier command's garbage, which freezing would keep forever."""
    if name in sys.modules:
        return importlib.import_module(name)
    with paused():
        return importlib.import_module(name)
