"""A Prometheus read's deadline bounds it end to end: a slow answer inside it is an answer, a silent or
dripping source is cut at it (and not asked again), and retries of refusals spend the same budget."""

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpuwatch.core.errors import PrometheusError
from gpuwatch.sources.prometheus import PrometheusSource

pytestmark = pytest.mark.integration
ANSWER = b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"7"]}]}}'


@contextmanager
def server(answer: Callable[[BaseHTTPRequestHandler], None]) -> Iterator[tuple[str, list[float]]]:
    """A local HTTP server answering every GET with `answer`; yields its URL and the times requests came."""
    seen: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(time.monotonic())
            answer(self)

        def log_message(self, *_: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def _ok(handler: BaseHTTPRequestHandler, body: bytes = ANSWER) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _timed(fn: Callable[[], object]) -> tuple[object, float]:
    started = time.monotonic()
    try:
        return fn(), time.monotonic() - started
    except PrometheusError as e:
        return e, time.monotonic() - started


def test_a_slow_answer_within_the_deadline_is_an_answer() -> None:
    def slow(handler: BaseHTTPRequestHandler) -> None:
        time.sleep(2.5)
        _ok(handler)

    with server(slow) as (url, seen):
        answer, _ = _timed(lambda: PrometheusSource(url, timeout_seconds=5).query("vector(7)"))
    assert not isinstance(answer, PrometheusError), answer
    assert len(seen) == 1


def test_a_silent_source_is_cut_at_the_deadline_and_not_asked_again() -> None:
    release = threading.Event()

    def silent(_handler: BaseHTTPRequestHandler) -> None:
        release.wait(30)

    with server(silent) as (url, seen):
        try:
            error, seconds = _timed(lambda: PrometheusSource(url, timeout_seconds=2).query("up"))
        finally:
            release.set()
    assert isinstance(error, PrometheusError)
    assert str(error) == f"prometheus at {url} unreachable: no answer within 2s"
    assert 2 <= seconds < 3
    assert len(seen) == 1  # a timeout is not retried as a refusal would be


def test_a_body_dripping_past_the_deadline_is_cut_there() -> None:
    def drip(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(ANSWER)))
        handler.end_headers()
        for byte in ANSWER:
            try:
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
            except OSError:
                return
            time.sleep(0.5)

    with server(drip) as (url, _seen):
        error, seconds = _timed(lambda: PrometheusSource(url, timeout_seconds=2).query("up"))
    assert isinstance(error, PrometheusError) and "no answer within 2s" in str(error)
    assert seconds < 3


def test_calls_queued_behind_a_silent_one_give_up_with_it() -> None:
    release = threading.Event()

    def silent(_handler: BaseHTTPRequestHandler) -> None:
        release.wait(30)

    with server(silent) as (url, seen):
        source = PrometheusSource(url, timeout_seconds=2, max_concurrent_queries=2)
        try:
            with ThreadPoolExecutor(max_workers=6) as pool:
                started = time.monotonic()
                outcomes = list(pool.map(lambda _: _timed(lambda: source.query("up"))[0], range(6)))
                seconds = time.monotonic() - started
        finally:
            release.set()
    assert all(isinstance(o, PrometheusError) and "no answer within 2s" in str(o) for o in outcomes)
    assert seconds < 3  # one deadline for them all, not one per wave of two
    assert len(seen) == 2


def test_retries_of_refusals_spend_one_budget() -> None:
    def busy(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(503)
        handler.send_header("Retry-After", "1")
        handler.send_header("Content-Length", "4")
        handler.end_headers()
        handler.wfile.write(b"busy")

    with server(busy) as (url, seen):
        source = PrometheusSource(url, timeout_seconds=2.5, max_attempts=50)
        error, seconds = _timed(lambda: source.query("up"))
    assert isinstance(error, PrometheusError) and "HTTP 503" in str(error)
    assert seconds < 3
    assert 2 <= len(seen) <= 3  # tried again while time was left, then no more
