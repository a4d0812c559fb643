"""The cluster followed by watches (export and serve): list once, then no list per cycle; a 410 lists
again; a cut watch resumes from where it was. Against the simulated API server over HTTPS, read by the
official client."""

import copy
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.kubeapi import KubeApiServer, pod_object
from gpuwatch.sources.clustercache import ClusterCache
from gpuwatch.sources.kubernetes import ClusterState, KubernetesSource

pytestmark = pytest.mark.integration
END = datetime(2026, 11, 20, tzinfo=UTC)


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=3, end=END, days=0.1)


@pytest.fixture
def server(fleet: SimulatedFleet) -> Iterator[KubeApiServer]:
    with KubeApiServer(fleet, token="watch-token", bookmark_seconds=0.2, watch_timeout_seconds=2) as s:
        yield s


@pytest.fixture
def cache(server: KubeApiServer, tmp_path: Path) -> Iterator[ClusterCache]:
    server.write_kubeconfig(tmp_path / "kubeconfig")
    source = KubernetesSource(kubeconfig=str(tmp_path / "kubeconfig"))
    cache = ClusterCache(source, timeout_seconds=2, retry_seconds=0.1)
    yield cache
    cache.stop()


def _pods(state: ClusterState) -> set[tuple[str, str]]:
    return {(p.namespace, p.name) for p in state.pods}


