"""`gpuwatch check`: can the sources be read, and is what they hold enough for the numbers."""

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime

import pandas as pd

from gpuwatch.core.config import ClusterSettings, KubernetesSettings, PrometheusSettings, Settings
from gpuwatch.core.errors import ConfigError, KubernetesError, PrometheusError, SourceError
from gpuwatch.core.model import KueueState
from gpuwatch.read.analysis import MIN_COVERAGE_RATIO, Analysis, iso_z, low_coverage_warning
from gpuwatch.read.service import FleetService, LiveSources, kueue_state


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult:
    """What `gpuwatch check` found; every entry is one line."""

    findings: list[str]
    warnings: list[str]  # worth reading, not failures: low coverage, a young Prometheus, prices
    problems: list[str]  # failures: the command exits non-zero
    unreachable: bool  # a source could not be reached at all
    misconfigured: bool = False  # a local file the sources need is missing or invalid (a kubeconfig)


CHECK_WINDOW_DAYS = 1 / 24  # `gpuwatch check` judges coverage over the last hour
CHECK_TIMEOUT_SECONDS = 10.0  # each read of `gpuwatch check`: a fast diagnosis, not a report


def check(
    settings: Settings,
    *,
    clock: Callable[[], datetime] | None = None,
    timeout_seconds: float = CHECK_TIMEOUT_SECONDS,
) -> CheckResult:
    """check_cluster() of the one cluster the settings name, or of each of their `clusters:` list side by
    side, every line of a cluster of several prefixed with its name. Every read has `timeout_seconds`."""
    settings = with_timeout(settings, timeout_seconds)
    if len(settings.clusters) < 2:
        one = settings.clusters[0] if settings.clusters else None
        return check_cluster(settings, cluster=one, clock=clock)
    clusters = settings.clusters
    with ThreadPoolExecutor(max_workers=len(clusters)) as pool:
        futures = {
            c.name: pool.submit(check_cluster, settings, cluster=c, clock=clock) for c in settings.clusters
        }
        parts = {name: future.result() for name, future in futures.items()}
    return CheckResult(
        findings=[f"cluster {n}: {line}" for n, r in parts.items() for line in r.findings],
        warnings=[f"cluster {n}: {line}" for n, r in parts.items() for line in r.warnings],
        problems=[f"cluster {n}: {line}" for n, r in parts.items() for line in r.problems],
        unreachable=any(r.unreachable for r in parts.values()),
        misconfigured=any(r.misconfigured for r in parts.values()),
    )


def with_timeout(settings: Settings, seconds: float) -> Settings:
    """The settings with every source's deadline `seconds` (each cluster's too)."""

    def prom(p: PrometheusSettings) -> PrometheusSettings:
        return replace(p, timeout_seconds=seconds)

    def kube(k: KubernetesSettings) -> KubernetesSettings:
        return replace(k, timeout_seconds=seconds)

    clusters = tuple(
        replace(c, prometheus=prom(c.prometheus), kubernetes=kube(c.kubernetes)) for c in settings.clusters
    )
    return replace(
        settings,
        prometheus=prom(settings.prometheus),
        kubernetes=kube(settings.kubernetes),
        clusters=clusters,
    )


