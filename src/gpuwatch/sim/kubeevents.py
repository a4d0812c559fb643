"""Watch for the simulated API server: resourceVersions, the event log a watch replays, and its stream.

As the real server does: every write moves the resourceVersion on; a watch from a version streams the
events after it (ADDED, MODIFIED, DELETED as JSON lines), with BOOKMARK events when asked, until its
timeout; a version older than the log keeps answers a single ERROR event with code 410 (Expired); a
watch without a version (or "0") first sends the current objects as ADDED.
"""

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gpuwatch.sim.kubeobjects import JsonObject, status_object

Predicate = Callable[[JsonObject], bool]


@dataclass(frozen=True, slots=True)
class Event:
    version: int
    resource: str
    type: str  # ADDED, MODIFIED, DELETED
    obj: JsonObject


class ChangeLog:
    """The server's resourceVersion and its last `capacity` events; older versions are compacted."""

    def __init__(self, base: int, *, capacity: int = 10_000) -> None:
        self._version = base
        self._compacted = base
        self._events: deque[Event] = deque(maxlen=capacity)
        self._changed = threading.Condition()
        self._closed = False

    @property
    def version(self) -> int:
        with self._changed:
            return self._version

    @property
    def compacted(self) -> int:
        """Watches from a version below this one answer 410."""
        with self._changed:
            return self._compacted

    def record(self, resource: str, kind: str, obj: JsonObject) -> JsonObject:
        """A write: the object at a new resourceVersion, kept for watches (kind: ADDED, MODIFIED, DELETED)."""
        with self._changed:
            self._version += 1
            stamped = {
                **obj,
                "metadata": {**(obj.get("metadata") or {}), "resourceVersion": str(self._version)},
            }
            if len(self._events) == self._events.maxlen:
                self._compacted = self._events[0].version
            self._events.append(Event(self._version, resource, kind, stamped))
            self._changed.notify_all()
            return stamped

    def compact(self) -> None:
        """Forget every event so far (as etcd compaction does): older versions answer 410."""
        with self._changed:
            self._version += 1
            self._compacted = self._version
            self._events.clear()
            self._changed.notify_all()

    def close(self) -> None:
        """End every watch."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def after(self, resource: str, version: int) -> tuple[list[Event], int] | None:
        """The resource's events after `version` and the version they bring a watch to; None when
        `version` was compacted."""
        with self._changed:
            if version < self._compacted:
                return None
            return [e for e in self._events if e.version > version and e.resource == resource], self._version

    def wait(self, version: int, timeout: float) -> bool:
        """Wait until the version moves past `version` (or the log closes); False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self._closed or self._version > version, timeout)

    @property
    def closed(self) -> bool:
        with self._changed:
            return self._closed


def watch_lines(
    log: ChangeLog,
    *,
    resource: str,
    kind: str,
    since: str,
    initial: Callable[[], list[JsonObject]],
    matches: Predicate,
    bookmarks: bool,
    timeout_seconds: float,
    bookmark_seconds: float,
    clock: Callable[[], float] = time.monotonic,
    render: Callable[[JsonObject], JsonObject] = lambda obj: obj,
    api_version: str = "v1",
) -> Iterator[bytes]:
    """The watch stream, one JSON event per line, until `timeout_seconds` or the log closes; each changed
    object as `render` serves it (the version asked for), bookmarks of `api_version`."""
    deadline = clock() + timeout_seconds
    if since in ("", "0"):
        version = log.version
        for obj in initial():
            yield _line("ADDED", obj)
    else:
        try:
            version = int(since)
        except ValueError:
            yield _line("ERROR", status_object(400, "BadRequest", f"invalid resourceVersion {since!r}"))
            return
    next_bookmark = clock() + bookmark_seconds
    while not log.closed and clock() < deadline:
        found = log.after(resource, version)
        if found is None:
            message = f"too old resource version: {version} ({log.compacted})"
            yield _line("ERROR", status_object(410, "Expired", message))
            return
        events, version = found
        for event in events:
            if matches(event.obj):
                yield _line(event.type, render(event.obj))
        if bookmarks and clock() >= next_bookmark:
            meta = {"resourceVersion": str(version)}
            yield _line("BOOKMARK", {"kind": kind, "apiVersion": api_version, "metadata": meta})
            next_bookmark = clock() + bookmark_seconds
        until = min(deadline, next_bookmark) if bookmarks else deadline
        log.wait(version, max(0.0, until - clock()))


def _line(kind: str, obj: JsonObject) -> bytes:
    return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"
