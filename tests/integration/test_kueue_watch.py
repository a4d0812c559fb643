"""Kueue's objects followed by watches (export and serve): listed once, then each change arrives as an
event and is parsed alone; no list per cycle. Against the simulated API server over HTTPS, read by the
official client: v1beta2 and v1beta1, a cluster without Kueue, and a 403."""

import copy
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.core.errors import KubernetesError
from gpuwatch.core.model import KueueState
from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.kubeapi import KubeApiServer
from gpuwatch.sim.kueueobjects import kueue_objects
from gpuwatch.sources.clustercache import KueueCache
from gpuwatch.sources.kubernetes import KubernetesSource
from gpuwatch.sources.kueue import kueue_state

pytestmark = pytest.mark.integration
END = datetime(2026, 11, 20, tzinfo=UTC)
GROUP = "kueue.x-k8s.io"


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=42, end=END, days=1)


def _server(fleet: SimulatedFleet, **kwargs: Any) -> KubeApiServer:
    return KubeApiServer(fleet, token="kueue-watch", bookmark_seconds=0.2, watch_timeout_seconds=2, **kwargs)


def _source(server: KubeApiServer, tmp_path: Path) -> KubernetesSource:
    server.write_kubeconfig(tmp_path / "kubeconfig")
    return KubernetesSource(kubeconfig=str(tmp_path / "kubeconfig"))


@pytest.fixture
def server(fleet: SimulatedFleet) -> Iterator[KubeApiServer]:
    with _server(fleet) as s:
        yield s


@pytest.fixture
def cache(server: KubeApiServer, tmp_path: Path) -> Iterator[KueueCache]:
    cache = KueueCache(_source(server, tmp_path), timeout_seconds=2, retry_seconds=0.1)
    yield cache
    cache.stop()


def _eventually(check: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the cache did not follow the change"
        time.sleep(0.05)


def _kueue_lists(server: KubeApiServer, since: int = 0) -> list[str]:
    return [
        t for _, t, _ in server.request_log[since:] if t.startswith(f"/apis/{GROUP}/") and "watch=" not in t
    ]


def test_the_watched_state_is_the_listed_one_and_follows_changes(
    fleet: SimulatedFleet, server: KubeApiServer, cache: KueueCache, tmp_path: Path
) -> None:
    listed = kueue_state(_source(server, tmp_path))
    assert cache.kueue_state() == listed
    assert (len(listed.cluster_queues), len(listed.workloads)) == (8, 25)
    mark = len(server.request_log)
    # A pending workload is admitted; another is deleted with its Job; a new ClusterQueue appears.
    raw = kueue_objects(fleet)
    pending = next(w for w in raw["workloads"] if not (w.get("status") or {}).get("admission"))
    admitted = copy.deepcopy(pending)
    admitted["status"]["conditions"] = [
        {"type": "QuotaReserved", "status": "True", "lastTransitionTime": "2026-11-19T23:00:00Z"},
        {"type": "Admitted", "status": "True", "lastTransitionTime": "2026-11-19T23:00:00Z"},
    ]
    admitted["status"]["admission"] = {
        "clusterQueue": "batch",
        "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "default-flavor"}}],
    }
    server.apply("workloads", admitted)
    gone = next(w for w in raw["workloads"] if w is not pending)
    server.delete("workloads", gone["metadata"]["namespace"], gone["metadata"]["name"])
    extra = copy.deepcopy(raw["clusterqueues"][0])
    extra["metadata"]["name"] = "late-queue"
    server.apply("clusterqueues", extra)

    def followed() -> bool:
        state = cache.kueue_state()
        by_key = {w.key: w for w in state.workloads}
        key = f"{pending['metadata']['namespace']}/{pending['metadata']['name']}"
        return (
            key in by_key
            and by_key[key].admitted_at == datetime(2026, 11, 19, 23, tzinfo=UTC)
            and f"{gone['metadata']['namespace']}/{gone['metadata']['name']}" not in by_key
            and "late-queue" in {q.name for q in state.cluster_queues}
        )

    _eventually(followed)
    assert len(cache.kueue_state().workloads) == 24
    # No collection was listed again: the changes came by watch.
    assert _kueue_lists(server, mark) == []
    assert {k: s.lists for k, s in cache.stats().items()} == dict.fromkeys(
        ("resourceflavors", "cohorts", "clusterqueues", "localqueues", "workloads"), 1
    )
    # And what the watches hold is what a fresh list reads.
    assert cache.kueue_state() == kueue_state(_source(server, tmp_path))


def test_an_older_kueue_is_watched_at_v1beta1(fleet: SimulatedFleet, tmp_path: Path) -> None:
    with _server(fleet, kueue_versions=("v1beta1",)) as srv:
        cache = KueueCache(_source(srv, tmp_path), timeout_seconds=2, retry_seconds=0.1)
        try:
            state = cache.kueue_state()

            def watched() -> set[str]:  # each watch starts once its list is read
                return {t.split("?")[0] for _, t, _ in srv.request_log if "watch=" in t}

            _eventually(lambda: f"/apis/{GROUP}/v1beta1/workloads" in watched())
        finally:
            cache.stop()
        assert state == kueue_state(_source(srv, tmp_path))
    assert state.version == "v1beta1"
    assert {cq.name: cq.cohort for cq in state.cluster_queues}["genai"] == "research"
    assert not any("v1beta2" in path for path in watched())


def test_without_kueue_the_server_is_asked_again_only_after_a_while(
    fleet: SimulatedFleet, tmp_path: Path
) -> None:
    now = [0.0]
    with _server(fleet, kueue_versions=()) as srv:
        cache = KueueCache(_source(srv, tmp_path), probe_seconds=60, clock=lambda: now[0])
        assert cache.kueue_state() == KueueState(installed=False)
        asked = len(_kueue_lists(srv))
        assert asked == 2  # v1beta2, then v1beta1: both 404
        now[0] = 59.0
        assert cache.kueue_state() == KueueState(installed=False)
        assert len(_kueue_lists(srv)) == asked
        now[0] = 61.0
        assert cache.kueue_state() == KueueState(installed=False)
        assert len(_kueue_lists(srv)) == 2 * asked


@pytest.mark.parametrize("forbidden", ["workloads", "clusterqueues"])
def test_a_403_is_one_line_naming_the_rbac_without_waiting(
    fleet: SimulatedFleet, tmp_path: Path, forbidden: str
) -> None:
    with _server(fleet, forbidden=[forbidden]) as srv:
        cache = KueueCache(_source(srv, tmp_path), retry_seconds=30, sync_seconds=60)
        began = time.monotonic()
        try:
            with pytest.raises(KubernetesError) as e:
                cache.kueue_state()
            assert time.monotonic() - began < 10
            with pytest.raises(KubernetesError) as again:  # never "not installed": still forbidden
                cache.kueue_state()
        finally:
            cache.stop()
    assert str(again.value) == str(e.value)
    message = str(e.value)
    assert message.startswith(f"kubernetes: forbidden (403): {forbidden}.kueue.x-k8s.io is forbidden")
    assert message.endswith(
        "gpuwatch needs get/list/watch on clusterqueues, localqueues, workloads, resourceflavors and "
        'cohorts in API group "kueue.x-k8s.io"'
    )
    assert "\n" not in message
