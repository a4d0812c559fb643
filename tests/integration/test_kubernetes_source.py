"""KubernetesSource against the simulated API server: pagination, 410 restarts, auth, bad quantities."""

import copy
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuwatch.core.errors import ConfigError, KubernetesError
from gpuwatch.core.model import is_gpu_resource
from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.kubeapi import KubeApiServer, write_kubeconfig
from gpuwatch.sim.kubeobjects import pod_object
from gpuwatch.sources.kubernetes import KubernetesSource

pytestmark = pytest.mark.integration
TOKEN = "sim-token"


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=42, end=datetime(2026, 11, 20, tzinfo=UTC), days=1)


@pytest.fixture
def api(fleet: SimulatedFleet, tmp_path: Path) -> Iterator[tuple[KubeApiServer, str]]:
    with KubeApiServer(fleet, token=TOKEN) as server:
        path = tmp_path / "kubeconfig"
        write_kubeconfig(path, server_url=server.url, token=TOKEN, ca_pem=server.ca_pem)
        yield server, str(path)


def test_cluster_state_matches_the_fleet(fleet: SimulatedFleet, api: tuple[KubeApiServer, str]) -> None:
    server, kubeconfig = api
    state = KubernetesSource(kubeconfig=kubeconfig, page_size=3).cluster_state()
    assert {n.name for n in state.nodes} == {n.name for n in fleet.nodes}
    by_name = {n.name: n for n in state.nodes}
    for expected in fleet.nodes:
        got = by_name[expected.name]
        assert got.pool == expected.pool
        assert got.gpu_count == expected.gpu_count
        assert got.ready == expected.ready and got.unschedulable == expected.unschedulable
        # Zero-valued stale resources (nvidia.com/gpu: 0, mig-7g.80gb: 0) are ignored.
        assert got.allocatable == {r: q for r, q in expected.allocatable.items() if q > 0}
        assert got.allocatable_gpus() == pytest.approx(expected.allocatable_gpus())
    gpu_pods = {p.key: p for p in state.gpu_pods()}
    expected_pods = {
        p.key: p for p in fleet.api_pods() if p.gpu_requests and p.phase in ("Running", "Pending")
    }
    assert set(gpu_pods) == set(expected_pods)
    for key, pod in expected_pods.items():
        assert gpu_pods[key].gpu_requests == pod.gpu_requests
        assert gpu_pods[key].node == pod.node
        assert gpu_pods[key].started_at == pod.started_at
        assert gpu_pods[key].phase == pod.phase
    pending = [p for p in state.gpu_pods() if p.phase == "Pending"]
    assert {p.node_selector_product for p in pending} == {
        "NVIDIA-H100-80GB-HBM3",
        "NVIDIA-L4",
        "NVIDIA-A100-SXM4-80GB",
        "NVIDIA-B200",
    }
    # What keeps each pending pod waiting reads back as the fleet has it; the API server's default
    # not-ready/unreachable tolerations come on top, and the scheduler's words from its condition.
    for pod in pending:
        want, got = expected_pods[pod.key].placement, pod.placement
        assert want is not None and got is not None
        assert (got.node_selector, got.node_affinity, got.scheduling_gates, got.scheduler_message) == (
            want.node_selector,
            want.node_affinity,
            want.scheduling_gates,
            want.scheduler_message,
        )
        assert got.tolerations[: len(want.tolerations)] == want.tolerations
        assert {t.key for t in got.tolerations[len(want.tolerations) :]} == {
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        }
    assert all(p.placement is None for p in state.gpu_pods() if p.phase == "Running")
    for node in fleet.nodes:
        parsed = next(n for n in state.nodes if n.name == node.name)
        lifecycle = tuple(t for t in parsed.taints if t.key.startswith("node.kubernetes.io/"))
        assert parsed.taints == node.taints + lifecycle
    assert state.exporter_pod_nodes == {t.pod: t.node for t in fleet.targets}
    assert state.exporter_ip_nodes == {t.ip: t.node for t in fleet.targets}
    assert {n.name for n in state.namespaces} == {n.name for n in fleet.namespaces}
    assert state.skipped == 0 and state.warnings == ()
    # Paginated with limit=3 and filtered server-side by phase.
    lists = [path for method, path, code in server.request_log if "/api/v1/pods" in path]
    assert any("limit=3" in p and "continue=" in p for p in lists)
    assert any("fieldSelector=status.phase%3DRunning" in p for p in lists)


