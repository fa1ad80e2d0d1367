"""On-disk cache of computed features: one float32 `.npy` per content key, safe for concurrent runs.

An entry is `<root>/<key>.npy` (float32 `[N, C]`) with a `<key>.json` sidecar saying what it
holds. The key is the SHA-256 of the canonical JSON of that description, so anything that
changes the features changes the key: nothing is invalidated in place (delete the folder to
reclaim the space). Files are written atomically, the `.npy` last, so its presence means the
entry is complete; runs missing the same key compute it once, under an exclusive `fcntl.flock`
on `<key>.lock` (local file systems: on NFS put the cache on local disk). float32, not float16:
the identity head evaluates the stored feature, so the zero-shot floor is the backbone's output.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from core.atomic import replaced, write_text

ENV_VAR = "CIRCLEBENCH_CACHE"


def default_cache_dir() -> Path:
    """`$CIRCLEBENCH_CACHE` if set, else `~/.cache/circlebench/features`."""
    env = os.environ.get(ENV_VAR)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "circlebench" / "features"


def content_key(description: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of `description` as canonical JSON: equal descriptions, equal keys."""
    text = json.dumps(description, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def items_digest(items: Sequence[str | int], labels: Sequence[int], cameras: Sequence[int]) -> str:
    """SHA-256 of a split: each file path with its size and mtime (ns), or each integer item.

    A file replaced or touched changes the digest, so its features are computed again.
    """
    digest = hashlib.sha256()
    for item, label, camera in zip(items, labels, cameras, strict=True):
        if isinstance(item, str):
            try:
                stat = os.stat(item)
            except FileNotFoundError as err:
                raise FileNotFoundError(
                    f"image file missing: {item}; re-extract the dataset or run "
                    "`circlebench data verify <dataset> --root DIR` to list missing files"
                ) from err
            entry: list[Any] = [item, stat.st_size, stat.st_mtime_ns]
        else:
            entry = [int(item)]
        digest.update(json.dumps([*entry, int(label), int(camera)]).encode() + b"\n")
    return digest.hexdigest()


class FeatureCache:
    """Float32 arrays `[N, C]` under `root`, one per content key (see the module docstring)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser()

    def path(self, key: str) -> Path:
        """The entry's array file; it exists only once the entry is complete."""
        return self.root / f"{key}.npy"

    def load(self, key: str) -> np.ndarray | None:
        """The stored array, or None when `key` is not cached."""
        path = self.path(key)
        try:
            return np.load(path, allow_pickle=False)
        except FileNotFoundError:
            return None
        except ValueError as err:
            raise ValueError(
                f"feature cache entry {path} is unreadable ({err}); delete it to recompute"
            ) from err

    def load_or_compute(
        self,
        key: str,
        compute: Callable[[], np.ndarray],
        description: Mapping[str, Any],
    ) -> tuple[np.ndarray, bool]:
        """`(array, computed)`: the cached array, or `compute()`'s result, stored first; `compute`
        runs at most once per key across processes sharing `root`, and stores nothing if it raises.
        """
        found = self.load(key)
        if found is not None:
            return found, False
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f"{key}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also on error
            found = self.load(key)  # written by the process that held the lock before us
            if found is not None:
                return found, False
            start = time.perf_counter()
            array = np.ascontiguousarray(compute(), dtype=np.float32)
            if array.ndim != 2:
                raise ValueError(
                    f"feature cache: expected features [N, C], got shape {array.shape}; the "
                    "extractor must return one pooled vector per image"
                )
            sidecar = {
                "key": key,
                "shape": list(array.shape),
                "dtype": "float32",
                "seconds": round(time.perf_counter() - start, 3),
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "holds": description,
            }
            text = json.dumps(sidecar, indent=1, sort_keys=True, default=str) + "\n"
            write_text(self.root / f"{key}.json", text)
            with replaced(self.path(key)) as tmp, open(tmp, "wb") as f:
                np.save(f, array, allow_pickle=False)
            return array, True
