"""The simulated fleet: deterministic, and every view of it agrees with every other."""

from collections import defaultdict
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest

from gpuwatch.core.model import MIG_SLICES_PER_GPU, is_gpu_resource, mig_profile_slices
from gpuwatch.sim import SimulatedFleet, build_demo_fleet

END = datetime(2026, 11, 20, tzinfo=UTC)


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=42, end=END, days=2)


def test_deterministic_per_seed(fleet: SimulatedFleet) -> None:
    again = build_demo_fleet(seed=42, end=END, days=2)
    assert again.allocations == fleet.allocations
    assert again.pods == fleet.pods
    np.testing.assert_array_equal(again.util_ratio, fleet.util_ratio)
    other = build_demo_fleet(seed=7, end=END, days=2)
    assert other.allocations != fleet.allocations


def test_demo_has_the_spec_ingredients(fleet: SimulatedFleet) -> None:
    pools = {n.pool for n in fleet.nodes}
    assert pools == {
        "NVIDIA-H100-80GB-HBM3",
        "NVIDIA-A100-SXM4-80GB",
        "NVIDIA-L4",
        "TESLA-T4",
        "AMD_INSTINCT_MI300X_OAM",
    }
    assert sum(n.gpu_count for n in fleet.nodes) == 96
    assert {n.vendor for n in fleet.nodes} == {"nvidia", "amd"}
    amd = [a for a in fleet.allocations if a.resource == "amd.com/gpu"]
    assert amd and {a.node[:10] for a in amd} == {"gpu-mi300x"}
    assert any(n.mig_strategy == "mixed" for n in fleet.nodes)
    assert any(n.replicas > 1 and "nvidia.com/gpu.shared" in n.capacity for n in fleet.nodes)
    assert any(n.product.endswith("-SHARED") for n in fleet.nodes)
    assert sum(not n.ready for n in fleet.nodes) == 1
    assert sum(n.unschedulable for n in fleet.nodes) == 1
    assert any(n.allocatable_gpus() < n.capacity_gpus() for n in fleet.nodes if n.ready)
    teams = {fleet.team_of(p) for p in fleet.pods if p.gpu_requests}
    assert len(teams) >= 12 and "data-science" in teams and "batch-jobs" in teams
    assert set(fleet.archetypes.values()) == {"training", "inference", "notebook", "stuck", "batch"}
    assert {p.phase for p in fleet.api_pods() if p.gpu_requests} >= {"Running", "Pending"}
    assert {t.hostname_label for t in fleet.targets} == {"Hostname", "hostname"}
    assert any(t.hostname_value == t.pod for t in fleet.targets)
    assert {e.kind for e in fleet.events} == {"xid", "row_remap_failure", "hot"}
    assert {e.value for e in fleet.events if e.kind == "xid"} == {79, 13}
    assert fleet.gaps


def test_never_more_allocated_than_allocatable(fleet: SimulatedFleet) -> None:
    times = fleet.sample_times()
    per_node_sample: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(len(times)))
    per_unit: dict[tuple[str, str, str], np.ndarray] = defaultdict(lambda: np.zeros(len(times)))
    for a in fleet.allocations:
        end = a.end or fleet.now
        held = (times >= pd.Timestamp(a.start)) & (times < pd.Timestamp(end))
        per_node_sample[a.node] += held * a.ge
        per_unit[(a.uuid, a.gpu_instance_id, a.replica)] += held
    for node in fleet.nodes:
        assert per_node_sample[node.name].max() <= node.allocatable_gpus() + 1e-9, node.name
    assert max(v.max() for v in per_unit.values()) <= 1, "a unit held by two pods at once"
    for node in fleet.nodes:
        if not node.ready or node.unschedulable:
            assert per_node_sample[node.name].max() == 0, f"{node.name} should host no GPU pods"


