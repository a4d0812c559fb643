"""AMD Instinct and Intel Gaudi beside NVIDIA: our own fixtures in each vendor's real formats parse to the
same base-unit model, and the ledger runs on a mixed-vendor fleet with no NVIDIA-only assumption.

Where each format was learned:
- AMD node labels: ROCm/k8s-device-plugin cmd/k8s-node-labeller (amd.com/gpu.product-name spaces as "_",
  vram "<GiB>G", compute-memory-partition "cpx_nps4") and its docs/user-guide/installation.md example.
- AMD resources: the device plugin's "single" (amd.com/gpu, one per partition) and "mixed"
  (amd.com/cpx_nps4) naming strategies; MI300X partitions per mode from amdsmi.h (CPX 8, QPX 4, DPX 2).
- AMD telemetry: ROCm/device-metrics-exporter docs/configuration/metricslist.md and configmap.md (names,
  units, always-present labels written as "" when empty, lowercase names, the optional "amd_" prefix).
- Gaudi: HabanaAI/habanalabs-k8s-device-plugin (habana.ai/gaudi), HabanaAI/gaudi-feature-discovery
  (habana.ai/device.type, habana.ai/device.count), HabanaAI/gaudi-metric-exporter samples.go and
  exporter.go (habanalabs_* names, power in mW; labels Serial, UUID, device, id, fit, spi, driver,
  pod_namespace, pod_name: no node label).
"""

import math
from datetime import UTC, datetime

import pandas as pd
import pytest

from gpuwatch.core.config import Settings
from gpuwatch.core.model import PriceBook, Window, ge_per_unit, vendor_of_resource
from gpuwatch.core.units import BYTES_PER_MIB
from gpuwatch.read.analysis import analyze
from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.demoservice import demo_service
from gpuwatch.sources.dcgm import ExporterPods
from gpuwatch.sources.dcgmrows import gpu_rows, samples_frame
from gpuwatch.sources.kubernetes import ClusterState, _Problems, parse_namespace, parse_node, parse_pod
from gpuwatch.surfaces.report import build_report
from tests.unit.test_dcgm import parse

GIB = 1024 * BYTES_PER_MIB
T0 = datetime(2026, 11, 20, tzinfo=UTC)
MI300X, GAUDI2, H100 = "AMD_INSTINCT_MI300X_OAM", "GAUDI2", "NVIDIA-H100-80GB-HBM3"

# --- AMD device-metrics-exporter /metrics, as the exporter writes it (labels sorted, empty ones kept) -----
_AMD_LABELS = (
    'card_model="102-G30211-0C",card_series="AMD Instinct MI300X OAM",container="{container}",'
    'deployment_mode="baremetal",gpu_compute_partition_type="spx",gpu_id="{gpu}",'
    'gpu_memory_partition_type="nps1",gpu_partition_id="0",hostname="gpu-mi300x-000",job_id="",'
    'job_partition="",job_user="",namespace="{namespace}",pod="{pod}",serial_number="{serial}"'
)


def _amd(metric: str, gpu: int, value: str, pod: str = "", prefix: str = "") -> str:
    held = pod and {"container": "trainer", "namespace": "llm", "pod": pod}
    labels = _AMD_LABELS.format(
        gpu=gpu, serial=f"69240900540{gpu}", **(held or dict.fromkeys(("container", "namespace", "pod"), ""))
    )
    return f"{prefix}{metric}{{{labels}}} {value}"


