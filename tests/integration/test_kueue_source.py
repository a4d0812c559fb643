"""Kueue's kueue.x-k8s.io objects from the simulated API server: the official client's paginated lists,
gets and discovery, gpuwatch's KubernetesSource, kubectl, RBAC, and a cluster without Kueue."""

import functools
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

import gpuwatch.surfaces.check
from gpuwatch.cli import main
from gpuwatch.core.config import KubernetesSettings, PrometheusSettings, Settings
from gpuwatch.core.errors import KubernetesError
from gpuwatch.core.model import KueueState
from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.demoservice import demo_settings
from gpuwatch.sim.kubeapi import KubeApiServer, write_kubeconfig
from gpuwatch.sim.kueueobjects import kueue_objects
from gpuwatch.sources.kubernetes import KubernetesSource
from gpuwatch.sources.kueue import kueue_state, state_from_raw
from gpuwatch.surfaces.check import check
from tests.integration.prom import PrometheusFactory
from tests.integration.test_kubectl import KUBECTLS, kubectl, tables

pytestmark = pytest.mark.integration

TOKEN = "kueue-token"
GROUP = "kueue.x-k8s.io"
END = datetime(2026, 11, 20, tzinfo=UTC)
NOT_INSTALLED = "Kueue not installed: queues and quota waits not shown"


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=42, end=END, days=1)


@pytest.fixture(scope="module")
def expected(fleet: SimulatedFleet) -> dict[str, list[dict[str, Any]]]:
    return kueue_objects(fleet)


@pytest.fixture(scope="module")
def server(fleet: SimulatedFleet) -> Iterator[KubeApiServer]:
    with KubeApiServer(fleet, token=TOKEN) as srv:
        yield srv


def kubeconfig_of(server: KubeApiServer, path: Path) -> str:
    write_kubeconfig(path, server_url=server.url, token=server.token, ca_pem=server.ca_pem)
    return str(path)


@pytest.fixture
def custom(server: KubeApiServer, tmp_path: Path) -> Iterator[client.CustomObjectsApi]:
    api = config.new_client_from_config(config_file=kubeconfig_of(server, tmp_path / "kubeconfig"))
    yield client.CustomObjectsApi(api)
    api.close()


def names(items: list[dict[str, Any]]) -> list[str]:
    return [f"{i['metadata'].get('namespace', '')}/{i['metadata']['name']}" for i in items]


