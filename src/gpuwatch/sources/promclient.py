"""PrometheusClient: prometheus-api-client with every request bounded by its call's deadline, retries with
backoff, chunked range queries, and answers decoded into Points (long frames)."""

import copy
import json
import math
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import chain
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Final, Self, TypeVar

import numpy as np
import numpy.typing as npt
import pandas as pd
import requests
import requests.adapters
import urllib3
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from gpuwatch.core.config import PrometheusSettings
from gpuwatch.core.errors import ConfigError, PrometheusError
from gpuwatch.core.model import MAX_POINTS_PER_SERIES, utc
from gpuwatch.sources import promql
from gpuwatch.sources.dcgmrows import to_float
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
# Range-query chunks in flight at once: Prometheus evaluates them on separate cores while gpuwatch decodes
# the answers; well under Prometheus' default --query.max-concurrency of 20.
MAX_CONCURRENT_QUERIES: Final = 4
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\"()\]]+)")
# VictoriaMetrics refuses a query that selects more series than -search.maxUniqueTimeseries (HTTP 422).
_SERIES_LIMIT = re.compile(r"number of matching (?:unique )?time ?series exceeds (\d+)", re.IGNORECASE)


class _Current(threading.local):
    """The deadline of the call this thread is making (set by PrometheusClient._call)."""

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


class PrometheusClient:
    """The HTTP API of Prometheus (or Thanos, Mimir, VictoriaMetrics): instant, range, label and series reads.

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
    def from_settings(cls, settings: PrometheusSettings, **kwargs: Any) -> Self:
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

    def scoped(self, matchers: Sequence[promql.Matcher]) -> Self:
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
        limit = _SERIES_LIMIT.search(e.message)
        if limit:
            return PrometheusError(
                f"prometheus at {self.url} refused {what}: it selects more than {int(limit[1]):,} series, "
                "the most VictoriaMetrics' -search.maxUniqueTimeseries lets a query select. A per-pod table "
                "(Right-size, every workload) selects one series per pod of the window: raise the flag "
                "above the pods your longest window holds"
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
    """The text on one line of at most `limit` characters. A longer one keeps its start (what failed) and
    its end: servers wrap a cause in what it made fail, so the cause comes last."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    head = limit // 3
    return f"{line[:head]} ... {line[len(line) - (limit - head - 5) :]}"
