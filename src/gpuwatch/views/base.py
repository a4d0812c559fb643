"""The interface both read paths serve: a window under a scope, its report and the frames pages draw."""

import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TypeVar

import pandas as pd

from gpuwatch.analytics.queuetables import QueueTables
from gpuwatch.core.model import LEDGER_STATES, Window
from gpuwatch.surfaces.report import IDLE_SPLIT, Report, Rightsizing, queue_sections, rightsizing_of

MAX_POINTS: Final = 480  # points per time series sent to the browser; samples are averaged into buckets
STATE_COLUMNS: Final = [f"{s}_ge" for s in LEDGER_STATES]
TEAM_TIMELINE_COLUMNS: Final = ["held_ge", "unknown_ge", "idle_ge", "active_ge", "used_ge"]
MIN_TREND_COVERAGE: Final = 0.9
T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class Scope:
    """The part of the fleet a view shows: clusters, pools, products and teams (empty: all)."""

    pools: tuple[str, ...] = ()
    products: tuple[str, ...] = ()
    teams: tuple[str, ...] = ()
    clusters: tuple[str, ...] = ()

    @property
    def scoped(self) -> bool:
        return bool(self.pools or self.products or self.teams or self.clusters)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadPath:
    """Where a view's numbers come from and the resolution its time series are drawn at."""

    recorded: bool  # gpuwatch_* history aggregated in PromQL; False: recomputed from DCGM samples
    resolution_seconds: int

    def describe(self) -> str:
        """ "from recorded history, 5 min resolution" / "recomputed from DCGM samples, 1 min resolution"."""
        what = "from recorded history" if self.recorded else "recomputed from DCGM samples"
        return f"{what}, {duration_text(self.resolution_seconds)} resolution"


def duration_text(seconds: float) -> str:
    """ "45 s", "5 min", "1.5 h"."""
    if seconds < 60:
        return f"{seconds:g} s"
    if seconds < 3600:
        return f"{seconds / 60:g} min"
    return f"{seconds / 3600:g} h"


def bucket_factor(window: Window) -> int:
    """Samples of the window per drawn point: at most MAX_POINTS points per series."""
    return max(1, math.ceil(window.n_samples / MAX_POINTS))


def bucket_seconds(window: Window) -> int:
    return window.step_seconds * bucket_factor(window)


