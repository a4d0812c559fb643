"""FleetService: the one place where sources meet analytics, with a small cache per window."""

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Protocol

import numpy as np
import pandas as pd

from gpuwatch.analytics.cost import PoolRates, ledger_cost, price_warnings, usage_cost
from gpuwatch.analytics.energy import energy_by, window_energy
from gpuwatch.analytics.fragmentation import (
    diagnose_pending,
    fragmentation,
    fragmentation_summary,
    largest_free_block,
    request_mix,
)

# Re-exported (`as`): the UI and the CLI take these through the service layer, never from below it.
from gpuwatch.analytics.health import HOT_CELSIUS as HOT_CELSIUS
from gpuwatch.analytics.health import gpu_rows as gpu_rows
from gpuwatch.analytics.health import health_events as health_events
from gpuwatch.analytics.health import is_hot as is_hot
from gpuwatch.analytics.health import xid_text as xid_text
from gpuwatch.analytics.join import attribute
from gpuwatch.analytics.ledger import idle_since, ledger, ledger_gpu_hours, mark_idle, schedulable_free
from gpuwatch.analytics.rightsize import candidate_prices, packing_estimate, recommend, workload_usage
from gpuwatch.config import Settings, load_settings
from gpuwatch.errors import ConfigError, PrometheusError, SourceError
from gpuwatch.model import ALLOCATED_STATES, TeamRules, Window, ge_per_unit, normalize_product
from gpuwatch.schema import GPU_REQUESTS, NODE_SAMPLES, PENDING_PODS
from gpuwatch.series import Family, published_series
from gpuwatch.sources.clustercache import ClusterCache
from gpuwatch.sources.dcgm import DEV_FB_USED, DEV_POWER_USAGE, DEV_TOTAL_ENERGY_CONSUMPTION, ExporterPods
from gpuwatch.sources.kubernetes import ClusterState, KubernetesSource
from gpuwatch.sources.prometheus import PrometheusSource, allocation_history
from gpuwatch.sources.simulated.demo import (
    DEMO_BUDGETS,
    DEMO_NAMESPACE_TEAMS,
    build_demo_fleet,
    demo_price_book,
)
from gpuwatch.sources.simulated.demo import DEMO_HISTORY_DAYS as DEMO_HISTORY_DAYS
from gpuwatch.sources.simulated.demo import demo_end as demo_end
from gpuwatch.sources.simulated.fleet import SimulatedFleet
from gpuwatch.sources.simulated.source import SimulatedSource


class Closable(Protocol):
    @property
    def url(self) -> str: ...

    def close(self) -> None: ...


def demo_settings(settings: Settings | None = None, *, end: datetime | None = None) -> Settings:
    """The demo fleet's settings: notebooks belongs to data-science (SPEC §4.1), demo prices (with the
    A100's price change when the fleet's `end` is given) and budgets, unless the user brought their own."""
    base = settings or Settings()
    namespaces = {**DEMO_NAMESPACE_TEAMS, **base.teams.namespaces}
    teams = TeamRules(
        pod_label_keys=base.teams.pod_label_keys,
        namespace_label_keys=base.teams.namespace_label_keys,
        namespaces=namespaces,
    )
    pricing = base.pricing
    if not pricing.products and not pricing.amortization:
        pricing = demo_price_book(pricing.default_usd_per_gpu_hour, end, pricing.energy)
    budgets = base.budgets
    if not budgets.monthly_usd and not budgets.idle_usd_per_hour:
        budgets = DEMO_BUDGETS
    return replace(base, teams=teams, pricing=pricing, budgets=budgets)


class FleetSources(Protocol):
    """Where a FleetService reads the cluster and DCGM history: the live sources or the simulated fleet."""

    def cluster_state(self) -> ClusterState: ...

    def gpu_samples(self, window: Window, state: ClusterState) -> pd.DataFrame: ...

    def allocation_history(self, window: Window) -> pd.DataFrame | None: ...

    def take_warnings(self) -> list[str]: ...

    def now(self) -> datetime: ...

    def history_start(self) -> datetime | None: ...

    def recorded(self) -> PrometheusSource | None:
        """Where gpuwatch's own gpuwatch_* history can be read (None: nowhere, the raw path only)."""
        ...


