"""A Kubernetes API test server speaking the real core/v1 list protocol over a simulated fleet, with Kueue's
kueue.x-k8s.io custom resources beside them (or without, as a cluster that has no Kueue)."""

import base64
import binascii
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Self
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from gpuwatch.sim.fleet import SimulatedFleet
from gpuwatch.sim.kubeevents import ChangeLog, watch_lines
from gpuwatch.sim.kubehttp import Handler, HttpServer
from gpuwatch.sim.kubeobjects import (
    KUBELET_VERSION,
    JsonObject,
    namespace_object,
    node_object,
    pod_object,
    pods_without_gpus,
    quota_object,
    status_object,
)
from gpuwatch.sim.kubeselectors import (
    SelectorError,
    field_value,
    parse_field_selector,
    parse_label_selector,
)
from gpuwatch.sim.kubetables import INCLUDE_OBJECT, table, table_version
from gpuwatch.sim.kueuecrds import (
    KUEUE_GROUP,
    KUEUE_RESOURCES,
    KUEUE_VERSIONS,
    at_version,
)
from gpuwatch.sim.kueuecrds import table as kueue_table
from gpuwatch.sim.kueueobjects import kueue_objects
from gpuwatch.sim.tls import ServerCertificate, self_signed

__all__ = [
    "DEFAULT_TOKEN",
    "KUEUE_VERSIONS",
    "SERVICE_ACCOUNT_USER",
    "KubeApiServer",
    "namespace_object",
    "node_object",
    "pod_object",
    "quota_object",
    "status_object",
    "write_kubeconfig",
]

DEFAULT_TOKEN = "gpuwatch-test-token"
SERVICE_ACCOUNT_USER = "system:serviceaccount:monitoring:gpuwatch"
# List resourceVersions start above every object's own resourceVersion (kubeobjects keeps those < 91000).
_BASE_RESOURCE_VERSION = 100_000
_PUBLIC_PATHS = frozenset({"/version", "/healthz", "/livez", "/readyz"})
_EXPIRED_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - objects "
    "that were created, modified, or deleted between the time the first chunk was returned and now may show "
    "up in the list."
)


@dataclass(frozen=True, slots=True)
class _Resource:
    name: str  # plural, as in URLs and RBAC
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...]
    fields: frozenset[str]  # field selectors the real API server accepts for this resource


_POD_FIELDS = frozenset(
    {
        "metadata.name",
        "metadata.namespace",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    }
)
_NAMES = frozenset({"metadata.name", "metadata.namespace"})
_RESOURCES = {
    r.name: r
    for r in (
        _Resource("pods", "pod", "Pod", True, ("po",), _POD_FIELDS),
        _Resource(
            "nodes", "node", "Node", False, ("no",), frozenset({"metadata.name", "spec.unschedulable"})
        ),
        _Resource(
            "namespaces",
            "namespace",
            "Namespace",
            False,
            ("ns",),
            frozenset({"metadata.name", "status.phase"}),
        ),
        _Resource("resourcequotas", "resourcequota", "ResourceQuota", True, ("quota",), _NAMES),
    )
}


