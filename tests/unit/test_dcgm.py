"""The DCGM catalog: our own fixtures in each real label layout parse to exact GPU rows in base units."""

import math
import re

import numpy as np
import pandas as pd
import pytest

from gpuwatch.core.schema import DCGM_SAMPLES, GPU_SAMPLES
from gpuwatch.core.units import BYTES_PER_MIB
from gpuwatch.sources.dcgm import (
    FIELDS,
    ExporterPods,
    field_of,
    instance_ip,
    is_exporter_pod_name,
    resolve_node,
    resolve_workload,
)
from gpuwatch.sources.dcgmrows import (
    combine_row_blocks,
    gpu_rows,
    physical_gpus,
    row_block,
    samples_frame,
    series_rows,
    to_float,
    unit_rows,
)

MIB = BYTES_PER_MIB
T0 = pd.Timestamp("2026-11-19 12:00", tz="UTC")
PROF = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
DEV = "DCGM_FI_DEV_GPU_UTIL"
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse(text: str) -> list[tuple[dict[str, str], str]]:
    """Exporter text or a Prometheus console view (`{a="b", c="d"}`) -> (labels with __name__, value)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        found = _SAMPLE.match(line)
        assert found, line
        labels = {
            k: re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], v)
            for k, v in _LABEL.findall(found[2] or "")
        }
        out.append(({"__name__": found[1], **labels}, found[3]))
    return out


def rows(text: str, **kwargs: object) -> pd.DataFrame:
    """gpu_rows of a scrape, its name columns (categoricals of strings) read back as str."""
    frame = samples_frame(parse(text), timestamp=T0)
    got = gpu_rows(frame, **kwargs)  # type: ignore[arg-type]
    names = [c for c in got.columns if isinstance(got[c].dtype, pd.CategoricalDtype)]
    assert all(got[c].cat.categories.dtype == "str" for c in names)
    return got.astype(dict.fromkeys(names, "str"))


def expected(records: list[dict[str, object]], extra: tuple[str, ...] = ()) -> pd.DataFrame:
    columns = [
        "timestamp", "node", "uuid", "gpu_instance_id", "mig_profile", "gpu_index", "product",
        "namespace", "pod", "container", "util_ratio", "util_source", *extra,
    ]  # fmt: skip
    frame = pd.DataFrame([{"timestamp": T0, **r} for r in records])[columns]
    for c in columns:
        if c == "timestamp":
            frame[c] = pd.to_datetime(frame[c], utc=True)
        elif c in ("util_ratio", *extra):
            frame[c] = frame[c].astype("float64")
        else:
            frame[c] = frame[c].astype("str")
    return frame


def unit(
    node: str, uuid: str, gi: str = "", profile: str = "", index: str = "0", product: str = ""
) -> dict[str, object]:
    return {
        "node": node,
        "uuid": uuid,
        "gpu_instance_id": gi,
        "mig_profile": profile,
        "gpu_index": index,
        "product": product,
    }


def workload(namespace: str = "", pod: str = "", container: str = "") -> dict[str, object]:
    return {"namespace": namespace, "pod": pod, "container": container}


# --- 1. Raw exporter text (4.x names, Hostname = node), whole GPUs and a MIG GPU -------------------------
# The MIG GPU is served as its parent (whole-GPU fields) next to its instances, as the exporter docs show.
RAW_MIG = """
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-0a0a0a0a-1111-2222-3333-444444444444",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-h100-001",DCGM_FI_DRIVER_VERSION="550.54.15",container="trainer",namespace="llm-research",pod="pretrain-7b-0"} 71
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-1b1b1b1b-1111-2222-3333-444444444444",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",Hostname="gpu-h100-001",DCGM_FI_DRIVER_VERSION="550.54.15"} 48
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-1b1b1b1b-1111-2222-3333-444444444444",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",GPU_I_PROFILE="3g.40gb",GPU_I_ID="1",Hostname="gpu-h100-001",DCGM_FI_DRIVER_VERSION="550.54.15",container="server",namespace="shared-inference",pod="embed-5f7c9-xk2lp"} 48
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-1b1b1b1b-1111-2222-3333-444444444444",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",GPU_I_PROFILE="1g.10gb",GPU_I_ID="13",Hostname="gpu-h100-001",DCGM_FI_DRIVER_VERSION="550.54.15"} 48
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-0a0a0a0a-1111-2222-3333-444444444444",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-h100-001",DCGM_FI_DRIVER_VERSION="550.54.15",container="trainer",namespace="llm-research",pod="pretrain-7b-0"} 612.250000
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-1b1b1b1b-1111-2222-3333-444444444444",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",Hostname="gpu-h100-001",DCGM_FI_DRIVER_VERSION="550.54.15"} 230.5
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-1b1b1b1b-1111-2222-3333-444444444444",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",GPU_I_PROFILE="3g.40gb",GPU_I_ID="1",Hostname="gpu-h100-001",DCGM_FI_DRIVER_VERSION="550.54.15",container="server",namespace="shared-inference",pod="embed-5f7c9-xk2lp"} 230.5
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-1b1b1b1b-1111-2222-3333-444444444444",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",GPU_I_PROFILE="1g.10gb",GPU_I_ID="13",Hostname="gpu-h100-001",DCGM_FI_DRIVER_VERSION="550.54.15"} 230.5
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-0a0a0a0a-1111-2222-3333-444444444444",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-h100-001",DCGM_FI_DRIVER_VERSION="550.54.15",container="trainer",namespace="llm-research",pod="pretrain-7b-0"} 318440121525
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-0a0a0a0a-1111-2222-3333-444444444444",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-h100-001",DCGM_FI_DRIVER_VERSION="550.54.15",container="trainer",namespace="llm-research",pod="pretrain-7b-0"} 100
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-0a0a0a0a-1111-2222-3333-444444444444",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-h100-001",DCGM_FI_DRIVER_VERSION="550.54.15",container="trainer",namespace="llm-research",pod="pretrain-7b-0"} 73211
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-1b1b1b1b-1111-2222-3333-444444444444",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",GPU_I_PROFILE="3g.40gb",GPU_I_ID="1",Hostname="gpu-h100-001",DCGM_FI_DRIVER_VERSION="550.54.15",container="server",namespace="shared-inference",pod="embed-5f7c9-xk2lp"} 30120
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-1b1b1b1b-1111-2222-3333-444444444444",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",GPU_I_PROFILE="1g.10gb",GPU_I_ID="13",Hostname="gpu-h100-001",DCGM_FI_DRIVER_VERSION="550.54.15"} 0
# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.
# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-0a0a0a0a-1111-2222-3333-444444444444",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-h100-001",DCGM_FI_DRIVER_VERSION="550.54.15",container="trainer",namespace="llm-research",pod="pretrain-7b-0"} 0.912304
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="1",UUID="GPU-1b1b1b1b-1111-2222-3333-444444444444",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",Hostname="gpu-h100-001",DCGM_FI_DRIVER_VERSION="550.54.15"} 0.301577
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="1",UUID="GPU-1b1b1b1b-1111-2222-3333-444444444444",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",GPU_I_PROFILE="3g.40gb",GPU_I_ID="1",Hostname="gpu-h100-001",DCGM_FI_DRIVER_VERSION="550.54.15",container="server",namespace="shared-inference",pod="embed-5f7c9-xk2lp"} 0.703680
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="1",UUID="GPU-1b1b1b1b-1111-2222-3333-444444444444",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",GPU_I_PROFILE="1g.10gb",GPU_I_ID="13",Hostname="gpu-h100-001",DCGM_FI_DRIVER_VERSION="550.54.15"} 0.000000
"""  # noqa: E501


def test_raw_exporter_text_with_mig_instances() -> None:
    got = rows(RAW_MIG)
    h100 = unit("gpu-h100-001", "GPU-0a0a0a0a-1111-2222-3333-444444444444", product="NVIDIA H100 80GB HBM3")
    a100 = {"node": "gpu-h100-001", "uuid": "GPU-1b1b1b1b-1111-2222-3333-444444444444", "gpu_index": "1"}
    a100["product"] = "NVIDIA A100-SXM4-80GB"
    extra = ("energy_joules", "fb_used_bytes", "power_watts", "temp_celsius")
    want = expected(
        [
            {**h100, **workload("llm-research", "pretrain-7b-0", "trainer"), "util_ratio": 0.912304,
             "util_source": PROF, "energy_joules": 318440121.525, "fb_used_bytes": 73211 * MIB,
             "power_watts": 612.25, "temp_celsius": 71.0},
            # The parent row (no GPU_I_ID) is gone: its instances report at the same time.
            {**a100, "gpu_instance_id": "1", "mig_profile": "3g.40gb",
             **workload("shared-inference", "embed-5f7c9-xk2lp", "server"), "util_ratio": 0.70368,
             "util_source": PROF, "energy_joules": math.nan, "fb_used_bytes": 30120 * MIB,
             "power_watts": 230.5, "temp_celsius": 48.0},
            {**a100, "gpu_instance_id": "13", "mig_profile": "1g.10gb", **workload(), "util_ratio": 0.0,
             "util_source": PROF, "energy_joules": math.nan, "fb_used_bytes": 0.0, "power_watts": 230.5,
             "temp_celsius": 48.0},
        ],
        extra,
    )  # fmt: skip
    pd.testing.assert_frame_equal(got, want)
    DCGM_SAMPLES.check(got)
    GPU_SAMPLES.check(got)


def test_whole_gpu_fields_repeated_on_mig_instances_are_not_summed() -> None:
    per_gpu = physical_gpus(rows(RAW_MIG))
    a100 = per_gpu[per_gpu["uuid"].str.startswith("GPU-1b1b")]
    assert a100["power_watts"].tolist() == [230.5]  # not 461 (two instances)
    assert a100["temp_celsius"].tolist() == [48.0]


# --- 2. The Prometheus view under kube-prometheus-stack (ServiceMonitor, honorLabels: false) -------------
# exported_* carry the workload; pod/namespace/container are the exporter's own target labels. The second
# node runs exporter >= 4.8.3 (`hostname`, lowercase) and its GPU is idle (no exported_* labels at all).
SERVICEMONITOR = """
DCGM_FI_DEV_GPU_UTIL{DCGM_FI_DRIVER_VERSION="550.54.15", Hostname="gpu-a100-002", UUID="GPU-2c2c2c2c-1111-2222-3333-444444444444", container="nvidia-dcgm-exporter", device="nvidia3", endpoint="gpu-metrics", exported_container="worker", exported_namespace="bio-ml", exported_pod="fold-batch-28jx9", gpu="3", instance="10.42.0.14:9400", job="nvidia-dcgm-exporter", modelName="NVIDIA A100-SXM4-80GB", namespace="gpu-operator", pci_bus_id="00000000:5D:00.0", pod="nvidia-dcgm-exporter-7hq2m", service="nvidia-dcgm-exporter"} 93
DCGM_FI_PROF_GR_ENGINE_ACTIVE{DCGM_FI_DRIVER_VERSION="550.54.15", Hostname="gpu-a100-002", UUID="GPU-2c2c2c2c-1111-2222-3333-444444444444", container="nvidia-dcgm-exporter", device="nvidia3", endpoint="gpu-metrics", exported_container="worker", exported_namespace="bio-ml", exported_pod="fold-batch-28jx9", gpu="3", instance="10.42.0.14:9400", job="nvidia-dcgm-exporter", modelName="NVIDIA A100-SXM4-80GB", namespace="gpu-operator", pci_bus_id="00000000:5D:00.0", pod="nvidia-dcgm-exporter-7hq2m", service="nvidia-dcgm-exporter"} 0.80125
DCGM_FI_DEV_FB_USED{DCGM_FI_DRIVER_VERSION="550.54.15", Hostname="gpu-a100-002", UUID="GPU-2c2c2c2c-1111-2222-3333-444444444444", container="nvidia-dcgm-exporter", device="nvidia3", endpoint="gpu-metrics", exported_container="worker", exported_namespace="bio-ml", exported_pod="fold-batch-28jx9", gpu="3", instance="10.42.0.14:9400", job="nvidia-dcgm-exporter", modelName="NVIDIA A100-SXM4-80GB", namespace="gpu-operator", pci_bus_id="00000000:5D:00.0", pod="nvidia-dcgm-exporter-7hq2m", service="nvidia-dcgm-exporter"} 61440
DCGM_FI_DEV_GPU_UTIL{DCGM_FI_DRIVER_VERSION="550.54.15", UUID="GPU-3d3d3d3d-1111-2222-3333-444444444444", container="nvidia-dcgm-exporter", device="nvidia0", endpoint="gpu-metrics", gpu="0", hostname="gpu-l4-001", instance="10.42.0.21:9400", job="nvidia-dcgm-exporter", modelName="NVIDIA L4", namespace="gpu-operator", pci_bus_id="00000000:18:00.0", pod="nvidia-dcgm-exporter-m4c8z", service="nvidia-dcgm-exporter"} 0
DCGM_FI_PROF_GR_ENGINE_ACTIVE{DCGM_FI_DRIVER_VERSION="550.54.15", UUID="GPU-3d3d3d3d-1111-2222-3333-444444444444", container="nvidia-dcgm-exporter", device="nvidia0", endpoint="gpu-metrics", gpu="0", hostname="gpu-l4-001", instance="10.42.0.21:9400", job="nvidia-dcgm-exporter", modelName="NVIDIA L4", namespace="gpu-operator", pci_bus_id="00000000:18:00.0", pod="nvidia-dcgm-exporter-m4c8z", service="nvidia-dcgm-exporter"} 0.000012
"""  # noqa: E501


def test_servicemonitor_view_prefers_exported_labels_and_ignores_the_exporter_pod() -> None:
    want = expected(
        [
            {**unit("gpu-a100-002", "GPU-2c2c2c2c-1111-2222-3333-444444444444", index="3",
                    product="NVIDIA A100-SXM4-80GB"),
             **workload("bio-ml", "fold-batch-28jx9", "worker"), "util_ratio": 0.80125, "util_source": PROF,
             "fb_used_bytes": 61440.0 * MIB},
            {**unit("gpu-l4-001", "GPU-3d3d3d3d-1111-2222-3333-444444444444", product="NVIDIA L4"),
             **workload(), "util_ratio": 0.000012, "util_source": PROF, "fb_used_bytes": math.nan},
        ],
        ("fb_used_bytes",),
    )  # fmt: skip
    pd.testing.assert_frame_equal(rows(SERVICEMONITOR), want)


# --- 3. The 1.x names: lowercase, empty pod labels, Hostname = the exporter pod's own name ---------------
ONE_X = """
dcgm_gpu_temp{gpu="0",UUID="GPU-4e4e4e4e-1111-2222-3333-444444444444",device="nvidia0",Hostname="dcgm-exporter-8pxtq",container="",namespace="",pod=""} 55
dcgm_power_usage{gpu="0",UUID="GPU-4e4e4e4e-1111-2222-3333-444444444444",device="nvidia0",Hostname="dcgm-exporter-8pxtq",container="",namespace="",pod=""} 31.25
dcgm_total_energy_consumption{gpu="0",UUID="GPU-4e4e4e4e-1111-2222-3333-444444444444",device="nvidia0",Hostname="dcgm-exporter-8pxtq",container="",namespace="",pod=""} 4817221042
dcgm_gpu_utilization{gpu="0",UUID="GPU-4e4e4e4e-1111-2222-3333-444444444444",device="nvidia0",Hostname="dcgm-exporter-8pxtq",container="",namespace="",pod=""} 37
dcgm_fb_used{gpu="0",UUID="GPU-4e4e4e4e-1111-2222-3333-444444444444",device="nvidia0",Hostname="dcgm-exporter-8pxtq",container="",namespace="",pod=""} 2048
dcgm_gpu_utilization{gpu="1",UUID="GPU-5f5f5f5f-1111-2222-3333-444444444444",device="nvidia1",Hostname="dcgm-exporter-8pxtq",container="notebook",namespace="notebooks",pod="jupyter-ana-0"} 4
"""  # noqa: E501
ONE_X_EXTRA = ("energy_joules", "fb_used_bytes", "power_watts", "temp_celsius")


def one_x_want(node: str) -> pd.DataFrame:
    return expected(
        [
            {**unit(node, "GPU-4e4e4e4e-1111-2222-3333-444444444444"), **workload(), "util_ratio": 0.37,
             "util_source": DEV, "energy_joules": 4817221.042, "fb_used_bytes": 2048.0 * MIB,
             "power_watts": 31.25, "temp_celsius": 55.0},
            {**unit(node, "GPU-5f5f5f5f-1111-2222-3333-444444444444", index="1"),
             **workload("notebooks", "jupyter-ana-0", "notebook"), "util_ratio": 0.04, "util_source": DEV,
             "energy_joules": math.nan, "fb_used_bytes": math.nan, "power_watts": math.nan,
             "temp_celsius": math.nan},
        ],
        ONE_X_EXTRA,
    )  # fmt: skip


def test_one_x_names_with_the_exporter_pod_as_hostname_map_through_the_exporter_pod() -> None:
    exporters = ExporterPods(node_by_pod={"dcgm-exporter-8pxtq": "gpu-t4-003"})
    pd.testing.assert_frame_equal(rows(ONE_X, exporters=exporters), one_x_want("gpu-t4-003"))


def test_an_exporter_pod_nobody_can_place_leaves_the_node_unknown_and_says_so() -> None:
    problems: list[str] = []
    got = rows(ONE_X, on_problem=problems.append)
    pd.testing.assert_frame_equal(got, one_x_want(""))
    assert problems == ["6 DCGM series name no node (an exporter pod gpuwatch cannot place)"]


def test_stored_under_honor_labels_the_instance_ip_places_the_exporter() -> None:
    stored = ONE_X.replace('pod=""}', 'pod="", instance="10.42.3.17:9400", job="gpu-metrics"}').replace(
        'pod="jupyter-ana-0"}', 'pod="jupyter-ana-0", instance="10.42.3.17:9400", job="gpu-metrics"}'
    )
    exporters = ExporterPods(node_by_ip={"10.42.3.17": "gpu-t4-003"})
    pd.testing.assert_frame_equal(rows(stored, exporters=exporters), one_x_want("gpu-t4-003"))


# --- 4. XID: last code with err_code/err_msg labels, and the opt-in windowed count per `xid` -------------
XID = """
# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{gpu="7",UUID="GPU-6a6a6a6a-1111-2222-3333-444444444444",pci_bus_id="00000000:DB:00.0",device="nvidia7",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-h100-004",DCGM_FI_DRIVER_VERSION="550.54.15",err_code="79",err_msg="GPU has fallen off the bus"} 79
# HELP DCGM_EXP_XID_ERRORS_COUNT Count of XID Errors within user-specified time window (see xid-count-window-size param).
# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge
DCGM_EXP_XID_ERRORS_COUNT{gpu="7",UUID="GPU-6a6a6a6a-1111-2222-3333-444444444444",pci_bus_id="00000000:DB:00.0",device="nvidia7",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-h100-004",DCGM_FI_DRIVER_VERSION="550.54.15",window_size_in_ms="300000",xid="13"} 2
DCGM_EXP_XID_ERRORS_COUNT{gpu="7",UUID="GPU-6a6a6a6a-1111-2222-3333-444444444444",pci_bus_id="00000000:DB:00.0",device="nvidia7",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-h100-004",DCGM_FI_DRIVER_VERSION="550.54.15",window_size_in_ms="300000",xid="79"} 1
"""  # noqa: E501


def test_xid_last_code_and_windowed_count_summed_over_codes() -> None:
    want = expected(
        [
            {**unit("gpu-h100-004", "GPU-6a6a6a6a-1111-2222-3333-444444444444", index="7",
                    product="NVIDIA H100 80GB HBM3"),
             **workload(), "util_ratio": math.nan, "util_source": "", "xid_count": 3.0, "xid_last": 79.0},
        ],
        ("xid_count", "xid_last"),
    )  # fmt: skip
    pd.testing.assert_frame_equal(rows(XID), want)


# --- 5. Time-slicing: one `vgpu` copy per replica, on a T4 without PROF fields -------------------------
# Replicas 0 and 2 belong to the same pod, replica 1 to another: two workloads, one GPU.
VGPU = """
DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-7b7b7b7b-1111-2222-3333-444444444444",device="nvidia2",modelName="Tesla T4",Hostname="gpu-t4-001",DCGM_FI_DRIVER_VERSION="550.54.15",container="server",namespace="recsys-prod",pod="ranker-6d9f-2kq8w",vgpu="0"} 45
DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-7b7b7b7b-1111-2222-3333-444444444444",device="nvidia2",modelName="Tesla T4",Hostname="gpu-t4-001",DCGM_FI_DRIVER_VERSION="550.54.15",container="lab",namespace="notebooks",pod="jupyter-bo-0",vgpu="1"} 45
DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-7b7b7b7b-1111-2222-3333-444444444444",device="nvidia2",modelName="Tesla T4",Hostname="gpu-t4-001",DCGM_FI_DRIVER_VERSION="550.54.15",container="server",namespace="recsys-prod",pod="ranker-6d9f-2kq8w",vgpu="2"} 45
DCGM_FI_DEV_FB_USED{gpu="2",UUID="GPU-7b7b7b7b-1111-2222-3333-444444444444",device="nvidia2",modelName="Tesla T4",Hostname="gpu-t4-001",DCGM_FI_DRIVER_VERSION="550.54.15",container="server",namespace="recsys-prod",pod="ranker-6d9f-2kq8w",vgpu="0"} 9000
DCGM_FI_DEV_FB_USED{gpu="2",UUID="GPU-7b7b7b7b-1111-2222-3333-444444444444",device="nvidia2",modelName="Tesla T4",Hostname="gpu-t4-001",DCGM_FI_DRIVER_VERSION="550.54.15",container="lab",namespace="notebooks",pod="jupyter-bo-0",vgpu="1"} 9000
DCGM_FI_DEV_FB_USED{gpu="2",UUID="GPU-7b7b7b7b-1111-2222-3333-444444444444",device="nvidia2",modelName="Tesla T4",Hostname="gpu-t4-001",DCGM_FI_DRIVER_VERSION="550.54.15",container="server",namespace="recsys-prod",pod="ranker-6d9f-2kq8w",vgpu="2"} 9000
"""  # noqa: E501


def test_vgpu_copies_collapse_per_workload_and_are_never_summed() -> None:
    t4 = unit("gpu-t4-001", "GPU-7b7b7b7b-1111-2222-3333-444444444444", index="2", product="Tesla T4")
    want = expected(
        [
            {**t4, **workload("notebooks", "jupyter-bo-0", "lab"), "util_ratio": 0.45, "util_source": DEV,
             "fb_used_bytes": 9000.0 * MIB},
            {**t4, **workload("recsys-prod", "ranker-6d9f-2kq8w", "server"), "util_ratio": 0.45,
             "util_source": DEV, "fb_used_bytes": 9000.0 * MIB},
        ],
        ("fb_used_bytes",),
    )  # fmt: skip
    got = rows(VGPU)
    pd.testing.assert_frame_equal(got, want)
    per_gpu = unit_rows(got)
    assert per_gpu[["uuid", "util_ratio", "fb_used_bytes"]].values.tolist() == [
        ["GPU-7b7b7b7b-1111-2222-3333-444444444444", 0.45, 9000.0 * MIB]
    ]


# --- 6. Utilization source: PROF per unit when it reports it at all, else GPU_UTIL/100 ------------------


def long_frame(records: list[tuple[pd.Timestamp, str, str, str]]) -> pd.DataFrame:
    """(timestamp, uuid, metric, value) rows of one node's exporter."""
    return pd.DataFrame(
        [
            {"timestamp": t, "UUID": u, "Hostname": "gpu-h100-002", "__name__": m, "value": v}
            for t, u, m, v in records
        ]
    )


def test_one_source_per_unit_over_the_window() -> None:
    t1 = T0 + pd.Timedelta(minutes=1)
    frame = long_frame(
        [
            (T0, "GPU-a", PROF, "0.5"),
            (T0, "GPU-a", DEV, "70"),
            (t1, "GPU-a", DEV, "80"),  # PROF missing this step: unknown, not a silent switch to GPU_UTIL
            (T0, "GPU-b", DEV, "20"),
            (t1, "GPU-b", DEV, "NaN"),
        ]
    )
    got = gpu_rows(frame)
    assert got[["timestamp", "uuid", "util_ratio", "util_source"]].values.tolist() == [
        [T0, "GPU-a", 0.5, PROF],
        [T0, "GPU-b", 0.2, DEV],
        [t1, "GPU-b", pytest.approx(math.nan, nan_ok=True), DEV],
    ]


def test_dcgm_exporter_4_9_names_are_read_in_their_new_units() -> None:
    frame = long_frame(
        [
            (T0, "GPU-c", "DCGM_FI_DEV_GPU_UTIL_RATIO", "0.42"),
            (T0, "GPU-c", "DCGM_FI_DEV_FB_USED_BYTES", "1073741824"),
            (T0, "GPU-c", "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", "5000"),
            (T0, "GPU-c", "DCGM_FI_DEV_BOARD_POWER_WATTS", "300.5"),
            (T0, "GPU-d", "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", "0.25"),
        ]
    )
    got = gpu_rows(frame)
    assert got[
        ["uuid", "util_ratio", "util_source", "fb_used_bytes", "energy_joules", "power_watts"]
    ].values.tolist()[0] == ["GPU-c", 0.42, DEV, 1073741824.0, 5000.0, 300.5]
    assert got.loc[1, ["uuid", "util_ratio", "util_source"]].tolist() == ["GPU-d", 0.25, PROF]


def test_nan_inf_and_garbage_are_unknown_never_zero() -> None:
    values = to_float(["0.5", "NaN", "+Inf", "-Inf", "garbage", None, "", "1e-3"])
    assert values[0] == 0.5 and values[7] == 0.001
    assert np.isnan(values[1:7]).all()
    frame = long_frame([(T0, "GPU-e", PROF, "+Inf"), (T0, "GPU-f", PROF, "bogus")])
    assert gpu_rows(frame)["util_ratio"].isna().all()


def test_series_without_uuid_or_outside_the_catalog_are_skipped_and_reported() -> None:
    problems: list[str] = []
    got = gpu_rows(
        [
            ({"__name__": PROF, "Hostname": "n1"}, 0.5),
            ({"__name__": "DCGM_FI_DEV_SM_CLOCK", "UUID": "GPU-x", "Hostname": "n1"}, 1410),
            ({"__name__": PROF, "uuid": "GPU-y", "hostname": "n1"}, 0.25),
        ],
        on_problem=problems.append,
    )
    assert got[["node", "uuid", "util_ratio"]].values.tolist() == [["n1", "GPU-y", 0.25]]
    assert problems == [
        "ignored series gpuwatch does not read: DCGM_FI_DEV_SM_CLOCK",
        "1 DCGM series without a UUID label were skipped",
    ]


def test_empty_input_gives_an_empty_frame_in_the_contract() -> None:
    got = gpu_rows([])
    assert got.empty
    DCGM_SAMPLES.check(got)


# --- Label resolution --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "is_exporter"),
    [
        ("nvidia-dcgm-exporter-q28k4", True),
        ("dcgm-exporter-6ldbb", True),
        ("dcgm-exporter-dev-78z52", True),
        ("gpu-h100-001", False),
        ("ip-172-20-10-26", False),
        ("424773df46e0", False),
        ("", False),
    ],
)
def test_exporter_pod_names(name: str, is_exporter: bool) -> None:
    assert is_exporter_pod_name(name) is is_exporter


def test_a_known_exporter_pod_with_an_unusual_name() -> None:
    assert is_exporter_pod_name("gpu-telemetry-x7k2p", ExporterPods(node_by_pod={"gpu-telemetry-x7k2p": "n"}))


@pytest.mark.parametrize(
    ("instance", "ip"),
    [("10.42.0.7:9400", "10.42.0.7"), ("[fd00::1]:9400", "fd00::1"), ("10.42.0.7", "10.42.0.7"), ("", "")],
)
def test_instance_ip(instance: str, ip: str) -> None:
    assert instance_ip(instance) == ip


def test_workload_label_precedence() -> None:
    exporter_labels = {"pod": "dcgm-exporter-dev-78z52", "namespace": "monitoring", "container": "exporter"}
    assert resolve_workload(exporter_labels) == ("", "", "")
    assert resolve_workload({**exporter_labels, "exported_pod": "p1", "exported_namespace": "default"}) == (
        "default",
        "p1",
        "",
    )
    assert resolve_workload({"pod": "", "pod_name": "old-style", "pod_namespace": "ns"}) == (
        "ns",
        "old-style",
        "",
    )
    assert resolve_workload({"pod": "train-0", "namespace": "ml", "container": "main"}) == (
        "ml",
        "train-0",
        "main",
    )
    operator = {"pod": "anything", "namespace": "gpu-operator", "container": "nvidia-dcgm-exporter"}
    assert resolve_workload(operator) == ("", "", "")


def test_exporter_pods_known_by_namespace_and_name() -> None:
    exporters = ExporterPods(node_by_pod={"monitoring/gpu-telemetry-x7k2p": "gpu-9"})
    labels = {"Hostname": "gpu-telemetry-x7k2p", "pod": "gpu-telemetry-x7k2p", "namespace": "monitoring"}
    assert resolve_workload({**labels, "container": "agent"}, exporters) == ("", "", "")
    assert resolve_node({"pod": "gpu-telemetry-x7k2p", "namespace": "monitoring"}, exporters) == "gpu-9"
    assert resolve_node(labels, exporters) == "gpu-9"


def test_node_resolution_order() -> None:
    exporters = ExporterPods(
        node_by_pod={"nvidia-dcgm-exporter-abcde": "n-pod"}, node_by_ip={"10.0.0.9": "n-ip"}
    )
    assert (
        resolve_node({"Hostname": "real-node", "pod": "nvidia-dcgm-exporter-abcde"}, exporters) == "real-node"
    )
    assert resolve_node({"hostname": "nvidia-dcgm-exporter-abcde"}, exporters) == "n-pod"
    assert (
        resolve_node({"Hostname": "nvidia-dcgm-exporter-zzzzz", "instance": "10.0.0.9:9400"}, exporters)
        == "n-ip"
    )
    assert resolve_node({"pod": "nvidia-dcgm-exporter-abcde"}, exporters) == "n-pod"
    assert resolve_node({"Hostname": "nvidia-dcgm-exporter-zzzzz"}, exporters) == ""


def test_catalog_aliases_are_unique_and_convert_to_base_units() -> None:
    metrics = [a.metric for f in FIELDS for a in f.aliases]
    assert len(metrics) == len(set(metrics))
    fld, alias = field_of("DCGM_FI_DEV_FB_USED") or (None, None)
    assert fld is not None and alias is not None and alias.to_base(1) == MIB and fld.column == "fb_used_bytes"
    _, energy = field_of("dcgm_total_energy_consumption") or (None, None)
    assert energy is not None and energy.to_base(1500) == 1.5
    _, util = field_of("DCGM_FI_DEV_GPU_UTIL") or (None, None)
    assert util is not None and util.to_base(29.000000000000004) == 0.29000000000000004
    assert field_of("DCGM_FI_DEV_SM_CLOCK") is None


@pytest.mark.parametrize("merged", [False, True], ids=["one entry per chunk", "chunks merged"])
def test_a_series_answered_in_overlapping_chunks_is_averaged_not_repeated(merged: bool) -> None:
    # One GPU_UTIL series in two range-query chunks that both hold t1: one row per timestamp.
    labels = {"__name__": DEV, "UUID": "GPU-1", "Hostname": "gpu-node-1"}
    series = [labels] if merged else [labels, dict(labels)]
    index = np.array([0, 0, 0, 0]) if merged else np.array([0, 0, 1, 1])
    t1, t2 = T0 + pd.Timedelta(minutes=1), T0 + pd.Timedelta(minutes=2)
    got = series_rows(series, index, pd.DatetimeIndex([T0, t1, t1, t2]), np.array([10.0, 20.0, 40.0, 60.0]))
    assert got["timestamp"].tolist() == [T0, t1, t2]
    assert got["util_ratio"].tolist() == pytest.approx([0.1, 0.3, 0.6])
    assert set(got["util_source"]) == {DEV}


def test_series_in_several_runs_keep_one_row_per_timestamp() -> None:
    # Two units, each answered in two chunks (runs), chunks already merged: every point is its own row.
    a = {"__name__": DEV, "UUID": "GPU-1", "Hostname": "gpu-node-1"}
    b = {"__name__": DEV, "UUID": "GPU-2", "Hostname": "gpu-node-1"}
    t = [T0 + pd.Timedelta(minutes=k) for k in range(4)]
    got = series_rows(
        [a, b],
        np.array([0, 0, 1, 1, 0, 0, 1, 1]),
        pd.DatetimeIndex([t[0], t[1], t[0], t[1], t[2], t[3], t[2], t[3]]),
        np.array([10.0, 20.0, 50.0, 60.0, 30.0, 40.0, 70.0, 80.0]),
    )
    by_gpu = {u: g["util_ratio"].tolist() for u, g in got.groupby("uuid", observed=True)}
    assert by_gpu == {
        "GPU-1": pytest.approx([0.1, 0.2, 0.3, 0.4]),
        "GPU-2": pytest.approx([0.5, 0.6, 0.7, 0.8]),
    }
    assert got["timestamp"].is_monotonic_increasing


def _chunk(
    points: list[tuple[pd.Timestamp, dict[str, str], float]],
) -> tuple[
    list[dict[str, str]],
    "np.ndarray[tuple[int], np.dtype[np.intp]]",
    pd.DatetimeIndex,
    "np.ndarray[tuple[int], np.dtype[np.float64]]",
]:
    """(time, labels, value) points -> the series table of one range-query chunk."""
    series: list[dict[str, str]] = []
    index = []
    for _, labels, _ in points:
        if labels not in series:
            series.append(labels)
        index.append(series.index(labels))
    return (
        series,
        np.array(index, dtype=np.intp),
        pd.DatetimeIndex([t for t, _, _ in points]),
        np.array([v for _, _, v in points], dtype=np.float64),
    )


def test_rows_built_chunk_by_chunk_equal_the_rows_of_the_whole_window() -> None:
    # gpu_samples builds each chunk's rows as it arrives; the source choice and the skipped-series counts
    # must still be those of the whole window.
    t = [T0 + pd.Timedelta(minutes=5 * k) for k in range(4)]
    a_prof = {"__name__": PROF, "UUID": "GPU-a", "Hostname": "n1", "exported_pod": "train-0"}
    a_dev = {"__name__": DEV, "UUID": "GPU-a", "Hostname": "n1", "exported_pod": "train-0"}
    b_dev = {"__name__": DEV, "UUID": "GPU-b", "Hostname": "n1"}
    b_dev_named = {**b_dev, "modelName": "NVIDIA H100 80GB HBM3"}
    no_uuid = {"__name__": PROF, "Hostname": "n1"}
    first = [
        (t[0], a_prof, 0.5),
        (t[1], a_prof, 0.75),
        (t[0], b_dev, 20.0),
        (t[1], b_dev, 30.0),
        (t[0], no_uuid, 0.1),
    ]
    second = [
        (t[2], a_dev, 90.0),  # GPU-a is on PROF in the window: this step is unknown, its row dropped
        (t[3], a_prof, 0.25),
        (t[2], b_dev_named, 40.0),
        (t[3], b_dev_named, 50.0),
        (t[3], no_uuid, 0.2),
    ]
    whole_problems: list[str] = []
    whole = series_rows(*_chunk(first + second), on_problem=whole_problems.append)
    chunk_problems: list[str] = []
    by_chunk = combine_row_blocks(
        [row_block(*_chunk(first)), row_block(*_chunk(second))], on_problem=chunk_problems.append
    )
    pd.testing.assert_frame_equal(by_chunk, whole)
    assert chunk_problems == whole_problems == ["1 DCGM series without a UUID label were skipped"]
    assert by_chunk[["timestamp", "uuid", "pod", "util_ratio", "util_source", "product"]].astype(
        {"uuid": "str", "pod": "str", "util_source": "str", "product": "str"}
    ).values.tolist() == [
        [t[0], "GPU-a", "train-0", 0.5, PROF, ""],
        [t[0], "GPU-b", "", 0.2, DEV, "NVIDIA H100 80GB HBM3"],
        [t[1], "GPU-a", "train-0", 0.75, PROF, ""],
        [t[1], "GPU-b", "", 0.3, DEV, "NVIDIA H100 80GB HBM3"],
        [t[2], "GPU-b", "", 0.4, DEV, "NVIDIA H100 80GB HBM3"],
        [t[3], "GPU-a", "train-0", 0.25, PROF, ""],
        [t[3], "GPU-b", "", 0.5, DEV, "NVIDIA H100 80GB HBM3"],
    ]


def test_row_blocks_out_of_time_order_are_refused() -> None:
    labels = {"__name__": DEV, "UUID": "GPU-1", "Hostname": "n1"}
    early = row_block(*_chunk([(T0, labels, 10.0)]))
    late = row_block(*_chunk([(T0 + pd.Timedelta(minutes=5), labels, 20.0)]))
    assert combine_row_blocks([early, late])["util_ratio"].tolist() == [0.1, 0.2]
    with pytest.raises(ValueError, match="disjoint stretches of time"):
        combine_row_blocks([late, early])
