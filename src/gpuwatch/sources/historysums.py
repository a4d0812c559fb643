"""gpuwatch's own series over a window, read piece by piece (HistorySums): the team, pool and node sums, the
per-pod families read as a page asks (PodFamilies, PodReader), the timelines and what was published last."""

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Final

import numpy as np
import pandas as pd

from gpuwatch.core.model import Window
from gpuwatch.core.schema import QUEUE_USAGE
from gpuwatch.sources import historyqueries, ownseries, promql
from gpuwatch.sources.prometheus import PrometheusSource
from gpuwatch.sources.windowpieces import (
    DEFAULT_HISTORY_RESOLUTION_SECONDS,
    HISTORY_PIECE_SECONDS,
    RAW,
    ROLLUP_CHUNK_SECONDS,
    _family,
    _labelled,
    _read_time,
    history_pieces,
)

_POD = ownseries.POD_HISTORY_LABELS


@dataclass(frozen=True, slots=True, kw_only=True)
class HistorySums:
    """gpuwatch's own series over a window, read piece by piece (frames in base units, labels as str).

    `pieces`: piece (0, 1, ...), end, seconds (its length) and samples (exporter cycles in it, 0 when
    none). The other frames carry `piece`, their label columns and `value`: a sum_over_time (Σ of the
    samples in the piece, so Σ × the piece's sample interval is GE-hours, or USD for the rates), a
    count_over_time, or a last_over_time (the last sample in the piece). The *_now frames are instant
    reads at the window's end (no `piece`): what the exporter published last.
    """

    pieces: pd.DataFrame
    pool_states: pd.DataFrame  # pool, state: Σ GE
    team_states: pd.DataFrame  # team, state: Σ GE (allocated_unknown, allocated_idle, allocated_active)
    team_used: pd.DataFrame  # team: Σ busy GE (utilization × GE share)
    team_cost: pd.DataFrame  # team: Σ USD/h allocated
    team_idle_cost: pd.DataFrame  # team: Σ USD/h idle-allocated
    team_power: pd.DataFrame  # team: Σ W its GPUs drew (its GE share of each)
    team_energy_cost: pd.DataFrame  # team: Σ USD/h of that energy
    pool_power: pd.DataFrame  # pool: Σ W all its GPUs drew, held or not
    pool_energy_cost: pd.DataFrame  # pool: Σ USD/h of that energy
    # The pod families (* : only the pods above 0 in the piece, the others read as 0)
    pod_allocated: pd.DataFrame  # namespace, pod, team, node, pool: Σ GE
    pod_idle: pd.DataFrame  # ... Σ idle-allocated GE *
    pod_used: pd.DataFrame  # ... Σ busy GE
    pod_unknown: pd.DataFrame  # ... Σ allocated GE whose utilization is unknown (no telemetry) *
    pod_last_allocated: pd.DataFrame  # ... GE at the pod's last sample in the piece
    pod_last_idle: pd.DataFrame  # ... idle-allocated GE at the pod's last sample in the piece *
    pod_idle_since: pd.DataFrame  # ... idle-since epoch seconds at the last sample that had one
    pod_idle_held: pd.DataFrame  # ... Σ idle GE with the framebuffer in use *
    pod_idle_abandoned: pd.DataFrame  # ... Σ idle GE with the framebuffer near empty *
    pod_power: pd.DataFrame  # ... Σ W its GPUs drew (its GE share of each; absent where unknown)
    pod_busy_p95: pd.DataFrame  # ... p95 of its busy GE (from roll-ups: its busiest hour's; absent: unknown)
    pod_memory_peak: pd.DataFrame  # ... peak bytes of GPU memory in use (absent: unknown)
    # What the report needs of the pods without them (from the pod families when those were read):
    namespace_sums: pd.DataFrame  # namespace, team, pool, family (NAMESPACE_FAMILIES): Σ GE of the pods
    namespace_pods: pd.DataFrame  # namespace, team: distinct pods seen in the window (no `piece`)
    fragmentation_sum: pd.DataFrame  # pool: Σ fragmentation ratio
    fragmentation_count: pd.DataFrame  # pool: samples of the ratio
    fragmented_sum: pd.DataFrame  # pool: Σ fragmented GE (empty from exporters before it was published)
    free_sum: pd.DataFrame  # pool: Σ schedulable free GE
    price_sum: pd.DataFrame  # pool: Σ USD per GPU-hour
    price_count: pd.DataFrame  # pool: samples of the price
    capacity_sum: pd.DataFrame  # node: Σ physical GPUs
    reporting_sum: pd.DataFrame  # node: Σ GPU units with DCGM telemetry (a MIG instance is a unit)
    nodes_now: pd.DataFrame  # node, pool: physical GPUs
    largest_free_block_now: pd.DataFrame  # pool: GE
    pending_now: pd.DataFrame  # namespace, pod, team, pool, blocked_by: GE requested
    pending_waiting_now: pd.DataFrame  # namespace, pod, team, pool: seconds waited
    pending_info_now: pd.DataFrame  # namespace, pod, team, pool and PENDING_INFO_LABELS
    tainted_nodes_now: pd.DataFrame  # pool, taint: nodes carrying it
    pool_info_now: pd.DataFrame  # pool, vendor (empty from exporters before it was published)
    # QUEUE_USAGE as the exporter published it (queue_usage_history; empty: not read, or none published)
    queue_usage: pd.DataFrame = field(default_factory=QUEUE_USAGE.empty)


