"""The Kubernetes API through the official client: paginated lists of pods, nodes, namespaces, quotas."""

import json
import math
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import urllib3

from gpuwatch.core.errors import ConfigError, DataError, KubernetesError
from gpuwatch.core.model import (
    AMD_PARTITION_LABEL,
    PRODUCT_LABELS,
    RESOURCE_AMD_GPU,
    RESOURCE_MIG_PREFIX,
    Namespace,
    Node,
    NodeRequirement,
    Placement,
    Pod,
    ResourceQuota,
    Taint,
    Toleration,
    amd_partitions,
    ge_per_unit,
    is_gpu_resource,
    node_product,
    normalize_product,
    utc,
)
from gpuwatch.core.units import BYTES_PER_MIB, parse_quantity
from gpuwatch.sources.dcgm import EXPORTER_CONTAINERS
from gpuwatch.sources.deadline import Deadline, DeadlineError, InFlight, read_body, socket_of

if TYPE_CHECKING:
    from kubernetes.client.exceptions import ApiException

JsonObject = dict[str, Any]
# The core/v1 collections read, by kind: requested through the client's ApiClient rather than CoreV1Api,
# whose generated models take about a second of CPU to import (a report or `gpuwatch check` lists nodes).
_COLLECTIONS = {
    "pods": "/api/v1/pods",
    "nodes": "/api/v1/nodes",
    "namespaces": "/api/v1/namespaces",
    "resourcequotas": "/api/v1/resourcequotas",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterState:
    """What the API server says now, as model objects, with every input problem counted."""

    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]  # GPU pods (running and pending) and dcgm-exporter pods
    namespaces: tuple[Namespace, ...]
    quotas: tuple[ResourceQuota, ...]
    exporter_pod_nodes: Mapping[str, str] = field(default_factory=dict)  # exporter pod name -> node
    exporter_ip_nodes: Mapping[str, str] = field(default_factory=dict)  # exporter pod IP -> node
    warnings: tuple[str, ...] = ()
    skipped: int = 0  # objects or resources skipped for malformed input
    list_restarts: int = 0  # lists restarted after 410 Expired
    cluster: str = (
        ""  # the configured name of the cluster (""), or "" for a fleet of several (names qualified)
    )
    unreachable: Mapping[str, str] = field(default_factory=dict)  # cluster -> why its API server was not read

    def gpu_pods(self) -> list[Pod]:
        return [p for p in self.pods if p.gpu_requests]