def test_mig_layout_fits_seven_slices(fleet: SimulatedFleet) -> None:
    slices: dict[str, int] = defaultdict(int)
    for g in fleet.gpus:
        if g.mig_profile:
            slices[g.uuid] += mig_profile_slices(g.mig_profile)
    assert slices and all(v <= MIG_SLICES_PER_GPU for v in slices.values())
    for node in fleet.nodes:
        mig = {r: q for r, q in node.capacity.items() if r.startswith("nvidia.com/mig-") and q > 0}
        units = [g for g in fleet.gpus if g.node == node.name and g.mig_profile]
        assert sum(mig.values()) == len(units)
        assert all(is_gpu_resource(r) for r in node.capacity)


def test_pod_requests_match_their_allocations(fleet: SimulatedFleet) -> None:
    held: dict[tuple[str, str], list[str]] = defaultdict(list)
    for a in fleet.allocations:
        held[(a.namespace, a.pod)].append(a.resource)
    for pod in fleet.pods:
        if pod.phase in ("Running", "Succeeded") and pod.gpu_requests:
            ((resource, qty),) = pod.gpu_requests.items()
            assert held[(pod.namespace, pod.name)] == [resource] * int(qty)
            node = fleet.node(pod.node or "")
            assert node.allocatable.get(resource, 0) > 0
        if pod.phase == "Pending":
            assert pod.node is None and (pod.namespace, pod.name) not in held


def test_telemetry_agrees_with_allocations(fleet: SimulatedFleet) -> None:
    tel = fleet.telemetry()
    truth = fleet.truth()
    assert tel["timestamp"].dt.tz is not None
    # Truth util is the telemetry util of the held unit at the same sample.
    merged = truth.merge(tel, on=["timestamp", "uuid", "gpu_instance_id"], suffixes=("", "_tel"))
    same = merged["util_ratio"].eq(merged["util_ratio_tel"]) | merged["util_ratio"].isna()
    assert same.all()
    # Gap and NotReady samples are absent from telemetry and unknown (NaN) in the truth, never 0.
    not_ready = next(n.name for n in fleet.nodes if not n.ready)
    assert not tel["node"].eq(not_ready).any()
    gap = next(g for g in fleet.gaps if g.node != not_ready)
    in_gap = truth[(truth.node == gap.node) & (truth.timestamp >= gap.start) & (truth.timestamp < gap.end)]
    assert len(in_gap) > 0 and in_gap["util_ratio"].isna().all()
    # Stuck pods hold GPUs at exactly zero; training runs hot; MIG whole-GPU fields repeat per instance.
    stuck = [k for k, v in fleet.archetypes.items() if v == "stuck"]
    stuck_rows = truth[(truth.namespace + "/" + truth.pod).isin(stuck)]
    assert len(stuck_rows) > 0 and stuck_rows["util_ratio"].fillna(0).eq(0).all()
    mig = tel[tel.gpu_instance_id != ""]
    per_gpu = mig.groupby(["uuid", "timestamp"])["power_watts"].nunique()
    assert per_gpu.max() == 1
    assert (tel["util_ratio"].between(0, 1)).all()
    assert (tel["fb_used_bytes"] + tel["fb_free_bytes"] > 0).all()


def test_scaled_fleet_keeps_its_shape() -> None:
    big = build_demo_fleet(seed=1, end=END, days=0.25, gpus=400)
    assert 360 <= sum(n.gpu_count for n in big.nodes) <= 440
    assert len({n.pool for n in big.nodes}) == 5


def test_a_pod_count_stretches_lifetimes_not_how_many_run_at_once() -> None:
    """--pods: a month with a quarter of the demo's pods, each living longer; the GPUs stay as busy."""

    def running_at_end(f: SimulatedFleet) -> int:
        return sum(1 for p in f.pods if p.phase == "Running" and p.node)

    natural = build_demo_fleet(seed=1, end=END, days=30, step_seconds=3600)
    wanted = len(natural.pods) // 4
    fewer = build_demo_fleet(seed=1, end=END, days=30, step_seconds=3600, pods=wanted)
    assert 0.75 * wanted <= len(fewer.pods) <= 1.25 * wanted
    assert running_at_end(fewer) == pytest.approx(running_at_end(natural), rel=0.2)
    assert build_demo_fleet(seed=1, end=END, days=30, step_seconds=3600, pods=10**6).pods == natural.pods
