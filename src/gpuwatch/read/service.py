"""FleetService: a fleet's sources (live or simulated) and the analysis of their windows, with a small
cache per window."""

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Protocol

import numpy as np
import pandas as pd

from gpuwatch.analytics.queuetables import QueueSetup, QueueTables, no_queues, queue_setup
from gpuwatch.core.config import ClusterSettings, Settings
from gpuwatch.core.errors import ConfigError, KubernetesError, PrometheusError
from gpuwatch.core.model import KueueState, SourceWait, Window, cluster_of, qualified
from gpuwatch.core.schema import GPU_SAMPLES
from gpuwatch.read.analysis import Analysis, analysis_queues, analyze
from gpuwatch.sources import promql
from gpuwatch.sources.clustercache import ClusterCache, KueueCache
from gpuwatch.sources.dcgm import DEV_FB_USED, DEV_POWER_USAGE, DEV_TOTAL_ENERGY_CONSUMPTION, ExporterPods
from gpuwatch.sources.historystore import ClustersHistory, HistoryStore, PrometheusHistory, qualified_rows
from gpuwatch.sources.kubernetes import ClusterState, KubernetesSource
from gpuwatch.sources.kueue import kueue_state as kueue_state
from gpuwatch.sources.kueue import merge_kueue_states
from gpuwatch.sources.prometheus import PrometheusSource, allocation_history

QUEUE_READ_SECONDS = 60.0  # Kueue's queues are made again after this long (from the watches, or listed)


class Closable(Protocol):
    @property
    def url(self) -> str: ...

    def close(self) -> None: ...


class FleetSources(Protocol):
    """Where a FleetService reads the cluster and DCGM history: the live sources or the simulated fleet."""

    @property
    def simulated(self) -> bool:
        """Whether these are a simulated fleet's (gpuwatch.sim), which keeps no Prometheus history."""
        ...

    def cluster_state(self) -> ClusterState: ...

    def node_state(self, *, namespaces: bool = False) -> ClusterState:
        """The nodes, and the namespaces when asked (no pod need be listed)."""
        ...

    def kueue_state(self) -> KueueState:
        """Kueue's objects (KueueState(installed=False) without Kueue); KubernetesError when unreadable."""
        ...

    def gpu_samples(self, window: Window, state: ClusterState) -> pd.DataFrame: ...

    def allocation_history(self, window: Window) -> pd.DataFrame | None: ...

    def take_warnings(self) -> list[str]: ...

    def now(self) -> datetime: ...

    def history_start(self) -> datetime | None: ...

    def waiting(self) -> list[SourceWait]:
        """The reads of outside systems under way now, oldest first per source (none when simulated)."""
        ...

    def load(self) -> None:
        """Read the local configuration the sources need (kubeconfig, token files): a ConfigError naming
        what is missing or invalid, before any network wait."""
        ...

    def probe(self) -> None:
        """Ask each source one cheap question (whether it answers now): the SourceError of one that does
        not. A cycle whose window was computed already still learns whether its sources answer."""
        ...

    def recorded(self) -> HistoryStore | None:
        """Where gpuwatch's own gpuwatch_* history can be read (None: nowhere, the raw path only)."""
        ...