class LiveSources:
    """Prometheus (DCGM and gpuwatch's own history) and the Kubernetes API server."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], datetime] | None = None,
        watch_cluster: bool = False,
        field_seconds: float | None = None,
    ) -> None:
        """field_seconds: read the framebuffer, energy and power only over a window's last this many
        seconds (the exporter publishes its last sample alone: reading them over its whole idle window
        would cost three more fields at every GPU-sample); None: over the whole window."""
        self.field_seconds = field_seconds
        self.prometheus = PrometheusSource.from_settings(settings.prometheus)
        self.kubernetes = KubernetesSource(
            kubeconfig=settings.kubernetes.kubeconfig, context=settings.kubernetes.context
        )
        # Long-running processes (export, serve) follow the cluster by watches: no list per cycle.
        self.cluster = ClusterCache(self.kubernetes) if watch_cluster else None
        self._clock = clock or (lambda: datetime.now(UTC))

    def cluster_state(self) -> ClusterState:
        if self.cluster is not None:
            return self.cluster.cluster_state()
        return self.kubernetes.cluster_state()

    def node_state(self) -> ClusterState:
        """The nodes (from the watches, or listed alone: no pod is listed)."""
        if self.cluster is not None:
            return self.cluster.cluster_state()
        return self.kubernetes.node_state()

    def gpu_samples(self, window: Window, state: ClusterState) -> pd.DataFrame:
        exporters = ExporterPods(node_by_pod=state.exporter_pod_nodes, node_by_ip=state.exporter_ip_nodes)
        # The framebuffer tells held idle GPUs (a model in memory) from abandoned ones; the energy counter
        # (power where a GPU has none) measures their energy (SPEC §3).
        fields = (DEV_FB_USED, DEV_TOTAL_ENERGY_CONSUMPTION, DEV_POWER_USAGE)
        whole = self.field_seconds is None or self.field_seconds >= window.duration_seconds
        recent = (
            0 if whole else window.n_samples - math.ceil(float(self.field_seconds or 0) / window.step_seconds)
        )
        if recent <= 0:
            samples = self.prometheus.gpu_samples(window, exporters=exporters, fields=fields)
        else:
            samples = self.prometheus.gpu_samples(window, exporters=exporters)
            tail = replace(window, start=window.sample_time(recent))
            extra = self.prometheus.gpu_samples(tail, exporters=exporters, fields=fields)
            units = ["timestamp", "uuid", "gpu_instance_id"]
            columns = [f.column for f in fields if f.column in extra]
            extra = extra.drop_duplicates(units)[[*units, *columns]].astype(dict.fromkeys(units[1:], "str"))
            keys = samples[units].astype(dict.fromkeys(units[1:], "str"))
            found = keys.merge(extra, on=units, how="left")
            samples = samples.assign(**{c: found[c].to_numpy() for c in columns})
        # A field no GPU reports is unknown for every GPU (NaN), not a field never asked for.
        return samples.assign(**{f.column: np.nan for f in fields if f.column not in samples})

    def allocation_history(self, window: Window) -> pd.DataFrame | None:
        return allocation_history(self.prometheus, window)

    def take_warnings(self) -> list[str]:
        return self.prometheus.take_warnings()

    def now(self) -> datetime:
        return self._clock()

    def history_start(self) -> datetime | None:
        return None  # Prometheus' retention decides; coverage says what is missing

    def recorded(self) -> PrometheusSource | None:
        return self.prometheus


class SimulatedSources:
    """The simulated fleet behind the FleetSources interface (the demo)."""

    def __init__(self, fleet: SimulatedFleet) -> None:
        self.fleet = fleet
        self._source = SimulatedSource(fleet)

    def cluster_state(self) -> ClusterState:
        return self._source.cluster_state()

    def gpu_samples(self, window: Window, state: ClusterState) -> pd.DataFrame:
        return self._source.gpu_samples(window)

    def allocation_history(self, window: Window) -> pd.DataFrame | None:
        return self._source.allocation_history(window)

    def take_warnings(self) -> list[str]:
        return []

    def now(self) -> datetime:
        return self.fleet.now

    def history_start(self) -> datetime | None:
        return self.fleet.window.start

    def recorded(self) -> PrometheusSource | None:
        return None  # the simulated fleet keeps no Prometheus history


class FleetService:
    """Answers the questions of the UI, the CLI and the exporter for one fleet, with a small cache."""

    def __init__(self, *, settings: Settings, sources: FleetSources, cache_size: int = 8) -> None:
        self.settings = settings
        self.sources = sources
        self._cache: dict[tuple[datetime, datetime, int], Analysis] = {}
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @classmethod
    def demo(
        cls,
        settings: Settings | None = None,
        fleet: SimulatedFleet | None = None,
        *,
        history_days: float = DEMO_HISTORY_DAYS,
    ) -> "FleetService":
        """The simulated fleet (built over `history_days` up to the current hour unless given): every
        window it is asked for lies within that history, so no day is invented empty."""
        fleet = fleet or build_demo_fleet(days=history_days)
        return cls(settings=demo_settings(settings, end=fleet.window.end), sources=SimulatedSources(fleet))

    @classmethod
    def from_environment(cls) -> "FleetService":
        """The fleet the GPUWATCH_* settings (or GPUWATCH_CONFIG's file) name: live when they give a
        Prometheus URL, else the simulated one (`gunicorn app:server` runs either)."""
        settings = load_settings()
        return cls.live(settings, watch_cluster=True) if settings.prometheus.url else cls.demo(settings)

    def history_start(self) -> datetime | None:
        """Where the sources' history begins, when they know (the simulated fleet's first sample)."""
        return self.sources.history_start()

    @classmethod
    def live(
        cls, settings: Settings, *, watch_cluster: bool = False, field_seconds: float | None = None
    ) -> "FleetService":
        """The fleet Prometheus and the API server describe; `watch_cluster` for long-running processes
        (the cluster kept by watches instead of listed per call); field_seconds as LiveSources'."""
        if not settings.prometheus.url:
            raise ConfigError(
                "no Prometheus URL: pass --prometheus-url, set GPUWATCH_PROMETHEUS_URL or the config"
            )
        sources = LiveSources(settings, watch_cluster=watch_cluster, field_seconds=field_seconds)
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


# ---------------------------------------------------------------------------------------------
# The simulated fleet as outside systems (for `gpuwatch simulate`, tests and the demo).


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationParams:
    seed: int = 42
    end: datetime | None = None  # None: the current hour
    days: float = 1.0
    step_seconds: int = 60
    gpus: int | None = None  # None: the 80-GPU demo fleet
    pods: int | None = None  # None: the demo's pod lifetimes

    def build(self) -> SimulatedFleet:
        return build_demo_fleet(
            seed=self.seed,
            end=self.end,
            days=self.days,
            step_seconds=self.step_seconds,
            gpus=self.gpus,
            pods=self.pods,
        )