AMD_TEXT = "\n".join(
    [
        "# HELP gpu_gfx_activity Graphics engine usage in Percentage (0-100)",
        "# TYPE gpu_gfx_activity gauge",
        _amd("gpu_gfx_activity", 0, "80", "train-b"),
        _amd("gpu_gfx_activity", 1, "60", "train-b"),
        "# TYPE gpu_used_vram gauge",
        _amd("gpu_used_vram", 0, "150000", "train-b"),
        _amd("gpu_used_vram", 1, "98304", "train-b"),
        "# TYPE gpu_package_power gauge",
        _amd("gpu_package_power", 0, "612", "train-b"),
        _amd("gpu_package_power", 1, "540.5", "train-b"),
        "# TYPE gpu_junction_temperature gauge",
        _amd("gpu_junction_temperature", 0, "71", "train-b"),
        _amd("gpu_junction_temperature", 1, "66", "train-b"),
        "# TYPE gpu_memory_temperature gauge",
        _amd("gpu_memory_temperature", 0, "58", "train-b"),
        _amd("gpu_memory_temperature", 1, "55", "train-b"),
        "# TYPE gpu_energy_consumed gauge",
        _amd("gpu_energy_consumed", 0, "3.5e+12", "train-b"),
        _amd("gpu_energy_consumed", 1, "2.25e+12", "train-b"),
    ]
)

# --- Intel Gaudi metric-exporter /metrics: no node label; pod_namespace/pod_name from the kubelet ---------
_GAUDI_LABELS = (
    'Serial="AN{n}0012345",UUID="01P0-HL2080A0-15-TNPS34-13-07-0{n}",device="AN{n}0012345",'
    'driver="1.18.0-ee698fb",fit="hl-gaudi2-1.18.0-fw-53.1.1",id="{n}",pod_name="{pod}",'
    'pod_namespace="{namespace}",spi="hl-gaudi2-1.18.0-fw-53.1.1-sec-9"'
)


def _gaudi(metric: str, n: int, value: str, pod: str = "") -> str:
    labels = _GAUDI_LABELS.format(n=n, pod=pod, namespace="vision" if pod else "")
    return f"{metric}{{{labels}}} {value}"


GAUDI_TEXT = "\n".join(
    [
        "# HELP habanalabs_utilization Utilization of the device",
        "# TYPE habanalabs_utilization gauge",
        _gaudi("habanalabs_utilization", 0, "0", "infer"),
        _gaudi("habanalabs_utilization", 1, "0"),
        "# HELP habanalabs_power_mW Power usage in milli-watts",
        "# TYPE habanalabs_power_mW gauge",
        _gaudi("habanalabs_power_mW", 0, "182500", "infer"),
        _gaudi("habanalabs_power_mW", 1, "101000"),
        "# TYPE habanalabs_memory_used_bytes gauge",
        _gaudi("habanalabs_memory_used_bytes", 0, "34359738368", "infer"),
        _gaudi("habanalabs_memory_used_bytes", 1, "0"),
        "# TYPE habanalabs_temperature_onchip gauge",
        _gaudi("habanalabs_temperature_onchip", 0, "44", "infer"),
        _gaudi("habanalabs_temperature_onchip", 1, "38"),
    ]
)
# As kube-prometheus-stack stores the Gaudi series (honorLabels false): the exporter's own target labels.
GAUDI_TARGET = 'container="metric-exporter",endpoint="habana-metrics",instance="10.42.7.3:41611",job="metric-exporter",namespace="monitoring",pod="metric-exporter-ds-7fz2p",service="metric-exporter"'  # noqa: E501


def _stored(text: str, target: str) -> str:
    return "\n".join(
        line.replace("} ", f",{target}}} ") for line in text.splitlines() if not line.startswith("#")
    )


NVIDIA_TEXT = """
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-0a0a0a0a-1111-2222-3333-444444444444",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-h100-000",container="trainer",namespace="llm",pod="train-a"} 0.5
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="1",UUID="GPU-0b0b0b0b-1111-2222-3333-444444444444",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-h100-000",container="",namespace="",pod=""} 0
"""  # noqa: E501


def _rows(text: str, **kwargs: object) -> pd.DataFrame:
    got = gpu_rows(samples_frame(parse(text), timestamp=pd.Timestamp(T0)), **kwargs)  # type: ignore[arg-type]
    return got.astype({c: "str" for c in got.columns if isinstance(got[c].dtype, pd.CategoricalDtype)})