def test_the_official_client_pages_through_every_kueue_collection(
    server: KubeApiServer, custom: client.CustomObjectsApi, expected: dict[str, list[dict[str, Any]]]
) -> None:
    counts = {plural: len(items) for plural, items in expected.items()}
    assert counts == {
        "resourceflavors": 7,
        "cohorts": 2,
        "clusterqueues": 8,
        "localqueues": 8,
        "workloads": 25,
    }
    pages = {}
    for plural, objects in expected.items():
        mark = len(server.request_log)
        items: list[dict[str, Any]] = []
        token = None
        while True:
            page = custom.list_cluster_custom_object(GROUP, "v1beta2", plural, limit=3, _continue=token)
            assert page["kind"] == f"{objects[0]['kind']}List" and page["apiVersion"] == f"{GROUP}/v1beta2"
            assert len(page["items"]) <= 3
            items += page["items"]
            token = page["metadata"].get("continue")
            if not token:
                break
        # Every object exactly once, as the server holds it.
        assert sorted(names(items)) == sorted(names(objects)) and len(set(names(items))) == len(items)
        assert items == objects
        requests = [(t, code) for _, t, code in server.request_log[mark:]]
        assert all(t.startswith(f"/apis/{GROUP}/v1beta2/{plural}?") and code == 200 for t, code in requests)
        assert len(requests) == -(-len(objects) // 3)
        assert sum("continue=" in t for t, _ in requests) == len(requests) - 1
        pages[plural] = len(requests)
    assert pages == {"resourceflavors": 3, "cohorts": 1, "clusterqueues": 3, "localqueues": 3, "workloads": 9}


def test_namespaced_lists_gets_and_v1beta1(
    custom: client.CustomObjectsApi, expected: dict[str, list[dict[str, Any]]]
) -> None:
    search = custom.list_namespaced_custom_object(GROUP, "v1beta2", "search", "workloads", limit=2)
    assert all(w["metadata"]["namespace"] == "search" for w in search["items"])
    assert search["metadata"]["remainingItemCount"] == sum(
        1 for w in expected["workloads"] if w["metadata"]["namespace"] == "search"
    ) - len(search["items"])
    rerank = next(w for w in expected["workloads"] if w["metadata"]["name"].startswith("pod-rerank-batch-0-"))
    got = custom.get_namespaced_custom_object(
        GROUP, "v1beta2", "search", "workloads", rerank["metadata"]["name"]
    )
    assert got == rerank
    (reserved,) = [c for c in got["status"]["conditions"] if c["type"] == "QuotaReserved"]
    assert (reserved["status"], reserved["reason"]) == ("False", "Pending")
    assert reserved["message"] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor l4, "
        "2 more needed"
    )
    genai = custom.get_cluster_custom_object(GROUP, "v1beta2", "clusterqueues", "genai")
    assert genai["spec"]["cohortName"] == "research"
    old = custom.get_cluster_custom_object(GROUP, "v1beta1", "clusterqueues", "genai")
    assert old["apiVersion"] == f"{GROUP}/v1beta1" and old["spec"]["cohort"] == "research"
    assert "cohortName" not in old["spec"]
    with pytest.raises(ApiException) as e:
        custom.get_cluster_custom_object(GROUP, "v1beta2", "clusterqueues", "nope")
    assert e.value.status == 404
    assert json.loads(e.value.body)["message"] == 'clusterqueues.kueue.x-k8s.io "nope" not found'


def test_discovery_announces_kueue(server: KubeApiServer, tmp_path: Path) -> None:
    api = config.new_client_from_config(config_file=kubeconfig_of(server, tmp_path / "kubeconfig"))
    groups = client.ApisApi(api).get_api_versions()
    (kueue,) = [g for g in groups.groups if g.name == GROUP]
    assert [v.version for v in kueue.versions] == ["v1beta2", "v1beta1"]
    assert kueue.preferred_version.group_version == f"{GROUP}/v1beta2"
    resources = client.CustomObjectsApi(api).get_api_resources(GROUP, "v1beta2")
    assert {r.name: (r.kind, r.namespaced) for r in resources.resources} == {
        "resourceflavors": ("ResourceFlavor", False),
        "cohorts": ("Cohort", False),
        "clusterqueues": ("ClusterQueue", False),
        "localqueues": ("LocalQueue", True),
        "workloads": ("Workload", True),
    }
    api.close()


def test_the_kueue_source_reads_the_same_state_over_small_pages(
    server: KubeApiServer, tmp_path: Path, expected: dict[str, list[dict[str, Any]]]
) -> None:
    source = KubernetesSource(kubeconfig=kubeconfig_of(server, tmp_path / "kubeconfig"), page_size=2)
    mark = len(server.request_log)
    state = kueue_state(source)
    assert state == state_from_raw(expected, version="v1beta2")
    assert state.installed and state.version == "v1beta2" and state.skipped == 0
    assert (len(state.cluster_queues), len(state.local_queues), len(state.workloads)) == (8, 8, 25)
    listed = [t for _, t, _ in server.request_log[mark:]]
    assert sum(t.startswith(f"/apis/{GROUP}/v1beta2/workloads?limit=2") for t in listed) == 13  # 25 by 2
    assert all("limit=2" in t for t in listed)


