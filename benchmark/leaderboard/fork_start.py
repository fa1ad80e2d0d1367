"""Importing this module, the fork server's first preload, stops automatic garbage collection
for the imports after it; `fork_ready`, the last, freezes what they made and restarts it
(`benchmark.collector`: the server's imports take 4.2 s instead of 6.2 s on the 2-core Zen 4).
"""

from benchmark.collector import pause

pause()
