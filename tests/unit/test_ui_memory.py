"""Serve gives back what a long computation freed, so the next heavy page does not start from the last
one's peak."""

import gc
from collections.abc import Iterator

import pytest

from gpuwatch.ui import memory


def _rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * 4096


def test_memory_freed_between_objects_still_held_is_given_back() -> None:
    # 300 MB of 4 kB strings, every 16th kept: what is freed lies between what is not, so glibc cannot
    # shrink its heap by itself, and keeps it.
    made = [bytes(4000) + i.to_bytes(8, "little") for i in range(75_000)]
    kept = made[::16]
    del made
    gc.collect()
    before = _rss_bytes()
    memory.release_freed_memory()
    after = _rss_bytes()
    assert before - after > 100 << 20, (before, after)
    assert len(kept) == 4688


@pytest.fixture
def released(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    calls: list[int] = []
    monkeypatch.setattr(memory, "release_freed_memory", lambda: calls.append(1))
    yield calls


def test_only_a_long_computation_releases(released: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([100.0, 100.2, 200.0, 201.5])
    monkeypatch.setattr(memory.time, "monotonic", lambda: next(clock))
    with memory.released_after():
        pass  # 0.2 s
    assert released == []
    with pytest.raises(ValueError), memory.released_after():
        raise ValueError("a failed computation frees what it read too")  # 1.5 s
    assert released == [1]