def history_service(fleet: SimulatedFleet, settings: Settings | None = None) -> FleetService:
    """The simulated fleet's service for writing its history (with the demo's settings unless given):
    nothing cached, one analysis at a time."""
    return FleetService(settings=settings or demo_settings(), sources=SimulatedSources(fleet), cache_size=0)


def history_families(service: FleetService, chunk: Window) -> list[Family]:
    """The gpuwatch_* samples of the chunk as `gpuwatch export` would have published them all along.

    The analysis reaches back one idle window before the chunk, as the exporter's own does each cycle,
    so the idle rule holds at its first sample (and idle-since reaches back no further either).
    """
    step = timedelta(seconds=chunk.step_seconds)
    reach = math.ceil(service.settings.idle.window_seconds / chunk.step_seconds) * step + step
    first = max(service.history_start() or chunk.start, chunk.start - reach)
    analysis = service.analysis(replace(chunk, start=first))
    return published_series(_analysis_since(analysis, chunk.start), last_only=False)


def _analysis_since(analysis: "Analysis", start: datetime) -> "Analysis":
    """The analysis's per-sample frames from `start` on: each gpuwatch_* sample comes from the rows of its
    own timestamp, so this cuts the series as Family.between(start) would, at a fraction of the rows."""
    since = pd.Timestamp(start)

    def cut(frame: pd.DataFrame) -> pd.DataFrame:
        return frame[frame["timestamp"] >= since]

    return replace(
        analysis,
        marked=cut(analysis.marked),
        by_node=cut(analysis.by_node),
        per_pool=cut(analysis.per_pool),
        free=cut(analysis.free),
        units_reporting=cut(analysis.units_reporting),
        energy=None if analysis.energy is None else cut(analysis.energy),
    )


def serve_simulated_metrics(params: SimulationParams, *, host: str, port: int) -> "Closable":
    """Serve the fleet's dcgm-exporter /metrics until closed."""
    from gpuwatch.sources.simulated.exposition import serve_metrics

    fleet = params.build()
    try:
        return serve_metrics(fleet, host=host, port=port)
    except OSError as e:
        raise ConfigError(f"cannot serve /metrics on {host}:{port}: {e.strerror or e}") from e


def serve_simulated_kube_api(
    params: SimulationParams,
    *,
    host: str,
    port: int,
    token: str | None,
    kubeconfig_path: str | None,
    tls: bool = True,
    cpu_pods: int = 0,
) -> "Closable":
    """Serve the fleet's Kubernetes API until closed: over HTTPS with a CA made at start (tls=False: plain
    http), wanting the bearer `token` (None: anyone); optionally write a kubeconfig (URL, CA, token).
    `cpu_pods` adds that many running pods without GPUs, as a large cluster lists beside its GPU pods."""
    from gpuwatch.sources.simulated.kubeapi import KubeApiServer

    server = KubeApiServer(params.build(), host=host, port=port, token=token, tls=tls, cpu_pods=cpu_pods)
    try:
        server.start()
    except OSError as e:
        raise ConfigError(f"cannot serve the Kubernetes API on {host}:{port}: {e.strerror or e}") from e
    if kubeconfig_path:
        try:
            server.write_kubeconfig(kubeconfig_path)
        except OSError as e:
            server.close()
            raise ConfigError(f"cannot write the kubeconfig {kubeconfig_path}: {e.strerror or e}") from e
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
    for column in ("requested_ge", "requested_gpus"):
        frame[column] = frame[column].astype("float64")
    for column in ("namespace", "pod", "team", "node", "pool"):
        frame[column] = frame[column].astype("str")
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


# ---------------------------------------------------------------------------------------------
# The analysis of one window: join, idle, fragmentation, ledger, pending diagnosis, coverage.


@dataclass(frozen=True, slots=True, kw_only=True)
class Coverage:
    gpu_samples_expected: int
    gpu_samples_present: int
    unattributed_gpu_hours: float
    util_source: Mapping[str, int]
    warnings: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Analysis:
    """Everything a report, the UI and the exporter show for one window, as frames."""

    window: Window
    settings: Settings
    nodes: pd.DataFrame  # nodes_frame()
    marked: pd.DataFrame  # IDLE_MARKED: the attributed timeline with idle flags
    by_node: pd.DataFrame  # the ledger per node-sample (GE per state)
    per_pool: pd.DataFrame  # fragmentation per pool-sample
    free: pd.DataFrame  # SCHEDULABLE_FREE per node-sample
    pending: pd.DataFrame  # diagnose_pending()
    idle_since: pd.DataFrame  # per workload
    coverage: Coverage
    units_reporting: pd.DataFrame  # timestamp, node, units: GPU units with DCGM telemetry per sample
    pod_resources: pd.DataFrame  # namespace, pod, resource: the GPU resource each running pod requests
    rates: PoolRates  # each pool's USD per GPU-hour at each sample (commitments blended by the fleet's GPUs)
    # Per pod (or unheld part), GPU and sample: energy_joules and energy_cost_usd (window_energy());
    # None when the source reads no energy or power at all.
    energy: pd.DataFrame | None = None


