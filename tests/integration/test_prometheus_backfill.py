"""The simulated fleet backfilled by promtool into a real Prometheus reads back exactly as simulated.

Sample i of the backfill stands for [t_i, t_i + step) and is stored at t_i + step/2, so every query
here reads it as `<fn>_over_time(x[step])` evaluated at t_i + step: exactly sample i, never a
neighbour and never a series that ended a moment ago (plain instant queries look back 5 minutes).
"""

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest

from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from tests.integration.prom import BackfilledPrometheus, PrometheusFactory

pytestmark = pytest.mark.integration


def holders(fleet: SimulatedFleet, vendor: str = "nvidia") -> pd.DataFrame:
    """Served telemetry rows of one vendor's GPUs (dcgm-exporter's: NVIDIA), one per holder of the unit
    at t_i (pod "" when nobody held it)."""
    times = fleet.sample_times()
    parts = [
        pd.DataFrame(
            {
                "timestamp": times[
                    (times >= pd.Timestamp(a.start)) & (times < pd.Timestamp(a.end or fleet.now))
                ],
                "uuid": a.uuid,
                "gpu_instance_id": a.gpu_instance_id,
                "namespace": a.namespace,
                "pod": a.pod,
                "replica": a.replica,
            }
        )
        for a in fleet.allocations
    ]
    held = pd.concat(parts, ignore_index=True)
    merged = fleet.telemetry().merge(held, on=["timestamp", "uuid", "gpu_instance_id"], how="left")
    merged = merged[merged["node"].isin({n.name for n in fleet.nodes if n.vendor == vendor})]
    return merged.fillna({"namespace": "", "pod": "", "replica": ""}).reset_index(drop=True)


def sample_range(prom: BackfilledPrometheus, expr: str) -> dict[pd.Timestamp, list[float]]:
    """`expr` (with `$step` for the range) at t_i + step over the window, keyed by t_i."""
    w, step = prom.fleet.window, prom.step_seconds
    last = w.start + timedelta(seconds=step * (math.ceil(w.duration_seconds / step) - 1))
    shift = timedelta(seconds=step)
    result = prom.query_range(expr.replace("$step", f"{step}s"), w.start + shift, last + shift, step)
    out: dict[pd.Timestamp, list[float]] = {}
    for r in result:
        for ts, v in r["values"]:
            out.setdefault(pd.Timestamp(float(ts) - step, unit="s", tz="UTC"), []).append(float(v))
    return out


def sample_query(prom: BackfilledPrometheus, expr: str, t: datetime) -> list[dict[str, Any]]:
    """`expr` (with `$step`) evaluated at t + step: what sample t saw."""
    step = prom.step_seconds
    return prom.query(expr.replace("$step", f"{step}s"), t + timedelta(seconds=step))


def pick_units(fleet: SimulatedFleet) -> dict[str, tuple[str, str]]:
    """Telemetry units of different kinds, as (uuid, gpu_instance_id)."""
    held = holders(fleet)
    pods = held[held["pod"] != ""].groupby(["uuid", "gpu_instance_id"])["pod"].nunique()
    whole = {(g.uuid, "") for g in fleet.gpus if not g.mig_profile and g.replicas == 1}
    h100 = next(g for g in fleet.gpus if g.node.startswith("gpu-h100-") and (g.uuid, "") in pods.index)
    mig = next(g for g in fleet.gpus if g.mig_profile and (g.uuid, g.gpu_instance_id) in pods.index)
    t4 = next(g for g in fleet.gpus if g.replicas > 1 and (g.uuid, "") in pods.index)
    l4 = next(g for g in fleet.gpus if g.node == "gpu-l4-001")
    changed = next(k for k, n in pods.items() if n >= 2 and k in whole)
    return {
        "h100": (h100.uuid, ""),
        "mig": (mig.uuid, mig.gpu_instance_id),
        "t4": (t4.uuid, ""),
        "l4_with_gap": (l4.uuid, ""),
        "holder_change": (str(changed[0]), str(changed[1])),
    }


def _unit(tel: pd.DataFrame, uuid: str, gi: str, column: str) -> pd.Series:
    return tel[(tel["uuid"] == uuid) & (tel["gpu_instance_id"] == gi)].set_index("timestamp")[column]


