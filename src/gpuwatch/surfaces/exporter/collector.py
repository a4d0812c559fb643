"""A prometheus_client collector that builds fresh gpuwatch_* gauges on every scrape from the last cycle."""

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import pandas as pd
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuwatch.core.errors import ConfigError, KubernetesError, PrometheusError, SourceError
from gpuwatch.read.series import Family, published_series
from gpuwatch.read.service import FleetService

log = logging.getLogger(__name__)
SOURCES = ("prometheus", "kubernetes")
CYCLE_STEP_SECONDS = 60
# A cycle's reads take well under this from a healthy source: one unanswered this long (or the interval,
# if shorter) marks its source down at once, while the cycle still waits for it up to the source's own
# timeout. Within one interval plus this of a source going silent, gpuwatch_source_up says so.
CYCLE_DEADLINE_SECONDS = 10.0
# A cycle publishes its last sample: the framebuffer, energy and power it needs are the last two samples'
# (the energy counter's increase), read alone instead of over the whole idle window (LiveSources).
PUBLISHED_FIELD_SECONDS = 2 * CYCLE_STEP_SECONDS


@dataclass
class CycleResult:
    """What the last collection cycle produced. Families survive a failed cycle (stale, not zero) and
    are then published at the time of the cycle that computed them (`families_at`), never as new."""

    families: list[Family] = field(default_factory=list)
    source_up: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0.0))
    last_success: dict[str, float] = field(default_factory=dict)
    duration_seconds: float = float("nan")
    error: str = ""
    families_at: float | None = None  # wall clock of the cycle that computed them
    stale: bool = False  # the last cycle failed: the families are an older cycle's


class ExportLoop:
    """Every `interval_seconds`: list pods/nodes, read recent DCGM data, recompute the published series."""

    def __init__(
        self,
        service: FleetService,
        *,
        interval_seconds: float = 30.0,
        deadline_seconds: float = CYCLE_DEADLINE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.service = service
        self.interval_seconds = interval_seconds
        self.deadline_seconds = min(deadline_seconds, interval_seconds)
        self._clock = clock
        self._lock = threading.Lock()
        self._result = CycleResult()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The last families and what they were made of: a cycle whose analysis and queue tables are the
        # same objects (the window's step has not turned) publishes the same series without making them.
        self._published: tuple[object, object, list[Family]] | None = None  # (analysis, queues, families)

    @property
    def result(self) -> CycleResult:
        with self._lock:
            return self._result

    def run_once(self) -> CycleResult:
        """One cycle; a failing source is marked down and the previous series are kept."""
        started = self._clock()
        previous = self.result
        up = dict(previous.source_up)
        last_success = dict(previous.last_success)
        families, families_at, error = previous.families, previous.families_at, ""
        settings = self.service.settings
        step = CYCLE_STEP_SECONDS
        # Enough history to apply the idle rule at the last complete sample.
        days = (settings.idle.window_seconds + 5 * step) / 86400
        end = self.service.now() - timedelta(seconds=step)
        try:
            # Asked every cycle: the analysis of a window already computed (cycles more often than the
            # step) reads nothing, and would say nothing of a source gone silent meanwhile.
            self.service.sources.probe()
            analysis = self.service.analysis(self.service.window(days=days, end=end, step_seconds=step))
            queues = self.service.queues(analysis)
            families = self._families(analysis, queues)
            families_at = started
            up = dict.fromkeys(SOURCES, 1.0)
            last_success = dict.fromkeys(SOURCES, started)
        except KubernetesError as e:
            up["kubernetes"], error = 0.0, str(e)
        except PrometheusError as e:
            up["prometheus"], up["kubernetes"], error = 0.0, 1.0, str(e)
            last_success["kubernetes"] = started
        except SourceError as e:
            up, error = dict.fromkeys(SOURCES, 0.0), str(e)
        if error and error != previous.error:
            log.warning("gpuwatch export: %s", error)  # one line per fault, not one per cycle
        result = CycleResult(
            families=families,
            source_up=up,
            last_success=last_success,
            duration_seconds=self._clock() - started,
            error=error,
            families_at=families_at,
            stale=bool(error),
        )
        with self._lock:
            self._result = result
        return result

    def _families(self, analysis: Any, queues: Any) -> list[Family]:
        last = self._published
        if last is not None and last[0] is analysis and last[1] is queues:
            return last[2]
        families = published_series(analysis, queues=queues)
        self._published = (analysis, queues, families)
        return families

    def source_up(self) -> dict[str, float]:
        """The last cycle's verdict per source, and 0 for a source a read has waited on past the cycle's
        deadline now (the cycle is still waiting for it: it has not answered by then)."""
        up = dict(self.result.source_up)
        for wait in self.service.waiting():
            if wait.seconds >= self.deadline_seconds and wait.source in up:
                up[wait.source] = 0.0
        return up

    def start(self, *, first_now: bool = False) -> "ExportLoop":
        """Cycle in a daemon thread, the first cycle now (`first_now`) or one interval from now."""
        self._thread = threading.Thread(
            target=self._run, args=(first_now,), name="gpuwatch-export", daemon=True
        )
        self._thread.start()
        return self

    def _run(self, first_now: bool) -> None:
        if first_now:
            self.run_once()
        while not self._stop.wait(self.interval_seconds):
            self.run_once()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)


