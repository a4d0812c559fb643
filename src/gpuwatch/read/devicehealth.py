"""Fleet health and quotas for the UI (the /health and /teams pages): per-GPU device telemetry is not
part of an Analysis (the ledger needs utilization alone), so it is read on its own, for the last few
samples of a window only: one cheap query, not a range."""

from datetime import timedelta
from typing import Protocol

import numpy as np
import pandas as pd

# Re-exported (`as`): the UI and the CLI take these through the service layer, never from below it.
from gpuwatch.analytics.health import HOT_CELSIUS as HOT_CELSIUS
from gpuwatch.analytics.health import gpu_rows as gpu_rows
from gpuwatch.analytics.health import health_events as health_events
from gpuwatch.analytics.health import is_hot as is_hot
from gpuwatch.analytics.health import xid_text as xid_text
from gpuwatch.core.errors import SourceError
from gpuwatch.core.model import Window, is_gpu_resource, mig_profile_slices
from gpuwatch.read.analysis import namespace_teams, nodes_frame
from gpuwatch.read.service import (
    FleetService,
    FleetSources,
    LiveSources,
    MultiClusterSources,
)
from gpuwatch.sources.dcgm import FIELD_BY_NAME, ExporterPods
from gpuwatch.sources.dcgmrows import unit_rows
from gpuwatch.sources.historystore import qualified_rows

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
    """Sources that read device health themselves (the simulated fleet's, test doubles, wrappers); the
    live ones are read below."""

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
    if isinstance(sources, LiveSources):
        frame = _live_health(sources, recent)
    elif isinstance(sources, MultiClusterSources):
        return _clusters_health(sources, recent)
    elif hasattr(sources, "gpu_health"):
        frame = sources.gpu_health(recent)
    else:
        raise TypeError(f"{type(sources).__name__} cannot read GPU health")
    return _latest_per_unit(frame)


def _live_health(sources: LiveSources, recent: Window) -> pd.DataFrame:
    def exporters() -> ExporterPods:  # the cluster listed only if DCGM holds series in `recent`
        state = sources.cluster_state()
        return ExporterPods(node_by_pod=state.exporter_pod_nodes, node_by_ip=state.exporter_ip_nodes)

    rows = sources.prometheus.gpu_samples(
        recent,
        exporters=exporters,
        fields=[FIELD_BY_NAME[name] for name in HEALTH_FIELDS],
        matchers=sources.matchers,
    )
    # One row per unit and sample: a time-sliced GPU has one row per pod carrying the same values.
    return unit_rows(rows)


def _clusters_health(sources: MultiClusterSources, recent: Window) -> pd.DataFrame:
    """Each cluster's latest device telemetry under its qualified node names; a cluster whose API server
    or store cannot be read adds none (its banner says so)."""
    parts = []
    for name, member in sources.members.items():
        try:
            parts.append(qualified_rows(health_samples(member, recent), name))
        except SourceError:
            continue
    return pd.concat(parts, ignore_index=True) if parts else _latest_per_unit(pd.DataFrame())


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
            if key.startswith("limits.") or not is_gpu_resource(resource):
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
