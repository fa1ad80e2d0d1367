"""The fork server's one preload: `fork_server.SERVER_IMPORTS`, imported with the garbage
collector paused, then frozen (`frozen.paused`), so that no forked run's collector walks what
the server holds.

Importing this module does the work; multiprocessing's fork server imports it before forking
anything. As the server does with its preloads, a module that is not installed is skipped. The
block starts no thread, which keeps the server safe to fork.
"""

import contextlib
import importlib

from benchmark.launch.fork_server import SERVER_IMPORTS
from benchmark.launch.frozen import paused

with paused():
    for name in SERVER_IMPORTS:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
