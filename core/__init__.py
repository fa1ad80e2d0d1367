"""The bottom layer: what the machine and the process run on, and the retrieval protocols.

Every package of the project may import it; it imports nothing of theirs, and nothing heavier
than torch at import (numba only when `core.threads` is imported).
"""