def test_amd_exporter_text_reads_in_base_units_with_its_pod() -> None:
    got = _rows(AMD_TEXT).set_index("gpu_index")
    assert got["node"].tolist() == ["gpu-mi300x-000"] * 2
    assert got["uuid"].tolist() == ["692409005400", "692409005401"]  # serial_number: gpu_uuid is opt-in
    assert got["product"].tolist() == ["AMD Instinct MI300X OAM"] * 2
    assert got[["namespace", "pod", "container"]].drop_duplicates().values.tolist() == [
        ["llm", "train-b", "trainer"]
    ]
    assert got["util_ratio"].tolist() == [0.8, 0.6]
    assert got["util_source"].tolist() == ["DCGM_FI_DEV_GPU_UTIL"] * 2  # its counterpart in the catalog
    assert got["fb_used_bytes"].tolist() == [150000 * BYTES_PER_MIB, 98304 * BYTES_PER_MIB]
    assert got["power_watts"].tolist() == [612.0, 540.5]
    assert got["temp_celsius"].tolist() == [71.0, 66.0]
    assert got["memory_temp_celsius"].tolist() == [58.0, 55.0]
    assert got["energy_joules"].tolist() == [3.5e6, 2.25e6]  # µJ


def test_amd_names_with_the_amd_prefix_and_the_operators_servicemonitor_read_the_same() -> None:
    target = (
        'container="metrics-exporter-container",endpoint="metrics",instance="10.42.5.9:5000",'
        'job="default-metrics-exporter",namespace="kube-amd-gpu",pod="default-metrics-exporter-q8hbb"'
    )
    renamed = "\n".join(
        "amd_"
        + line.replace('container="', 'exported_container="')
        .replace('namespace="', 'exported_namespace="')
        .replace('pod="', 'exported_pod="')
        .replace("} ", f",{target}}} ")
        for line in AMD_TEXT.splitlines()
        if not line.startswith("#")
    )
    pd.testing.assert_frame_equal(_rows(renamed), _rows(AMD_TEXT))


def test_gaudi_series_are_placed_on_their_exporters_node_with_their_pod() -> None:
    exporters = ExporterPods(node_by_pod={"monitoring/metric-exporter-ds-7fz2p": "gpu-gaudi2-000"})
    got = _rows(_stored(GAUDI_TEXT, GAUDI_TARGET), exporters=exporters).set_index("gpu_index")
    assert got["node"].tolist() == ["gpu-gaudi2-000"] * 2
    assert got["uuid"].tolist() == ["01P0-HL2080A0-15-TNPS34-13-07-00", "01P0-HL2080A0-15-TNPS34-13-07-01"]
    # pod_namespace/pod_name name the workload; the exporter's own pod target label does not.
    assert got[["namespace", "pod"]].values.tolist() == [["vision", "infer"], ["", ""]]
    assert got["util_ratio"].tolist() == [0.0, 0.0]
    assert got["power_watts"].tolist() == [182.5, 101.0]  # mW
    assert got["fb_used_bytes"].tolist() == [32 * GIB, 0.0]
    assert got["temp_celsius"].tolist() == [44.0, 38.0]


# --- Nodes and pods as the API server serves them --------------------------------------------------------