# The per-pod families of HistorySums and their queries. A pod never idle or unknown in a piece, or not
# idle at its last sample there, is left out of those families (read as 0): most of a month's ~50,000 pods.
_ALLOCATION, _IDLE, _USED, _UNKNOWN = ownseries.POD_SUM_METRICS
POD_IDLE_SPLIT: Final = ("pod_idle_held", "pod_idle_abandoned")
POD_NEEDS: Final = ("pod_busy_p95", "pod_memory_peak")  # right-sizing's, per piece: the highest counts
POD_FAMILIES: Final[dict[str, Callable[..., str]]] = {
    "pod_allocated": partial(historyqueries.pod_gpus_sum_query, _ALLOCATION),
    "pod_idle": partial(historyqueries.pod_gpus_sum_query, _IDLE, nonzero=True),
    "pod_used": partial(historyqueries.pod_gpus_sum_query, _USED),
    "pod_unknown": partial(historyqueries.pod_gpus_sum_query, _UNKNOWN, nonzero=True),
    "pod_last_allocated": partial(historyqueries.pod_gpus_last_query, _ALLOCATION),
    "pod_last_idle": partial(historyqueries.pod_gpus_last_query, _IDLE, nonzero=True),
    "pod_idle_since": historyqueries.pod_idle_since_last_query,
    **{
        name: partial(historyqueries.pod_gpus_sum_query, metric, nonzero=True)
        for name, metric in zip(POD_IDLE_SPLIT, ownseries.POD_IDLE_SPLIT_METRICS, strict=True)
    },
    "pod_power": partial(historyqueries.pod_gpus_sum_query, ownseries.POD_POWER_METRIC),
    **{
        name: partial(historyqueries.pod_need_query, metric)
        for name, (metric, _) in zip(POD_NEEDS, ownseries.POD_NEED_ROLLUPS, strict=True)
    },
}


