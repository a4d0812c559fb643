"""The gpuwatch_* series (docs/metrics.md) derived from an analysis: at its last sample, or at every one."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pandas as pd

from gpuwatch import __version__
from gpuwatch.core.model import ALLOCATED_STATES, LEDGER_STATES, TextSink

if TYPE_CHECKING:  # the service layer imports this module; only the type flows back
    from gpuwatch.analytics.queuetables import QueueTables
    from gpuwatch.read.analysis import Analysis


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family: name, help, and a frame of label columns plus `value` (and `timestamp`)."""

    name: str
    help: str
    labels: tuple[str, ...]
    samples: pd.DataFrame

    def between(self, start: datetime, end: datetime | None = None) -> "Family":
        """The family's samples timestamped in [start, end) (end None: from start on)."""
        times = self.samples["timestamp"]
        inside = times >= pd.Timestamp(start)
        if end is not None:
            inside &= times < pd.Timestamp(end)
        return Family(self.name, self.help, self.labels, self.samples[inside])


PENDING_POD_LABELS = ("namespace", "pod", "team", "pool")
QUEUE_POOL_LABELS = ("cluster_queue", "cohort", "team", "pool")
QUEUE_LABELS = ("namespace", "queue", "cluster_queue", "team")
# Unused quota below this (GE) is the float noise of summed GE shares (3/7 + 4/7 − 1), not quota.
_QUOTA_NOISE_GE = 1e-9
HELP = {
    "gpuwatch_pod_gpu_allocation": "GPU-equivalents the pod holds.",
    "gpuwatch_pod_gpu_idle": "GPU-equivalents of the pod that are idle-allocated (SPEC idle rule).",
    "gpuwatch_pod_gpu_idle_held": "Idle-allocated GPU-equivalents of the pod with a model in memory (held).",
    "gpuwatch_pod_gpu_idle_abandoned": "Idle-allocated GPU-equivalents of the pod with memory near empty.",
    "gpuwatch_pod_gpu_utilization_ratio": "GE-weighted mean utilization of the pod's GPUs (0-1).",
    "gpuwatch_pod_gpu_used": "GPU-equivalents of the pod actually busy: sum of utilization x GE share.",
    "gpuwatch_pod_gpu_unknown": "GPU-equivalents of the pod whose utilization is unknown (no telemetry).",
    "gpuwatch_pod_gpu_idle_since_timestamp_seconds": "Since when all of the pod's GPUs are idle-allocated.",
    "gpuwatch_pod_gpu_framebuffer_used_bytes": "GPU memory in use on the pod's GPUs (bytes).",
    "gpuwatch_node_gpus": "GPU-equivalents of the node in each ledger state.",
    "gpuwatch_node_gpu_capacity": "Physical GPUs on the node.",
    "gpuwatch_node_gpu_allocatable": "GPU-equivalents the device plugin advertises as allocatable.",
    "gpuwatch_node_gpus_reporting": "GPU units of the node with DCGM telemetry in the last sample.",
    "gpuwatch_team_gpus": "GPU-equivalents the team holds, by state: allocated_unknown, _idle or _active.",
    "gpuwatch_team_used_gpus": "GPU-equivalents of the team actually busy: sum of utilization x GE share.",
    "gpuwatch_pool_gpus": "GPU-equivalents of the pool in each ledger state.",
    "gpuwatch_pool_fragmentation_ratio": "FGD fragmentation ratio of the pool (Weng et al., ATC'23).",
    "gpuwatch_pool_fragmented_gpus": "Free GPU-equivalents of the pool that are fragmented (FGD).",
    "gpuwatch_pool_schedulable_free_gpus": "Free GPU-equivalents on the pool's ready, schedulable nodes.",
    "gpuwatch_pool_largest_free_block_gpus": "Largest GPU request one schedulable node of the pool can take.",
    "gpuwatch_pool_price_usd_per_gpu_hour": "Price per GPU-hour of the pool's product.",
    "gpuwatch_team_cost_usd_per_hour": "Allocated GPU-equivalents of the team times their price.",
    "gpuwatch_team_idle_cost_usd_per_hour": "Idle-allocated GPU-equivalents of the team times their price.",
    "gpuwatch_team_monthly_budget_usd": "The team's budget per calendar month (config).",
    "gpuwatch_team_idle_budget_usd_per_hour": "The team's idle-spend budget (config).",
    "gpuwatch_pod_gpu_power_watts": "Power the pod's GPUs draw, its GE share of each GPU's.",
    "gpuwatch_pool_gpu_power_watts": "Power the pool's GPUs draw, held or not.",
    "gpuwatch_team_gpu_power_watts": "Power the team's GPUs draw, its GE share of each GPU's.",
    "gpuwatch_team_energy_cost_usd_per_hour": "Energy cost rate of the team's GPUs (x PUE x tariff).",
    "gpuwatch_pool_energy_cost_usd_per_hour": "Energy cost rate of the pool's GPUs, held or not.",
    "gpuwatch_pending_pod_gpus": "GPU-equivalents a pending GPU pod requests.",
    "gpuwatch_pending_pod_waiting_seconds": "How long the pending GPU pod has waited.",
    "gpuwatch_pending_pod_info": "Why the pending GPU pod waits, in words, and what it asks of a node (1).",
    "gpuwatch_pool_tainted_nodes": "Nodes of the pool carrying the taint.",
    "gpuwatch_pool_info": "1 for each GPU pool, labelled with its accelerators' vendor (nvidia, amd, intel).",
    "gpuwatch_queue_nominal_gpus": "Nominal Kueue quota of the ClusterQueue in the pool (GE).",
    "gpuwatch_queue_used_gpus": "GE of the ClusterQueue's admitted workloads in the pool.",
    "gpuwatch_queue_borrowed_gpus": "GE the ClusterQueue uses above its nominal quota in the pool.",
    "gpuwatch_queue_lent_gpus": "GE of the ClusterQueue's unused quota its cohort borrows (pro rata).",
    "gpuwatch_queue_workloads": "Kueue workloads of the LocalQueue: pending, or admitted and holding quota.",
    "gpuwatch_queue_oldest_pending_seconds": "How long the LocalQueue's longest-pending workload has waited.",
    "gpuwatch_queue_reserved_unused_usd_per_hour": "Unused nominal quota of the ClusterQueue x its price.",
    "gpuwatch_build_info": "gpuwatch build information.",
    "gpuwatch_source_up": "1 when the last read of the source succeeded.",
}


