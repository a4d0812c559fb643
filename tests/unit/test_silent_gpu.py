"""Telemetry per GPU, not per pod (SPEC §3): one GPU of an 8-GPU pod silent while its siblings report is
allocated_unknown for its share, in the ledger, the usage, idle detection, coverage and the series."""

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from gpuwatch.analytics.join import attribute
from gpuwatch.analytics.ledger import ledger_gpu_hours, silent_units
from gpuwatch.core.config import Settings
from gpuwatch.core.model import RESOURCE_GPU, Namespace, Node, Pod, TeamRules, Window
from gpuwatch.read.analysis import (
    Analysis,
    analyze,
    nodes_frame,
    pods_frame,
    silent_gpu_warnings,
    usage_tables,
)
from gpuwatch.read.series import published_series
from gpuwatch.sources.kubernetes import ClusterState

T0 = datetime(2026, 11, 20, tzinfo=UTC)
NODE = "gpu-h100-002"
H100 = "NVIDIA-H100-80GB-HBM3"
N = 120  # two hours of 60 s samples
GAP = range(30, 60)  # GPU 7 silent from 00:30 to 01:00: 30 samples, 30 min
WINDOW = Window(start=T0, end=T0 + timedelta(hours=2), step_seconds=60)
TIMES = pd.date_range(T0, periods=N, freq="60s")


def _state(*, running: bool = True) -> ClusterState:
    gpus = {RESOURCE_GPU: 8.0}
    pod = Pod(
        namespace="ml",
        name="train",
        uid="u1",
        phase="Running",
        created_at=T0 - timedelta(hours=1),
        node=NODE,
        started_at=T0 - timedelta(hours=1),
        gpu_requests=gpus,
    )
    return ClusterState(
        nodes=(Node(name=NODE, product=H100, gpu_count=8, capacity=gpus, allocatable=gpus),),
        pods=(pod,) if running else (),
        namespaces=(Namespace(name="ml", labels={"team": "research"}),),
        quotas=(),
    )


def _samples(util: np.ndarray, *, silent: dict[int, range]) -> pd.DataFrame:
    """DCGM rows of the 8 GPUs (util[gpu, sample]) naming ml/train, but none where a GPU is silent."""
    gpu, sample = np.meshgrid(np.arange(8), np.arange(N), indexing="ij")
    present = np.ones((8, N), dtype=bool)
    for g, samples in silent.items():
        present[g, list(samples)] = False
    gpu, sample = gpu[present], sample[present]
    return pd.DataFrame(
        {
            "timestamp": TIMES.take(sample),
            "node": NODE,
            "uuid": [f"GPU-{g}" for g in gpu],
            "gpu_instance_id": "",
            "mig_profile": "",
            "gpu_index": [str(g) for g in gpu],
            "util_ratio": util[gpu, sample],
            "namespace": "ml",
            "pod": "train",
            "util_source": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        }
    )


def _busy() -> Analysis:
    """GPUs 0-6 at 0.5 all along; GPU 7 at 0.9, silent over GAP."""
    util = np.full((8, N), 0.5)
    util[7] = 0.9
    samples = _samples(util, silent={7: GAP})
    return analyze(window=WINDOW, state=_state(), gpu_samples=samples, settings=Settings())


def test_the_silent_gpus_share_is_allocated_unknown_by_hand() -> None:
    """By hand, in GE-hours (1 GE × 1 min = 1/60): capacity 8 × 2 h = 16; GPU 7 without a sample at 30
    steps: 30/60 = 0.5 allocated_unknown; the other 16 - 0.5 = 15.5 allocated_active (nothing idle,
    nothing free). Used: GPUs 0-6 7 × 2 h × 0.5 = 7.0, GPU 7 90 samples × 0.9 / 60 = 1.35, total 8.35;
    efficiency = 8.35 / 15.5 (the unknown half hour is on neither side)."""
    analysis = _busy()
    hours = ledger_gpu_hours(analysis.by_node, step_seconds=60).iloc[0]
    assert hours["capacity_gpu_hours"] == pytest.approx(16.0)
    assert hours["allocated_unknown_gpu_hours"] == pytest.approx(0.5)
    assert hours["allocated_active_gpu_hours"] == pytest.approx(15.5)
    for state in ("unavailable", "stranded", "unallocated", "allocated_idle"):
        assert hours[f"{state}_gpu_hours"] == pytest.approx(0.0, abs=1e-12), state
    (pod,) = usage_tables(analysis)["workload"].to_dict("records")
    assert pod["allocated_gpu_hours"] == pytest.approx(16.0)
    assert pod["unknown_gpu_hours"] == pytest.approx(0.5)
    assert pod["used_gpu_hours"] == pytest.approx(8.35)
    assert pod["idle_gpu_hours"] == 0.0
    assert pod["efficiency"] == pytest.approx(8.35 / 15.5)
    assert pod["gpus"] == 8.0
    # At a silent sample the pod holds all 8 GPUs: 7 known and GPU 7's share unknown, never 0.9 or 0.5.
    at_gap = analysis.marked[analysis.marked["timestamp"] == TIMES[GAP.start]]
    assert at_gap["ge_share"].sum() == 8.0
    assert at_gap.loc[at_gap["uuid"] == "GPU-7", "util_ratio"].isna().all()
    assert at_gap["util_ratio"].notna().sum() == 7