# namespace_sums' families: the pod family each sums.
NAMESPACE_FAMILIES: Final = {
    **dict(zip(("allocated", "idle", "used", "unknown"), ownseries.POD_SUM_METRICS, strict=True)),
    "power": ownseries.POD_POWER_METRIC,
    **dict(zip(("idle_held", "idle_abandoned"), ownseries.POD_IDLE_SPLIT_METRICS, strict=True)),
}
PODS_SEEN: Final = "pods"  # PodFamilies.totals(): the pods counted
# Per-pod families read at once. Prometheus evaluates a query on one core, so two keep two cores busy; more
# only make every answer (~100 MB for a month of ~600,000 pods) arrive at the same moment, to be held
# together while they are decoded.
POD_FAMILIES_AT_ONCE: Final = 2
_POD_POOLS: Final = "pod_pools"  # PodFamilies: each pod's allocation per pool (_pod_pools)
_POD_POOL_LABELS: Final = ("namespace", "pod", "team", "pool")


class PodFamilies:
    """The per-pod families of a window's pieces (only `teams`' pods, or only `pods` (namespace, pod),
    when given), each read from Prometheus the first time it is asked for, then kept: a page that draws
    a few pods' rows reads the families those rows need, not the ~50,000 pods of a month seven times
    over."""

    def __init__(
        self,
        source: PrometheusSource,
        pieces: pd.DataFrame,
        *,
        teams: Sequence[str] = (),
        pods: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.source = source
        self.pieces = pieces
        self.teams = tuple(teams)
        self.pods = frozenset(pods)
        self.matchers = [promql.one_of("team", self.teams)] if self.teams else []
        if self.pods:  # a superset of the pods (namespace × pod): the exact ones are kept once read
            self.matchers += [
                promql.one_of("namespace", sorted({n for n, _ in self.pods})),
                promql.one_of("pod", sorted({p for _, p in self.pods})),
            ]
        self._read: dict[str, Future[pd.DataFrame]] = {}
        self._totals: dict[str, Future[pd.DataFrame]] = {}
        self._covered: bool | None = None
        self._lock = threading.Lock()

    def read(self, *names: str) -> dict[str, pd.DataFrame]:
        """The families `names` (all of POD_FAMILIES when none), those not yet read side by side."""
        return {n: f.result() for n, f in self.start(*names).items()}

    def start(self, *names: str) -> dict[str, "Future[pd.DataFrame]"]:
        """Start reading the families `names` (all when none) not yet read or being read; their futures."""
        return self._once(self._read, names or tuple(POD_FAMILIES), self._family)

    def _once(
        self,
        kept: dict[str, "Future[pd.DataFrame]"],
        names: Sequence[str],
        read: Callable[[str], pd.DataFrame],
    ) -> dict[str, "Future[pd.DataFrame]"]:
        """kept[name] for each of `names`, read(name) started side by side for those not yet in it."""
        with self._lock:
            missing = [n for n in names if n not in kept]
            if missing:
                pool = ThreadPoolExecutor(max_workers=min(len(missing), POD_FAMILIES_AT_ONCE))
                for name in missing:
                    kept[name] = pool.submit(read, name)
                pool.shutdown(wait=False)  # its threads end with their reads
            return {n: kept[n] for n in names}

    def _family(self, name: str) -> pd.DataFrame:
        frame = _family(self.source, self.pieces, POD_FAMILIES[name], _POD, self.matchers)
        if not self.pods:
            return frame
        pairs = pd.MultiIndex.from_frame(frame[["namespace", "pod"]])
        return frame[pairs.isin(list(self.pods))].reset_index(drop=True)

    def totals(self, *families: str) -> dict[str, pd.DataFrame]:
        """HistorySums' namespace_sums of `families` (of NAMESPACE_FAMILIES; namespace_pods too when
        PODS_SEEN is one of them) and, when none are named, of all with namespace_pods, each once and
        kept: the idle GE from the idle pods' family (a tenth of the pods), the allocated GE and the pods
        from one read of each pod's allocation per pool, the others summed by Prometheus (one row per
        namespace, team, pool and piece)."""
        wanted = families or (*NAMESPACE_FAMILIES, PODS_SEEN)
        read = {n: f.result() for n, f in self._once(self._totals, wanted, self._total).items()}
        parts = [read[n].assign(family=n) for n in wanted if n != PODS_SEEN]
        pods = read.get(PODS_SEEN, _labelled(pd.DataFrame(), ("namespace", "team")).drop(columns="piece"))
        return {"namespace_sums": pd.concat(parts, ignore_index=True), "namespace_pods": pods}

    def _total(self, name: str) -> pd.DataFrame:
        if not self.pods and self._namespace_rollups():
            # Recorded per namespace: Prometheus reads the namespaces' series, not the window's pods' (at
            # real churn, ~2 a GPU a day), except in the stretches read raw at the window's ends.
            if name == PODS_SEEN:
                return _pods_counted(self.source, self.pieces, self.matchers)
            query = partial(
                historyqueries.namespace_gpus_sum_query, NAMESPACE_FAMILIES[name], namespace_rollups=True
            )
            return _family(self.source, self.pieces, query, ownseries.NAMESPACE_LABELS, self.matchers)
        if name in (PODS_SEEN, "allocated"):  # both from one read of the pods' allocation
            held = self._once(self._totals, [_POD_POOLS], self._pod_pools)[_POD_POOLS].result()
            return _pods_seen(held) if name == PODS_SEEN else _per_namespace(held)
        if name == "idle":
            return _per_namespace(self.read("pod_idle")["pod_idle"])
        query = partial(historyqueries.namespace_gpus_sum_query, NAMESPACE_FAMILIES[name])
        return _family(self.source, self.pieces, query, ownseries.NAMESPACE_LABELS, self.matchers)

    def _namespace_rollups(self) -> bool:
        """Whether the namespace roll-ups cover every piece read from roll-ups (asked once): not where the
        rules that ran were older than them (then the pods' roll-ups are summed, as before)."""
        with self._lock:
            if self._covered is None:
                self._covered = namespace_rollups_cover(self.source, self.pieces)
            return self._covered

    def _pod_pools(self, _name: str) -> pd.DataFrame:
        """piece, namespace, pod, team, pool, value: each pod's allocated GE summed per pool and piece.
        The namespaces' allocation and their pods are both counted from it: Prometheus looks the pods'
        series up once, not twice (a month's ~50,000 pods: most of a query's cost)."""
        query = partial(historyqueries.namespace_gpus_sum_query, _ALLOCATION, by=_POD_POOL_LABELS)
        return _family(self.source, self.pieces, query, _POD_POOL_LABELS, self.matchers)


class PodReader:
    """The per-pod families of one window's pieces, read when asked for: every pod's or some teams'
    (PodFamilies, kept per set of teams), or a few pods'."""

    def __init__(self, source: PrometheusSource, pieces: pd.DataFrame) -> None:
        self.source = source
        self.pieces = pieces
        self._teams: dict[tuple[str, ...], PodFamilies] = {}
        self._end: PodFamilies | None = None
        self._lock = threading.Lock()

    def of_teams(self, teams: tuple[str, ...] = ()) -> PodFamilies:
        """Every pod's families (`teams`' only, when given), each read once."""
        with self._lock:
            if teams not in self._teams:
                self._teams[teams] = PodFamilies(self.source, self.pieces, teams=teams)
            return self._teams[teams]

    def at_end(self) -> PodFamilies:
        """Every pod's families over the window's last exporter interval alone (what it published last)."""
        with self._lock:
            if self._end is None:
                grids = self.pieces["resolution_seconds"]  # the exporter interval (60 s at least if rolled)
                seconds = int(grids.min()) if len(grids) else DEFAULT_HISTORY_RESOLUTION_SECONDS
                end = pd.DataFrame(
                    {
                        "piece": [0],
                        "end": [self.pieces["end"].max()],
                        "seconds": [float(seconds)],
                        "grid_seconds": [seconds],
                        "rollup": [RAW],
                        "resolution_seconds": [seconds],
                        "samples": [1.0],
                    }
                )
                self._end = PodFamilies(self.source, end)
            return self._end

    def of_pods(self, pods: Sequence[tuple[str, str]]) -> PodFamilies:
        """The families of these pods (namespace, pod) alone (at least one)."""
        if not pods:
            raise ValueError("of_pods() needs at least one pod")
        return PodFamilies(self.source, self.pieces, pods=pods)


def pod_totals(pods: Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """HistorySums' namespace_sums and namespace_pods from its per-pod families."""
    parts = [_per_namespace(pods[f"pod_{f}"]).assign(family=f) for f in NAMESPACE_FAMILIES]
    return {
        "namespace_sums": pd.concat(parts, ignore_index=True),
        "namespace_pods": _pods_seen(pods["pod_last_allocated"]),
    }


def _per_namespace(pods: pd.DataFrame) -> pd.DataFrame:
    """piece, namespace, team, pool, value: a pod family summed per namespace and pool."""
    keys = ["piece", "namespace", "team", "pool"]
    return pods.groupby(keys, as_index=False, sort=True).agg(value=("value", "sum"))


def namespace_rollups_cover(source: PrometheusSource, pieces: pd.DataFrame) -> bool:
    """Whether every level of roll-ups the pieces read holds as many namespace roll-up evaluations as pod
    ones over their span (rules older than the namespace roll-ups ran before an upgrade: fewer)."""
    for level in sorted(set(pieces["rollup"]) - {RAW}):
        rolled = pieces[pieces["rollup"] == level]
        first = pd.Timestamp(rolled["end"].min()) - pd.Timedelta(seconds=float(rolled["seconds"].max()))
        at = _read_time(pd.Timestamp(rolled["end"].max()), level)
        seconds = (at - first).total_seconds()
        counts = [
            source.query(
                historyqueries.namespace_rollup_count_query(
                    namespaces=namespaces, level=level, range_seconds=seconds, matchers=source.scope
                ),
                at=at.to_pydatetime(),
            )
            for namespaces in (False, True)
        ]
        pods, namespaces = (float(c["value"].sum()) if len(c) else 0.0 for c in counts)
        if namespaces < pods:
            return False
    return True


def _pods_counted(
    source: PrometheusSource, pieces: pd.DataFrame, matchers: Sequence[promql.Matcher]
) -> pd.DataFrame:
    """namespace, team, value: the window's distinct pods that held GPUs, from counts alone: its first
    piece's pods and, in each later piece, those new to it (none of their samples in the hour before;
    a pod holds GPUs in one stretch). A first piece of several hours' or a day's roll-ups counts its
    first hour's pods and its new ones less that hour's."""
    labels = ("namespace", "team")
    ordered = pieces.sort_values("end", kind="stable")
    first, later = ordered.iloc[:1], ordered.iloc[1:]
    present, new = (partial(historyqueries.namespace_pods_query, new=flag) for flag in (False, True))
    parts = []
    if len(first) and first["rollup"].iloc[0] != RAW and first["seconds"].iloc[0] > ownseries.ROLLUP_SECONDS:
        hour = first.assign(
            end=first["end"] - pd.to_timedelta(first["seconds"] - ownseries.ROLLUP_SECONDS, unit="s"),
            seconds=float(ownseries.ROLLUP_SECONDS),
            rollup="hour",
        )
        parts += [
            _family(source, hour, present, labels, matchers),
            _family(source, hour, new, labels, matchers).pipe(lambda f: f.assign(value=-f["value"])),
            _family(source, first, new, labels, matchers),
        ]
    elif len(first):
        parts.append(_family(source, first, present, labels, matchers))
    if len(later):
        parts.append(_family(source, later, new, labels, matchers))
    counted = pd.concat(parts, ignore_index=True) if parts else _labelled(pd.DataFrame(), labels)
    summed = counted.groupby(list(labels), as_index=False, sort=True).agg(value=("value", "sum"))
    return summed[summed["value"] > 0].reset_index(drop=True)


def _pods_seen(held: pd.DataFrame) -> pd.DataFrame:
    """namespace, team, value: the distinct pods (namespace, pod, team) of a family that names every pod
    in each piece it held GPUs (an allocation family)."""
    seen = held.drop_duplicates(["namespace", "pod", "team"])
    counted = seen.groupby(["namespace", "team"], as_index=False).size().rename(columns={"size": "value"})
    return counted.astype({"value": "float64"})


def history_sums(
    source: PrometheusSource,
    window: Window,
    *,
    piece_seconds: int = HISTORY_PIECE_SECONDS,
    pieces: pd.DataFrame | None = None,
    pods: bool = True,
    queue_step_seconds: int | None = None,
) -> HistorySums:
    """Every gpuwatch_* sum, count and last value the history report needs, piece by piece (server-side
    aggregation: per pod at most, never per GPU; history_pieces() says which pieces come from the hourly
    roll-ups), and the latest published pending pods and capacity.

    pods=False leaves the per-pod families and what is counted from them (namespace_*) empty: a team
    trend needs only the team, pool and node series, and a view reads the rest as a page asks
    (PodReader). queue_step_seconds: the queue grid's step, to read the queues' usage on it
    (queue_usage_history; None: not read)."""

    if pieces is None:
        pieces = history_pieces(source, window, piece_seconds=piece_seconds)

    pool = ThreadPoolExecutor(max_workers=source.max_concurrent_queries)

    def each(query: Callable[..., str], labels: Sequence[str], **kwargs: bool) -> "Future[pd.DataFrame]":
        return pool.submit(_family, source, pieces, partial(query, **kwargs), labels)

    def now(
        query: Callable[[Sequence[promql.Matcher]], str], labels: Sequence[str]
    ) -> "Future[pd.DataFrame]":
        return pool.submit(
            lambda: _labelled(source.query(query(source.scope), at=window.end), labels).drop(columns="piece")
        )

    frag, price = (partial(historyqueries.pool_sum_query, m) for m in ownseries.POOL_MEAN_METRICS)
    fragmented, free = (partial(historyqueries.pool_sum_query, m) for m in ownseries.POOL_GE_METRICS)
    capacity, reporting = (partial(historyqueries.node_sum_query, m) for m in ownseries.NODE_SUM_METRICS)
    team_power, team_energy_cost = (
        partial(historyqueries.team_energy_sum_query, m) for m in ownseries.TEAM_ENERGY_METRICS
    )
    pool_power, pool_energy_cost = (
        partial(historyqueries.pool_sum_query, m) for m in ownseries.POOL_ENERGY_METRICS
    )
    empty_pods = _labelled(pd.DataFrame(), _POD)
    with pool:  # the families are read side by side (Prometheus evaluates each query on one core)
        families = pool.submit(PodFamilies(source, pieces).read) if pods else None
        reads = dict(
            pool_states=each(historyqueries.pool_state_gpus_sum_query, ("pool", "state")),
            team_states=each(historyqueries.team_state_gpus_sum_query, ("team", "state")),
            team_used=each(historyqueries.team_used_gpus_sum_query, ("team",)),
            team_cost=each(historyqueries.team_cost_sum_query, ("team",)),
            team_idle_cost=each(historyqueries.team_cost_sum_query, ("team",), idle=True),
            team_power=each(team_power, ("team",)),
            team_energy_cost=each(team_energy_cost, ("team",)),
            pool_power=each(pool_power, ("pool",)),
            pool_energy_cost=each(pool_energy_cost, ("pool",)),
            fragmentation_sum=each(frag, ("pool",)),
            fragmentation_count=each(frag, ("pool",), count=True),
            fragmented_sum=each(fragmented, ("pool",)),
            free_sum=each(free, ("pool",)),
            price_sum=each(price, ("pool",)),
            price_count=each(price, ("pool",), count=True),
            capacity_sum=each(capacity, ("node",)),
            reporting_sum=each(reporting, ("node",)),
            nodes_now=now(historyqueries.node_capacity_latest_query, ("node", "pool")),
            largest_free_block_now=now(historyqueries.largest_free_block_latest_query, ("pool",)),
            pending_now=now(
                historyqueries.pending_pod_gpus_latest_query, (*ownseries.PENDING_LABELS, "blocked_by")
            ),
            pending_waiting_now=now(
                historyqueries.pending_pod_waiting_latest_query, ownseries.PENDING_LABELS
            ),
            pending_info_now=now(
                historyqueries.pending_pod_info_latest_query,
                (*ownseries.PENDING_LABELS, *ownseries.PENDING_INFO_LABELS),
            ),
            tainted_nodes_now=now(historyqueries.pool_tainted_nodes_latest_query, ("pool", "taint")),
            pool_info_now=now(historyqueries.pool_info_latest_query, ("pool", "vendor")),
        )
        if queue_step_seconds is not None:
            resolution = int(pieces["resolution_seconds"].min()) if len(pieces) else 0
            reads["queue_usage"] = pool.submit(
                queue_usage_history,
                source,
                window,
                step_seconds=queue_step_seconds,
                resolution_seconds=resolution or DEFAULT_HISTORY_RESOLUTION_SECONDS,
            )
    frames = {k: v.result() for k, v in reads.items()}
    frames |= families.result() if families is not None else dict.fromkeys(POD_FAMILIES, empty_pods)
    return HistorySums(pieces=pieces, **frames, **pod_totals(frames))


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryTimeline:
    """gpuwatch's own series summed per bucket of a window (pieces of `bucket` seconds), for drawing:
    frames as in HistorySums (piece = bucket), low-cardinality families only (pool, team)."""

    pieces: pd.DataFrame  # piece, end, seconds, resolution_seconds, samples (grid points published)
    pool_states: pd.DataFrame  # pool, state: Σ GE
    team_states: pd.DataFrame  # team, state: Σ GE
    team_used: pd.DataFrame  # team: Σ busy GE
    fragmentation_sum: pd.DataFrame  # pool: Σ fragmentation ratio
    fragmentation_count: pd.DataFrame  # pool: samples of the ratio
    fragmented_sum: pd.DataFrame  # pool: Σ fragmented GE
    free_sum: pd.DataFrame  # pool: Σ schedulable free GE


def history_timeline(source: PrometheusSource, window: Window, *, bucket_seconds: int) -> HistoryTimeline:
    """The pool and team series of the window per bucket: O(groups × buckets) rows, whatever the fleet
    (buckets of whole hours from the hourly roll-ups, as history_pieces())."""
    pieces = history_pieces(source, window, piece_seconds=bucket_seconds)

    def each(query: Callable[..., str], labels: Sequence[str]) -> pd.DataFrame:
        return _family(source, pieces, query, labels)

    ratio = partial(historyqueries.pool_sum_query, ownseries.POOL_MEAN_METRICS[0])
    fragmented, free = (partial(historyqueries.pool_sum_query, m) for m in ownseries.POOL_GE_METRICS)
    return HistoryTimeline(
        pieces=pieces,
        pool_states=each(historyqueries.pool_state_gpus_sum_query, ("pool", "state")),
        team_states=each(historyqueries.team_state_gpus_sum_query, ("team", "state")),
        team_used=each(historyqueries.team_used_gpus_sum_query, ("team",)),
        fragmentation_sum=each(ratio, ("pool",)),
        fragmentation_count=each(partial(ratio, count=True), ("pool",)),
        fragmented_sum=each(fragmented, ("pool",)),
        free_sum=each(free, ("pool",)),
    )


def queue_usage_history(
    source: PrometheusSource, window: Window, *, step_seconds: int, resolution_seconds: int
) -> pd.DataFrame:
    """QUEUE_USAGE as `gpuwatch export` published it (gpuwatch_queue_{nominal,used,borrowed,lent}_gpus), on
    the grid of the window's start `step_seconds` apart: sample t is each family's mean over the
    exporter's cycles in (t, t + step], read at t + step. A queue and pool the exporter published nothing
    for at a sample has no row there (the queue did not exist, or no exporter ran: coverage says which);
    empty when it never published one (no Kueue, or an exporter before gpuwatch read it). A few series
    per queue: each family is one range query over the whole window."""
    n = math.ceil(window.duration_seconds / step_seconds)
    keys = ["timestamp", *ownseries.QUEUE_POOL_LABELS]

    def read(metric: str) -> pd.DataFrame:
        query = historyqueries.queue_gpus_mean_query(
            metric, range_seconds=step_seconds, resolution_seconds=resolution_seconds, matchers=source.scope
        )
        first = window.start + timedelta(seconds=step_seconds)
        frame = source.range_points(
            query, first=first, n=n, step_seconds=step_seconds, span_seconds=ROLLUP_CHUNK_SECONDS
        ).frame()
        column = metric.removeprefix("gpuwatch_queue_")
        # A label no series carries (no queue in any cohort) is "" on every row, as an absent label is.
        out = pd.DataFrame({k: frame[k] if k in frame else pd.Series("", index=frame.index) for k in keys})
        return out.assign(**{column: frame["value"].to_numpy(dtype=np.float64)}).set_index(keys)

    with ThreadPoolExecutor(max_workers=len(historyqueries.QUEUE_GPU_METRICS)) as pool:
        parts = list(pool.map(read, historyqueries.QUEUE_GPU_METRICS))
    usage = pd.concat(parts, axis=1, join="outer").reset_index()
    if not len(usage):
        return QUEUE_USAGE.empty()
    usage["timestamp"] = usage["timestamp"] - pd.Timedelta(seconds=step_seconds)
    usage = usage.sort_values(["cluster_queue", "pool", "timestamp"], ignore_index=True)
    return QUEUE_USAGE.check(usage[list(QUEUE_USAGE.columns)].astype({k: "str" for k in keys[1:]}))


def team_pool_timeline(
    source: PrometheusSource, *, pieces: pd.DataFrame, teams: Sequence[str] = ()
) -> dict[str, pd.DataFrame]:
    """Per bucket of `pieces` (history_timeline's), team and pool: Σ GE of the pods' allocation, idle,
    used and unknown families (only `teams`' pods when given), keyed by family name."""
    return {
        metric: _family(
            source,
            pieces,
            partial(historyqueries.team_pool_gpus_sum_query, metric, teams=teams),
            ("team", "pool"),
        )
        for metric in ownseries.POD_SUM_METRICS
    }


def pods_by_node_now(
    source: PrometheusSource, at: datetime, *, teams: Sequence[str] = ()
) -> dict[str, pd.DataFrame]:
    """team, pool, node, value: GE of the pods' allocation, idle, used and unknown families as the exporter
    last published them (only `teams`' pods when given), keyed by family name."""
    return {
        metric: _labelled(
            source.query(
                historyqueries.pod_gpus_by_node_latest_query(metric, teams=teams, matchers=source.scope),
                at=at,
            ),
            ("team", "pool", "node"),
        ).drop(columns="piece")
        for metric in ownseries.POD_SUM_METRICS
    }


def team_states_now(source: PrometheusSource, at: datetime) -> pd.DataFrame:
    """team, state, value: GE each team held per allocated state as the exporter last published it."""
    return _labelled(
        source.query(historyqueries.team_state_gpus_latest_query(source.scope), at=at), ("team", "state")
    ).drop(columns="piece")


def node_states_now(source: PrometheusSource, at: datetime) -> pd.DataFrame:
    """node, pool, state, value: GE of each node per ledger state as the exporter last published it."""
    return _labelled(
        source.query(historyqueries.node_state_gpus_latest_query(source.scope), at=at),
        ("node", "pool", "state"),
    ).drop(columns="piece")
