"""The simulated fleet as the outside systems: its dcgm-exporter, its API server, its history, a trace."""

import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import pandas as pd

from gpuwatch.core.config import Settings
from gpuwatch.core.errors import ConfigError
from gpuwatch.core.model import Window
from gpuwatch.read.analysis import Analysis
from gpuwatch.read.series import Family, published_series
from gpuwatch.read.service import Closable, FleetService
from gpuwatch.sim.demo import build_demo_fleet, demo_pools
from gpuwatch.sim.demoservice import SimulatedSources, demo_settings
from gpuwatch.sim.fleet import SimulatedFleet


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationParams:
    seed: int = 42
    end: datetime | None = None  # None: the current hour
    days: float = 1.0
    step_seconds: int = 60
    gpus: int | None = None  # None: the 80-GPU demo fleet
    pods: int | None = None  # None: the demo's pod lifetimes

    def fleet_gpus(self) -> int:
        """How many GPUs build() makes, known without building it."""
        return sum(p.nodes * p.gpus_per_node for p in demo_pools(self.gpus))

    def window_samples(self) -> int:
        """How many samples each GPU has over the window."""
        return math.ceil(self.days * 86_400 / self.step_seconds)

    def build(self) -> SimulatedFleet:
        return build_demo_fleet(
            seed=self.seed,
            end=self.end,
            days=self.days,
            step_seconds=self.step_seconds,
            gpus=self.gpus,
            pods=self.pods,
        )


def history_service(fleet: SimulatedFleet, settings: Settings | None = None) -> FleetService:
    """The simulated fleet's service for writing its history (with the demo's settings unless given):
    nothing cached, one analysis at a time."""
    return FleetService(settings=settings or demo_settings(), sources=SimulatedSources(fleet), cache_size=0)


def history_families(service: FleetService, chunk: Window) -> list[Family]:
    """The gpuwatch_* samples of the chunk as `gpuwatch export` would have published them all along.

    The analysis reaches back one idle window before the chunk, as the exporter's own does each cycle,
    so the idle rule holds at its first sample (and idle-since reaches back no further either).
    """
    step = timedelta(seconds=chunk.step_seconds)
    reach = math.ceil(service.settings.idle.window_seconds / chunk.step_seconds) * step + step
    first = max(service.history_start() or chunk.start, chunk.start - reach)
    analysis = service.analysis(replace(chunk, start=first))
    queues = service.queues(analysis)
    if queues is not None:  # the queue grid's samples from the chunk's start on, as the analysis' below
        since = pd.Timestamp(chunk.start)
        usage, states = queues.usage, queues.states
        queues = replace(
            queues, usage=usage[usage["timestamp"] >= since], states=states[states["timestamp"] >= since]
        )
    return published_series(_analysis_since(analysis, chunk.start), last_only=False, queues=queues)


def _analysis_since(analysis: "Analysis", start: datetime) -> "Analysis":
    """The analysis's per-sample frames from `start` on: each gpuwatch_* sample comes from the rows of its
    own timestamp, so this cuts the series as Family.between(start) would, at a fraction of the rows."""
    since = pd.Timestamp(start)

    def cut(frame: pd.DataFrame) -> pd.DataFrame:
        return frame[frame["timestamp"] >= since]

    return replace(
        analysis,
        marked=cut(analysis.marked),
        by_node=cut(analysis.by_node),
        per_pool=cut(analysis.per_pool),
        free=cut(analysis.free),
        units_reporting=cut(analysis.units_reporting),
        energy=None if analysis.energy is None else cut(analysis.energy),
    )


def serve_simulated_metrics(params: SimulationParams, *, host: str, port: int) -> "Closable":
    """Serve the fleet's dcgm-exporter /metrics until closed."""
    from gpuwatch.sim.exposition import serve_metrics

    fleet = params.build()
    try:
        return serve_metrics(fleet, host=host, port=port)
    except OSError as e:
        raise ConfigError(f"cannot serve /metrics on {host}:{port}: {e.strerror or e}") from e


def serve_simulated_kube_api(
    params: SimulationParams,
    *,
    host: str,
    port: int,
    token: str | None,
    kubeconfig_path: str | None,
    tls: bool = True,
    cpu_pods: int = 0,
) -> "Closable":
    """Serve the fleet's Kubernetes API until closed: over HTTPS with a CA made at start (tls=False: plain
    http), wanting the bearer `token` (None: anyone); optionally write a kubeconfig (URL, CA, token).
    `cpu_pods` adds that many running pods without GPUs, as a large cluster lists beside its GPU pods."""
    from gpuwatch.sim.kubeapi import KubeApiServer

    server = KubeApiServer(params.build(), host=host, port=port, token=token, tls=tls, cpu_pods=cpu_pods)
    try:
        server.start()
    except OSError as e:
        raise ConfigError(f"cannot serve the Kubernetes API on {host}:{port}: {e.strerror or e}") from e
    if kubeconfig_path:
        try:
            server.write_kubeconfig(kubeconfig_path)
        except OSError as e:
            server.close()
            raise ConfigError(f"cannot write the kubeconfig {kubeconfig_path}: {e.strerror or e}") from e
    return server


def replay_openb_trace(
    nodes_csv: str,
    pods_csv: str,
    *,
    start: datetime,
    days: float,
    step_seconds: int,
    seed: int,
    offset_days: float | None = None,
    lifetime_scale: float = 1.0,
) -> dict[str, float | int]:
    """Replay an Alibaba openb node/pod trace (Weng et al., ATC'23) and summarize the result.

    offset_days None replays the trace's last `days` (where nearly all of its pods arrive).
    """
    from pathlib import Path

    from gpuwatch.sim.trace import last_days_offset_seconds, load_openb, replay_openb, summary

    trace = load_openb(Path(nodes_csv), Path(pods_csv))
    offset = last_days_offset_seconds(trace, days) if offset_days is None else offset_days * 86400
    fleet = replay_openb(
        trace,
        start=start,
        days=days,
        step_seconds=step_seconds,
        seed=seed,
        offset_seconds=offset,
        lifetime_scale=lifetime_scale,
    )
    return summary(fleet)