def test_a_kueue_list_restarts_after_410(fleet: SimulatedFleet, tmp_path: Path) -> None:
    with KubeApiServer(fleet, token=TOKEN) as srv:
        source = KubernetesSource(kubeconfig=kubeconfig_of(srv, tmp_path / "kubeconfig"), page_size=5)
        original = srv.handle
        expired = []

        def expire_once(
            method: str, target: str, authorization: str | None, accept: str | None = None
        ) -> Any:
            if "/workloads?" in target and "continue=" in target and not expired:
                expired.append(target)
                srv.expire_continue_tokens()
            return original(method, target, authorization, accept)

        srv.handle = expire_once  # type: ignore[method-assign]
        state = kueue_state(source)
        assert state.list_restarts == 1 and len(state.workloads) == 25
        assert sorted(w.key for w in state.workloads) == sorted(
            f"{w['metadata']['namespace']}/{w['metadata']['name']}" for w in kueue_objects(fleet)["workloads"]
        )
        assert any(code == 410 and "/workloads?" in t for _, t, code in srv.request_log)


def test_an_older_kueue_serving_v1beta1_only_is_read(fleet: SimulatedFleet, tmp_path: Path) -> None:
    with KubeApiServer(fleet, token=TOKEN, kueue_versions=("v1beta1",)) as srv:
        state = kueue_state(KubernetesSource(kubeconfig=kubeconfig_of(srv, tmp_path / "kubeconfig")))
        codes = [(t.split("?")[0], code) for _, t, code in srv.request_log]
    assert state.version == "v1beta1"
    assert codes[:2] == [
        (f"/apis/{GROUP}/v1beta2/clusterqueues", 404),
        (f"/apis/{GROUP}/v1beta1/clusterqueues", 200),
    ]
    assert {cq.name: cq.cohort for cq in state.cluster_queues} == {
        "batch": "",
        "bio-ml": "research",
        "genai": "research",
        "llm-research": "research",
        "robotics": "research",
        "search": "serving",
        "speech": "serving",
        "vision": "research",
    }


def test_a_403_on_kueue_is_one_line_naming_the_rbac(fleet: SimulatedFleet, tmp_path: Path) -> None:
    with KubeApiServer(fleet, token=TOKEN, forbidden=["workloads"]) as srv:
        source = KubernetesSource(kubeconfig=kubeconfig_of(srv, tmp_path / "kubeconfig"))
        with pytest.raises(KubernetesError) as e:
            kueue_state(source)
    assert str(e.value) == (
        "kubernetes: forbidden (403): workloads.kueue.x-k8s.io is forbidden: User "
        '"system:serviceaccount:monitoring:gpuwatch" cannot list resource "workloads" in API group '
        '"kueue.x-k8s.io" at the cluster scope; gpuwatch needs get/list/watch on clusterqueues, localqueues, '
        'workloads, resourceflavors and cohorts in API group "kueue.x-k8s.io"'
    )
    assert "\n" not in str(e.value)


