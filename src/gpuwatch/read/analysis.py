"""The analysis of one window: sources' frames joined, idle marked, the ledger, fragmentation, coverage,
and the usage tables a report, the UI and the exporter show."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

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
from gpuwatch.analytics.fragmentation import pool_fragmentation as pool_fragmentation
from gpuwatch.analytics.join import attribute
from gpuwatch.analytics.ledger import (
    idle_since,
    ledger,
    ledger_gpu_hours,
    mark_idle,
    schedulable_free,
    silent_units,
)
from gpuwatch.analytics.placement import policy_taints, pool_taints, screen_pending
from gpuwatch.analytics.queuetables import (
    QueueSetup,
    QueueTables,
    no_queues,
    prices_on_grid,
    queue_tables,
    workload_inputs,
)
from gpuwatch.analytics.rightsize import candidate_prices, packing_estimate, recommend, workload_usage
from gpuwatch.core.config import Settings
from gpuwatch.core.model import (
    ALLOCATED_STATES,
    LEDGER_STATES,
    TeamRules,
    Window,
    cluster_of,
    ge_per_unit,
    normalize_product,
)
from gpuwatch.core.schema import GPU_REQUESTS, NODE_SAMPLES, PENDING_PODS
from gpuwatch.sources.kubernetes import ClusterState


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
                "cluster": cluster_of(n.name, state.cluster),
                "pool": n.pool,
                "vendor": n.vendor,
                "product": n.product,
                "replicas": n.replicas,
                "capacity_ge": float(n.gpu_count),
                "allocatable_ge": min(float(n.gpu_count), n.allocatable_gpus()),
                "ready": n.ready,
                "schedulable": not n.unschedulable,
                "taints": ", ".join(str(t) for t in policy_taints(n)),
            }
            for n in state.nodes
        ],
        columns=[
            "node",
            "cluster",
            "pool",
            "vendor",
            "product",
            "replicas",
            "capacity_ge",
            "allocatable_ge",
            "ready",
            "schedulable",
            "taints",
        ],
    )


def taint_counts(nodes: pd.DataFrame) -> pd.DataFrame:
    """pool, taint, nodes: how many of each pool's nodes carry each taint (nodes_frame()'s taints)."""
    per_node = nodes.assign(taint=nodes["taints"].str.split(", ")).explode("taint")
    per_node = per_node[per_node["taint"].fillna("") != ""]
    counts = per_node.groupby(["pool", "taint"], as_index=False).agg(nodes=("node", "nunique"))
    return counts.astype({"pool": "str", "taint": "str", "nodes": "int64"})


def pool_vendors(nodes: pd.DataFrame) -> pd.DataFrame:
    """pool, vendor of nodes_frame()'s nodes: a pool is one product, so one vendor."""
    vendors: pd.DataFrame = nodes.groupby("pool", as_index=False).agg(vendor=("vendor", "first"))
    return vendors.astype({"pool": "str", "vendor": "str"})


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
    free: pd.DataFrame  # SCHEDULABLE_FREE per node-sample, with its fragmented_ge (F_n)
    pending: pd.DataFrame  # diagnose_pending()
    idle_since: pd.DataFrame  # per workload
    coverage: Coverage
    units_reporting: pd.DataFrame  # timestamp, node, units: GPU units with DCGM telemetry per sample
    pod_resources: pd.DataFrame  # namespace, pod, resource: the GPU resource each running pod requests
    rates: PoolRates  # each pool's USD per GPU-hour at each sample (commitments blended by the fleet's GPUs)
    # Per pod (or unheld part), GPU and sample: energy_joules and energy_cost_usd (window_energy());
    # None when the source reads no energy or power at all.
    energy: pd.DataFrame | None = None
    unreachable: Mapping[str, str] = field(default_factory=dict)  # cluster -> why it was not read

    def tainted_nodes(self) -> pd.DataFrame:
        """pool, taint, nodes: how many of each pool's nodes carry each taint now."""
        return taint_counts(self.nodes)

    def pool_vendors(self) -> pd.DataFrame:
        """pool, vendor: whose accelerators each pool is (nvidia, amd, intel)."""
        return pool_vendors(self.nodes)


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
    # Per cluster: a node's free GPUs are weighed by its own cluster's pods (none come from another's).
    mix = request_mix(_gpu_requests(marked, pending_pods), per_cluster=True)
    per_node_frag, per_pool = fragmentation(free, mix)
    result = ledger(node_samples, marked, per_node_frag)
    screens, placeable = screen_pending([p for p in state.gpu_pods() if p.phase == "Pending"], state.nodes)
    pending = diagnose_pending(
        PENDING_PODS.check(
            pending_pods.rename(columns={"requested_ge": "gpus"})[
                ["namespace", "pod", "team", "pool", "gpus", "created_at"]
            ]
        ),
        free,
        as_of=window.end,
        screens=screens,
        placeable=placeable,
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
    warnings += silent_gpu_warnings(
        silent_units(marked, step_seconds=window.step_seconds),
        _gpu_indexes(gpu_samples),
        min_seconds=silent_gpu_min_seconds(idle.window_seconds, window.step_seconds),
    )
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
        free=free.assign(fragmented_ge=per_node_frag["fragmented_ge"].to_numpy()),
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
        unreachable=dict(state.unreachable),
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
    since = f"; the first DCGM sample is at {iso_z(first_sample)}" if first_sample is not None else ""
    return (
        f"{LOW_COVERAGE_PREFIX} {present / expected:.1%} of the window ({present:,} of {expected:,} "
        f"GPU-samples present){since}: allocated GPU-hours without telemetry are counted allocated_unknown, "
        "never active or idle"
    )


# Past this many GPUs allocated without telemetry, one line counts the rest: a report of a fleet of
# 10,000 GPUs whose exporter failed never grows by thousands of lines.
MAX_SILENT_GPU_WARNINGS = 10


def silent_gpu_min_seconds(idle_window_seconds: float, step_seconds: float) -> float:
    """How long an allocated GPU must go without telemetry in a window for a coverage line of its own:
    the idle window (default 30 min), and never under two samples. A scrape missed once never warns,
    and a GPU silent this long has had a whole idle window judged neither idle nor active."""
    return max(float(idle_window_seconds), 2.0 * step_seconds)


def silent_gpu_warnings(
    silent: pd.DataFrame,
    gpu_index: Mapping[str, str],
    *,
    min_seconds: float,
    limit: int = MAX_SILENT_GPU_WARNINGS,
) -> list[str]:
    """Coverage lines for the GPUs (or MIG instances) allocated without telemetry for at least
    min_seconds of the window (silent_units(): their allocated_unknown time, gaps added up), longest
    first, e.g. "gpu-h100-002 GPU 7: no telemetry for 30 min while allocated"; past `limit` GPUs, one
    line says how many more. A GPU is named by its index (DCGM's `gpu` label), else by its UUID."""
    long = silent[silent["silent_seconds"] >= min_seconds - 1e-9]
    lines = []
    for node, uuid, instance, seconds in long.head(limit).itertuples(index=False):  # at most `limit`
        name = f"{node} GPU {gpu_index.get(uuid) or uuid}" + (f" MIG {instance}" if instance else "")
        lines.append(f"{name}: no telemetry for {_duration(seconds)} while allocated")
    if len(long) > limit:
        lines.append(
            f"and {len(long) - limit} more GPUs without telemetry for at least {_duration(min_seconds)} "
            "while allocated"
        )
    return lines


def unknown_hours_warnings(
    held: pd.DataFrame, *, who: Sequence[str], min_gpu_hours: float, limit: int = MAX_SILENT_GPU_WARNINGS
) -> list[str]:
    """The history path's coverage lines for allocated GPU-hours without telemetry, whose series say which
    pod or team held them but not which GPU: rows of `held` (the `who` columns, unknown_gpu_hours) with
    at least `min_gpu_hours` (one GPU for silent_gpu_min_seconds), most first, e.g. "team ml: 0.50
    GPU-hours allocated without telemetry"; past `limit` rows, one line says how many more."""
    long = held[held["unknown_gpu_hours"] >= min_gpu_hours - 1e-9].sort_values(
        "unknown_gpu_hours", ascending=False, kind="stable"
    )
    lines = [
        f"{' '.join(str(v) for v in names)}: {hours:.2f} GPU-hours allocated without telemetry"
        for *names, hours in long[[*who, "unknown_gpu_hours"]].head(limit).itertuples(index=False)
    ]
    if len(long) > limit:
        lines.append(
            f"and {len(long) - limit} more with at least {min_gpu_hours:.2f} GPU-hours allocated without "
            "telemetry"
        )
    return lines


def _duration(seconds: float) -> str:
    minutes = seconds / 60.0
    return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60.0:.1f} h"


