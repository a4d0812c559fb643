"""FleetService: the one place where sources meet analytics, with a small cache per window."""

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

import numpy as np
import pandas as pd

from gpuwatch.config import Settings
from gpuwatch.model import TeamRules, ge_per_unit, normalize_product
from gpuwatch.sources.kubernetes import ClusterState
from gpuwatch.sources.simulated.fleet import DEMO_NAMESPACE_TEAMS, SimulatedFleet, build_demo_fleet


class Closable(Protocol):
    @property
    def url(self) -> str: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetSnapshot:
    """Basic fleet numbers at the end of a window (the full ledger lives in the report)."""

    as_of: datetime
    nodes: int
    gpus: int
    pools: tuple[str, ...]
    teams: tuple[str, ...]
    gpus_allocated_now: float
    pods_running: int
    pods_pending: int
    mean_util_ratio: float  # over GPUs with telemetry in the window; NaN when none reported
    nodes_not_ready: int
    nodes_cordoned: int


def demo_settings(settings: Settings | None = None) -> Settings:
    """The demo fleet's settings: its notebooks namespace belongs to data-science (SPEC §4.1)."""
    base = settings or Settings()
    namespaces = {**DEMO_NAMESPACE_TEAMS, **base.teams.namespaces}
    teams = TeamRules(
        pod_label_keys=base.teams.pod_label_keys,
        namespace_label_keys=base.teams.namespace_label_keys,
        namespaces=namespaces,
    )
    return Settings(
        prometheus=base.prometheus,
        kubernetes=base.kubernetes,
        teams=teams,
        pricing=base.pricing,
        idle=base.idle,
    )


class FleetService:
    """Answers the questions of the UI and the CLI for one fleet (simulated for now)."""

    def __init__(
        self,
        *,
        settings: Settings,
        fleet_factory: Callable[[], SimulatedFleet] | None = None,
    ) -> None:
        self.settings = settings
        self._fleet_factory = fleet_factory or build_demo_fleet
        self._fleet: SimulatedFleet | None = None
        self._lock = threading.Lock()

    def fleet(self) -> SimulatedFleet:
        with self._lock:
            if self._fleet is None:
                self._fleet = self._fleet_factory()
            return self._fleet

    def snapshot(self) -> FleetSnapshot:
        fleet = self.fleet()
        pods = fleet.api_pods()
        running = [p for p in pods if p.phase == "Running" and p.gpu_requests]
        held_now = sum(a.ge for a in fleet.allocations if a.end is None)
        util = fleet.util_ratio
        mean_util = float(np.nanmean(util)) if np.isfinite(util).any() else float("nan")
        return FleetSnapshot(
            as_of=fleet.now.astimezone(UTC),
            nodes=len(fleet.nodes),
            gpus=sum(n.gpu_count for n in fleet.nodes),
            pools=tuple(sorted({n.pool for n in fleet.nodes})),
            teams=tuple(sorted({fleet.team_of(p) for p in pods if p.gpu_requests})),
            gpus_allocated_now=held_now,
            pods_running=len(running),
            pods_pending=sum(1 for p in pods if p.phase == "Pending" and p.gpu_requests),
            mean_util_ratio=mean_util,
            nodes_not_ready=sum(1 for n in fleet.nodes if not n.ready),
            nodes_cordoned=sum(1 for n in fleet.nodes if n.unschedulable),
        )


# ---------------------------------------------------------------------------------------------
# The simulated fleet as outside systems (for `gpuwatch simulate`, tests and the demo).


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationParams:
    seed: int = 42
    end: datetime | None = None  # None: the current hour
    days: float = 1.0
    step_seconds: int = 60
    gpus: int | None = None  # None: the 80-GPU demo fleet

    def build(self) -> SimulatedFleet:
        return build_demo_fleet(
            seed=self.seed, end=self.end, days=self.days, step_seconds=self.step_seconds, gpus=self.gpus
        )


