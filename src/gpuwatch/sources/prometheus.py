"""PrometheusSource: prometheus-api-client with chunked range queries, retries, frames in base units."""

import copy
import json
import math
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from itertools import chain
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Final, TypeVar

import numpy as np
import numpy.typing as npt
import pandas as pd
import requests
import requests.adapters
import urllib3
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from gpuwatch.config import PrometheusSettings
from gpuwatch.errors import ConfigError, PrometheusError
from gpuwatch.model import MAX_POINTS_PER_SERIES, Window, utc
from gpuwatch.schema import DCGM_SAMPLES, QUEUE_USAGE
from gpuwatch.sources import promql
from gpuwatch.sources.dcgm import (
    DEV_GPU_UTIL,
    FIELDS,
    HOSTNAME_LABELS,
    NO_EXPORTERS,
    PROF_GR_ENGINE_ACTIVE,
    UTIL_FIELDS,
    ExporterPods,
    Field,
    RowBlock,
    combine_row_blocks,
    field_of,
    is_dcgm_metric,
    is_exporter_pod_name,
    resolve_uuid,
    resolve_workload,
    row_block,
    to_float,
)
from gpuwatch.sources.deadline import ACCEPT_ENCODING, Deadline, DeadlineError, InFlight, read_body
from gpuwatch.sources.vector import vector_frame

T = TypeVar("T")
RETRY_STATUSES: Final = frozenset({429, 500, 502, 503, 504})
MAX_SAMPLES_PER_QUERY: Final = 50_000_000  # Prometheus' default --query.max-samples
# A range query spans at most a day, as Thanos' and Mimir's query frontends split them. Prometheus
# evaluates a query's operators step by step over every series the whole span selects, so with pod
# churn one long query costs more than its days apart: 7 days of 1,000 GPUs at 5 min in one query
# outlived the default 2 min --query.timeout (benchmarks/collect.py); a day at a time takes ~1/7 each.
MAX_CHUNK_SECONDS: Final = 86_400.0
# A range query over the roll-ups of a family without pods (teams, pools, nodes: no churn) spans a month.
ROLLUP_CHUNK_SECONDS: Final = 31 * 86_400.0
# Range-query chunks in flight at once: Prometheus evaluates them on separate cores while gpuwatch decodes
# the answers; well under Prometheus' default --query.max-concurrency of 20.
MAX_CONCURRENT_QUERIES: Final = 4
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\"()\]]+)")


class _Current(threading.local):
    """The deadline of the call this thread is making (set by PrometheusSource._call)."""

    deadline: Deadline | None = None


_CURRENT = _Current()


class _DeadlineAdapter(requests.adapters.HTTPAdapter):
    """Sends with the time left of the thread's call as its connect and read timeouts, and reads the body
    within it (deadline.read_body): a source that accepts and stalls, or drips its answer, is cut then."""

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: float | tuple[float | None, float | None] | None = None,
        verify: bool | str = True,
        cert: str | tuple[str, str] | None = None,
        proxies: dict[str, str] | None = None,
    ) -> requests.Response:
        deadline = _CURRENT.deadline
        if deadline is None:
            return super().send(request, stream, timeout, verify, cert, proxies)
        left = deadline.check()
        response = super().send(request, True, (left, left), verify, cert, proxies)
        if not stream:
            try:
                response._content = read_body(response.raw, deadline)
            except urllib3.exceptions.DecodeError as e:
                raise requests.exceptions.ContentDecodingError(e) from e
            except (urllib3.exceptions.HTTPError, OSError) as e:  # cut or reset mid-answer: as refused
                raise requests.ConnectionError(e) from e
            response._content_consumed = True
        return response