def _eventually(check: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the cache did not follow the change"
        time.sleep(0.05)


def _new_gpu_pod(fleet: SimulatedFleet, name: str) -> dict[str, object]:
    template = next(p for p in fleet.api_pods() if p.phase == "Running" and p.gpu_requests)
    obj = copy.deepcopy(pod_object(fleet, template))
    obj["metadata"]["name"] = name  # type: ignore[index]
    obj["metadata"].pop("uid", None)  # type: ignore[union-attr]
    return obj


def _lists(server: KubeApiServer, since: int) -> list[str]:
    return [t for _, t, _ in server.request_log[since:] if t.startswith("/api/v1/") and "watch=" not in t]


def test_the_watch_stream_speaks_the_api_servers_protocol(
    fleet: SimulatedFleet, server: KubeApiServer, cache: ClusterCache
) -> None:
    source = cache.source
    namespaces, version, _ = source.list_versioned("namespaces")
    server.apply("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "late"}})
    server.delete("namespaces", None, "late")
    events = list(source.watch_raw("namespaces", resource_version=version, timeout_seconds=1))
    changes = [(e["type"], e["object"]["metadata"]["name"]) for e in events if e["type"] != "BOOKMARK"]
    assert changes == [("ADDED", "late"), ("DELETED", "late")]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and versions[0] > int(version)
    assert events[-1]["type"] == "BOOKMARK"  # bookmarks carry the version a resumed watch starts from
    everything = list(source.watch_raw("namespaces", resource_version="0", timeout_seconds=1))
    assert {e["object"]["metadata"]["name"] for e in everything if e["type"] == "ADDED"} == {
        n["metadata"]["name"] for n in namespaces
    }
    server.expire_continue_tokens()
    (gone,) = list(source.watch_raw("namespaces", resource_version=version, timeout_seconds=1))
    assert gone["type"] == "ERROR" and gone["object"]["code"] == 410 and gone["object"]["reason"] == "Expired"


def test_the_cache_equals_a_list_and_steady_cycles_send_no_list(
    fleet: SimulatedFleet, server: KubeApiServer, cache: ClusterCache
) -> None:
    listed = cache.source.cluster_state()
    first = cache.cluster_state()
    assert _pods(first) == _pods(listed) and len(first.pods) > 10
    assert {n.name for n in first.nodes} == {n.name for n in listed.nodes}
    assert first.exporter_pod_nodes == listed.exporter_pod_nodes
    assert {s.lists for s in cache.stats().values()} == {1}  # one list per kind, then watches only
    mark = len(server.request_log)
    started = time.monotonic()
    for _ in range(30):  # cycles over ~3 s: every watch is renewed at least once (timeout 2 s)
        assert _pods(cache.cluster_state()) == _pods(listed)
        time.sleep(0.1)
    elapsed = time.monotonic() - started
    assert _lists(server, mark) == []
    watches = [t for _, t, _ in server.request_log[mark:] if "watch=" in t]
    assert 0 < len(watches) <= 4 * (elapsed / 2 + 1)  # a constant number, whatever the cycles
    assert all("allowWatchBookmarks=true" in t for t in watches)


def test_changes_arrive_by_watch(fleet: SimulatedFleet, server: KubeApiServer, cache: ClusterCache) -> None:
    cache.cluster_state()
    mark = len(server.request_log)
    server.apply("pods", _new_gpu_pod(fleet, "late-arrival-0"))
    _eventually(
        lambda: (
            ("ml-training", "late-arrival-0") in _pods(cache.cluster_state())
            or any(p.name == "late-arrival-0" for p in cache.cluster_state().pods)
        )
    )
    namespace = next(p.namespace for p in cache.cluster_state().pods if p.name == "late-arrival-0")
    server.delete("pods", namespace, "late-arrival-0")
    _eventually(lambda: all(p.name != "late-arrival-0" for p in cache.cluster_state().pods))
    assert _lists(server, mark) == []


def test_a_malformed_pod_arriving_by_watch_is_warned_of_as_a_list_warns_until_it_is_fixed(
    fleet: SimulatedFleet, server: KubeApiServer, cache: ClusterCache
) -> None:
    """Pods are parsed once, as they arrive: the problems of that parse stay with the pod in the cache."""
    cache.cluster_state()
    bad = _new_gpu_pod(fleet, "bad-quantity-0")
    for container in bad["spec"]["containers"]:  # type: ignore[index]
        container["resources"] = {"limits": {"nvidia.com/gpu": "two"}}
    server.apply("pods", bad)
    _eventually(lambda: cache.cluster_state().skipped > 0)
    listed, cached = cache.source.cluster_state(), cache.cluster_state()
    assert cached.skipped == listed.skipped == 1
    assert set(cached.warnings) == set(listed.warnings) and any(
        "bad-quantity-0" in w for w in cached.warnings
    )
    assert cache.cluster_state().skipped == 1  # still there on the next cycle: kept with the pod
    fixed = _new_gpu_pod(fleet, "bad-quantity-0")
    server.apply("pods", fixed)
    _eventually(lambda: cache.cluster_state().skipped == 0)
    assert not any("bad-quantity-0" in w for w in cache.cluster_state().warnings)
    assert any(p.name == "bad-quantity-0" for p in cache.cluster_state().pods)


def test_a_410_lists_again_and_the_cache_stays_true(
    fleet: SimulatedFleet, server: KubeApiServer, cache: ClusterCache
) -> None:
    before = _pods(cache.cluster_state())
    server.expire_continue_tokens()  # a compaction: every watch from an older version answers 410
    _eventually(lambda: cache.stats()["pods"].expired >= 1 and cache.stats()["pods"].lists == 2)
    assert _pods(cache.cluster_state()) == before
    server.apply("pods", _new_gpu_pod(fleet, "after-compaction-0"))
    _eventually(lambda: any(p.name == "after-compaction-0" for p in cache.cluster_state().pods))


def test_a_cut_watch_resumes_without_listing(
    fleet: SimulatedFleet, server: KubeApiServer, cache: ClusterCache
) -> None:
    cache.cluster_state()
    _eventually(
        lambda: any(t.startswith("/api/v1/pods?") and "watch=true" in t for _, t, _ in server.request_log)
    )
    time.sleep(0.5)  # the watch is open and has had a bookmark
    watches = cache.stats()["pods"].watches
    mark = len(server.request_log)
    server.drop_connections()
    server.apply("pods", _new_gpu_pod(fleet, "while-cut-0"))  # made while no watch is open
    _eventually(lambda: any(p.name == "while-cut-0" for p in cache.cluster_state().pods))
    assert cache.stats()["pods"].watches > watches
    assert _lists(server, mark) == []  # resumed from the last version seen, not listed again