class KubernetesSource:
    """Reads the cluster with the official client; every request has a deadline of `timeout_seconds` that
    bounds it end to end (a list: each page), and lists are paginated. A request that runs out of time is
    not sent again; a refused connection is retried twice by the client."""

    def __init__(
        self,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        timeout_seconds: float = 30.0,
        page_size: int = 500,
        max_list_restarts: int = 3,
        api_client: Any = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self.timeout_seconds = timeout_seconds
        self.page_size = page_size
        self.max_list_restarts = max_list_restarts
        self._api_client = api_client
        self.reads = InFlight("kubernetes", "the Kubernetes API")

    def _client(self) -> Any:
        if self._api_client is None:
            with _LOADING:
                if self._api_client is None:
                    api_client = _load_api_client(self.kubeconfig, self.context)
                    self.reads.url = str(api_client.configuration.host)
                    self._api_client = api_client
        return self._api_client

    def load(self) -> None:
        """Load the kubeconfig (or in-cluster config) now: a missing or invalid one is a ConfigError before
        anything is served."""
        self._client()

    @property
    def server(self) -> str:
        try:
            return str(self._client().configuration.host)
        except KubernetesError:
            return "the Kubernetes API"

    def _get(self, kind: str, query: Mapping[str, Any], deadline: Deadline) -> Any:
        """GET the collection of `kind` (a list, or a watch) through the client's ApiClient (its
        configuration, credentials and TLS), as CoreV1Api's list methods do with _preload_content=False:
        the raw response with its body unread, its headers come within the deadline; a non-2xx answer an
        ApiException."""
        api = self._client()
        request = api.param_serialize(
            method="GET",
            resource_path=_COLLECTIONS.get(kind, kind),  # a kind, or a custom resource's path
            query_params=[(k, v) for k, v in query.items() if v not in (None, "")],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        left = deadline.check()
        response = api.call_api(*request, _request_timeout=(left, left))
        if not 200 <= response.status <= 299:
            response.read()
            raise _api_exception().from_response(http_resp=response, body=None, data=None)
        return response.response

    def _read(self, kind: str, query: Mapping[str, Any]) -> bytes:
        """The body of one GET of `kind`, headers and body within one deadline of timeout_seconds."""
        deadline = Deadline(self.timeout_seconds)
        with self.reads.track():
            return read_body(self._get(kind, query, deadline), deadline)

    def _unreachable(self, e: BaseException) -> KubernetesError:
        """One line for a request that got no usable answer: refused, reset, or none within the deadline."""
        if _timed_out(e):
            return KubernetesError(
                f"kubernetes API at {self.server} unreachable: no answer within {self.timeout_seconds:g}s"
            )
        return KubernetesError(f"kubernetes API at {self.server} unreachable: {_reason(e)}")

    def list_raw(self, kind: str, *, field_selector: str = "") -> tuple[list[JsonObject], int]:
        """All objects of a kind (pods, nodes, namespaces, resourcequotas), page by page.

        A 410 Expired on a continue token restarts the list from scratch, at most max_list_restarts
        times (the API server compacted the resourceVersion the pages were read at). Returns the
        items and how many restarts it took.
        """
        items, _version, restarts = self.list_versioned(kind, field_selector=field_selector)
        return items, restarts

    def list_custom(
        self, group: str, version: str, plural: str, *, needs: str = ""
    ) -> tuple[list[JsonObject], int] | None:
        """All objects of the custom resource collection /apis/<group>/<version>/<plural>, listed as
        list_raw() lists a core kind (pages, 410 restarts, timeouts), and the restarts it took. None when
        the server does not serve it (404: the group, version or CRD is not installed). A 403 is one line
        naming the RBAC gpuwatch `needs` (default: get/list/watch on <plural> in the API group)."""
        try:
            items, _version, restarts = self.list_versioned(f"/apis/{group}/{version}/{plural}", needs=needs)
            return items, restarts
        except KubernetesError as e:
            cause = e.__cause__
            if isinstance(cause, _api_exception()) and cause.status == 404:
                return None
            raise

    def list_versioned(
        self, kind: str, *, field_selector: str = "", needs: str = ""
    ) -> tuple[list[JsonObject], str, int]:
        """list_raw(), and the resourceVersion the list was read at (where a watch of it starts). A 403 names
        the RBAC gpuwatch `needs` (default: gpuwatch's core kinds, or get/list/watch on a custom resource's
        collection)."""
        restarts = 0
        while True:
            versions: list[str] = []
            try:
                items = list(self._pages(kind, field_selector, versions, needs))
                return items, versions[0] if versions else "", restarts
            except _ExpiredError:
                restarts += 1
                if restarts > self.max_list_restarts:
                    raise KubernetesError(
                        f"kubernetes: listing {kind} kept expiring (410) "
                        f"after {self.max_list_restarts} restarts"
                    ) from None

    def _pages(
        self, kind: str, field_selector: str, versions: list[str] | None = None, needs: str = ""
    ) -> Iterator[JsonObject]:
        token: str | None = None
        while True:
            # Raw JSON, not the client's models: fast, and a malformed quantity cannot break parsing.
            query = {"limit": self.page_size, "continue": token, "fieldSelector": field_selector}
            try:
                body = json.loads(self._read(kind, query))
            except _api_exception() as e:
                if e.status == 410 and token:
                    raise _ExpiredError from e
                raise _api_error(e, kind, needs) from e
            except (urllib3.exceptions.HTTPError, OSError, DeadlineError) as e:
                raise self._unreachable(e) from e
            except ValueError as e:
                raise KubernetesError(f"kubernetes: listing {kind} returned invalid JSON") from e
            meta = body.get("metadata") or {}
            if versions is not None and not token:
                versions.append(str(meta.get("resourceVersion") or ""))
            yield from body.get("items") or []
            token = meta.get("continue") or None
            if not token:
                return

    def watch_raw(
        self,
        kind: str,
        *,
        resource_version: str,
        timeout_seconds: int,
        needs: str = "",
        opened: Callable[[], None] | None = None,
    ) -> Iterator[JsonObject]:
        """The events of a watch of `kind` from `resource_version` (with bookmarks), as raw JSON objects
        {"type", "object"}, until the server ends it after about `timeout_seconds`. An ERROR event is
        yielded as is (410 Expired: the version was compacted, list again); a dropped connection is a
        KubernetesError."""
        try:
            query = {
                "watch": True,
                "resourceVersion": resource_version,
                "allowWatchBookmarks": True,
                "timeoutSeconds": timeout_seconds,
            }
            with self.reads.track():  # until the watch is open: then it streams as long as it lasts
                response = self._get(kind, query, Deadline(self.timeout_seconds))
        except _api_exception() as e:
            raise _api_error(e, kind, needs) from e
        except (urllib3.exceptions.HTTPError, OSError, DeadlineError) as e:
            raise self._unreachable(e) from e
        if opened is not None:
            opened()
        sock = socket_of(response)
        if sock is not None:  # events may be minutes apart: the server ends the watch after timeout_seconds
            sock.settimeout(timeout_seconds + self.timeout_seconds)
        try:
            buffer = b""
            for chunk in response.stream(amt=65_536, decode_content=True):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                yield from (json.loads(line) for line in lines if line.strip())
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise KubernetesError(f"kubernetes: the watch of {kind} was cut: {_reason(e)}") from e
        except ValueError as e:
            raise KubernetesError(f"kubernetes: the watch of {kind} sent invalid JSON") from e
        finally:
            response.release_conn()

    def can_list(self, kind: str) -> str | None:
        """None if a one-item list of `kind` works, else the one-line reason (for `gpuwatch check`)."""
        try:
            self._read(kind, {"limit": 1})
        except _api_exception() as e:
            return str(_api_error(e, kind))
        except (urllib3.exceptions.HTTPError, OSError, DeadlineError) as e:
            return str(self._unreachable(e))
        return None

    def node_state(self, *, namespaces: bool = False) -> ClusterState:
        """The nodes alone, parsed (no pod or quota listed; the namespaces too when asked)."""
        nodes, restarts = self.list_raw("nodes")
        listed, more = self.list_raw("namespaces") if namespaces else ([], 0)
        return state_from_raw(nodes, [], listed, [], list_restarts=restarts + more)

    def cluster_state(self) -> ClusterState:
        """Nodes, running and pending pods (field selectors), namespaces and quotas, parsed."""
        nodes, r1 = self.list_raw("nodes")
        running, r2 = self.list_raw("pods", field_selector="status.phase=Running")
        pending, r3 = self.list_raw("pods", field_selector="status.phase=Pending")
        namespaces, r4 = self.list_raw("namespaces")
        quotas, r5 = self.list_raw("resourcequotas")
        return state_from_raw(
            nodes, running + pending, namespaces, quotas, list_restarts=r1 + r2 + r3 + r4 + r5
        )


def state_from_raw(
    nodes_raw: list[JsonObject],
    pods_raw: list[JsonObject],
    namespaces_raw: list[JsonObject],
    quotas_raw: list[JsonObject],
    *,
    list_restarts: int = 0,
) -> ClusterState:
    """The cluster state of raw API objects (pods: the running and pending ones)."""
    return state_from_parsed(
        nodes_raw,
        [pod_entry(obj) for obj in pods_raw],
        namespaces_raw,
        quotas_raw,
        list_restarts=list_restarts,
    )


@dataclass(frozen=True, slots=True)
class PodEntry:
    """A pod object parsed once (a watch cache keeps these, not the objects): the pod (None: malformed,
    skipped), the problems its parse counted, and whether it is a dcgm-exporter pod and at which IP."""

    pod: Pod | None
    problems: "_Problems"
    exporter: bool
    ip: str

    @property
    def matters(self) -> bool:
        """A GPU pod or a dcgm-exporter: what cluster_state keeps (one with problems, to warn of them)."""
        return self.pod is None or bool(self.pod.gpu_requests) or self.exporter or self.problems.count > 0


def pod_entry(obj: JsonObject) -> PodEntry:
    problems = _Problems()
    pod = parse_pod(obj, problems)
    ip = (obj.get("status") or {}).get("podIP") or ""
    return PodEntry(pod=pod, problems=problems, exporter=is_exporter_pod(obj), ip=str(ip))


def state_from_parsed(
    nodes_raw: list[JsonObject],
    pods: list[PodEntry],
    namespaces_raw: list[JsonObject],
    quotas_raw: list[JsonObject],
    *,
    list_restarts: int = 0,
) -> ClusterState:
    """state_from_raw() of pods already parsed."""
    problems = _Problems()
    nodes = [n for n in (parse_node(obj, problems) for obj in nodes_raw) if n is not None]
    kept: list[Pod] = []
    exporter_pod_nodes: dict[str, str] = {}
    exporter_ip_nodes: dict[str, str] = {}
    for entry in pods:
        problems.merge(entry.problems)
        pod = entry.pod
        if pod is None:
            continue
        if entry.exporter:
            if pod.node:
                exporter_pod_nodes[pod.name] = pod.node
                if entry.ip:
                    exporter_ip_nodes[entry.ip] = pod.node
            kept.append(pod)
        elif pod.gpu_requests:
            kept.append(pod)
    return ClusterState(
        nodes=tuple(nodes),
        pods=tuple(kept),
        namespaces=tuple(parse_namespace(obj) for obj in namespaces_raw),
        quotas=tuple(q for q in (parse_quota(obj, problems) for obj in quotas_raw) if q is not None),
        exporter_pod_nodes=exporter_pod_nodes,
        exporter_ip_nodes=exporter_ip_nodes,
        warnings=tuple(problems.messages),
        skipped=problems.count,
        list_restarts=list_restarts,
    )


def running_pod_entry(obj: JsonObject) -> PodEntry | None:
    """pod_entry() of a running or pending pod that matters (PodEntry.matters); None for any other."""
    phase = (obj.get("status") or {}).get("phase")
    if phase not in ("Running", "Pending"):
        return None
    entry = pod_entry(obj)
    return entry if entry.matters else None


class _ExpiredError(Exception):
    """A continue token the API server no longer honours (410 Gone, reason Expired)."""


@dataclass
class _Problems:
    """Bad input seen while parsing: counted, and warned once per distinct message."""

    count: int = 0
    messages: list[str] = field(default_factory=list)

    def add(self, message: str) -> None:
        self.count += 1
        if message not in self.messages:
            self.messages.append(message)

    def merge(self, other: "_Problems") -> None:
        self.count += other.count
        for message in other.messages:
            if message not in self.messages:
                self.messages.append(message)


# One kubeconfig load at a time in the process: the watches' threads ask for the client together, and the
# kubernetes client names its temporary CA file in a shared table before it writes the file, so a second
# load of the same CA could open the still-empty file ("no certificate or crl found").
_LOADING = threading.Lock()


def _api_exception() -> "type[ApiException]":
    """The client's ApiException, imported with the client when first asked for: the client's packages
    take a fifth of a second to import, which a command that reads no cluster (the demo, the simulator)
    does not pay."""
    from kubernetes.client.exceptions import ApiException

    return ApiException


def _load_api_client(kubeconfig: str | None, context: str | None) -> Any:
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    configuration = client.Configuration()
    # A refused connection is tried twice more; a read that times out is not tried again (urllib3's
    # default would send it three more times, each waiting the whole timeout).
    configuration.retries = urllib3.Retry(connect=2, read=False, status=0, other=0, backoff_factor=0.2)
    if kubeconfig:
        try:
            Path(kubeconfig).expanduser().open("rb").close()
        except OSError as e:  # the client's own words for it ("no configuration found") do not say why
            raise ConfigError(f"kubernetes: cannot read kubeconfig {kubeconfig}: {e.strerror}") from e
    try:
        if kubeconfig:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
        else:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return client.ApiClient(configuration)
    except ConfigException as e:
        where = kubeconfig or "in-cluster config"
        raise ConfigError(f"kubernetes: cannot load {where}: {_one_line(str(e))}") from e
    except OSError as e:
        raise ConfigError(f"kubernetes: cannot read kubeconfig {kubeconfig}: {e.strerror}") from e


def _api_error(e: "ApiException", kind: str, needs: str = "") -> KubernetesError:
    """One line for a failed request of `kind` (a core kind or a collection path); a 403 names the RBAC
    gpuwatch `needs` (default: its core kinds', or get/list/watch on a custom resource's collection)."""
    message = ""
    try:
        message = json.loads(e.body or "{}").get("message", "")
    except (ValueError, AttributeError):
        message = ""
    if e.status == 401:
        return KubernetesError(
            "kubernetes: unauthorized (401): the credentials in the kubeconfig were rejected"
        )
    if e.status == 403:
        custom = re.fullmatch(r"/apis/([^/]+)/[^/]+/([^/?]+)", kind)
        if custom:
            group, plural = custom.groups()
            detail = _one_line(message) or f"cannot list {plural}.{group}"
            wanted = needs or f'get/list/watch on {plural} in API group "{group}"'
        else:
            detail = _one_line(message) or f"cannot list {kind}"
            wanted = needs or "get/list/watch on pods, nodes, namespaces and resourcequotas"
        return KubernetesError(f"kubernetes: forbidden (403): {detail}; gpuwatch needs {wanted}")
    return KubernetesError(f"kubernetes: listing {kind} failed ({e.status} {e.reason}): {_one_line(message)}")


def _timed_out(e: BaseException) -> bool:
    """Whether a failed request ran out of time (rather than being refused or cut)."""
    inner = getattr(e, "reason", None)
    timeouts = (DeadlineError, TimeoutError, urllib3.exceptions.TimeoutError)
    return isinstance(e, timeouts) or isinstance(inner, timeouts)


def _reason(e: BaseException) -> str:
    inner = getattr(e, "reason", None)
    return _one_line(str(inner or e))[:200]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    return utc(datetime.fromisoformat(text.replace("Z", "+00:00")))


def _gpu_resources(resources: Mapping[str, Any], where: str, problems: _Problems) -> dict[str, float]:
    """GPU extended resources with a positive quantity; zero-valued stale ones are ignored."""
    out: dict[str, float] = {}
    for name, raw in resources.items():
        if not is_gpu_resource(name):
            continue
        try:
            value = parse_quantity(raw)
        except DataError:
            problems.add(f"{where}: malformed quantity {name}={raw!r} skipped")
            continue
        if not math.isfinite(value) or value < 0:
            problems.add(f"{where}: malformed quantity {name}={raw!r} skipped")
            continue
        if value > 0:
            out[name] = value
    return out


def parse_node(obj: JsonObject, problems: _Problems) -> Node | None:
    """A Node with GPUs, from its GFD labels and status; None for a node without GPUs."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    name = meta.get("name", "")
    labels: dict[str, str] = meta.get("labels") or {}
    capacity = _gpu_resources(status.get("capacity") or {}, f"node {name}", problems)
    allocatable = _gpu_resources(status.get("allocatable") or {}, f"node {name}", problems)
    product = node_product(labels)
    if not capacity and not product:
        return None
    # Units per GPU: time-sliced replicas (NVIDIA), or compute partitions behind amd.com/gpu (AMD).
    replicas = max(1, _int_label(labels, "nvidia.com/gpu.replicas", 1, name, problems))
    if RESOURCE_AMD_GPU in capacity:
        replicas = amd_partitions(labels.get(AMD_PARTITION_LABEL, ""))
    whole = sum(
        ge_per_unit(r, replicas) * q for r, q in capacity.items() if not r.startswith(RESOURCE_MIG_PREFIX)
    )
    count_default = int(whole + 1e-9)
    gpu_count = _int_label(labels, "nvidia.com/gpu.count", count_default, name, problems)
    gpu_count = _int_label(labels, "habana.ai/device.count", gpu_count, name, problems)
    memory_bytes = _memory_bytes(labels, name, problems)
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return Node(
        name=name,
        product=product or "unknown",
        gpu_count=gpu_count,
        gpu_memory_bytes=memory_bytes,
        capacity=capacity,
        allocatable=allocatable,
        replicas=replicas,
        mig_strategy=labels.get("nvidia.com/mig.strategy", "none"),
        ready=conditions.get("Ready") == "True",
        unschedulable=bool((obj.get("spec") or {}).get("unschedulable")),
        labels=labels,
        taints=parse_taints((obj.get("spec") or {}).get("taints")),
    )


def parse_taints(items: Any) -> tuple[Taint, ...]:
    """Taints as a node's spec.taints (or a Kueue flavor's nodeTaints) list them; keyless ones skipped."""
    return tuple(
        Taint(key=str(t["key"]), value=str(t.get("value") or ""), effect=str(t.get("effect") or ""))
        for t in items or []
        if isinstance(t, dict) and t.get("key")
    )


def parse_tolerations(items: Any) -> tuple[Toleration, ...]:
    """Tolerations as a pod's spec (or a Kueue flavor) lists them (operator Equal when unset)."""
    return tuple(
        Toleration(
            key=str(t.get("key") or ""),
            operator=str(t.get("operator") or "Equal"),
            value=str(t.get("value") or ""),
            effect=str(t.get("effect") or ""),
        )
        for t in items or []
        if isinstance(t, dict)
    )


def _memory_bytes(labels: Mapping[str, str], node: str, problems: _Problems) -> float:
    """Memory of one of the node's GPUs: GFD's nvidia.com/gpu.memory (MiB), or AMD's node labeller's
    amd.com/gpu.vram ("192G": GiB); NaN when neither says (Habana's feature discovery does not)."""
    memory_mib = _int_label(labels, "nvidia.com/gpu.memory", -1, node, problems)
    if memory_mib >= 0:
        return memory_mib * BYTES_PER_MIB
    vram = labels.get("amd.com/gpu.vram") or labels.get("beta.amd.com/gpu.vram")
    if vram is None:
        return math.nan
    try:
        return int(vram.removesuffix("G")) * 1024 * BYTES_PER_MIB
    except ValueError:
        problems.add(f"node {node}: label amd.com/gpu.vram={vram!r} is not a size in GiB")
        return math.nan


def _int_label(labels: Mapping[str, str], key: str, default: int, node: str, problems: _Problems) -> int:
    raw = labels.get(key)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        problems.add(f"node {node}: label {key}={raw!r} is not a number")
        return default


def parse_pod(obj: JsonObject, problems: _Problems) -> Pod | None:
    """A Pod with its GPU requests (extended resources: the limits, summed over containers)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    if not namespace or not name:
        problems.add("a pod without namespace or name was skipped")
        return None
    where = f"pod {namespace}/{name}"
    requests: dict[str, float] = {}
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        # Extended resources cannot be overcommitted: limits == requests, and limits alone are allowed.
        merged = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        for res, qty in _gpu_resources(merged, where, problems).items():
            requests[res] = requests.get(res, 0.0) + qty
    for container in spec.get("initContainers") or []:
        resources = container.get("resources") or {}
        merged = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        for res, qty in _gpu_resources(merged, where, problems).items():
            requests[res] = max(requests.get(res, 0.0), qty)
    finished = [
        _time(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for cs in status.get("containerStatuses") or []
    ]
    done = [t for t in finished if t is not None]
    containers = spec.get("containers") or [{}]
    return Pod(
        namespace=namespace,
        name=name,
        uid=meta.get("uid", ""),
        phase=status.get("phase", "Unknown"),
        created_at=_time(meta.get("creationTimestamp")) or datetime(1970, 1, 1, tzinfo=UTC),
        node=spec.get("nodeName") or None,
        started_at=_time(status.get("startTime")),
        finished_at=max(done) if done and status.get("phase") in ("Succeeded", "Failed") else None,
        labels=meta.get("labels") or {},
        gpu_requests=requests,
        node_selector_product=_selected_product(spec),
        container=containers[0].get("name", ""),
        placement=_placement(spec, status) if status.get("phase") == "Pending" else None,
    )


def _placement(spec: JsonObject, status: JsonObject) -> Placement:
    """A pending pod's node selector, required node affinity, tolerations and scheduling gates, and the
    scheduler's message when its PodScheduled condition is False."""
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = tuple(
        tuple(_requirement(e, on_field=False) for e in term.get("matchExpressions") or [])
        + tuple(_requirement(e, on_field=True) for e in term.get("matchFields") or [])
        for term in required.get("nodeSelectorTerms") or []
    )
    message = next(
        (
            _one_line(str(c.get("message") or ""))
            for c in status.get("conditions") or []
            if c.get("type") == "PodScheduled" and c.get("status") == "False"
        ),
        "",
    )
    return Placement(
        node_selector={str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()},
        node_affinity=terms,
        tolerations=parse_tolerations(spec.get("tolerations")),
        scheduling_gates=tuple(str(g.get("name", "")) for g in spec.get("schedulingGates") or []),
        scheduler_message=message,
    )


def _requirement(expression: JsonObject, *, on_field: bool) -> NodeRequirement:
    return NodeRequirement(
        key=str(expression.get("key", "")),
        operator=str(expression.get("operator", "")),
        values=tuple(str(v) for v in expression.get("values") or []),
        on_field=on_field,
    )


def _selected_product(spec: JsonObject) -> str | None:
    """The GPU product a pod is pinned to by nodeSelector or required node affinity, if one pool."""
    selected = node_product(spec.get("nodeSelector") or {})
    if selected:
        return selected
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in affinity.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") in PRODUCT_LABELS and expr.get("operator") == "In":
                values = expr.get("values") or []
                if values and len({normalize_product(v) for v in values}) == 1:
                    return str(values[0])
    return None


def is_exporter_pod(obj: JsonObject) -> bool:
    containers = (obj.get("spec") or {}).get("containers") or []
    return any(c.get("name") in EXPORTER_CONTAINERS for c in containers)


def parse_namespace(obj: JsonObject) -> Namespace:
    meta = obj.get("metadata") or {}
    return Namespace(name=meta.get("name", ""), labels=meta.get("labels") or {})


def parse_quota(obj: JsonObject, problems: _Problems) -> ResourceQuota | None:
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    where = f"resourcequota {meta.get('namespace')}/{meta.get('name')}"

    def gpu_only(values: Mapping[str, Any]) -> dict[str, float]:
        stripped = {k.removeprefix("requests.").removeprefix("limits."): v for k, v in values.items()}
        return {f"requests.{k}": v for k, v in _gpu_resources(stripped, where, problems).items()}

    hard = gpu_only(status.get("hard") or (obj.get("spec") or {}).get("hard") or {})
    if not hard:
        return None
    return ResourceQuota(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        hard=hard,
        used=gpu_only(status.get("used") or {}),
    )