class LiveSources:
    """Prometheus (DCGM and gpuwatch's own history) and the Kubernetes API server."""

    simulated = False

    def __init__(
        self,
        settings: Settings,
        *,
        cluster: ClusterSettings | None = None,
        clock: Callable[[], datetime] | None = None,
        watch_cluster: bool = False,
        field_seconds: float | None = None,
    ) -> None:
        """cluster: one cluster of the `clusters:` list (its API server, its store, the matchers that select
        its series there); None: the cluster the top-level settings name. field_seconds: read the
        framebuffer, energy and power only over a window's last this many seconds (the exporter publishes
        its last sample alone: reading them over its whole idle window would cost three more fields at
        every GPU-sample); None: over the whole window."""
        self.field_seconds = field_seconds
        self.name = cluster.name if cluster is not None else settings.cluster_name
        prometheus, kubernetes = (
            (cluster.prometheus, cluster.kubernetes)
            if cluster
            else (settings.prometheus, settings.kubernetes)
        )
        self.matchers = [
            promql.equals(k, v) for k, v in sorted((cluster.matchers if cluster else {}).items())
        ]
        self.prometheus = PrometheusSource.from_settings(prometheus)
        # gpuwatch_* history: a cluster told apart from others in a shared store by matchers reads its own.
        self.history = PrometheusHistory(self.prometheus.scoped(self.matchers))
        self.kubernetes = KubernetesSource(
            kubeconfig=kubernetes.kubeconfig,
            context=kubernetes.context,
            timeout_seconds=kubernetes.timeout_seconds,
        )
        # Long-running processes (export, serve) follow the cluster by watches: no list per cycle.
        self.cluster = ClusterCache(self.kubernetes) if watch_cluster else None
        self.kueue = KueueCache(self.kubernetes) if watch_cluster else None
        self._clock = clock or (lambda: datetime.now(UTC))
        for reads in (self.prometheus.reads, self.kubernetes.reads):
            reads.cluster = self.name if len(settings.clusters) > 1 else ""

    def waiting(self) -> list[SourceWait]:
        waits = (self.prometheus.reads.waiting(), self.kubernetes.reads.waiting())
        return [w for w in waits if w is not None]

    def load(self) -> None:
        self.prometheus.load()
        self.kubernetes.load()

    def probe(self) -> None:
        self.node_state()  # from the watches when they follow the cluster: they raise when it is silent
        self.prometheus.instant_points(promql.liveness_query())

    def cluster_state(self) -> ClusterState:
        state = self.cluster.cluster_state() if self.cluster is not None else self.kubernetes.cluster_state()
        return replace(state, cluster=self.name)

    def node_state(self, *, namespaces: bool = False) -> ClusterState:
        """The nodes, and the namespaces when asked (from the watches, or listed alone: no pod is listed)."""
        if self.cluster is not None:
            return replace(self.cluster.cluster_state(), cluster=self.name)
        return replace(self.kubernetes.node_state(namespaces=namespaces), cluster=self.name)

    def kueue_state(self) -> KueueState:
        if self.kueue is not None:
            return self.kueue.kueue_state()
        return kueue_state(self.kubernetes)

    def gpu_samples(self, window: Window, state: ClusterState) -> pd.DataFrame:
        exporters = ExporterPods(node_by_pod=state.exporter_pod_nodes, node_by_ip=state.exporter_ip_nodes)
        # The framebuffer tells held idle GPUs (a model in memory) from abandoned ones; the energy counter
        # (power where a GPU has none) measures their energy (SPEC §3).
        fields = (DEV_FB_USED, DEV_TOTAL_ENERGY_CONSUMPTION, DEV_POWER_USAGE)
        whole = self.field_seconds is None or self.field_seconds >= window.duration_seconds
        recent = (
            0 if whole else window.n_samples - math.ceil(float(self.field_seconds or 0) / window.step_seconds)
        )
        read = partial(self.prometheus.gpu_samples, exporters=exporters, matchers=self.matchers)
        if recent <= 0:
            samples = read(window, fields=fields)
        else:
            samples = read(window)
            tail = replace(window, start=window.sample_time(recent))
            extra = read(tail, fields=fields)
            units = ["timestamp", "uuid", "gpu_instance_id"]
            columns = [f.column for f in fields if f.column in extra]
            extra = extra.drop_duplicates(units)[[*units, *columns]].astype(dict.fromkeys(units[1:], "str"))
            keys = samples[units].astype(dict.fromkeys(units[1:], "str"))
            found = keys.merge(extra, on=units, how="left")
            samples = samples.assign(**{c: found[c].to_numpy() for c in columns})
        # A field no GPU reports is unknown for every GPU (NaN), not a field never asked for.
        return samples.assign(**{f.column: np.nan for f in fields if f.column not in samples})

    def allocation_history(self, window: Window) -> pd.DataFrame | None:
        return allocation_history(self.prometheus, window, self.matchers)

    def take_warnings(self) -> list[str]:
        return self.prometheus.take_warnings()

    def now(self) -> datetime:
        return self._clock()

    def history_start(self) -> datetime | None:
        return None  # Prometheus' retention decides; coverage says what is missing

    def recorded(self) -> HistoryStore | None:
        return self.history