def test_coverage_names_the_silent_gpu() -> None:
    coverage = _busy().coverage
    assert (coverage.gpu_samples_expected, coverage.gpu_samples_present) == (8 * N, 8 * N - 30)
    assert "gpu-h100-002 GPU 7: no telemetry for 30 min while allocated" in coverage.warnings
    assert len([w for w in coverage.warnings if "no telemetry for" in w]) == 1


def test_the_published_series_carry_the_unknown_share() -> None:
    """At a silent sample: allocation 8, unknown 1, used 7 × 0.5 = 3.5, utilization over the 7 known
    GPUs 3.5 / 7 = 0.5; outside the gap, utilization (7 × 0.5 + 0.9) / 8 = 0.55; the node's ledger
    holds 1 GE allocated_unknown and 7 allocated_active."""
    families = {f.name: f.samples for f in published_series(_busy(), last_only=False)}

    def at(name: str, i: int, **labels: str) -> float:
        frame = families[name]
        frame = frame[frame["timestamp"] == TIMES[i]]
        for key, value in labels.items():
            frame = frame[frame[key] == value]
        (value,) = frame["value"].tolist()
        return float(value)

    i = GAP.start + 5
    assert at("gpuwatch_pod_gpu_allocation", i) == 8.0
    assert at("gpuwatch_pod_gpu_unknown", i) == 1.0
    assert at("gpuwatch_pod_gpu_used", i) == pytest.approx(3.5)
    assert at("gpuwatch_pod_gpu_utilization_ratio", i) == pytest.approx(0.5)
    assert at("gpuwatch_pod_gpu_utilization_ratio", 0) == pytest.approx(0.55)
    assert at("gpuwatch_pod_gpu_unknown", 0) == 0.0
    assert at("gpuwatch_node_gpus", i, state="allocated_unknown") == 1.0
    assert at("gpuwatch_node_gpus", i, state="allocated_active") == 7.0
    assert at("gpuwatch_team_gpus", i, state="allocated_unknown") == 1.0


def test_unknown_is_never_idle_and_breaks_the_silent_gpus_run() -> None:
    """All 8 GPUs at 0 (a stuck pod); idle window 30 samples, so a GPU is idle from the 30th sample of a
    run below the threshold. GPUs 0-6: idle at samples 29-119 (91), active at 0-28 (29). GPU 7: run
    0-29 idle at 29 (1), unknown at 30-59 (30), the run restarts at 60 and is idle at 89-119 (31), active
    the other 58. Idle (7 × 91 + 32) / 60 = 11.15, unknown 0.5, active (7 × 29 + 58) / 60 = 4.35."""
    samples = _samples(np.zeros((8, N)), silent={7: GAP})
    analysis = analyze(window=WINDOW, state=_state(), gpu_samples=samples, settings=Settings())
    hours = ledger_gpu_hours(analysis.by_node, step_seconds=60).iloc[0]
    assert hours["allocated_idle_gpu_hours"] == pytest.approx(11.15)
    assert hours["allocated_unknown_gpu_hours"] == pytest.approx(0.5)
    assert hours["allocated_active_gpu_hours"] == pytest.approx(4.35)
    gpu7 = analysis.marked[analysis.marked["uuid"] == "GPU-7"].set_index("timestamp")["idle"]
    assert gpu7.sum() == 32 and not gpu7.iloc[GAP.start : GAP.stop].any()
    (pod,) = usage_tables(analysis)["workload"].to_dict("records")
    assert pod["efficiency"] == 0.0 and pod["used_gpu_hours"] == 0.0