class ApiError(Exception):
    """A request the server answers with a `kind: Status` failure."""

    def __init__(self, code: int, reason: str, message: str, *, details: JsonObject | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.body = status_object(code, reason, message, details=details)


def _bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


# ---------------------------------------------------------------------------------------------
# The server


class KubeApiServer:
    """Serves a SimulatedFleet at `fleet.now` as a read-only core/v1 API server on 127.0.0.1.

    HTTPS (unless tls=False) with a certificate from a CA generated at start (`certificate.ca_pem`,
    written into kubeconfigs), as clients expect: kubectl sends a bearer token over TLS only.
    Lists paginate with `limit`/`continue` (opaque base64 JSON tokens holding the list resourceVersion
    and an offset) and answer 410 Expired once `expire_continue_tokens()` moved the resourceVersion on
    or a token outlived `continue_ttl_seconds`; asked for `as=Table` (kubectl), they answer the Table
    form with the real server's columns. With a `token`, every API path wants
    `Authorization: Bearer <token>` (401 otherwise); token=None serves anyone. Resources in `forbidden`
    answer 403 (Kueue's by plural: workloads, clusterqueues, ...). `extra_pods` are raw Pod objects
    appended to pod lists as-is (to inject malformed data);
    `cpu_pods` adds that many pods without GPUs (a large cluster's node agents and services).
    `watch=true` streams the changes made with apply() and delete() (kubeevents); the server keeps no
    snapshots, so any write expires the continue tokens issued before it, as a compaction would.

    Kueue (kueueobjects) is served at each of `kueue_versions` (the first preferred) under
    /apis/kueue.x-k8s.io, listed with the same protocol, got, and announced by API discovery;
    kueue_versions=() is a cluster without Kueue: its group is absent from /apis and its paths answer
    404. Watches of Kueue objects are not simulated.
    """

    def __init__(
        self,
        fleet: SimulatedFleet,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = DEFAULT_TOKEN,
        forbidden: Collection[str] = (),
        continue_ttl_seconds: float | None = None,
        extra_pods: Sequence[JsonObject] = (),
        cpu_pods: int = 0,
        clock: Callable[[], float] = time.monotonic,
        tls: bool = True,
        watch_timeout_seconds: float = 60.0,
        bookmark_seconds: float = 1.0,
        event_capacity: int = 10_000,
        kueue_versions: Sequence[str] = KUEUE_VERSIONS,
    ) -> None:
        unknown = set(forbidden) - set(_RESOURCES) - set(KUEUE_RESOURCES)
        if unknown:
            raise ValueError(f"forbidden names unknown resources: {sorted(unknown)}")
        if set(kueue_versions) - set(KUEUE_VERSIONS):
            raise ValueError(
                f"kueue_versions: Kueue serves {', '.join(KUEUE_VERSIONS)}, not {kueue_versions}"
            )
        self.kueue_versions = tuple(kueue_versions)
        self.fleet = fleet
        self.host = host
        self.port = port
        self.token = token
        self.forbidden = frozenset(forbidden)
        self.continue_ttl_seconds = continue_ttl_seconds
        self.certificate: ServerCertificate | None = self_signed([host]) if tls else None
        self.request_log: list[tuple[str, str, int]] = []
        self.accept_log: list[str] = []  # the Accept header of each request in request_log ("" if none)
        self._clock = clock
        self._lock = threading.Lock()
        self._log = ChangeLog(_BASE_RESOURCE_VERSION, capacity=event_capacity)
        self.watch_timeout_seconds = watch_timeout_seconds
        self.bookmark_seconds = bookmark_seconds
        self._httpd: HttpServer | None = None
        self._thread: threading.Thread | None = None
        pods = sorted(
            fleet.api_pods() + pods_without_gpus(fleet, cpu_pods), key=lambda p: (p.namespace, p.name)
        )
        self._objects: dict[str, list[JsonObject]] = {
            "pods": [pod_object(fleet, p) for p in pods] + [dict(p) for p in extra_pods],
            "nodes": [node_object(fleet, n) for n in sorted(fleet.nodes, key=lambda n: n.name)],
            "namespaces": [
                namespace_object(fleet, n) for n in sorted(fleet.namespaces, key=lambda n: n.name)
            ],
            "resourcequotas": [
                quota_object(fleet, q) for q in sorted(fleet.quotas, key=lambda q: (q.namespace, q.name))
            ],
        }
        if self.kueue_versions:
            self._objects |= kueue_objects(fleet)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> Self:
        """Bind and serve in a daemon thread (it dies with the process if close() is never called)."""
        if self._httpd is not None:
            return self
        httpd = HttpServer((self.host, self.port), Handler)
        httpd.api = self
        httpd.tls = self.certificate.server_context() if self.certificate is not None else None
        self.port = httpd.server_address[1]
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="kubeapi-sim", daemon=True
        )
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("KubeApiServer is not started")
        scheme = "https" if self.certificate is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    def close(self) -> None:
        """Stop serving and release the port; safe to call twice."""
        httpd, thread = self._httpd, self._thread
        self._httpd, self._thread = None, None
        self._log.close()
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
            httpd.drop_connections()
        if thread is not None:
            thread.join(timeout=10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- resourceVersion and continue tokens -----------------------------------------------------

    @property
    def resource_version(self) -> str:
        return str(self._log.version)

    def expire_continue_tokens(self) -> None:
        """Move the resourceVersion on (as a compaction would): every token issued so far answers 410,
        and so does every watch from a version before now."""
        self._log.compact()

    def apply(self, resource: str, obj: JsonObject) -> JsonObject:
        """Create or replace an object (by namespace and name): watches see ADDED or MODIFIED."""
        key = _key(obj)
        with self._lock:
            objects = self._objects[resource]
            index = next((i for i, o in enumerate(objects) if _key(o) == key), None)
            stamped = self._log.record(resource, "ADDED" if index is None else "MODIFIED", obj)
            if index is None:
                objects.append(stamped)
            else:
                objects[index] = stamped
            return stamped

    def delete(self, resource: str, namespace: str | None, name: str) -> None:
        """Remove an object: watches see DELETED (a KeyError when there is none)."""
        with self._lock:
            objects = self._objects[resource]
            index = next((i for i, o in enumerate(objects) if _key(o) == (namespace or "", name)), None)
            if index is None:
                raise KeyError(f"{resource} {namespace or ''}/{name}")
            gone = objects.pop(index)
            self._log.record(resource, "DELETED", gone)

    def drop_connections(self) -> None:
        """Cut every open connection, watches included, as a load balancer restart would."""
        if self._httpd is not None:
            self._httpd.drop_connections()

    def write_kubeconfig(
        self, path: str | os.PathLike[str], *, context: str = "gpuwatch-sim", namespace: str = "default"
    ) -> None:
        """A kubeconfig for this server: its URL, CA and token."""
        write_kubeconfig(
            path,
            server_url=self.url,
            token=self.token,
            ca_pem=self.ca_pem,
            context=context,
            namespace=namespace,
        )

    @property
    def ca_pem(self) -> bytes | None:
        """The CA that signed the server's certificate (None over plain http)."""
        return self.certificate.ca_pem if self.certificate is not None else None

    def _encode_continue(self, rv: str, offset: int, query: str) -> str:
        payload = {"v": "meta.k8s.io/v1", "rv": int(rv), "start": offset, "q": query, "t": self._clock()}
        raw = json.dumps(payload, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def _decode_continue(self, token: str, query: str, rv: str) -> int:
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            payload = json.loads(raw)
            offset, token_rv, issued, token_query = (
                payload["start"],
                payload["rv"],
                payload["t"],
                payload["q"],
            )
            if not isinstance(offset, int) or offset < 0 or not isinstance(token_rv, int):
                raise ValueError("bad offset")
        except (binascii.Error, ValueError, KeyError, TypeError) as e:
            raise _bad_request(f"continue key is not valid: {e}") from e
        if token_query != query:
            raise _bad_request("continue key is not valid: it was issued for a different list request")
        too_old = (
            self.continue_ttl_seconds is not None
            and self._clock() - float(issued) > self.continue_ttl_seconds
        )
        if str(token_rv) != rv or too_old:
            fresh = self._encode_continue(rv, offset, query)
            error = ApiError(410, "Expired", _EXPIRED_MESSAGE)
            error.body["metadata"] = {"continue": fresh}
            raise error
        return offset

    # -- request handling ------------------------------------------------------------------------

    def log_request(self, method: str, target: str, code: int, accept: str | None = None) -> None:
        with self._lock:
            self.request_log.append((method, target, code))
            self.accept_log.append(accept or "")

    def handle(
        self, method: str, target: str, authorization: str | None, accept: str | None = None
    ) -> tuple[int, str, bytes | Iterator[bytes]]:
        """Answer one request: (HTTP status, content type, body); lists and objects as a Table when the
        Accept header asks for one; a watch as an iterator of event lines."""
        parts = urlsplit(target)
        path = "/" + "/".join(s for s in unquote(parts.path).split("/") if s)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        try:
            self._authenticate(path, authorization)
            if method not in ("GET", "HEAD"):
                raise ApiError(
                    405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
                )
            if path in ("/healthz", "/livez", "/readyz"):
                return 200, "text/plain; charset=utf-8", b"ok"
            if query.get("watch") in ("true", "1"):
                return 200, "application/json", self._watch(path, query)
            body = self._route(path, query)
            version = table_version(accept)
            if version is not None:
                body = self._as_table(body, version, query.get("includeObject") or "Metadata")
            code = 200
        except ApiError as e:
            body, code = e.body, e.code
        except Exception as e:  # a bug here must still answer like an API server, not drop the connection
            body, code = status_object(500, "InternalError", f"an error on the server ({e!r})"), 500
        return code, "application/json", json.dumps(body, separators=(",", ":")).encode()

    def _as_table(self, body: JsonObject, version: str, include_object: str) -> JsonObject:
        kind = str(body.get("kind", ""))
        group, _, group_version = str(body.get("apiVersion", "")).rpartition("/")
        if group == KUEUE_GROUP:
            plural = next(r.plural for r in KUEUE_RESOURCES.values() if kind in (r.kind, f"{r.kind}List"))
            render = partial(kueue_table, plural, group_version, table_version=version)
        else:
            resource = next((r.name for r in _RESOURCES.values() if kind in (r.kind, f"{r.kind}List")), None)
            if resource is None:
                return body  # discovery and the like have no Table form
            render = partial(table, resource, version=version)
        if include_object not in INCLUDE_OBJECT:
            raise _bad_request(
                f"includeObject: unsupported value {include_object!r}: one of {', '.join(INCLUDE_OBJECT)}"
            )
        listed = kind.endswith("List")
        return render(
            body["items"] if listed else [body],
            metadata=body["metadata"] if listed else {"resourceVersion": self.resource_version},
            now=self.fleet.now,
            include_object=include_object,
        )

    def _authenticate(self, path: str, authorization: str | None) -> None:
        if self.token is None:
            return
        if authorization is None and path in _PUBLIC_PATHS:
            return  # anonymous requests may read /version and health (system:public-info-viewer)
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not _same(given.strip(), self.token):
            raise ApiError(401, "Unauthorized", "Unauthorized")

    def _route(self, path: str, query: dict[str, str]) -> JsonObject:
        seg = path.strip("/").split("/") if path != "/" else []
        if seg == ["version"]:
            return _VERSION
        if seg == ["api"]:
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self.port}"}
                ],
            }
        if seg == ["apis"]:
            groups = [self._kueue_group()] if self.kueue_versions else []
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        if seg[:2] == ["apis", KUEUE_GROUP] and self.kueue_versions:
            return self._route_kueue(seg[2:], query)
        if seg == ["api", "v1"]:
            return _discovery()
        if len(seg) >= 3 and seg[:2] == ["api", "v1"]:
            rest = seg[2:]
            if len(rest) == 1 and rest[0] in _RESOURCES:
                return self._list(rest[0], None, query)
            if len(rest) == 2 and rest[0] in ("nodes", "namespaces"):
                return self._get(rest[0], None, rest[1])
            if len(rest) in (3, 4) and rest[0] == "namespaces" and rest[2] in ("pods", "resourcequotas"):
                if len(rest) == 3:
                    return self._list(rest[2], rest[1], query)
                return self._get(rest[2], rest[1], rest[3])
        raise ApiError(404, "NotFound", "the server could not find the requested resource", details={})

    def _kueue_group(self) -> JsonObject:
        versions = [{"groupVersion": f"{KUEUE_GROUP}/{v}", "version": v} for v in self.kueue_versions]
        return {"name": KUEUE_GROUP, "versions": versions, "preferredVersion": versions[0]}

    def _route_kueue(self, rest: list[str], query: dict[str, str]) -> JsonObject:
        """/apis/kueue.x-k8s.io[/<version>[/namespaces/<ns>]/<plural>[/<name>]]."""
        if not rest:
            return {"kind": "APIGroup", "apiVersion": "v1"} | self._kueue_group()
        version, rest = rest[0], rest[1:]
        if version in self.kueue_versions:
            if not rest:
                return _kueue_discovery(version)
            namespace = None
            if len(rest) >= 3 and rest[0] == "namespaces":
                namespace, rest = rest[1], rest[2:]
            found = KUEUE_RESOURCES.get(rest[0]) if len(rest) in (1, 2) else None
            if found is not None and (namespace is None or found.namespaced):
                if len(rest) == 1:
                    return self._list(found.plural, namespace, query, version=version)
                if namespace is not None or not found.namespaced:
                    return self._get(found.plural, namespace, rest[1], version=version)
        raise ApiError(404, "NotFound", "the server could not find the requested resource", details={})

    def _authorize(self, verb: str, resource: str, namespace: str | None, name: str | None) -> None:
        if resource not in self.forbidden:
            return
        group = KUEUE_GROUP if resource in KUEUE_RESOURCES else ""
        scope = f'in the namespace "{namespace}"' if namespace is not None else "at the cluster scope"
        subject = f'{resource}.{group} "{name}"' if group else f'{resource} "{name}"'
        if name is None:
            subject = f"{resource}.{group}" if group else resource
        message = (
            f'{subject} is forbidden: User "{SERVICE_ACCOUNT_USER}" cannot {verb} resource "{resource}" '
            f'in API group "{group}" {scope}'
        )
        details: JsonObject = {"kind": resource} if name is None else {"name": name, "kind": resource}
        if group:
            details["group"] = group
        raise ApiError(403, "Forbidden", message, details=details)

    def _get(self, resource: str, namespace: str | None, name: str, *, version: str = "") -> JsonObject:
        """An object; `version`: the kueue.x-k8s.io version asked for (a Kueue resource), else core/v1."""
        self._authorize("get", resource, namespace, name)
        for obj in self._objects[resource]:
            found = obj.get("metadata")
            meta: JsonObject = found if isinstance(found, dict) else {}
            if meta.get("name") == name and (namespace is None or meta.get("namespace") == namespace):
                if version:
                    return at_version(resource, obj, version)
                return _with_kind(obj, _RESOURCES[resource].kind)
        group = KUEUE_GROUP if version else ""
        details: JsonObject = {"name": name, "kind": resource} | ({"group": group} if group else {})
        subject = f"{resource}.{group}" if group else resource
        raise ApiError(404, "NotFound", f'{subject} "{name}" not found', details=details)

    def _list(
        self, resource: str, namespace: str | None, query: dict[str, str], *, version: str = ""
    ) -> JsonObject:
        """A list, paginated; `version`: the kueue.x-k8s.io version asked for (a Kueue resource)."""
        self._authorize("list", resource, namespace, None)
        matches = self._matcher(resource, namespace, query)
        with self._lock:
            items = [obj for obj in self._objects[resource] if matches(obj)]
        limit = _limit(query.get("limit", ""))
        token = query.get("continue", "")
        rv = self.resource_version
        list_query = hashlib.sha256(
            json.dumps(
                [resource, version, namespace, query.get("fieldSelector", ""), query.get("labelSelector", "")]
            ).encode()
        ).hexdigest()[:16]
        start = 0
        if token:
            if query.get("resourceVersion"):
                raise _bad_request("specifying resource version is not allowed when using continue")
            start = self._decode_continue(token, list_query, rv)
        end = len(items) if limit <= 0 else min(len(items), start + limit)
        meta: JsonObject = {"resourceVersion": rv}
        if end < len(items):
            meta["continue"] = self._encode_continue(rv, end, list_query)
            meta["remainingItemCount"] = len(items) - end
        if version:
            return {
                "kind": f"{KUEUE_RESOURCES[resource].kind}List",
                "apiVersion": f"{KUEUE_GROUP}/{version}",
                "metadata": meta,
                "items": [at_version(resource, obj, version) for obj in items[start:end]],
            }
        return {
            "kind": f"{_RESOURCES[resource].kind}List",
            "apiVersion": "v1",
            "metadata": meta,
            "items": items[start:end],
        }

    def _matcher(
        self, resource: str, namespace: str | None, query: dict[str, str]
    ) -> Callable[[JsonObject], bool]:
        """Whether an object is in the namespace and matches the field and label selectors."""
        fields = _RESOURCES[resource].fields if resource in _RESOURCES else _NAMES  # CRDs: names only
        try:
            predicates = parse_field_selector(query.get("fieldSelector", ""), fields)
            predicates += parse_label_selector(query.get("labelSelector", ""))
        except SelectorError as e:
            raise _bad_request(str(e)) from e

        def matches(obj: JsonObject) -> bool:
            in_namespace = namespace is None or field_value(obj, "metadata.namespace") == namespace
            return in_namespace and all(p(obj) for p in predicates)

        return matches

    def _watch(self, path: str, query: dict[str, str]) -> Iterator[bytes]:
        """The watch of a collection path (/api/v1/pods, /api/v1/namespaces/x/pods,
        /apis/kueue.x-k8s.io/v1beta2/workloads, ...)."""
        collection = self._collection(path.strip("/").split("/"))
        if collection is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", details={})
        resource, namespace, version = collection
        self._authorize("watch", resource, namespace, None)
        matches = self._matcher(resource, namespace, query)
        if version:
            kind = KUEUE_RESOURCES[resource].kind
            api_version = f"{KUEUE_GROUP}/{version}"

            def render(obj: JsonObject) -> JsonObject:
                return at_version(resource, obj, version)
        else:
            kind, api_version = _RESOURCES[resource].kind, "v1"

            def render(obj: JsonObject) -> JsonObject:
                return _with_kind(obj, kind)

        def initial() -> list[JsonObject]:
            with self._lock:
                return [render(o) for o in self._objects[resource] if matches(o)]

        timeout = min(
            float(query.get("timeoutSeconds") or self.watch_timeout_seconds), self.watch_timeout_seconds
        )
        return watch_lines(
            self._log,
            resource=resource,
            kind=kind,
            since=query.get("resourceVersion", ""),
            initial=initial,
            matches=matches,
            bookmarks=query.get("allowWatchBookmarks") in ("true", "1"),
            timeout_seconds=timeout,
            bookmark_seconds=self.bookmark_seconds,
            render=render,
            api_version=api_version,
        )

    def _collection(self, seg: list[str]) -> tuple[str, str | None, str] | None:
        """(resource, namespace or None, Kueue version or "") of a watchable collection path's segments."""
        if len(seg) == 3 and seg[:2] == ["api", "v1"] and seg[2] in _RESOURCES:
            return seg[2], None, ""
        if len(seg) == 5 and seg[:3] == ["api", "v1", "namespaces"] and seg[4] in ("pods", "resourcequotas"):
            return seg[4], seg[3], ""
        if seg[:2] != ["apis", KUEUE_GROUP] or len(seg) not in (4, 6) or seg[2] not in self.kueue_versions:
            return None
        found = KUEUE_RESOURCES.get(seg[-1])
        if found is None:
            return None
        if len(seg) == 4:
            return found.plural, None, seg[2]
        return (found.plural, seg[4], seg[2]) if seg[3] == "namespaces" and found.namespaced else None