def published_series(
    analysis: "Analysis", *, last_only: bool = True, queues: "QueueTables | None" = None
) -> list[Family]:
    """Every gpuwatch_* family of docs/metrics.md (but the self-monitoring ones) for the analysis.

    last_only: the values at the window's last sample, as `gpuwatch export` publishes them each cycle;
    else one sample per analysis sample (a `timestamp` column), for backfilling history. queues: the
    window's queue tables (analysis_queues); with Kueue installed, the gpuwatch_queue_* families too, at
    the queue grid's last sample (or at each of its samples).
    """
    marked = analysis.marked
    by_node = analysis.by_node
    per_pool = analysis.per_pool
    if last_only:
        last = analysis.window.start + pd.Timedelta(
            seconds=(analysis.window.n_samples - 1) * analysis.window.step_seconds
        )
        marked = marked[marked["timestamp"] == last]
        by_node = by_node[by_node["timestamp"] == last]
        per_pool = per_pool[per_pool["timestamp"] == last]
    t = ["timestamp"]
    pod_keys = ["namespace", "pod", "team", "node", "pool"]
    marked = marked.assign(
        idle_ge=np.where(marked["idle"], marked["ge_share"], 0.0),
        unknown_ge=np.where(marked["util_ratio"].isna(), marked["ge_share"], 0.0),
        known_ge=np.where(marked["util_ratio"].isna(), 0.0, marked["ge_share"]),
        util_ge=marked["ge_share"] * marked["util_ratio"],
        usd=marked["ge_share"] * analysis.rates.at(marked["pool"], marked["timestamp"]),
    )
    held = marked["memory_held"] if "memory_held" in marked else pd.Series(np.nan, index=marked.index)
    marked = marked.assign(
        idle_usd=np.where(marked["idle"], marked["usd"], 0.0),
        held_ge=np.where(held == 1.0, marked["idle_ge"], 0.0),
        abandoned_ge=np.where(held == 0.0, marked["idle_ge"], 0.0),
        fb_unknown_ge=np.where(held.isna(), marked["idle_ge"], 0.0),
        fb_bytes=marked.get("fb_used_bytes", np.nan),
    )
    pods = marked.groupby(t + pod_keys, as_index=False, sort=False).agg(
        ge=("ge_share", "sum"),
        idle=("idle_ge", "sum"),
        held=("held_ge", "sum"),
        abandoned=("abandoned_ge", "sum"),
        fb_unknown=("fb_unknown_ge", "sum"),
        unknown=("unknown_ge", "sum"),
        util_ge=("util_ge", "sum"),
        known=("util_ratio", "count"),
        known_ge=("known_ge", "sum"),
        units=("idle", "size"),
        idle_units=("idle", "sum"),
        low_since=("low_util_since", "max"),
        fb_bytes=("fb_bytes", "sum"),
        fb_known=("fb_bytes", "count"),
    )
    resources = analysis.pod_resources
    pods = pods.merge(resources, on=["namespace", "pod"], how="left").fillna({"resource": ""})
    util = pods[pods["known"] > 0]
    # Per GPU, not per pod (SPEC §3): a silent GPU of the pod is in neither side of its utilization.
    util = util.assign(value=util["util_ge"] / util["known_ge"])
    # A pod is idle since its below-threshold run began while every unit it holds is idle (as idle_since()).
    idle_pods = pods[(pods["idle_units"] == pods["units"]) & pods["low_since"].notna()]
    idle_pods = idle_pods.assign(value=epoch_seconds(idle_pods["low_since"]))
    # The idle split, for the pods with idle GE whose framebuffer is known (absent: none idle, or unknown).
    split = pods[(pods["idle"] > 0) & (pods["fb_unknown"] == 0)]
    memory = pods[pods["fb_known"] > 0]  # Σ over its GPUs reporting memory (right-sizing's peak)
    families = [
        Family(
            "gpuwatch_pod_gpu_allocation",
            HELP["gpuwatch_pod_gpu_allocation"],
            (*pod_keys, "resource"),
            pods.rename(columns={"ge": "value"}),
        ),
        Family(
            "gpuwatch_pod_gpu_idle",
            HELP["gpuwatch_pod_gpu_idle"],
            tuple(pod_keys),
            pods.rename(columns={"idle": "value"}),
        ),
        Family(
            "gpuwatch_pod_gpu_utilization_ratio",
            HELP["gpuwatch_pod_gpu_utilization_ratio"],
            tuple(pod_keys),
            util,
        ),
        Family(
            "gpuwatch_pod_gpu_used",
            HELP["gpuwatch_pod_gpu_used"],
            tuple(pod_keys),
            util.drop(columns="value").rename(columns={"util_ge": "value"}),
        ),
        Family(
            "gpuwatch_pod_gpu_unknown",
            HELP["gpuwatch_pod_gpu_unknown"],
            tuple(pod_keys),
            pods.rename(columns={"unknown": "value"}),
        ),
        Family(
            "gpuwatch_pod_gpu_idle_held",
            HELP["gpuwatch_pod_gpu_idle_held"],
            tuple(pod_keys),
            split.rename(columns={"held": "value"}),
        ),
        Family(
            "gpuwatch_pod_gpu_idle_abandoned",
            HELP["gpuwatch_pod_gpu_idle_abandoned"],
            tuple(pod_keys),
            split.rename(columns={"abandoned": "value"}),
        ),
        Family(
            "gpuwatch_pod_gpu_idle_since_timestamp_seconds",
            HELP["gpuwatch_pod_gpu_idle_since_timestamp_seconds"],
            tuple(pod_keys),
            idle_pods,
        ),
        Family(
            "gpuwatch_pod_gpu_framebuffer_used_bytes",
            HELP["gpuwatch_pod_gpu_framebuffer_used_bytes"],
            tuple(pod_keys),
            memory.rename(columns={"fb_bytes": "value"}),
        ),
    ]
    state_columns = {f"{s}_ge": s for s in LEDGER_STATES}
    node_states = (
        by_node[["timestamp", "node", "pool", *state_columns]]
        .rename(columns=state_columns)
        .melt(
            id_vars=["timestamp", "node", "pool"],
            value_vars=list(state_columns.values()),
            var_name="state",
            value_name="value",
        )
    )
    families.append(
        Family("gpuwatch_node_gpus", HELP["gpuwatch_node_gpus"], ("node", "pool", "state"), node_states)
    )
    pool_states = node_states.groupby(["timestamp", "pool", "state"], as_index=False).agg(
        value=("value", "sum")
    )
    families.append(Family("gpuwatch_pool_gpus", HELP["gpuwatch_pool_gpus"], ("pool", "state"), pool_states))
    nodes = analysis.nodes
    times = by_node[["timestamp"]].drop_duplicates()
    per_node = times.merge(nodes, how="cross")
    families.append(
        Family(
            "gpuwatch_node_gpu_capacity",
            HELP["gpuwatch_node_gpu_capacity"],
            ("node", "pool"),
            per_node.rename(columns={"capacity_ge": "value"}),
        )
    )
    families.append(
        Family(
            "gpuwatch_node_gpu_allocatable",
            HELP["gpuwatch_node_gpu_allocatable"],
            ("node", "pool"),
            per_node.rename(columns={"allocatable_ge": "value"}),
        )
    )
    reporting = analysis.units_reporting
    if last_only:
        reporting = (
            reporting[reporting["timestamp"] == reporting["timestamp"].max()] if len(reporting) else reporting
        )
    reporting = (
        per_node[["timestamp", "node", "pool"]]
        .merge(reporting, on=["timestamp", "node"], how="left")
        .fillna({"units": 0.0})
    )
    families.append(
        Family(
            "gpuwatch_node_gpus_reporting",
            HELP["gpuwatch_node_gpus_reporting"],
            ("node", "pool"),
            reporting.rename(columns={"units": "value"}),
        )
    )
    teams = marked.groupby(["timestamp", "team"], as_index=False).agg(
        allocated_idle=("idle_ge", "sum"),
        allocated_unknown=("unknown_ge", "sum"),
        total=("ge_share", "sum"),
        usd=("usd", "sum"),
        idle_usd=("idle_usd", "sum"),
        used=("util_ge", "sum"),
        known=("util_ratio", "count"),
    )
    active = teams["total"] - teams["allocated_idle"] - teams["allocated_unknown"]
    teams["allocated_active"] = active.clip(lower=0.0)  # float noise of the subtraction, not a state
    team_states = teams.melt(
        id_vars=["timestamp", "team"],
        value_vars=list(ALLOCATED_STATES),
        var_name="state",
        value_name="value",
    )
    families.append(Family("gpuwatch_team_gpus", HELP["gpuwatch_team_gpus"], ("team", "state"), team_states))
    # Absent while no GPU of the team reports utilization: unknown, never 0 (SPEC §3).
    families.append(
        Family(
            "gpuwatch_team_used_gpus",
            HELP["gpuwatch_team_used_gpus"],
            ("team",),
            teams[teams["known"] > 0].rename(columns={"used": "value"}),
        )
    )
    families.append(
        Family(
            "gpuwatch_team_cost_usd_per_hour",
            HELP["gpuwatch_team_cost_usd_per_hour"],
            ("team",),
            teams.rename(columns={"usd": "value"}),
        )
    )
    families.append(
        Family(
            "gpuwatch_team_idle_cost_usd_per_hour",
            HELP["gpuwatch_team_idle_cost_usd_per_hour"],
            ("team",),
            teams.rename(columns={"idle_usd": "value"}),
        )
    )
    families.append(
        Family(
            "gpuwatch_pool_fragmentation_ratio",
            HELP["gpuwatch_pool_fragmentation_ratio"],
            ("pool",),
            per_pool.rename(columns={"fragmentation_ratio": "value"}),
        )
    )
    for name, column in (
        ("gpuwatch_pool_fragmented_gpus", "fragmented_ge"),
        ("gpuwatch_pool_schedulable_free_gpus", "schedulable_free_ge"),
    ):
        families.append(Family(name, HELP[name], ("pool",), per_pool.rename(columns={column: "value"})))
    free = analysis.free
    if last_only:
        free = free[free["timestamp"] == free["timestamp"].max()] if len(free) else free
    blocks = free.groupby(["timestamp", "pool"], as_index=False).agg(value=("schedulable_free_ge", "max"))
    families.append(
        Family(
            "gpuwatch_pool_largest_free_block_gpus",
            HELP["gpuwatch_pool_largest_free_block_gpus"],
            ("pool",),
            blocks,
        )
    )
    prices = times.merge(pd.DataFrame({"pool": sorted(_pools(analysis))}), how="cross")
    prices["value"] = analysis.rates.at(prices["pool"], prices["timestamp"])
    families.append(
        Family(
            "gpuwatch_pool_price_usd_per_gpu_hour",
            HELP["gpuwatch_pool_price_usd_per_gpu_hour"],
            ("pool",),
            prices,
        )
    )
    # The API server knows pending pods only now: each one is published at every sample since it was
    # created (what the exporter would have seen), with the diagnosis of the window's end.
    pending = analysis.pending.merge(times, how="cross")
    pending = pending[pending["timestamp"] >= pending["created_at"]]
    # Sample t_i stands for [t_i, t_i + step): the wait is measured at its end, as the report does.
    step = pd.Timedelta(seconds=analysis.window.step_seconds)
    pending = pending.assign(
        waiting_seconds=(pending["timestamp"] + step - pending["created_at"])
        .dt.total_seconds()
        .clip(lower=0.0)
    )
    families.append(
        Family(
            "gpuwatch_pending_pod_gpus",
            HELP["gpuwatch_pending_pod_gpus"],
            (*PENDING_POD_LABELS, "blocked_by"),
            pending.rename(columns={"gpus": "value"}),
        )
    )
    families.append(
        Family(
            "gpuwatch_pending_pod_waiting_seconds",
            HELP["gpuwatch_pending_pod_waiting_seconds"],
            PENDING_POD_LABELS,
            pending.rename(columns={"waiting_seconds": "value"}),
        )
    )
    families.append(
        Family(
            "gpuwatch_pending_pod_info",
            HELP["gpuwatch_pending_pod_info"],
            (
                *PENDING_POD_LABELS,
                "blocked_by",
                "reason",
                "scheduler_message",
                "node_affinity",
                "tolerations",
            ),
            pending.assign(value=1.0),
        )
    )
    tainted = times.merge(analysis.tainted_nodes(), how="cross").rename(columns={"nodes": "value"})
    families.append(
        Family(
            "gpuwatch_pool_tainted_nodes",
            HELP["gpuwatch_pool_tainted_nodes"],
            ("pool", "taint"),
            tainted.astype({"value": "float64"}),
        )
    )
    vendors = times.merge(analysis.pool_vendors(), how="cross").assign(value=1.0)
    families.append(Family("gpuwatch_pool_info", HELP["gpuwatch_pool_info"], ("pool", "vendor"), vendors))
    if queues is not None and queues.installed:
        families += _queue_families(analysis, queues, last_only=last_only)
    if analysis.energy is not None:
        families += _energy_families(analysis, last_only=last_only)
    budgets = analysis.settings.budgets
    for name, table in (
        ("gpuwatch_team_monthly_budget_usd", budgets.monthly_usd),
        ("gpuwatch_team_idle_budget_usd_per_hour", budgets.idle_usd_per_hour),
    ):
        amounts = pd.DataFrame({"team": list(table), "value": [float(v) for v in table.values()]})
        families.append(Family(name, HELP[name], ("team",), times.merge(amounts, how="cross")))
    families.append(
        Family(
            "gpuwatch_build_info",
            HELP["gpuwatch_build_info"],
            ("version",),
            times.assign(version=__version__, value=1.0),
        )
    )
    if not last_only:
        # History of a healthy exporter; a live one publishes these itself (exporter.collector).
        sources = times.merge(
            pd.DataFrame({"source": ["kubernetes", "prometheus"], "value": [1.0, 1.0]}), how="cross"
        )
        families.append(Family("gpuwatch_source_up", HELP["gpuwatch_source_up"], ("source",), sources))
    return [_tidy(f) for f in families]