def analyze(
    *,
    window: Window,
    state: ClusterState,
    gpu_samples: pd.DataFrame,
    settings: Settings,
    history: pd.DataFrame | None = None,
    source_warnings: Sequence[str] = (),
) -> Analysis:
    """Run the SPEC §3 model over one window of GPU samples and the cluster as the API server has it."""
    rules, idle = settings.teams, settings.idle
    sample_times = pd.date_range(window.start, periods=window.n_samples, freq=f"{window.step_seconds}s")
    pods = pods_frame(state, rules)
    nodes = nodes_frame(state)
    attribution = attribute(
        gpu_samples=gpu_samples,
        pods=pods,
        nodes=nodes,
        sample_times=sample_times,
        namespace_teams=namespace_teams(state, rules),
        history=history,
        busy_threshold=idle.threshold_ratio,
    )
    marked = mark_idle(attribution.attributed, step_seconds=window.step_seconds, idle=idle)
    node_samples = _node_samples(nodes, sample_times)
    free = schedulable_free(node_samples, marked)
    pending_pods = pods_frame(state, rules, phase="Pending")
    mix = request_mix(_gpu_requests(marked, pending_pods))
    per_node_frag, per_pool = fragmentation(free, mix)
    result = ledger(node_samples, marked, per_node_frag)
    pending = diagnose_pending(
        PENDING_PODS.check(
            pending_pods.rename(columns={"requested_ge": "gpus"})[
                ["namespace", "pod", "team", "pool", "gpus", "created_at"]
            ]
        ),
        free,
        as_of=window.end,
    )
    step_h = window.step_hours
    warnings = list(source_warnings) + list(state.warnings)
    warnings += price_warnings(nodes["pool"], settings.pricing)
    rates = PoolRates.of(settings.pricing, result.by_node)
    warnings += rates.unused_warnings(step_seconds=window.step_seconds)
    over = float(result.by_node["overallocated_ge"].sum()) * step_h
    if over > 0:
        warnings.append(
            f"{over:.2f} GPU-hours allocated beyond what nodes advertise (excluded from the ledger)"
        )
    if len(result.unknown_nodes):
        allocated_columns = [f"{state}_ge" for state in ALLOCATED_STATES]
        lost = float(result.unknown_nodes[allocated_columns].sum().sum()) * step_h
        names = ", ".join(sorted(result.unknown_nodes["node"].unique())[:5])
        warnings.append(f"{lost:.2f} GPU-hours allocated on nodes the API server does not list ({names})")
    if attribution.pods_without_telemetry:
        warnings.append(f"{attribution.pods_without_telemetry} running GPU pods have no DCGM telemetry")
    fb_unknown = 0.0
    if "memory_held" in marked:
        unknown_idle = marked["idle"] & marked["memory_held"].isna()
        fb_unknown = float(marked.loc[unknown_idle, "ge_share"].sum()) * step_h
    if fb_unknown > 0:
        warnings.append(
            f"{fb_unknown:.2f} idle GPU-hours have no framebuffer telemetry: neither held nor abandoned"
        )
    energy = None
    if "energy_joules" in gpu_samples or "power_watts" in gpu_samples:
        gpus = gpu_samples[["uuid", "node"]].drop_duplicates("uuid").astype("str")
        gpus["pool"] = gpus["node"].map(nodes.set_index("node")["pool"]).fillna("")
        energy, sources = window_energy(
            gpu_samples, marked, step_seconds=window.step_seconds, tariff=settings.pricing.energy, gpus=gpus
        )
        warnings += energy_warnings(sources)
    physical = gpu_samples.drop_duplicates(["timestamp", "uuid"])
    util_source = {
        source: int(physical.loc[physical["util_source"] == source, "uuid"].nunique())
        for source in ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL")
    }
    expected, present = _gpu_samples(result.by_node, physical)
    first = _first_time(physical)
    late = first is not None and first > window.start + timedelta(seconds=window.step_seconds)
    low = coverage_warning(expected=expected, present=present, first_sample=first if late else None)
    coverage = Coverage(
        gpu_samples_expected=expected,
        gpu_samples_present=present,
        unattributed_gpu_hours=float(attribution.unattributed["ge"].sum()) * step_h,
        util_source=util_source,
        warnings=tuple(dict.fromkeys([*([low] if low else []), *warnings])),
    )
    return Analysis(
        window=window,
        settings=settings,
        nodes=nodes,
        marked=marked,
        by_node=result.by_node,
        per_pool=per_pool,
        free=free,
        pending=pending,
        idle_since=idle_since(marked),
        coverage=coverage,
        units_reporting=gpu_samples.drop_duplicates(["timestamp", "uuid", "gpu_instance_id"])
        .groupby(["timestamp", "node"], as_index=False)
        .agg(units=("uuid", "size")),
        pod_resources=pd.DataFrame(
            [
                {"namespace": p.namespace, "pod": p.name, "resource": next(iter(p.gpu_requests))}
                for p in state.gpu_pods()
            ],
            columns=["namespace", "pod", "resource"],
        ),
        rates=rates,
        energy=energy,
    )


def energy_warnings(sources: Mapping[str, int]) -> list[str]:
    """Coverage lines for energy: GPUs measured by power × time (no energy counter), GPUs of unknown
    energy (neither reading)."""
    out = []
    if sources.get("power"):
        out.append(f"energy of {sources['power']} GPUs from power × time (they report no energy counter)")
    if sources.get("unknown"):
        out.append(f"energy unknown for {sources['unknown']} GPUs (neither an energy counter nor power)")
    return out