class GpuwatchCollector(Collector):
    """Renders the last cycle's series as new gauge families on every scrape (no stale label sets).

    cluster: the name of the cluster the exporter watches, stamped as a `cluster` label on every series
    (none when "": one cluster and no `clusters:` list), so a store shared by several clusters keeps
    each cluster's series apart."""

    def __init__(self, loop: ExportLoop, *, cluster: str = "") -> None:
        self.loop = loop
        self.stamp = ["cluster"] if cluster else []
        self.stamped = [cluster] if cluster else []

    def _gauge(self, name: str, help_text: str, labels: list[str]) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, help_text, labels=[*labels, *self.stamp])

    def collect(self) -> Iterator[Metric]:
        result = self.loop.result
        stamped = self.stamped
        # After a failed cycle the last good families keep the time they were computed at: a store
        # takes them as what they were then, not as fresh values (it drops them as out of order).
        at = result.families_at if result.stale else None
        for family in result.families:
            gauge = self._gauge(family.name, family.help, list(family.labels))
            labels = zip(*(_strings(family.samples[label]) for label in family.labels), strict=True)
            for values, value in zip(labels, family.samples["value"].to_numpy(), strict=True):
                gauge.add_metric([*values, *stamped], float(value), timestamp=at)
            yield gauge
        up = self._gauge("gpuwatch_source_up", "1 when the last read of the source succeeded.", ["source"])
        seen = self._gauge(
            "gpuwatch_source_last_success_timestamp_seconds", "When the source last answered.", ["source"]
        )
        source_up = self.loop.source_up()
        for source in SOURCES:
            up.add_metric([source, *stamped], source_up.get(source, 0.0))
            if source in result.last_success:
                seen.add_metric([source, *stamped], result.last_success[source])
        yield up
        yield seen
        duration = self._gauge(
            "gpuwatch_collect_duration_seconds", "Duration of the last collection cycle in seconds.", []
        )
        duration.add_metric(stamped, result.duration_seconds)
        yield duration


def _strings(column: pd.Series) -> np.ndarray:
    """A label column's values as str, as astype("str") has them ("nan" where missing); a categorical's
    categories are converted once, not every row (every scrape renders every series)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        categories = column.cat.categories.astype("str").to_numpy(dtype=object)
        return np.append(categories, "nan")[column.cat.codes.to_numpy()]  # code -1: missing
    return column.astype("str").to_numpy(dtype=object)


def serve_exporter(
    service: FleetService, *, host: str = "127.0.0.1", port: int = 9402, interval_seconds: float = 30.0
) -> tuple[Any, ExportLoop, CollectorRegistry]:
    """Start the HTTP endpoint and the loop (its first cycle at once); returns (server, loop, registry).

    An exporter publishes one cluster's series (it runs in that cluster): a `clusters:` list of several
    is a ConfigError; a list of one names the cluster its series are stamped with."""
    if len(service.settings.clusters) > 1:
        raise ConfigError(
            "gpuwatch export publishes one cluster's series: run one exporter per cluster, each with a "
            "clusters: list naming only its own cluster (its name becomes the cluster label)"
        )
    loop = ExportLoop(service, interval_seconds=interval_seconds)
    registry = CollectorRegistry()
    registry.register(GpuwatchCollector(loop, cluster=service.settings.cluster_name))
    # Served before the first cycle: gpuwatch_source_up and the cycle's own series are there from the
    # first scrape, whatever the sources do.
    server, _thread = start_http_server(port, addr=host, registry=registry)
    loop.start(first_now=True)
    return server, loop, registry