def test_gr_engine_active_reads_back_exactly(demo_prometheus: BackfilledPrometheus) -> None:
    fleet = demo_prometheus.fleet
    tel = fleet.telemetry()
    checked = 0
    for name, (uuid, gi) in pick_units(fleet).items():
        if not fleet.has_prof[uuid]:
            continue
        got = sample_range(
            demo_prometheus,
            f'avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{UUID="{uuid}",GPU_I_ID="{gi}"}}[$step])',
        )
        want = _unit(tel, uuid, gi, "util_ratio")
        assert set(got) == set(want.index), name
        assert {t: v for t, v in got.items()} == {t: [u] for t, u in want.items()}, name
        checked += len(got)
    assert checked > 4 * 1300


def test_gpu_util_percent_reads_back_as_the_ratio(demo_prometheus: BackfilledPrometheus) -> None:
    fleet = demo_prometheus.fleet
    tel = fleet.telemetry()
    units = pick_units(fleet)
    for name in ("h100", "t4", "l4_with_gap", "holder_change"):
        uuid, _ = units[name]
        got = sample_range(demo_prometheus, f'avg_over_time(DCGM_FI_DEV_GPU_UTIL{{UUID="{uuid}"}}[$step])')
        want = _unit(tel, uuid, "", "util_ratio")
        assert set(got) == set(want.index), name
        for t, values in got.items():
            ratio = np.array(values) / 100.0
            # p*100/100 is not always p in binary floating point: at most one ulp off, never more.
            assert np.all(np.abs(ratio - want[t]) <= np.spacing(want[t])), (name, t, values)
    # The L4 node's exporter was down for 2 h: nothing stored for it then, not zeros.
    gap = next(g for g in fleet.gaps if g.node == "gpu-l4-001")
    missing = pd.date_range(gap.start, gap.end, freq="60s", inclusive="left")
    got = sample_range(
        demo_prometheus, f'avg_over_time(DCGM_FI_DEV_GPU_UTIL{{UUID="{units["l4_with_gap"][0]}"}}[$step])'
    )
    assert len(missing) == 120 and not set(missing) & set(got)
    # MIG instances have no GPU_UTIL at all.
    assert not demo_prometheus.query('count(DCGM_FI_DEV_GPU_UTIL{GPU_I_ID!=""})', fleet.now)
    assert demo_prometheus.query('count(DCGM_FI_PROF_GR_ENGINE_ACTIVE{GPU_I_ID!=""})', fleet.now)


def test_fb_used_is_mib_of_the_simulated_bytes(demo_prometheus: BackfilledPrometheus) -> None:
    fleet = demo_prometheus.fleet
    tel = fleet.telemetry()
    for name, (uuid, gi) in pick_units(fleet).items():
        got = sample_range(
            demo_prometheus, f'avg_over_time(DCGM_FI_DEV_FB_USED{{UUID="{uuid}",GPU_I_ID="{gi}"}}[$step])'
        )
        want = _unit(tel, uuid, gi, "fb_used_bytes")
        n_copies = 1
        if name == "t4":  # one identical copy per pod holding a replica
            n_copies = max(len(v) for v in got.values())
            assert n_copies > 1
        assert {t: sorted(set(v)) for t, v in got.items()} == {t: [b / 2**20] for t, b in want.items()}, name
        assert max(len(v) for v in got.values()) == n_copies