def _key(obj: JsonObject) -> tuple[str, str]:
    found = obj.get("metadata")
    meta: JsonObject = found if isinstance(found, dict) else {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _same(given: str, expected: str) -> bool:
    return hashlib.sha256(given.encode()).digest() == hashlib.sha256(expected.encode()).digest()


def _limit(text: str) -> int:
    if not text:
        return 0
    try:
        return int(text)
    except ValueError as e:
        raise _bad_request(f"invalid limit {text!r}: must be an integer") from e


def _with_kind(obj: JsonObject, kind: str) -> JsonObject:
    return {"apiVersion": "v1", "kind": kind} | {
        k: v for k, v in obj.items() if k not in ("apiVersion", "kind")
    }


def _discovery() -> JsonObject:
    return {
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            {
                "name": r.name,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "list"],
                "shortNames": list(r.short_names),
            }
            for r in _RESOURCES.values()
        ],
    }


def _kueue_discovery(version: str) -> JsonObject:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{KUEUE_GROUP}/{version}",
        "resources": [
            {
                "name": r.plural,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "list"],
                "shortNames": list(r.short_names),
            }
            for r in KUEUE_RESOURCES.values()
        ],
    }


_VERSION: JsonObject = {
    "major": "1",
    "minor": KUBELET_VERSION.split(".")[1],
    "gitVersion": f"{KUBELET_VERSION}+gpuwatch-sim",
    "gitCommit": hashlib.sha1(b"gpuwatch-sim", usedforsecurity=False).hexdigest(),
    "gitTreeState": "clean",
    "buildDate": "2024-12-10T18:44:00Z",
    "goVersion": "go1.22.9",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def write_kubeconfig(
    path: str | os.PathLike[str],
    *,
    server_url: str,
    token: str | None,
    ca_pem: bytes | None = None,
    context: str = "gpuwatch-sim",
    namespace: str = "default",
) -> None:
    """Write a standard kubeconfig (one cluster, user, context, made current), mode 0600: it holds a token.

    ca_pem: the CA that signed an https server's certificate (certificate-authority-data)."""
    user: JsonObject = {"token": token} if token is not None else {}
    cluster: JsonObject = {"server": server_url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": context, "cluster": cluster}],
        "users": [{"name": context, "user": user}],
        "contexts": [
            {"name": context, "context": {"cluster": context, "user": context, "namespace": namespace}}
        ],
        "current-context": context,
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        yaml.safe_dump(config, f, sort_keys=False)