def test_expired_continue_token_restarts_the_list(
    fleet: SimulatedFleet, api: tuple[KubeApiServer, str]
) -> None:
    server, kubeconfig = api
    source = KubernetesSource(kubeconfig=kubeconfig, page_size=5)
    calls = {"n": 0}
    original = server.handle

    def expire_after_first_page(
        method: str, target: str, authorization: str | None, accept: str | None = None
    ) -> tuple[int, str, bytes]:
        if "/api/v1/nodes" in target and "continue=" in target and calls["n"] == 0:
            calls["n"] += 1
            server.expire_continue_tokens()
        return original(method, target, authorization, accept)

    server.handle = expire_after_first_page  # type: ignore[method-assign]
    items, restarts = source.list_raw("nodes")
    assert restarts == 1
    assert sorted(i["metadata"]["name"] for i in items) == sorted(n.name for n in fleet.nodes)
    codes = [code for _, path, code in server.request_log if "/api/v1/nodes" in path]
    assert 410 in codes


def test_malformed_gpu_quantity_is_skipped_and_counted(fleet: SimulatedFleet, tmp_path: Path) -> None:
    running = next(p for p in fleet.api_pods() if p.phase == "Running" and p.gpu_requests)
    bad = copy.deepcopy(pod_object(fleet, running))
    bad["metadata"]["name"] = "bad-quantity"
    bad["metadata"]["uid"] = "00000000-0000-0000-0000-000000000001"
    for c in bad["spec"]["containers"]:
        c["resources"] = {"limits": {"nvidia.com/gpu": "abc"}, "requests": {"nvidia.com/gpu": "abc"}}
    with KubeApiServer(fleet, token=TOKEN, extra_pods=[bad]) as server:
        path = tmp_path / "kubeconfig"
        write_kubeconfig(path, server_url=server.url, token=TOKEN, ca_pem=server.ca_pem)
        state = KubernetesSource(kubeconfig=str(path)).cluster_state()
    assert state.skipped == 1
    assert state.warnings == (
        f"pod {running.namespace}/bad-quantity: malformed quantity nvidia.com/gpu='abc' skipped",
    )
    assert "bad-quantity" not in {p.name for p in state.gpu_pods()}


def test_unauthorized_and_forbidden_are_clear(fleet: SimulatedFleet, tmp_path: Path) -> None:
    with KubeApiServer(fleet, token=TOKEN, forbidden=["nodes"]) as server:
        wrong = tmp_path / "wrong"
        write_kubeconfig(wrong, server_url=server.url, token="not-the-token", ca_pem=server.ca_pem)
        with pytest.raises(KubernetesError) as err:
            KubernetesSource(kubeconfig=str(wrong)).cluster_state()
        assert (
            str(err.value)
            == "kubernetes: unauthorized (401): the credentials in the kubeconfig were rejected"
        )
        right = tmp_path / "right"
        write_kubeconfig(right, server_url=server.url, token=TOKEN, ca_pem=server.ca_pem)
        source = KubernetesSource(kubeconfig=str(right))
        with pytest.raises(KubernetesError, match=r"forbidden \(403\): nodes is forbidden: .* cannot list"):
            source.cluster_state()
        assert source.can_list("pods") is None
        reason = source.can_list("nodes")
        assert reason is not None and "403" in reason and "\n" not in reason


def test_unreachable_server_and_bad_kubeconfig(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    write_kubeconfig(path, server_url="http://127.0.0.1:9", token=TOKEN)
    with pytest.raises(KubernetesError, match=r"^kubernetes API at http://127.0.0.1:9 unreachable"):
        KubernetesSource(kubeconfig=str(path), timeout_seconds=2).cluster_state()
    with pytest.raises(ConfigError, match="kubernetes: cannot"):
        KubernetesSource(kubeconfig=str(tmp_path / "missing")).cluster_state()
    with pytest.raises(ConfigError, match="kubernetes: cannot load"):
        KubernetesSource(kubeconfig=str(path), context="nope").cluster_state()


def test_pods_without_gpus_are_listed_and_passed_over(fleet: SimulatedFleet, tmp_path: Path) -> None:
    """A large cluster lists node agents and services beside its GPU pods: the API serves them, and the
    cluster state gpuwatch keeps is the same as without them."""
    from kubernetes import client, config

    with KubeApiServer(fleet, token=TOKEN, cpu_pods=700) as server:
        path = tmp_path / "kubeconfig"
        write_kubeconfig(path, server_url=server.url, token=TOKEN, ca_pem=server.ca_pem)
        api = client.CoreV1Api(config.new_client_from_config(str(path)))
        listed = api.list_pod_for_all_namespaces(limit=5000).items
        state = KubernetesSource(kubeconfig=str(path), page_size=250).cluster_state()
    assert len(listed) == len(fleet.api_pods()) + 700
    gpu_asks = sum(
        1 for p in listed if any(is_gpu_resource(r) for c in p.spec.containers for r in c.resources.requests)
    )
    assert len(listed) - gpu_asks == 700 + len(fleet.targets)  # and the telemetry exporters' pods
    expected = {p.key for p in fleet.api_pods() if p.gpu_requests and p.phase in ("Running", "Pending")}
    assert {p.key for p in state.gpu_pods()} == expected
    assert {p.namespace for p in state.pods} & {
        "kube-system",
        "monitoring",
        "logging",
        "web",
        "data",
    } == set()