class MultiClusterSources:
    """Several clusters as one fleet, behind the same interface: each cluster is read from its own API
    server and its own series (its LiveSources), and its nodes and pods join the fleet under qualified
    names ("eu-1/gpu-h100-000"). A cluster whose API server cannot be read is named in the state's
    `unreachable`, with a warning, and left out; the others answer as before."""

    @property
    def simulated(self) -> bool:
        return all(m.simulated for m in self.members.values())

    def __init__(self, members: Mapping[str, FleetSources]) -> None:
        if len(members) < 2:
            raise ConfigError("a fleet of several clusters needs at least two")
        self.members = dict(members)
        self._lock = threading.Lock()
        self._warnings: list[str] = []

    def cluster_state(self) -> ClusterState:
        return self._merged(lambda m: m.cluster_state())

    def node_state(self, *, namespaces: bool = False) -> ClusterState:
        return self._merged(lambda m: m.node_state(namespaces=namespaces))

    def kueue_state(self) -> KueueState:
        """Each cluster's Kueue objects under names qualified by it (its queues, cohorts and flavors are its
        own, merge_kueue_states). A cluster whose Kueue cannot be read is left out, named in a warning; a
        KubernetesError naming those clusters only when no cluster with Kueue was read."""
        states: dict[str, KueueState] = {}
        unread: dict[str, str] = {}
        for name, member in self.members.items():
            try:
                states[name] = member.kueue_state()
            except KubernetesError as e:
                unread[name] = str(e)
        if unread and not any(s.installed for s in states.values()):
            raise KubernetesError("; ".join(f"cluster {c}: {why}" for c, why in unread.items()))
        return merge_kueue_states(states, unread)

    def gpu_samples(self, window: Window, state: ClusterState) -> pd.DataFrame:
        """Each cluster's samples from its own store; one whose store fails adds none (its GPU-hours are
        then unknown, and a warning says why) unless every cluster's fails."""
        parts, failed = [], []
        for name, member in self.members.items():
            if name in state.unreachable:
                continue
            try:
                parts.append(qualified_rows(member.gpu_samples(window, member_state(state, name)), name))
            except PrometheusError as e:
                failed.append(e)
                with self._lock:
                    self._warnings.append(
                        f"cluster {name}: telemetry not read ({e}); its GPU-hours are unknown"
                    )
        if not parts and failed:
            raise failed[0]
        return concat_rows(parts) if parts else GPU_SAMPLES.empty()  # no cluster read: no sample

    def allocation_history(self, window: Window) -> pd.DataFrame | None:
        """Each cluster's own allocation series; one whose store fails adds none (a warning says so)."""
        parts = []
        for name, member in self.members.items():
            try:
                history = member.allocation_history(window)
            except PrometheusError as e:
                with self._lock:
                    self._warnings.append(f"cluster {name}: allocation history not read ({e})")
                continue
            if history is not None:
                parts.append(qualified_rows(history, name))
        return concat_rows(parts) if parts else None

    def take_warnings(self) -> list[str]:
        with self._lock:
            own, self._warnings = self._warnings, []
        return [
            *own,
            *(f"cluster {name}: {w}" for name, m in self.members.items() for w in m.take_warnings()),
        ]

    def now(self) -> datetime:
        return next(iter(self.members.values())).now()

    def history_start(self) -> datetime | None:
        return None

    def waiting(self) -> list[SourceWait]:
        return [w for member in self.members.values() for w in member.waiting()]

    def load(self) -> None:
        for member in self.members.values():
            member.load()

    def probe(self) -> None:
        for member in self.members.values():
            member.probe()

    def recorded(self) -> HistoryStore | None:
        """Each cluster's history from its own store, as one fleet's (None when a cluster keeps none)."""
        stores = {name: member.recorded() for name, member in self.members.items()}
        kept = {name: store for name, store in stores.items() if store is not None}
        return ClustersHistory(kept) if len(kept) == len(stores) else None

    def _merged(self, read: Callable[[FleetSources], ClusterState]) -> ClusterState:
        states: dict[str, ClusterState] = {}
        unreachable: dict[str, str] = {}
        for name, member in self.members.items():
            try:
                states[name] = read(member)
            except KubernetesError as e:
                unreachable[name] = str(e)
        return merge_states(states, unreachable)


