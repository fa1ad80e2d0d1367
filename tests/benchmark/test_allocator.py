"""glibc's thresholds raised once, and nothing asked of other C libraries."""

from __future__ import annotations

import platform

import pytest

from benchmark import allocator


def test_glibc_takes_both_thresholds_once(monkeypatch) -> None:
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc only: elsewhere retain_freed_memory asks nothing (tested below)")
    allocator.retain_freed_memory.cache_clear()
    calls: list[tuple[int, int]] = []

    class Libc:
        def mallopt(self, param: int, value: int) -> int:
            calls.append((param, value))
            return 1

    monkeypatch.setattr(allocator.ctypes, "CDLL", lambda name: Libc())
    assert allocator.retain_freed_memory() and allocator.retain_freed_memory()
    assert calls == [(-3, allocator.MMAP_THRESHOLD), (-1, allocator.TRIM_THRESHOLD)]
    allocator.retain_freed_memory.cache_clear()
    assert allocator.retain_freed_memory()  # the real glibc accepts them


def test_other_c_libraries_are_left_alone(monkeypatch) -> None:
    allocator.retain_freed_memory.cache_clear()
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("", ""))
    monkeypatch.setattr(allocator.ctypes, "CDLL", lambda name: pytest.fail("loaded a libc"))
    assert allocator.retain_freed_memory() is False
    allocator.retain_freed_memory.cache_clear()