def _energy_families(analysis: "Analysis", *, last_only: bool) -> list[Family]:
    """The GPUs' power (W, the sample's energy over its length) per pod and per pool (every GPU, held or
    not), and each team's energy cost rate; absent where unknown."""
    energy = analysis.energy
    assert energy is not None
    if last_only:
        energy = energy[energy["timestamp"] == energy["timestamp"].max()] if len(energy) else energy
    step = analysis.window.step_seconds
    energy = energy.assign(
        watts=energy["energy_joules"] / step, usd_per_hour=energy["energy_cost_usd"] * (3600.0 / step)
    )
    held = energy[energy["pod"].ne("")]
    pod_keys = ["namespace", "pod", "team", "node", "pool"]

    def summed(frame: pd.DataFrame, keys: list[str], column: str) -> pd.DataFrame:
        """Σ column per sample and keys; NaN (left out) where no row of the group is known."""
        grouped = frame.groupby(["timestamp", *keys], as_index=False, observed=True, sort=False)
        out = grouped.agg(value=(column, "sum"), known=(column, "count"))
        return out.assign(value=out["value"].where(out["known"] > 0))

    return [
        Family(
            "gpuwatch_pod_gpu_power_watts",
            HELP["gpuwatch_pod_gpu_power_watts"],
            tuple(pod_keys),
            summed(held, pod_keys, "watts"),
        ),
        Family(
            "gpuwatch_pool_gpu_power_watts",
            HELP["gpuwatch_pool_gpu_power_watts"],
            ("pool",),
            summed(energy, ["pool"], "watts"),
        ),
        Family(
            "gpuwatch_team_gpu_power_watts",
            HELP["gpuwatch_team_gpu_power_watts"],
            ("team",),
            summed(held, ["team"], "watts"),
        ),
        Family(
            "gpuwatch_team_energy_cost_usd_per_hour",
            HELP["gpuwatch_team_energy_cost_usd_per_hour"],
            ("team",),
            summed(held, ["team"], "usd_per_hour"),
        ),
        Family(
            "gpuwatch_pool_energy_cost_usd_per_hour",
            HELP["gpuwatch_pool_energy_cost_usd_per_hour"],
            ("pool",),
            summed(energy, ["pool"], "usd_per_hour"),
        ),
    ]