def test_amd_gpus_read_back_under_their_exporters_names_and_labels(
    demo_prometheus: BackfilledPrometheus,
) -> None:
    """The MI300X pool is stored as AMD's device-metrics-exporter serves it: gpu_gfx_activity in percent,
    gpu_used_vram in MB (MiB), the GPU known by serial_number, its pod as exported_pod."""
    fleet = demo_prometheus.fleet
    tel = fleet.telemetry()
    held = holders(fleet, "amd")
    pods = held[held["pod"] != ""].groupby("uuid")["pod"].nunique()
    serial = str(pods.idxmax())
    got = sample_range(demo_prometheus, f'avg_over_time(gpu_gfx_activity{{serial_number="{serial}"}}[$step])')
    want = _unit(tel, serial, "", "util_ratio")
    assert set(got) == set(want.index) and len(got) == 1440
    assert all(np.abs(np.array(v) / 100.0 - want[t]) <= np.spacing(want[t]) for t, v in got.items())
    fb = sample_range(demo_prometheus, f'avg_over_time(gpu_used_vram{{serial_number="{serial}"}}[$step])')
    assert {t: v for t, v in fb.items()} == {
        t: [b / 2**20] for t, b in _unit(tel, serial, "", "fb_used_bytes").items()
    }
    series = demo_prometheus.series(f'gpu_gfx_activity{{serial_number="{serial}"}}')
    assert {s.get("exported_pod", "") for s in series} == set(held.loc[held["uuid"] == serial, "pod"])
    assert {s["container"] for s in series} == {"metrics-exporter-container"}  # the exporter's own
    assert {s["hostname"] for s in series} == {g.node for g in fleet.gpus if g.uuid == serial}
    # AMD's GPUs have no DCGM series at all.
    assert not demo_prometheus.query(f'count(DCGM_FI_DEV_FB_USED{{UUID="{serial}"}})', fleet.now)


def test_series_and_sample_counts_match_the_fleet(demo_prometheus: BackfilledPrometheus) -> None:
    fleet = demo_prometheus.fleet
    held = holders(fleet)
    day = f"{int(fleet.window.duration_seconds)}s"
    # One FB_USED series per unit and holder (per vgpu replica on time-sliced GPUs), one per idle unit.
    want_series = held[["uuid", "gpu_instance_id", "pod", "replica"]].drop_duplicates()
    got = demo_prometheus.query(f"count(count_over_time(DCGM_FI_DEV_FB_USED[{day}]))", fleet.now)
    assert int(got[0]["value"][1]) == len(want_series) > 150
    got = demo_prometheus.query(f"sum(count_over_time(DCGM_FI_DEV_FB_USED[{day}]))", fleet.now)
    assert int(got[0]["value"][1]) == len(held) > 150_000
    # At one sample: every served unit once per holder; nothing from the NotReady node or the gap.
    t = fleet.window.start + timedelta(hours=12, minutes=30)
    now = held[held["timestamp"] == pd.Timestamp(t)]
    got = sample_query(demo_prometheus, "count by (instance) (avg_over_time(DCGM_FI_DEV_FB_USED[$step]))", t)
    assert sum(int(r["value"][1]) for r in got) == len(now)
    down = {tg.instance for tg in fleet.targets if not fleet.node(tg.node).ready or tg.node == "gpu-l4-001"}
    assert len(down) == 2
    assert {r["metric"]["instance"] for r in got} == {
        tg.instance for tg in fleet.targets if tg.vendor == "nvidia"
    } - down
    # GR_ENGINE_ACTIVE only where the GPU reports PROF fields (not the T4s).
    got = sample_query(demo_prometheus, "count(avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[$step]))", t)
    assert int(got[0]["value"][1]) == int(now["uuid"].map(fleet.has_prof).sum()) < len(now)