def check_cluster(
    settings: Settings, *, cluster: ClusterSettings | None = None, clock: Callable[[], datetime] | None = None
) -> CheckResult:
    """Connectivity, RBAC (can gpuwatch list what it needs?), DCGM metrics and label layout, Kueue
    (installed or not: never a problem, but a 403 on it is), coverage of the last hour.

    Local files first (a missing kubeconfig or token file is a line at once, never a wait); then
    Prometheus and the Kubernetes API are probed side by side, each saying ok or what failed, so a source
    that does not answer never hides the other's line. Coverage is judged when both answered.

    Discovery and coverage are judged together, so they never contradict each other: DCGM series that
    exist but have too little history (a Prometheus started minutes ago) are "not enough history yet",
    a warning; a node with GPUs is a problem only when other nodes report over the same hour and it
    does not; coverage under MIN_COVERAGE_RATIO is a warning that says why, never an "ok".
    """
    if not (cluster.prometheus if cluster else settings.prometheus).url:
        raise ConfigError(
            "no Prometheus URL: pass --prometheus-url, set GPUWATCH_PROMETHEUS_URL or the config"
        )
    sources = LiveSources(settings, cluster=cluster, clock=clock)
    local: list[str] = []
    probes: list[Callable[[LiveSources], CheckResult]] = []
    for load, probe in (
        (sources.prometheus.load, _probe_prometheus),
        (sources.kubernetes.load, _probe_kubernetes),
    ):
        try:
            load()
            probes.append(probe)
        except ConfigError as e:
            local.append(str(e))
    with ThreadPoolExecutor(max_workers=2) as pool:
        parts = list(pool.map(lambda probe: probe(sources), probes))
    found = CheckResult(
        findings=[line for p in parts for line in p.findings],
        warnings=[line for p in parts for line in p.warnings],
        problems=[*local, *(line for p in parts for line in p.problems)],
        unreachable=any(p.unreachable for p in parts),
        misconfigured=bool(local),
    )
    if found.problems:
        return found
    recent_series = next((p.recent_series for p in parts if isinstance(p, _Probed)), 0)
    service = FleetService(settings=settings, sources=sources)
    window = service.window(days=CHECK_WINDOW_DAYS)
    try:
        analysis = service.analysis(window)
    except SourceError as e:
        return replace(found, problems=[str(e)], unreachable=True)
    judged = _judge_coverage(analysis, recent_series=recent_series)
    low = low_coverage_warning(analysis.coverage.warnings)
    return CheckResult(
        findings=found.findings + judged.findings,
        warnings=found.warnings + judged.warnings + [w for w in analysis.coverage.warnings if w != low],
        problems=judged.problems,
        unreachable=False,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Probed(CheckResult):
    """Prometheus' probe, and how many DCGM utilization series it saw lately (for coverage)."""

    recent_series: int = 0


def _probe_prometheus(sources: LiveSources) -> CheckResult:
    """Which DCGM metrics and label layouts Prometheus holds: one line, or why it could not be read."""
    try:
        found = sources.prometheus.discover(at=sources.now(), matchers=sources.matchers)
    except PrometheusError as e:
        return CheckResult(findings=[], warnings=[], problems=[str(e)], unreachable=True)
    util = [
        m for name in ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL") for m in found.fields[name]
    ]
    layouts = ", ".join(f"{k}: {v}" for k, v in found.layouts.items()) or "none"
    line = (
        f"prometheus {found.url}: {len(found.metrics)} DCGM metric names, {found.series_sampled} "
        f"utilization series in the last 10 minutes from {', '.join(util) or 'nothing'}; label layouts "
        f"{layouts}; {found.exporter_pod_hostnames} series name the exporter pod as host"
    )
    return _Probed(
        findings=[line],
        warnings=[],
        problems=list(found.problems),
        unreachable=False,
        recent_series=found.series_sampled,
    )


def _probe_kubernetes(sources: LiveSources) -> CheckResult:
    """Whether gpuwatch can list what it needs, and Kueue: a line each, or one line when the API server
    cannot be reached (the other kinds are not asked: each would wait as long)."""
    findings: list[str] = []
    warnings: list[str] = []
    problems: list[str] = []
    kube = sources.kubernetes
    for kind in ("pods", "nodes", "namespaces", "resourcequotas"):
        reason = kube.can_list(kind)
        if reason is None:
            findings.append(f"kubernetes {kube.server}: can list {kind}")
        elif "unreachable" in reason:
            return CheckResult(findings=findings, warnings=warnings, problems=[reason], unreachable=True)
        else:
            problems.append(reason)
    try:
        kueue = kueue_state(kube)
        findings.append(kueue_line(kueue))
        warnings += list(kueue.warnings)
    except KubernetesError as e:
        problems.append(str(e))  # a 403 names the RBAC Kueue needs; a cluster without Kueue is no problem
    return CheckResult(findings=findings, warnings=warnings, problems=problems, unreachable=False)


def kueue_line(state: KueueState) -> str:
    """The one line `gpuwatch check` says of Kueue: what it holds, or that it is not installed."""
    if not state.installed:
        return "Kueue not installed: queues and quota waits not shown"
    skipped = f" ({state.skipped} malformed objects skipped)" if state.skipped else ""
    return (
        f"kueue (kueue.x-k8s.io/{state.version}): installed, {len(state.cluster_queues)} cluster queues, "
        f"{len(state.local_queues)} local queues, {len(state.workloads)} workloads{skipped}"
    )


def _judge_coverage(analysis: "Analysis", *, recent_series: int) -> CheckResult:
    """Coverage of the check window, and which GPU nodes report nothing in it, said consistently."""
    findings: list[str] = []
    warnings: list[str] = []
    problems: list[str] = []
    c = analysis.coverage
    window = analysis.window
    share = c.gpu_samples_present / c.gpu_samples_expected if c.gpu_samples_expected else 1.0
    line = (
        f"coverage ({iso_z(window.start)} to {iso_z(window.end)}): {c.gpu_samples_present:,} of "
        f"{c.gpu_samples_expected:,} GPU-samples present ({share:.0%}), "
        f"{c.unattributed_gpu_hours:.2f} unattributed GPU-hours"
    )
    reporting = set(analysis.units_reporting["node"].astype("str"))
    first = pd.Timestamp(analysis.units_reporting["timestamp"].min()) if reporting else None
    young = first is not None and first > pd.Timestamp(window.start) + pd.Timedelta(
        seconds=window.step_seconds
    )
    if not reporting and recent_series:
        # Series exist, but no complete sample of the window holds any: a Prometheus minutes old.
        warnings.append(
            f"{line}: not enough history yet — Prometheus holds {recent_series} recent DCGM utilization "
            f"series but no complete {window.step_seconds} s sample of them; check again in a few minutes"
        )
        return CheckResult(findings=findings, warnings=warnings, problems=problems, unreachable=False)
    if young and first is not None:
        minutes = (pd.Timestamp(window.end) - first).total_seconds() / 60
        warnings.append(
            f"{line}: not enough history yet — DCGM telemetry starts at {iso_z(first.to_pydatetime())} "
            f"({minutes:.0f} of the {window.duration_seconds / 60:.0f} minutes)"
        )
    elif share < MIN_COVERAGE_RATIO:
        warnings.append(f"{line}: under {MIN_COVERAGE_RATIO:.0%}, see the problems and warnings below")
    else:
        findings.append(line)
    if reporting:
        nodes = analysis.nodes
        for name, gpus, ready in nodes[["node", "capacity_ge", "ready"]].itertuples(index=False):
            if gpus > 0 and ready and str(name) not in reporting:
                problems.append(
                    f"node {name} has {gpus:g} GPUs but no DCGM series in the last "
                    f"{window.duration_seconds / 60:.0f} minutes while other nodes report"
                )
    return CheckResult(findings=findings, warnings=warnings, problems=problems, unreachable=False)