# SPEC §3 coverage: under this share of the expected GPU-samples, every surface says how much is missing.
MIN_COVERAGE_RATIO = 0.9
LOW_COVERAGE_PREFIX = "telemetry covers only"


def coverage_warning(*, expected: int, present: int, first_sample: datetime | None = None) -> str | None:
    """The coverage warning of a window: None when at least MIN_COVERAGE_RATIO of the expected GPU-samples
    are present. `first_sample`, when given, is the earliest DCGM sample seen (a young Prometheus)."""
    if expected <= 0 or present >= MIN_COVERAGE_RATIO * expected:
        return None
    since = f"; the first DCGM sample is at {_iso_z(first_sample)}" if first_sample is not None else ""
    return (
        f"{LOW_COVERAGE_PREFIX} {present / expected:.1%} of the window ({present:,} of {expected:,} "
        f"GPU-samples present){since}: allocated GPU-hours without telemetry are counted allocated_unknown, "
        "never active or idle"
    )


def low_coverage_warning(warnings: Sequence[str]) -> str | None:
    """The coverage warning among a report's coverage.warnings, if the window is under-covered."""
    return next((w for w in warnings if w.startswith(LOW_COVERAGE_PREFIX)), None)


def _iso_z(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _first_time(samples: pd.DataFrame) -> datetime | None:
    return pd.Timestamp(samples["timestamp"].min()).to_pydatetime() if len(samples) else None


def _gpu_samples(by_node: pd.DataFrame, physical: pd.DataFrame) -> tuple[int, int]:
    """GPU-samples expected (physical GPUs not unavailable: a NotReady node reports nothing, a GPU the
    device plugin hides has fallen off) and present (distinct GPUs reporting, per node-sample at most
    the expected ones), over the window's node-samples."""
    expected_per = (by_node["capacity_ge"] - by_node["unavailable_ge"]).clip(lower=0.0).round()
    keys = pd.DataFrame({"timestamp": by_node["timestamp"], "node": by_node["node"].astype("str")})
    reporting = (
        pd.DataFrame({"timestamp": physical["timestamp"], "node": physical["node"].astype("str")})
        .groupby(["timestamp", "node"], as_index=False, sort=False)
        .size()
    )
    found = keys.merge(reporting, on=["timestamp", "node"], how="left")["size"].fillna(0.0).to_numpy()
    present = np.minimum(found, expected_per.to_numpy())
    return int(expected_per.sum()), int(present.sum())


def _node_samples(nodes: pd.DataFrame, sample_times: pd.DatetimeIndex) -> pd.DataFrame:
    """Node state at every sample (the API server knows only now: it is taken as the window's)."""
    n = len(sample_times)
    frame = nodes.loc[nodes.index.repeat(n)].reset_index(drop=True)
    frame.insert(0, "timestamp", np.tile(sample_times.to_numpy(), len(nodes)))
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True)
    return NODE_SAMPLES.check(frame.drop(columns=["replicas"]))


def _gpu_requests(marked: pd.DataFrame, pending: pd.DataFrame) -> pd.DataFrame:
    """GPU pods of the window with the GE they hold (their largest per-sample total) and pool."""
    held = marked.groupby(["timestamp", "namespace", "pod", "pool"], as_index=False).agg(
        gpus=("ge_share", "sum")
    )
    per_pod = held.groupby(["namespace", "pod"], as_index=False).agg(
        pool=("pool", "last"), gpus=("gpus", "max")
    )
    waiting = pending.rename(columns={"requested_ge": "gpus"})[["namespace", "pod", "pool", "gpus"]]
    frame = pd.concat([per_pod, waiting], ignore_index=True)
    frame["pool"] = frame["pool"].astype("str")
    frame["gpus"] = frame["gpus"].astype("float64")
    return GPU_REQUESTS.check(frame)


ENERGY_COLUMNS = ("energy_kwh", "energy_cost_usd")
RECOMMENDATION_COLUMNS = (
    "recommendation_kind",
    "recommendation_target",
    "target_ge",
    "monthly_savings_usd",
    "recommendation_reason",
)


def rightsizing(analysis: Analysis) -> pd.DataFrame:
    """Each workload's smallest fit (analytics.rightsize.recommend) from its p95 compute and peak memory
    over the window, priced at the window's end (candidate_prices): the pools of the fleet and every
    product of the price book are candidates."""
    end = analysis.window.end
    quoted = {pool: analysis.rates.quoted(pool, end) for pool in sorted(set(analysis.nodes["pool"]))}
    usage = workload_usage(analysis.marked, step_seconds=analysis.window.step_seconds)
    return recommend(
        usage,
        usd_per_gpu_hour=candidate_prices(analysis.settings.pricing, quoted, end),
        window_hours=analysis.window.duration_seconds / 3600.0,
    )


WORKLOAD = ["namespace", "pod", "team"]


