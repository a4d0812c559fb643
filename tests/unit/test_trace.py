"""Replay of the openb trace format (Weng et al., "Beware of Fragmentation", USENIX ATC'23) on fixtures."""

import math
import tempfile
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwatch.core.errors import DataError
from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.fleet import SimulatedFleet, sample_spans
from gpuwatch.sim.openb import NODE_COLUMNS, POD_COLUMNS
from gpuwatch.sim.trace import (
    QOS_ARCHETYPES,
    OpenbFleet,
    OpenbTrace,
    ReplayCounts,
    load_openb,
    replay_openb,
    summary,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "openb"
NODES_CSV = FIXTURES / "openb_node_list_gpu_node.csv"
PODS_CSV = FIXTURES / "openb_pod_list_default.csv"
START = datetime(2024, 1, 1, tzinfo=UTC)
TWO_HOURS = 2 / 24  # days
STEP = 300


@pytest.fixture(scope="module")
def trace() -> OpenbTrace:
    return load_openb(NODES_CSV, PODS_CSV)


@pytest.fixture(scope="module")
def fleet(trace: OpenbTrace) -> OpenbFleet:
    return replay_openb(trace, start=START, days=TWO_HOURS, step_seconds=STEP, seed=3)


def _t(seconds: float | None) -> datetime | None:
    return None if seconds is None else START + timedelta(seconds=seconds)


def _allocations(fleet: SimulatedFleet) -> list[tuple[str, str, int, float, str, datetime, datetime | None]]:
    index = {g.uuid: g.index for g in fleet.gpus}
    return [(a.pod, a.node, index[a.uuid], a.ge, a.replica, a.start, a.end) for a in fleet.allocations]


# ---------------------------------------------------------------------------------------------
# Loading


def test_load_keeps_every_row_with_typed_columns(trace: OpenbTrace) -> None:
    assert list(trace.nodes.columns) == list(NODE_COLUMNS)
    assert list(trace.pods.columns) == list(POD_COLUMNS)
    assert trace.nodes["sn"].tolist() == ["node-a", "node-b", "node-c"]
    assert trace.nodes["gpu"].tolist() == [2, 4, 1]
    assert str(trace.nodes["gpu"].dtype) == "int64"
    assert len(trace.pods) == 10
    assert trace.pods["num_gpu"].tolist() == [1, 2, 1, 1, 4, 1, 0, 8, 1, 1]
    assert trace.pods["gpu_milli"].tolist() == [500, 1000, 300, 200, 1000, 1000, 0, 1000, 1000, 1000]
    assert trace.pods["gpu_spec"].tolist()[3:9] == [
        "V100M32",
        "",
        "V100M16",
        "",
        "V100M32",
        "V100M16|V100M32",
    ]
    assert str(trace.pods["creation_time"].dtype) == "float64"
    assert trace.pods["deletion_time"].iloc[7] == 99999.0
    scheduled = trace.pods["scheduled_time"]
    assert math.isnan(scheduled.iloc[5]) and math.isnan(scheduled.iloc[7]) and scheduled.iloc[4] == 1800.0


# ---------------------------------------------------------------------------------------------
# Replay of the hand-computed trace


def test_tiny_trace_is_placed_as_computed_by_hand(fleet: OpenbFleet) -> None:
    # pod-s1, pod-s2 share node-c's only GPU (best fit: the smallest node); pod-spec may only run on a
    # V100M32, though node-c had exactly its 200 milli left; pod-w4 waits for pod-spec to leave node-b;
    # pod-exp waits for a V100M16 and is deleted first; pod-run lands on the only node with a free GPU.
    assert _allocations(fleet) == [
        ("pod-s1", "node-c", 0, 0.5, "0", _t(0), _t(3600)),
        ("pod-two", "node-a", 0, 1.0, "", _t(300), _t(7200)),
        ("pod-two", "node-a", 1, 1.0, "", _t(300), _t(7200)),
        ("pod-s2", "node-c", 0, 0.3, "1", _t(600), _t(4200)),
        ("pod-spec", "node-b", 0, 0.2, "0", _t(700), _t(1800)),
        ("pod-w4", "node-b", 0, 1.0, "", _t(1800), _t(3600)),
        ("pod-w4", "node-b", 1, 1.0, "", _t(1800), _t(3600)),
        ("pod-w4", "node-b", 2, 1.0, "", _t(1800), _t(3600)),
        ("pod-w4", "node-b", 3, 1.0, "", _t(1800), _t(3600)),
        ("pod-run", "node-b", 0, 1.0, "", _t(4000), None),
    ]
    assert {a.resource for a in fleet.allocations} == {"nvidia.com/gpu"}
    assert {a.namespace for a in fleet.allocations if a.pod == "pod-s2"} == {"be"}


def test_tiny_trace_pods_at_window_end(fleet: OpenbFleet) -> None:
    gpu_pods = {p.name: p for p in fleet.pods if p.gpu_requests}
    got = {
        name: (
            p.namespace,
            p.phase,
            p.node,
            p.started_at,
            p.finished_at,
            p.gpu_requests,
            p.node_selector_product,
        )
        for name, p in gpu_pods.items()
    }
    g = "nvidia.com/gpu"
    assert got == {
        "pod-s1": ("ls", "Succeeded", "node-c", _t(0), _t(3600), {g: 0.5}, None),
        "pod-two": ("burstable", "Succeeded", "node-a", _t(300), _t(7200), {g: 2.0}, None),
        "pod-s2": ("be", "Failed", "node-c", _t(600), _t(4200), {g: 0.3}, None),
        "pod-spec": ("ls", "Succeeded", "node-b", _t(700), _t(1800), {g: 0.2}, "V100M32"),
        "pod-w4": ("ls", "Succeeded", "node-b", _t(1800), _t(3600), {g: 4.0}, None),
        "pod-8": ("ls", "Pending", None, None, None, {g: 8.0}, "V100M32"),
        "pod-run": ("ls", "Running", "node-b", _t(4000), None, {g: 1.0}, None),
    }
    assert gpu_pods["pod-w4"].created_at == _t(900)
    assert gpu_pods["pod-8"].created_at == _t(3000)
    # One dcgm-exporter pod per node, as in the demo fleet.
    assert sorted(p.node or "" for p in fleet.pods if not p.gpu_requests) == ["node-a", "node-b", "node-c"]


def test_tiny_trace_counts_and_summary(fleet: OpenbFleet) -> None:
    assert fleet.counts == ReplayCounts(
        trace_pods=10,
        cpu_only=1,
        placed=6,
        pending=1,
        expired=1,
        ended_before_window=0,
        created_after_window=1,
        nodes_without_gpus=0,
    )
    # Samples every 300 s; sample i is held when the pod held the GPU at t_i (ceil of start and end):
    # s1 12x0.5 + two 23x2 + s2 12x0.3 + spec 3x0.2 + w4 6x4 + run 10x1 = 90.2 GE-samples = 7.516667 GE-h.
    assert summary(fleet) == {
        "nodes": 3,
        "gpus": 7,
        "pods_placed": 6,
        "pods_running": 1,
        "pods_pending": 1,
        "pods_skipped_cpu_only": 1,
        "pods_expired": 1,
        "pods_outside_window": 1,
        "capacity_gpu_hours": 14.0,
        "allocated_gpu_hours": 7.516667,
        "mean_allocation_rate": 0.536905,
        "peak_allocated_gpus": 6.8,
    }


def test_tiny_trace_fleet_model(fleet: OpenbFleet) -> None:
    assert [(n.name, n.product, n.pool, n.gpu_count, dict(n.allocatable)) for n in fleet.nodes] == [
        ("node-a", "V100M16", "V100M16", 2, {"nvidia.com/gpu": 2.0}),
        ("node-b", "V100M32", "V100M32", 4, {"nvidia.com/gpu": 4.0}),
        ("node-c", "T4", "T4", 1, {"nvidia.com/gpu": 1.0}),
    ]
    node_b = fleet.nodes[1]
    assert node_b.labels["nvidia.com/gpu.product"] == "V100M32"
    assert node_b.labels["nvidia.com/gpu.count"] == "4"
    assert node_b.labels["nvidia.com/gpu.memory"] == "32510"
    assert node_b.ready and not node_b.unschedulable
    assert [(g.node, g.index) for g in fleet.gpus] == [
        ("node-a", 0),
        ("node-a", 1),
        ("node-b", 0),
        ("node-b", 1),
        ("node-b", 2),
        ("node-b", 3),
        ("node-c", 0),
    ]
    assert len({g.uuid for g in fleet.gpus}) == 7 and all(g.uuid.startswith("GPU-") for g in fleet.gpus)
    assert {ns.name: ns.labels.get("team") for ns in fleet.namespaces} == {
        "be": "offline",
        "burstable": "research",
        "ls": "online",
        "gpu-operator": None,
    }
    teams = {p.name: fleet.team_of(p) for p in fleet.pods if p.gpu_requests}
    assert teams["pod-two"] == "research" and teams["pod-s2"] == "offline" and teams["pod-8"] == "online"
    assert len(fleet.targets) == 3 and fleet.gaps == () and fleet.events == ()
    assert all(fleet.has_prof.values()) and len(fleet.has_prof) == 7
    qos = {
        "pod-s1": "LS",
        "pod-two": "Burstable",
        "pod-s2": "BE",
        "pod-spec": "LS",
        "pod-w4": "LS",
        "pod-run": "LS",
    }
    assert set(fleet.archetypes) == {f"{q.lower()}/{p}" for p, q in qos.items()}
    for key, archetype in fleet.archetypes.items():
        assert archetype in (QOS_ARCHETYPES[qos[key.split("/")[1]]], "notebook", "stuck"), key


def test_truth_and_telemetry_views_of_the_replay(fleet: OpenbFleet) -> None:
    truth = fleet.truth()
    assert len(truth) == 12 + 46 + 12 + 3 + 24 + 10
    per_pod = truth.groupby("pod")["ge_share"].sum() * STEP / 3600
    assert per_pod.round(6).to_dict() == {
        "pod-run": 0.833333,
        "pod-s1": 0.5,
        "pod-s2": 0.3,
        "pod-spec": 0.05,
        "pod-two": 3.833333,
        "pod-w4": 2.0,
    }
    assert set(truth["pool"]) == {"V100M16", "V100M32", "T4"}
    assert truth["util_ratio"].between(0, 1).all()
    tel = fleet.telemetry()
    assert len(tel) == 7 * 24
    assert tel["util_ratio"].between(0, 1).all()
    idle = tel[tel["uuid"].isin({g.uuid for g in fleet.gpus if g.node == "node-b" and g.index == 3})]
    # node-b GPU 3 is held only by pod-w4 (samples 6..11): zero everywhere else.
    assert (idle["util_ratio"].iloc[:6] == 0).all() and (idle["util_ratio"].iloc[12:] == 0).all()


def test_offset_moves_the_window_along_the_trace(trace: OpenbTrace) -> None:
    fleet = replay_openb(trace, start=START, days=TWO_HOURS, step_seconds=STEP, offset_seconds=3600)
    assert _allocations(fleet) == [
        ("pod-two", "node-a", 0, 1.0, "", _t(-3300), _t(3600)),
        ("pod-two", "node-a", 1, 1.0, "", _t(-3300), _t(3600)),
        ("pod-s2", "node-c", 0, 0.3, "1", _t(-3000), _t(600)),
        ("pod-run", "node-b", 0, 1.0, "", _t(400), _t(5400)),
        # pod-late arrives when node-c is free again: the best fit with a whole free GPU.
        ("pod-late", "node-c", 0, 1.0, "", _t(4400), _t(5400)),
    ]
    assert fleet.counts == ReplayCounts(
        trace_pods=10,
        cpu_only=1,
        placed=4,
        pending=1,
        expired=1,
        ended_before_window=3,
        created_after_window=0,
        nodes_without_gpus=0,
    )
    s = summary(fleet)
    # two 12x2 + s2 2x0.3 + run 16x1 + late 3x1 = 43.6 GE-samples.
    assert (s["allocated_gpu_hours"], s["pods_outside_window"], s["pods_running"]) == (3.633333, 3, 0)


def _write(directory: Path, nodes: list[str], pods: list[str]) -> tuple[Path, Path]:
    nodes_csv = directory / "nodes.csv"
    pods_csv = directory / "pods.csv"
    nodes_csv.write_text("\n".join([",".join(NODE_COLUMNS), *nodes]) + "\n")
    pods_csv.write_text("\n".join([",".join(POD_COLUMNS), *pods]) + "\n")
    return nodes_csv, pods_csv


def test_waiting_pods_are_retried_first_come_first_served(tmp_path: Path) -> None:
    nodes = ["x,8000,1024,2,T4"]
    pods = [
        "p1,1000,1,2,1000,,BE,Running,0,600,0",
        "p2,1000,1,2,1000,,BE,Running,60,1200,",  # arrives first: gets the node when p1 leaves
        "p3,1000,1,1,1000,,BE,Running,120,3000,",  # smaller, would fit at 600, but waits behind p2
        "p4,1000,1,1,400,,BE,Running,130,1100,",  # deleted while waiting
    ]
    trace = load_openb(*_write(tmp_path, nodes, pods))
    fleet = replay_openb(trace, start=START, days=1 / 24, step_seconds=60)
    assert [(a.pod, a.start, a.end) for a in fleet.allocations] == [
        ("p1", _t(0), _t(600)),
        ("p1", _t(0), _t(600)),
        ("p2", _t(600), _t(1200)),
        ("p2", _t(600), _t(1200)),
        ("p3", _t(1200), _t(3000)),
    ]
    assert fleet.counts.expired == 1 and fleet.counts.placed == 3
    stretched = replay_openb(trace, start=START, days=1 / 24, step_seconds=60, lifetime_scale=2.0)
    # Lifetimes doubled: p1 holds [0, 1200), p2 then holds until 60 + 2 x 1140, p3 until after the window.
    assert [(a.pod, a.start, a.end) for a in stretched.allocations] == [
        ("p1", _t(0), _t(1200)),
        ("p1", _t(0), _t(1200)),
        ("p2", _t(1200), _t(2340)),
        ("p2", _t(1200), _t(2340)),
        ("p3", _t(2340), None),
    ]


def test_deterministic_per_seed(trace: OpenbTrace, fleet: OpenbFleet) -> None:
    again = replay_openb(trace, start=START, days=TWO_HOURS, step_seconds=STEP, seed=3)
    assert again.allocations == fleet.allocations
    assert again.pods == fleet.pods
    assert again.archetypes == fleet.archetypes
    np.testing.assert_array_equal(again.util_ratio, fleet.util_ratio)
    other = replay_openb(trace, start=START, days=TWO_HOURS, step_seconds=STEP, seed=4)
    # Placement does not depend on the seed; identities and utilization do.
    assert _allocations(other) == _allocations(fleet)
    assert {g.uuid for g in other.gpus}.isdisjoint({g.uuid for g in fleet.gpus})
    assert not np.array_equal(other.util_ratio, fleet.util_ratio)


def test_archetype_shares_on_a_larger_trace(tmp_path: Path) -> None:
    nodes = [f"n{i},8000,1024,8,G2" for i in range(50)]
    qos = ["LS", "BE", "Burstable"]
    pods = [f"p{i},1000,1,1,1000,,{qos[i % 3]},Running,{i},{i + 3600}," for i in range(300)]
    fleet = replay_openb(load_openb(*_write(tmp_path, nodes, pods)), start=START, days=1 / 24, seed=11)
    kinds = pd.Series(list(fleet.archetypes.values())).value_counts().to_dict()
    assert sum(kinds.values()) == 300
    assert 15 <= kinds["notebook"] <= 45 and 5 <= kinds["stuck"] <= 25
    assert kinds["inference"] > 60 and kinds["batch"] > 60 and kinds["training"] > 60
    # Best fit fills nodes one after another: the 300 pods hold the first 300 GPUs, one each.
    assert [a.uuid for a in fleet.allocations] == [g.uuid for g in fleet.gpus[:300]]


def test_summary_of_the_demo_fleet_matches_its_truth() -> None:
    demo = build_demo_fleet(seed=5, end=START, days=0.5, step_seconds=300)
    s = summary(demo)
    truth = demo.truth()
    assert s["allocated_gpu_hours"] == round(truth["ge_share"].sum() * 300 / 3600, 6)
    assert s["peak_allocated_gpus"] == round(truth.groupby("timestamp")["ge_share"].sum().max(), 6)
    assert s["capacity_gpu_hours"] == 96 * 12.0
    assert s["mean_allocation_rate"] == round(s["allocated_gpu_hours"] / 1152.0, 6)
    assert (s["gpus"], s["nodes"], s["pods_skipped_cpu_only"], s["pods_outside_window"]) == (96, 14, 0, 0)
    # The demo's pending pods: two for capacity, one each for fragmentation, affinity, taint, MIG profile
    # and quota.
    assert s["pods_pending"] == 7


# ---------------------------------------------------------------------------------------------
# Never more allocated than capacity


def _assert_within_capacity(fleet: SimulatedFleet) -> None:
    # truth() cannot build a frame when no allocation covers a sample (pd.concat of nothing).
    spans = sample_spans(fleet, fleet.allocations)
    truth = fleet.truth() if any(i1 > i0 for i0, i1 in spans) else None
    gpu_count = {n.name: n.gpu_count for n in fleet.nodes}
    if truth is not None:
        per_gpu = truth.groupby(["uuid", "timestamp"])["ge_share"].sum()
        assert per_gpu.max() <= 1 + 1e-9
        per_node = truth.groupby(["node", "timestamp"])["ge_share"].sum()
        for (node, _), ge in per_node.items():
            assert ge <= gpu_count[node] + 1e-9
    # In continuous time too: at every allocation start, the holders of that GPU sum to at most 1.
    by_gpu: dict[str, list[tuple[datetime, datetime, float, str]]] = defaultdict(list)
    for a in fleet.allocations:
        by_gpu[a.uuid].append((a.start, a.end or datetime.max.replace(tzinfo=UTC), a.ge, a.replica))
    for spans in by_gpu.values():
        for t, _, _, _ in spans:
            holders = [(ge, rep) for s, e, ge, rep in spans if s <= t < e]
            assert sum(ge for ge, _ in holders) <= 1 + 1e-9
            assert len({rep for _, rep in holders}) == len(holders)  # sharing slots are distinct


def test_fixture_replay_never_exceeds_capacity(fleet: OpenbFleet) -> None:
    _assert_within_capacity(fleet)


_MODELS = ("V100M16", "V100M32", "T4")
_SPECS = ("", "", "V100M16", "V100M32", "T4", "V100M16|V100M32")


@st.composite
def _traces(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    n_nodes = draw(st.integers(1, 4))
    nodes = [
        f"n{i},8000,1024,{draw(st.sampled_from([1, 2, 4, 8]))},{draw(st.sampled_from(_MODELS))}"
        for i in range(n_nodes)
    ]
    pods = []
    for i in range(draw(st.integers(1, 30))):
        k = draw(st.sampled_from([0, 1, 1, 1, 2, 4, 8]))
        m = draw(st.sampled_from([1000, 1000, 500, 300, 810, 250])) if k == 1 else 0 if k == 0 else 1000
        created = draw(st.integers(0, 7200))
        deleted = created + draw(st.integers(0, 7200))
        spec = draw(st.sampled_from(_SPECS))
        pods.append(f"p{i},1000,1,{k},{m},{spec},LS,Running,{created},{deleted},{created}")
    return nodes, pods


@settings(max_examples=40, deadline=None)
@given(_traces(), st.sampled_from([0.0, 1800.0]))
def test_random_traces_never_exceed_capacity(case: tuple[list[str], list[str]], offset: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        trace = load_openb(*_write(Path(tmp), *case))
    fleet = replay_openb(trace, start=START, days=TWO_HOURS, step_seconds=STEP, offset_seconds=offset)
    _assert_within_capacity(fleet)
    c = fleet.counts
    outcomes = c.cpu_only + c.placed + c.pending + c.expired + c.ended_before_window + c.created_after_window
    assert outcomes == c.trace_pods == len(case[1])
    rows = trace.pods.set_index("name")
    model = dict(zip(trace.nodes["sn"], trace.nodes["model"], strict=True))
    for pod in fleet.pods:
        if not pod.gpu_requests:
            continue
        row = rows.loc[pod.name]
        held = [a for a in fleet.allocations if a.pod == pod.name]
        if pod.phase == "Pending":
            assert not held
            continue
        assert pod.started_at is not None and pod.created_at <= pod.started_at
        assert len(held) == row["num_gpu"] and {a.node for a in held} == {pod.node}
        assert all(a.ge == row["gpu_milli"] / 1000 for a in held)
        if row["gpu_spec"]:
            assert model[pod.node or ""] in row["gpu_spec"].split("|")


def _naive_replay(trace: OpenbTrace, horizon: float) -> list[tuple[str, str, int, float, str, float]]:
    """The placement rules spelled out with full scans: (pod, node, gpu index, GE, replica, start seconds)."""
    nodes = trace.nodes[trace.nodes["gpu"] > 0]
    names, models = nodes["sn"].tolist(), nodes["model"].tolist()
    free = [[1000] * k for k in nodes["gpu"].tolist()]
    used_slots: dict[tuple[int, int], set[int]] = defaultdict(set)
    gpu_pods = trace.pods[trace.pods["num_gpu"] > 0].sort_values("creation_time", kind="stable")
    rows = list(gpu_pods.itertuples(index=False))
    held: dict[str, tuple[int, list[tuple[int, int, int]]]] = {}
    out = []

    def try_place(p: Any, t: float) -> bool:
        k, m, spec = p.num_gpu, p.gpu_milli, p.gpu_spec
        fits = [
            n
            for n in range(len(names))
            if (not spec or models[n] in spec.split("|"))
            and (sum(g == 1000 for g in free[n]) >= k if m == 1000 else max(free[n]) >= m)
        ]
        if not fits:
            return False
        n = min(fits, key=lambda n: (sum(free[n]), n))
        if m == 1000:
            gpus = [i for i, g in enumerate(free[n]) if g == 1000][:k]
            taken = [(i, m, 0) for i in gpus]
        else:
            i = min((i for i, g in enumerate(free[n]) if g >= m), key=lambda i: (free[n][i], i))
            slot = min(set(range(40)) - used_slots[(n, i)])
            used_slots[(n, i)].add(slot)
            taken = [(i, m, slot)]
        for i, mm, _ in taken:
            free[n][i] -= mm
        held[p.name] = (n, taken)
        out.extend((p.name, names[n], i, mm / 1000, "" if mm == 1000 else str(s), t) for i, mm, s in taken)
        return True

    times = sorted({t for p in rows for t in (p.creation_time, p.deletion_time) if t < horizon})
    waiting: list[Any] = []
    for t in times:
        released = False
        for name, (n, taken) in list(held.items()):
            if trace.pods.set_index("name").loc[name, "deletion_time"] == t:
                for i, mm, s in taken:
                    free[n][i] += mm
                    used_slots[(n, i)].discard(s)
                del held[name]
                released = True
        if released:
            waiting = [p for p in waiting if p.deletion_time > t]
            waiting = [p for p in waiting if not try_place(p, t)]
        for p in rows:
            if p.creation_time == t and p.deletion_time > t and not try_place(p, t):
                waiting.append(p)
    return out


@settings(max_examples=25, deadline=None)
@given(_traces())
def test_replay_agrees_with_a_naive_scheduler(case: tuple[list[str], list[str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        trace = load_openb(*_write(Path(tmp), *case))
    fleet = replay_openb(trace, start=START, days=TWO_HOURS, step_seconds=STEP)
    index = {g.uuid: g.index for g in fleet.gpus}
    got = sorted(
        (a.pod, a.node, index[a.uuid], a.ge, a.replica, (a.start - START).total_seconds())
        for a in fleet.allocations
    )
    # The replay drops pods that ended before the window; with offset 0 there are none.
    assert got == sorted(_naive_replay(trace, horizon=7200.0))


# ---------------------------------------------------------------------------------------------
# Bad input: one line naming the file, the line and the problem


GOOD_NODE = "n0,8000,1024,2,T4"
GOOD_POD = "p0,1000,1,1,500,,LS,Running,0,60,0"


@pytest.mark.parametrize(
    ("which", "text", "message"),
    [
        ("nodes", "", "{path}: empty file"),
        ("pods", "  \n", "{path}: empty file"),
        ("nodes", "sn,cpu_milli,memory_mib,gpu,model\n", "{path}: has a header but no rows"),
        ("nodes", "sn,cpu_milli,memory_mib,model\nn0,1,1,T4\n", "{path}:1: missing column 'gpu'"),
        (
            "nodes",
            "sn,cpu_milli,memory_mib,gpu,model,rack\nn0,1,1,2,T4,r1\n",
            "{path}:1: unknown column 'rack'",
        ),
        ("nodes", "sn,cpu_milli,gpu,memory_mib,gpu,model\n", "{path}:1: duplicate column 'gpu'"),
        (
            "nodes",
            "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,1024,eight,T4\n",
            "{path}:2: gpu 'eight' is not a number",
        ),
        (
            "nodes",
            "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,1024,1.5,T4\n",
            "{path}:2: gpu '1.5' is not a whole number",
        ),
        ("nodes", "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,1024,-2,T4\n", "{path}:2: gpu -2 is negative"),
        (
            "nodes",
            "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,1024,2,\n",
            "{path}:2: node with 2 GPUs has no model",
        ),
        ("nodes", f"{','.join(NODE_COLUMNS)}\n{GOOD_NODE}\n{GOOD_NODE}\n", "{path}:3: duplicate node 'n0'"),
        ("nodes", f"{','.join(NODE_COLUMNS)}\n\nn0,8000,1024,2\n", "{path}:3: expected 5 fields, got 4"),
        ("pods", "name,num_gpu\np0,1\n", "{path}:1: missing column 'cpu_milli'"),
        ("pods", GOOD_POD.replace(",1,500,", ",x,500,"), "{path}:2: num_gpu 'x' is not a number"),
        ("pods", GOOD_POD.replace(",1,500,", ",9,1000,"), "{path}:2: num_gpu 9 is above 8"),
        ("pods", GOOD_POD.replace(",1,500,", ",1,1001,"), "{path}:2: gpu_milli 1001 is outside 0..1000"),
        ("pods", GOOD_POD.replace(",1,500,", ",1,-5,"), "{path}:2: gpu_milli -5 is outside 0..1000"),
        ("pods", GOOD_POD.replace(",1,500,", ",1,0,"), "{path}:2: gpu_milli 0 on a pod with num_gpu 1"),
        ("pods", GOOD_POD.replace(",1,500,", ",0,500,"), "{path}:2: gpu_milli 500 on a pod with num_gpu 0"),
        (
            "pods",
            GOOD_POD.replace(",1,500,", ",2,500,"),
            "{path}:2: gpu_milli 500 on a 2-GPU pod (sharing needs num_gpu 1)",
        ),
        ("pods", GOOD_POD.replace(",0,60,0", ",-1,60,0"), "{path}:2: creation_time -1 is negative"),
        ("pods", GOOD_POD.replace(",0,60,0", ",0,-60,0"), "{path}:2: deletion_time -60 is negative"),
        (
            "pods",
            GOOD_POD.replace(",0,60,0", ",100,60,100"),
            "{path}:2: deletion_time 60 is before creation_time 100",
        ),
        (
            "pods",
            GOOD_POD.replace(",0,60,0", ",10,60,5"),
            "{path}:2: scheduled_time 5 is before creation_time 10",
        ),
        ("pods", GOOD_POD.replace(",0,60,0", ",nan,60,0"), "{path}:2: creation_time 'nan' is not a number"),
        ("pods", GOOD_POD.replace(",0,60,0", ",inf,60,0"), "{path}:2: creation_time 'inf' is not a number"),
        (
            "pods",
            GOOD_POD.replace(",,LS,", ",V100M16||,LS,"),
            "{path}:2: gpu_spec 'V100M16||' is not a |-separated list of GPU models",
        ),
        ("pods", GOOD_POD.replace(",LS,", ",,"), "{path}:2: qos '' is not a QoS class"),
        (
            "pods",
            GOOD_POD.replace("Running", "Lost"),
            "{path}:2: pod_phase 'Lost' is not one of Pending, Running, Succeeded, Failed, Unknown",
        ),
        ("pods", f"{GOOD_POD}\n{GOOD_POD}", "{path}:3: duplicate pod 'p0'"),
        ("pods", '"p\n0",1000,1,1,500,,LS,Running,0,60,0', "{path}:3: name 'p\\n0' is not a pod name"),
        ("pods", GOOD_POD + ",extra", "{path}:2: expected 11 fields, got 12"),
        (
            "pods",
            'p0,1000,1,1,500,"V100,LS,Running,0,60,0',
            "{path}:2: malformed CSV (unexpected end of data)",
        ),
    ],
)
def test_bad_input_is_one_line_naming_file_and_line(
    tmp_path: Path, which: str, text: str, message: str
) -> None:
    nodes_csv, pods_csv = _write(tmp_path, [GOOD_NODE], [GOOD_POD])
    target = nodes_csv if which == "nodes" else pods_csv
    if which == "pods" and not text.startswith("name,") and text.strip():
        text = f"{','.join(POD_COLUMNS)}\n{text}\n"
    target.write_text(text)
    with pytest.raises(DataError) as err:
        load_openb(nodes_csv, pods_csv)
    assert str(err.value) == message.format(path=target)
    assert "\n" not in str(err.value)


def test_unreadable_files_are_one_line_errors(tmp_path: Path) -> None:
    nodes_csv, pods_csv = _write(tmp_path, [GOOD_NODE], [GOOD_POD])
    missing = tmp_path / "nope.csv"
    with pytest.raises(DataError, match=r"^.*nope\.csv: no such file$"):
        load_openb(nodes_csv, missing)
    with pytest.raises(DataError) as err:
        load_openb(tmp_path, pods_csv)
    assert str(err.value) == f"{tmp_path}: is a directory, not a CSV file"
    pods_csv.write_bytes(b"name,\xff\xfe\n")
    with pytest.raises(DataError) as err:
        load_openb(nodes_csv, pods_csv)
    assert str(err.value) == f"{pods_csv}: not UTF-8 text (byte 5)"
    # The node list given where the pod list belongs: the first pod column it lacks.
    with pytest.raises(DataError) as err:
        load_openb(nodes_csv, nodes_csv)
    assert str(err.value) == f"{nodes_csv}:1: missing column 'name'"


def test_pandas_style_round_trip_is_accepted(tmp_path: Path) -> None:
    # A file written back by pandas: floats for integer columns, "nan" for missing values, a BOM.
    nodes_csv, pods_csv = _write(
        tmp_path, ["n0,8000.0,1024.0,2.0,T4"], ["p0,1000.0,1.0,1.0,500.0,nan,LS,Pending,0.0,60.5,nan"]
    )
    pods_csv.write_text("\ufeff" + pods_csv.read_text())
    trace = load_openb(nodes_csv, pods_csv)
    assert trace.nodes["gpu"].tolist() == [2]
    assert trace.pods[["num_gpu", "gpu_milli", "gpu_spec", "deletion_time"]].iloc[0].tolist() == [
        1,
        500,
        "",
        60.5,
    ]
    assert math.isnan(trace.pods["scheduled_time"].iloc[0])