def _gpu_indexes(samples: pd.DataFrame) -> dict[str, str]:
    """uuid -> the GPU's index as DCGM labels it (its `gpu` label); none where the source gives none."""
    if "gpu_index" not in samples or not len(samples):
        return {}
    pairs = samples[["uuid", "gpu_index"]].dropna().drop_duplicates().astype("str")
    pairs = pairs[pairs["gpu_index"].ne("")].drop_duplicates("uuid")
    return dict(zip(pairs["uuid"], pairs["gpu_index"], strict=True))


def low_coverage_warning(warnings: Sequence[str]) -> str | None:
    """The coverage warning among a report's coverage.warnings, if the window is under-covered."""
    return next((w for w in warnings if w.startswith(LOW_COVERAGE_PREFIX)), None)


def iso_z(value: datetime) -> str:
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
    taints = pool_taints(taint_counts(analysis.nodes), analysis.nodes.groupby("pool").size())
    pools["taints"] = pd.Series([taints.get(p, "") for p in pools["pool"]], index=pools.index, dtype="str")
    pools = pools.merge(pool_vendors(analysis.nodes), on="pool", how="left")
    tables["pool"] = pools
    tables["cluster"] = cluster_table(analysis)
    fleet_hours = ledger_gpu_hours(analysis.by_node, step_seconds=step)
    fleet_cost, _ = ledger_cost(analysis.by_node, step_seconds=step, rates=rates, by=())
    tables["fleet_ledger"] = pd.concat([fleet_hours, fleet_cost], axis=1)
    return tables


