"""The simulated fleet behind the interfaces of the live sources: cluster state and GPU samples."""

from dataclasses import replace

import numpy as np
import pandas as pd

from gpuwatch.model import Window
from gpuwatch.sources.kubernetes import ClusterState
from gpuwatch.sources.simulated.fleet import EXPORTER_NAMESPACE, SimulatedFleet

UTIL_PROF = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
UTIL_DEV = "DCGM_FI_DEV_GPU_UTIL"


class SimulatedSource:
    """Answers like KubernetesSource.cluster_state() and PrometheusSource GPU samples, from one fleet."""

    def __init__(self, fleet: SimulatedFleet) -> None:
        self.fleet = fleet
        self._labelled: pd.DataFrame | None = None
        self._truth: pd.DataFrame | None = None

    def _ground_truth(self) -> pd.DataFrame:
        if self._truth is None:
            self._truth = self.fleet.truth()
        return self._truth

    def _labelled_telemetry(self) -> pd.DataFrame:
        """Every telemetry row of the fleet with the workload DCGM names on it (built once)."""
        if self._labelled is None:
            fleet = self.fleet
            tel = fleet.telemetry()[["timestamp", "node", "uuid", "gpu_instance_id", "util_ratio"]]
            holders = self._ground_truth()[["timestamp", "uuid", "gpu_instance_id", "namespace", "pod"]]
            rows = tel.merge(holders, on=["timestamp", "uuid", "gpu_instance_id"], how="left")
            rows[["namespace", "pod"]] = rows[["namespace", "pod"]].fillna("")
            profile = {(g.uuid, g.gpu_instance_id): g.mig_profile for g in fleet.gpus}
            keys = list(zip(rows["uuid"], rows["gpu_instance_id"], strict=True))
            rows["mig_profile"] = [profile[k] for k in keys]
            prof = np.array([fleet.has_prof[u] for u in rows["uuid"]], dtype=bool)
            rows["util_source"] = np.where(prof, UTIL_PROF, UTIL_DEV)
            self._labelled = rows
        return self._labelled

    def cluster_state(self) -> ClusterState:
        fleet = self.fleet
        # The API server lists quantities; the Kubernetes source drops zero-valued stale resources.
        nodes = tuple(
            replace(
                n,
                capacity={r: q for r, q in n.capacity.items() if q > 0},
                allocatable={r: q for r, q in n.allocatable.items() if q > 0},
            )
            for n in fleet.nodes
        )
        listed = [p for p in fleet.api_pods() if p.phase in ("Running", "Pending")]
        pods = tuple(p for p in listed if p.gpu_requests or p.namespace == EXPORTER_NAMESPACE)
        return ClusterState(
            nodes=nodes,
            pods=pods,
            namespaces=fleet.namespaces,
            quotas=fleet.quotas,
            exporter_pod_nodes={t.pod: t.node for t in fleet.targets},
            exporter_ip_nodes={t.ip: t.node for t in fleet.targets},
        )

    def gpu_samples(self, window: Window) -> pd.DataFrame:
        """Per unit (and pod, for shared GPUs) and sample of `window`: util and the workload DCGM names.

        Columns: timestamp, node, uuid, gpu_instance_id, mig_profile, util_ratio, util_source,
        namespace, pod ("" where DCGM names no workload). The window's step must be a multiple of
        the fleet's; coarser samples average the fleet's (as avg_over_time does).
        """
        fleet = self.fleet
        rows = self._labelled_telemetry()
        rows = rows[(rows["timestamp"] >= window.start) & (rows["timestamp"] < window.end)]
        if window.step_seconds != fleet.window.step_seconds:
            if window.step_seconds % fleet.window.step_seconds:
                raise ValueError("window step must be a multiple of the simulated fleet's step")
            offset = (rows["timestamp"] - window.start).dt.total_seconds() // window.step_seconds
            rows = rows.assign(
                timestamp=window.start + pd.to_timedelta(offset * window.step_seconds, unit="s")
            )
            keys = [
                "timestamp",
                "node",
                "uuid",
                "gpu_instance_id",
                "namespace",
                "pod",
                "mig_profile",
                "util_source",
            ]
            rows = rows.groupby(keys, as_index=False, sort=False).agg(util_ratio=("util_ratio", "mean"))
        return rows.reset_index(drop=True)

    def allocation_history(self, window: Window) -> pd.DataFrame:
        """gpuwatch's own allocation series as if its exporter had run all along (SPEC §4.3).

        Columns: timestamp, namespace, pod, team, node, pool, ge_share (per pod and sample).
        """
        keys = ["namespace", "pod", "team", "node", "pool"]
        truth = self._ground_truth()
        truth = truth[(truth["timestamp"] >= window.start) & (truth["timestamp"] < window.end)]
        offset = (truth["timestamp"] - window.start).dt.total_seconds() // window.step_seconds
        truth = truth.assign(timestamp=window.start + pd.to_timedelta(offset * window.step_seconds, unit="s"))
        # A coarse sample holds the mean of its sub-samples (avg_over_time of the gauge).
        ratio = self.fleet.window.step_seconds / window.step_seconds
        held = truth.groupby(["timestamp", *keys], as_index=False).agg(ge_share=("ge_share", "sum"))
        return held.assign(ge_share=held["ge_share"] * ratio)