def _node(name: str, labels: dict[str, str], capacity: dict[str, str]) -> dict[str, object]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "status": {
            "capacity": {"cpu": "192", **capacity},
            "allocatable": {"cpu": "190", **capacity},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


AMD_LABELS = {
    "amd.com/gpu.cu-count": "304",
    "amd.com/gpu.device-id": "74a1",
    "amd.com/gpu.family": "AI",
    "amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM",
    "amd.com/gpu.simd-count": "1216",
    "amd.com/gpu.vram": "192G",
}
GAUDI_LABELS = {
    "habana.ai/device.count": "2",
    "habana.ai/device.family": "gaudi",
    "habana.ai/device.id": "1020",
    "habana.ai/device.type": "GAUDI2",
    "habana.ai/driver.version": "1.18.0",
}


def test_amd_and_gaudi_nodes_parse_to_the_same_model() -> None:
    problems = _Problems()
    amd = parse_node(_node("gpu-mi300x-000", AMD_LABELS, {"amd.com/gpu": "8"}), problems)
    gaudi = parse_node(_node("gpu-gaudi2-000", GAUDI_LABELS, {"habana.ai/gaudi": "8"}), problems)
    assert amd is not None and gaudi is not None and problems.count == 0
    assert (amd.vendor, amd.pool, amd.gpu_count, amd.gpu_memory_bytes) == ("amd", MI300X, 8, 192 * GIB)
    assert amd.capacity_gpus() == 8.0
    # Habana's feature discovery has no memory label: unknown, never 0.
    assert (gaudi.vendor, gaudi.pool, gaudi.gpu_count) == ("intel", GAUDI2, 2)  # its device.count label
    assert math.isnan(gaudi.gpu_memory_bytes)


@pytest.mark.parametrize(
    ("capacity", "partition"),
    [
        ({"amd.com/gpu": "64"}, "cpx_nps4"),  # the "single" strategy: one amd.com/gpu per partition
        ({"amd.com/cpx_nps4": "64"}, "cpx_nps4"),  # the "mixed" strategy names the partitions' mode
        ({"amd.com/gpu": "16"}, "dpx_nps1"),
    ],
)
def test_a_partitioned_amd_node_counts_its_gpus_not_its_partitions(
    capacity: dict[str, str], partition: str
) -> None:
    problems = _Problems()
    node = parse_node(
        _node("gpu-mi300x-001", {**AMD_LABELS, "amd.com/gpu.compute-memory-partition": partition}, capacity),
        problems,
    )
    assert node is not None and problems.count == 0
    assert (node.gpu_count, node.capacity_gpus(), node.vendor) == (8, 8.0, "amd")


def test_resources_and_their_gpu_equivalents() -> None:
    assert [
        vendor_of_resource(r) for r in ("nvidia.com/mig-1g.10gb", "amd.com/cpx_nps4", "habana.ai/gaudi")
    ] == [
        "nvidia",
        "amd",
        "intel",
    ]
    assert ge_per_unit("amd.com/gpu") == 1.0
    assert ge_per_unit("amd.com/gpu", replicas=8) == 1 / 8  # a CPX partition behind amd.com/gpu
    assert [ge_per_unit(f"amd.com/{m}_nps1") for m in ("spx", "dpx", "qpx", "cpx")] == [1.0, 0.5, 0.25, 0.125]
    assert ge_per_unit("habana.ai/gaudi") == 1.0


# --- The ledger on a mixed-vendor fleet, by hand ----------------------------------------------------------


def _pod(namespace: str, name: str, node: str, resource: str, quantity: int) -> dict[str, object]:
    return {
        "metadata": {"namespace": namespace, "name": name, "creationTimestamp": "2026-11-19T00:00:00Z"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "resources": {"limits": {resource: str(quantity)}}}],
        },
        "status": {"phase": "Running", "startTime": "2026-11-19T00:00:00Z"},
    }