def merge_states(states: Mapping[str, ClusterState], unreachable: Mapping[str, str]) -> ClusterState:
    """The clusters' states as one, their nodes, pods and exporter pods under qualified names."""
    namespaces = {n.name: n for s in states.values() for n in s.namespaces}
    return ClusterState(
        nodes=tuple(replace(n, name=qualified(c, n.name)) for c, s in states.items() for n in s.nodes),
        pods=tuple(
            replace(p, name=qualified(c, p.name), node=qualified(c, p.node or "") or None)
            for c, s in states.items()
            for p in s.pods
        ),
        namespaces=tuple(namespaces.values()),
        quotas=tuple(q for s in states.values() for q in s.quotas),
        exporter_pod_nodes={
            qualified(c, pod): qualified(c, node)
            for c, s in states.items()
            for pod, node in s.exporter_pod_nodes.items()
        },
        exporter_ip_nodes={
            qualified(c, ip): qualified(c, node)
            for c, s in states.items()
            for ip, node in s.exporter_ip_nodes.items()
        },
        warnings=(
            *(f"cluster {c}: {w}" for c, s in states.items() for w in s.warnings),
            *(
                f"cluster {c}: not read ({why}); its GPUs are left out of this view"
                for c, why in unreachable.items()
            ),
        ),
        skipped=sum(s.skipped for s in states.values()),
        list_restarts=sum(s.list_restarts for s in states.values()),
        unreachable=dict(unreachable),
    )


def member_state(state: ClusterState, cluster: str) -> ClusterState:
    """One cluster's part of a merged state, under its own names again (what its sources know)."""

    def own(mapping: Mapping[str, str]) -> dict[str, str]:
        prefix = f"{cluster}/"
        return {
            k.removeprefix(prefix): v.removeprefix(prefix) for k, v in mapping.items() if k.startswith(prefix)
        }

    return replace(
        state,
        nodes=tuple(
            replace(n, name=n.name.partition("/")[2]) for n in state.nodes if cluster_of(n.name) == cluster
        ),
        pods=tuple(
            replace(p, name=p.name.partition("/")[2], node=(p.node or "").partition("/")[2] or None)
            for p in state.pods
            if cluster_of(p.name) == cluster
        ),
        exporter_pod_nodes=own(state.exporter_pod_nodes),
        exporter_ip_nodes=own(state.exporter_ip_nodes),
        cluster=cluster,
        unreachable={},
    )


