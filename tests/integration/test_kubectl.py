"""Real kubectl against the simulated Kubernetes API: HTTPS with the kubeconfig's CA, a bearer token,
the Table columns kubectl prints, field selectors and chunked lists.

Every kubectl found runs: Debian's (package kubernetes-client, 1.20), which `make test` unpacks into the
virtualenv beside any other and names in GPUWATCH_TEST_KUBECTL, and the one on PATH if it is another
version. None at all, or a named one that does not run, is a failure, not a skip.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.kubeapi import KubeApiServer
from tests.integration.prom import die_with_parent

pytestmark = pytest.mark.integration

END = datetime(2026, 11, 20, tzinfo=UTC)
# Where `make test-deps` unpacks Debian's kubectl when another kubectl owns /usr/bin/kubectl.
BESIDE = Path(sys.prefix) / "kubernetes-client" / "usr" / "bin" / "kubectl"
NAMED = [p for p in os.environ.get("GPUWATCH_TEST_KUBECTL", "").split(os.pathsep) if p]


def _version(path: str) -> str | None:
    try:
        done = subprocess.run(
            [path, "version", "--client", "-o", "json"], capture_output=True, text=True, timeout=60
        )
    except OSError:
        return None
    if done.returncode != 0:
        return None
    return str(json.loads(done.stdout)["clientVersion"]["gitVersion"])


def _kubectls() -> dict[str, str]:
    """gitVersion -> path of every distinct kubectl available."""
    found = shutil.which("kubectl")
    candidates = [*NAMED, *([str(BESIDE)] if BESIDE.exists() else []), *([found] if found else [])]
    out: dict[str, str] = {}
    for path in candidates:
        if version := _version(path):
            out.setdefault(version, path)
    return out


KUBECTLS = _kubectls()


def test_there_is_a_kubectl_to_test_with() -> None:
    assert KUBECTLS, "no kubectl: run `make test`, which installs Debian's kubernetes-client"
    for path in NAMED:  # what `make test` put there must really be tested
        assert _version(path) in KUBECTLS, f"GPUWATCH_TEST_KUBECTL names {path}, which does not run"


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=42, end=END, days=1)


@pytest.fixture(scope="module")
def server(fleet: SimulatedFleet) -> Iterator[KubeApiServer]:
    with KubeApiServer(fleet, token="kubectl-test-token") as srv:
        yield srv


@pytest.fixture(scope="module")
def kubeconfig(server: KubeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kubectl") / "kubeconfig"
    server.write_kubeconfig(path)
    return path


def kubectl(binary: str, kubeconfig: Path, *args: str) -> str:
    home = kubeconfig.parent / f"home-{Path(binary).stat().st_ino}"  # a discovery cache per kubectl
    home.mkdir(exist_ok=True)
    done = subprocess.run(
        [binary, "--kubeconfig", str(kubeconfig), "--request-timeout=30s", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,  # a kubeconfig kubectl cannot use makes it prompt: fail, never hang
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(home)},
    )
    assert done.returncode == 0, done.stderr
    assert "error" not in done.stderr.lower(), done.stderr  # e.g. a discovery fallback gone wrong
    return done.stdout


def tables(text: str) -> list[list[dict[str, str]]]:
    """kubectl's printed tables (one per resource kind), rows as {HEADER: cell}, cut at the header's
    column positions (tabwriter aligns every cell under its header)."""
    out: list[list[dict[str, str]]] = []
    for block in text.strip().split("\n\n"):
        header, *lines = block.splitlines()
        found = list(re.finditer(r"\S+(?: \S+)*", header))  # "NOMINATED NODE" is one column
        bounds = [*(m.start() for m in found[1:]), None]
        out.append(
            [
                {m.group(): line[m.start() : end].strip() for m, end in zip(found, bounds, strict=True)}
                for line in lines
            ]
        )
    return out


def node_status(fleet: SimulatedFleet) -> dict[str, str]:
    """STATUS as the API server prints it for each of the fleet's nodes."""
    return {
        n.name: ("Ready" if n.ready else "NotReady") + (",SchedulingDisabled" if n.unschedulable else "")
        for n in fleet.nodes
    }


