"""Health events on hand-built fleets: heat above 85 °C, hardware vs application XIDs, node events."""

import math

import pandas as pd

from gpuwatch.analytics.health import HOT_CELSIUS, gpu_rows, health_events, is_hot

NAN = math.nan


def units(rows: list[tuple[str, str, str, str, float, float, float, float]]) -> pd.DataFrame:
    """Latest-per-unit health (service.gpu_health's columns) from
    (node, uuid, gpu_instance_id, gpu_index, ge, util, temp, xid); 40/40 GiB framebuffer, no remap."""
    return pd.DataFrame(
        {
            "timestamp": pd.Timestamp("2026-11-20", tz="UTC"),
            "node": [r[0] for r in rows],
            "uuid": [r[1] for r in rows],
            "gpu_instance_id": [r[2] for r in rows],
            "gpu_index": [r[3] for r in rows],
            "mig_profile": "",
            "ge": [r[4] for r in rows],
            "util_ratio": [r[5] for r in rows],
            "temp_celsius": [r[6] for r in rows],
            "power_watts": 300.0,
            "fb_used_bytes": 40 * 2.0**30,
            "fb_free_bytes": 40 * 2.0**30,
            "xid_last": [r[7] for r in rows],
            "row_remap_failure": 0.0,
        }
    )


def nodes(rows: list[tuple[str, float, float, bool, bool]]) -> pd.DataFrame:
    """(node, capacity_ge, allocatable_ge, ready, schedulable)."""
    return pd.DataFrame(rows, columns=["node", "capacity_ge", "allocatable_ge", "ready", "schedulable"])


def test_hot_means_above_the_alert_threshold() -> None:
    assert HOT_CELSIUS == 85.0
    assert not is_hot(85.0)  # as GPUHighTemperature: > 85
    assert is_hot(85.5)
    assert not is_hot(NAN)  # unknown is not hot


def test_gpu_rows_combine_mig_instances_without_summing_whole_gpu_fields() -> None:
    # One A100 cut into 3/7 (util 0.5) and 2/7 (no utilization), temperature repeated on both.
    frame = units(
        [
            ("n1", "GPU-a", "1", "0", 3 / 7, 0.5, 70.0, 0.0),
            ("n1", "GPU-a", "2", "0", 2 / 7, NAN, 70.0, 0.0),
            ("n1", "GPU-b", "", "1", 1.0, 0.2, 60.0, 13.0),
        ]
    )
    gpus = gpu_rows(frame).set_index("uuid")
    assert gpus.loc["GPU-a", "units"] == 2
    assert gpus.loc["GPU-a", "temp_celsius"] == 70.0  # max of the copies, not their sum
    assert gpus.loc["GPU-a", "util_ratio"] == 0.5  # the unit without utilization is left out
    assert gpus.loc["GPU-a", "memory_ratio"] == 0.5
    assert gpus.loc["GPU-b", "gpu"] == 1.0


def test_events_by_severity_with_their_values() -> None:
    gpus = gpu_rows(
        units(
            [
                ("n1", "GPU-hot", "", "0", 1.0, 0.9, 89.0, 0.0),
                ("n1", "GPU-edge", "", "1", 1.0, 0.9, 85.0, 0.0),
                ("n1", "GPU-79", "", "2", 1.0, NAN, NAN, 79.0),
                ("n2", "GPU-13", "", "0", 1.0, 0.1, 50.0, 13.0),
            ]
        )
    )
    fleet = nodes(
        [
            ("n1", 8.0, 7.0, True, True),  # one GPU hidden by the device plugin
            ("n2", 4.0, 4.0, True, False),  # cordoned
            ("n3", 8.0, 8.0, False, True),  # NotReady, reports nothing
            ("n4", 4.0, 4.0, True, True),  # ready, reports nothing
        ]
    )
    events = health_events(gpus, fleet)
    got = [(e["severity"], e["kind"], e["node"], e["gpu"], e["value"]) for e in events.to_dict("records")]
    assert got == [
        ("critical", "xid", "n1", "2", 79.0),
        ("critical", "node_not_ready", "n3", "", 8.0),
        ("warning", "gpus_not_advertised", "n1", "", 1.0),
        ("warning", "high_temperature", "n1", "0", 89.0),
        ("warning", "no_telemetry", "n3", "", got[4][4]),
        ("warning", "no_telemetry", "n4", "", got[5][4]),
        ("info", "node_cordoned", "n2", "", 4.0),
        ("info", "xid", "n2", "0", 13.0),
    ]
    assert math.isnan(got[4][4]) and math.isnan(got[5][4])  # no value to report: unknown, not 0
    detail = dict(zip(events["kind"] + events["node"], events["detail"], strict=True))
    assert detail["high_temperaturen1"] == "89 °C (above 85 °C: the GPU throttles its clocks)"
    assert detail["xidn1"].startswith("XID 79: GPU fell off the bus (hardware")
    assert detail["xidn2"] == "XID 13: graphics engine exception (application)"


def test_no_gpus_and_no_nodes_is_no_event() -> None:
    empty = gpu_rows(units([]))
    assert health_events(empty, nodes([])).empty