def concat_rows(parts: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Rows of several clusters as one frame; a categorical name column stays a categorical of strings,
    each part's codes mapped onto the union of the parts' categories (no string per row is made)."""
    parts = list(parts)
    for column in parts[0].columns:
        if isinstance(parts[0][column].dtype, pd.CategoricalDtype):
            union = sorted(set().union(*(p[column].cat.categories for p in parts)))
            dtype = pd.CategoricalDtype(pd.Index(union, dtype="str"))
            parts = [p.assign(**{column: p[column].cat.set_categories(dtype.categories)}) for p in parts]
    return pd.concat(parts, ignore_index=True)


class FleetService:
    """Answers the questions of the UI, the CLI and the exporter for one fleet, with a small cache."""

    def __init__(self, *, settings: Settings, sources: FleetSources, cache_size: int = 8) -> None:
        self.settings = settings
        self.sources = sources
        self._cache: dict[tuple[datetime, datetime, int], Analysis] = {}
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._queues: tuple[float, QueueSetup] | None = None  # (monotonic time read, setup)
        # The last queue tables and what they were made of: the exporter asks every cycle, and between
        # two steps (or two reads of Kueue) its analysis and queue setup are the same objects.
        self._queue_tables: tuple[Analysis, QueueSetup, QueueTables] | None = None

    @property
    def simulated(self) -> bool:
        """Whether this is the simulated fleet (the demo), which keeps no Prometheus history."""
        return self.sources.simulated

    def history_start(self) -> datetime | None:
        """Where the sources' history begins, when they know (the simulated fleet's first sample)."""
        return self.sources.history_start()

    def waiting(self) -> list[SourceWait]:
        """The reads of outside systems under way now: what a page or a cycle is waiting for."""
        return self.sources.waiting()

    @classmethod
    def live(
        cls, settings: Settings, *, watch_cluster: bool = False, field_seconds: float | None = None
    ) -> "FleetService":
        """The fleet Prometheus and the API server describe; `watch_cluster` for long-running processes
        (the cluster kept by watches instead of listed per call); field_seconds as LiveSources'."""
        clusters = settings.clusters or (None,)
        for cluster in clusters:
            if not (cluster.prometheus if cluster else settings.prometheus).url:
                where = f" for cluster {cluster.name}" if cluster else ""
                raise ConfigError(
                    f"no Prometheus URL{where}: pass --prometheus-url, set GPUWATCH_PROMETHEUS_URL "
                    "or the config"
                )
        members = {
            c.name if c else "": LiveSources(
                settings, cluster=c, watch_cluster=watch_cluster, field_seconds=field_seconds
            )
            for c in clusters
        }
        sources: FleetSources = (
            next(iter(members.values())) if len(members) == 1 else MultiClusterSources(members)
        )
        return cls(settings=settings, sources=sources)

    def now(self) -> datetime:
        return self.sources.now()

    def window(self, *, days: float = 1.0, end: datetime | None = None, step_seconds: int = 60) -> Window:
        """The window of `days` ending at `end` (default: now, on the step grid), coarsened if long."""
        end = end or self.now()
        end = datetime.fromtimestamp(end.timestamp() // step_seconds * step_seconds, UTC)
        return Window(start=end - timedelta(days=days), end=end, step_seconds=step_seconds).coarsened()

    def analysis(self, window: Window) -> "Analysis":
        """The analysis of a window (cached: the same window is computed once)."""
        key = (window.start, window.end, window.step_seconds)
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        state = self.sources.cluster_state()
        samples = self.sources.gpu_samples(window, state)
        history = self.sources.allocation_history(window)
        result = analyze(
            window=window,
            state=state,
            gpu_samples=samples,
            settings=self.settings,
            history=history,
            source_warnings=self.sources.take_warnings(),
        )
        with self._lock:
            self._cache[key] = result
            while len(self._cache) > self._cache_size:
                self._cache.pop(next(iter(self._cache)))
        return result

    def queue_setup(self) -> QueueSetup:
        """Kueue's queues in gpuwatch's terms (no_queues() without Kueue); a cluster whose Kueue cannot be
        read has none either, and a warning says why. Read at most every QUEUE_READ_SECONDS: quota and
        workloads change by the minute, and the exporter asks every cycle."""
        with self._lock:
            if self._queues is not None and time.monotonic() - self._queues[0] < QUEUE_READ_SECONDS:
                return self._queues[1]
        setup = self._read_queue_setup()
        with self._lock:
            self._queues = (time.monotonic(), setup)
        return setup

    def _read_queue_setup(self) -> QueueSetup:
        try:
            kueue = self.sources.kueue_state()
            if not kueue.installed:
                return no_queues()
            state = self.sources.node_state(namespaces=True)
        except KubernetesError as e:
            return no_queues([f"Kueue not read: {e}"])
        return queue_setup(
            kueue,
            nodes=state.nodes,
            rules=self.settings.teams,
            namespace_labels={n.name: n.labels for n in state.namespaces},
        )

    def queues(self, analysis: Analysis) -> QueueTables | None:
        """The queue tables of the analysis' window (what `gpuwatch export` publishes as gpuwatch_queue_*);
        None without Kueue, so a cluster without it pays nothing for them."""
        setup = self.queue_setup()
        if not setup.installed:
            return None
        with self._lock:
            last = self._queue_tables
        if last is not None and last[0] is analysis and last[1] is setup:
            return last[2]
        tables = analysis_queues(analysis, setup, quota_only=True)
        with self._lock:
            self._queue_tables = (analysis, setup, tables)
        return tables