def usage_tables(analysis: Analysis) -> dict[str, pd.DataFrame]:
    """Allocated/used/idle GE-hours, efficiency and dollars per team, namespace, workload and pool."""
    step, rates, marked = analysis.window.step_seconds, analysis.rates, analysis.marked
    tables = {
        name: usage_cost(marked, step_seconds=step, rates=rates, by=by)[0]
        for name, by in (
            ("fleet", "fleet"),
            ("team", "team"),
            ("namespace", ("namespace", "team")),
            ("workload", ("namespace", "pod", "team")),
        )
    }
    last = marked[marked["timestamp"] == marked.groupby(["namespace", "pod"])["timestamp"].transform("max")]
    where = last.groupby(["namespace", "pod"], as_index=False).agg(
        node=("node", "first"), pool=("pool", "first"), gpus=("ge_share", "sum")
    )
    tables["workload"] = tables["workload"].merge(where, on=["namespace", "pod"], how="left")
    tables["workload"] = tables["workload"].merge(analysis.idle_since, on=["namespace", "pod"], how="left")
    if analysis.energy is not None:
        for name, keys in (("team", ["team"]), ("namespace", ["namespace", "team"]), ("workload", WORKLOAD)):
            held = energy_by(analysis.energy[analysis.energy["pod"].ne("")], keys)
            tables[name] = tables[name].merge(held[[*keys, *ENERGY_COLUMNS]], on=keys, how="left")
        fleet = energy_by(analysis.energy, ())
        unheld = analysis.energy[analysis.energy["pod"].eq("")]
        unheld_kwh = energy_by(unheld, ())["energy_kwh"].iloc[0] if len(unheld) else 0.0  # all held
        tables["fleet"] = tables["fleet"].assign(
            **{c: fleet[c].iloc[0] for c in ENERGY_COLUMNS}, unallocated_energy_kwh=unheld_kwh
        )
    recommendations = rightsizing(analysis)
    tables["workload"] = tables["workload"].merge(
        recommendations[[*WORKLOAD, *RECOMMENDATION_COLUMNS]], on=WORKLOAD, how="left"
    )
    held_now = tables["workload"][["namespace", "pod", "team"]].merge(
        marked.loc[marked["timestamp"] == marked["timestamp"].max(), ["namespace", "pod"]].drop_duplicates(),
        on=["namespace", "pod"],
    )
    tables["packing"] = packing_estimate(recommendations.merge(held_now, on=WORKLOAD))
    ledger_hours = ledger_gpu_hours(analysis.by_node, step_seconds=step, by=("pool",))
    pool_cost, _ = ledger_cost(analysis.by_node, step_seconds=step, rates=rates, by=("pool",))
    pool_usage = usage_cost(marked, step_seconds=step, rates=rates, by="pool")[0]
    frag = fragmentation_summary(analysis.per_pool, step_seconds=step)
    blocks = largest_free_block(analysis.free)
    pools = analysis.nodes.groupby("pool", as_index=False).agg(
        nodes=("node", "count"), gpus=("capacity_ge", "sum")
    )
    for extra in (ledger_hours, pool_cost, pool_usage[["pool", "used_gpu_hours"]], frag, blocks):
        pools = pools.merge(extra, on="pool", how="left")
    end = analysis.window.end  # a pool's price: the one in force at the window's end
    pools["usd_per_gpu_hour"] = pools["pool"].map(lambda p: rates.quoted(p, end)).astype("float64")
    tables["pool"] = pools
    fleet_hours = ledger_gpu_hours(analysis.by_node, step_seconds=step)
    fleet_cost, _ = ledger_cost(analysis.by_node, step_seconds=step, rates=rates, by=())
    tables["fleet_ledger"] = pd.concat([fleet_hours, fleet_cost], axis=1)
    return tables


# ---------------------------------------------------------------------------------------------
# `gpuwatch check`


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult:
    """What `gpuwatch check` found; every entry is one line."""

    findings: list[str]
    warnings: list[str]  # worth reading, not failures: low coverage, a young Prometheus, prices
    problems: list[str]  # failures: the command exits non-zero
    unreachable: bool  # a source could not be reached at all


CHECK_WINDOW_DAYS = 1 / 24  # `gpuwatch check` judges coverage over the last hour


def check(settings: Settings, *, clock: Callable[[], datetime] | None = None) -> CheckResult:
    """Connectivity, RBAC (can gpuwatch list what it needs?), DCGM metrics and label layout, coverage
    of the last hour.

    Discovery and coverage are judged together, so they never contradict each other: DCGM series that
    exist but have too little history (a Prometheus started minutes ago) are "not enough history yet",
    a warning; a node with GPUs is a problem only when other nodes report over the same hour and it
    does not; coverage under MIN_COVERAGE_RATIO is a warning that says why, never an "ok".
    """
    if not settings.prometheus.url:
        raise ConfigError(
            "no Prometheus URL: pass --prometheus-url, set GPUWATCH_PROMETHEUS_URL or the config"
        )
    findings: list[str] = []
    warnings: list[str] = []
    problems: list[str] = []
    unreachable = False
    sources = LiveSources(settings, clock=clock)
    recent_series = 0
    try:
        found = sources.prometheus.discover(at=sources.now())
        recent_series = found.series_sampled
        util = [
            m
            for name in ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL")
            for m in found.fields[name]
        ]
        layouts = ", ".join(f"{k}: {v}" for k, v in found.layouts.items()) or "none"
        findings.append(
            f"prometheus {found.url}: {len(found.metrics)} DCGM metric names, {found.series_sampled} "
            f"utilization series in the last 10 minutes from {', '.join(util) or 'nothing'}; label layouts "
            f"{layouts}; {found.exporter_pod_hostnames} series name the exporter pod as host"
        )
        problems += found.problems
    except PrometheusError as e:
        problems.append(str(e))
        unreachable = True
    kube_ok = True
    for kind in ("pods", "nodes", "namespaces", "resourcequotas"):
        reason = sources.kubernetes.can_list(kind)
        if reason is None:
            findings.append(f"kubernetes {sources.kubernetes.server}: can list {kind}")
        else:
            problems.append(reason)
            kube_ok = False
            unreachable = unreachable or "unreachable" in reason
    if not kube_ok or unreachable:
        return CheckResult(findings=findings, warnings=warnings, problems=problems, unreachable=unreachable)
    service = FleetService(settings=settings, sources=sources)
    window = service.window(days=CHECK_WINDOW_DAYS)
    try:
        analysis = service.analysis(window)
    except SourceError as e:
        problems.append(str(e))
        return CheckResult(findings=findings, warnings=warnings, problems=problems, unreachable=True)
    judged = _judge_coverage(analysis, recent_series=recent_series)
    findings += judged.findings
    warnings += judged.warnings
    problems += judged.problems
    low = low_coverage_warning(analysis.coverage.warnings)
    warnings += [w for w in analysis.coverage.warnings if w != low]
    return CheckResult(findings=findings, warnings=warnings, problems=problems, unreachable=False)


