"""The simulated fleet behind the interfaces of the live sources: cluster state and GPU samples."""

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from gpuwatch.core.model import Window
from gpuwatch.core.schema import categorical_strings
from gpuwatch.sim.fleet import (
    ENERGY_MODEL_MAX_GPU_SAMPLES,
    EXPORTER_NAMESPACE,
    SimulatedFleet,
    framebuffer_used_bytes,
)
from gpuwatch.sources.kubernetes import ClusterState

UTIL_PROF = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
UTIL_DEV = "DCGM_FI_DEV_GPU_UTIL"
_HOLDER_COLUMNS = ("namespace", "pod", "team", "node", "pool")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Codes:
    """The fleet's units and allocations as integer codes: a window is labelled from these, never from
    whole-fleet frames of strings (a week of a 1,000-GPU fleet is millions of rows)."""

    units: dict[str, list[str]]  # per unit (fleet.gpus order): node, uuid, gpu_instance_id, ...
    holders: dict[str, list[str]]  # per holder (sorted): namespace, pod, team, node, pool
    unit: np.ndarray  # per allocation: its unit's index in fleet.gpus
    holder: np.ndarray  # per allocation: its holder's index (sorted like the string tuples)
    ge: np.ndarray  # per allocation: GE held
    first: np.ndarray  # per allocation: first fleet sample held
    end: np.ndarray  # per allocation: fleet sample after the last held
    missing: np.ndarray  # [unit, fleet sample] True where the exporter served nothing
    memory_bytes: np.ndarray  # per unit: its framebuffer
    loaded: np.ndarray  # per holder, and False for the blank one: keeps a model in memory (not stuck)


def _fleet_codes(fleet: SimulatedFleet) -> _Codes:
    index = {(g.uuid, g.gpu_instance_id): i for i, g in enumerate(fleet.gpus)}
    pods = {(p.namespace, p.name): p for p in fleet.pods}
    pool_of = {n.name: n.pool for n in fleet.nodes}
    keys = [
        (a.namespace, a.pod, fleet.team_of(pods[(a.namespace, a.pod)]), a.node, pool_of[a.node])
        for a in fleet.allocations
    ]
    table = sorted(set(keys))
    position = {key: i for i, key in enumerate(table)}
    spans = np.array(fleet.allocation_spans, dtype=np.int64).reshape(-1, 2)
    return _Codes(
        units={
            "node": [g.node for g in fleet.gpus],
            "uuid": [g.uuid for g in fleet.gpus],
            "gpu_instance_id": [g.gpu_instance_id for g in fleet.gpus],
            "mig_profile": [g.mig_profile for g in fleet.gpus],
            "gpu_index": [str(g.index) for g in fleet.gpus],
            "util_source": [UTIL_PROF if fleet.has_prof[g.uuid] else UTIL_DEV for g in fleet.gpus],
        },
        holders={name: [key[i] for key in table] for i, name in enumerate(_HOLDER_COLUMNS)},
        unit=np.array([index[(a.uuid, a.gpu_instance_id)] for a in fleet.allocations], dtype=np.int64),
        holder=np.array([position[key] for key in keys], dtype=np.int64),
        ge=np.array([a.ge for a in fleet.allocations], dtype=np.float64),
        first=spans[:, 0],
        end=spans[:, 1],
        missing=fleet.missing_mask(),
        memory_bytes=np.array([g.memory_bytes for g in fleet.gpus], dtype=np.float64),
        loaded=np.array(
            [fleet.archetypes.get(f"{ns}/{pod}") != "stuck" for ns, pod, *_ in table] + [False], dtype=bool
        ),
    )


def _held_samples(codes: _Codes, first: int, end: int) -> tuple[np.ndarray, np.ndarray]:
    """(allocation, fleet sample) of every sample in [first, end) an allocation held, allocation-major
    (the order of `SimulatedFleet.truth()`)."""
    lo = np.maximum(codes.first, first)
    counts = np.maximum(np.minimum(codes.end, end) - lo, 0)
    allocation = np.repeat(np.arange(len(counts)), counts)
    starts = np.cumsum(counts) - counts
    sample = lo[allocation] + np.arange(len(allocation)) - starts[allocation]
    return allocation, sample


