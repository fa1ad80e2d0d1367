"""The bottom layer: what the machine and the process run on, the retrieval protocols and
atomic file writes.

Every package of the project may import it; it imports nothing of theirs, and nothing heavier
than torch at import (numba only when `core.threads` is imported).
"""
