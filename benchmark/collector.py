"""Python's garbage collector around the training stack's imports: paused, then frozen.

Importing torch, Lightning, W&B and the rest makes about 650,000 objects that live as long as
the process. The collector walked them all eight times while they were imported (1.9 s of the
6.2 s the fork server's imports took on the 2-core Zen 4), and once more in the first full
collection after them (0.3 s; in a cell forked from the server it also wrote to every object's
header, copying each page they sit on). So the imports run with the collector off, and then
everything they made is frozen (`gc.freeze`: the permanent generation, which no collection
walks) before it is turned back on, as Python's documentation recommends before forking. The
garbage among them (13,760 objects after those imports) is frozen with the rest: collecting
it first would cost another 0.46 s.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
from collections.abc import Iterator
from types import ModuleType


def pause() -> None:
    """Stop automatic collections (until `freeze_and_resume`)."""
    gc.disable()


def freeze_and_resume() -> None:
    """Freeze every object alive now, then restart automatic collections."""
    gc.freeze()
    gc.enable()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The block without automatic collections; what it leaves alive is frozen after it."""
    pause()
    try:
        yield
    finally:
        freeze_and_resume()


def import_frozen(name: str) -> ModuleType:
    """`importlib.import_module(name)`, paused and frozen the first time in this process only:
    later, what is alive may be an earlier command's garbage, which freezing would keep forever
    (a notebook, the test suite)."""
    if name in sys.modules:
        return importlib.import_module(name)
    with paused():
        return importlib.import_module(name)
