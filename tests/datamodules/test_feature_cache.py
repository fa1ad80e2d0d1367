"""FeatureCache: content keys, atomic entries, one computation per key for concurrent runs."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from core.atomic import replaced
from datamodules.feature_cache import (
    ENV_VAR,
    FeatureCache,
    content_key,
    default_cache_dir,
    items_digest,
)

MODULE = Path(__file__).resolve().parents[2] / "datamodules" / "feature_cache.py"


def features(seed: int = 0, n: int = 5, c: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, c)).astype(np.float32)


def test_a_miss_computes_and_stores_a_float32_entry_with_its_sidecar(tmp_path: Path) -> None:
    cache = FeatureCache(tmp_path / "cache")
    key = content_key({"split": "query", "view": None})

    def compute() -> np.ndarray:
        assert not cache.path(key).exists()  # nobody can read the entry before it is complete
        return features().astype(np.float64)

    array, computed = cache.load_or_compute(key, compute, {"split": "query"})
    assert computed and array.dtype == np.float32
    np.testing.assert_array_equal(np.load(cache.path(key)), features())
    sidecar = json.loads(cache.path(key).with_suffix(".json").read_text())
    assert sidecar["shape"] == [5, 3] and sidecar["dtype"] == "float32"
    assert sidecar["key"] == key and sidecar["holds"] == {"split": "query"}
    assert not list(cache.root.glob("*.tmp"))


def test_entries_keep_the_umask_so_a_shared_cache_stays_readable(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        cache = FeatureCache(tmp_path / "cache")
        key = content_key({"split": "query"})
        cache.load_or_compute(key, features, {"split": "query"})
    finally:
        os.umask(previous)
    assert cache.path(key).stat().st_mode & 0o777 == 0o644
    assert cache.path(key).with_suffix(".json").stat().st_mode & 0o777 == 0o644


def test_a_hit_reads_the_entry_without_computing(tmp_path: Path) -> None:
    cache = FeatureCache(tmp_path)
    cache.load_or_compute("k", features, {})
    array, computed = cache.load_or_compute("k", lambda: pytest.fail("recomputed"), {})
    assert not computed
    np.testing.assert_array_equal(array, features())


def test_keys_follow_the_content_not_the_order_of_the_description() -> None:
    assert content_key({"a": 1, "b": [2, 3]}) == content_key({"b": [2, 3], "a": 1})
    assert content_key({"a": 1}) != content_key({"a": 2})


def test_items_digest_changes_with_labels_and_with_a_touched_file(tmp_path: Path) -> None:
    image = tmp_path / "a.jpg"
    image.write_bytes(b"pixels")
    before = items_digest([str(image), 7], [0, 1], [-1, -1])
    assert before == items_digest([str(image), 7], [0, 1], [-1, -1])
    assert before != items_digest([str(image), 7], [0, 2], [-1, -1])
    stat = image.stat()
    os.utime(image, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert before != items_digest([str(image), 7], [0, 1], [-1, -1])
    with pytest.raises(FileNotFoundError, match="image file missing"):
        items_digest([str(tmp_path / "gone.jpg")], [0], [-1])


def test_the_cache_folder_is_the_argument_else_the_env_var_else_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "circlebench" / "features"
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "env"))
    assert default_cache_dir() == tmp_path / "env"


def test_a_failing_computation_stores_nothing_and_releases_the_lock(tmp_path: Path) -> None:
    cache = FeatureCache(tmp_path)

    def broken() -> np.ndarray:
        raise RuntimeError("extractor crashed")

    with pytest.raises(RuntimeError, match="crashed"):
        cache.load_or_compute("k", broken, {})
    assert cache.load("k") is None and not list(tmp_path.glob("*.tmp"))
    assert cache.load_or_compute("k", features, {})[1]  # the next run computes it
    with pytest.raises(ValueError, match=r"expected features \[N, C\]"):
        cache.load_or_compute("flat", lambda: np.zeros(3), {})


def test_a_run_waiting_on_the_lock_reads_what_the_holder_wrote(tmp_path: Path) -> None:
    cache = FeatureCache(tmp_path)
    results: list[tuple[np.ndarray, bool]] = []
    with open(tmp_path / "k.lock", "a") as lock:  # another process is computing "k"
        fcntl.flock(lock, fcntl.LOCK_EX)
        waiter = threading.Thread(
            target=lambda: results.append(cache.load_or_compute("k", features, {}))
        )
        waiter.start()
        waiter.join(timeout=0.2)
        assert waiter.is_alive() and not results  # blocked on the lock, not computing
        with replaced(cache.path("k")) as tmp, open(tmp, "wb") as f:  # the holder's write
            np.save(f, features(seed=1))
    waiter.join(timeout=10)
    ((array, computed),) = results
    assert not computed
    np.testing.assert_array_equal(array, features(seed=1))


def test_concurrent_threads_compute_a_key_once_and_get_identical_arrays(tmp_path: Path) -> None:
    cache = FeatureCache(tmp_path)
    calls: list[int] = []
    start = threading.Barrier(4)
    results: list[np.ndarray] = []

    def compute() -> np.ndarray:
        calls.append(1)
        return features(n=200_000)  # long enough for the others to reach the lock

    def run() -> None:
        start.wait()
        results.append(cache.load_or_compute("k", compute, {})[0])

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(calls) == 1 and len(results) == 4
    for array in results:
        np.testing.assert_array_equal(array, results[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.json", "k.lock", "k.npy"]


# Loads feature_cache.py alone (stdlib + numpy), not the datamodules package: a fast start.
WRITER = """
import importlib.util, sys, numpy as np
from pathlib import Path

spec = importlib.util.spec_from_file_location("feature_cache", sys.argv[3])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
root, name = Path(sys.argv[1]), sys.argv[2]

def compute():
    (root / f"computed-by-{name}").touch()
    return np.random.default_rng(0).standard_normal((300_000, 4)).astype(np.float32)

array, computed = module.FeatureCache(root / "cache").load_or_compute("k", compute, {"who": name})
print(float(array.sum()), computed)
"""


def test_two_processes_building_one_key_compute_it_once(tmp_path: Path) -> None:
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), name, str(MODULE)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    outputs = [p.communicate(timeout=120)[0].split() for p in processes]
    assert all(p.returncode == 0 for p in processes)
    assert len(list(tmp_path.glob("computed-by-*"))) == 1
    assert outputs[0][0] == outputs[1][0]  # the same array for both
    assert sorted(o[1] for o in outputs) == ["False", "True"]
    assert not list((tmp_path / "cache").glob("*.tmp"))
