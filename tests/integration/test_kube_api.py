"""The simulated Kubernetes API server, driven by the official kubernetes client as gpuwatch drives it."""

import base64
import json
import os
import re
import ssl
import stat
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.fleet import EXPORTER_NAMESPACE
from gpuwatch.sim.kubeapi import (
    DEFAULT_TOKEN,
    SERVICE_ACCOUNT_USER,
    KubeApiServer,
    pod_object,
    write_kubeconfig,
)
from gpuwatch.sim.kubeobjects import KUBELET_VERSION
from gpuwatch.sim.kubetables import human_duration

pytestmark = pytest.mark.integration

CONTEXT = "gpuwatch-sim"


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=42, end=datetime(2026, 11, 20, tzinfo=UTC), days=1)


@pytest.fixture(scope="module")
def server(fleet: SimulatedFleet) -> Iterator[KubeApiServer]:
    with KubeApiServer(fleet) as srv:
        yield srv


def api_client(tmp_path: Path, server: KubeApiServer, token: str | None) -> client.ApiClient:
    """The official client from a kubeconfig holding the server's CA: TLS verified as in production."""
    path = tmp_path / f"kubeconfig-{abs(hash((server.url, token)))}"
    write_kubeconfig(path, server_url=server.url, token=token, ca_pem=server.ca_pem, context=CONTEXT)
    return config.new_client_from_config(config_file=str(path), context=CONTEXT)


@pytest.fixture
def core(tmp_path: Path, server: KubeApiServer) -> Iterator[client.CoreV1Api]:
    api = api_client(tmp_path, server, server.token)
    yield client.CoreV1Api(api)
    api.close()


def list_all(call: Callable[..., Any], *, limit: int = 3, **kwargs: Any) -> tuple[list[Any], list[Any]]:
    """Follow `_continue` tokens to the end; returns (items, list metadata of every page)."""
    items: list[Any] = []
    metas: list[Any] = []
    token = None
    while True:
        page = call(limit=limit, _continue=token, **kwargs)
        items += page.items
        metas.append(page.metadata)
        token = page.metadata.var_continue
        if not token:
            return items, metas