def _judge_coverage(analysis: "Analysis", *, recent_series: int) -> CheckResult:
    """Coverage of the check window, and which GPU nodes report nothing in it, said consistently."""
    findings: list[str] = []
    warnings: list[str] = []
    problems: list[str] = []
    c = analysis.coverage
    window = analysis.window
    share = c.gpu_samples_present / c.gpu_samples_expected if c.gpu_samples_expected else 1.0
    line = (
        f"coverage ({_iso_z(window.start)} to {_iso_z(window.end)}): {c.gpu_samples_present:,} of "
        f"{c.gpu_samples_expected:,} GPU-samples present ({share:.0%}), "
        f"{c.unattributed_gpu_hours:.2f} unattributed GPU-hours"
    )
    reporting = set(analysis.units_reporting["node"].astype("str"))
    first = pd.Timestamp(analysis.units_reporting["timestamp"].min()) if reporting else None
    young = first is not None and first > pd.Timestamp(window.start) + pd.Timedelta(
        seconds=window.step_seconds
    )
    if not reporting and recent_series:
        # Series exist, but no complete sample of the window holds any: a Prometheus minutes old.
        warnings.append(
            f"{line}: not enough history yet — Prometheus holds {recent_series} recent DCGM utilization "
            f"series but no complete {window.step_seconds} s sample of them; check again in a few minutes"
        )
        return CheckResult(findings=findings, warnings=warnings, problems=problems, unreachable=False)
    if young and first is not None:
        minutes = (pd.Timestamp(window.end) - first).total_seconds() / 60
        warnings.append(
            f"{line}: not enough history yet — DCGM telemetry starts at {_iso_z(first.to_pydatetime())} "
            f"({minutes:.0f} of the {window.duration_seconds / 60:.0f} minutes)"
        )
    elif share < MIN_COVERAGE_RATIO:
        warnings.append(f"{line}: under {MIN_COVERAGE_RATIO:.0%}, see the problems and warnings below")
    else:
        findings.append(line)
    if reporting:
        nodes = analysis.nodes
        for name, gpus, ready in nodes[["node", "capacity_ge", "ready"]].itertuples(index=False):
            if gpus > 0 and ready and str(name) not in reporting:
                problems.append(
                    f"node {name} has {gpus:g} GPUs but no DCGM series in the last "
                    f"{window.duration_seconds / 60:.0f} minutes while other nodes report"
                )
    return CheckResult(findings=findings, warnings=warnings, problems=problems, unreachable=False)


# =============================================================================================
# Fleet health and quotas for the UI (the /health and /teams pages). Self-contained: new names only.
# Per-GPU device telemetry is not part of an Analysis (the ledger needs utilization alone), so it is
# read here, on its own, for the last few samples of a window only: one cheap query, not a range.

from gpuwatch.model import mig_profile_slices  # noqa: E402
from gpuwatch.sources.dcgm import FIELD_BY_NAME, unit_rows  # noqa: E402

HEALTH_FIELDS: tuple[str, ...] = (
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
)
HEALTH_VALUES: tuple[str, ...] = (
    "util_ratio",
    "temp_celsius",
    "power_watts",
    "fb_used_bytes",
    "fb_free_bytes",
    "xid_last",
    "row_remap_failure",
)
HEALTH_COLUMNS: tuple[str, ...] = (
    "timestamp",
    "node",
    "uuid",
    "gpu_instance_id",
    "gpu_index",
    "mig_profile",
    "ge",
    *HEALTH_VALUES,
)
HEALTH_LOOKBACK_SAMPLES = 5


class HealthSources(Protocol):
    """Sources that read device health themselves (test doubles, wrappers); others are read below."""

    def gpu_health(self, window: Window) -> pd.DataFrame: ...


def health_window(window: Window) -> Window:
    """The last few samples of `window`: what the health view reads."""
    span = timedelta(seconds=HEALTH_LOOKBACK_SAMPLES * window.step_seconds)
    start = max(window.start, window.end - span)
    return Window(start=start, end=window.end, step_seconds=window.step_seconds)


