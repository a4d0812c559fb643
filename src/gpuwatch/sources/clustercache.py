"""The cluster kept current by watches (the informer pattern): each kind is listed once, then followed.

Each kind (nodes, pods, namespaces, resourcequotas) has a thread that lists it, then watches from the
list's resourceVersion with bookmarks; a watch the server ends is resumed from the last version seen
(a cut connection too, after a pause); a 410 Expired lists again. At steady state a cycle reads the
cache and sends no request; memory holds the running and pending GPU pods (and dcgm-exporter pods),
not every pod of the cluster, each parsed once, when it is listed or changes.
"""

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from gpuwatch.errors import KubernetesError
from gpuwatch.sources.kubernetes import (
    ClusterState,
    JsonObject,
    KubernetesSource,
    running_pod_entry,
    state_from_parsed,
)

KINDS: Final = ("nodes", "pods", "namespaces", "resourcequotas")
WATCH_TIMEOUT_SECONDS: Final = 300  # the server ends a watch after this; it is then resumed
T = TypeVar("T")


@dataclass
class WatchStats:
    """Requests one kind's watcher has sent: lists (the first and each after a 410) and watches."""

    lists: int = 0
    watches: int = 0
    expired: int = 0  # watches answered 410 (then listed again)
    cut: int = 0  # watches or lists that failed (then resumed after retry_seconds)


class _Watched(Generic[T]):
    """One kind: its objects by (namespace, name) as `read` makes them (None: not kept), the version they
    are at, and its thread."""

    def __init__(self, source: KubernetesSource, kind: str, read: Callable[[JsonObject], T | None]) -> None:
        self.source = source
        self.kind = kind
        self.read = read
        self.objects: dict[tuple[str, str], T] = {}
        self.version: str | None = None
        self.stats = WatchStats()
        self.error = ""
        self.synced = threading.Event()
        self.lock = threading.Lock()

    def run(self, stop: threading.Event, *, timeout_seconds: int, retry_seconds: float) -> None:
        while not stop.is_set():
            try:
                if self.version is None:
                    self._list()
                self._follow(stop, timeout_seconds)
            except KubernetesError as e:
                self.error = str(e)
                self.stats.cut += 1
                stop.wait(retry_seconds)

    def _list(self) -> None:
        items, version, _restarts = self.source.list_versioned(self.kind)
        self.stats.lists += 1
        read = ((_key(obj), self.read(obj)) for obj in items)
        kept = {key: value for key, value in read if value is not None}
        with self.lock:
            self.objects, self.version = kept, version
        self.error = ""
        self.synced.set()

    def _follow(self, stop: threading.Event, timeout_seconds: int) -> None:
        assert self.version is not None
        self.stats.watches += 1
        for event in self.source.watch_raw(
            self.kind, resource_version=self.version, timeout_seconds=timeout_seconds
        ):
            if stop.is_set():
                return
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    self.stats.expired += 1
                    self.version = None  # compacted: list again
                    return
                raise KubernetesError(
                    f"kubernetes: the watch of {self.kind} failed: {obj.get('message', obj)}"
                )
            version = (obj.get("metadata") or {}).get("resourceVersion")
            value = self.read(obj) if kind in ("ADDED", "MODIFIED") else None
            with self.lock:
                if kind in ("ADDED", "MODIFIED"):
                    if value is not None:
                        self.objects[_key(obj)] = value
                    else:
                        self.objects.pop(_key(obj), None)
                elif kind == "DELETED":
                    self.objects.pop(_key(obj), None)
                if version:
                    self.version = str(version)
        self.error = ""

    def items(self) -> list[T]:
        with self.lock:
            return list(self.objects.values())


class ClusterCache:
    """cluster_state() from watched caches instead of a full list per call."""

    def __init__(
        self,
        source: KubernetesSource,
        *,
        timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
        retry_seconds: float = 1.0,
        sync_seconds: float = 120.0,
    ) -> None:
        self.source = source
        self.timeout_seconds = timeout_seconds
        self.retry_seconds = retry_seconds
        self.sync_seconds = sync_seconds
        self._pods = _Watched(source, "pods", running_pod_entry)
        self._others = {k: _Watched(source, k, _slim) for k in KINDS if k != "pods"}
        self._kinds: dict[str, _Watched[Any]] = {"pods": self._pods, **self._others}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._start_lock = threading.Lock()

    def start(self) -> "ClusterCache":
        with self._start_lock:
            if not self._threads:
                for watched in self._kinds.values():
                    thread = threading.Thread(
                        target=watched.run,
                        args=(self._stop,),
                        kwargs={"timeout_seconds": self.timeout_seconds, "retry_seconds": self.retry_seconds},
                        name=f"gpuwatch-watch-{watched.kind}",
                        daemon=True,
                    )
                    thread.start()
                    self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Ask the watchers to end (each ends at its watch's next event, bookmark or timeout)."""
        self._stop.set()

    def cluster_state(self) -> ClusterState:
        """The cluster as the watches last saw it; a KubernetesError while a kind was never listed."""
        self.start()
        for watched in self._kinds.values():
            if not watched.synced.wait(self.sync_seconds):
                raise KubernetesError(watched.error or f"kubernetes: listing {watched.kind} timed out")
        k = self._others
        return state_from_parsed(
            k["nodes"].items(), self._pods.items(), k["namespaces"].items(), k["resourcequotas"].items()
        )

    def stats(self) -> dict[str, WatchStats]:
        return {k: WatchStats(**vars(w.stats)) for k, w in self._kinds.items()}


def _key(obj: JsonObject) -> tuple[str, str]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _slim(obj: JsonObject) -> JsonObject:
    """The object without what gpuwatch never reads and real servers send in bulk (managedFields)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj
