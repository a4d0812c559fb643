"""PrometheusSource: the raw path's reads from Prometheus — DCGM samples of a window as GPU rows in base
units, what DCGM data a store holds (discover), and gpuwatch's own allocation series per sample."""

import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd

from gpuwatch.core.model import Window, utc
from gpuwatch.core.schema import DCGM_SAMPLES
from gpuwatch.sources import ownseries, promql
from gpuwatch.sources.dcgm import (
    DEV_GPU_UTIL,
    FIELDS,
    HOSTNAME_LABELS,
    NO_EXPORTERS,
    PROF_GR_ENGINE_ACTIVE,
    UTIL_FIELDS,
    ExporterPods,
    Field,
    field_of,
    is_dcgm_metric,
    is_exporter_pod_name,
    resolve_uuid,
    resolve_workload,
)
from gpuwatch.sources.dcgmrows import RowBlock, combine_row_blocks, row_block
from gpuwatch.sources.promclient import Points, PrometheusClient


@dataclass(frozen=True, slots=True, kw_only=True)
class Discovery:
    """What DCGM data a Prometheus holds and how it is labelled (for `gpuwatch check`)."""

    url: str
    metrics: tuple[str, ...]  # DCGM metric names present
    fields: Mapping[str, tuple[str, ...]]  # catalog field -> the aliases present
    unknown_metrics: tuple[str, ...]  # DCGM names the catalog does not read
    series_sampled: int  # utilization series seen over the lookback
    label_counts: Mapping[str, int]  # label -> sampled utilization series carrying it (non-empty)
    layouts: Mapping[str, int]  # workload label layout -> series
    exporter_pod_hostnames: int  # series whose Hostname/hostname is the exporter pod's own name
    problems: tuple[str, ...] = field(default=())  # one line each; empty when all is well


class PrometheusSource(PrometheusClient):
    """Reads DCGM series from Prometheus (or Thanos, Mimir, VictoriaMetrics) through its HTTP API
    (PrometheusClient: its transport, retries and limits)."""

    # -- DCGM ------------------------------------------------------------------------------------

    def gpu_samples(
        self,
        window: Window,
        *,
        exporters: ExporterPods | Callable[[], ExporterPods] = NO_EXPORTERS,
        matchers: Sequence[promql.Matcher] = (),
        fields: Sequence[Field] = (),
    ) -> pd.DataFrame:
        """Per GPU unit, workload and sample of the window: utilization (and `fields`) in base units.

        Sample i (timestamp t_i) is the query evaluated at t_i + step with avg_over_time(x[step]), i.e.
        the average over [t_i, t_i + step) (SPEC §3). One query per alias present in the window (one
        label-values lookup finds them), GPU_UTIL only for units without PROF at that step, in chunks
        of at most a day, `max_concurrent_queries` at a time. Frame: the DCGM_SAMPLES contract
        (GPU_SAMPLES plus mig_profile, gpu_index, product, namespace, pod, container, util_source) and
        one column per extra field. Rows are absent where nothing was reported; NaN where Prometheus
        held NaN/±Inf. `exporters` may be a function, called only when the window holds DCGM series
        (finding where exporter pods run lists every pod of the cluster).
        """
        step = window.step_seconds
        wanted = [*UTIL_FIELDS, *(f for f in fields if f not in UTIL_FIELDS)]
        queries = self.alias_queries(window, wanted, matchers)
        if not isinstance(exporters, ExporterPods):
            exporters = exporters() if queries else NO_EXPORTERS
        estimate = self._series_estimate(wanted, matchers, at=window.end)
        first = window.start + timedelta(seconds=step)
        per_chunk = self.chunk_points(estimate, step_seconds=step)
        chunks = [(a, min(window.n_samples, a + per_chunk)) for a in range(0, window.n_samples, per_chunk)]
        answers: dict[int, list[Points]] = {k: [] for k in range(len(chunks))}
        lock = threading.Lock()

        def run(task: tuple[int, str, str]) -> RowBlock | None:
            """One alias over one chunk; the thread that brings a chunk's last answer builds its rows."""
            k, metric, query = task
            points = self._range_chunk(query, first, *chunks[k], step).named(metric)
            with lock:
                answers[k].append(points)
                if len(answers[k]) < len(queries):
                    return None
                together = Points.concat(answers.pop(k))
            return row_block(
                together.series,
                together.index,
                pd.to_datetime(together.timestamps - step * 1000, unit="ms", utc=True),
                together.values,
                exporters=exporters,
            )

        tasks = [(k, metric, query) for k in range(len(chunks)) for metric, query in queries]
        pool = ThreadPoolExecutor(max_workers=self.max_concurrent_queries)
        try:  # chunk by chunk in time order, so their rows are built while later chunks are fetched
            blocks = [block for block in pool.map(run, tasks) if block is not None]
        finally:  # after a failure, chunks not yet sent are not sent
            pool.shutdown(wait=True, cancel_futures=True)
        rows = combine_row_blocks(blocks, on_problem=self._warn)
        inside = (rows["timestamp"] >= pd.Timestamp(window.start)) & (
            rows["timestamp"] < pd.Timestamp(window.end)
        )
        if not inside.all():
            rows = rows.loc[inside].reset_index(drop=True)
        return DCGM_SAMPLES.check(rows)

    def alias_queries(
        self, window: Window, fields: Sequence[Field], matchers: Sequence[promql.Matcher] = ()
    ) -> list[tuple[str, str]]:
        """(alias, query) for every alias of `fields` with series in the window (one label-values
        lookup); GPU_UTIL minus the units that report PROF."""
        present = set(
            self.label_values(
                "__name__",
                match=[promql.field_aliases_selector(fields, matchers)],
                start=window.start,
                end=window.end,
            )
        )
        prof = [m for m in PROF_GR_ENGINE_ACTIVE.metrics if m in present]
        return [
            (
                metric,
                promql.dcgm_alias_query(
                    f,
                    metric,
                    step_seconds=window.step_seconds,
                    matchers=matchers,
                    unless_metrics=prof if f is DEV_GPU_UTIL else (),
                ),
            )
            for f in fields
            for metric in f.metrics
            if metric in present
        ]

    def _series_estimate(
        self, fields: Sequence[Field], matchers: Sequence[promql.Matcher], at: datetime
    ) -> int:
        """Raw series of the fields now, an upper bound on the aggregated series a chunk returns."""
        points = self.instant_points(promql.series_count_query(fields, matchers), at=at)
        finite = points.values[np.isfinite(points.values)]
        return int(finite.max()) if finite.size else 0

    def discover(
        self,
        *,
        at: datetime | None = None,
        lookback_seconds: int = 600,
        matchers: Sequence[promql.Matcher] = (),
    ) -> Discovery:
        """DCGM metric names present and the label layout of the utilization series (`gpuwatch check`),
        of the series `matchers` select (one cluster's of a shared store)."""
        now = utc(at) if at is not None else datetime.now(UTC)
        names = sorted(
            n
            for n in self.label_values("__name__", match=[promql.dcgm_names_selector(matchers)])
            if is_dcgm_metric(n)
        )
        present = set(names)
        fields = {f.name: tuple(m for m in f.metrics if m in present) for f in FIELDS}
        unknown = tuple(n for n in names if field_of(n) is None)
        sampled = self.series(
            promql.field_aliases_selector(UTIL_FIELDS, matchers),
            start=now - timedelta(seconds=lookback_seconds),
            end=now,
        )
        labels = Counter(k for s in sampled for k, v in s.items() if v and k != "__name__")
        layouts = Counter(_layout(s) for s in sampled)
        exporter_hosts = sum(
            1 for s in sampled if any(is_exporter_pod_name(s.get(h, "")) for h in HOSTNAME_LABELS)
        )
        problems = []
        if not names:
            problems.append(f"prometheus at {self.url} has no DCGM metrics (is dcgm-exporter scraped?)")
        elif not any(fields[f.name] for f in UTIL_FIELDS):
            problems.append(
                "no utilization metric: neither DCGM_FI_PROF_GR_ENGINE_ACTIVE nor DCGM_FI_DEV_GPU_UTIL "
                "(under any alias) is scraped"
            )
        elif not sampled:
            problems.append(f"no DCGM utilization series in the last {lookback_seconds}s")
        no_uuid = sum(1 for s in sampled if not resolve_uuid(s))
        if no_uuid:
            problems.append(
                f"{no_uuid} utilization series carry no UUID label: those GPUs cannot be identified"
            )
        return Discovery(
            url=self.url,
            metrics=tuple(names),
            fields=fields,
            unknown_metrics=unknown,
            series_sampled=len(sampled),
            label_counts=dict(sorted(labels.items())),
            layouts=dict(sorted(layouts.items())),
            exporter_pod_hostnames=exporter_hosts,
            problems=tuple(problems),
        )


def _layout(labels: Mapping[str, str]) -> str:
    """Which workload label layout a series uses (SPEC §2)."""
    if labels.get("exported_pod"):
        return "exported_pod (ServiceMonitor, honorLabels: false)"
    _, pod, _ = resolve_workload(labels)
    if pod and labels.get("pod") == pod:
        return "pod (honor_labels)"
    if pod:
        return "pod_name (1.x exporter)"
    return "no workload labels (GPU idle or pod mapping off)"


def allocation_history(
    source: PrometheusSource, window: Window, matchers: Sequence[promql.Matcher] = ()
) -> pd.DataFrame:
    """gpuwatch's own allocation series over the window: timestamp, namespace, pod, team, node, pool,
    ge_share per pod and sample (sample i read at t_i + step, like the GPU samples)."""
    step = window.step_seconds
    points = source.range_points(
        ownseries.pod_allocation_history_query(step_seconds=step, matchers=matchers),
        first=window.start + timedelta(seconds=step),
        n=window.n_samples,
        step_seconds=step,
    )
    frame = points.frame()
    columns = ["timestamp", *ownseries.POD_ALLOCATION_LABELS, "ge_share"]
    if not len(frame):
        return pd.DataFrame(
            {c: pd.Series(dtype="float64" if c == "ge_share" else "str") for c in columns}
        ).assign(timestamp=pd.Series(dtype="datetime64[ns, UTC]"))
    frame["timestamp"] = frame["timestamp"] - pd.Timedelta(seconds=step)
    for label in ownseries.POD_ALLOCATION_LABELS:
        if label not in frame:
            frame[label] = ""
    frame = frame.rename(columns={"value": "ge_share"})
    return frame[frame["ge_share"].notna() & frame["pod"].ne("")][columns].reset_index(drop=True)