def _reported(codes: _Codes, first: int, end: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(unit, fleet sample, holder) of the telemetry rows in [first, end): one per holder of the unit at
    that sample, or one with the blank holder (index len(holders), no workload named) when none. Unit by
    unit, sample by sample, a shared unit's holders in allocation order: the rows and order of a left
    join of `SimulatedFleet.telemetry()` with `truth()`."""
    n = end - first
    present = ~codes.missing[:, first:end]
    unit, offset = np.nonzero(present)
    allocation, sample = _held_samples(codes, first, end)
    held = codes.unit[allocation] * n + (sample - first)
    order = np.argsort(held, kind="stable")
    held = held[order]
    # Per reported unit-sample, how many hold it: that many rows, or one with the blank holder. The
    # holders of the reported unit-samples fill the rows that are not blank, in the same order.
    count = np.bincount(held, minlength=present.size)[unit * n + offset]
    copies = np.maximum(count, 1)
    holder = np.full(int(copies.sum()), len(codes.holders["pod"]))
    holder[np.repeat(count > 0, copies)] = codes.holder[allocation[order]][present.ravel()[held]]
    return np.repeat(unit, copies), np.repeat(offset, copies) + first, holder


def _times(window: Window, index: np.ndarray) -> pd.DatetimeIndex:
    """The times of the window's samples of these indexes."""
    return window.start + pd.to_timedelta(index.astype(np.float64) * window.step_seconds, unit="s")


def _any_per_unit_sample(flags: np.ndarray, unit: np.ndarray, sample: np.ndarray) -> np.ndarray:
    """Per row, whether any row of its (unit, sample) is flagged: a time-sliced GPU's holders share one
    framebuffer. The rows of a unit-sample are consecutive (_reported's order)."""
    if not len(flags):
        return flags
    key = unit.astype(np.int64) * (int(sample.max()) + 1) + sample
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    return np.repeat(np.maximum.reduceat(flags, starts), np.diff(np.r_[starts, len(flags)]))


class SimulatedSource:
    """Answers like KubernetesSource.cluster_state() and PrometheusSource GPU samples, from one fleet."""

    def __init__(self, fleet: SimulatedFleet) -> None:
        self.fleet = fleet
        self._codes: _Codes | None = None

    def power_energy(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The fleet's [unit, sample] power (W) and energy counter (J), as its exporters report them;
        None past ENERGY_MODEL_MAX_GPU_SAMPLES (two float arrays of the whole fleet window: a month of
        10,000 GPUs, simulated for its gpuwatch_* history alone, leaves energy out)."""
        if self.fleet.util_ratio.size > ENERGY_MODEL_MAX_GPU_SAMPLES:
            return None
        return self.fleet.power_energy

    def _fleet_codes(self) -> _Codes:
        if self._codes is None:
            self._codes = _fleet_codes(self.fleet)
        return self._codes

    def _samples_of(self, window: Window) -> tuple[int, int]:
        """The fleet samples [first, end) whose time falls in the window."""
        times = self.fleet.sample_times()
        first, end = times.searchsorted([pd.Timestamp(window.start), pd.Timestamp(window.end)])
        return int(first), int(end)

    def _fleet_times(self, sample: np.ndarray) -> pd.DatetimeIndex:
        return self.fleet.sample_times().take(sample)

    def _window_samples(self, sample: np.ndarray, window: Window) -> np.ndarray:
        """The index of the window's sample that holds each fleet sample (in nanoseconds: exact)."""
        fleet = self.fleet.window
        since_start = (pd.Timestamp(fleet.start) - pd.Timestamp(window.start)).value
        return (since_start + sample * (fleet.step_seconds * 10**9)) // (window.step_seconds * 10**9)

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

        Columns: timestamp, node, uuid, gpu_instance_id, mig_profile, gpu_index, util_ratio,
        fb_used_bytes, util_source, namespace, pod ("" where DCGM names no workload), keys as
        categoricals of strings.
        The window's step must be a multiple of the fleet's; coarser samples average the fleet's (as
        avg_over_time does). Rows run unit by unit, sample by sample, a shared unit's holders in
        allocation order.
        """
        fine_step = window.step_seconds == self.fleet.window.step_seconds
        if window.step_seconds % self.fleet.window.step_seconds:
            raise ValueError("window step must be a multiple of the simulated fleet's step")
        codes = self._fleet_codes()
        unit, sample, holder = _reported(codes, *self._samples_of(window))
        util = self.fleet.util_ratio[unit, sample]
        rows = pd.DataFrame(
            {
                "util_ratio": util,
                "fb_used_bytes": framebuffer_used_bytes(
                    codes.memory_bytes[unit],
                    util,
                    holder < len(codes.loaded) - 1,
                    _any_per_unit_sample(codes.loaded[holder], unit, sample),
                ),
            }
        )
        modelled = self.power_energy()
        if modelled is not None:  # whole-GPU fields: the counter read last in a coarse sample
            rows["power_watts"], rows["energy_joules"] = modelled[0][unit, sample], modelled[1][unit, sample]
        if fine_step:
            timestamp = self._fleet_times(sample)
        else:  # one row per window sample, unit and holder, in the order each first appears
            fields = {
                "util_ratio": "mean",
                "fb_used_bytes": "mean",
                "power_watts": "mean",
                "energy_joules": "last",
            }
            n_units, n_holders = len(codes.memory_bytes), len(codes.loaded)
            key = (self._window_samples(sample, window) * n_units + unit) * n_holders + holder
            rows = rows.groupby(key, sort=False).agg({k: f for k, f in fields.items() if k in rows})
            key = rows.index.to_numpy()
            unit, holder = key // n_holders % n_units, key % n_holders
            timestamp = _times(window, key // (n_holders * n_units))
            rows = rows.reset_index(drop=True)
        units, holders = codes.units, codes.holders
        return pd.DataFrame(
            {
                "timestamp": timestamp,
                "node": categorical_strings(units["node"], unit),
                "uuid": categorical_strings(units["uuid"], unit),
                "gpu_instance_id": categorical_strings(units["gpu_instance_id"], unit),
                "util_ratio": rows["util_ratio"],
                "fb_used_bytes": rows["fb_used_bytes"],
                **{k: rows[k] for k in ("power_watts", "energy_joules") if k in rows},
                "namespace": categorical_strings([*holders["namespace"], ""], holder),
                "pod": categorical_strings([*holders["pod"], ""], holder),
                "mig_profile": categorical_strings(units["mig_profile"], unit),
                "gpu_index": categorical_strings(units["gpu_index"], unit),
                "util_source": categorical_strings(units["util_source"], unit),
            }
        )

    def allocation_history(self, window: Window) -> pd.DataFrame:
        """gpuwatch's own allocation series as if its exporter had run all along (SPEC §4.3).

        Columns: timestamp, namespace, pod, team, node, pool (categoricals of strings), ge_share (per
        pod and sample).
        """
        codes = self._fleet_codes()
        allocation, sample = _held_samples(codes, *self._samples_of(window))
        n_holders = len(codes.loaded)
        key = self._window_samples(sample, window) * n_holders + codes.holder[allocation]
        # One row per window sample and holder, in that order.
        ge_share = pd.Series(codes.ge[allocation]).groupby(key).sum()
        key = ge_share.index.to_numpy()
        holder = key % n_holders
        # A coarse sample holds the mean of its sub-samples (avg_over_time of the gauge).
        ratio = self.fleet.window.step_seconds / window.step_seconds
        return pd.DataFrame(
            {
                "timestamp": _times(window, key // n_holders),
                **{name: categorical_strings(codes.holders[name], holder) for name in _HOLDER_COLUMNS},
                "ge_share": ge_share.to_numpy() * ratio,
            }
        )
