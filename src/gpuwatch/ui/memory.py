"""Giving back what a long computation freed. glibc keeps freed memory in its arenas, and Arrow's pool
keeps its own, so serve's resident memory after a month's page stays near that page's peak, and the next
heavy page starts from there (serve's peak is then the sum of two pages' peaks, not the larger)."""

import ctypes
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import pyarrow as pa

# A computation this long read or built enough to be worth giving back (a trim takes milliseconds).
RELEASE_AFTER_SECONDS: Final = 1.0


def _malloc_trim() -> Any:
    """glibc's malloc_trim, None where the C library has none (musl)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


_TRIM: Final = _malloc_trim()


def release_freed_memory() -> None:
    """Return the memory Arrow's pool and glibc's arenas hold free to the system."""
    pa.default_memory_pool().release_unused()
    if _TRIM is not None:
        _TRIM(0)


@contextmanager
def released_after() -> Iterator[None]:
    """Run the block; if it took RELEASE_AFTER_SECONDS or more, release what it freed."""
    began = time.monotonic()
    try:
        yield
    finally:
        if time.monotonic() - began >= RELEASE_AFTER_SECONDS:
            release_freed_memory()
