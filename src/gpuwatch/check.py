"""`gpuwatch check`: can the sources be read, and is what they hold enough for the numbers."""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import pandas as pd

from gpuwatch.analysis import MIN_COVERAGE_RATIO, Analysis, iso_z, low_coverage_warning
from gpuwatch.config import ClusterSettings, Settings
from gpuwatch.errors import ConfigError, KubernetesError, PrometheusError, SourceError
from gpuwatch.model import KueueState
from gpuwatch.service import FleetService, LiveSources, kueue_state


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult:
    """What `gpuwatch check` found; every entry is one line."""

    findings: list[str]
    warnings: list[str]  # worth reading, not failures: low coverage, a young Prometheus, prices
    problems: list[str]  # failures: the command exits non-zero
    unreachable: bool  # a source could not be reached at all


CHECK_WINDOW_DAYS = 1 / 24  # `gpuwatch check` judges coverage over the last hour


def check(settings: Settings, *, clock: Callable[[], datetime] | None = None) -> CheckResult:
    """check_cluster() of the one cluster the settings name, or of each of their `clusters:` list, every
    line of a cluster of several prefixed with its name."""
    if len(settings.clusters) < 2:
        one = settings.clusters[0] if settings.clusters else None
        return check_cluster(settings, cluster=one, clock=clock)
    parts = {c.name: check_cluster(settings, cluster=c, clock=clock) for c in settings.clusters}
    return CheckResult(
        findings=[f"cluster {n}: {line}" for n, r in parts.items() for line in r.findings],
        warnings=[f"cluster {n}: {line}" for n, r in parts.items() for line in r.warnings],
        problems=[f"cluster {n}: {line}" for n, r in parts.items() for line in r.problems],
        unreachable=any(r.unreachable for r in parts.values()),
    )


def check_cluster(
    settings: Settings, *, cluster: ClusterSettings | None = None, clock: Callable[[], datetime] | None = None
) -> CheckResult:
    """Connectivity, RBAC (can gpuwatch list what it needs?), DCGM metrics and label layout, Kueue
    (installed or not: never a problem, but a 403 on it is), coverage of the last hour.

    Discovery and coverage are judged together, so they never contradict each other: DCGM series that
    exist but have too little history (a Prometheus started minutes ago) are "not enough history yet",
    a warning; a node with GPUs is a problem only when other nodes report over the same hour and it
    does not; coverage under MIN_COVERAGE_RATIO is a warning that says why, never an "ok".
    """
    if not (cluster.prometheus if cluster else settings.prometheus).url:
        raise ConfigError(
            "no Prometheus URL: pass --prometheus-url, set GPUWATCH_PROMETHEUS_URL or the config"
        )
    findings: list[str] = []
    warnings: list[str] = []
    problems: list[str] = []
    unreachable = False
    sources = LiveSources(settings, cluster=cluster, clock=clock)
    recent_series = 0
    try:
        found = sources.prometheus.discover(at=sources.now(), matchers=sources.matchers)
        recent_series = found.series_sampled
        util = [
            m
            for name in ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL")
            for m in found.fields[name]
        ]
        layouts = ", ".join(f"{k}: {v}" for k, v in found.layouts.items()) or "none"
        findings.append(
            f"prometheus {found.url}: {len(found.metrics)} DCGM metric names, {found.series_sampled} "
            f"utilization series in the last 10 minutes from {', '.join(util) or 'nothing'}; label layouts "
            f"{layouts}; {found.exporter_pod_hostnames} series name the exporter pod as host"
        )
        problems += found.problems
    except PrometheusError as e:
        problems.append(str(e))
        unreachable = True
    kube_ok = True
    kube_reachable = True
    for kind in ("pods", "nodes", "namespaces", "resourcequotas"):
        reason = sources.kubernetes.can_list(kind)
        if reason is None:
            findings.append(f"kubernetes {sources.kubernetes.server}: can list {kind}")
        else:
            problems.append(reason)
            kube_ok = False
            kube_reachable = kube_reachable and "unreachable" not in reason
            unreachable = unreachable or "unreachable" in reason
    if kube_reachable:
        try:
            kueue = kueue_state(sources.kubernetes)
            findings.append(kueue_line(kueue))
            warnings += list(kueue.warnings)
        except KubernetesError as e:
            problems.append(str(e))  # a 403 names the RBAC Kueue needs; a cluster without Kueue is no problem
    if not kube_ok or unreachable:
        return CheckResult(findings=findings, warnings=warnings, problems=problems, unreachable=unreachable)
    service = FleetService(settings=settings, sources=sources)
    window = service.window(days=CHECK_WINDOW_DAYS)
    try:
        analysis = service.analysis(window)
    except SourceError as e:
        problems.append(str(e))
        return CheckResult(findings=findings, warnings=warnings, problems=problems, unreachable=True)
    judged = _judge_coverage(analysis, recent_series=recent_series)
    findings += judged.findings
    warnings += judged.warnings
    problems += judged.problems
    low = low_coverage_warning(analysis.coverage.warnings)
    warnings += [w for w in analysis.coverage.warnings if w != low]
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