def _queue_families(analysis: "Analysis", queues: "QueueTables", *, last_only: bool) -> list[Family]:
    """Kueue's quota per ClusterQueue and pool (nominal, used, borrowed, lent, and the unused nominal
    quota's cost rate at the pool's price in force), and per LocalQueue its pending and admitted
    workloads and its oldest pending wait (absent while nothing waits)."""
    usage, states = queues.usage, queues.states
    if last_only:
        usage = usage[usage["timestamp"] == usage["timestamp"].max()] if len(usage) else usage
        states = states[states["timestamp"] == states["timestamp"].max()] if len(states) else states
    families = []
    for column in ("nominal_gpus", "used_gpus", "borrowed_gpus", "lent_gpus"):
        name = f"gpuwatch_queue_{column}"
        families.append(Family(name, HELP[name], QUEUE_POOL_LABELS, usage.rename(columns={column: "value"})))
    unused = (usage["nominal_gpus"] - usage["used_gpus"]).to_numpy(dtype=np.float64)
    unused = np.where(unused > _QUOTA_NOISE_GE, unused, np.where(np.isnan(unused), np.nan, 0.0))
    price = analysis.rates.at(usage["pool"], usage["timestamp"])
    # No unused quota costs nothing, whatever the price (known or not); unknown use stays unknown.
    reserved = usage.assign(value=np.where(unused == 0.0, 0.0, unused * price))
    name = "gpuwatch_queue_reserved_unused_usd_per_hour"
    families.append(Family(name, HELP[name], QUEUE_POOL_LABELS, reserved))
    workloads = states.melt(
        id_vars=["timestamp", *QUEUE_LABELS],
        value_vars=["pending_workloads", "admitted_workloads"],
        var_name="state",
        value_name="value",
    )
    workloads["state"] = workloads["state"].str.removesuffix("_workloads")
    name = "gpuwatch_queue_workloads"
    families.append(
        Family(name, HELP[name], (*QUEUE_LABELS, "state"), workloads.astype({"value": "float64"}))
    )
    name = "gpuwatch_queue_oldest_pending_seconds"
    families.append(
        Family(name, HELP[name], QUEUE_LABELS, states.rename(columns={"oldest_pending_seconds": "value"}))
    )
    return families


