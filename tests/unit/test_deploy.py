"""deploy/: valid Kubernetes objects, read-only RBAC, locked-down pods, and a PrometheusRule in sync."""

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient

from gpuwatch.cli import _parser
from gpuwatch.core.config import load_settings
from gpuwatch.sources.kueue import KUEUE_GROUP, KUEUE_RBAC, KUEUE_RESOURCES

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
# Kinds with a model in the official client, by the model's name.
MODELS = {
    "Namespace": "V1Namespace",
    "ServiceAccount": "V1ServiceAccount",
    "ClusterRole": "V1ClusterRole",
    "ClusterRoleBinding": "V1ClusterRoleBinding",
    "ConfigMap": "V1ConfigMap",
    "Deployment": "V1Deployment",
    "Service": "V1Service",
    "PodDisruptionBudget": "V1PodDisruptionBudget",
}
READ_VERBS = {"get", "list", "watch"}
READ_RESOURCES = {"pods", "nodes", "namespaces", "resourcequotas"}
# Kueue's objects gpuwatch reads (sources/kueue.py), in their API group.
KUEUE_READ = {"clusterqueues", "localqueues", "workloads", "resourceflavors", "cohorts"}


def manifests() -> list[tuple[str, dict[str, Any]]]:
    """(file name, object) for every object of every manifest file (kustomization.yaml aside)."""
    out = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc is not None:
                out.append((path.name, doc))
    return out


def objects(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in manifests() if doc["kind"] == kind]


