"""The raw read path: a view recomputed from DCGM samples and the API server (service.analysis)."""

from dataclasses import replace
from datetime import datetime

import pandas as pd

from gpuwatch.analytics.queuetables import QueueSetup, QueueTables, no_queues
from gpuwatch.core.model import LEDGER_STATES, Window, cluster_of
from gpuwatch.read.analysis import Analysis, pool_fragmentation
from gpuwatch.surfaces.report import report_and_queues
from gpuwatch.views.base import STATE_COLUMNS, TEAM_TIMELINE_COLUMNS, FleetView, ReadPath, Scope, bucketed


class RawView(FleetView):
    """A window's analysis (per GPU-sample frames) narrowed to a scope; its report is build_report's."""

    def __init__(
        self,
        *,
        analysis: Analysis,
        computed_at: datetime,
        scope: Scope | None = None,
        queues: QueueSetup | None = None,
    ) -> None:
        scope = scope or Scope()
        self.base = analysis
        self.analysis = filter_analysis(analysis, scope)
        self.queues = queues or no_queues()
        path = ReadPath(recorded=False, resolution_seconds=analysis.window.step_seconds)
        headline, self._queue_tables = report_and_queues(self.analysis, queues=self.queues)
        super().__init__(scope=scope, headline=headline, computed_at=computed_at, read_path=path)

    @property
    def window(self) -> Window:
        return self.analysis.window

    def scoped(self, scope: Scope) -> "RawView":
        return RawView(analysis=self.base, computed_at=self.computed_at, scope=scope, queues=self.queues)

    def ledger_timeline(self) -> pd.DataFrame:
        return self._cached(
            "ledger_timeline", lambda: bucketed(self.analysis.by_node, self.window, STATE_COLUMNS)
        )

    def state_usd(self) -> dict[str, float]:
        def compute() -> dict[str, float]:
            by_node = self.analysis.by_node
            price = self.analysis.rates.at(by_node["pool"], by_node["timestamp"])
            hours = self.window.step_hours
            return {s: float((by_node[f"{s}_ge"] * price).sum() * hours) for s in LEDGER_STATES}

        return self._cached("state_usd", compute)

    def nodes(self) -> pd.DataFrame:
        return self.analysis.nodes

    def nodes_now(self) -> pd.DataFrame:
        def compute() -> pd.DataFrame:
            by_node = self.analysis.by_node
            last = by_node[by_node["timestamp"] == self.last_sample][["node", *STATE_COLUMNS]]
            nodes = self.analysis.nodes.merge(last, on="node", how="left").fillna(
                dict.fromkeys(STATE_COLUMNS, 0.0)
            )
            return nodes.sort_values(["pool", "node"], ignore_index=True)

        return self._cached("nodes_now", compute)

    def fragmentation_timeline(self) -> pd.DataFrame:
        def compute() -> pd.DataFrame:
            per_pool = self.analysis.per_pool
            frame = bucketed(per_pool, self.window, ["fragmented_ge", "schedulable_free_ge"], by=("pool",))
            ratio = frame["fragmented_ge"] / frame["schedulable_free_ge"].where(
                frame["schedulable_free_ge"] > 0
            )
            return frame.assign(fragmentation_ratio=ratio.fillna(0.0))[
                ["timestamp", "pool", "fragmentation_ratio"]
            ]

        return self._cached("fragmentation_timeline", compute)

    def fragmentation_ratio(self) -> float:
        per_pool = self.analysis.per_pool
        free = float(per_pool["schedulable_free_ge"].sum())
        return float(per_pool["fragmented_ge"].sum()) / free if free > 0 else 0.0

    def team_timeline(self) -> pd.DataFrame:
        def compute() -> pd.DataFrame:
            marked = self.analysis.marked
            ge = marked["ge_share"]
            unknown = marked["util_ratio"].isna()
            idle = marked["idle"] & ~unknown
            frame = pd.DataFrame(
                {
                    "timestamp": marked["timestamp"],
                    "team": marked["team"],
                    "held_ge": ge,
                    "unknown_ge": ge.where(unknown, 0.0),
                    "idle_ge": ge.where(idle, 0.0),
                    "active_ge": ge.where(~(idle | unknown), 0.0),
                    "used_ge": (marked["util_ratio"] * ge).fillna(0.0),
                }
            )
            return bucketed(frame, self.window, TEAM_TIMELINE_COLUMNS, by=("team",))

        return self._cached("team_timeline", compute)

    def _last(self) -> pd.DataFrame:
        marked = self.analysis.marked
        return marked[marked["timestamp"] == self.last_sample]

    def held_now(self) -> dict[str, float]:
        def compute() -> dict[str, float]:
            return {str(k): float(v) for k, v in self._last().groupby("team")["ge_share"].sum().items()}

        return self._cached("held_now", compute)

    def held_at_end(self) -> set[tuple[str, str]]:
        def compute() -> set[tuple[str, str]]:
            last = self._last()
            return set(zip(last["namespace"], last["pod"], strict=True))

        return self._cached("held_at_end", compute)

    def gpu_holders(self) -> pd.DataFrame:
        return self._cached("gpu_holders", lambda: holders(self._last()))

    def node_coverage(self) -> pd.DataFrame:
        def compute() -> pd.DataFrame:
            units = self.analysis.units_reporting
            counts = units.groupby("node", as_index=False).agg(samples_reporting=("timestamp", "nunique"))
            nodes = self.analysis.nodes[["node", "pool", "capacity_ge"]].merge(counts, on="node", how="left")
            ratio = nodes.pop("samples_reporting").fillna(0) / self.window.n_samples
            return nodes.assign(coverage_ratio=ratio.astype("float64"))

        return self._cached("node_coverage", compute)

    def pending_detail(self) -> pd.DataFrame:
        return self.analysis.pending[["namespace", "pod", "pool_free_ge", "largest_free_block_ge"]]

    def queue_tables(self) -> QueueTables:
        return self._queue_tables