def _pools(analysis: "Analysis") -> set[str]:
    return set(analysis.nodes["pool"].unique()) | set(analysis.marked["pool"].unique())


def per_row(keys: "pd.Series[str]", table: Mapping[str, float]) -> npt.NDArray[np.float64]:
    """table[key] per row (NaN where absent), looked up once per distinct key."""
    codes, distinct = pd.factorize(keys)
    looked_up = np.array([table.get(key, np.nan) for key in distinct] + [np.nan], dtype=np.float64)
    return looked_up[codes]  # code -1 (a missing key) reads the trailing NaN


def _tidy(family: Family) -> Family:
    samples = family.samples
    columns = ["timestamp", *family.labels, "value"]
    samples = samples[[c for c in columns if c in samples.columns]]
    samples = samples[samples["value"].notna()].reset_index(drop=True)
    return Family(family.name, family.help, family.labels, samples)


def write_openmetrics(
    families: Sequence[Family], out: TextSink, *, offset_seconds: float = 0.0, end_of_file: bool = True
) -> int:
    """Append families with a `timestamp` column as OpenMetrics (each series in time order), then `# EOF`
    unless end_of_file is False (more families follow, e.g. the next chunk of a long backfill).

    offset_seconds shifts every timestamp: the simulated backfill writes sample i mid-interval.
    Returns the number of samples written. Label sets, values and timestamps are each formatted once
    per distinct value, so a month of a large fleet writes at millions of lines a second.
    """
    written = 0
    for family in families:
        out.write(f"# HELP {family.name} {family.help}\n# TYPE {family.name} gauge\n")
        samples = family.samples
        if samples.empty:
            continue
        labels = list(family.labels)
        codes, first_rows = series_codes(samples, labels)
        keys = samples[labels].iloc[first_rows].astype("str").to_numpy().tolist()
        prefixes = [f"{family.name}{{{_label_text(labels, key)}}} " for key in keys]
        ms = samples["timestamp"].dt.as_unit("ms").astype("int64").to_numpy()
        order = np.lexsort((ms, codes))
        ts_codes, ts_unique = pd.factorize(ms[order])
        ts_text = [f" {t / 1e3 + offset_seconds:.3f}\n" for t in ts_unique]
        value_codes, value_unique = pd.factorize(
            samples["value"].to_numpy(dtype="float64")[order], use_na_sentinel=False
        )
        value_text = [repr(float(v)) for v in value_unique]
        out.write(
            "".join(
                [
                    prefixes[s] + value_text[v] + ts_text[t]
                    for s, v, t in zip(
                        codes[order].tolist(), value_codes.tolist(), ts_codes.tolist(), strict=True
                    )
                ]
            )
        )
        written += len(order)
    if end_of_file:
        out.write("# EOF\n")
    return written


def epoch_seconds(times: "pd.Series[pd.Timestamp]") -> "pd.Series[float]":
    """Epoch seconds of UTC timestamps (to the millisecond)."""
    seconds: pd.Series[float] = times.dt.as_unit("ms").astype("int64") / 1e3
    return seconds


def series_codes(
    samples: pd.DataFrame, labels: Sequence[str]
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """A code per row naming its label set (0..n-1), and the first row of each label set."""
    combined: npt.NDArray[np.intp] = np.zeros(len(samples), dtype=np.intp)
    for label in labels:
        codes, uniques = pd.factorize(samples[label], use_na_sentinel=False)
        combined, _ = pd.factorize(combined * len(uniques) + codes)  # stays below the rows' count
    _, first_rows = np.unique(combined, return_index=True)
    return combined, first_rows


def _label_text(names: Sequence[str], values: Sequence[str]) -> str:
    return ",".join(f'{k}="{_escape(v)}"' for k, v in zip(names, values, strict=True))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