def raw_get(
    server: KubeApiServer,
    path: str,
    token: str | None = DEFAULT_TOKEN,
    method: str = "GET",
    accept: str | None = None,
) -> tuple[int, dict[str, Any]]:
    """One request to the server as any HTTPS client sends it, trusting the server's CA only."""
    request = urllib.request.Request(server.url + path, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    if accept is not None:
        request.add_header("Accept", accept)
    assert server.certificate is not None
    try:
        with urllib.request.urlopen(
            request, timeout=10, context=server.certificate.client_context()
        ) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def assert_status(body: dict[str, Any], code: int, reason: str) -> None:
    assert body["kind"] == "Status"
    assert body["apiVersion"] == "v1"
    assert body["status"] == "Failure"
    assert body["code"] == code
    assert body["reason"] == reason
    assert body["message"]


def fleet_pod_keys(fleet: SimulatedFleet, keep: Callable[[Any], bool] = lambda p: True) -> list[str]:
    return sorted(p.key for p in fleet.api_pods() if keep(p))


def keys(pods: list[client.V1Pod]) -> list[str]:
    return sorted(f"{p.metadata.namespace}/{p.metadata.name}" for p in pods)


# ---------------------------------------------------------------------------------------------
# The list protocol


def test_paginated_pod_list_returns_every_pod_exactly_once(
    fleet: SimulatedFleet, server: KubeApiServer, core: client.CoreV1Api
) -> None:
    items, metas = list_all(core.list_pod_for_all_namespaces, limit=3)

    names = [f"{p.metadata.namespace}/{p.metadata.name}" for p in items]
    assert len(names) == len(set(names))
    assert sorted(names) == fleet_pod_keys(fleet)
    assert len(metas) == -(-len(names) // 3)
    assert all(len(page) <= 3 for page in [items[i : i + 3] for i in range(0, len(items), 3)])
    # Every page is of one snapshot; remainingItemCount counts down to the end.
    assert {m.resource_version for m in metas} == {server.resource_version}
    remaining = [m.remaining_item_count for m in metas]
    assert remaining[:-1] == [len(names) - 3 * (i + 1) for i in range(len(metas) - 1)]
    assert remaining[-1] is None
    assert any("continue=" in target for _, target, _ in server.request_log)


def test_paginated_node_namespace_and_quota_lists(fleet: SimulatedFleet, core: client.CoreV1Api) -> None:
    nodes, node_pages = list_all(core.list_node, limit=3)
    assert sorted(n.metadata.name for n in nodes) == sorted(n.name for n in fleet.nodes)
    assert len(node_pages) == -(-len(fleet.nodes) // 3)

    namespaces, _ = list_all(core.list_namespace, limit=4)
    assert sorted(n.metadata.name for n in namespaces) == sorted(n.name for n in fleet.namespaces)
    team_of = {n.metadata.name: (n.metadata.labels or {}).get("team") for n in namespaces}
    assert team_of["llm-research"] == "llm-research"
    assert team_of["notebooks"] is None

    quotas, _ = list_all(core.list_resource_quota_for_all_namespaces, limit=5)
    assert sorted((q.metadata.namespace, q.metadata.name) for q in quotas) == sorted(
        (q.namespace, q.name) for q in fleet.quotas
    )
    by_ns = {q.metadata.namespace: q for q in quotas}
    for quota in fleet.quotas:
        got = by_ns[quota.namespace]
        assert got.spec.hard == {r: str(int(v)) for r, v in quota.hard.items()}
        assert got.status.used == {r: str(int(v)) for r, v in quota.used.items()}


def test_namespaced_pod_list_paginates_within_the_namespace(
    fleet: SimulatedFleet, core: client.CoreV1Api
) -> None:
    items, _ = list_all(core.list_namespaced_pod, limit=2, namespace="shared-inference")
    assert keys(items) == fleet_pod_keys(fleet, lambda p: p.namespace == "shared-inference")
    assert len(items) > 2


def test_field_selector_on_phase(fleet: SimulatedFleet, core: client.CoreV1Api) -> None:
    running, _ = list_all(core.list_pod_for_all_namespaces, limit=3, field_selector="status.phase=Running")
    assert keys(running) == fleet_pod_keys(fleet, lambda p: p.phase == "Running")
    assert {p.status.phase for p in running} == {"Running"}

    not_running = core.list_pod_for_all_namespaces(field_selector="status.phase!=Running").items
    assert keys(not_running) == fleet_pod_keys(fleet, lambda p: p.phase != "Running")
    assert {p.status.phase for p in not_running} == {"Pending", "Succeeded"}

    pending = core.list_pod_for_all_namespaces(field_selector="status.phase==Pending").items
    assert keys(pending) == fleet_pod_keys(fleet, lambda p: p.phase == "Pending")
    for pod in pending:
        (scheduled,) = pod.status.conditions
        gated = bool(pod.spec.scheduling_gates)  # Kueue's admission gate: the scheduler has not tried yet
        assert (scheduled.type, scheduled.status, scheduled.reason) == (
            "PodScheduled",
            "False",
            "SchedulingGated" if gated else "Unschedulable",
        )
        assert pod.spec.node_name is None
        assert pod.status.start_time is None
        selected = (pod.spec.node_selector or {}).get("nvidia.com/gpu.product")
        if selected is None:  # pinned by required node affinity instead
            (term,) = (
                pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
            )
            selected = term.match_expressions[0].values[0]
        assert selected in {p.node_selector_product for p in fleet.api_pods() if p.phase == "Pending"}
    assert sum(bool(p.spec.scheduling_gates) for p in pending) == 1


def test_field_selector_on_node_name_and_conjunctions(fleet: SimulatedFleet, core: client.CoreV1Api) -> None:
    node = "gpu-a100-mig-000"
    on_node, _ = list_all(core.list_pod_for_all_namespaces, limit=3, field_selector=f"spec.nodeName={node}")
    assert keys(on_node) == fleet_pod_keys(fleet, lambda p: p.node == node)
    assert len(on_node) > 3

    running_elsewhere = core.list_pod_for_all_namespaces(
        field_selector=f"spec.nodeName!={node},status.phase=Running"
    ).items
    assert keys(running_elsewhere) == fleet_pod_keys(fleet, lambda p: p.node != node and p.phase == "Running")

    # An empty nodeName selects the pods the scheduler has not placed (what kubectl does).
    unscheduled = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=").items
    assert keys(unscheduled) == fleet_pod_keys(fleet, lambda p: p.node is None)

    exporter = core.list_namespaced_pod(EXPORTER_NAMESPACE, field_selector=f"spec.nodeName={node}").items
    (target,) = [t for t in fleet.targets if t.node == node]
    assert [p.metadata.name for p in exporter] == [target.pod]
    assert exporter[0].status.pod_ip == target.ip

    by_name = core.list_node(field_selector="metadata.name=gpu-l4-001").items
    assert [n.metadata.name for n in by_name] == ["gpu-l4-001"]
    cordoned = core.list_node(field_selector="spec.unschedulable=true").items
    assert [n.metadata.name for n in cordoned] == [n.name for n in fleet.nodes if n.unschedulable]


def test_unsupported_field_selector_is_a_400_status(server: KubeApiServer, core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.list_pod_for_all_namespaces(field_selector="spec.containers.image=foo")
    assert err.value.status == 400
    body = json.loads(err.value.body)
    assert_status(body, 400, "BadRequest")
    assert body["message"] == "field label not supported: spec.containers.image"

    with pytest.raises(ApiException) as err:
        core.list_node(field_selector="status.phase=Running")
    assert err.value.status == 400


def test_label_selectors(fleet: SimulatedFleet, core: client.CoreV1Api) -> None:
    exporters = core.list_pod_for_all_namespaces(label_selector="app=nvidia-dcgm-exporter").items
    assert sorted(p.metadata.name for p in exporters) == sorted(
        t.pod for t in fleet.targets if t.vendor == "nvidia"
    )
    amd = core.list_pod_for_all_namespaces(label_selector="app=default-metrics-exporter").items
    assert sorted(p.metadata.name for p in amd) == sorted(t.pod for t in fleet.targets if t.vendor == "amd")

    teams = core.list_pod_for_all_namespaces(label_selector="team in (search,ads)").items
    assert keys(teams) == fleet_pod_keys(fleet, lambda p: p.labels.get("team") in {"search", "ads"})
    assert teams

    no_team = core.list_pod_for_all_namespaces(label_selector="!team,app!=nvidia-dcgm-exporter").items
    expected = fleet_pod_keys(
        fleet, lambda p: "team" not in p.labels and p.labels.get("app") != "nvidia-dcgm-exporter"
    )
    assert keys(no_team) == expected

    mig_nodes = core.list_node(label_selector="nvidia.com/mig.strategy=mixed").items
    assert sorted(n.metadata.name for n in mig_nodes) == sorted(
        n.name for n in fleet.nodes if n.mig_strategy == "mixed"
    )


def test_stale_continue_token_answers_410_expired(fleet: SimulatedFleet, tmp_path: Path) -> None:
    with KubeApiServer(fleet) as srv:
        api = api_client(tmp_path, srv, srv.token)
        core = client.CoreV1Api(api)
        first = core.list_pod_for_all_namespaces(limit=3)
        assert first.metadata.var_continue
        old_rv = first.metadata.resource_version

        srv.expire_continue_tokens()

        with pytest.raises(ApiException) as err:
            core.list_pod_for_all_namespaces(limit=3, _continue=first.metadata.var_continue)
        assert err.value.status == 410
        body = json.loads(err.value.body)
        assert_status(body, 410, "Expired")
        assert body["metadata"]["continue"]  # the inconsistent-continuation token a real server offers
        assert srv.request_log[-1][2] == 410

        # Restarting the list from scratch works and sees a newer resourceVersion.
        items, metas = list_all(core.list_pod_for_all_namespaces, limit=3)
        assert keys(items) == fleet_pod_keys(fleet)
        assert int(metas[0].resource_version) > int(old_rv)
        api.close()


def test_continue_tokens_expire_after_their_ttl(fleet: SimulatedFleet, tmp_path: Path) -> None:
    now = [1000.0]
    with KubeApiServer(fleet, continue_ttl_seconds=300, clock=lambda: now[0]) as srv:
        api = api_client(tmp_path, srv, srv.token)
        core = client.CoreV1Api(api)
        page = core.list_node(limit=5)
        now[0] += 299
        fresh = core.list_node(limit=5, _continue=page.metadata.var_continue)
        assert len(fresh.items) == 5
        now[0] += 302
        with pytest.raises(ApiException) as err:
            core.list_node(limit=5, _continue=fresh.metadata.var_continue)
        assert err.value.status == 410
        assert json.loads(err.value.body)["reason"] == "Expired"
        api.close()


def test_malformed_continue_token_and_limit_are_400(server: KubeApiServer) -> None:
    code, body = raw_get(server, "/api/v1/pods?limit=3&continue=not-a-token")
    assert code == 400
    assert_status(body, 400, "BadRequest")
    code, body = raw_get(server, "/api/v1/pods?limit=three")
    assert code == 400
    assert_status(body, 400, "BadRequest")
    # A token only continues the list it was issued for.
    _, first = raw_get(server, "/api/v1/pods?limit=3")
    code, body = raw_get(server, f"/api/v1/nodes?limit=3&continue={first['metadata']['continue']}")
    assert code == 400


# ---------------------------------------------------------------------------------------------
# Authentication and authorization


def test_missing_or_wrong_token_is_401(tmp_path: Path, server: KubeApiServer) -> None:
    for token in (None, "not-the-token"):
        api = api_client(tmp_path, server, token)
        with pytest.raises(ApiException) as err:
            client.CoreV1Api(api).list_pod_for_all_namespaces(limit=3)
        assert err.value.status == 401
        assert_status(json.loads(err.value.body), 401, "Unauthorized")
        api.close()
    code, body = raw_get(server, "/api/v1/nodes", token=None)
    assert code == 401
    assert_status(body, 401, "Unauthorized")
    # Anonymous callers may read /version (system:public-info-viewer); a bad token may not.
    assert raw_get(server, "/version", token=None)[0] == 200
    assert raw_get(server, "/version", token="bad")[0] == 401


def test_server_without_token_accepts_anonymous(fleet: SimulatedFleet, tmp_path: Path) -> None:
    with KubeApiServer(fleet, token=None) as srv:
        api = api_client(tmp_path, srv, None)
        nodes = client.CoreV1Api(api).list_node().items
        assert len(nodes) == len(fleet.nodes)
        api.close()


def test_forbidden_resource_is_403_with_the_real_message(fleet: SimulatedFleet, tmp_path: Path) -> None:
    with KubeApiServer(fleet, forbidden={"nodes", "resourcequotas"}) as srv:
        api = api_client(tmp_path, srv, srv.token)
        core = client.CoreV1Api(api)
        with pytest.raises(ApiException) as err:
            core.list_node(limit=3)
        assert err.value.status == 403
        body = json.loads(err.value.body)
        assert_status(body, 403, "Forbidden")
        assert body["message"] == (
            f'nodes is forbidden: User "{SERVICE_ACCOUNT_USER}" cannot list resource "nodes" '
            'in API group "" at the cluster scope'
        )
        assert body["details"] == {"kind": "nodes"}

        with pytest.raises(ApiException) as err:
            core.list_namespaced_resource_quota("vision")
        assert err.value.status == 403
        assert json.loads(err.value.body)["message"].endswith('in API group "" in the namespace "vision"')

        with pytest.raises(ApiException) as err:
            core.read_node("gpu-l4-000")
        assert json.loads(err.value.body)["message"].startswith('nodes "gpu-l4-000" is forbidden: ')

        # Other resources stay readable.
        assert len(core.list_pod_for_all_namespaces().items) == len(fleet.api_pods())
        api.close()


# ---------------------------------------------------------------------------------------------
# Object content


def test_gpu_resources_and_gfd_labels_round_trip(fleet: SimulatedFleet, core: client.CoreV1Api) -> None:
    nodes = {n.metadata.name: n for n in core.list_node().items}
    for node in fleet.nodes:
        got = nodes[node.name]
        for key, value in node.labels.items():
            assert got.metadata.labels[key] == value
        for resource, qty in node.capacity.items():
            assert got.status.capacity[resource] == str(int(qty))
        for resource, qty in node.allocatable.items():
            assert got.status.allocatable[resource] == str(int(qty))
        assert {"cpu", "memory", "pods"} <= set(got.status.allocatable)
        assert got.status.node_info.kubelet_version.startswith("v1.")
        assert [a.type for a in got.status.addresses] == ["InternalIP", "Hostname"]

    mig = nodes["gpu-a100-mig-000"]
    assert mig.metadata.labels["nvidia.com/mig.strategy"] == "mixed"
    assert mig.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert mig.status.allocatable["nvidia.com/mig-1g.10gb"] == "16"
    assert mig.status.allocatable["nvidia.com/mig-3g.40gb"] == "8"
    assert mig.status.allocatable["nvidia.com/mig-7g.80gb"] == "0"  # stale zero-valued resource
    assert mig.status.capacity["nvidia.com/gpu"] == "0"

    shared = nodes["gpu-t4-001"]
    assert shared.status.allocatable["nvidia.com/gpu.shared"] == "16"
    assert shared.status.allocatable["nvidia.com/gpu"] == "0"
    assert shared.metadata.labels["nvidia.com/gpu.replicas"] == "4"
    assert shared.metadata.labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert nodes["gpu-t4-000"].metadata.labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"

    hidden = nodes["gpu-h100-002"]
    assert (hidden.status.capacity["nvidia.com/gpu"], hidden.status.allocatable["nvidia.com/gpu"]) == (
        "8",
        "7",
    )

    cordoned = nodes["gpu-h100-003"]
    assert cordoned.spec.unschedulable is True
    # Every GPU node's taint, the H100s' reservation, and the cordon the node controller adds.
    assert [(t.key, t.value, t.effect) for t in cordoned.spec.taints] == [
        ("nvidia.com/gpu", "present", "NoSchedule"),
        ("dedicated", "llm-training", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", None, "NoSchedule"),
    ]
    assert nodes["gpu-h100-000"].spec.unschedulable is None

    def ready(name: str) -> str:
        return next(c.status for c in nodes[name].status.conditions if c.type == "Ready")

    assert ready("gpu-a100-001") == "False"
    assert ready("gpu-a100-000") == "True"
    assert {n.name for n in fleet.nodes if not n.ready} == {"gpu-a100-001"}

    pods = {f"{p.metadata.namespace}/{p.metadata.name}": p for p in core.list_pod_for_all_namespaces().items}
    for pod in fleet.api_pods():
        got = pods[pod.key]
        assert got.metadata.uid == pod.uid
        assert got.status.phase == pod.phase
        assert got.spec.node_name == pod.node
        assert got.metadata.labels == dict(pod.labels)
        (container,) = got.spec.containers
        assert container.name == pod.container
        for resource, qty in pod.gpu_requests.items():
            assert container.resources.limits[resource] == str(int(qty))
            assert container.resources.requests[resource] == str(int(qty))
        if pod.phase == "Running":
            assert got.status.start_time == pod.started_at.replace(microsecond=0)
            assert got.status.container_statuses[0].state.running is not None
        if pod.phase == "Succeeded":
            assert got.status.container_statuses[0].state.terminated.exit_code == 0
    mig_pods = [
        p for p in pods.values() if "nvidia.com/mig-1g.10gb" in (p.spec.containers[0].resources.limits or {})
    ]
    assert mig_pods
    for target in fleet.targets:
        assert pods[f"{EXPORTER_NAMESPACE}/{target.pod}"].status.pod_ip == target.ip


def test_single_gets_and_not_found(fleet: SimulatedFleet, core: client.CoreV1Api) -> None:
    node = core.read_node("gpu-t4-001")
    assert (node.kind, node.api_version, node.metadata.name) == ("Node", "v1", "gpu-t4-001")
    namespace = core.read_namespace("genai-apps")
    assert namespace.metadata.labels["team"] == "genai"
    assert namespace.status.phase == "Active"
    target = fleet.targets[0]
    pod = core.read_namespaced_pod(target.pod, EXPORTER_NAMESPACE)
    assert (pod.kind, pod.status.pod_ip, pod.spec.node_name) == ("Pod", target.ip, target.node)
    quota = fleet.quotas[0]
    got = core.read_namespaced_resource_quota(quota.name, quota.namespace)
    assert got.status.hard == got.spec.hard

    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("no-such-pod", "vision")
    assert err.value.status == 404
    body = json.loads(err.value.body)
    assert_status(body, 404, "NotFound")
    assert body["message"] == 'pods "no-such-pod" not found'
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod(target.pod, "vision")  # right name, wrong namespace
    assert err.value.status == 404


def test_version_and_discovery(server: KubeApiServer, tmp_path: Path) -> None:
    api = api_client(tmp_path, server, server.token)
    info = client.VersionApi(api).get_code()
    assert (info.major, info.platform) == ("1", "linux/amd64")
    assert info.git_version.startswith("v1.")
    versions = client.CoreApi(api).get_api_versions()
    assert versions.versions == ["v1"]
    resources = client.CoreV1Api(api).get_api_resources()
    assert {r.name: r.namespaced for r in resources.resources} == {
        "pods": True,
        "nodes": False,
        "namespaces": False,
        "resourcequotas": True,
    }
    api.close()


def test_unknown_paths_and_writes_are_status_errors(server: KubeApiServer) -> None:
    for path in ("/api/v1/secrets", "/api/v1/pods/some-pod", "/apis/apps/v1/deployments", "/nope"):
        code, body = raw_get(server, path)
        assert code == 404, path
        assert_status(body, 404, "NotFound")
    code, body = raw_get(server, "/api/v1/namespaces/vision/pods/x", method="DELETE")
    assert code == 405
    assert_status(body, 405, "MethodNotAllowed")
    assert ("DELETE", "/api/v1/namespaces/vision/pods/x", 405) in server.request_log


def test_load_kube_config_with_explicit_configuration(server: KubeApiServer, tmp_path: Path) -> None:
    path = tmp_path / "config"
    server.write_kubeconfig(path, context="sim", namespace="vision")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    doc = yaml.safe_load(path.read_text())
    assert doc["current-context"] == "sim"
    assert doc["contexts"][0]["context"] == {"cluster": "sim", "user": "sim", "namespace": "vision"}

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(path), context="sim", client_configuration=configuration)
    assert configuration.host == server.url
    with client.ApiClient(configuration) as api:
        pods = client.CoreV1Api(api).list_namespaced_pod("vision").items
    assert pods
    assert {p.metadata.namespace for p in pods} == {"vision"}


def test_server_stops_on_close(fleet: SimulatedFleet, tmp_path: Path) -> None:
    srv = KubeApiServer(fleet).start()
    url = srv.url
    api = api_client(tmp_path, srv, srv.token)
    core = client.CoreV1Api(api)
    assert core.list_node(_request_timeout=5).items  # leaves a kept-alive connection in the pool
    srv.close()
    srv.close()  # idempotent
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{url}/version", timeout=5)
    with pytest.raises(urllib3.exceptions.HTTPError):  # the pooled connection is cut, new ones refused
        core.list_node(_request_timeout=5)
    api.close()


def test_extra_pods_are_served_as_is(fleet: SimulatedFleet, tmp_path: Path) -> None:
    base = fleet.api_pods()[0]
    bad = pod_object(fleet, base)
    bad["metadata"] = dict(bad["metadata"], name="bad-quantity", uid="00000000-0000-0000-0000-00000000abcd")
    bad["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": "abc"},
        "requests": {"nvidia.com/gpu": "abc"},
    }
    with KubeApiServer(fleet, extra_pods=[bad]) as srv:
        code, body = raw_get(srv, "/api/v1/pods")
        assert code == 200
        assert len(body["items"]) == len(fleet.api_pods()) + 1
        served = body["items"][-1]
        assert served["metadata"]["name"] == "bad-quantity"
        assert served["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "abc"}

        code, one = raw_get(srv, f"/api/v1/namespaces/{base.namespace}/pods/bad-quantity")
        assert code == 200
        assert one["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "abc"

        # The official client passes the malformed quantity through as the string it is.
        api = api_client(tmp_path, srv, srv.token)
        pods = client.CoreV1Api(api).list_namespaced_pod(
            base.namespace, field_selector="metadata.name=bad-quantity"
        )
        (pod,) = pods.items
        assert pod.spec.containers[0].resources.limits == {"nvidia.com/gpu": "abc"}
        api.close()


def test_list_items_are_strict_models_with_required_fields(core: client.CoreV1Api) -> None:
    pods = core.list_pod_for_all_namespaces()
    assert isinstance(pods, client.V1PodList)
    assert pods.kind == "PodList"
    for pod in pods.items:
        assert isinstance(pod, client.V1Pod)
        assert pod.metadata.resource_version and pod.metadata.creation_timestamp.tzinfo is not None
        assert int(pod.metadata.resource_version) < int(pods.metadata.resource_version)
    assert isinstance(core.list_node(), client.V1NodeList)
    assert isinstance(core.list_namespace(), client.V1NamespaceList)
    assert isinstance(core.list_resource_quota_for_all_namespaces(), client.V1ResourceQuotaList)


# ---------------------------------------------------------------------------------------------
# TLS, and the Table form kubectl asks for

KUBECTL_ACCEPT = (  # what `kubectl get` sends (1.20 and 1.32 alike)
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,"
    "application/json"
)


def test_tls_is_verified_against_the_generated_ca(server: KubeApiServer, tmp_path: Path) -> None:
    assert server.url.startswith("https://")
    assert server.certificate is not None
    # The certificate names localhost as well as 127.0.0.1; it verifies against the CA and nothing else.
    localhost = server.url.replace("127.0.0.1", "localhost")
    with urllib.request.urlopen(
        f"{localhost}/version", timeout=10, context=server.certificate.client_context()
    ) as response:
        assert json.loads(response.read())["major"] == "1"
    with pytest.raises(urllib.error.URLError) as err:
        urllib.request.urlopen(f"{server.url}/version", timeout=10, context=ssl.create_default_context())
    assert isinstance(err.value.reason, ssl.SSLCertVerificationError)
    # So does the official client when the kubeconfig carries no CA.
    configuration = client.Configuration()
    configuration.host = server.url
    with client.ApiClient(configuration) as api, pytest.raises(urllib3.exceptions.MaxRetryError) as failed:
        client.VersionApi(api).get_code(_request_timeout=5)
    assert isinstance(failed.value.reason, urllib3.exceptions.SSLError)
    server.write_kubeconfig(tmp_path / "kubeconfig")
    doc = yaml.safe_load((tmp_path / "kubeconfig").read_text())
    assert base64.b64decode(doc["clusters"][0]["cluster"]["certificate-authority-data"]) == server.ca_pem
    assert "insecure-skip-tls-verify" not in doc["clusters"][0]["cluster"]


def test_node_table_has_the_real_columns_and_status(fleet: SimulatedFleet, server: KubeApiServer) -> None:
    code, body = raw_get(server, "/api/v1/nodes", accept=KUBECTL_ACCEPT)
    assert code == 200
    assert (body["kind"], body["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    assert [(c["name"], c["priority"]) for c in body["columnDefinitions"]] == [
        ("Name", 0),
        ("Status", 0),
        ("Roles", 0),
        ("Age", 0),
        ("Version", 0),
        ("Internal-IP", 1),
        ("External-IP", 1),
        ("OS-Image", 1),
        ("Kernel-Version", 1),
        ("Container-Runtime", 1),
    ]
    rows = {row["cells"][0]: row for row in body["rows"]}
    assert rows.keys() == {n.name for n in fleet.nodes}
    for node in fleet.nodes:
        _, status, roles, age, version, *_ = rows[node.name]["cells"]
        assert status == ("Ready" if node.ready else "NotReady") + (
            ",SchedulingDisabled" if node.unschedulable else ""
        )
        assert (roles, version) == ("<none>", KUBELET_VERSION)
        assert re.fullmatch(r"\d+d", age), age
        obj = rows[node.name]["object"]
        assert (obj["kind"], obj["apiVersion"]) == ("PartialObjectMetadata", "meta.k8s.io/v1")
        assert obj["metadata"]["name"] == node.name
        assert "spec" not in obj and "status" not in obj
    assert {"NotReady", "Ready,SchedulingDisabled"} <= {r["cells"][1] for r in body["rows"]}


def test_pod_table_cells_follow_the_pods(fleet: SimulatedFleet, server: KubeApiServer) -> None:
    code, body = raw_get(server, "/api/v1/pods", accept=KUBECTL_ACCEPT)
    assert code == 200
    assert [c["name"] for c in body["columnDefinitions"]] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
        "IP",
        "Node",
        "Nominated Node",
        "Readiness Gates",
    ]
    assert [c["priority"] for c in body["columnDefinitions"]] == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    rows = {(r["object"]["metadata"]["namespace"], r["cells"][0]): r["cells"] for r in body["rows"]}
    pods = {(p.namespace, p.name): p for p in fleet.api_pods()}
    assert rows.keys() == pods.keys()
    status = {"Running": "Running", "Pending": "Pending", "Succeeded": "Completed", "Failed": "Error"}
    for key, pod in pods.items():
        _, ready, shown, restarts, _, ip, node, nominated, gates = rows[key]
        assert shown == status[pod.phase], key
        assert node == (pod.node or "<none>"), key
        running_ready = pod.phase == "Running" and fleet.node(pod.node or "").ready
        assert ready == ("1/1" if running_ready else "0/1"), key
        assert (ip == "<none>") == (pod.node is None), key
        assert (restarts, nominated, gates) == ("0", "<none>", "<none>")
    assert {"Running", "Pending", "Completed"} <= {cells[2] for cells in rows.values()}


def test_table_pages_with_limit_and_continue(fleet: SimulatedFleet, server: KubeApiServer) -> None:
    names: list[str] = []
    path, pages = "/api/v1/pods?limit=5", 0
    while True:
        code, body = raw_get(server, path, accept=KUBECTL_ACCEPT)
        assert code == 200 and body["kind"] == "Table"
        assert body["metadata"]["resourceVersion"]
        assert len(body["rows"]) <= 5
        names += [r["cells"][0] for r in body["rows"]]
        pages += 1
        if not body["metadata"].get("continue"):
            break
        assert body["metadata"]["remainingItemCount"] == len(fleet.api_pods()) - len(names)
        path = f"/api/v1/pods?limit=5&continue={body['metadata']['continue']}"
    assert sorted(names) == sorted(p.name for p in fleet.api_pods())
    assert pages == -(-len(fleet.api_pods()) // 5)


def test_table_versions_and_negotiation(fleet: SimulatedFleet, server: KubeApiServer) -> None:
    old = "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
    code, body = raw_get(server, "/api/v1/namespaces", accept=old)
    assert (code, body["kind"], body["apiVersion"]) == (200, "Table", "meta.k8s.io/v1beta1")
    assert body["rows"][0]["object"]["apiVersion"] == "meta.k8s.io/v1beta1"
    assert [c["name"] for c in body["columnDefinitions"]] == ["Name", "Status", "Age"]
    assert {r["cells"][1] for r in body["rows"]} == {"Active"}
    # The client's order decides: plain JSON first is the plain list, as the official client asks.
    for accept in (None, "application/json", "application/json,application/json;as=Table;g=meta.k8s.io"):
        _, plain = raw_get(server, "/api/v1/namespaces", accept=accept)
        assert plain["kind"] == "NamespaceList", accept
    # Discovery has no Table form: kubectl's Accept header gets the plain document.
    assert raw_get(server, "/api/v1", accept=KUBECTL_ACCEPT)[1]["kind"] == "APIResourceList"
    # Errors stay Status objects.
    code, body = raw_get(server, "/api/v1/nodes", token="bad", accept=KUBECTL_ACCEPT)
    assert code == 401
    assert_status(body, 401, "Unauthorized")


def test_table_objects_as_include_object_asks(fleet: SimulatedFleet, server: KubeApiServer) -> None:
    node = fleet.nodes[0].name
    _, whole = raw_get(server, "/api/v1/nodes?includeObject=Object", accept=KUBECTL_ACCEPT)
    assert whole["rows"][0]["object"]["kind"] == "Node"
    assert "allocatable" in whole["rows"][0]["object"]["status"]
    _, bare = raw_get(server, "/api/v1/nodes?includeObject=None", accept=KUBECTL_ACCEPT)
    assert "object" not in bare["rows"][0]
    code, body = raw_get(server, "/api/v1/nodes?includeObject=All", accept=KUBECTL_ACCEPT)
    assert code == 400
    assert_status(body, 400, "BadRequest")
    # One object (kubectl get node NAME) is a Table of one row.
    _, one = raw_get(server, f"/api/v1/nodes/{node}", accept=KUBECTL_ACCEPT)
    assert one["kind"] == "Table"
    assert [r["cells"][0] for r in one["rows"]] == [node]


def test_quota_table_splits_requests_and_limits(fleet: SimulatedFleet, server: KubeApiServer) -> None:
    _, body = raw_get(server, "/api/v1/resourcequotas", accept=KUBECTL_ACCEPT)
    assert [c["name"] for c in body["columnDefinitions"]] == ["Name", "Age", "Request", "Limit"]
    _, plain = raw_get(server, "/api/v1/resourcequotas")
    assert len(body["rows"]) == len(plain["items"]) > 0
    for row, quota in zip(body["rows"], plain["items"], strict=True):
        hard, used = quota["spec"]["hard"], quota["status"]["used"]
        expected = ", ".join(f"{k}: {used[k]}/{hard[k]}" for k in sorted(hard) if not k.startswith("limits."))
        assert row["cells"][2] == expected
        assert row["cells"][3] == ", ".join(
            f"{k}: {used[k]}/{hard[k]}" for k in sorted(hard) if k.startswith("limits.")
        )


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-5, "<invalid>"),
        (45, "45s"),
        (119, "119s"),
        (310, "5m10s"),
        (600, "10m"),
        (4 * 3600 + 60, "4h1m"),
        (30 * 3600, "30h"),
        (5 * 86400 + 7200, "5d2h"),
        (63 * 86400, "63d"),
        (800 * 86400, "2y70d"),
    ],
)
def test_ages_read_as_the_api_server_prints_them(seconds: int, shown: str) -> None:
    assert human_duration(seconds) == shown