LEDGER_HOURS = ("capacity_gpu_hours", *(f"{s}_gpu_hours" for s in LEDGER_STATES))
CLUSTER_COLUMNS = (
    "cluster",
    "gpus",
    "capacity_gpu_hours",
    "allocated_gpu_hours",
    "used_gpu_hours",
    "cost_usd",
    "waste_usd",
    "error",
)


def cluster_table(analysis: Analysis) -> pd.DataFrame:
    """Per cluster: its GPUs now, capacity GPU-hours and the dollars of the ledger (as the fleet's), the
    GPU-hours its pods held and used; a cluster that could not be read is a row of unknowns and why."""
    step, rates = analysis.window.step_seconds, analysis.rates
    of_node = analysis.nodes.set_index("node")["cluster"]
    by_node = analysis.by_node.assign(cluster=analysis.by_node["node"].map(of_node))
    marked = analysis.marked.assign(
        cluster=analysis.marked["node"].map(of_node).fillna(analysis.marked["node"].map(cluster_of))
    )
    hours = ledger_gpu_hours(by_node, step_seconds=step, by=("cluster",))
    cost, _ = ledger_cost(by_node, step_seconds=step, rates=rates, by=("cluster",))
    usage, _ = usage_cost(marked, step_seconds=step, rates=rates, by=("cluster",))
    gpus = analysis.nodes.groupby("cluster", as_index=False).agg(gpus=("capacity_ge", "sum"))
    gpus, hours, cost, usage = (f.astype({"cluster": "str"}) for f in (gpus, hours, cost, usage))
    table = (
        gpus.merge(hours[["cluster", *LEDGER_HOURS]], on="cluster", how="outer")
        .merge(cost[["cluster", "cost_usd", "waste_usd"]], on="cluster", how="outer")
        .merge(usage[["cluster", "allocated_gpu_hours", "used_gpu_hours"]], on="cluster", how="left")
        .fillna({"gpus": 0.0, "cost_usd": 0.0, "waste_usd": 0.0} | dict.fromkeys(LEDGER_HOURS, 0.0))
        .fillna({"allocated_gpu_hours": 0.0})
        .assign(error=None)
    )
    down = pd.DataFrame({"cluster": list(analysis.unreachable), "error": list(analysis.unreachable.values())})
    table = pd.concat([table, down], ignore_index=True) if len(down) else table
    return table.astype({"cluster": "str"}).sort_values("cluster", ignore_index=True)[
        [*CLUSTER_COLUMNS, *LEDGER_HOURS[1:]]
    ]


def analysis_queues(
    analysis: Analysis,
    queues: QueueSetup | None,
    *,
    workloads: pd.DataFrame | None = None,
    quota_only: bool = False,
) -> QueueTables:
    """The queue tables of an analysis' window (its workload table when already computed). quota_only:
    Kueue's quota, borrowing and workloads alone, what the exporter publishes: no workload table is made,
    so fairness, the idle GPUs beside pending demand and reclaim candidates are unknown."""
    prices = prices_on_grid(analysis.rates.at, sorted(set(analysis.nodes["pool"])), analysis.window)
    allocated: pd.DataFrame | None = None
    idle: pd.DataFrame | None = None
    if not quota_only:
        table = usage_tables(analysis)["workload"] if workloads is None else workloads
        marked = analysis.marked
        last = marked.loc[marked["timestamp"] == marked["timestamp"].max(), ["namespace", "pod"]]
        allocated, idle = workload_inputs(table, set(zip(last["namespace"], last["pod"], strict=True)))
    return queue_tables(
        queues or no_queues(),
        window=analysis.window,
        prices=prices,
        allocated=allocated,
        idle=idle,
        pending=analysis.pending,
        reclaim_after_seconds=analysis.settings.idle.reclaim_after_seconds,
    )