def test_servicemonitor_layout_labels(demo_prometheus: BackfilledPrometheus) -> None:
    fleet = demo_prometheus.fleet
    assert demo_prometheus.layout == "servicemonitor"
    labelsets = demo_prometheus.series("DCGM_FI_DEV_FB_USED")
    targets = {t.instance: t for t in fleet.targets}
    pods = {(p.namespace, p.name): p for p in fleet.pods}
    held = holders(fleet)
    holder_pods = set(zip(held["namespace"], held["pod"], strict=True))
    with_pod = 0
    for ls in labelsets:
        assert all(v != "" for v in ls.values())
        target = targets[ls["instance"]]
        assert (ls["pod"], ls["namespace"], ls["container"]) == (
            target.pod,
            "gpu-operator",
            "nvidia-dcgm-exporter",
        )
        assert (ls["job"], ls["endpoint"], ls["service"]) == (
            "nvidia-dcgm-exporter",
            "gpu-metrics",
            "nvidia-dcgm-exporter",
        )
        assert ls[target.hostname_label] == target.hostname_value
        if "exported_pod" in ls:
            with_pod += 1
            key = (ls["exported_namespace"], ls["exported_pod"])
            assert key in holder_pods
            assert ls["exported_container"] == pods[key].container
        else:
            assert "exported_namespace" not in ls and "exported_container" not in ls
    assert 0 < with_pod < len(labelsets)
    # The pre-4.x quirk: some exporters report their own pod name as the host.
    quirk = [t for t in fleet.targets if t.hostname_value == t.pod and fleet.node(t.node).ready]
    assert quirk
    assert demo_prometheus.series(f'DCGM_FI_DEV_FB_USED{{{quirk[0].hostname_label}="{quirk[0].pod}"}}')
    # Time-sliced GPUs: one copy per pod holding a replica, told apart by vgpu.
    last = fleet.now - timedelta(seconds=fleet.window.step_seconds)
    t4 = sample_query(
        demo_prometheus, 'avg_over_time(DCGM_FI_DEV_FB_USED{modelName="Tesla T4",vgpu!=""}[$step])', last
    )
    per_gpu: dict[str, list[dict[str, str]]] = {}
    for r in t4:
        per_gpu.setdefault(r["metric"]["UUID"], []).append(r["metric"])
    assert any(len(copies) > 1 for copies in per_gpu.values())
    for copies in per_gpu.values():
        assert len({c["vgpu"] for c in copies}) == len(copies)
        assert len({c["exported_pod"] for c in copies}) == len(copies)


def test_xid_is_the_sticky_last_code_with_its_labels(demo_prometheus: BackfilledPrometheus) -> None:
    fleet = demo_prometheus.fleet
    event = next(e for e in fleet.events if e.kind == "xid" and e.value == 13)
    expr = f'last_over_time(DCGM_FI_DEV_XID_ERRORS{{UUID="{event.uuid}"}}[$step])'
    before = sample_query(demo_prometheus, expr, event.start - timedelta(minutes=5))
    assert [(r["metric"]["err_code"], r["metric"]["err_msg"], r["value"][1]) for r in before] == [
        ("0", "No Error", "0")
    ]
    for t in (event.start + timedelta(minutes=1), fleet.now - timedelta(minutes=1)):
        after = sample_query(demo_prometheus, expr, t)
        assert [(r["metric"]["err_code"], r["metric"]["err_msg"], r["value"][1]) for r in after] == [
            ("13", "Graphics Engine Exception", "13")
        ]


@pytest.fixture(scope="module")
def small_fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=7, end=datetime(2026, 11, 20, tzinfo=UTC), days=0.25, step_seconds=60)


def test_honor_labels_layout_with_a_coarser_step(
    prometheus_factory: PrometheusFactory, small_fleet: SimulatedFleet
) -> None:
    metrics = ["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE"]
    prom = prometheus_factory(small_fleet, layout="honor_labels", metrics=metrics, step_seconds=300)
    labelsets = prom.series("DCGM_FI_DEV_POWER_USAGE")
    assert labelsets
    assert all(not any(k.startswith("exported_") for k in ls) for ls in labelsets)
    assert all({"endpoint", "service"}.isdisjoint(ls) for ls in labelsets)
    assert {ls["job"] for ls in labelsets} == {"nvidia-dcgm-exporter"}
    assert {ls["instance"] for ls in labelsets} <= {t.instance for t in small_fleet.targets}
    pods = {ls["pod"] for ls in labelsets if "pod" in ls}
    assert pods and pods <= {a.pod for a in small_fleet.allocations}
    assert not prom.series("DCGM_FI_DEV_GPU_UTIL")  # not asked for
    # A 300 s sample is the mean of its five 60 s samples, whoever held the GPU.
    tel = small_fleet.telemetry()
    g = next(g for g in small_fleet.gpus if g.node.startswith("gpu-h100-"))
    got = sample_range(prom, f'max(avg_over_time(DCGM_FI_DEV_POWER_USAGE{{UUID="{g.uuid}"}}[$step]))')
    power = _unit(tel, g.uuid, "", "power_watts")
    want = power.groupby(power.index.floor("300s")).mean()
    assert len(got) == len(want) == 72
    for t, values in got.items():
        assert values == [pytest.approx(want[t], rel=1e-12)]