def one(kind: str, name: str) -> dict[str, Any]:
    found = [doc for doc in objects(kind) if doc["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_prometheusrule", DEPLOY / "gen_prometheusrule.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the objects parse as Kubernetes objects --------------------------------------------------


@pytest.mark.parametrize(("source", "doc"), manifests(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_object_round_trips_through_the_official_client_models(
    source: str, doc: dict[str, Any]
) -> None:
    """Deserialize with the client's model, serialize back: a misspelt or misplaced field would be dropped."""
    kind = doc["kind"]
    if kind in MODELS:
        client = ApiClient()
        obj = client._ApiClient__deserialize(doc, MODELS[kind])  # type: ignore[attr-defined]
        assert type(obj).__name__ == MODELS[kind]
        assert client.sanitize_for_serialization(obj) == doc
    else:  # Prometheus Operator custom resources: no model in the client
        assert doc["apiVersion"] == "monitoring.coreos.com/v1", source
        assert kind in {"ServiceMonitor", "PrometheusRule"}, source
    assert set(doc) <= {"apiVersion", "kind", "metadata", "spec", "data", "rules", "roleRef", "subjects"}
    if kind not in {"Namespace", "ClusterRole", "ClusterRoleBinding"}:
        assert doc["metadata"]["namespace"] == "gpuwatch", f"{source}: {kind} outside the gpuwatch namespace"


def test_the_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text(encoding="utf-8"))
    files = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files
    assert [doc["metadata"]["name"] for doc in objects("Namespace")] == ["gpuwatch"]


# -- read-only RBAC ----------------------------------------------------------------------------


def test_the_cluster_role_grants_only_get_list_watch_on_the_core_resources_and_kueues() -> None:
    roles = objects("ClusterRole")
    assert len(roles) == 1 and not objects("Role"), "one ClusterRole and nothing else grants permissions"
    rules = roles[0]["rules"]
    granted = set()
    for rule in rules:
        assert set(rule) == {"apiGroups", "resources", "verbs"}, "no resourceNames / nonResourceURLs"
        assert rule["apiGroups"] in ([""], ["kueue.x-k8s.io"]), "the core API group and Kueue's only"
        assert set(rule["verbs"]) == READ_VERBS
        assert "*" not in rule["resources"]
        granted |= {(rule["apiGroups"][0], r, v) for r in rule["resources"] for v in rule["verbs"]}
    assert granted == {("", r, v) for r in READ_RESOURCES for v in READ_VERBS} | {
        ("kueue.x-k8s.io", r, v) for r in KUEUE_READ for v in READ_VERBS
    }


def test_the_kueue_rule_is_what_the_kueue_source_reads_and_names_in_a_403() -> None:
    assert KUEUE_GROUP == "kueue.x-k8s.io"
    assert set(KUEUE_RESOURCES) == KUEUE_READ
    assert KUEUE_RBAC == (
        "get/list/watch on clusterqueues, localqueues, workloads, resourceflavors and cohorts in API group "
        '"kueue.x-k8s.io"'
    )


def test_the_binding_gives_that_role_to_the_service_account_both_deployments_run_as() -> None:
    role = objects("ClusterRole")[0]["metadata"]["name"]
    binding = objects("ClusterRoleBinding")
    assert len(binding) == 1 and not objects("RoleBinding")
    assert binding[0]["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role,
    }
    (subject,) = binding[0]["subjects"]
    account = one("ServiceAccount", subject["name"])
    assert subject == {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "gpuwatch"}
    for deployment in objects("Deployment"):
        assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == subject["name"]


# -- the two deployments -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "command", "port"), [("gpuwatch-serve", "serve", 8050), ("gpuwatch-exporter", "export", 9402)]
)
def test_deployment_runs_its_command_locked_down(name: str, command: str, port: int) -> None:
    deployment = one("Deployment", name)
    pod = deployment["spec"]["template"]["spec"]
    assert (
        deployment["spec"]["selector"]["matchLabels"].items()
        <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    # The arguments are ones the CLI accepts, binding all interfaces so the Service and probes reach it.
    args = _parser().parse_args(container["args"])
    assert (args.command, args.host, args.port) == (command, "0.0.0.0", port)
    assert not getattr(args, "demo", False)
    assert [p["containerPort"] for p in container["ports"]] == [port]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["runAsNonRoot"] is True
    assert sc.get("privileged", False) is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert set(container["resources"]) == {"requests", "limits"}
    for part in ("requests", "limits"):
        assert set(container["resources"][part]) == {"cpu", "memory"}
    for probe in ("livenessProbe", "readinessProbe"):
        assert probe in container, f"{name} has no {probe}"
        target = container[probe].get("httpGet") or container[probe]["tcpSocket"]
        assert target["port"] in {port, container["ports"][0]["name"]}
    # A read-only root file system needs a writable /tmp; the config comes from the ConfigMap.
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert (
        volumes[mounts["/etc/gpuwatch"]]["configMap"]["name"]
        == one("ConfigMap", "gpuwatch")["metadata"]["name"]
    )
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["GPUWATCH_CONFIG"] == "/etc/gpuwatch/config.yaml"


@pytest.mark.parametrize(("name", "port"), [("gpuwatch-serve", 8050), ("gpuwatch-exporter", 9402)])
def test_service_selects_its_deployment_pods_on_their_port(name: str, port: int) -> None:
    service = one("Service", name)
    pod_labels = one("Deployment", name)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    other = [d for d in objects("Deployment") if d["metadata"]["name"] != name]
    for d in other:  # and not the other deployment's pods
        assert not service["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
    (svc_port,) = service["spec"]["ports"]
    assert svc_port["port"] == port
    container = one("Deployment", name)["spec"]["template"]["spec"]["containers"][0]
    assert svc_port["targetPort"] in {port, container["ports"][0]["name"]}


def test_the_config_map_is_a_config_gpuwatch_accepts(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(one("ConfigMap", "gpuwatch")["data"]["config.yaml"], encoding="utf-8")
    settings = load_settings(config_path=str(config), env={})
    assert settings.prometheus.url == "http://prometheus-operated.monitoring.svc:9090"


def test_the_service_monitor_scrapes_the_exporter_service_keeping_its_labels() -> None:
    (monitor,) = objects("ServiceMonitor")
    service = one("Service", "gpuwatch-exporter")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["honorLabels"] is True  # else namespace/pod become exported_namespace/exported_pod
    # GpuwatchDown looks for the job the Prometheus Operator derives from the Service name.
    rules = (ROOT / "alerts" / "gpuwatch.rules.yml").read_text(encoding="utf-8")
    assert f'up{{job="{service["metadata"]["name"]}"}}' in rules


def test_the_container_image_is_slim_non_root_with_the_cli_as_entrypoint() -> None:
    text = (DEPLOY / "Containerfile").read_text(encoding="utf-8")
    froms = re.findall(r"^FROM (\S+)", text, flags=re.MULTILINE)
    assert froms and all(f == "python:3.11-slim" for f in froms)
    assert re.search(r"^RUN pip (install|wheel) .*\.", text, flags=re.MULTILINE)
    (user,) = re.findall(r"^USER (\S+)", text, flags=re.MULTILINE)
    assert user.split(":")[0].isdigit() and int(user.split(":")[0]) > 0
    assert re.search(r'^ENTRYPOINT \["gpuwatch"\]$', text, flags=re.MULTILINE)
    run_as = {d["spec"]["template"]["spec"]["securityContext"]["runAsUser"] for d in objects("Deployment")}
    assert run_as == {int(user.split(":")[0])}


# -- the PrometheusRule ------------------------------------------------------------------------


def test_the_prometheus_rule_is_generated_from_the_rule_files_and_in_sync() -> None:
    generator = load_generator()
    committed = (DEPLOY / "prometheusrule.yaml").read_text(encoding="utf-8")
    assert generator.render() == committed, "deploy/prometheusrule.yaml is stale: run `make prometheusrule`"
    assert generator.main(["--check"]) == 0


def test_the_prometheus_rule_carries_every_group_of_every_rule_file_unchanged() -> None:
    (rule,) = objects("PrometheusRule")
    expected = []
    for path in sorted((ROOT / "alerts").glob("*.rules.yml")):
        expected += yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
    assert rule["spec"]["groups"] == expected
    assert rule["metadata"]["namespace"] == "gpuwatch"


def test_a_stale_prometheus_rule_is_detected(tmp_path: Path) -> None:
    generator = load_generator()
    stale = tmp_path / "prometheusrule.yaml"
    stale.write_text(
        (DEPLOY / "prometheusrule.yaml").read_text(encoding="utf-8").replace("for: 15m", "for: 1m")
    )
    assert generator.main(["--check", "--output", str(stale)]) == 1
    assert generator.main(["--output", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == generator.render()


def test_the_exporter_runs_two_replicas_for_high_availability() -> None:
    """Two replicas publish the same series; readers keep one copy (sources/ownseries.py FAMILY_LABELS), so
    the manifests can afford HA: spread over nodes, rolled one at a time, one kept through drains."""
    deployment = one("Deployment", "gpuwatch-exporter")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
    }
    (spread,) = spec["template"]["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
    budget = one("PodDisruptionBudget", "gpuwatch-exporter")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"]