def holders(last: pd.DataFrame) -> pd.DataFrame:
    """uuid, gpu_instance_id, holders ("namespace/pod (team)" joined) of the attributed rows of one sample."""
    text = {c: last[c].astype("str") for c in ("namespace", "pod", "team")}
    label = text["namespace"] + "/" + text["pod"] + " (" + text["team"] + ")"
    return (
        last.assign(holder=label)
        .groupby(["uuid", "gpu_instance_id"], as_index=False)
        .agg(holders=("holder", lambda s: ", ".join(sorted(set(s)))))
    )


def filter_analysis(analysis: Analysis, scope: Scope) -> Analysis:
    """The analysis narrowed to the scope's pools/products (nodes) and teams (workloads, pending pods).

    Under a team filter the ledger keeps the team's own GPU-hours only (allocated idle and active, from
    its workloads' samples): free, stranded and broken GPUs belong to no team. Fragmentation and free
    capacity follow pools and products only. With no filter the analysis itself is returned, so its
    numbers are the report's exactly.
    """
    if not scope.scoped:
        return analysis
    nodes = analysis.nodes
    if scope.clusters:
        nodes = nodes[nodes["cluster"].isin(scope.clusters)]
    if scope.pools:
        nodes = nodes[nodes["pool"].isin(scope.pools)]
    if scope.products:
        nodes = nodes[nodes["product"].isin(scope.products)]
    by_nodes = bool(scope.pools or scope.products or scope.clusters)
    names, pools = set(nodes["node"]), set(nodes["pool"])

    def on_nodes(frame: pd.DataFrame) -> pd.DataFrame:
        return frame[frame["node"].isin(names)].reset_index(drop=True) if by_nodes else frame

    marked, pending, per_pool = on_nodes(analysis.marked), analysis.pending, analysis.per_pool
    if by_nodes:  # a pool's fragmentation over the scope's nodes (a cluster's, of a pool spanning several)
        pending = pending[pending["pool"].isin(pools)]
        per_pool = pool_fragmentation(on_nodes(analysis.free))
    if scope.clusters:  # a pending pod is its cluster's (its qualified name says which)
        pending = pending[pending["pod"].map(cluster_of).isin(scope.clusters)]
    if scope.teams:
        marked = marked[marked["team"].isin(scope.teams)].reset_index(drop=True)
        pending = pending[pending["team"].isin(scope.teams)]
    energy = None if analysis.energy is None else on_nodes(analysis.energy)
    if scope.teams and energy is not None:  # the teams' share of their GPUs' energy, no GPU's unheld rest
        energy = energy[energy["team"].isin(scope.teams)].reset_index(drop=True)
    held = marked[["namespace", "pod"]].drop_duplicates()
    by_node = on_nodes(analysis.by_node)
    if scope.teams:
        by_node = _team_ledger(by_node, marked)
    return replace(
        analysis,
        unreachable={
            c: why for c, why in analysis.unreachable.items() if not scope.clusters or c in scope.clusters
        },
        nodes=nodes.reset_index(drop=True),
        marked=marked,
        by_node=by_node,
        per_pool=per_pool,
        free=on_nodes(analysis.free),
        pending=pending.reset_index(drop=True),
        idle_since=analysis.idle_since.merge(held, on=["namespace", "pod"], how="inner"),
        units_reporting=on_nodes(analysis.units_reporting),
        energy=energy,
    )


def _team_ledger(by_node: pd.DataFrame, marked: pd.DataFrame) -> pd.DataFrame:
    """The node ledger holding only what `marked` (some teams' samples) allocated: unknown, idle or active."""
    ge = marked["ge_share"]
    unknown = marked["util_ratio"].isna()
    idle = marked["idle"] & ~unknown
    allocated = {
        "allocated_unknown_ge": ge.where(unknown, 0.0),
        "allocated_idle_ge": ge.where(idle, 0.0),
        "allocated_active_ge": ge.where(~(idle | unknown), 0.0),
    }
    held = (
        pd.DataFrame({"timestamp": marked["timestamp"], "node": marked["node"].astype("str"), **allocated})
        .groupby(["timestamp", "node"], as_index=False)
        .sum()
    )
    keys = by_node[["timestamp", "node", "pool"]].assign(node=by_node["node"].astype("str"))
    out = keys.merge(held, on=["timestamp", "node"], how="left").fillna(dict.fromkeys(allocated, 0.0))
    for state in ("unavailable", "stranded", "unallocated"):
        out[f"{state}_ge"] = 0.0
    out["capacity_ge"] = out[list(allocated)].sum(axis=1)
    out["overallocated_ge"] = 0.0
    return out[list(by_node.columns)].astype(by_node.dtypes.to_dict())
