"""Atomic file writes: a reader never sees a half-written file and a crash never truncates one.

Every results file (rows, `similarities.npz`, the leaderboard's CSV, markdown and
fingerprint) and every feature cache entry is written through `replaced`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def replaced(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path` to write; on success it atomically replaces `path`.

    The temporary file is created with `open` (not `mkstemp`), so the result keeps the user's
    umask; on an exception it is removed and `path` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        yield tmp
        with open(tmp, "rb+") as f:  # the data reaches the disk before the name does
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` atomically (see `replaced`)."""
    with replaced(path) as tmp:
        tmp.write_text(text)
