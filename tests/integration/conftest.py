"""Integration fixtures: real Prometheus (backfilled by promtool) and VictoriaMetrics servers holding
simulated DCGM history."""

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

import pytest

from gpuwatch.core.config import Settings
from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.kubeapi import KubeApiServer, write_kubeconfig
from tests.integration.prom import (
    BACKENDS,
    Backend,
    BackfilledPrometheus,
    PrometheusFactory,
    backfilled_prometheus,
)

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
    """make(fleet, layout=..., metrics=..., step_seconds=..., backend=...) -> a running backfilled server.

    backend is "prometheus" (the default) or "victoriametrics". Servers are shared by equal arguments
    within the session and stopped at its end.
    """
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
            )
        return running[key]

    try:
        yield make
    finally:
        for prom in running.values():
            prom.server.stop()


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
    return prometheus_factory(demo_fleet, layout="servicemonitor", metrics=DEMO_METRICS)


@pytest.fixture(scope="module")
def demo_backend(
    prometheus_factory: PrometheusFactory, demo_fleet: SimulatedFleet, backend: Backend
) -> BackfilledPrometheus:
    """The demo fleet in a ServiceMonitor-layout server of each backend (Prometheus: demo_prometheus)."""
    return prometheus_factory(demo_fleet, layout="servicemonitor", metrics=DEMO_METRICS, backend=backend)


@pytest.fixture(scope="module")
def kubeconfig(fleet: SimulatedFleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A kubeconfig for the Kubernetes API test server serving the requesting module's `fleet`."""
    token = "integration-token"
    with KubeApiServer(fleet, token=token) as server:
        path = tmp_path_factory.mktemp("kube") / "kubeconfig"
        write_kubeconfig(path, server_url=server.url, token=token, ca_pem=server.ca_pem)
        yield str(path)