def gpu_health(service: FleetService, window: Window) -> pd.DataFrame:
    """Per telemetry unit (GPU or MIG instance), its last reported values in the final samples of `window`.

    Columns HEALTH_COLUMNS: identity, `ge` (GPU-equivalents of the unit: slices/7 for a MIG instance),
    util_ratio, temp_celsius, power_watts, fb_used_bytes, fb_free_bytes, xid_last (the sticky last XID
    code, 0 for none), row_remap_failure (0/1); NaN where the exporter does not serve a field. A unit that
    reported nothing in those samples has no row (the UI shows it as missing telemetry).
    """
    return health_samples(service.sources, health_window(window))


def health_events_now(
    service: FleetService, window: Window, nodes: pd.DataFrame | None = None
) -> pd.DataFrame:
    """The health events at the end of `window` (the report's `health`, the Fleet health page's events):
    the last device telemetry and the nodes as the API server has them (`nodes`, if already read). The
    API server's pods are listed only if DCGM holds telemetry then (to find where exporter pods run)."""
    if nodes is None:
        sources = service.sources
        nodes = nodes_frame(
            sources.node_state() if isinstance(sources, LiveSources) else sources.cluster_state()
        )
    samples = health_samples(service.sources, health_window(window))
    return health_events(gpu_rows(samples), nodes)


def health_samples(sources: "FleetSources | HealthSources", recent: Window) -> pd.DataFrame:
    """The HEALTH_COLUMNS frame of `recent` from any of the known sources."""
    if isinstance(sources, SimulatedSources):
        frame = _simulated_health(sources.fleet, recent)
    elif isinstance(sources, LiveSources):
        frame = _live_health(sources, recent)
    elif hasattr(sources, "gpu_health"):
        frame = sources.gpu_health(recent)
    else:
        raise TypeError(f"{type(sources).__name__} cannot read GPU health")
    return _latest_per_unit(frame)


# A simulated slice still draws its noise over the fleet's whole window (seconds at scale): keep a few.
_SIMULATED_HEALTH: dict[tuple[int, datetime, datetime], tuple[SimulatedFleet, pd.DataFrame]] = {}
_SIMULATED_HEALTH_LOCK = threading.Lock()


def _simulated_health(fleet: SimulatedFleet, recent: Window) -> pd.DataFrame:
    key = (id(fleet), recent.start, recent.end)
    with _SIMULATED_HEALTH_LOCK:
        hit = _SIMULATED_HEALTH.get(key)
    if hit is not None and hit[0] is fleet:
        return hit[1]
    rows = fleet.telemetry(recent)
    profile = {(g.uuid, g.gpu_instance_id): g.mig_profile for g in fleet.gpus}
    keys = zip(rows["uuid"], rows["gpu_instance_id"], strict=True)
    rows = rows.assign(
        gpu_index=rows["gpu_index"].astype("str"),
        mig_profile=[profile.get(k, "") for k in keys],
    ).reset_index(drop=True)
    with _SIMULATED_HEALTH_LOCK:
        _SIMULATED_HEALTH[key] = (fleet, rows)
        while len(_SIMULATED_HEALTH) > 4:
            _SIMULATED_HEALTH.pop(next(iter(_SIMULATED_HEALTH)))
    return rows


def _live_health(sources: LiveSources, recent: Window) -> pd.DataFrame:
    def exporters() -> ExporterPods:  # the cluster listed only if DCGM holds series in `recent`
        state = sources.cluster_state()
        return ExporterPods(node_by_pod=state.exporter_pod_nodes, node_by_ip=state.exporter_ip_nodes)

    rows = sources.prometheus.gpu_samples(
        recent, exporters=exporters, fields=[FIELD_BY_NAME[name] for name in HEALTH_FIELDS]
    )
    # One row per unit and sample: a time-sliced GPU has one row per pod carrying the same values.
    return unit_rows(rows)


def _latest_per_unit(frame: pd.DataFrame) -> pd.DataFrame:
    if frame.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in HEALTH_COLUMNS})
    frame = frame.sort_values("timestamp", kind="stable")
    latest = frame.groupby(["node", "uuid", "gpu_instance_id"], as_index=False, sort=True).last()
    for column in HEALTH_VALUES:
        if column not in latest.columns:
            latest[column] = np.nan
    for column in ("gpu_index", "mig_profile"):
        if column not in latest.columns:
            latest[column] = ""
        latest[column] = latest[column].fillna("").astype("str")
    latest["ge"] = [mig_profile_slices(p) / 7 if p else 1.0 for p in latest["mig_profile"]]
    return latest[list(HEALTH_COLUMNS)].reset_index(drop=True)


def team_quotas(service: FleetService) -> pd.DataFrame:
    """Per team, its namespaces' GPU ResourceQuotas now: hard and used GPU requests (resource units).

    Columns: team, quota_gpus, used_gpus (sums over every GPU resource the quotas name: whole GPUs,
    MIG instances and time-sliced replicas alike, as the API server counts them).
    """
    state = service.sources.cluster_state()
    teams = namespace_teams(state, service.settings.teams)
    rows = []
    for quota in state.quotas:
        for key, hard in quota.hard.items():
            resource = key.removeprefix("requests.").removeprefix("limits.")
            if key.startswith("limits.") or not resource.startswith("nvidia.com/"):
                continue
            rows.append(
                {
                    "team": teams.get(quota.namespace, quota.namespace),
                    "quota_gpus": float(hard),
                    "used_gpus": float(quota.used.get(key, 0.0)),
                }
            )
    frame = pd.DataFrame(rows, columns=["team", "quota_gpus", "used_gpus"])
    return frame.groupby("team", as_index=False).sum()
