"""Integration fixtures: real Prometheus (backfilled by promtool) and VictoriaMetrics servers holding
simulated DCGM history."""

import hashlib
import os
import re
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuwatch.core.config import Settings
from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.kubeapi import KubeApiServer, write_kubeconfig
from tests.integration.browser import close_browser
from tests.integration.prom import (
    BACKENDS,
    Backend,
    BackfilledPrometheus,
    PrometheusFactory,
    backfilled_prometheus,
)


@pytest.fixture(scope="session", autouse=True)
def _one_chromium() -> Iterator[None]:
    """Every browser test of the session shares one Chromium (tests/integration/browser.py); it ends here."""
    yield
    close_browser()


DEMO_END = datetime(2026, 11, 20, tzinfo=UTC)
# The demo backfill carries what the collectors read; all ten families would be ~1 GB of text for
# promtool to parse once per 2 h block (promtool 2.42 has no --max-block-duration).
DEMO_METRICS = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_XID_ERRORS",
)


@pytest.fixture(scope="session")
def prometheus_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusFactory]:
    """make(fleet, layout=..., metrics=..., step_seconds=..., backend=..., world=...) -> a running
    backfilled server.

    backend is "prometheus" (the default) or "victoriametrics". Servers are shared by equal arguments
    within the session and stopped at its end. `world` names a session fleet the same in every process
    (its seed, end, days) and, with `settings`, what they change: its backfill is then written and
    turned into blocks once for all the test workers of the run (pytest-xdist) and both backends, each
    of which serves its own copy.
    """
    worlds = _run_directory(tmp_path_factory) / "worlds"
    running: dict[
        tuple[int, str, tuple[str, ...] | None, int | None, bool, Backend, int], BackfilledPrometheus
    ] = {}
    kept: list[Settings | None] = []

    def make(
        fleet: SimulatedFleet,
        *,
        layout: str = "servicemonitor",
        metrics: Sequence[str] | None = None,
        step_seconds: int | None = None,
        gpuwatch_series: bool = False,
        backend: Backend = "prometheus",
        settings: Settings | None = None,
        world: str | None = None,
    ) -> BackfilledPrometheus:
        key = (
            id(fleet),
            layout,
            None if metrics is None else tuple(metrics),
            step_seconds,
            gpuwatch_series,
            backend,
            id(settings),  # kept alive below, so no other settings take its id
        )
        kept.append(settings)
        if key not in running:
            workdir = tmp_path_factory.mktemp(f"{backend}-{layout}")
            running[key] = backfilled_prometheus(
                fleet,
                workdir,
                layout=layout,
                metrics=metrics,
                step_seconds=step_seconds,
                gpuwatch_series=gpuwatch_series,
                backend=backend,
                settings=settings,
                cache=None if world is None else worlds / _world_key(world, *key[1:5], settings),
            )
        return running[key]

    try:
        yield make
    finally:
        for prom in running.values():
            prom.server.stop()


@pytest.fixture(scope="session")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory where the run's test workers (pytest-xdist) make what they share once."""
    return _run_directory(tmp_path_factory) / "worlds"


def _run_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory of this test run, which every pytest-xdist worker of it shares."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _world_key(world: str, *backfill: object) -> str:
    if world != re.sub(r"[^A-Za-z0-9_.-]", "", world):
        raise ValueError(f"a world's name is a file name: {world!r}")
    return f"{world}-{hashlib.sha256(repr(backfill).encode()).hexdigest()[:12]}"


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend speaking the Prometheus query API: a module asking for it runs once per backend."""
    chosen: Backend = request.param
    return chosen


@pytest.fixture(scope="session")
def demo_fleet() -> SimulatedFleet:
    """The demo fleet: seed 42, one day to 2026-11-20, 60 s step."""
    return build_demo_fleet(seed=42, end=DEMO_END, days=1, step_seconds=60)


@pytest.fixture(scope="session")
def demo_prometheus(
    prometheus_factory: PrometheusFactory, demo_fleet: SimulatedFleet
) -> BackfilledPrometheus:
    """The demo fleet in a ServiceMonitor-layout Prometheus."""
    return prometheus_factory(demo_fleet, layout="servicemonitor", metrics=DEMO_METRICS, world="demo-day")


@pytest.fixture(scope="module")
def demo_backend(
    prometheus_factory: PrometheusFactory, demo_fleet: SimulatedFleet, backend: Backend
) -> BackfilledPrometheus:
    """The demo fleet in a ServiceMonitor-layout server of each backend (Prometheus: demo_prometheus)."""
    return prometheus_factory(
        demo_fleet, layout="servicemonitor", metrics=DEMO_METRICS, backend=backend, world="demo-day"
    )


@pytest.fixture(scope="session")
def day_fleet() -> SimulatedFleet:
    """Seed 5, one day to 2026-11-20 at 60 s: the world of the read-path, history-path and right-size
    tests, which share its servers (world="seed5-day")."""
    return build_demo_fleet(seed=5, end=DEMO_END, days=1)


@pytest.fixture(scope="session")
def days_fleet() -> SimulatedFleet:
    """Seed 5, three and a half days to 2026-11-20 at 300 s: the world of the day and namespace roll-up
    tests, whose gpuwatch_* backfill is split once for both (rollup_variants' cache, worlds/seed5-days)."""
    return build_demo_fleet(seed=5, end=DEMO_END, days=3.5, step_seconds=300)


@pytest.fixture(scope="module")
def kubeconfig(fleet: SimulatedFleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A kubeconfig for the Kubernetes API test server serving the requesting module's `fleet`."""
    token = "integration-token"
    with KubeApiServer(fleet, token=token) as server:
        path = tmp_path_factory.mktemp("kube") / "kubeconfig"
        write_kubeconfig(path, server_url=server.url, token=token, ca_pem=server.ca_pem)
        yield str(path)