def write_simulated_backfill(
    path: str,
    params: SimulationParams,
    *,
    layout: str,
    metrics: Sequence[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Write an OpenMetrics backfill of the simulated fleet; returns the number of samples written."""
    from gpuwatch.sources.simulated.exposition import write_backfill

    fleet = params.build()
    with open(path, "w", encoding="utf-8") as out:
        return write_backfill(fleet, out, layout=layout, metrics=metrics, progress=progress)


def serve_simulated_metrics(params: SimulationParams, *, host: str, port: int) -> "Closable":
    """Serve the fleet's dcgm-exporter /metrics until closed."""
    from gpuwatch.sources.simulated.exposition import serve_metrics

    return serve_metrics(params.build(), host=host, port=port)


def serve_simulated_kube_api(
    params: SimulationParams, *, host: str, port: int, token: str | None, kubeconfig_path: str | None
) -> "Closable":
    """Serve the fleet's Kubernetes API list endpoints until closed; optionally write a kubeconfig."""
    from gpuwatch.sources.simulated.kubeapi import KubeApiServer, write_kubeconfig

    server = KubeApiServer(params.build(), host=host, port=port, token=token)
    server.start()
    if kubeconfig_path:
        write_kubeconfig(kubeconfig_path, server_url=server.url, token=token)
    return server


def replay_openb_trace(
    nodes_csv: str,
    pods_csv: str,
    *,
    start: datetime,
    days: float,
    step_seconds: int,
    seed: int,
    offset_days: float | None = None,
    lifetime_scale: float = 1.0,
) -> dict[str, float | int]:
    """Replay an Alibaba openb node/pod trace (Weng et al., ATC'23) and summarize the result.

    offset_days None replays the trace's last `days` (where nearly all of its pods arrive).
    """
    from pathlib import Path

    from gpuwatch.sources.simulated.trace import last_days_offset_seconds, load_openb, replay_openb, summary

    trace = load_openb(Path(nodes_csv), Path(pods_csv))
    offset = last_days_offset_seconds(trace, days) if offset_days is None else offset_days * 86400
    fleet = replay_openb(
        trace,
        start=start,
        days=days,
        step_seconds=step_seconds,
        seed=seed,
        offset_seconds=offset,
        lifetime_scale=lifetime_scale,
    )
    return summary(fleet)


# ---------------------------------------------------------------------------------------------
# From sources to the frames analytics take.


def pods_frame(state: ClusterState, rules: TeamRules, *, phase: str = "Running") -> pd.DataFrame:
    """GPU pods of a phase with team, pool and requested GE (time-slice replicas sized by node)."""
    nodes = {n.name: n for n in state.nodes}
    ns_labels = {n.name: n.labels for n in state.namespaces}
    rows = []
    for pod in state.gpu_pods():
        if pod.phase != phase:
            continue
        node = nodes.get(pod.node or "")
        replicas = node.replicas if node else 1
        rows.append(
            {
                "namespace": pod.namespace,
                "pod": pod.name,
                "team": rules.team_of(
                    namespace=pod.namespace,
                    pod_labels=pod.labels,
                    namespace_labels=ns_labels.get(pod.namespace, {}),
                ),
                "node": pod.node or "",
                "pool": node.pool if node else normalize_product(pod.node_selector_product or "") or "",
                "requested_ge": sum(ge_per_unit(r, replicas) * q for r, q in pod.gpu_requests.items()),
                "requested_gpus": sum(q for r, q in pod.gpu_requests.items()),
                "started_at": pod.started_at,
                "created_at": pod.created_at,
            }
        )
    columns = [
        "namespace",
        "pod",
        "team",
        "node",
        "pool",
        "requested_ge",
        "requested_gpus",
        "started_at",
        "created_at",
    ]
    frame = pd.DataFrame(rows, columns=columns)
    frame["started_at"] = pd.to_datetime(frame["started_at"], utc=True)
    frame["created_at"] = pd.to_datetime(frame["created_at"], utc=True)
    return frame


def nodes_frame(state: ClusterState) -> pd.DataFrame:
    """One row per GPU node: pool, product, capacity and allocatable GE, readiness, cordon."""
    return pd.DataFrame(
        [
            {
                "node": n.name,
                "pool": n.pool,
                "product": n.product,
                "replicas": n.replicas,
                "capacity_ge": float(n.gpu_count),
                "allocatable_ge": min(float(n.gpu_count), n.allocatable_gpus()),
                "ready": n.ready,
                "schedulable": not n.unschedulable,
            }
            for n in state.nodes
        ],
        columns=[
            "node",
            "pool",
            "product",
            "replicas",
            "capacity_ge",
            "allocatable_ge",
            "ready",
            "schedulable",
        ],
    )


def namespace_teams(state: ClusterState, rules: TeamRules) -> dict[str, str]:
    """Team of each namespace when nothing is known of the pod (its labels are gone with it)."""
    return {
        n.name: rules.team_of(namespace=n.name, pod_labels={}, namespace_labels=n.labels)
        for n in state.namespaces
    }