def _attributed(samples: pd.DataFrame, state: ClusterState) -> pd.DataFrame:
    return attribute(
        gpu_samples=samples,
        pods=pods_frame(state, TeamRules()),
        nodes=nodes_frame(state),
        sample_times=TIMES,
        namespace_teams={},
    ).attributed


def _per_sample(attributed: pd.DataFrame) -> pd.DataFrame:
    """Per sample: GE held, GE of unknown utilization, GE on a unit of unknown identity."""
    frame = attributed.assign(
        unknown=attributed["ge_share"].where(attributed["util_ratio"].isna(), 0.0),
        blank=attributed["ge_share"].where(attributed["uuid"] == "", 0.0),
    )
    return frame.groupby("timestamp").agg(
        ge=("ge_share", "sum"), unknown=("unknown", "sum"), blank=("blank", "sum")
    )


def test_a_gpu_silent_until_now_is_held_as_far_as_the_api_request_goes() -> None:
    # XID 79 at sample 90, never back: the running pod requests 8, so GPU 7 stays held, unknown.
    samples = _samples(np.full((8, N), 0.5), silent={7: range(90, N)})
    got = _per_sample(_attributed(samples, _state()))
    assert (got["ge"] == 8.0).all()
    assert got["unknown"].tolist() == [0.0] * 90 + [1.0] * 30
    assert (got["blank"] == 0.0).all()  # on GPU-7 itself, its last known unit
    # A pod gone from the API server, no history: DCGM alone says it held GPU 7 up to its last sighting
    # and from its first, not after (a pod of the same name may since run elsewhere).
    gone = _per_sample(_attributed(samples, _state(running=False)))
    assert gone["ge"].tolist() == [8.0] * 90 + [7.0] * 30
    inside = _samples(np.full((8, N), 0.5), silent={7: GAP})
    assert (_per_sample(_attributed(inside, _state(running=False)))["unknown"] > 0).sum() == 30


def test_a_gpu_dcgm_never_reported_is_held_on_an_unknown_unit() -> None:
    # A partial exporter that never serves GPU 7: the pod's request says 8, DCGM shows 7.
    samples = _samples(np.full((8, N), 0.5), silent={7: range(N)})
    got = _per_sample(_attributed(samples, _state()))
    assert (got["ge"] == 8.0).all() and (got["unknown"] == 1.0).all() and (got["blank"] == 1.0).all()


def test_silent_gpu_warnings_are_bounded_and_skip_short_gaps() -> None:
    silent = pd.DataFrame(
        {
            "node": [f"n{i:02d}" for i in range(13)],
            "uuid": [f"GPU-{i}" for i in range(13)],
            "gpu_instance_id": [""] * 11 + ["2", ""],
            "silent_seconds": [7200.0] + [1800.0] * 11 + [60.0],  # the last: one missed scrape
        }
    )
    index = {f"GPU-{i}": str(i % 8) for i in range(12)}
    lines = silent_gpu_warnings(silent, index, min_seconds=1800.0, limit=10)
    assert lines[0] == "n00 GPU 0: no telemetry for 2.0 h while allocated"
    assert lines[1] == "n01 GPU 1: no telemetry for 30 min while allocated"
    assert len(lines) == 11
    assert lines[-1] == "and 2 more GPUs without telemetry for at least 30 min while allocated"
    # All shown when within the limit; a MIG instance is named with its GPU instance id.
    every = silent_gpu_warnings(silent, index, min_seconds=1800.0, limit=100)
    assert len(every) == 12 and "n11 GPU 3 MIG 2: no telemetry for 30 min while allocated" in every


def test_silent_units_count_a_shared_gpus_sample_once() -> None:
    marked = pd.DataFrame(
        {
            "timestamp": [TIMES[0], TIMES[0], TIMES[1], TIMES[1]],
            "node": ["t4"] * 4,
            "uuid": ["GPU-t"] * 3 + [""],
            "gpu_instance_id": [""] * 4,
            "util_ratio": [np.nan, np.nan, np.nan, np.nan],
        }
    )
    got = silent_units(marked, step_seconds=60)
    assert got.to_dict("records") == [
        {"node": "t4", "uuid": "GPU-t", "gpu_instance_id": "", "silent_seconds": 120.0}
    ]