class FleetView(ABC):
    """One window under one scope: its report (SPEC §4.2) and the frames the pages draw.

    Every frame is O(groups × points drawn) or O(nodes); GE are GPU-equivalents, timelines are bucket
    means (timestamp = bucket start). Both read paths return the same columns.

    The report comes in three depths, each read when first asked for: `headline` (its fleet, pending
    pods, coverage and team names are the report's), `summary` (also its teams', namespaces' and pools'
    rows) and `report` (also every workload row). On the raw path all three are the one report; on the
    recorded path over the whole fleet the headline needs no per-pod series, the summary has Prometheus
    sum the pods' GE per namespace and pool and count the pods, and only the report reads every pod's
    sums: pages draw the few workloads they show with top_workloads(), top_idle_workloads(), idle_now()
    and idle_waste(), and right-sizing's rows from its own families with rightsizing()."""

    def __init__(self, *, scope: Scope, headline: Report, computed_at: datetime, read_path: ReadPath) -> None:
        self.scope = scope
        self.headline = headline
        self.computed_at = computed_at
        self.read_path = read_path
        self._memo: dict[str, Any] = {}
        self._memo_lock = threading.Lock()

    @property
    @abstractmethod
    def window(self) -> Window: ...

    @abstractmethod
    def scoped(self, scope: Scope) -> "FleetView":
        """This (whole-fleet) view narrowed to `scope`."""

    @abstractmethod
    def ledger_timeline(self) -> pd.DataFrame:
        """timestamp and GE per ledger state (STATE_COLUMNS)."""

    @abstractmethod
    def team_timeline(self) -> pd.DataFrame:
        """timestamp, team and TEAM_TIMELINE_COLUMNS: held GE, of it unknown (no telemetry), idle and
        active, and used GE (utilization × GE where known)."""

    @abstractmethod
    def fragmentation_timeline(self) -> pd.DataFrame:
        """timestamp, pool, fragmentation_ratio."""

    @abstractmethod
    def fragmentation_ratio(self) -> float:
        """The window's fragmentation ratio over the scope's pools (0 when nothing was free)."""

    @abstractmethod
    def state_usd(self) -> dict[str, float]:
        """Dollars of each ledger state over the window (GE-hours × the pool's price)."""

    @abstractmethod
    def nodes(self) -> pd.DataFrame:
        """The scope's GPU nodes now: node, pool, product, replicas, capacity_ge, allocatable_ge, ready,
        schedulable."""

    @abstractmethod
    def nodes_now(self) -> pd.DataFrame:
        """nodes() with GE per ledger state (STATE_COLUMNS) at the window's end, sorted by pool, node."""

    @abstractmethod
    def held_now(self) -> dict[str, float]:
        """GE each team holds at the window's end."""

    @abstractmethod
    def held_at_end(self) -> set[tuple[str, str]]:
        """(namespace, pod) of the workloads still holding GPUs at the window's end."""

    @abstractmethod
    def gpu_holders(self) -> pd.DataFrame:
        """uuid, gpu_instance_id, holders ("namespace/pod (team)" joined): who holds each unit at the end."""

    @abstractmethod
    def node_coverage(self) -> pd.DataFrame:
        """node, pool, capacity_ge, coverage_ratio: the share of the window the node's GPUs reported."""

    @abstractmethod
    def pending_detail(self) -> pd.DataFrame:
        """namespace, pod, pool_free_ge, largest_free_block_ge of the pending GPU pods at the end."""

    def queue_report(self) -> dict[str, Any]:
        """The report's kueue, queues, fairness, blocked_vs_idle and reclaim_candidates sections of
        queue_tables() (on the recorded path without reading every pod's families)."""
        return self._cached("queue_report", lambda: queue_sections(self.queue_tables()))

    @abstractmethod
    def queue_tables(self) -> QueueTables:
        """The window's queues (the report's queues, fairness, blocked_vs_idle and reclaim_candidates),
        with borrowing over time and each wait, for drawing."""

    # -- shared ---------------------------------------------------------------------------------

    @property
    def summary(self) -> Report:
        """The headline with the report's team, namespace and pool rows (its workload rows may be
        empty)."""
        return self._cached("summary", self._summary)

    def _summary(self) -> Report:
        return self.headline

    @property
    def report(self) -> Report:
        """The whole report: the summary with every workload row."""
        return self._cached("report", self._whole_report)

    def _whole_report(self) -> Report:
        return self.summary

    def idle_workloads(self) -> list[dict[str, Any]]:
        """The report's workload rows with idle-allocated GPU-hours, most wasteful first; on the recorded
        path over the whole fleet read from the idle pods' series alone, with namespace, pod, team,
        node, pool, gpus, idle_gpu_hours, waste_usd and idle_since."""
        return self._cached(
            "idle_workloads", lambda: [w for w in self.report["workloads"] if w["idle_gpu_hours"] > 0]
        )

    def idle_waste(self) -> list[dict[str, Any]]:
        """namespace, pod, team, idle_gpu_hours (held and abandoned) and waste_usd of every
        idle_workloads() row (on the recorded path over the whole fleet, from the idle pods' families
        alone)."""
        keys = ("namespace", "pod", "team", "idle_gpu_hours", *IDLE_SPLIT, "waste_usd")
        return self._cached("idle_waste", lambda: [{k: w[k] for k in keys} for w in self.idle_workloads()])

    def idle_now(self) -> list[dict[str, Any]]:
        """The idle_workloads() rows idle at the window's end and still holding GPUs there: every GPU of
        them idle at their last sample (idle_since set), most wasteful first; on the recorded path over
        the whole fleet read from what the exporter published last and the idle pods' family."""

        def compute() -> list[dict[str, Any]]:
            held = self.held_at_end()
            rows = self.idle_workloads()
            return [w for w in rows if w["idle_since"] and (w["namespace"], w["pod"]) in held]

        return self._cached("idle_now", compute)

    def top_workloads(self, n: int) -> list[dict[str, Any]]:
        """The report's first n workload rows (most wasteful, then most allocated, first); on the recorded
        path over the whole fleet only those pods' series are read when n of them had waste, and not
        right-sizing's: their recommendation is None there."""
        rows: list[dict[str, Any]] = self.report["workloads"][:n]
        return rows

    def rightsizing(self) -> Rightsizing:
        """The report's right-sizing: every workload row with its recommendation, the changes and the
        biggest savings first, and the savings and packing summary (on the recorded path over the whole
        fleet, from right-sizing's pod families alone: historytables.RIGHTSIZE_FAMILIES)."""
        return self._cached("rightsizing", lambda: rightsizing_of(self.report))

    def pool_rows(self) -> list[dict[str, Any]]:
        """The report's pool rows (on the recorded path over the whole fleet, of the pods' series only
        their busy GE per pool is read)."""
        rows: list[dict[str, Any]] = self.summary["pools"]
        return rows

    def workload_count(self) -> int:
        """How many workload rows the report has."""
        return sum(int(r["pods"]) for r in self.summary["namespaces"])

    def top_idle_workloads(self, n: int) -> list[dict[str, Any]]:
        """The n most wasteful idle_workloads() rows with waste (on the recorded path over the whole
        fleet, ranked from the idle pods' family; only those n pods' last samples are read)."""
        return [w for w in self.idle_workloads() if w["waste_usd"] > 0][:n]

    def history_gaps(self) -> list[str]:
        """One line per stretch of the window its read path has no record of (raw: none)."""
        return []

    def drawn(self, name: str, draw: Callable[[], T]) -> T:
        """What a page drew of this view (`name`: the page and what else it drew it with), drawn once: a
        view's numbers never change, so neither does their drawing (a new window or refresh is a new view)."""
        return self._cached(f"drawn:{name}", draw)

    def _cached(self, name: str, compute: Callable[[], T]) -> T:
        with self._memo_lock:
            if name in self._memo:
                hit: T = self._memo[name]
                return hit
        value = compute()
        with self._memo_lock:
            self._memo[name] = value
        return value

    @property
    def last_sample(self) -> pd.Timestamp:
        """The start of the window's last sample (what "now" means in a view)."""
        w = self.window
        return pd.Timestamp(w.start) + pd.Timedelta(seconds=(w.n_samples - 1) * w.step_seconds)

    def state_usd_total(self) -> float:
        """Dollars of the whole capacity over the window."""
        return sum(self.state_usd().values())

    def allocated_now(self) -> float:
        """GE allocated at the window's end."""
        return sum(self.held_now().values())

    def team_changes(self, previous: Report) -> pd.DataFrame:
        """Per team, the change since `previous`, the report of the window just before this one (see
        team_changes)."""
        return self._cached("team_changes", lambda: team_changes(self.summary, previous))