def raw_get(server: KubeApiServer, path: str) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(server.url + path)
    request.add_header("Authorization", f"Bearer {server.token}")
    assert server.certificate is not None
    try:
        with urllib.request.urlopen(request, timeout=10, context=server.certificate.client_context()) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_server_without_kueue_says_so_cleanly(fleet: SimulatedFleet, tmp_path: Path) -> None:
    with KubeApiServer(fleet, token=TOKEN, kueue_versions=()) as srv:
        assert raw_get(srv, "/apis") == (200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
        for path in (f"/apis/{GROUP}", f"/apis/{GROUP}/v1beta2", f"/apis/{GROUP}/v1beta2/clusterqueues"):
            code, body = raw_get(srv, path)
            assert (code, body["reason"]) == (404, "NotFound"), path
        state = kueue_state(KubernetesSource(kubeconfig=kubeconfig_of(srv, tmp_path / "kubeconfig")))
        # The core API is unaffected.
        nodes = KubernetesSource(kubeconfig=kubeconfig_of(srv, tmp_path / "kubeconfig")).node_state().nodes
    assert state == KueueState(installed=False)
    assert {n.name for n in nodes} == {n.name for n in fleet.nodes}


# -- kubectl ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kubectl_config(server: KubeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kueue-kubectl") / "kubeconfig"
    server.write_kubeconfig(path)
    return path


@pytest.mark.parametrize("version", sorted(KUBECTLS))
def test_kubectl_gets_clusterqueues_with_kueues_columns(
    kubectl_config: Path, expected: dict[str, list[dict[str, Any]]], version: str
) -> None:
    (queues,) = tables(kubectl(KUBECTLS[version], kubectl_config, "get", "clusterqueues"))
    assert list(queues[0]) == ["NAME", "COHORT", "PENDING WORKLOADS"]
    assert {r["NAME"]: (r["COHORT"], r["PENDING WORKLOADS"]) for r in queues} == {
        cq["metadata"]["name"]: (cq["spec"].get("cohortName", ""), str(cq["status"]["pendingWorkloads"]))
        for cq in expected["clusterqueues"]
    }
    assert {r["NAME"]: r["PENDING WORKLOADS"] for r in queues}["robotics"] == "2"
    (wide,) = tables(kubectl(KUBECTLS[version], kubectl_config, "get", "cq", "-o", "wide"))
    assert list(wide[0]) == ["NAME", "COHORT", "STRATEGY", "PENDING WORKLOADS", "ADMITTED WORKLOADS"]
    assert {r["NAME"]: r["ADMITTED WORKLOADS"] for r in wide}["robotics"] == "0"


@pytest.mark.parametrize("version", sorted(KUBECTLS))
def test_kubectl_gets_workloads_and_local_queues(
    kubectl_config: Path, expected: dict[str, list[dict[str, Any]]], version: str
) -> None:
    (workloads,) = tables(
        kubectl(KUBECTLS[version], kubectl_config, "get", "workloads.kueue.x-k8s.io", "-n", "search")
    )
    assert list(workloads[0]) == ["NAME", "QUEUE", "RESERVED IN", "ADMITTED", "FINISHED", "AGE"]
    rows = {r["NAME"]: r for r in workloads}
    pending = next(name for name in rows if name.startswith("pod-rerank-batch-0-"))
    assert (rows[pending]["QUEUE"], rows[pending]["RESERVED IN"], rows[pending]["ADMITTED"]) == (
        "search-queue",
        "",
        "",
    )
    assert rows[pending]["AGE"] == "4h"
    assert sum(r["RESERVED IN"] == "search" and r["ADMITTED"] == "True" for r in workloads) == 3
    (flavors,) = tables(kubectl(KUBECTLS[version], kubectl_config, "get", "resourceflavors"))
    assert list(flavors[0]) == ["NAME", "AGE"]
    assert [r["NAME"] for r in flavors] == [
        "a100",
        "a100-mig",
        "default-flavor",
        "h100",
        "l4",
        "mi300x",
        "t4",
    ]
    assert {r["AGE"] for r in flavors} == {"61d"}
    (resources,) = tables(kubectl(KUBECTLS[version], kubectl_config, "api-resources", "--api-group", GROUP))
    assert sorted(r["NAME"] for r in resources) == [
        "clusterqueues",
        "cohorts",
        "localqueues",
        "resourceflavors",
        "workloads",
    ]
    (queues,) = tables(kubectl(KUBECTLS[version], kubectl_config, "get", "localqueues", "-A"))
    assert {(r["NAMESPACE"], r["NAME"]): r["CLUSTERQUEUE"] for r in queues} == {
        (q["metadata"]["namespace"], q["metadata"]["name"]): q["spec"]["clusterQueue"]
        for q in expected["localqueues"]
    }


# -- gpuwatch check --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def check_fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=9, end=END, days=0.25)


def test_check_says_kueue_is_absent_in_one_line_and_nothing_else_changes(
    check_fleet: SimulatedFleet,
    prometheus_factory: PrometheusFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    prom = prometheus_factory(check_fleet, metrics=("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"))
    # `gpuwatch check` run at the simulated fleet's "now" (its history ends there).
    monkeypatch.setattr(
        gpuwatch.surfaces.check, "check", functools.partial(check, clock=lambda: check_fleet.now)
    )
    found = {}
    printed = {}
    for label, versions in (("with", ("v1beta2", "v1beta1")), ("without", ())):
        with KubeApiServer(check_fleet, token=TOKEN, kueue_versions=versions) as srv:
            path = kubeconfig_of(srv, tmp_path / f"kubeconfig-{label}")
            settings = demo_settings(
                Settings(
                    prometheus=PrometheusSettings(url=prom.url),
                    kubernetes=KubernetesSettings(kubeconfig=path),
                )
            )
            result = check(settings, clock=lambda: check_fleet.now)
            # The two servers' URLs apart (their ports), the same lines.
            found[label] = replace(result, findings=[f.replace(srv.url, "<server>") for f in result.findings])
            code = main(["check", "--prometheus-url", prom.url, "--kubeconfig", path])
            out, err = capsys.readouterr()
            printed[label] = (code, out.replace(srv.url, "<server>"), err)
    with_kueue, without = found["with"], found["without"]
    assert with_kueue.problems == [] and without.problems == []
    assert not with_kueue.unreachable and not without.unreachable
    objects = kueue_objects(check_fleet)
    line = (
        f"kueue (kueue.x-k8s.io/v1beta2): installed, 8 cluster queues, 8 local queues, "
        f"{len(objects['workloads'])} workloads"
    )
    assert [f for f in with_kueue.findings if "kueue" in f.lower()] == [line]
    assert [f for f in without.findings if "kueue" in f.lower()] == [NOT_INSTALLED]
    # Everything else check says is the same with Kueue or without.
    assert [f for f in with_kueue.findings if f != line] == [
        f for f in without.findings if f != NOT_INSTALLED
    ]
    assert with_kueue.warnings == without.warnings
    # The command: exit 0 both ways, one `ok:` line for Kueue, nothing on standard error.
    (code_with, out_with, err_with), (code_without, out_without, err_without) = (
        printed["with"],
        printed["without"],
    )
    assert code_with == code_without == 0, err_without
    assert err_with == err_without == ""
    assert [x for x in out_without.splitlines() if "kueue" in x.lower()] == [f"ok: {NOT_INSTALLED}"]
    assert [x for x in out_with.splitlines() if "kueue" in x.lower()] == [f"ok: {line}"]
    assert out_with.replace(f"ok: {line}", "") == out_without.replace(f"ok: {NOT_INSTALLED}", "")


def test_check_fails_on_a_kueue_403_naming_the_rbac(check_fleet: SimulatedFleet, tmp_path: Path) -> None:
    with KubeApiServer(check_fleet, token=TOKEN, forbidden=["clusterqueues"]) as srv:
        path = kubeconfig_of(srv, tmp_path / "kubeconfig")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpuwatch",
                "check",
                "--prometheus-url",
                "http://127.0.0.1:9",
                "--kubeconfig",
                path,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    problems = done.stderr.strip().splitlines()
    kueue = [p for p in problems if "kueue" in p]
    assert kueue == [
        "gpuwatch: problem: kubernetes: forbidden (403): clusterqueues.kueue.x-k8s.io is forbidden: User "
        '"system:serviceaccount:monitoring:gpuwatch" cannot list resource "clusterqueues" in API group '
        '"kueue.x-k8s.io" at the cluster scope; gpuwatch needs get/list/watch on clusterqueues, localqueues, '
        'workloads, resourceflavors and cohorts in API group "kueue.x-k8s.io"'
    ]
    assert done.returncode == 3  # Prometheus unreachable, as without the 403
    assert "can list pods" in done.stdout and "Traceback" not in done.stderr
