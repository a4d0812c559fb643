"""The cluster, and Kueue's objects, kept current by watches (the informer pattern): each kind is listed
once, then followed.

Each kind (nodes, pods, namespaces, resourcequotas) has a thread that lists it, then watches from the
list's resourceVersion with bookmarks; a watch the server ends is resumed from the last version seen
(a cut connection too, after a pause); a 410 Expired lists again. At steady state a cycle reads the
cache and sends no request; memory holds the running and pending GPU pods (and dcgm-exporter pods),
not every pod of the cluster, each parsed once, when it is listed or changes.
"""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Generic, TypeVar

from gpuwatch.core.errors import KubernetesError
from gpuwatch.core.model import KueueState
from gpuwatch.sources.kubernetes import (
    ClusterState,
    JsonObject,
    KubernetesSource,
    running_pod_entry,
    state_from_parsed,
)
from gpuwatch.sources.kueue import (
    KUEUE_GROUP,
    KUEUE_RBAC,
    KUEUE_RESOURCES,
    ParsedObject,
    kueue_path,
    kueue_served,
    parse_object,
)
from gpuwatch.sources.kueue import state_from_parsed as kueue_from_parsed

KINDS: Final = ("nodes", "pods", "namespaces", "resourcequotas")
WATCH_TIMEOUT_SECONDS: Final = 300  # the server ends a watch after this; it is then resumed
# A healthy API server answers a list page or opens a watch in well under this; a request of the watchers
# unanswered this long means it has stopped answering, and the cache is no longer the cluster.
SILENT_SECONDS: Final = 10.0
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

    def __init__(
        self, source: KubernetesSource, kind: str, read: Callable[[JsonObject], T | None], *, needs: str = ""
    ) -> None:
        self.source = source
        self.kind = kind
        self.read = read
        self.needs = needs  # the RBAC a 403 names (KubernetesSource.list_versioned)
        self.objects: dict[tuple[str, str], T] = {}
        self.version: str | None = None
        self.stats = WatchStats()
        self.error = ""
        self.failing_since: float | None = None  # monotonic time of the first failure since it last worked
        self.synced = threading.Event()  # listed once
        self.tried = threading.Event()  # listed once, or a list failed
        self.lock = threading.Lock()

    def run(self, stop: threading.Event, *, timeout_seconds: int, retry_seconds: float) -> None:
        while not stop.is_set():
            try:
                if self.version is None:
                    self._list()
                self._follow(stop, timeout_seconds)
            except KubernetesError as e:
                self.error = str(e)
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                self.stats.cut += 1
                self.tried.set()
                stop.wait(retry_seconds)

    def start(self, stop: threading.Event, *, timeout_seconds: int, retry_seconds: float) -> threading.Thread:
        """run() in a daemon thread of its own, until `stop` is set."""
        thread = threading.Thread(
            target=self.run,
            args=(stop,),
            kwargs={"timeout_seconds": timeout_seconds, "retry_seconds": retry_seconds},
            name=f"gpuwatch-watch-{self.kind.rsplit('/', 1)[-1]}",
            daemon=True,
        )
        thread.start()
        return thread

    def _list(self) -> None:
        items, version, _restarts = self.source.list_versioned(self.kind, needs=self.needs)
        self.stats.lists += 1
        read = ((_key(obj), self.read(obj)) for obj in items)
        kept = {key: value for key, value in read if value is not None}
        with self.lock:
            self.objects, self.version = kept, version
        self.error, self.failing_since = "", None
        self.synced.set()
        self.tried.set()

    def _follow(self, stop: threading.Event, timeout_seconds: int) -> None:
        assert self.version is not None
        self.stats.watches += 1

        def opened() -> None:
            self.error, self.failing_since = "", None

        for event in self.source.watch_raw(
            self.kind,
            resource_version=self.version,
            timeout_seconds=timeout_seconds,
            needs=self.needs,
            opened=opened,
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
        silent_seconds: float = SILENT_SECONDS,
    ) -> None:
        self.source = source
        self.timeout_seconds = timeout_seconds
        self.retry_seconds = retry_seconds
        self.sync_seconds = sync_seconds
        self.silent_seconds = silent_seconds
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
                    self._threads.append(
                        watched.start(
                            self._stop, timeout_seconds=self.timeout_seconds, retry_seconds=self.retry_seconds
                        )
                    )
        return self

    def stop(self) -> None:
        """Ask the watchers to end (each ends at its watch's next event, bookmark or timeout)."""
        self._stop.set()

    def cluster_state(self) -> ClusterState:
        """The cluster as the watches last saw it. A KubernetesError while a kind was never listed (its
        first list failed, or got no answer within the source's deadline), and while the API server is
        not answering now: a list or watch unanswered for silent_seconds, or failing as long (the cache
        would be as old as the outage, and nothing in it says so)."""
        self.start()
        for watched in self._kinds.values():
            if not watched.tried.wait(self.sync_seconds) and not watched.synced.is_set():
                server, waited = self.source.server, self.sync_seconds
                raise KubernetesError(f"kubernetes API at {server} unreachable: no answer within {waited:g}s")
            if not watched.synced.is_set():
                raise KubernetesError(watched.error)
        silent = self.source.reads.waiting()
        if silent is not None and silent.seconds >= self.silent_seconds:
            raise KubernetesError(
                f"kubernetes API at {self.source.server} unreachable: no answer within {silent.seconds:.0f}s"
            )
        # A watch cut once is resumed within retry_seconds; one failing as long as silent_seconds is down.
        now = time.monotonic()
        failing = [w.error for w in self._kinds.values() if _failing_for(w, now) >= self.silent_seconds]
        if failing:
            raise KubernetesError(failing[0])
        k = self._others
        return state_from_parsed(
            k["nodes"].items(), self._pods.items(), k["namespaces"].items(), k["resourcequotas"].items()
        )

    def stats(self) -> dict[str, WatchStats]:
        return {k: WatchStats(**vars(w.stats)) for k, w in self._kinds.items()}


