"""The simulated dcgm-exporter: /metrics text, the OpenMetrics backfill and the live endpoint."""

import io
import re
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import numpy as np
import pandas as pd
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from gpuwatch.core.errors import DataError
from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.exposition import (
    CONTENT_TYPE,
    FAMILIES,
    FAMILY_NAMES,
    exporter_text,
    serve_metrics,
    write_backfill,
)

END = datetime(2026, 11, 20, tzinfo=UTC)
AT = END - timedelta(hours=10, seconds=25)  # inside sample 839 of the day: [13:59, 14:00)
T_AT = pd.Timestamp("2026-11-19 13:59", tz="UTC")
DEVICE = ["gpu", "UUID", "pci_bus_id", "device", "modelName"]
MIG = ["GPU_I_PROFILE", "GPU_I_ID"]
TAIL = ["DCGM_FI_DRIVER_VERSION", "container", "namespace", "pod"]
AMD_FAMILIES = {f.name for f in FAMILIES if f.vendor == "amd"}
# AMD's device-metrics-exporter: every label, in sorted order, empty ones written as "".
AMD_LABELS = [
    "card_model",
    "card_series",
    "container",
    "deployment_mode",
    "gpu_compute_partition_type",
    "gpu_id",
    "gpu_memory_partition_type",
    "gpu_partition_id",
    "hostname",
    "job_id",
    "job_partition",
    "job_user",
    "namespace",
    "pod",
    "serial_number",
]
LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=42, end=END, days=1)


@pytest.fixture(scope="module")
def text(fleet: SimulatedFleet) -> str:
    return exporter_text(fleet, at=AT)


def samples(text: str) -> list[tuple[str, list[tuple[str, str]], float]]:
    """(name, labels in written order, value) of every sample line."""
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name, rest = line.split("{", 1)
        labels, value = rest.rsplit("} ", 1)
        out.append((name, LABEL.findall(labels), float(value)))
    return out


def holders_at(fleet: SimulatedFleet, t: pd.Timestamp) -> dict[tuple[str, str], list[tuple[str, str, str]]]:
    """(uuid, gpu_instance_id) -> [(namespace, pod, replica)] holding the unit at t (the fleet's rule)."""
    out: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for a in fleet.allocations:
        if pd.Timestamp(a.start) <= t < pd.Timestamp(a.end or fleet.now):
            out.setdefault((a.uuid, a.gpu_instance_id), []).append((a.namespace, a.pod, a.replica))
    return out


