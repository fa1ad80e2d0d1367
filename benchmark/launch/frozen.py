"""Python's garbage collector around the training stack's imports: paused, then frozen.

Importing torch, Lightning, W&B and the rest makes hundreds of thousands of objects that live as
long as the process. Without this, the collector walks them all several times while they are
imported, and once more in the first full collection after them (in a run forked from the fork
server, that collection also writes to every object's header, copying each page it shares with
the server). So the imports run with the collector off, and then everything they made is
frozen (`gc.freeze`: the permanent generation, which no collection walks) before it is turned
back on, as Python's documentation recommends before forking. The garbage among them is frozen
with the rest: collecting it first would cost another full walk. The figures are in
docs/benchmarks/training.md.
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
    """`importlib.import_module(name)`, paused and frozen the first time in this process only:
    later, what is alive may be an earlier command's garbage, which freezing would keep forever
    (a notebook, the test suite)."""
    if name in sys.modules:
        return importlib.import_module(name)
    with paused():
        return importlib.import_module(name)
