"""The fork server's one preload, imported by it before any fork: `fork_server.SERVER_IMPORTS`
with the garbage collector paused, then frozen; a module not installed is skipped. It starts
no thread, which keeps the server safe to fork."""

import contextlib
import importlib

from benchmark.launch.fork_server import SERVER_IMPORTS
from benchmark.launch.frozen import paused

with paused():
    for name in SERVER_IMPORTS:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
