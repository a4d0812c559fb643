"""The recorded read path: a view from gpuwatch's own gpuwatch_* history, aggregated in PromQL.

Window sums (the report) and drawn timelines come from per-pool, per-team and per-pod series summed by
Prometheus, so the process holds O(groups × points drawn); the present (nodes, who holds which GPU,
pending pods) from one sample of the raw path at the window's end.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from gpuwatch.analytics.queuetables import QueueSetup, QueueTables, idle_now, no_queues
from gpuwatch.core.config import Settings
from gpuwatch.core.model import ALLOCATED_STATES, LEDGER_STATES, Window, cluster_of
from gpuwatch.read.analysis import Analysis
from gpuwatch.read.history import scope_sums
from gpuwatch.read.historypieces import SampleHours, gap_warnings, node_telemetry_hours, team_pool_hours
from gpuwatch.read.historytables import (
    IDLE_FAMILIES,
    RIGHTSIZE_FAMILIES,
    WORKLOAD_KEYS,
    History,
    assemble,
    idle_workloads,
    rightsizing_table,
    workload_table,
)
from gpuwatch.sources.historystore import HistoryStore, PodReads
from gpuwatch.sources.historysums import (
    POD_FAMILIES,
    POD_IDLE_SPLIT,
    POD_NEEDS,
    HistorySums,
    HistoryTimeline,
    pod_totals,
)
from gpuwatch.sources.ownseries import POD_HISTORY_LABELS
from gpuwatch.surfaces.report import (
    IDLE_SPLIT,
    Report,
    Rightsizing,
    build_history_report,
    history_queues,
    rightsizing_from_tables,
    workload_rows,
)
from gpuwatch.views.base import STATE_COLUMNS, TEAM_TIMELINE_COLUMNS, FleetView, ReadPath, Scope
from gpuwatch.views.raw import holders

# Pod families per ledger state of an allocated GE (active = allocation − idle − unknown).
ALLOCATION, IDLE, USED, UNKNOWN = (
    "gpuwatch_pod_gpu_allocation",
    "gpuwatch_pod_gpu_idle",
    "gpuwatch_pod_gpu_used",
    "gpuwatch_pod_gpu_unknown",
)
TeamPools = Callable[[tuple[str, ...]], Mapping[str, pd.DataFrame]]  # teams -> family -> piece, team, pool
PodsNow = Callable[[tuple[str, ...]], Mapping[str, pd.DataFrame]]  # teams -> family -> team, pool, node


@dataclass(frozen=True, slots=True, kw_only=True)
class Recorded:
    """What the recorded path read for one window, whole fleet; views narrow it to a scope."""

    settings: Settings
    window: Window
    sums: HistorySums  # per day-piece sums of the report, the per-pod families left empty
    pods: PodReads  # the per-pod families of the same pieces, read when asked for
    store: HistoryStore  # where they were read
    timeline: HistoryTimeline  # per bucket sums: what is drawn
    node_states: pd.DataFrame  # node, pool, state, value: GE per ledger state at the window's end
    team_states: pd.DataFrame  # team, state, value: GE per allocated state at the window's end
    team_pools: TeamPools  # the pod families per bucket, team and pool, for scoped timelines
    pods_now: PodsNow  # the pod families per team, pool and node at the window's end
    present: Analysis  # one sample of the raw path at the window's end: nodes, holders, pending pods
    computed_at: datetime
    source_warnings: tuple[str, ...] = ()
    queues: QueueSetup = field(default_factory=no_queues)  # Kueue's queues (none without Kueue)
    # The same window read from some clusters' history alone (a fleet of several; None: one cluster)
    of_clusters: Callable[[tuple[str, ...]], "Recorded"] | None = None


class RecordedView(FleetView):
    """A window as gpuwatch_* series recorded it, narrowed to a scope.

    Over the whole fleet the headline comes from the team, pool and node series alone, the summary adds
    what Prometheus counts and sums of the pods, and the per-pod families are read when a page asks for
    pod rows (`report`; only the idle pods' for idle_workloads(), right-sizing's for rightsizing()). A
    scoped view narrows the pods'
    families (only its teams' are read) and is whole from the start."""

    def __init__(self, recorded: Recorded, *, scope: Scope | None = None) -> None:
        scope = scope or Scope()
        # A cluster filter reads those clusters' history alone (a cluster the fleet lacks filters nothing).
        clusters = tuple(sorted(set(scope.clusters) & set(recorded.store.clusters())))
        if clusters and recorded.of_clusters is not None:
            recorded = recorded.of_clusters(clusters)
        self.recorded = recorded
        self._clusters = clusters
        nodes = recorded.present.nodes
        nodes = nodes[nodes["cluster"].isin(clusters)] if clusters else nodes
        self._pools = _scope_pools(scope, nodes)
        self._nodes = nodes if self._pools is None else nodes[nodes["pool"].isin(self._pools)]
        self._gaps_text = gap_warnings(recorded.timeline.pieces)
        if scope.scoped:
            sums = scope_sums(self._with_pods(scope.teams), teams=scope.teams, pools=self._pools)
        else:
            sums = recorded.sums
        self.history = self._assembled(sums, workloads_read=scope.scoped)
        pieces = recorded.timeline.pieces
        resolution = int(pieces["seconds"].max()) if len(pieces) else recorded.window.step_seconds
        super().__init__(
            scope=scope,
            headline=self._report(self.history),
            computed_at=recorded.computed_at,
            read_path=ReadPath(recorded=True, resolution_seconds=resolution),
        )

    def _report(self, history: History) -> Report:
        return build_history_report(history, queues=self.recorded.queues)

    def _with_pods(self, teams: tuple[str, ...], *families: str) -> HistorySums:
        """The recorded sums with the per-pod families `families` of `teams`' pods; all of them, and what
        is counted from them (pod_totals), when none are named."""
        read = self.recorded.pods.of_teams(teams).read(*families)
        return replace(self.recorded.sums, **read, **({} if families else pod_totals(read)))

    def _assembled(self, sums: HistorySums, *, workloads_read: bool = False) -> History:
        """The sums assembled; workloads_read: whether they hold every pod family of the scope."""
        r = self.recorded
        history = assemble(
            sums,
            window=r.window,
            settings=r.settings,
            source_warnings=r.source_warnings,
            gaps=self._gaps_text,
            held_at_end=_held_at_end(r.present.marked),
        )
        return replace(history, workloads_read=workloads_read)

    def _from_whole(self, *read: str) -> bool:
        """Whether this view's rows come from what is already whole: a scoped view (its pods all read),
        or the report or one of `read` once computed. Then the base class derives them."""
        return self.scope.scoped or any(k in self._memo for k in ("report", *read))

    def _summary(self) -> Report:
        if self.scope.scoped:
            return self.headline
        if "report" in self._memo:
            return self.report
        # Namespace sums (the teams' held and abandoned idle hours among them) and pods counted: from the
        # namespace roll-ups, whatever the pods that came and went.
        totals = self.recorded.pods.of_teams().totals()
        return self._report(self._assembled(replace(self.recorded.sums, **totals)))

    def pool_rows(self) -> list[dict[str, Any]]:
        if self._from_whole("summary"):
            return super().pool_rows()

        def compute() -> list[dict[str, Any]]:  # a pool's utilization needs its pods' busy GE alone
            totals = self.recorded.pods.of_teams().totals("used")
            rows: list[dict[str, Any]] = self._report(self._assembled(replace(self.recorded.sums, **totals)))[
                "pools"
            ]
            return rows

        return self._cached("pool_rows", compute)

    def _whole_report(self) -> Report:
        if self.scope.scoped:
            return self.headline
        return self._report(self._whole_history())

    def _whole_history(self) -> History:
        if self.scope.scoped:
            return self.history
        return self._cached(
            "whole_history", lambda: self._assembled(self._with_pods(()), workloads_read=True)
        )

    def queue_tables(self) -> QueueTables:
        if self._from_whole():
            return self._cached(
                "queue_tables", lambda: history_queues(self._whole_history(), self.recorded.queues)
            )

        def compute() -> QueueTables:
            # The teams' allocation per pool from the namespaces' sums, the idle pods from what the
            # exporter published last and the idle pods' family: not every pod's families.
            pods = self.recorded.pods
            sums = pods.of_teams().totals("allocated")["namespace_sums"]
            held = sums.groupby(["piece", "team", "pool"], as_index=False, sort=True).agg(
                value=("value", "sum")
            )
            allocated = team_pool_hours(pods.pieces, held, "allocated_gpu_hours")
            columns = ["namespace", "pod", "team", "pool", "gpus", "idle_since"]
            rows = pd.DataFrame(self.idle_now(), columns=columns)  # idle and holding GPUs at the end
            idle = idle_now(rows.assign(idle_since=pd.to_datetime(rows["idle_since"], utc=True)))
            return history_queues(self.history, self.recorded.queues, allocated=allocated, idle=idle)

        return self._cached("queue_tables", compute)

    def idle_workloads(self) -> list[dict[str, Any]]:
        if self._from_whole():
            return super().idle_workloads()
        return self._cached("idle_workloads", lambda: self._idle_rows(self._with_pods((), *IDLE_FAMILIES)))

    def top_idle_workloads(self, n: int) -> list[dict[str, Any]]:
        if self._from_whole("idle_workloads"):
            return super().top_idle_workloads(n)

        def compute() -> list[dict[str, Any]]:
            # Only the chosen pods' last samples are read; their rows are computed as idle_workloads() does.
            pods = self._most_wasteful(n)
            if not pods:
                return []
            sums = replace(self.recorded.sums, **self.recorded.pods.of_pods(pods).read(*IDLE_FAMILIES))
            return self._idle_rows(sums)[:n]

        return self._cached(f"top_idle_workloads:{n}", compute)

    def top_workloads(self, n: int) -> list[dict[str, Any]]:
        if self._from_whole():
            return super().top_workloads(n)

        def compute() -> list[dict[str, Any]]:
            # The report's first n are the n most wasteful when n pods had waste (it sorts by waste): only
            # their series are read, but right-sizing's (the rows a waste list draws carry no
            # recommendation). Else the whole report.
            pods = self._most_wasteful(n)
            if len(pods) < n:
                return super(RecordedView, self).top_workloads(n)
            families = self.recorded.pods.of_pods(pods).read(*(f for f in POD_FAMILIES if f not in POD_NEEDS))
            table = workload_table(replace(self.recorded.sums, **families), settings=self.recorded.settings)
            return workload_rows(table)[:n]

        return self._cached(f"top_workloads:{n}", compute)

    def rightsizing(self) -> Rightsizing:
        if self._from_whole():
            return super().rightsizing()

        def compute() -> Rightsizing:
            # Right-sizing's pod families alone: every pod's power (a month's ~50,000) and the idle
            # pods' idle-since, last idle GE and split are neither drawn nor downloaded here, so not read.
            r = self.recorded
            sums = replace(r.sums, **r.pods.of_teams().read(*RIGHTSIZE_FAMILIES))
            table, packing = rightsizing_table(
                sums, settings=r.settings, window=r.window, held_at_end=self.history.held_at_end
            )
            return rightsizing_from_tables(table, packing)

        return self._cached("rightsizing", compute)

    def idle_now(self) -> list[dict[str, Any]]:
        if self._from_whole("idle_workloads"):
            return super().idle_now()

        def compute() -> list[dict[str, Any]]:
            # Idle now: published an idle-since in the exporter's last cycle (every GPU of it idle) and
            # still held; its dollars from the idle pods' family.
            last = self.recorded.pods.at_end().read("pod_last_allocated", "pod_idle_since")
            keys = ["piece", *POD_HISTORY_LABELS]
            now = (
                last["pod_idle_since"]
                .rename(columns={"value": "since"})
                .merge(last["pod_last_allocated"].rename(columns={"value": "gpus"}), on=keys, how="left")
            )
            held = self.held_at_end()
            pairs = pd.MultiIndex.from_frame(now[["namespace", "pod"]])
            now = now[pairs.isin(list(held))] if len(now) else now
            waste = self._waste()
            rows = now.drop(columns="piece").merge(
                waste[[*WORKLOAD_KEYS, "idle_gpu_hours", *IDLE_SPLIT, "waste_usd"]],
                on=list(WORKLOAD_KEYS),
                how="inner",
            )
            rows = rows.assign(idle_since=pd.to_datetime(rows.pop("since"), unit="s", utc=True))
            return workload_rows(rows)

        return self._cached("idle_now", compute)

    def idle_waste(self) -> list[dict[str, Any]]:
        if self._from_whole("idle_workloads"):
            return super().idle_waste()
        columns = [*WORKLOAD_KEYS, "idle_gpu_hours", *IDLE_SPLIT, "waste_usd"]
        return self._cached("idle_waste", lambda: workload_rows(self._waste()[columns]))

    def _waste(self) -> pd.DataFrame:
        """idle_workloads() of the idle pods' families alone: idle GE-hours (held and abandoned) and dollars
        per workload (its last-sample columns unknown), computed once."""

        def compute() -> pd.DataFrame:
            idle = self.recorded.pods.of_teams().read("pod_idle", *POD_IDLE_SPLIT)
            return idle_workloads(replace(self.recorded.sums, **idle), settings=self.recorded.settings)

        return self._cached("waste", compute)

    def _most_wasteful(self, n: int) -> list[tuple[str, str]]:
        """(namespace, pod) of the n pods with the most idle-allocated dollars (fewer when fewer had
        any), ranked from the idle pods' family alone."""
        waste = self._waste()
        top = waste[waste["waste_usd"] > 0].nlargest(n, ["waste_usd", "idle_gpu_hours"])
        return list(zip(top["namespace"], top["pod"], strict=True))

    def _idle_rows(self, sums: HistorySums) -> list[dict[str, Any]]:
        return workload_rows(idle_workloads(sums, settings=self.recorded.settings))

    @property
    def window(self) -> Window:
        return self.recorded.window

    def scoped(self, scope: Scope) -> "RecordedView":
        return RecordedView(self.recorded, scope=scope)

    def history_gaps(self) -> list[str]:
        return list(self._gaps_text)

    # -- helpers --------------------------------------------------------------------------------

    def _in_pools(self, frame: pd.DataFrame) -> pd.DataFrame:
        return frame if self._pools is None else frame[frame["pool"].isin(self._pools)]

    def _per_bucket(self, frame: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
        """Σ value per bucket and keys ÷ the bucket's grid points with samples: the bucket's mean, with
        timestamp = its start; buckets without samples are left out (no history is not 0). Several
        clusters' buckets starting together are summed, and left out where one of them has no samples
        (the fleet's mean there is not known)."""
        pieces = self.recorded.timeline.pieces
        covered = pieces[pieces["samples"] > 0].set_index("piece")
        summed = frame.groupby(["piece", *keys], as_index=False, sort=True).agg(value=("value", "sum"))
        summed = summed[summed["piece"].isin(covered.index)].reset_index(drop=True)
        samples = summed["piece"].map(covered["samples"]).to_numpy(dtype=np.float64)
        starts = covered["end"] - pd.to_timedelta(covered["seconds"], unit="s")
        means = summed.assign(  # (reindex, not map: an empty read's piece column is no integer)
            value=summed["value"].to_numpy() / samples, timestamp=starts.reindex(summed["piece"]).to_numpy()
        )
        means = means[~means["timestamp"].isin(self._holes())]
        return means.groupby(["timestamp", *keys], as_index=False, sort=True).agg(value=("value", "sum"))

    def _holes(self) -> "pd.Series[pd.Timestamp]":
        """The starts of the buckets without samples (in some cluster of several)."""
        pieces = self.recorded.timeline.pieces
        missing = pieces[pieces["samples"] <= 0]
        starts: pd.Series[pd.Timestamp] = missing["end"] - pd.to_timedelta(missing["seconds"], unit="s")
        return starts

    def _gaps(self, frame: pd.DataFrame) -> pd.DataFrame:
        """frame (timestamp + value columns) with a NaN row at the start of every bucket without samples,
        so lines break there instead of joining across missing history."""
        holes = pd.DataFrame({"timestamp": self._holes().drop_duplicates().to_numpy()})
        holes["timestamp"] = pd.to_datetime(holes["timestamp"], utc=True)
        return pd.concat([frame, holes], ignore_index=True).sort_values("timestamp", ignore_index=True)

    def _team_pool(self) -> dict[str, pd.DataFrame]:
        """Pod families per bucket, team and pool (the scope's teams), narrowed to the scope's pools."""
        return {k: self._in_pools(v) for k, v in self.recorded.team_pools(self.scope.teams).items()}

    def _allocated_states(self, families: Mapping[str, pd.DataFrame], keys: Sequence[str]) -> pd.DataFrame:
        """timestamp, keys and held/unknown/idle/active/used GE bucket means from the pod families."""
        index = ["timestamp", *keys]
        means = {
            name: self._per_bucket(families[family], keys).set_index(index)["value"]
            for name, family in (("held", ALLOCATION), ("idle", IDLE), ("unknown", UNKNOWN), ("used", USED))
        }
        frame = pd.DataFrame({k: v.reindex(means["held"].index) for k, v in means.items()}).fillna(0.0)
        frame["active"] = (frame["held"] - frame["idle"] - frame["unknown"]).clip(lower=0.0)
        return frame.reset_index()

    # -- the interface --------------------------------------------------------------------------

    def ledger_timeline(self) -> pd.DataFrame:
        def compute() -> pd.DataFrame:
            if self.scope.teams:
                states = self._allocated_states(self._team_pool(), [])
                wide = pd.DataFrame({"timestamp": states["timestamp"]})
                for state in LEDGER_STATES:
                    column = {"allocated_unknown": "unknown", "allocated_idle": "idle"}.get(state, "")
                    column = "active" if state == "allocated_active" else column
                    wide[f"{state}_ge"] = states[column] if column else 0.0
            else:
                long = self._per_bucket(self._in_pools(self.recorded.timeline.pool_states), ["state"])
                wide = long.pivot_table(index="timestamp", columns="state", values="value", aggfunc="sum")
                wide = wide.reindex(columns=list(LEDGER_STATES)).fillna(0.0)
                wide.columns = pd.Index(STATE_COLUMNS)
                wide = wide.reset_index()
            return self._gaps(wide[["timestamp", *STATE_COLUMNS]])

        return self._cached("ledger_timeline", compute)

    def team_timeline(self) -> pd.DataFrame:
        def compute() -> pd.DataFrame:
            if self.scope.scoped:
                frame = self._allocated_states(self._team_pool(), ["team"])
            else:
                t = self.recorded.timeline
                states = self._per_bucket(t.team_states, ["team", "state"])
                frame = states.pivot_table(
                    index=["timestamp", "team"], columns="state", values="value", aggfunc="sum"
                )
                frame = frame.reindex(columns=list(ALLOCATED_STATES)).fillna(0.0)
                frame.columns = pd.Index(["unknown", "idle", "active"])
                used = self._per_bucket(t.team_used, ["team"]).set_index(["timestamp", "team"])
                frame["used"] = used["value"].reindex(frame.index).fillna(0.0)
                frame["held"] = frame[["unknown", "idle", "active"]].sum(axis=1)
                frame = frame.reset_index()
            frame = frame.rename(
                columns={c: f"{c}_ge" for c in ("held", "unknown", "idle", "active", "used")}
            )
            return frame[["timestamp", "team", *TEAM_TIMELINE_COLUMNS]].sort_values(
                ["timestamp", "team"], ignore_index=True
            )

        return self._cached("team_timeline", compute)

    def fragmentation_timeline(self) -> pd.DataFrame:
        def compute() -> pd.DataFrame:
            t = self.recorded.timeline
            pieces = t.pieces.set_index("piece")
            starts = pieces["end"] - pd.to_timedelta(pieces["seconds"], unit="s")

            def timed(frame: pd.DataFrame) -> pd.DataFrame:  # per bucket start: several clusters' summed
                frame = self._in_pools(frame).assign(timestamp=lambda f: f["piece"].map(starts))
                frame = frame[~frame["timestamp"].isin(self._holes())]
                return frame.groupby(["timestamp", "pool"], as_index=False).agg(value=("value", "sum"))

            if len(t.free_sum):  # Σ fragmented ÷ Σ free per bucket, as the raw path buckets them
                ratio = _ratio(timed(t.fragmented_sum), timed(t.free_sum), zero=True)
            else:  # history from an exporter that published only the ratio: its bucket mean
                ratio = _ratio(timed(t.fragmentation_sum), timed(t.fragmentation_count))
            return ratio[["timestamp", "pool", "fragmentation_ratio"]].sort_values(
                ["timestamp", "pool"], ignore_index=True
            )

        return self._cached("fragmentation_timeline", compute)

    def fragmentation_ratio(self) -> float:
        """Σ fragmented ÷ Σ free GE over the window and the scope's pools; from history that kept only
        the ratio, the pools' time-averaged ratios weighted by their free (unallocated + stranded) hours."""
        sums = self.recorded.sums
        if len(sums.free_sum):  # GE-hours: pieces read on different grids weigh by their sample interval
            hours = SampleHours(sums.pieces)
            free = hours.total(self._in_pools(sums.free_sum))
            return hours.total(self._in_pools(sums.fragmented_sum)) / free if free > 0 else 0.0
        pools = self.history.tables["pool"]
        weight = (pools["unallocated_gpu_hours"] + pools["stranded_gpu_hours"]).to_numpy(dtype=np.float64)
        ratio = pools["fragmentation_ratio"].to_numpy(dtype=np.float64)
        known = np.isfinite(ratio) & (weight > 0)
        return float((ratio[known] * weight[known]).sum() / weight[known].sum()) if known.any() else 0.0

    def state_usd(self) -> dict[str, float]:
        pools = self.history.tables["pool"]
        return {s: float(pools[f"{s}_usd"].sum()) for s in LEDGER_STATES}

    def nodes(self) -> pd.DataFrame:
        return self._nodes.reset_index(drop=True)

    def nodes_now(self) -> pd.DataFrame:
        def compute() -> pd.DataFrame:
            if self.scope.teams:
                families = self.recorded.pods_now(self.scope.teams)
                per_node = {
                    name: self._in_pools(families[family]).groupby("node")["value"].sum()
                    for name, family in (("held", ALLOCATION), ("idle", IDLE), ("unknown", UNKNOWN))
                }
                states = pd.DataFrame(per_node).fillna(0.0)
                wide = pd.DataFrame(0.0, index=states.index, columns=STATE_COLUMNS)
                wide["allocated_unknown_ge"] = states["unknown"]
                wide["allocated_idle_ge"] = states["idle"]
                wide["allocated_active_ge"] = (states["held"] - states["idle"] - states["unknown"]).clip(
                    lower=0.0
                )
            else:
                wide = self.recorded.node_states.pivot_table(
                    index="node", columns="state", values="value", aggfunc="sum"
                )
                wide = wide.reindex(columns=list(LEDGER_STATES)).fillna(0.0)
                wide.columns = pd.Index(STATE_COLUMNS)
            wide = wide.rename_axis(index="node").reset_index()
            nodes = self.nodes().merge(wide, on="node", how="left").fillna(dict.fromkeys(STATE_COLUMNS, 0.0))
            return nodes.sort_values(["pool", "node"], ignore_index=True)

        return self._cached("nodes_now", compute)

    def held_now(self) -> dict[str, float]:
        def compute() -> dict[str, float]:
            if not self.scope.scoped:  # the team series say it: no pod read
                held = self.recorded.team_states.groupby("team")["value"].sum()
                return {str(k): float(v) for k, v in held.items()}
            allocated = self._in_pools(self.recorded.pods_now(self.scope.teams)[ALLOCATION])
            return {str(k): float(v) for k, v in allocated.groupby("team")["value"].sum().items()}

        return self._cached("held_now", compute)

    def _last(self) -> pd.DataFrame:
        last = _at_end(self.recorded.present.marked)
        if self._clusters:
            last = last[last["node"].astype("str").map(cluster_of).isin(self._clusters)]
        if self.scope.teams:
            last = last[last["team"].isin(self.scope.teams)]
        return self._in_pools(last)

    def held_at_end(self) -> set[tuple[str, str]]:
        last = self._last()
        return set(zip(last["namespace"], last["pod"], strict=True))

    def gpu_holders(self) -> pd.DataFrame:
        return self._cached("gpu_holders", lambda: holders(self._last()))

    def node_coverage(self) -> pd.DataFrame:
        def compute() -> pd.DataFrame:
            telemetry = node_telemetry_hours(self.recorded.sums).set_index("node")
            total = telemetry["capacity_gpu_hours"]
            ratio = (telemetry["present_gpu_hours"] / total.where(total > 0)).rename("coverage_ratio")
            nodes = self.nodes()[["node", "pool", "capacity_ge"]]
            return nodes.merge(ratio.reset_index(), on="node", how="left").fillna({"coverage_ratio": 0.0})

        return self._cached("node_coverage", compute)

    def pending_detail(self) -> pd.DataFrame:
        pending = self.recorded.present.pending
        if self._clusters:  # a pending pod is its cluster's (its qualified name says which)
            pending = pending[pending["pod"].map(cluster_of).isin(self._clusters)]
        return pending[["namespace", "pod", "pool_free_ge", "largest_free_block_ge"]]


def _at_end(marked: pd.DataFrame) -> pd.DataFrame:
    """The rows of the last sample."""
    return marked[marked["timestamp"] == marked["timestamp"].max()] if len(marked) else marked


def _held_at_end(marked: pd.DataFrame) -> set[tuple[str, str]]:
    """The pods (namespace, pod) holding GPUs at the last sample."""
    last = _at_end(marked)
    return set(zip(last["namespace"], last["pod"], strict=True))


def _ratio(top: pd.DataFrame, bottom: pd.DataFrame, *, zero: bool = False) -> pd.DataFrame:
    """timestamp, pool, fragmentation_ratio = top ÷ bottom per bucket and pool (0 where bottom is 0 when
    `zero`, else left out)."""
    keys = ["timestamp", "pool"]
    b = bottom.set_index(keys)["value"]
    t = top.set_index(keys)["value"].reindex(b.index).fillna(0.0)
    ratio = t / b.where(b > 0)
    ratio = ratio.fillna(0.0) if zero else ratio.dropna()
    return ratio.rename("fragmentation_ratio").reset_index()


def _scope_pools(scope: Scope, nodes: pd.DataFrame) -> tuple[str, ...] | None:
    """The pools a scope keeps (None: all): its pools, narrowed to those holding nodes of its products."""
    if not (scope.pools or scope.products):
        return None
    pools = set(scope.pools) if scope.pools else set(nodes["pool"].astype("str"))
    if scope.products:
        pools &= set(nodes.loc[nodes["product"].isin(scope.products), "pool"].astype("str"))
    return tuple(sorted(pools))