def test_the_ledger_on_a_mixed_vendor_fleet() -> None:
    """Two GPUs of each vendor for 1 h (two 30-minute samples, the same readings in each):
    - H100: train-a holds GPU 0 at 50 % (active); GPU 1 is free.
    - MI300X: train-b holds both, at 80 % and 60 % (active).
    - Gaudi2: infer holds accelerator 0 at 0 % (idle for the whole hour); accelerator 1 is free.
    """
    problems = _Problems()
    state = ClusterState(
        nodes=tuple(
            n
            for n in (
                parse_node(
                    _node(
                        "gpu-h100-000",
                        {"nvidia.com/gpu.product": H100, "nvidia.com/gpu.count": "2"},
                        {"nvidia.com/gpu": "2"},
                    ),
                    problems,
                ),
                parse_node(_node("gpu-mi300x-000", AMD_LABELS, {"amd.com/gpu": "2"}), problems),
                parse_node(_node("gpu-gaudi2-000", GAUDI_LABELS, {"habana.ai/gaudi": "2"}), problems),
            )
            if n is not None
        ),
        pods=tuple(
            p
            for p in (
                parse_pod(_pod("llm", "train-a", "gpu-h100-000", "nvidia.com/gpu", 1), problems),
                parse_pod(_pod("llm", "train-b", "gpu-mi300x-000", "amd.com/gpu", 2), problems),
                parse_pod(_pod("vision", "infer", "gpu-gaudi2-000", "habana.ai/gaudi", 1), problems),
            )
            if p is not None
        ),
        namespaces=tuple(parse_namespace({"metadata": {"name": n}}) for n in ("llm", "vision")),
        quotas=(),
    )
    assert problems.count == 0
    window = Window(start=T0, end=T0.replace(hour=1), step_seconds=1800)
    exporters = ExporterPods(node_by_pod={"monitoring/metric-exporter-ds-7fz2p": "gpu-gaudi2-000"})
    text = "\n".join([NVIDIA_TEXT, AMD_TEXT, _stored(GAUDI_TEXT, GAUDI_TARGET)])
    samples = pd.concat(
        [
            gpu_rows(samples_frame(parse(text), timestamp=pd.Timestamp(t)), exporters=exporters)
            for t in (T0, T0.replace(minute=30))
        ],
        ignore_index=True,
    )
    prices = {H100: 4.0, MI300X: 3.0, GAUDI2: 1.5}
    settings = Settings(pricing=PriceBook(default_usd_per_gpu_hour=9.0, products=prices))
    report = build_report(analyze(window=window, state=state, gpu_samples=samples, settings=settings))
    pools = {p["pool"]: p for p in report["pools"]}
    assert {p: (r["vendor"], r["gpus"], r["usd_per_gpu_hour"]) for p, r in pools.items()} == {
        GAUDI2: ("intel", 2, 1.5),
        H100: ("nvidia", 2, 4.0),
        MI300X: ("amd", 2, 3.0),
    }
    assert pools[H100]["allocation_rate"] == 0.5 and pools[H100]["utilization"] == 0.25
    assert pools[MI300X]["allocation_rate"] == 1.0 and pools[MI300X]["utilization"] == pytest.approx(0.7)
    assert pools[GAUDI2]["allocation_rate"] == 0.5 and pools[GAUDI2]["utilization"] == 0.0
    fleet = report["fleet"]
    # The ledger sums to capacity: 6 GPU-hours, 4 allocated (1 H100 + 2 MI300X + 1 Gaudi2).
    assert fleet["capacity_gpu_hours"] == 6.0 and fleet["allocated_gpu_hours"] == 4.0
    assert sum(fleet["ledger_gpu_hours"].values()) == pytest.approx(6.0)
    assert fleet["ledger_gpu_hours"]["allocated_active"] == pytest.approx(3.0)
    assert fleet["ledger_gpu_hours"]["allocated_idle"] == pytest.approx(1.0)
    assert fleet["ledger_gpu_hours"]["unallocated"] == pytest.approx(2.0)
    # Every GPU-hour is priced at its own pool's rate: allocated 1 × 4 + 2 × 3 + 1 × 1.5, free 4 + 1.5.
    assert fleet["cost_usd"] == pytest.approx(11.5)
    assert fleet["unallocated_cost_usd"] == pytest.approx(5.5)
    teams = {t["team"]: t for t in report["teams"]}
    assert teams["llm"]["cost_usd"] == pytest.approx(1 * 4.0 + 2 * 3.0)
    assert teams["vision"]["cost_usd"] == pytest.approx(1.5) and teams["vision"][
        "waste_usd"
    ] == pytest.approx(1.5)


def test_team_quotas_count_every_vendors_gpu_resources() -> None:
    from gpuwatch.read.devicehealth import team_quotas

    fleet = build_demo_fleet(seed=42, end=T0, days=0.1)
    quotas = team_quotas(demo_service(Settings(), fleet)).set_index("team")
    running = [p for p in fleet.api_pods() if p.phase == "Running" and p.namespace == "llm-research"]
    held = {r: sum(p.gpu_requests.get(r, 0.0) for p in running) for r in ("nvidia.com/gpu", "amd.com/gpu")}
    assert held["amd.com/gpu"] > 0  # the team's MI300X jobs run under the same ResourceQuota
    assert quotas.loc["llm-research", "used_gpus"] == sum(held.values())
