"""Importing this module, the fork server's last preload, freezes what the server holds and
restarts automatic garbage collection (paused by `fork_start`, the first).

`gc.freeze()` moves every object alive now (some 660,000 after the training stack's imports)
into the collector's permanent generation, which no collection walks. Without it, the first
full collection of every forked cell walked all of them, 0.36 s on the 2-core Zen 4, and wrote
to each one's header, copying the pages it shared with the server (`benchmark.collector`).
It starts no thread, which keeps the server safe to fork.
"""

from benchmark.collector import freeze_and_resume

freeze_and_resume()