def _failing_for(watched: "_Watched[Any]", now: float) -> float:
    """How long the kind's watcher has failed without a list or watch working since (0: it works)."""
    since = watched.failing_since
    return 0.0 if since is None or not watched.error else now - since


def _key(obj: JsonObject) -> tuple[str, str]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _slim(obj: JsonObject) -> JsonObject:
    """The object without what gpuwatch never reads and real servers send in bulk (managedFields)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


class KueueCache:
    """kueue_state() from watched Kueue objects (the informer pattern, as ClusterCache): the version the
    server serves found once, each collection listed once and then followed, each object parsed when it
    is listed or changes. Without Kueue the server is asked again after `probe_seconds` (it may be
    installed later); a collection it does not serve (Cohorts before Kueue 0.13) is none."""

    def __init__(
        self,
        source: KubernetesSource,
        *,
        timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
        retry_seconds: float = 10.0,
        sync_seconds: float = 120.0,
        probe_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.timeout_seconds = timeout_seconds
        self.retry_seconds = retry_seconds
        self.sync_seconds = sync_seconds
        self.probe_seconds = probe_seconds
        self._clock = clock
        self._version = ""
        self._kinds: dict[str, _Watched[ParsedObject]] = {}
        self._absent_at: float | None = None  # when the server last said it serves no Kueue
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def kueue_state(self) -> KueueState:
        """Kueue's objects as the watches last saw them; KueueState(installed=False) without Kueue; a
        KubernetesError while a collection cannot be listed (a 403 names the RBAC needed)."""
        with self._lock:
            if not self._kinds and not self._probe():
                return KueueState(installed=False)
            kinds = dict(self._kinds)
        for watched in kinds.values():
            if not watched.tried.wait(self.sync_seconds):
                raise KubernetesError(f"kubernetes: listing {watched.kind} timed out")
            if not watched.synced.is_set():
                raise KubernetesError(watched.error)
        parsed = {plural: watched.items() for plural, watched in kinds.items()}
        return kueue_from_parsed(parsed, version=self._version)

    def _probe(self) -> bool:
        """Whether Kueue is served (its watches started if so). Found absent, the server is asked again
        after probe_seconds; a failure (a 403) is a KubernetesError, and it is asked again next time."""
        now = self._clock()
        if self._absent_at is not None and now - self._absent_at < self.probe_seconds:
            return False
        served = kueue_served(self.source)
        if served is None:
            self._absent_at = now
            return False
        version = served[0]
        cohorts = self.source.list_custom(KUEUE_GROUP, version, "cohorts", needs=KUEUE_RBAC)
        self._version = version
        for plural in KUEUE_RESOURCES:
            if plural == "cohorts" and cohorts is None:
                continue  # not served: no Cohort objects
            path, parse = kueue_path(version, plural), partial(parse_object, plural)
            watched = _Watched(self.source, path, parse, needs=KUEUE_RBAC)
            watched.start(self._stop, timeout_seconds=self.timeout_seconds, retry_seconds=self.retry_seconds)
            self._kinds[plural] = watched
        return True

    def stop(self) -> None:
        """Ask the watchers to end (each ends at its watch's next event, bookmark or timeout)."""
        self._stop.set()

    def stats(self) -> dict[str, WatchStats]:
        return {k: WatchStats(**vars(w.stats)) for k, w in self._kinds.items()}