def test_text_parses_as_prometheus_text_format(text: str) -> None:
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) == set(FAMILY_NAMES)
    assert families["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "counter"
    assert families["DCGM_FI_DEV_GPU_UTIL"].type == "gauge"
    assert "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n" in text
    assert "# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.\n" in text
    assert "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n" in text


def test_label_order_is_the_exporters(fleet: SimulatedFleet, text: str) -> None:
    host = {t.node: t.hostname_label for t in fleet.targets}
    node_of = {g.uuid: g.node for g in fleet.gpus}
    seen = set()
    amd = 0
    for name, labels, _ in samples(text):
        keys = [k for k, _ in labels]
        if name in AMD_FAMILIES:
            assert keys == AMD_LABELS
            assert dict(labels)["hostname"] == node_of[dict(labels)["serial_number"]]
            amd += 1
            continue
        h = host[node_of[labels[1][1]]]
        mig = MIG if "GPU_I_ID" in keys else []
        if name == "DCGM_FI_DEV_XID_ERRORS":
            tail = ["DCGM_FI_DRIVER_VERSION", "container", "err_code", "err_msg", "namespace", "pod"]
        else:
            tail = TAIL
        vgpu = ["vgpu"] if "vgpu" in keys else []
        assert keys == DEVICE + mig + [h] + tail + vgpu
        seen.add((bool(mig), h, bool(vgpu)))
    assert {m for m, _, _ in seen} == {True, False}
    assert {h for _, h, _ in seen} == {"Hostname", "hostname"}
    assert {v for _, _, v in seen} == {True, False}
    assert amd == 16 * len(AMD_FAMILIES)  # the demo's 16 MI300X, each family once


def test_values_are_in_the_exporters_units(fleet: SimulatedFleet, text: str) -> None:
    tel = fleet.telemetry()
    now = tel[tel["timestamp"] == T_AT].set_index(["uuid", "gpu_instance_id"])
    checked = 0
    for name, labels, value in samples(text):
        lab = dict(labels)
        row = now.loc[(lab.get("UUID") or lab["serial_number"], lab.get("GPU_I_ID", ""))]
        expected = {
            "DCGM_FI_DEV_FB_USED": row["fb_used_bytes"] / 2**20,
            "DCGM_FI_DEV_FB_FREE": row["fb_free_bytes"] / 2**20,
            "DCGM_FI_DEV_GPU_UTIL": row["util_ratio"] * 100,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": row["util_ratio"],
            "DCGM_FI_DEV_POWER_USAGE": row["power_watts"],
            "DCGM_FI_DEV_GPU_TEMP": row["temp_celsius"],
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": row["energy_joules"] * 1000,
            "DCGM_FI_DEV_XID_ERRORS": row["xid_last"],
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": row["row_remap_failure"],
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": row["uncorrectable_remapped_rows"],
            "gpu_gfx_activity": row["util_ratio"] * 100,
            "gpu_used_vram": row["fb_used_bytes"] / 2**20,
            "gpu_free_vram": row["fb_free_bytes"] / 2**20,
            "gpu_package_power": row["power_watts"],
            "gpu_junction_temperature": row["temp_celsius"],
            "gpu_energy_consumed": row["energy_joules"] * 1e6,
        }[name]
        assert value == expected, (name, lab)
        checked += 1
    assert checked == len(samples(text)) > 1000
    fb = [v for n, _, v in samples(text) if n == "DCGM_FI_DEV_FB_USED"]
    assert max(fb) > 40_000 and all(v == int(v) for v in fb)  # whole MiB, like the real exporter


def test_workload_labels_name_the_holder_or_are_empty(fleet: SimulatedFleet, text: str) -> None:
    held = holders_at(fleet, T_AT)
    containers = {(p.namespace, p.name): p.container for p in fleet.pods}
    util = [dict(lbl) for n, lbl, _ in samples(text) if n == "DCGM_FI_DEV_FB_USED"]
    empty = 0
    for lab in util:
        unit = (lab["UUID"], lab.get("GPU_I_ID", ""))
        if unit not in held:
            assert (lab["container"], lab["namespace"], lab["pod"]) == ("", "", "")
            empty += 1
            continue
        assert (lab["namespace"], lab["pod"], lab.get("vgpu", "")) in held[unit]
        assert lab["container"] == containers[(lab["namespace"], lab["pod"])]
    assert 0 < empty < len(util)
    assert 'container="",namespace="",pod=""}' in text


def test_time_sliced_gpu_has_one_copy_per_replica_holder(fleet: SimulatedFleet, text: str) -> None:
    held = holders_at(fleet, T_AT)
    shared = {g.uuid for g in fleet.gpus if g.replicas > 1}
    copies: dict[str, list[dict[str, str]]] = {}
    values: dict[str, set[float]] = {}
    for n, lbl, v in samples(text):
        lab = dict(lbl)
        if n == "DCGM_FI_DEV_GPU_UTIL" and lab["UUID"] in shared:
            copies.setdefault(lab["UUID"], []).append(lab)
            values.setdefault(lab["UUID"], set()).add(v)
    assert copies and any(len(c) > 1 for c in copies.values())
    for uuid, labs in copies.items():
        # Nobody on it: one copy, no vgpu label, empty pod.
        want = sorted((r, p) for _, p, r in held.get((uuid, ""), [])) or [("", "")]
        assert sorted((lab.get("vgpu", ""), lab["pod"]) for lab in labs) == want
        assert len(values[uuid]) == 1  # the device's value, repeated, never split


def test_mig_instances(fleet: SimulatedFleet, text: str) -> None:
    parsed = samples(text)
    mig = [(n, dict(lbl), v) for n, lbl, v in parsed if "GPU_I_ID" in dict(lbl)]
    assert {lab["GPU_I_PROFILE"] for _, lab, _ in mig} == {"3g.40gb", "2g.20gb", "1g.10gb"}
    assert "DCGM_FI_DEV_GPU_UTIL" not in {n for n, _, _ in mig}
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in {n for n, _, _ in mig}
    # Whole-GPU fields repeat on each instance of the GPU; FB is the instance's own.
    for family in ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"):
        per_gpu: dict[str, set[float]] = {}
        for n, lab, v in mig:
            if n == family:
                per_gpu.setdefault(lab["UUID"], set()).add(v)
        assert per_gpu and all(len(vals) == 1 for vals in per_gpu.values()), family
    instances = {(lab["UUID"], lab["GPU_I_ID"]) for _, lab, _ in mig}
    assert len(instances) == sum(1 for g in fleet.gpus if g.mig_profile and fleet.node(g.node).ready)
    mem = {(g.uuid, g.gpu_instance_id): g.memory_bytes / 2**20 for g in fleet.gpus}
    for n, lab, v in mig:
        if n == "DCGM_FI_DEV_FB_FREE":
            used = next(
                u
                for m, lb, u in mig
                if m == "DCGM_FI_DEV_FB_USED"
                and lb["GPU_I_ID"] == lab["GPU_I_ID"]
                and lb["UUID"] == lab["UUID"]
            )
            assert v + used == pytest.approx(mem[(lab["UUID"], lab["GPU_I_ID"])])


def test_prof_fields_only_where_reported(fleet: SimulatedFleet, text: str) -> None:
    gr = {dict(lbl)["UUID"] for n, lbl, _ in samples(text) if n == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}
    util = {dict(lbl)["UUID"] for n, lbl, _ in samples(text) if n == "DCGM_FI_DEV_GPU_UTIL"}
    assert gr and all(fleet.has_prof[u] for u in gr)
    assert {u for u in util if not fleet.has_prof[u]}  # the T4s: GPU_UTIL only


def test_hostname_label_variants_and_the_exporter_pod_quirk(fleet: SimulatedFleet) -> None:
    quirky = next(t for t in fleet.targets if t.hostname_value == t.pod and fleet.node(t.node).ready)
    normal = next(
        t for t in fleet.targets if t.hostname_value == t.node and t.hostname_label != quirky.hostname_label
    )
    text = exporter_text(fleet, at=AT, node=quirky.node)
    labs = [dict(lbl) for _, lbl, _ in samples(text)]
    assert labs and all(lab[quirky.hostname_label] == quirky.pod for lab in labs)
    assert quirky.pod.startswith("nvidia-dcgm-exporter-")
    other = [dict(lbl) for _, lbl, _ in samples(exporter_text(fleet, at=AT, node=normal.node))]
    assert other and all(lab[normal.hostname_label] == normal.node for lab in other)
    assert {g.uuid for g in fleet.gpus if g.node == quirky.node} == {lab["UUID"] for lab in labs}


def test_gap_and_not_ready_nodes_serve_nothing(fleet: SimulatedFleet) -> None:
    gap = next(g for g in fleet.gaps if g.node == "gpu-l4-001")
    inside = gap.start + timedelta(minutes=30)
    assert exporter_text(fleet, at=inside, node=gap.node) == ""
    assert exporter_text(fleet, at=gap.end, node=gap.node) != ""
    gap_uuids = {g.uuid for g in fleet.gpus if g.node == gap.node}
    everything = exporter_text(fleet, at=inside)
    assert not gap_uuids & {dict(lbl).get("UUID") for _, lbl, _ in samples(everything)}
    down = next(n for n in fleet.nodes if not n.ready)
    assert exporter_text(fleet, at=AT, node=down.name) == ""
    with pytest.raises(DataError):
        exporter_text(fleet, at=END, node=gap.node)
    with pytest.raises(DataError):
        exporter_text(fleet, at=AT, node="no-such-node")


def test_xid_carries_code_and_message(fleet: SimulatedFleet) -> None:
    event = next(e for e in fleet.events if e.kind == "xid" and e.value == 13)
    before = exporter_text(fleet, at=event.start - timedelta(minutes=1), node=event.node)
    after = exporter_text(fleet, at=END - timedelta(seconds=1), node=event.node)
    for text, code, msg in ((before, "0", "No Error"), (after, "13", "Graphics Engine Exception")):
        xid = [(dict(lbl), v) for n, lbl, v in samples(text) if n == "DCGM_FI_DEV_XID_ERRORS"]
        mine = [(lab, v) for lab, v in xid if lab["UUID"] == event.uuid]
        assert [(lab["err_code"], lab["err_msg"], v) for lab, v in mine] == [(code, msg, float(code))]
        assert all(lab["err_code"] == "0" for lab, _ in xid if lab["UUID"] != event.uuid)


def backfill(fleet: SimulatedFleet, **kwargs: Any) -> tuple[int, str]:
    out = io.StringIO()
    n = write_backfill(fleet, out, **kwargs)
    return n, out.getvalue()


def test_backfill_is_openmetrics_with_stored_labels(fleet: SimulatedFleet) -> None:
    n, om = backfill(
        fleet, metrics=["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"], step_seconds=3600
    )
    assert om.endswith("# EOF\n")
    families = {f.name: f for f in parse_openmetrics(om)}  # raises on anything OpenMetrics forbids
    assert set(families) == {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"}
    # A counter must be named <name>_total in OpenMetrics; declared unknown it keeps the exporter's name.
    assert families["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "unknown"
    assert {s.name for s in families["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].samples} == {
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    }
    fb = families["DCGM_FI_DEV_FB_USED"].samples
    assert n == 2 * len(fb)
    # Samples sit mid-interval: t_i + 30 min for hourly samples.
    start = fleet.window.start.timestamp()
    assert {float(s.timestamp) for s in fb} == {start + 1800 + 3600 * i for i in range(24)}
    targets = {t.instance: t for t in fleet.targets}
    for s in fb:
        t = targets[s.labels["instance"]]
        assert s.labels["pod"] == t.pod and s.labels["namespace"] == "gpu-operator"
        assert s.labels["job"] == "nvidia-dcgm-exporter" and s.labels["endpoint"] == "gpu-metrics"
        assert "" not in s.labels.values()
    assert any("exported_pod" in s.labels for s in fb) and any("exported_pod" not in s.labels for s in fb)


def test_backfill_honor_labels_layout(fleet: SimulatedFleet) -> None:
    _, om = backfill(fleet, layout="honor_labels", metrics=["DCGM_FI_DEV_GPU_UTIL"], step_seconds=3600)
    util = next(iter(parse_openmetrics(om))).samples
    pods = {a.pod for a in fleet.allocations}
    assert all(set(s.labels) >= {"instance", "job"} for s in util)
    assert not any(k.startswith("exported_") or k in ("endpoint", "service") for s in util for k in s.labels)
    assert {s.labels["pod"] for s in util if "pod" in s.labels} <= pods
    assert any("pod" in s.labels for s in util) and any("pod" not in s.labels for s in util)


def test_backfill_sample_count_and_series_order(fleet: SimulatedFleet) -> None:
    n, om = backfill(fleet, metrics=["DCGM_FI_DEV_GPU_TEMP"])
    lines = [line for line in om.splitlines() if not line.startswith("#")]
    tel = fleet.telemetry()
    tel = tel[~tel["node"].str.startswith("gpu-mi300x")]  # AMD's GPUs are not dcgm-exporter's
    shared = {g.uuid for g in fleet.gpus if g.replicas > 1}
    assert n == len(lines) > len(tel)  # every served sample, plus one copy per extra replica holder
    last: dict[str, float] = {}
    finished: set[str] = set()
    previous = None
    for line in lines:
        series, _value, ts = line.rsplit(" ", 2)
        if series != previous:
            assert series not in finished  # each series' samples are contiguous...
            if previous is not None:
                finished.add(previous)
            previous = series
        assert float(ts) > last.get(series, -1)  # ...and in time order
        last[series] = float(ts)
    non_shared = tel[~tel["uuid"].isin(shared)]
    assert sum(1 for line in lines if not any(u in line for u in shared)) == len(non_shared)


def test_backfill_coarsening(fleet: SimulatedFleet) -> None:
    _, om = backfill(
        fleet,
        layout="honor_labels",
        metrics=["DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"],
        step_seconds=600,
    )
    tel = fleet.telemetry()
    g = next(g for g in fleet.gpus if g.node == "gpu-h100-000" and g.index == 0)
    unit = tel[tel["uuid"] == g.uuid].set_index("timestamp")
    buckets = unit.groupby(unit.index.floor("600s"))
    want_power = buckets["power_watts"].mean()
    want_energy = buckets["energy_joules"].last() * 1000
    got: dict[str, dict[pd.Timestamp, float]] = {
        "DCGM_FI_DEV_POWER_USAGE": {},
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": {},
    }
    for family in parse_openmetrics(om):
        for s in family.samples:
            if s.labels["UUID"] == g.uuid:
                t = pd.Timestamp(float(s.timestamp) - 300, unit="s", tz="UTC")
                got[family.name][t] = s.value
    assert len(got["DCGM_FI_DEV_POWER_USAGE"]) == 144
    for t, v in got["DCGM_FI_DEV_POWER_USAGE"].items():
        assert v == pytest.approx(want_power[t], rel=1e-12)
    assert got["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == want_energy.to_dict()
    with pytest.raises(DataError, match="multiple"):
        backfill(fleet, step_seconds=90)


def test_backfill_rejects_unknown_names(fleet: SimulatedFleet) -> None:
    with pytest.raises(DataError, match="DCGM_FI_DEV_NOPE"):
        backfill(fleet, metrics=["DCGM_FI_DEV_NOPE"])
    with pytest.raises(DataError, match="layout"):
        backfill(fleet, layout="kubernetes-pods")


def test_backfill_progress_reaches_the_total(fleet: SimulatedFleet) -> None:
    calls: list[tuple[int, int]] = []
    n, _ = backfill(
        fleet,
        metrics=["DCGM_FI_DEV_XID_ERRORS"],
        step_seconds=3600,
        progress=lambda d, t: calls.append((d, t)),
    )
    assert calls[-1] == (n, n)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_backfill_between_cuts_the_history_into_blocks(fleet: SimulatedFleet) -> None:
    metrics = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS"]
    n_all, whole = backfill(fleet, metrics=metrics, step_seconds=600)
    start = fleet.window.start
    # Blocks of 2 h starting 5 min before the hour, and an unaligned first cut from before the window.
    cuts = [start - timedelta(days=1), *(start + timedelta(hours=2 * k, minutes=-5) for k in range(1, 12))]
    cuts.append(fleet.window.end + timedelta(hours=1))
    pieces = [backfill(fleet, metrics=metrics, step_seconds=600, between=(a, b)) for a, b in pairwise(cuts)]
    assert sum(n for n, _ in pieces) == n_all
    body = sorted(line for line in whole.splitlines() if not line.startswith("#"))
    assert sorted(line for _, om in pieces for line in om.splitlines() if not line.startswith("#")) == body
    for (a, b), (n, om) in zip(pairwise(cuts), pieces, strict=True):
        assert om.endswith("# EOF\n")
        samples = [s for f in parse_openmetrics(om) for s in f.samples]  # each piece is valid on its own
        assert len(samples) == n > 0
        # Sample i is written at t_i + 5 min; it belongs to the piece whose [a, b) holds t_i.
        assert all(a.timestamp() <= float(s.timestamp) - 300 < b.timestamp() for s in samples)
    # Interval starts exactly on the bounds: [a, b) keeps the sample at a, not the one at b.
    at = start + timedelta(hours=1)
    n, om = backfill(
        fleet, metrics=["DCGM_FI_DEV_GPU_UTIL"], step_seconds=600, between=(at, at + timedelta(minutes=10))
    )
    stamps = {float(s.timestamp) for f in parse_openmetrics(om) for s in f.samples}
    assert n > 0 and stamps == {at.timestamp() + 300}
    n, om = backfill(fleet, metrics=["DCGM_FI_DEV_GPU_UTIL"], between=(at, at))
    assert n == 0 and om.endswith("# EOF\n")
    with pytest.raises(DataError, match="timezone"):
        backfill(fleet, between=(datetime(2026, 11, 19), datetime(2026, 11, 20)))


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.headers["Content-Type"], reply.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def test_serve_metrics(fleet: SimulatedFleet) -> None:
    node = fleet.targets[0].node
    with serve_metrics(fleet, clock=lambda: AT) as server:
        assert server.url == f"http://127.0.0.1:{server.port}" and server.port > 0
        status, ctype, body = _get(f"{server.url}/metrics?node={node}")
        assert (status, ctype) == (200, CONTENT_TYPE)
        assert body == exporter_text(fleet, at=AT, node=node)
        status, _, body = _get(f"{server.url}/metrics")
        assert status == 200 and body == exporter_text(fleet, at=AT)
        assert _get(f"{server.url}/metrics?node=nope")[0] == 404
        assert _get(f"{server.url}/other")[0] == 404
        down = next(n for n in fleet.nodes if not n.ready)
        assert _get(f"{server.url}/metrics?node={down.name}")[0] == 503
    with pytest.raises(OSError):
        _get(f"{server.url}/metrics")


def test_serve_metrics_clamps_the_clock_into_the_window(fleet: SimulatedFleet) -> None:
    node = fleet.targets[0].node
    last = END - timedelta(seconds=1)
    with serve_metrics(fleet, clock=lambda: END + timedelta(days=30)) as server:
        assert _get(f"{server.url}/metrics?node={node}")[2] == exporter_text(fleet, at=last, node=node)
    with serve_metrics(fleet, clock=lambda: fleet.window.start - timedelta(days=1)) as server:
        body = _get(f"{server.url}/metrics?node={node}")[2]
    assert (
        body
        == exporter_text(fleet, at=fleet.window.start, node=node)
        != exporter_text(fleet, at=last, node=node)
    )
    assert np.isfinite([v for _, _, v in samples(body)]).all()