def bucketed(
    frame: pd.DataFrame, window: Window, values: list[str], by: tuple[str, ...] = ()
) -> pd.DataFrame:
    """Per-sample totals averaged into at most MAX_POINTS buckets (a missing sample counts as 0).

    `frame` holds rows per sample (and `by` group) whose `values` are summed per sample first; the
    bucket's value is that sum averaged over every sample of the window in the bucket.
    """
    factor = bucket_factor(window)
    width = pd.Timedelta(seconds=window.step_seconds * factor)
    start = pd.Timestamp(window.start)
    index = (frame["timestamp"] - start) // width
    summed = frame.assign(bucket=index).groupby(["bucket", *by], as_index=False)[values].sum()
    counts = pd.Series(range(window.n_samples)) // factor
    per_bucket = counts.value_counts().sort_index()
    summed[values] = summed[values].div(summed["bucket"].map(per_bucket).to_numpy(), axis=0)
    summed.insert(0, "timestamp", start + summed["bucket"].astype("int64") * width)
    return summed.drop(columns=["bucket"]).sort_values(["timestamp", *by], ignore_index=True)


def team_changes(current: Report, previous: Report) -> pd.DataFrame:
    """Per team of `current`, its change since `previous` (the window just before, of the same length).

    Columns: team, allocated_gpu_hours_change_ratio (allocated GE-hours now ÷ before − 1: 0.12 is +12 %),
    efficiency_change_ratio (efficiency now − before, in ratio units: 0.032 is +3.2 pp). NaN where the
    team allocated nothing before or an efficiency is unknown: no data is never a change of 0. NaN for
    every team when the window before is less than MIN_TREND_COVERAGE as well covered by telemetry as
    this one (it reaches past the start of the data, say): a half-empty period is no baseline.
    """
    comparable = _covered(previous) >= MIN_TREND_COVERAGE * _covered(current)
    before = {t["team"]: t for t in previous["teams"]} if comparable else {}
    rows = []
    for team in current["teams"]:
        past = before.get(team["team"], {})
        allocated_before = _known(past.get("allocated_gpu_hours"))
        rows.append(
            {
                "team": team["team"],
                "allocated_gpu_hours_change_ratio": (
                    team["allocated_gpu_hours"] / allocated_before - 1 if allocated_before > 0 else math.nan
                ),
                "efficiency_change_ratio": _known(team["efficiency"]) - _known(past.get("efficiency")),
            }
        )
    columns = ["team", "allocated_gpu_hours_change_ratio", "efficiency_change_ratio"]
    return pd.DataFrame(rows, columns=columns).astype({c: "float64" for c in columns[1:]})


def _covered(report: Report) -> float:
    """Share of the expected GPU-samples present (0 when none were expected)."""
    coverage = report["coverage"]
    expected = coverage["gpu_samples_expected"]
    return coverage["gpu_samples_present"] / expected if expected else 0.0


def _known(value: float | None) -> float:
    """A report number as a float: None (unknown) is NaN."""
    return math.nan if value is None else float(value)