@pytest.mark.parametrize("version", sorted(KUBECTLS))
def test_get_nodes_and_pods_wide_shows_the_servers_columns(
    fleet: SimulatedFleet, kubeconfig: Path, version: str
) -> None:
    nodes, pods = tables(kubectl(KUBECTLS[version], kubeconfig, "get", "nodes,pods", "-A", "-o", "wide"))
    assert list(nodes[0]) == [
        "NAME",
        "STATUS",
        "ROLES",
        "AGE",
        "VERSION",
        "INTERNAL-IP",
        "EXTERNAL-IP",
        "OS-IMAGE",
        "KERNEL-VERSION",
        "CONTAINER-RUNTIME",
    ]
    status = {row["NAME"].removeprefix("node/"): row["STATUS"] for row in nodes}
    assert status == node_status(fleet)
    assert {"NotReady", "Ready,SchedulingDisabled"} <= set(status.values())
    assert list(pods[0]) == [
        "NAMESPACE",
        "NAME",
        "READY",
        "STATUS",
        "RESTARTS",
        "AGE",
        "IP",
        "NODE",
        "NOMINATED NODE",
        "READINESS GATES",
    ]
    shown = {(row["NAMESPACE"], row["NAME"].removeprefix("pod/")): row for row in pods}
    phase = {"Running": "Running", "Pending": "Pending", "Succeeded": "Completed", "Failed": "Error"}
    assert shown.keys() == {(p.namespace, p.name) for p in fleet.api_pods()}
    for pod in fleet.api_pods():
        row = shown[(pod.namespace, pod.name)]
        assert row["STATUS"] == phase[pod.phase], pod.key
        assert row["NODE"] == (pod.node or "<none>"), pod.key
        assert row["READY"] == (
            "1/1" if pod.phase == "Running" and fleet.node(pod.node or "").ready else "0/1"
        ), pod.key
    assert any(r["STATUS"] == "Pending" and r["NODE"] == "<none>" for r in pods)
    assert any(r["STATUS"] == "Running" and r["NODE"] != "<none>" for r in pods)


@pytest.mark.parametrize("version", sorted(KUBECTLS))
def test_a_field_selector_lists_exactly_the_pending_pods(
    fleet: SimulatedFleet, kubeconfig: Path, version: str
) -> None:
    (pods,) = tables(
        kubectl(
            KUBECTLS[version], kubeconfig, "get", "pods", "-A", "--field-selector", "status.phase=Pending"
        )
    )
    pending = sorted(p.key for p in fleet.api_pods() if p.phase == "Pending")
    assert len(pending) >= 2
    assert sorted(f"{r['NAMESPACE']}/{r['NAME']}" for r in pods) == pending
    assert {r["STATUS"] for r in pods} == {"Pending"}


@pytest.mark.parametrize("version", sorted(KUBECTLS))
def test_chunked_lists_page_through_every_pod(
    fleet: SimulatedFleet, server: KubeApiServer, kubeconfig: Path, version: str
) -> None:
    before = len(server.request_log)
    (pods,) = tables(kubectl(KUBECTLS[version], kubeconfig, "get", "pods", "-A", "--chunk-size=5"))
    assert len(pods) == len(fleet.api_pods())
    assert len({(r["NAMESPACE"], r["NAME"]) for r in pods}) == len(pods)
    requests = zip(server.request_log[before:], server.accept_log[before:], strict=True)
    pages = [(t, accept) for (_, t, code), accept in requests if t.startswith("/api/v1/pods") and code == 200]
    assert all("limit=5" in t and "as=Table" in accept for t, accept in pages)
    assert len(pages) == -(-len(pods) // 5)
    assert sum("continue=" in t for t, _ in pages) == len(pages) - 1


@pytest.mark.parametrize("version", sorted(KUBECTLS))
@pytest.mark.parametrize("auth", ["token", "no-auth"])
def test_the_cli_serves_what_kubectl_uses(
    fleet: SimulatedFleet, tmp_path: Path, auth: str, version: str
) -> None:
    """`gpuwatch simulate kube-api --write-kubeconfig` as the README shows it: kubectl uses the file as is."""
    path = tmp_path / "sim.kubeconfig"
    flags = ["--no-auth"] if auth == "no-auth" else []
    command = [sys.executable, "-m", "gpuwatch", "simulate", "kube-api", "--port", "0", *flags]
    command += ["--seed", "42", "--end", END.isoformat(), "--days", "1", "--write-kubeconfig", str(path)]
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True, preexec_fn=die_with_parent) as proc:
        try:
            assert proc.stderr is not None
            lines = [proc.stderr.readline(), proc.stderr.readline()]
            assert "kubeconfig written" in lines[1], lines
            cluster = yaml.safe_load(path.read_text())["clusters"][0]["cluster"]
            user = yaml.safe_load(path.read_text())["users"][0]["user"]
            if auth == "token":
                assert cluster["server"].startswith("https://127.0.0.1:")
                assert "certificate-authority-data" in cluster and user == {"token": "gpuwatch-sim-token"}
            else:
                assert cluster["server"].startswith("http://127.0.0.1:") and user == {}
            (nodes,) = tables(kubectl(KUBECTLS[version], path, "get", "nodes"))
            assert {r["NAME"]: r["STATUS"] for r in nodes} == node_status(fleet)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
