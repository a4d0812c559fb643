"""The one place besides the CLI that chooses between a live fleet and the simulated one (gpuwatch.sim)."""

from gpuwatch.core.config import Settings, load_settings
from gpuwatch.read.service import FleetService
from gpuwatch.sim.demo import DEMO_HISTORY_DAYS
from gpuwatch.sim.demoservice import demo_service


def fleet_service(
    settings: Settings,
    *,
    demo: bool,
    demo_clusters: int | None = None,
    history_days: float = DEMO_HISTORY_DAYS,
    watch_cluster: bool = False,
    field_seconds: float | None = None,
) -> FleetService:
    """The simulated fleet when `demo` (its history at least `history_days` long, `demo_clusters`
    clusters), else the live one the settings name (watch_cluster, field_seconds: as FleetService.live)."""
    if demo:
        return demo_service(
            settings, clusters=demo_clusters, history_days=max(DEMO_HISTORY_DAYS, history_days)
        )
    return FleetService.live(settings, watch_cluster=watch_cluster, field_seconds=field_seconds)


def service_from_environment() -> FleetService:
    """The fleet the GPUWATCH_* settings (or GPUWATCH_CONFIG's file) name: live when they give a
    Prometheus URL, else the simulated one (`gunicorn app:server` runs either)."""
    settings = load_settings()
    return fleet_service(settings, demo=not settings.prometheus.url, watch_cluster=True)