class _HttpStatusError(Exception):
    """A non-200 answer, raised from the response hook so the status survives prometheus-api-client."""

    def __init__(self, status: int, message: str, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.retry_after = retry_after


class _BearerTokenFile(requests.auth.AuthBase):
    """Authorization: Bearer <token>, re-read from the file on every request (projected tokens rotate)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, request: Any) -> Any:
        try:
            token = Path(self.path).read_text(encoding="utf-8").strip()
        except OSError as e:
            raise ConfigError(f"cannot read the bearer token file {self.path}: {e.strerror}") from e
        request.headers["Authorization"] = f"Bearer {token}"
        return request


@dataclass(frozen=True, slots=True, kw_only=True)
class Points:
    """A query result as a series table: point k is (series[index[k]], timestamps[k], values[k])."""

    series: tuple[dict[str, str], ...]
    index: npt.NDArray[np.intp]
    timestamps: npt.NDArray[np.int64]  # epoch milliseconds
    values: npt.NDArray[np.float64]  # NaN where the value was NaN, ±Inf or garbage

    @staticmethod
    def empty() -> "Points":
        return Points(
            series=(),
            index=np.zeros(0, dtype=np.intp),
            timestamps=np.zeros(0, dtype=np.int64),
            values=np.zeros(0, dtype=np.float64),
        )

    @staticmethod
    def concat(parts: Sequence["Points"]) -> "Points":
        series: list[dict[str, str]] = []
        indices = []
        for part in parts:
            indices.append(part.index + len(series))
            series.extend(part.series)
        if not parts:
            return Points.empty()
        return Points(
            series=tuple(series),
            index=np.concatenate(indices),
            timestamps=np.concatenate([p.timestamps for p in parts]),
            values=np.concatenate([p.values for p in parts]),
        )

    def named(self, metric: str) -> "Points":
        """The same points with `__name__` set on every series (range functions drop it)."""
        series = tuple({**labels, "__name__": metric} for labels in self.series)
        return Points(series=series, index=self.index, timestamps=self.timestamps, values=self.values)

    def frame(self) -> pd.DataFrame:
        """Long frame: timestamp (UTC), value, and one str column per label ("" where absent)."""
        names = sorted({k for labels in self.series for k in labels})
        columns: dict[str, Any] = {
            "timestamp": pd.to_datetime(self.timestamps, unit="ms", utc=True),
            "value": self.values,
        }
        for name in names:
            table = np.array([labels.get(name, "") for labels in self.series], dtype=object)
            columns[name] = pd.Series(table[self.index], dtype="str")
        return pd.DataFrame(columns)


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


class PrometheusSource:
    """Reads DCGM series from Prometheus (or Thanos, Mimir, VictoriaMetrics) through its HTTP API.

    Transport: prometheus-api-client's PrometheusConnect with its own retries off; gpuwatch retries
    5xx/429/connection errors itself with exponential backoff for at most `max_attempts` calls (`sleep` is
    injectable). Prometheus `warnings` are collected (`warnings`, `take_warnings`). Every failure is a
    one-line PrometheusError chained to its cause. At most `max_concurrent_queries` requests are in flight
    at once, whichever threads send them.
    """

    def __init__(
        self,
        url: str,
        *,
        bearer_token_file: str | None = None,
        ca_file: str | None = None,
        basic_auth: tuple[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_seconds: float = 60.0,
        max_attempts: int = 4,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 10.0,
        max_samples_per_query: int = MAX_SAMPLES_PER_QUERY,
        max_points_per_series: int = MAX_POINTS_PER_SERIES,
        max_chunk_seconds: float = MAX_CHUNK_SECONDS,
        max_concurrent_queries: int = MAX_CONCURRENT_QUERIES,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not url:
            raise ConfigError("no Prometheus URL configured (--prometheus-url or GPUWATCH_PROMETHEUS_URL)")
        if bearer_token_file and basic_auth:
            raise ConfigError("configure either a bearer token file or basic auth for Prometheus, not both")
        if min(max_attempts, max_points_per_series, max_samples_per_query, max_concurrent_queries) < 1:
            raise ConfigError(
                "max_attempts, max_points_per_series, max_samples_per_query and max_concurrent_queries "
                "must be >= 1"
            )
        if not max_chunk_seconds > 0:
            raise ConfigError(f"max_chunk_seconds must be positive, got {max_chunk_seconds}")
        self.url = url.rstrip("/")
        self.timeout_seconds = timeout_seconds
        self.max_attempts = max_attempts
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self.max_samples_per_query = max_samples_per_query
        self.max_points_per_series = max_points_per_series
        self.max_chunk_seconds = max_chunk_seconds
        self.max_concurrent_queries = max_concurrent_queries
        # The matchers every read of gpuwatch's own series carries: one cluster's series of a store several
        # share (scoped()); none, the store's whole.
        self.scope: tuple[promql.Matcher, ...] = ()
        # Across every thread of the process: nested reads (families, their pieces) share one limit, so
        # Prometheus is not asked for more at once than it has cores to answer with.
        self._in_flight = threading.BoundedSemaphore(max_concurrent_queries)
        self._sleep = sleep
        self._lock = threading.Lock()
        self._warnings: list[str] = []
        self._hung_at: float | None = None  # when a read last ran out of time (monotonic)
        self._ca_file = ca_file
        self.reads = InFlight("prometheus", self.url)
        session = requests.Session()
        session.verify = ca_file if ca_file else True
        session.headers["Accept-Encoding"] = ACCEPT_ENCODING
        session.headers.update(headers or {})  # e.g. X-Scope-OrgID: a Mimir or Cortex tenant
        session.hooks["response"].append(self._on_response)
        self._session = session
        auth: Any = _BearerTokenFile(bearer_token_file) if bearer_token_file else basic_auth
        self._client = PrometheusConnect(
            url=self.url,
            session=session,
            auth=auth,
            timeout=timeout_seconds,
            retry=Retry(total=0, read=False, raise_on_status=False),  # retries are ours, read errors as is
        )
        # Mounted over the client's own adapter: every request is bounded by its call's deadline.
        no_retries = Retry(total=0, read=False, raise_on_status=False)
        session.mount(self.url, _DeadlineAdapter(max_retries=no_retries))

    @classmethod
    def from_settings(cls, settings: PrometheusSettings, **kwargs: Any) -> "PrometheusSource":
        return cls(
            settings.url or "",
            bearer_token_file=settings.bearer_token_file,
            ca_file=settings.ca_file,
            headers=settings.headers,
            timeout_seconds=settings.timeout_seconds,
            **kwargs,
        )

    def close(self) -> None:
        self._client.close()

    def load(self) -> None:
        """Read the local files the requests need (the bearer token, the CA bundle) now: a ConfigError
        naming one that is missing, before any request waits on the network."""
        token = self._client.auth
        if isinstance(token, _BearerTokenFile):
            token(SimpleNamespace(headers={}))  # reads the file as a request would
        if self._ca_file and not Path(self._ca_file).is_file():
            raise ConfigError(f"cannot read the Prometheus CA file {self._ca_file}: no such file")

    def scoped(self, matchers: Sequence[promql.Matcher]) -> "PrometheusSource":
        """The same store (connection, limits and warnings shared) whose gpuwatch_* series are read under
        `matchers` alone: one cluster's history in a store that several clusters share. Closing the store
        is its owner's (the unscoped source's) to do."""
        view = copy.copy(self)
        view.scope = tuple(matchers)
        return view

    # -- warnings ------------------------------------------------------------------------------

    @property
    def warnings(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._warnings)

    def take_warnings(self) -> list[str]:
        """The warnings collected so far (Prometheus' own and gpuwatch's about the data), then forget them."""
        with self._lock:
            out = list(self._warnings)
            self._warnings.clear()  # in place: a scoped() view of the store shares the list
            return out

    def _warn(self, message: str) -> None:
        line = " ".join(message.split())
        with self._lock:
            if line not in self._warnings:
                self._warnings.append(line)

    def _on_response(self, response: Any, *args: Any, **kwargs: Any) -> None:
        if response.status_code != 200:
            raise _HttpStatusError(response.status_code, _error_text(response), _retry_after(response))
        # Parse only when there is something to collect: results can be large.
        if b'"warnings"' in response.content:
            try:
                payload = response.json()
            except ValueError:
                return  # the caller's own parse reports it
            warnings = payload.get("warnings") if isinstance(payload, dict) else None
            for warning in warnings or ():
                self._warn(f"prometheus warning: {warning}")

    # -- calls with retries ----------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """fn() within one deadline of timeout_seconds from when it is sent, retries included: a 5xx, a
        429 or a refused connection is tried again (with backoff) while time is left; a source that does
        not answer in time is not asked again. A call that was waiting for its turn while another found
        the source silent gives up at once, so a hung source fails a command once, not once per query."""
        with self.reads.track():
            return self._attempts(what, fn, entered=time.monotonic())

    def _attempts(self, what: str, fn: Callable[[], T], *, entered: float) -> T:
        deadline: Deadline | None = None
        url = self.url
        for attempt in range(1, self.max_attempts + 1):
            try:
                with self._in_flight:
                    if self._hung_at is not None and self._hung_at >= entered:
                        raise DeadlineError("another read found the source silent")
                    deadline = deadline or Deadline(self.timeout_seconds)
                    _CURRENT.deadline = deadline
                    try:
                        answer = fn()
                    finally:
                        _CURRENT.deadline = None
                self._hung_at = None
                return answer
            except (DeadlineError, requests.Timeout) as e:
                self._hung_at = time.monotonic()
                raise PrometheusError(
                    f"prometheus at {url} unreachable: no answer within {self.timeout_seconds:g}s"
                ) from e
            except _HttpStatusError as e:
                failure = self._status_error(what, e)
                if e.status not in RETRY_STATUSES or attempt == self.max_attempts:
                    raise failure from e
                delay = e.retry_after if e.retry_after is not None else self._backoff(attempt)
            except requests.exceptions.SSLError as e:
                raise PrometheusError(f"prometheus at {url} unreachable: TLS error: {_reason(e)}") from e
            except requests.ConnectionError as e:
                failure = PrometheusError(f"prometheus at {url} unreachable: {_reason(e)}")
                if attempt == self.max_attempts:
                    raise failure from e
                delay = self._backoff(attempt)
            # requests' JSONDecodeError is a ValueError and a RequestException: malformed, not unreachable.
            except (ValueError, KeyError, TypeError, IndexError) as e:
                raise PrometheusError(
                    f"prometheus at {url} returned a malformed answer to {what}: {_one_line(str(e))}"
                ) from e
            except requests.RequestException as e:
                raise PrometheusError(f"prometheus at {url} unreachable: {_reason(e)}") from e
            except PrometheusApiClientException as e:
                raise PrometheusError(f"prometheus at {url}: {what} failed: {_one_line(str(e))}") from e
            pause = min(delay, self.max_backoff_seconds)
            if deadline is not None and pause >= deadline.remaining():
                raise failure  # no time left to try again: the last failure is the answer
            self._sleep(pause)
        raise AssertionError("unreachable")  # pragma: no cover

    def _parsed(self, what: str, result: Any, *, instant: bool) -> Points:
        try:
            return _parse(result, instant=instant)
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise PrometheusError(
                f"prometheus at {self.url} returned a malformed answer to {what}: {_one_line(str(e))}"
            ) from e

    def _backoff(self, attempt: int) -> float:
        return float(min(self.max_backoff_seconds, self.backoff_seconds * 2 ** (attempt - 1)))

    def _status_error(self, what: str, e: _HttpStatusError) -> PrometheusError:
        if e.status in (401, 403):
            return PrometheusError(
                f"prometheus at {self.url} refused {what} (HTTP {e.status}): "
                "check the bearer token or basic auth"
            )
        return PrometheusError(f"prometheus at {self.url}: {what} failed (HTTP {e.status}): {e.message}")

    # -- raw API ---------------------------------------------------------------------------------

    def query(self, query: str, *, at: datetime | None = None) -> pd.DataFrame:
        """An instant query as a long frame (timestamp, value, one column per label), decoded column by
        column (vector_frame) unless the answer is not a plain vector."""
        body = self._instant_body(query, at)
        frame = vector_frame(body)
        return self._instant_points(body).frame() if frame is None else frame

    def instant_points(self, query: str, *, at: datetime | None = None) -> Points:
        return self._instant_points(self._instant_body(query, at))

    def _instant_body(self, query: str, at: datetime | None) -> bytes:
        params = {"query": query, **({} if at is None else {"time": f"{utc(at).timestamp():.3f}"})}
        url = f"{self.url}/api/v1/query"
        auth, seconds = self._client.auth, self.timeout_seconds
        return self._call(
            "an instant query", lambda: self._session.get(url, params=params, auth=auth, timeout=seconds)
        ).content

    def _instant_points(self, body: bytes) -> Points:
        try:
            result = json.loads(body)["data"]["result"]
        except (ValueError, KeyError, TypeError) as e:
            what = "an instant query"
            raise PrometheusError(
                f"prometheus at {self.url} returned a malformed answer to {what}: {_one_line(str(e))}"
            ) from e
        return self._parsed("an instant query", result, instant=True)

    def query_range(
        self, query: str, *, start: datetime, end: datetime, step_seconds: int, series_estimate: int = 0
    ) -> pd.DataFrame:
        """A range query (evaluated at start, start+step, ..., end) as a long frame, chunked."""
        n = int((utc(end) - utc(start)).total_seconds() // step_seconds) + 1
        return self.range_points(
            query, first=utc(start), n=n, step_seconds=step_seconds, series_estimate=series_estimate
        ).frame()

    def range_points(
        self,
        query: str,
        *,
        first: datetime,
        n: int,
        step_seconds: int,
        series_estimate: int = 0,
        span_seconds: float | None = None,
    ) -> Points:
        """Evaluate at first + k*step for k < n, in chunks of at most max_points_per_series points,
        max_chunk_seconds (or `span_seconds`) and (with `series_estimate` series) max_samples_per_query
        samples; a chunk Prometheus still refuses for too many samples is halved."""
        if step_seconds <= 0:
            raise ConfigError(f"step must be positive, got {step_seconds}s")
        per_chunk = self.chunk_points(series_estimate, step_seconds=step_seconds, span_seconds=span_seconds)
        parts = []
        for a in range(0, max(n, 0), per_chunk):
            parts.append(self._range_chunk(query, first, a, min(n, a + per_chunk), step_seconds))
        return Points.concat(parts)

    def chunk_points(
        self, series_estimate: int, *, step_seconds: int | None = None, span_seconds: float | None = None
    ) -> int:
        """Evaluation points per range-query chunk: under 11,000 per series and the samples limit, and
        (given the step) spanning at most max_chunk_seconds (or `span_seconds`)."""
        by_samples = self.max_samples_per_query // max(1, series_estimate)
        span = span_seconds or self.max_chunk_seconds
        by_span = int(span // step_seconds) if step_seconds else self.max_points_per_series
        return max(1, min(self.max_points_per_series, by_samples, by_span))

    def _range_chunk(self, query: str, first: datetime, a: int, b: int, step: int) -> Points:
        start = first + timedelta(seconds=a * step)
        end = first + timedelta(seconds=(b - 1) * step)
        try:
            result = self._call(
                "a range query",
                lambda: self._client.custom_query_range(
                    query, start_time=start, end_time=end, step=f"{step}s"
                ),
            )
        except PrometheusError as e:
            cause = e.__cause__
            too_many = isinstance(cause, _HttpStatusError) and "too many samples" in cause.message
            if not too_many or b - a < 2:
                raise
            mid = (a + b) // 2
            return Points.concat(
                [self._range_chunk(query, first, a, mid, step), self._range_chunk(query, first, mid, b, step)]
            )
        return self._parsed("a range query", result, instant=False)

    def label_values(
        self,
        label: str,
        *,
        match: Sequence[str] = (),
        start: datetime | None = None,
        end: datetime | None = None,
    ) -> list[str]:
        """Values of a label on the series matching `match`, limited to [start, end] when given."""
        promql.check_label_name(label)
        params: dict[str, Any] = {"match[]": list(match)} if match else {}
        if start is not None and end is not None:
            params |= {"start": f"{utc(start).timestamp():.3f}", "end": f"{utc(end).timestamp():.3f}"}
        values = self._call(
            "a label-values lookup", lambda: self._client.get_label_values(label, params=params or None)
        )
        return [str(v) for v in values]

    def series(self, match: str, *, start: datetime, end: datetime) -> list[dict[str, str]]:
        found = self._call(
            "a series lookup",
            lambda: self._client.get_series(utc(start), utc(end), params={"match[]": [match]}),
        )
        return [{str(k): str(v) for k, v in s.items()} for s in found]

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


def _parse(result: Any, *, instant: bool) -> Points:
    """prometheus data.result (vector or matrix) -> Points; raises TypeError/KeyError when malformed.

    Points of all series are converted together (a week of a fleet is millions of [time, "value"] pairs).
    """
    if not isinstance(result, list):
        raise TypeError(f"expected a vector or matrix result, got {type(result).__name__}")
    series: list[dict[str, str]] = [item["metric"] for item in result]
    pairs: list[list[Any]] = [[item["value"]] if instant else item["values"] for item in result]
    if not series:
        return Points.empty()
    if any(type(found) is not list for found in pairs):
        raise TypeError("expected lists of [time, value] pairs")
    # JSON keys are str already; a value that is not (a malformed answer) is made one.
    if set(map(type, chain.from_iterable(labels.values() for labels in series))) - {str}:
        series = [{str(a): str(b) for a, b in labels.items()} for labels in series]
    seconds = np.array([p[0] for found in pairs for p in found], dtype=np.float64)
    values = to_float([p[1] for found in pairs for p in found])
    return Points(
        series=tuple(series),
        index=np.repeat(np.arange(len(series), dtype=np.intp), [len(found) for found in pairs]),
        timestamps=np.round(seconds * 1000.0).astype(np.int64),
        values=values,
    )


def _error_text(response: Any) -> str:
    try:
        payload = response.json()
        text = str(payload.get("error") or payload) if isinstance(payload, dict) else str(payload)
        kind = payload.get("errorType") if isinstance(payload, dict) else None
        return _one_line(f"{kind}: {text}" if kind else text)
    except ValueError:
        return _one_line(response.text or response.reason or "no details")


def _retry_after(response: Any) -> float | None:
    value = response.headers.get("Retry-After", "")
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _reason(e: BaseException) -> str:
    found = _ERRNO.search(str(e))
    if found:
        return found.group(1).strip().lower()
    return _one_line(str(e)) or type(e).__name__


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def allocation_history(
    source: PrometheusSource, window: Window, matchers: Sequence[promql.Matcher] = ()
) -> pd.DataFrame:
    """gpuwatch's own allocation series over the window: timestamp, namespace, pod, team, node, pool,
    ge_share per pod and sample (sample i read at t_i + step, like the GPU samples)."""
    step = window.step_seconds
    points = source.range_points(
        promql.pod_allocation_history_query(step_seconds=step, matchers=matchers),
        first=window.start + timedelta(seconds=step),
        n=window.n_samples,
        step_seconds=step,
    )
    frame = points.frame()
    columns = ["timestamp", *promql.POD_ALLOCATION_LABELS, "ge_share"]
    if not len(frame):
        return pd.DataFrame(
            {c: pd.Series(dtype="float64" if c == "ge_share" else "str") for c in columns}
        ).assign(timestamp=pd.Series(dtype="datetime64[ns, UTC]"))
    frame["timestamp"] = frame["timestamp"] - pd.Timedelta(seconds=step)
    for label in promql.POD_ALLOCATION_LABELS:
        if label not in frame:
            frame[label] = ""
    frame = frame.rename(columns={"value": "ge_share"})
    return frame[frame["ge_share"].notna() & frame["pod"].ne("")][columns].reset_index(drop=True)


# -- the history path: gpuwatch's own series over long windows (SPEC §4.3) --------------------------

HISTORY_PIECE_SECONDS: Final = 86_400  # one range evaluation reads at most a day of samples per series
_POD = promql.POD_HISTORY_LABELS


@dataclass(frozen=True, slots=True, kw_only=True)
class HistorySums:
    """gpuwatch's own series over a window, read piece by piece (frames in base units, labels as str).

    `pieces`: piece (0, 1, ...), end, seconds (its length) and samples (exporter cycles in it, 0 when
    none). The other frames carry `piece`, their label columns and `value`: a sum_over_time (Σ of the
    samples in the piece, so Σ × the piece's sample interval is GE-hours, or USD for the rates), a
    count_over_time, or a last_over_time (the last sample in the piece). The *_now frames are instant
    reads at the window's end (no `piece`): what the exporter published last.
    """

    pieces: pd.DataFrame
    pool_states: pd.DataFrame  # pool, state: Σ GE
    team_states: pd.DataFrame  # team, state: Σ GE (allocated_unknown, allocated_idle, allocated_active)
    team_used: pd.DataFrame  # team: Σ busy GE (utilization × GE share)
    team_cost: pd.DataFrame  # team: Σ USD/h allocated
    team_idle_cost: pd.DataFrame  # team: Σ USD/h idle-allocated
    team_power: pd.DataFrame  # team: Σ W its GPUs drew (its GE share of each)
    team_energy_cost: pd.DataFrame  # team: Σ USD/h of that energy
    pool_power: pd.DataFrame  # pool: Σ W all its GPUs drew, held or not
    pool_energy_cost: pd.DataFrame  # pool: Σ USD/h of that energy
    # The pod families (* : only the pods above 0 in the piece, the others read as 0)
    pod_allocated: pd.DataFrame  # namespace, pod, team, node, pool: Σ GE
    pod_idle: pd.DataFrame  # ... Σ idle-allocated GE *
    pod_used: pd.DataFrame  # ... Σ busy GE
    pod_unknown: pd.DataFrame  # ... Σ allocated GE whose utilization is unknown (no telemetry) *
    pod_last_allocated: pd.DataFrame  # ... GE at the pod's last sample in the piece
    pod_last_idle: pd.DataFrame  # ... idle-allocated GE at the pod's last sample in the piece *
    pod_idle_since: pd.DataFrame  # ... idle-since epoch seconds at the last sample that had one
    pod_idle_held: pd.DataFrame  # ... Σ idle GE with the framebuffer in use *
    pod_idle_abandoned: pd.DataFrame  # ... Σ idle GE with the framebuffer near empty *
    pod_power: pd.DataFrame  # ... Σ W its GPUs drew (its GE share of each; absent where unknown)
    pod_busy_p95: pd.DataFrame  # ... p95 of its busy GE (from roll-ups: its busiest hour's; absent: unknown)
    pod_memory_peak: pd.DataFrame  # ... peak bytes of GPU memory in use (absent: unknown)
    # What the report needs of the pods without them (from the pod families when those were read):
    namespace_sums: pd.DataFrame  # namespace, team, pool, family (NAMESPACE_FAMILIES): Σ GE of the pods
    namespace_pods: pd.DataFrame  # namespace, team: distinct pods seen in the window (no `piece`)
    fragmentation_sum: pd.DataFrame  # pool: Σ fragmentation ratio
    fragmentation_count: pd.DataFrame  # pool: samples of the ratio
    fragmented_sum: pd.DataFrame  # pool: Σ fragmented GE (empty from exporters before it was published)
    free_sum: pd.DataFrame  # pool: Σ schedulable free GE
    price_sum: pd.DataFrame  # pool: Σ USD per GPU-hour
    price_count: pd.DataFrame  # pool: samples of the price
    capacity_sum: pd.DataFrame  # node: Σ physical GPUs
    reporting_sum: pd.DataFrame  # node: Σ GPU units with DCGM telemetry (a MIG instance is a unit)
    nodes_now: pd.DataFrame  # node, pool: physical GPUs
    largest_free_block_now: pd.DataFrame  # pool: GE
    pending_now: pd.DataFrame  # namespace, pod, team, pool, blocked_by: GE requested
    pending_waiting_now: pd.DataFrame  # namespace, pod, team, pool: seconds waited
    pending_info_now: pd.DataFrame  # namespace, pod, team, pool and PENDING_INFO_LABELS
    tainted_nodes_now: pd.DataFrame  # pool, taint: nodes carrying it
    pool_info_now: pd.DataFrame  # pool, vendor (empty from exporters before it was published)
    # QUEUE_USAGE as the exporter published it (queue_usage_history; empty: not read, or none published)
    queue_usage: pd.DataFrame = field(default_factory=QUEUE_USAGE.empty)


def window_pieces(window: Window, *, piece_seconds: int = HISTORY_PIECE_SECONDS) -> pd.DataFrame:
    """The window cut into pieces of `piece_seconds` from its start, the last one shorter: piece, end,
    seconds."""
    if piece_seconds < 1:
        raise ConfigError(f"a history piece must last at least 1s, got {piece_seconds}s")
    full = int(window.duration_seconds // piece_seconds)
    rest = window.duration_seconds - full * piece_seconds
    seconds = [float(piece_seconds)] * full + ([rest] if rest >= 1e-3 else [])
    ends = [window.start + timedelta(seconds=piece_seconds * (k + 1)) for k in range(full)]
    ends += [window.end] if len(seconds) > full else []
    return pd.DataFrame(
        {
            "piece": np.arange(len(seconds), dtype=np.int64),
            "end": pd.to_datetime(ends, utc=True),
            "seconds": np.asarray(seconds, dtype=np.float64),
        }
    )


DEFAULT_HISTORY_RESOLUTION_SECONDS: Final = 60
# A piece to read: piece, end, seconds; grid_seconds, the grid it is read on; rollup, the roll-ups it is
# read from ("hour" or "day", promql.ROLLUPS; "" raw); resolution_seconds, the longest a grid sample stands
# for (the exporter's interval, at least the grid); samples, its grid points with an exporter cycle (0: none).
Build = Callable[[float, int, str], str]  # (range seconds, grid seconds, rollup) -> query
RAW: Final = ""


def history_pieces(
    source: PrometheusSource, window: Window, *, piece_seconds: int = HISTORY_PIECE_SECONDS
) -> pd.DataFrame:
    """The window's pieces for long sums: the whole hours between its ends from the hourly roll-ups, in
    pieces of `piece_seconds` (a multiple of an hour), the whole days among them from the daily roll-ups
    (when `piece_seconds` is a multiple of a day), and the part-hours at either end raw, on the exporter's
    grid (all raw where there are no roll-ups). A roll-up piece that counts fewer exporter cycles than the
    raw series hold (the rules missed an evaluation) is read from the level below instead: a day from its
    hours, an hour raw. A piece is never shorter than the exporter's interval: one the exporter had no
    cycle in is no gap in its history."""
    probed = max(piece_seconds, promql.INTERVAL_PROBE_SECONDS)  # a piece's count says its interval or less
    resolution = _exporter_resolution(source, window_pieces(window, piece_seconds=probed))
    piece_seconds = max(piece_seconds, resolution)
    plain = window_pieces(window, piece_seconds=piece_seconds)
    pieces = _rollup_pieces(source, window, piece_seconds, resolution)
    if pieces is None:
        grid = plain.assign(grid_seconds=resolution, rollup=RAW, resolution_seconds=resolution)
        return grid.assign(samples=_samples(source, grid))
    samples = _samples(source, pieces).copy()
    rolled = (pieces["rollup"] != RAW).to_numpy()
    raw = samples.copy()
    raw[rolled] = _samples(source, pieces[rolled].assign(rollup=RAW))
    # A scrape still in flight at an evaluation is left out of its roll-up: one per hour is let pass, but
    # never half an hour's cycles, so that an hour the rules missed is found whatever the interval.
    hours = pieces["seconds"].to_numpy() / promql.ROLLUP_SECONDS
    late = np.minimum(hours, 0.5 * promql.ROLLUP_SECONDS / resolution)
    for level, below in (("day", "hour"), ("hour", RAW)):
        missed = (pieces["rollup"] == level).to_numpy() & (samples < raw - late)
        if not missed.any():
            continue
        pieces.loc[missed, "rollup"] = below
        if below == RAW:
            pieces.loc[missed, ["grid_seconds", "resolution_seconds"]] = [resolution, resolution]
        samples[missed] = _samples(source, pieces[missed])
    return pieces.assign(samples=samples)


def _exporter_resolution(source: PrometheusSource, pieces: pd.DataFrame) -> int:
    """The history grid: the exporter's scrape interval rounded down (a grid no coarser holds at most
    one sample per interval); DEFAULT_HISTORY_RESOLUTION_SECONDS where nothing was published."""
    grid = pieces.assign(grid_seconds=1, rollup=RAW)
    cycles = _read_pieces(
        source,
        lambda s, g, r: promql.exporter_interval_query(range_seconds=s, matchers=source.scope),
        grid,
        (),
    )
    seconds = cycles["piece"].map(pieces.set_index("piece")["seconds"]).to_numpy(dtype=np.float64)
    probes = np.minimum(seconds, promql.INTERVAL_PROBE_SECONDS)
    intervals = probes / cycles["value"].to_numpy(dtype=np.float64)
    intervals = intervals[np.isfinite(intervals) & (intervals > 0)]
    return max(1, int(intervals.min())) if len(intervals) else DEFAULT_HISTORY_RESOLUTION_SECONDS


def _samples(source: PrometheusSource, pieces: pd.DataFrame) -> "npt.NDArray[np.float64]":
    """Per piece, the grid points at which some exporter cycle was published (0: none)."""

    def build(seconds: float, grid: int, rollup: str) -> str:
        return promql.exporter_samples_query(
            range_seconds=seconds, resolution_seconds=grid, rollup=rollup, matchers=source.scope
        )

    counts = _read_pieces(source, build, pieces, ())
    per_piece = counts.groupby("piece")["value"].sum()
    return pieces["piece"].map(per_piece).fillna(0.0).to_numpy(dtype=np.float64)


def _rollup_pieces(
    source: PrometheusSource, window: Window, piece_seconds: int, resolution: int
) -> pd.DataFrame | None:
    """Pieces with the roll-ups' whole hours in the middle, their whole days from the daily roll-ups
    (samples not yet counted); None when there are no roll-ups to read (none evaluated in the window's
    last two hours, or no whole hour in it)."""
    hour = timedelta(seconds=promql.ROLLUP_SECONDS)
    if piece_seconds % promql.ROLLUP_SECONDS:
        return None
    last = _last_evaluation(source, window, "hour")
    if last is None:
        return None
    whole = int((last - window.start) / hour)
    if whole < 1:
        return None
    first = last - whole * hour
    days = _day_span(source, window, first, last) if piece_seconds % promql.DAY_SECONDS == 0 else None
    spans: list[tuple[datetime, float, str]] = []
    if (first - window.start).total_seconds() > promql.MIN_RANGE_SECONDS:
        spans.append((first, (first - window.start).total_seconds(), RAW))
    if days is None:
        spans += _spans(first, last, piece_seconds, "hour")
    else:
        spans += _spans(first, days[0], piece_seconds, "hour")
        spans += _spans(days[0], days[1], promql.DAY_SECONDS, "day")
        spans += _spans(days[1], last, piece_seconds, "hour")
    if (window.end - last).total_seconds() > promql.MIN_RANGE_SECONDS:
        spans.append((window.end, (window.end - last).total_seconds(), RAW))
    ends, seconds, rollup = zip(*spans, strict=True)
    rolled = np.asarray(rollup) != RAW
    return pd.DataFrame(
        {
            "piece": np.arange(len(spans), dtype=np.int64),
            "end": pd.to_datetime(list(ends), utc=True),
            "seconds": np.asarray(seconds, dtype=np.float64),
            "grid_seconds": np.where(rolled, promql.ROLLUP_GRID_SECONDS, resolution),
            "rollup": np.asarray(rollup, dtype=object),
            "resolution_seconds": np.where(rolled, max(promql.ROLLUP_GRID_SECONDS, resolution), resolution),
        }
    )


def _last_evaluation(source: PrometheusSource, window: Window, level: str) -> datetime | None:
    """When the level's roll-ups were last evaluated by the window's end (None: not lately)."""
    marker = source.query(promql.rollup_marker_query(level, source.scope), at=window.end)
    if not len(marker):
        return None
    return datetime.fromtimestamp(round(float(marker["value"].max()), 3), UTC)


def _day_span(
    source: PrometheusSource, window: Window, first: datetime, last: datetime
) -> tuple[datetime, datetime] | None:
    """day_span() of the daily roll-ups' latest evaluation by the window's end (None: none lately)."""
    evaluated = _last_evaluation(source, window, "day")
    return None if evaluated is None else day_span(first, last, evaluated)


def day_span(first: datetime, last: datetime, evaluated: datetime) -> tuple[datetime, datetime] | None:
    """The run of whole days the daily roll-ups hold within the roll-up hours (first, last], the hourly
    roll-ups evaluated at `last` and every hour before it, the daily ones at `evaluated` and every day
    before it: a day evaluated at D sums the hours evaluated in (D − lag − 1 d, D − lag], so its hours end
    at the last hourly evaluation at or before D − lag. None when not one whole day fits."""
    hour = timedelta(seconds=promql.ROLLUP_SECONDS)
    day = timedelta(seconds=promql.DAY_SECONDS)
    covered = evaluated - timedelta(seconds=promql.DAY_ROLLUP_LAG_SECONDS)
    end = last + math.floor((covered - last) / hour) * hour
    if end > last:  # the days evaluated after the hours stopped hold none of them
        end -= math.ceil((end - last) / day) * day
    count = int((end - first) / day)
    return (end - count * day, end) if count >= 1 else None


def _spans(a: datetime, b: datetime, seconds: int, rollup: str) -> list[tuple[datetime, float, str]]:
    """(a, b] cut into pieces of `seconds` from a (the last shorter): (end, length, rollup) each."""
    spans = []
    t = a
    while t < b:
        end = min(b, t + timedelta(seconds=seconds))
        spans.append((end, (end - t).total_seconds(), rollup))
        t = end
    return spans


# The per-pod families of HistorySums and their queries. A pod never idle or unknown in a piece, or not
# idle at its last sample there, is left out of those families (read as 0): most of a month's ~50,000 pods.
_ALLOCATION, _IDLE, _USED, _UNKNOWN = promql.POD_SUM_METRICS
POD_IDLE_SPLIT: Final = ("pod_idle_held", "pod_idle_abandoned")
POD_NEEDS: Final = ("pod_busy_p95", "pod_memory_peak")  # right-sizing's, per piece: the highest counts
POD_FAMILIES: Final[dict[str, Callable[..., str]]] = {
    "pod_allocated": partial(promql.pod_gpus_sum_query, _ALLOCATION),
    "pod_idle": partial(promql.pod_gpus_sum_query, _IDLE, nonzero=True),
    "pod_used": partial(promql.pod_gpus_sum_query, _USED),
    "pod_unknown": partial(promql.pod_gpus_sum_query, _UNKNOWN, nonzero=True),
    "pod_last_allocated": partial(promql.pod_gpus_last_query, _ALLOCATION),
    "pod_last_idle": partial(promql.pod_gpus_last_query, _IDLE, nonzero=True),
    "pod_idle_since": promql.pod_idle_since_last_query,
    **{
        name: partial(promql.pod_gpus_sum_query, metric, nonzero=True)
        for name, metric in zip(POD_IDLE_SPLIT, promql.POD_IDLE_SPLIT_METRICS, strict=True)
    },
    "pod_power": partial(promql.pod_gpus_sum_query, promql.POD_POWER_METRIC),
    **{
        name: partial(promql.pod_need_query, metric)
        for name, (metric, _) in zip(POD_NEEDS, promql.POD_NEED_ROLLUPS, strict=True)
    },
}


# namespace_sums' families: the pod family each sums.
NAMESPACE_FAMILIES: Final = {
    **dict(zip(("allocated", "idle", "used", "unknown"), promql.POD_SUM_METRICS, strict=True)),
    "power": promql.POD_POWER_METRIC,
    **dict(zip(("idle_held", "idle_abandoned"), promql.POD_IDLE_SPLIT_METRICS, strict=True)),
}
PODS_SEEN: Final = "pods"  # PodFamilies.totals(): the pods counted
_POD_POOLS: Final = "pod_pools"  # PodFamilies: each pod's allocation per pool (_pod_pools)
_POD_POOL_LABELS: Final = ("namespace", "pod", "team", "pool")


class PodFamilies:
    """The per-pod families of a window's pieces (only `teams`' pods, or only `pods` (namespace, pod),
    when given), each read from Prometheus the first time it is asked for, then kept: a page that draws
    a few pods' rows reads the families those rows need, not the ~50,000 pods of a month seven times
    over."""

    def __init__(
        self,
        source: PrometheusSource,
        pieces: pd.DataFrame,
        *,
        teams: Sequence[str] = (),
        pods: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.source = source
        self.pieces = pieces
        self.teams = tuple(teams)
        self.pods = frozenset(pods)
        self.matchers = [promql.one_of("team", self.teams)] if self.teams else []
        if self.pods:  # a superset of the pods (namespace × pod): the exact ones are kept once read
            self.matchers += [
                promql.one_of("namespace", sorted({n for n, _ in self.pods})),
                promql.one_of("pod", sorted({p for _, p in self.pods})),
            ]
        self._read: dict[str, Future[pd.DataFrame]] = {}
        self._totals: dict[str, Future[pd.DataFrame]] = {}
        self._covered: bool | None = None
        self._lock = threading.Lock()

    def read(self, *names: str) -> dict[str, pd.DataFrame]:
        """The families `names` (all of POD_FAMILIES when none), those not yet read side by side."""
        return {n: f.result() for n, f in self.start(*names).items()}

    def start(self, *names: str) -> dict[str, "Future[pd.DataFrame]"]:
        """Start reading the families `names` (all when none) not yet read or being read; their futures."""
        return self._once(self._read, names or tuple(POD_FAMILIES), self._family)

    def _once(
        self,
        kept: dict[str, "Future[pd.DataFrame]"],
        names: Sequence[str],
        read: Callable[[str], pd.DataFrame],
    ) -> dict[str, "Future[pd.DataFrame]"]:
        """kept[name] for each of `names`, read(name) started side by side for those not yet in it."""
        with self._lock:
            missing = [n for n in names if n not in kept]
            if missing:
                pool = ThreadPoolExecutor(max_workers=min(len(missing), self.source.max_concurrent_queries))
                for name in missing:
                    kept[name] = pool.submit(read, name)
                pool.shutdown(wait=False)  # its threads end with their reads
            return {n: kept[n] for n in names}

    def _family(self, name: str) -> pd.DataFrame:
        frame = _family(self.source, self.pieces, POD_FAMILIES[name], _POD, self.matchers)
        if not self.pods:
            return frame
        pairs = pd.MultiIndex.from_frame(frame[["namespace", "pod"]])
        return frame[pairs.isin(list(self.pods))].reset_index(drop=True)

    def totals(self, *families: str) -> dict[str, pd.DataFrame]:
        """HistorySums' namespace_sums of `families` (of NAMESPACE_FAMILIES; namespace_pods too when
        PODS_SEEN is one of them) and, when none are named, of all with namespace_pods, each once and
        kept: the idle GE from the idle pods' family (a tenth of the pods), the allocated GE and the pods
        from one read of each pod's allocation per pool, the others summed by Prometheus (one row per
        namespace, team, pool and piece)."""
        wanted = families or (*NAMESPACE_FAMILIES, PODS_SEEN)
        read = {n: f.result() for n, f in self._once(self._totals, wanted, self._total).items()}
        parts = [read[n].assign(family=n) for n in wanted if n != PODS_SEEN]
        pods = read.get(PODS_SEEN, _labelled(pd.DataFrame(), ("namespace", "team")).drop(columns="piece"))
        return {"namespace_sums": pd.concat(parts, ignore_index=True), "namespace_pods": pods}

    def _total(self, name: str) -> pd.DataFrame:
        if not self.pods and self._namespace_rollups():
            # Recorded per namespace: Prometheus reads the namespaces' series, not the window's pods' (at
            # real churn, ~2 a GPU a day), except in the stretches read raw at the window's ends.
            if name == PODS_SEEN:
                return _pods_counted(self.source, self.pieces, self.matchers)
            query = partial(promql.namespace_gpus_sum_query, NAMESPACE_FAMILIES[name], namespace_rollups=True)
            return _family(self.source, self.pieces, query, promql.NAMESPACE_LABELS, self.matchers)
        if name in (PODS_SEEN, "allocated"):  # both from one read of the pods' allocation
            held = self._once(self._totals, [_POD_POOLS], self._pod_pools)[_POD_POOLS].result()
            return _pods_seen(held) if name == PODS_SEEN else _per_namespace(held)
        if name == "idle":
            return _per_namespace(self.read("pod_idle")["pod_idle"])
        query = partial(promql.namespace_gpus_sum_query, NAMESPACE_FAMILIES[name])
        return _family(self.source, self.pieces, query, promql.NAMESPACE_LABELS, self.matchers)

    def _namespace_rollups(self) -> bool:
        """Whether the namespace roll-ups cover every piece read from roll-ups (asked once): not where the
        rules that ran were older than them (then the pods' roll-ups are summed, as before)."""
        with self._lock:
            if self._covered is None:
                self._covered = namespace_rollups_cover(self.source, self.pieces)
            return self._covered

    def _pod_pools(self, _name: str) -> pd.DataFrame:
        """piece, namespace, pod, team, pool, value: each pod's allocated GE summed per pool and piece.
        The namespaces' allocation and their pods are both counted from it: Prometheus looks the pods'
        series up once, not twice (a month's ~50,000 pods: most of a query's cost)."""
        query = partial(promql.namespace_gpus_sum_query, _ALLOCATION, by=_POD_POOL_LABELS)
        return _family(self.source, self.pieces, query, _POD_POOL_LABELS, self.matchers)


class PodReader:
    """The per-pod families of one window's pieces, read when asked for: every pod's or some teams'
    (PodFamilies, kept per set of teams), or a few pods'."""

    def __init__(self, source: PrometheusSource, pieces: pd.DataFrame) -> None:
        self.source = source
        self.pieces = pieces
        self._teams: dict[tuple[str, ...], PodFamilies] = {}
        self._end: PodFamilies | None = None
        self._lock = threading.Lock()

    def of_teams(self, teams: tuple[str, ...] = ()) -> PodFamilies:
        """Every pod's families (`teams`' only, when given), each read once."""
        with self._lock:
            if teams not in self._teams:
                self._teams[teams] = PodFamilies(self.source, self.pieces, teams=teams)
            return self._teams[teams]

    def at_end(self) -> PodFamilies:
        """Every pod's families over the window's last exporter interval alone (what it published last)."""
        with self._lock:
            if self._end is None:
                grids = self.pieces["resolution_seconds"]  # the exporter interval (60 s at least if rolled)
                seconds = int(grids.min()) if len(grids) else DEFAULT_HISTORY_RESOLUTION_SECONDS
                end = pd.DataFrame(
                    {
                        "piece": [0],
                        "end": [self.pieces["end"].max()],
                        "seconds": [float(seconds)],
                        "grid_seconds": [seconds],
                        "rollup": [RAW],
                        "resolution_seconds": [seconds],
                        "samples": [1.0],
                    }
                )
                self._end = PodFamilies(self.source, end)
            return self._end

    def of_pods(self, pods: Sequence[tuple[str, str]]) -> PodFamilies:
        """The families of these pods (namespace, pod) alone (at least one)."""
        if not pods:
            raise ValueError("of_pods() needs at least one pod")
        return PodFamilies(self.source, self.pieces, pods=pods)


def pod_totals(pods: Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """HistorySums' namespace_sums and namespace_pods from its per-pod families."""
    parts = [_per_namespace(pods[f"pod_{f}"]).assign(family=f) for f in NAMESPACE_FAMILIES]
    return {
        "namespace_sums": pd.concat(parts, ignore_index=True),
        "namespace_pods": _pods_seen(pods["pod_last_allocated"]),
    }


def _per_namespace(pods: pd.DataFrame) -> pd.DataFrame:
    """piece, namespace, team, pool, value: a pod family summed per namespace and pool."""
    keys = ["piece", "namespace", "team", "pool"]
    return pods.groupby(keys, as_index=False, sort=True).agg(value=("value", "sum"))


def namespace_rollups_cover(source: PrometheusSource, pieces: pd.DataFrame) -> bool:
    """Whether every level of roll-ups the pieces read holds as many namespace roll-up evaluations as pod
    ones over their span (rules older than the namespace roll-ups ran before an upgrade: fewer)."""
    for level in sorted(set(pieces["rollup"]) - {RAW}):
        rolled = pieces[pieces["rollup"] == level]
        first = pd.Timestamp(rolled["end"].min()) - pd.Timedelta(seconds=float(rolled["seconds"].max()))
        at = _read_time(pd.Timestamp(rolled["end"].max()), level)
        seconds = (at - first).total_seconds()
        counts = [
            source.query(
                promql.namespace_rollup_count_query(
                    namespaces=namespaces, level=level, range_seconds=seconds, matchers=source.scope
                ),
                at=at.to_pydatetime(),
            )
            for namespaces in (False, True)
        ]
        pods, namespaces = (float(c["value"].sum()) if len(c) else 0.0 for c in counts)
        if namespaces < pods:
            return False
    return True


def _pods_counted(
    source: PrometheusSource, pieces: pd.DataFrame, matchers: Sequence[promql.Matcher]
) -> pd.DataFrame:
    """namespace, team, value: the window's distinct pods that held GPUs, from counts alone: its first
    piece's pods and, in each later piece, those new to it (none of their samples in the hour before;
    a pod holds GPUs in one stretch). A first piece of several hours' or a day's roll-ups counts its
    first hour's pods and its new ones less that hour's."""
    labels = ("namespace", "team")
    ordered = pieces.sort_values("end", kind="stable")
    first, later = ordered.iloc[:1], ordered.iloc[1:]
    present, new = (partial(promql.namespace_pods_query, new=flag) for flag in (False, True))
    parts = []
    if len(first) and first["rollup"].iloc[0] != RAW and first["seconds"].iloc[0] > promql.ROLLUP_SECONDS:
        hour = first.assign(
            end=first["end"] - pd.to_timedelta(first["seconds"] - promql.ROLLUP_SECONDS, unit="s"),
            seconds=float(promql.ROLLUP_SECONDS),
            rollup="hour",
        )
        parts += [
            _family(source, hour, present, labels, matchers),
            _family(source, hour, new, labels, matchers).pipe(lambda f: f.assign(value=-f["value"])),
            _family(source, first, new, labels, matchers),
        ]
    elif len(first):
        parts.append(_family(source, first, present, labels, matchers))
    if len(later):
        parts.append(_family(source, later, new, labels, matchers))
    counted = pd.concat(parts, ignore_index=True) if parts else _labelled(pd.DataFrame(), labels)
    summed = counted.groupby(list(labels), as_index=False, sort=True).agg(value=("value", "sum"))
    return summed[summed["value"] > 0].reset_index(drop=True)


def _pods_seen(held: pd.DataFrame) -> pd.DataFrame:
    """namespace, team, value: the distinct pods (namespace, pod, team) of a family that names every pod
    in each piece it held GPUs (an allocation family)."""
    seen = held.drop_duplicates(["namespace", "pod", "team"])
    counted = seen.groupby(["namespace", "team"], as_index=False).size().rename(columns={"size": "value"})
    return counted.astype({"value": "float64"})


def history_sums(
    source: PrometheusSource,
    window: Window,
    *,
    piece_seconds: int = HISTORY_PIECE_SECONDS,
    pieces: pd.DataFrame | None = None,
    pods: bool = True,
    queue_step_seconds: int | None = None,
) -> HistorySums:
    """Every gpuwatch_* sum, count and last value the history report needs, piece by piece (server-side
    aggregation: per pod at most, never per GPU; history_pieces() says which pieces come from the hourly
    roll-ups), and the latest published pending pods and capacity.

    pods=False leaves the per-pod families and what is counted from them (namespace_*) empty: a team
    trend needs only the team, pool and node series, and a view reads the rest as a page asks
    (PodReader). queue_step_seconds: the queue grid's step, to read the queues' usage on it
    (queue_usage_history; None: not read)."""

    if pieces is None:
        pieces = history_pieces(source, window, piece_seconds=piece_seconds)

    pool = ThreadPoolExecutor(max_workers=source.max_concurrent_queries)

    def each(query: Callable[..., str], labels: Sequence[str], **kwargs: bool) -> "Future[pd.DataFrame]":
        return pool.submit(_family, source, pieces, partial(query, **kwargs), labels)

    def now(
        query: Callable[[Sequence[promql.Matcher]], str], labels: Sequence[str]
    ) -> "Future[pd.DataFrame]":
        return pool.submit(
            lambda: _labelled(source.query(query(source.scope), at=window.end), labels).drop(columns="piece")
        )

    frag, price = (partial(promql.pool_sum_query, m) for m in promql.POOL_MEAN_METRICS)
    fragmented, free = (partial(promql.pool_sum_query, m) for m in promql.POOL_GE_METRICS)
    capacity, reporting = (partial(promql.node_sum_query, m) for m in promql.NODE_SUM_METRICS)
    team_power, team_energy_cost = (
        partial(promql.team_energy_sum_query, m) for m in promql.TEAM_ENERGY_METRICS
    )
    pool_power, pool_energy_cost = (partial(promql.pool_sum_query, m) for m in promql.POOL_ENERGY_METRICS)
    empty_pods = _labelled(pd.DataFrame(), _POD)
    with pool:  # the families are read side by side (Prometheus evaluates each query on one core)
        families = pool.submit(PodFamilies(source, pieces).read) if pods else None
        reads = dict(
            pool_states=each(promql.pool_state_gpus_sum_query, ("pool", "state")),
            team_states=each(promql.team_state_gpus_sum_query, ("team", "state")),
            team_used=each(promql.team_used_gpus_sum_query, ("team",)),
            team_cost=each(promql.team_cost_sum_query, ("team",)),
            team_idle_cost=each(promql.team_cost_sum_query, ("team",), idle=True),
            team_power=each(team_power, ("team",)),
            team_energy_cost=each(team_energy_cost, ("team",)),
            pool_power=each(pool_power, ("pool",)),
            pool_energy_cost=each(pool_energy_cost, ("pool",)),
            fragmentation_sum=each(frag, ("pool",)),
            fragmentation_count=each(frag, ("pool",), count=True),
            fragmented_sum=each(fragmented, ("pool",)),
            free_sum=each(free, ("pool",)),
            price_sum=each(price, ("pool",)),
            price_count=each(price, ("pool",), count=True),
            capacity_sum=each(capacity, ("node",)),
            reporting_sum=each(reporting, ("node",)),
            nodes_now=now(promql.node_capacity_latest_query, ("node", "pool")),
            largest_free_block_now=now(promql.largest_free_block_latest_query, ("pool",)),
            pending_now=now(promql.pending_pod_gpus_latest_query, (*promql.PENDING_LABELS, "blocked_by")),
            pending_waiting_now=now(promql.pending_pod_waiting_latest_query, promql.PENDING_LABELS),
            pending_info_now=now(
                promql.pending_pod_info_latest_query, (*promql.PENDING_LABELS, *promql.PENDING_INFO_LABELS)
            ),
            tainted_nodes_now=now(promql.pool_tainted_nodes_latest_query, ("pool", "taint")),
            pool_info_now=now(promql.pool_info_latest_query, ("pool", "vendor")),
        )
        if queue_step_seconds is not None:
            resolution = int(pieces["resolution_seconds"].min()) if len(pieces) else 0
            reads["queue_usage"] = pool.submit(
                queue_usage_history,
                source,
                window,
                step_seconds=queue_step_seconds,
                resolution_seconds=resolution or DEFAULT_HISTORY_RESOLUTION_SECONDS,
            )
    frames = {k: v.result() for k, v in reads.items()}
    frames |= families.result() if families is not None else dict.fromkeys(POD_FAMILIES, empty_pods)
    return HistorySums(pieces=pieces, **frames, **pod_totals(frames))


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryTimeline:
    """gpuwatch's own series summed per bucket of a window (pieces of `bucket` seconds), for drawing:
    frames as in HistorySums (piece = bucket), low-cardinality families only (pool, team)."""

    pieces: pd.DataFrame  # piece, end, seconds, resolution_seconds, samples (grid points published)
    pool_states: pd.DataFrame  # pool, state: Σ GE
    team_states: pd.DataFrame  # team, state: Σ GE
    team_used: pd.DataFrame  # team: Σ busy GE
    fragmentation_sum: pd.DataFrame  # pool: Σ fragmentation ratio
    fragmentation_count: pd.DataFrame  # pool: samples of the ratio
    fragmented_sum: pd.DataFrame  # pool: Σ fragmented GE
    free_sum: pd.DataFrame  # pool: Σ schedulable free GE


def history_timeline(source: PrometheusSource, window: Window, *, bucket_seconds: int) -> HistoryTimeline:
    """The pool and team series of the window per bucket: O(groups × buckets) rows, whatever the fleet
    (buckets of whole hours from the hourly roll-ups, as history_pieces())."""
    pieces = history_pieces(source, window, piece_seconds=bucket_seconds)

    def each(query: Callable[..., str], labels: Sequence[str]) -> pd.DataFrame:
        return _family(source, pieces, query, labels)

    ratio = partial(promql.pool_sum_query, promql.POOL_MEAN_METRICS[0])
    fragmented, free = (partial(promql.pool_sum_query, m) for m in promql.POOL_GE_METRICS)
    return HistoryTimeline(
        pieces=pieces,
        pool_states=each(promql.pool_state_gpus_sum_query, ("pool", "state")),
        team_states=each(promql.team_state_gpus_sum_query, ("team", "state")),
        team_used=each(promql.team_used_gpus_sum_query, ("team",)),
        fragmentation_sum=each(ratio, ("pool",)),
        fragmentation_count=each(partial(ratio, count=True), ("pool",)),
        fragmented_sum=each(fragmented, ("pool",)),
        free_sum=each(free, ("pool",)),
    )


def queue_usage_history(
    source: PrometheusSource, window: Window, *, step_seconds: int, resolution_seconds: int
) -> pd.DataFrame:
    """QUEUE_USAGE as `gpuwatch export` published it (gpuwatch_queue_{nominal,used,borrowed,lent}_gpus), on
    the grid of the window's start `step_seconds` apart: sample t is each family's mean over the
    exporter's cycles in (t, t + step], read at t + step. A queue and pool the exporter published nothing
    for at a sample has no row there (the queue did not exist, or no exporter ran: coverage says which);
    empty when it never published one (no Kueue, or an exporter before gpuwatch read it). A few series
    per queue: each family is one range query over the whole window."""
    n = math.ceil(window.duration_seconds / step_seconds)
    keys = ["timestamp", *promql.QUEUE_POOL_LABELS]

    def read(metric: str) -> pd.DataFrame:
        query = promql.queue_gpus_mean_query(
            metric, range_seconds=step_seconds, resolution_seconds=resolution_seconds, matchers=source.scope
        )
        first = window.start + timedelta(seconds=step_seconds)
        frame = source.range_points(
            query, first=first, n=n, step_seconds=step_seconds, span_seconds=ROLLUP_CHUNK_SECONDS
        ).frame()
        column = metric.removeprefix("gpuwatch_queue_")
        # A label no series carries (no queue in any cohort) is "" on every row, as an absent label is.
        out = pd.DataFrame({k: frame[k] if k in frame else pd.Series("", index=frame.index) for k in keys})
        return out.assign(**{column: frame["value"].to_numpy(dtype=np.float64)}).set_index(keys)

    with ThreadPoolExecutor(max_workers=len(promql.QUEUE_GPU_METRICS)) as pool:
        parts = list(pool.map(read, promql.QUEUE_GPU_METRICS))
    usage = pd.concat(parts, axis=1, join="outer").reset_index()
    if not len(usage):
        return QUEUE_USAGE.empty()
    usage["timestamp"] = usage["timestamp"] - pd.Timedelta(seconds=step_seconds)
    usage = usage.sort_values(["cluster_queue", "pool", "timestamp"], ignore_index=True)
    return QUEUE_USAGE.check(usage[list(QUEUE_USAGE.columns)].astype({k: "str" for k in keys[1:]}))


def team_pool_timeline(
    source: PrometheusSource, *, pieces: pd.DataFrame, teams: Sequence[str] = ()
) -> dict[str, pd.DataFrame]:
    """Per bucket of `pieces` (history_timeline's), team and pool: Σ GE of the pods' allocation, idle,
    used and unknown families (only `teams`' pods when given), keyed by family name."""
    return {
        metric: _family(
            source, pieces, partial(promql.team_pool_gpus_sum_query, metric, teams=teams), ("team", "pool")
        )
        for metric in promql.POD_SUM_METRICS
    }


def pods_by_node_now(
    source: PrometheusSource, at: datetime, *, teams: Sequence[str] = ()
) -> dict[str, pd.DataFrame]:
    """team, pool, node, value: GE of the pods' allocation, idle, used and unknown families as the exporter
    last published them (only `teams`' pods when given), keyed by family name."""
    return {
        metric: _labelled(
            source.query(
                promql.pod_gpus_by_node_latest_query(metric, teams=teams, matchers=source.scope), at=at
            ),
            ("team", "pool", "node"),
        ).drop(columns="piece")
        for metric in promql.POD_SUM_METRICS
    }


def team_states_now(source: PrometheusSource, at: datetime) -> pd.DataFrame:
    """team, state, value: GE each team held per allocated state as the exporter last published it."""
    return _labelled(
        source.query(promql.team_state_gpus_latest_query(source.scope), at=at), ("team", "state")
    ).drop(columns="piece")


def node_states_now(source: PrometheusSource, at: datetime) -> pd.DataFrame:
    """node, pool, state, value: GE of each node per ledger state as the exporter last published it."""
    return _labelled(
        source.query(promql.node_state_gpus_latest_query(source.scope), at=at), ("node", "pool", "state")
    ).drop(columns="piece")


def _family(
    source: PrometheusSource,
    pieces: pd.DataFrame,
    query: Callable[..., str],
    labels: Sequence[str],
    matchers: Sequence[promql.Matcher] = (),
    **kwargs: Any,
) -> pd.DataFrame:
    """A history builder of promql (range_seconds, resolution_seconds, rollup, matchers) read over the
    pieces, under the source's scope and `matchers`."""
    matchers = [*source.scope, *matchers]

    def build(seconds: float, grid: int, rollup: str) -> str:
        return str(
            query(range_seconds=seconds, resolution_seconds=grid, rollup=rollup, matchers=matchers, **kwargs)
        )

    return _read_pieces(source, build, pieces, labels)


def _read_pieces(
    source: PrometheusSource, build: Build, pieces: pd.DataFrame, labels: Sequence[str]
) -> pd.DataFrame:
    """build(range, grid, rollup) evaluated at the end of every piece: each run of back-to-back pieces of
    one length, grid and form in one range query (step = the piece), a piece alone as an instant query.
    A range query of a family without per-pod labels from the roll-ups may span a month (a few series,
    no churn); any other spans a day at most (MAX_CHUNK_SECONDS). Frame: piece, labels, value."""
    runs: list[list[int]] = []
    ids = pieces["piece"].to_numpy()
    ends = pd.DatetimeIndex(pieces["end"])
    forms = list(zip(pieces["seconds"], pieces["grid_seconds"], pieces["rollup"], strict=True))

    def read(run: list[int]) -> pd.DataFrame:
        seconds, grid, rollup = float(forms[run[0]][0]), int(forms[run[0]][1]), str(forms[run[0]][2])
        query = build(seconds, grid, rollup)
        at = _read_time(ends[run[0]], rollup)
        if len(run) == 1:
            return source.query(query, at=at.to_pydatetime()).assign(piece=ids[run[0]])
        span = ROLLUP_CHUNK_SECONDS if rollup and "pod" not in labels else None
        frame = source.range_points(
            query, first=at.to_pydatetime(), n=len(run), step_seconds=round(seconds), span_seconds=span
        ).frame()
        offset = (frame["timestamp"] - at).dt.total_seconds() / seconds
        index = np.clip(np.round(offset), 0, len(run) - 1).astype("int64")
        return frame.assign(piece=ids[run][index])

    for k in range(len(pieces)):
        if runs:
            a = runs[-1][-1]
            whole = float(forms[a][0]).is_integer()
            next_to = ends[k] - ends[a] == pd.Timedelta(seconds=float(forms[k][0]))
            if forms[a] == forms[k] and whole and next_to:
                runs[-1].append(k)
                continue
        runs.append([k])
    if len(runs) > 1:  # the runs (a month's hours, days and raw ends) side by side
        with ThreadPoolExecutor(max_workers=min(len(runs), source.max_concurrent_queries)) as pool:
            parts = list(pool.map(read, runs))
    else:
        parts = [read(run) for run in runs]
    return _labelled(pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(), labels)


def _read_time(end: pd.Timestamp, rollup: str) -> pd.Timestamp:
    """When a piece ending at `end` is read: roll-ups half their period after it, so no sample sits on a
    range's edge, which Prometheus 2 takes in and VictoriaMetrics leaves out (an hour's sample sits at its
    end; a day's, evaluated at a phase of its own, less than half a day after the end of its hours)."""
    return end + pd.Timedelta(seconds=promql.ROLLUP_LEVEL_SECONDS[rollup] / 2 if rollup else 0)


def _labelled(frame: pd.DataFrame, labels: Sequence[str]) -> pd.DataFrame:
    """piece, the label columns ("" where a series lacks one), value; rows without a finite value dropped."""

    def column(name: str, default: object, dtype: Any) -> "pd.Series[Any]":
        values = frame[name] if name in frame else pd.Series(default, index=frame.index)
        converted: pd.Series[Any] = values.astype(dtype)
        return converted

    columns = {"piece": column("piece", 0, "int64")}
    columns.update({label: column(label, "", "str") for label in labels})
    columns["value"] = column("value", np.nan, "float64")
    out = pd.DataFrame(columns, index=frame.index)
    kept: pd.DataFrame = out[np.isfinite(out["value"].to_numpy())].reset_index(drop=True)
    return kept
