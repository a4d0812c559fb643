"""Device and node health events: XIDs, row-remap failures, heat, NotReady and cordoned nodes, hidden GPUs."""

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

# As alerts/gpu-health.rules.yml's GPUHighTemperature: above 85 °C a datacenter GPU is at its slowdown
# temperature and cuts clocks. 85 °C itself is not hot.
HOT_CELSIUS = 85.0
# Hardware XIDs page an SRE; application XIDs are the workload's problem (as GPUCriticalXidError).
HARDWARE_XIDS: Mapping[int, str] = {
    48: "double-bit ECC error",
    63: "row-remapping event",
    64: "row-remapping failure",
    74: "NVLink error",
    79: "GPU fell off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
}
APP_XIDS: Mapping[int, str] = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup",
}
SEVERITY_ORDER: Mapping[str, int] = {"critical": 0, "warning": 1, "info": 2}
EVENT_COLUMNS = ("severity", "kind", "event", "node", "gpu", "uuid", "value", "detail")


def xid_text(code: float) -> str:
    """What an XID code means, and whether it is hardware or the application's."""
    xid = int(code)
    if xid in HARDWARE_XIDS:
        return f"XID {xid}: {HARDWARE_XIDS[xid]} (hardware: drain, reset or replace the GPU)"
    return f"XID {xid}: {APP_XIDS.get(xid, 'see NVIDIA XID catalog')} (application)"


def is_hot(temp_celsius: float) -> bool:
    return not math.isnan(temp_celsius) and temp_celsius > HOT_CELSIUS


def gpu_rows(units: pd.DataFrame) -> pd.DataFrame:
    """Per physical GPU (node, uuid) of a latest-per-unit health frame (service.gpu_health columns): the
    GPU's index, GE-weighted utilization of the units that report it, hottest temperature, power,
    framebuffer used and total, last XID, row-remap failure, and how many units (MIG instances) it has.

    Whole-GPU fields repeat on every MIG instance: max, not sum. Framebuffer is per instance: sum.
    """
    known = units["util_ratio"].notna()
    h = units.assign(
        util_ge=(units["util_ratio"] * units["ge"]).where(known, 0.0),
        known_ge=units["ge"].where(known, 0.0),
        fb_total=units["fb_used_bytes"] + units["fb_free_bytes"],
    )
    gpus = h.groupby(["node", "uuid"], as_index=False).agg(
        gpu=("gpu_index", "first"),
        util_ge=("util_ge", "sum"),
        known_ge=("known_ge", "sum"),
        temp_celsius=("temp_celsius", "max"),
        power_watts=("power_watts", "max"),
        fb_used_bytes=("fb_used_bytes", "sum"),
        fb_total_bytes=("fb_total", "sum"),
        xid_last=("xid_last", "max"),
        row_remap_failure=("row_remap_failure", "max"),
        units=("uuid", "size"),
    )
    gpus["util_ratio"] = gpus["util_ge"] / gpus["known_ge"].where(gpus["known_ge"] > 0)
    gpus["memory_ratio"] = gpus["fb_used_bytes"] / gpus["fb_total_bytes"].where(gpus["fb_total_bytes"] > 0)
    gpus["gpu"] = pd.to_numeric(gpus["gpu"], errors="coerce")
    return gpus.drop(columns=["util_ge", "known_ge"])


def health_events(gpus: pd.DataFrame, nodes: pd.DataFrame) -> pd.DataFrame:
    """The health events now, most severe first: one row each, columns EVENT_COLUMNS.

    gpus: gpu_rows() of the latest device telemetry. nodes: the analysis' nodes frame (node, capacity_ge,
    allocatable_ge, ready, schedulable). Kinds: xid (value = the last XID code; critical when it is a
    hardware XID), row_remap_failure, high_temperature (above HOT_CELSIUS; value = °C),
    node_not_ready, node_cordoned, gpus_not_advertised (value = GPUs the device plugin hides) and
    no_telemetry (a node with GPUs but no device telemetry in the last samples).
    """
    rows: list[dict[str, Any]] = []
    for r in gpus.to_dict("records"):
        base = {"node": str(r["node"]), "gpu": f"{r['gpu']:.0f}", "uuid": str(r["uuid"])}
        xid = float(r["xid_last"])
        if xid and not np.isnan(xid):
            hardware = int(xid) in HARDWARE_XIDS
            rows.append(
                {
                    **base,
                    "severity": "critical" if hardware else "info",
                    "kind": "xid",
                    "event": f"XID {int(xid)}",
                    "value": xid,
                    "detail": xid_text(xid),
                }
            )
        remap = float(r["row_remap_failure"])
        if remap and not np.isnan(remap):
            rows.append(
                {
                    **base,
                    "severity": "critical",
                    "kind": "row_remap_failure",
                    "event": "row-remap failure",
                    "value": remap,
                    "detail": "a failing memory row could not be remapped: reset the GPU, RMA if it persists",
                }
            )
        temp = float(r["temp_celsius"])
        if is_hot(temp):
            rows.append(
                {
                    **base,
                    "severity": "warning",
                    "kind": "high_temperature",
                    "event": "high temperature",
                    "value": temp,
                    "detail": f"{temp:.0f} °C (above {HOT_CELSIUS:.0f} °C: the GPU throttles its clocks)",
                }
            )
    reporting = set(gpus["node"].astype("str"))
    for n in nodes.to_dict("records"):
        base = {"node": str(n["node"]), "gpu": "", "uuid": ""}
        capacity, allocatable = float(n["capacity_ge"]), float(n["allocatable_ge"])
        if not n["ready"]:
            rows.append(
                {
                    **base,
                    "severity": "critical",
                    "kind": "node_not_ready",
                    "event": "node NotReady",
                    "value": capacity,
                    "detail": f"{capacity:.0f} GPUs unavailable",
                }
            )
        elif not n["schedulable"]:
            rows.append(
                {
                    **base,
                    "severity": "info",
                    "kind": "node_cordoned",
                    "event": "node cordoned",
                    "value": capacity,
                    "detail": "free GPUs on it are stranded",
                }
            )
        hidden = round(capacity - allocatable, 2)
        if hidden > 0:
            rows.append(
                {
                    **base,
                    "severity": "warning",
                    "kind": "gpus_not_advertised",
                    "event": "GPUs not advertised",
                    "value": hidden,
                    "detail": f"capacity {capacity:g}, allocatable {round(allocatable, 2):g}: "
                    f"the device plugin hides {hidden:g}",
                }
            )
        if capacity > 0 and str(n["node"]) not in reporting:
            rows.append(
                {
                    **base,
                    "severity": "warning",
                    "kind": "no_telemetry",
                    "event": "no telemetry",
                    "value": math.nan,
                    "detail": "no DCGM series in the last samples (exporter down or not scraped)",
                }
            )
    frame = pd.DataFrame(rows, columns=list(EVENT_COLUMNS)).astype({"value": "float64"})
    order = frame["severity"].map(SEVERITY_ORDER)
    return (
        frame.assign(_o=order, _g=pd.to_numeric(frame["gpu"], errors="coerce"))
        .sort_values(["_o", "node", "_g"], kind="stable", na_position="first")  # node events first
        .drop(columns=["_o", "_g"])
        .reset_index(drop=True)
    )
