"""PrometheusSource (the raw DCGM read path) against a real Prometheus and a real VictoriaMetrics holding
the simulated fleet's history, and against faults.

Faults a real server cannot produce on demand (5xx then success, `warnings`, NaN/±Inf values, a chunk
refused for too many samples) come from a tiny stdlib HTTP server on 127.0.0.1 scripted per test. Tests
reading `demo_backend` run once per backend.
"""

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pandas as pd
import pytest
import requests

from gpuwatch.core.errors import PrometheusError
from gpuwatch.core.model import Window
from gpuwatch.core.schema import DCGM_SAMPLES
from gpuwatch.sim import SimulatedFleet
from gpuwatch.sources import promql
from gpuwatch.sources.dcgm import DEV_FB_USED, ExporterPods
from gpuwatch.sources.dcgmrows import unit_rows
from gpuwatch.sources.historyqueries import pod_gpus_sum_query
from gpuwatch.sources.prometheus import PrometheusSource
from tests.integration.prom import BackfilledPrometheus, PrometheusFactory, VictoriaMetricsServer, free_port

pytestmark = pytest.mark.integration

INJECTION = 'team"} or vector(1) or {a="'
UTIL_METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
PROF = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
DEV = "DCGM_FI_DEV_GPU_UTIL"


def exporter_pods(fleet: SimulatedFleet) -> ExporterPods:
    """What the Kubernetes side knows: where each exporter pod runs, by name and by pod IP."""
    return ExporterPods(
        node_by_pod={t.pod: t.node for t in fleet.targets}, node_by_ip={t.ip: t.node for t in fleet.targets}
    )


def window_of(fleet: SimulatedFleet, *, hours: float = 4) -> Window:
    """Four hours around the middle of the day: the L4 exporter's 2 h gap starts inside it."""
    start = fleet.window.start + timedelta(hours=11)
    return Window(start=start, end=start + timedelta(hours=hours), step_seconds=fleet.window.step_seconds)


def in_window(frame: pd.DataFrame, window: Window) -> pd.DataFrame:
    t = frame["timestamp"]
    return frame[(t >= pd.Timestamp(window.start)) & (t < pd.Timestamp(window.end))]


@pytest.fixture(scope="module")
def servicemonitor(demo_backend: BackfilledPrometheus) -> Iterator[PrometheusSource]:
    source = PrometheusSource(demo_backend.url, timeout_seconds=60)
    yield source
    source.close()


@pytest.fixture(scope="module")
def honor_labels_prometheus(
    prometheus_factory: PrometheusFactory, demo_backend: BackfilledPrometheus
) -> BackfilledPrometheus:
    return prometheus_factory(
        demo_backend.fleet, layout="honor_labels", metrics=UTIL_METRICS, backend=demo_backend.backend
    )


@pytest.fixture(scope="module")
def samples(demo_backend: BackfilledPrometheus, servicemonitor: PrometheusSource) -> pd.DataFrame:
    fleet = demo_backend.fleet
    return servicemonitor.gpu_samples(window_of(fleet), exporters=exporter_pods(fleet))


def test_rows_built_chunk_by_chunk_equal_one_chunk(
    demo_backend: BackfilledPrometheus, samples: pd.DataFrame
) -> None:
    # Hour-long chunks, two at once: each chunk's rows are built in the thread that receives it, then
    # joined. The four-hour window holds MIG, time-sliced and vGPU units and the L4 exporter's gap.
    fleet = demo_backend.fleet
    source = PrometheusSource(demo_backend.url, max_chunk_seconds=3600, max_concurrent_queries=2)
    try:
        chunked = source.gpu_samples(window_of(fleet), exporters=exporter_pods(fleet))
    finally:
        source.close()
    assert source.chunk_points(0, step_seconds=window_of(fleet).step_seconds) < window_of(fleet).n_samples / 3
    pd.testing.assert_frame_equal(chunked, samples)


def test_gpu_samples_equal_the_simulated_utilization(
    demo_backend: BackfilledPrometheus, samples: pd.DataFrame
) -> None:
    fleet = demo_backend.fleet
    window = window_of(fleet)
    DCGM_SAMPLES.check(samples)
    per_unit = unit_rows(samples)
    want = in_window(fleet.telemetry(), window)[
        ["timestamp", "node", "uuid", "gpu_instance_id", "util_ratio"]
    ]
    got = per_unit[["timestamp", "node", "uuid", "gpu_instance_id", "util_ratio"]]
    key = ["timestamp", "uuid", "gpu_instance_id"]
    merged = want.merge(got, on=key, how="outer", suffixes=("_want", "_got"), indicator=True)
    # Exactly the served samples come back, each on its node, at t_i: nothing invented in gaps.
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"].head()
    assert (merged["node_want"] == merged["node_got"]).all()
    np.testing.assert_allclose(merged["util_ratio_got"], merged["util_ratio_want"], rtol=1e-12, atol=0)
    assert len(merged) == len(want) > 15_000
    # A few units of each kind, checked sample by sample.
    tel = fleet.telemetry().set_index(key)["util_ratio"]
    h100 = next(g for g in fleet.gpus if g.node.startswith("gpu-h100-"))
    mig = next(g for g in fleet.gpus if g.mig_profile)
    t4 = next(g for g in fleet.gpus if g.replicas > 1)
    for g in (h100, mig, t4):
        rows = per_unit[(per_unit["uuid"] == g.uuid) & (per_unit["gpu_instance_id"] == g.gpu_instance_id)]
        assert len(rows) == window.n_samples
        for t, util in zip(rows["timestamp"], rows["util_ratio"], strict=True):
            assert util == pytest.approx(tel[(t, g.uuid, g.gpu_instance_id)], rel=1e-12, abs=0)
    # The L4 exporter's gap: absent rows (unknown), never zeros.
    gap = next(g for g in fleet.gaps if g.node == "gpu-l4-001")
    l4 = per_unit[per_unit["node"] == "gpu-l4-001"]
    assert not (
        (l4["timestamp"] >= pd.Timestamp(gap.start)) & (l4["timestamp"] < pd.Timestamp(gap.end))
    ).any()
    assert l4["timestamp"].min() == pd.Timestamp(window.start)


def test_util_source_is_prof_where_the_gpu_reports_it(
    demo_backend: BackfilledPrometheus, samples: pd.DataFrame
) -> None:
    fleet = demo_backend.fleet
    sources = samples.groupby("uuid")["util_source"].agg(set)
    for uuid, used in sources.items():
        assert used == ({PROF} if fleet.has_prof[str(uuid)] else {DEV}), uuid
    assert {DEV, PROF} == set(samples["util_source"])


def test_workload_labels_match_who_held_each_gpu(
    demo_backend: BackfilledPrometheus, samples: pd.DataFrame
) -> None:
    fleet = demo_backend.fleet
    window = window_of(fleet)
    key = ["timestamp", "uuid", "gpu_instance_id"]
    served = in_window(fleet.telemetry(), window)[key]
    truth = in_window(fleet.truth(), window).merge(served, on=key)
    want = {tuple(r) for r in truth[[*key, "namespace", "pod"]].itertuples(index=False)}
    held = samples[samples["pod"] != ""]
    got = {tuple(r) for r in held[[*key, "namespace", "pod"]].itertuples(index=False)}
    assert got == want
    # The exporter's own pod never shows up as a workload.
    assert not samples["pod"].str.contains("dcgm-exporter").any()
    assert "gpu-operator" not in set(samples["namespace"])
    # Time-sliced GPUs: one row per pod, never a sum over the vgpu copies.
    t4 = samples[samples["product"] == "Tesla T4"]
    shared = t4.groupby(["timestamp", "uuid"])["pod"].nunique()
    assert shared.max() > 1
    spread = t4.groupby(["timestamp", "uuid"])["util_ratio"].agg(lambda u: u.max() - u.min())
    assert (spread == 0).all()


def test_both_label_layouts_resolve_the_same_workloads(
    demo_backend: BackfilledPrometheus,
    honor_labels_prometheus: BackfilledPrometheus,
    samples: pd.DataFrame,
) -> None:
    fleet = demo_backend.fleet
    source = PrometheusSource(honor_labels_prometheus.url)
    try:
        honored = source.gpu_samples(window_of(fleet), exporters=exporter_pods(fleet))
    finally:
        source.close()
    columns = ["timestamp", "node", "uuid", "gpu_instance_id", "namespace", "pod", "container", "util_source"]
    pd.testing.assert_frame_equal(honored[columns], samples[columns])
    np.testing.assert_array_equal(honored["util_ratio"].to_numpy(), samples["util_ratio"].to_numpy())


def test_exporters_reporting_their_own_pod_name_need_the_pod_mapping(
    demo_backend: BackfilledPrometheus, servicemonitor: PrometheusSource
) -> None:
    fleet = demo_backend.fleet
    window = Window(start=window_of(fleet).start, end=window_of(fleet).start + timedelta(minutes=10))
    servicemonitor.take_warnings()
    unplaced = servicemonitor.gpu_samples(window)
    quirky = {t.node for t in fleet.targets if t.hostname_value == t.pod and fleet.node(t.node).ready}
    assert quirky and not quirky & set(unplaced["node"])
    assert (unplaced["node"] == "").any()
    assert any("name no node" in w for w in servicemonitor.take_warnings())
    placed = servicemonitor.gpu_samples(
        window, exporters=ExporterPods(node_by_pod={t.pod: t.node for t in fleet.targets})
    )
    assert quirky <= set(placed["node"]) and not (placed["node"] == "").any()


def test_injection_returns_nothing_instead_of_extra_series(
    demo_backend: BackfilledPrometheus, servicemonitor: PrometheusSource
) -> None:
    fleet = demo_backend.fleet
    window = Window(start=window_of(fleet).start, end=window_of(fleet).start + timedelta(minutes=30))
    hostile = servicemonitor.gpu_samples(window, matchers=[promql.equals("exported_namespace", INJECTION)])
    assert hostile.empty
    DCGM_SAMPLES.check(hostile)
    at = window.end
    escaped = promql.selector("DCGM_FI_DEV_GPU_UTIL", [promql.equals("exported_namespace", INJECTION)])
    assert servicemonitor.query(escaped, at=at).empty
    # What naive interpolation would have sent is valid PromQL that answers with an extra series.
    naive_value = 'x"} or vector(1) or DCGM_FI_DEV_GPU_UTIL{exported_namespace="x'
    naive = servicemonitor.query(f'DCGM_FI_DEV_GPU_UTIL{{exported_namespace="{naive_value}"}}', at=at)
    assert len(naive) == 1 and naive["value"].tolist() == [1.0]
    safe = promql.selector("DCGM_FI_DEV_GPU_UTIL", [promql.equals("exported_namespace", naive_value)])
    assert servicemonitor.query(safe, at=at).empty
    # The same matcher with a real namespace selects just that namespace.
    ns = servicemonitor.gpu_samples(window, matchers=[promql.equals("exported_namespace", "llm-research")])
    assert set(ns["namespace"]) == {"llm-research"}


def test_extra_fields_come_back_in_base_units(
    demo_backend: BackfilledPrometheus, servicemonitor: PrometheusSource
) -> None:
    fleet = demo_backend.fleet
    window = Window(start=window_of(fleet).start, end=window_of(fleet).start + timedelta(minutes=20))
    got = unit_rows(servicemonitor.gpu_samples(window, exporters=exporter_pods(fleet), fields=[DEV_FB_USED]))
    want = in_window(fleet.telemetry(), window)
    merged = want.merge(got, on=["timestamp", "uuid", "gpu_instance_id"], suffixes=("_want", "_got"))
    assert len(merged) == len(want)
    np.testing.assert_array_equal(merged["fb_used_bytes_got"], merged["fb_used_bytes_want"])


def test_discovery_names_metrics_and_layout(
    demo_backend: BackfilledPrometheus, servicemonitor: PrometheusSource
) -> None:
    found = servicemonitor.discover(at=demo_backend.fleet.now - timedelta(minutes=1))
    # The demo's MI300X pool reports its counterparts of DEV_GPU_UTIL and FB_USED under AMD's names.
    assert found.fields[PROF] == (PROF,) and found.fields[DEV] == (DEV, "gpu_gfx_activity")
    assert found.fields["DCGM_FI_DEV_FB_USED"] == ("DCGM_FI_DEV_FB_USED", "gpu_used_vram")
    assert found.fields["DCGM_FI_DEV_GPU_TEMP"] == ()
    assert found.unknown_metrics == ()
    assert found.series_sampled > 0 and found.problems == ()
    assert found.label_counts["Hostname"] > 0 and found.label_counts["hostname"] > 0
    assert "exported_pod (ServiceMonitor, honorLabels: false)" in found.layouts
    assert found.exporter_pod_hostnames > 0


def test_prometheus_down_is_one_line_after_bounded_retries() -> None:
    slept: list[float] = []
    url = f"http://127.0.0.1:{free_port()}"
    source = PrometheusSource(url, sleep=slept.append, max_attempts=4, backoff_seconds=0.5)
    with pytest.raises(PrometheusError) as caught:
        source.query("up")
    message = str(caught.value)
    assert message == f"prometheus at {url} unreachable: connection refused"
    assert "\n" not in message
    assert isinstance(caught.value.__cause__, requests.ConnectionError)
    assert slept == [0.5, 1.0, 2.0]


def test_a_victoriametrics_series_limit_is_named_with_the_flag_that_raises_it(tmp_path: Path) -> None:
    """A month at real churn is more pods than VictoriaMetrics lets one query select by default (300,000
    in 1.79): its refusal ends in the cause, which the one-line error keeps and names as a flag to raise."""
    end = datetime(2026, 11, 20, tzinfo=UTC)
    lines = [
        f'day:gpuwatch_pod_gpu_used:sum_over_time{{namespace="ns-{i % 2}",pod="p{i}",team="t",node="n",'
        f'pool="L4"}} {i} {end.timestamp() - 3600}'
        for i in range(8)
    ]
    history = tmp_path / "pods.om"
    history.write_text("\n".join([*lines, "# EOF", ""]), encoding="utf-8")
    query = partial(pod_gpus_sum_query, "gpuwatch_pod_gpu_used", range_seconds=86_400, resolution_seconds=60)
    with VictoriaMetricsServer(tmp_path / "vm", flags=("-search.maxUniqueTimeseries=5",)) as vm:
        vm.import_openmetrics(history)
        source = PrometheusSource(vm.url, max_attempts=1)
        ns_1 = [promql.Matcher("namespace", "ns-1")]
        one_namespace = source.query(query(rollup="day", matchers=ns_1), at=end)
        with pytest.raises(PrometheusError) as caught:
            source.query(query(rollup="day"), at=end)
    assert sorted(one_namespace["value"]) == [1.0, 3.0, 5.0, 7.0]  # four series: within the limit
    assert str(caught.value) == (
        f"prometheus at {vm.url} refused an instant query: it selects more than 5 series, the most "
        "VictoriaMetrics' -search.maxUniqueTimeseries lets a query select. A per-pod table (Right-size, "
        "every workload) selects one series per pod of the window: raise the flag above the pods your "
        "longest window holds"
    )


def test_a_silent_prometheus_times_out_in_one_line() -> None:
    with socket.socket() as listener:  # accepts connections, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        source = PrometheusSource(url, timeout_seconds=0.2, max_attempts=2, sleep=lambda _s: None)
        with pytest.raises(PrometheusError) as caught:
            source.query("up")
    assert str(caught.value) == f"prometheus at {url} unreachable: no answer within 0.2s"
    assert isinstance(caught.value.__cause__, requests.Timeout)


# ---------------------------------------------------------------------------------------------
# Faults, from a scripted stdlib server


Reply = tuple[int, dict[str, str], bytes]


class FakePrometheus:
    """Answers each request with the next scripted reply (the last one repeats); records requests."""

    def __init__(self, replies: list[Reply] | Callable[[dict[str, Any]], Reply]) -> None:
        self.replies = replies
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                seen = {"path": url.path, **{k: v[-1] for k, v in parse_qs(url.query).items()}}
                seen["authorization"] = self.headers.get("Authorization", "")
                fake.requests.append(seen)
                if callable(fake.replies):
                    status, headers, body = fake.replies(seen)
                else:
                    status, headers, body = fake.replies[min(len(fake.requests), len(fake.replies)) - 1]
                self.send_response(status)
                for k, v in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def fake() -> Iterator[Callable[..., FakePrometheus]]:
    servers: list[FakePrometheus] = []

    def start(replies: Any) -> FakePrometheus:
        servers.append(FakePrometheus(replies))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def ok(data: Any, **extra: Any) -> Reply:
    return 200, {}, json.dumps({"status": "success", "data": data, **extra}).encode()


def error(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> Reply:
    return (
        status,
        headers or {},
        json.dumps({"status": "error", "errorType": kind, "error": message}).encode(),
    )


def vector(*values: str, t: float = 1_763_600_000.0) -> dict[str, Any]:
    result = [
        {"metric": {"UUID": f"GPU-{i}", "Hostname": "n1"}, "value": [t, v]} for i, v in enumerate(values)
    ]
    return {"resultType": "vector", "result": result}


def test_5xx_then_success_is_retried_with_backoff(fake: Callable[..., FakePrometheus]) -> None:
    server = fake([error(503, "unavailable", "busy"), error(502, "bad_gateway", "proxy"), ok(vector("0.5"))])
    slept: list[float] = []
    source = PrometheusSource(server.url, sleep=slept.append, backoff_seconds=0.25)
    got = source.query("up")
    assert got["value"].tolist() == [0.5]
    assert slept == [0.25, 0.5] and len(server.requests) == 3


def test_429_honours_retry_after(fake: Callable[..., FakePrometheus]) -> None:
    server = fake([error(429, "too_many_requests", "slow down", {"Retry-After": "3"}), ok(vector("1"))])
    slept: list[float] = []
    PrometheusSource(server.url, sleep=slept.append).query("up")
    assert slept == [3.0]


def test_persistent_5xx_gives_up_after_max_attempts(fake: Callable[..., FakePrometheus]) -> None:
    server = fake([error(503, "timeout", "query timed out in expression evaluation")])
    source = PrometheusSource(server.url, sleep=lambda _s: None, max_attempts=3)
    with pytest.raises(PrometheusError) as caught:
        source.query("up")
    assert str(caught.value) == (
        f"prometheus at {server.url}: an instant query failed (HTTP 503): "
        "timeout: query timed out in expression evaluation"
    )
    assert len(server.requests) == 3


def test_a_long_refusal_keeps_what_failed_and_its_cause(fake: Callable[..., FakePrometheus]) -> None:
    """Servers wrap a cause in what it made fail ("executing …: evaluating …: the cause"): a refusal
    too long for one line loses its middle, never its end."""
    wrapped = "error when executing query=" + "x" * 400 + ": search error: the query needs more memory"
    server = fake([error(422, "422", wrapped)])
    with pytest.raises(PrometheusError) as caught:
        PrometheusSource(server.url, max_attempts=1).query("up")
    message = str(caught.value)
    detail = message.removeprefix(f"prometheus at {server.url}: an instant query failed (HTTP 422): ")
    assert detail.startswith("422: error when executing query=xxx")
    assert detail.endswith("xxx: search error: the query needs more memory") and detail.count(" ... ") == 1
    assert len(detail) == 300 and "\n" not in message


def test_at_most_max_concurrent_queries_are_in_flight_whichever_threads_send_them(
    fake: Callable[..., FakePrometheus],
) -> None:
    """Nested reads (families, each read piece by piece in its own pool) share one limit: a month's
    report is ~160 queries, and a Prometheus asked for all at once only switches between them."""
    lock = threading.Lock()
    in_flight, most = [0], [0]

    def slow(_seen: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        time.sleep(0.05)
        with lock:
            in_flight[0] -= 1
        return ok(vector("1"))

    server = fake(slow)
    source = PrometheusSource(server.url, max_concurrent_queries=3)
    with ThreadPoolExecutor(max_workers=4) as outer:  # four threads, each reading four in a row
        list(outer.map(lambda _: [source.query("up") for _ in range(4)], range(4)))
    assert len(server.requests) == 16
    assert most[0] == 3


def test_bad_query_is_not_retried(fake: Callable[..., FakePrometheus]) -> None:
    server = fake([error(400, "bad_data", 'invalid parameter "query": 1:5: parse error:\nunexpected "}"')])
    source = PrometheusSource(server.url, sleep=lambda _s: pytest.fail("must not retry"))
    with pytest.raises(PrometheusError) as caught:
        source.query("up{")
    assert "\n" not in str(caught.value) and "HTTP 400" in str(caught.value)
    assert len(server.requests) == 1


def test_warnings_are_collected(fake: Callable[..., FakePrometheus]) -> None:
    warning = "PromQL info: metric might not be a counter"
    server = fake([ok(vector("1"), warnings=[warning, "partial response: store-gateway down"])])
    source = PrometheusSource(server.url)
    source.query("up")
    source.query("up")
    assert source.take_warnings() == [
        f"prometheus warning: {warning}",
        "prometheus warning: partial response: store-gateway down",
    ]
    assert source.take_warnings() == []


def test_nan_inf_and_garbage_values_are_unknown(fake: Callable[..., FakePrometheus]) -> None:
    server = fake([ok(vector("0.25", "NaN", "+Inf", "-Inf", "garbage"))])
    got = PrometheusSource(server.url).query("x")
    assert got["value"].iloc[0] == 0.25
    assert got["value"].iloc[1:].isna().all()


def test_malformed_answers_are_one_line_errors(fake: Callable[..., FakePrometheus]) -> None:
    server = fake([(200, {}, b"<html>proxy error</html>")])
    with pytest.raises(PrometheusError) as caught:
        PrometheusSource(server.url).query("up")
    assert str(caught.value).startswith(
        f"prometheus at {server.url} returned a malformed answer to an instant query"
    )


def test_an_answer_with_a_non_text_label_value_is_read_as_text_and_one_without_pairs_is_malformed(
    fake: Callable[..., FakePrometheus],
) -> None:
    numbered = {
        "resultType": "vector",
        "result": [{"metric": {"UUID": 7, "Hostname": "n1"}, "value": [1, "2"]}],
    }
    broken = {"resultType": "matrix", "result": [{"metric": {"UUID": "GPU-0"}, "values": "1,2"}]}
    server = fake([ok(numbered), ok(broken)])
    source = PrometheusSource(server.url)
    got = source.query("up")
    assert got[["UUID", "Hostname", "value"]].values.tolist() == [["7", "n1", 2.0]]
    with pytest.raises(PrometheusError, match="malformed answer to a range query"):
        source.query_range(
            "up",
            start=datetime(2026, 11, 20, tzinfo=UTC),
            end=datetime(2026, 11, 20, tzinfo=UTC),
            step_seconds=60,
        )


def test_bearer_token_is_read_from_the_file_and_never_shown(
    fake: Callable[..., FakePrometheus], tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    server = fake([error(401, "unauthorized", "no"), ok(vector("1"))])
    source = PrometheusSource(server.url, bearer_token_file=str(token))
    with pytest.raises(PrometheusError) as caught:
        source.query("up")
    assert "s3cret" not in str(caught.value) and "HTTP 401" in str(caught.value)
    token.write_text("rotated")
    source.query("up")
    assert [r["authorization"] for r in server.requests] == ["Bearer s3cret-token", "Bearer rotated"]


def test_basic_auth(fake: Callable[..., FakePrometheus]) -> None:
    server = fake([ok(vector("1"))])
    PrometheusSource(server.url, basic_auth=("gpuwatch", "pw")).query("up")
    assert server.requests[0]["authorization"] == "Basic Z3B1d2F0Y2g6cHc="


def matrix_reply(request: dict[str, Any], value: str = "50") -> Reply:
    """A range answer: one series of avg_over_time(DCGM_FI_DEV_GPU_UTIL) (percent) at every step."""
    start, end, step = float(request["start"]), float(request["end"]), float(request["step"].rstrip("s"))
    n = round((end - start) / step) + 1
    values = [[start + k * step, value] for k in range(n)]
    metric = {"UUID": "GPU-1", "Hostname": "n1"}
    return ok({"resultType": "matrix", "result": [{"metric": metric, "values": values}]})


def util_reply(request: dict[str, Any], *, series: str = "3") -> Reply | None:
    """gpu_samples' look-ups: GPU_UTIL is the only alias in the window, `series` raw series now."""
    if request["path"] == "/api/v1/label/__name__/values":
        return ok([DEV])
    if request["path"] == "/api/v1/query":
        return ok(vector(series) if series else vector())
    return None


def range_offsets(server: FakePrometheus, first: float) -> list[tuple[float, float]]:
    """(start, end) of every range query relative to `first`, in time order (chunks run concurrently)."""
    ranges = [r for r in server.requests if r["path"] == "/api/v1/query_range"]
    return sorted((float(r["start"]) - first, float(r["end"]) - first) for r in ranges)


def test_range_queries_are_chunked_under_the_points_limit(fake: Callable[..., FakePrometheus]) -> None:
    def reply(request: dict[str, Any]) -> Reply:
        return util_reply(request) or matrix_reply(request, "50")

    server = fake(reply)
    start = datetime(2026, 11, 19, tzinfo=UTC)
    window = Window(start=start, end=start + timedelta(minutes=25))
    source = PrometheusSource(server.url, max_points_per_series=10)
    got = source.gpu_samples(window)
    # Evaluated at t_i + 60 s for 25 samples: 10 + 10 + 5 points, back to back.
    assert range_offsets(server, start.timestamp() + 60) == [
        (0, 540),
        (600, 1140),
        (1200, 1440),
    ]
    assert got["timestamp"].tolist() == list(pd.date_range(start, periods=25, freq="60s"))
    assert (got["util_ratio"] == 0.5).all() and set(got["util_source"]) == {DEV}
    # The samples limit shrinks chunks too: 3 series x 4 points <= 12 samples.
    assert PrometheusSource(server.url, max_samples_per_query=12).chunk_points(3) == 4


def test_range_queries_span_at_most_a_day_by_default(fake: Callable[..., FakePrometheus]) -> None:
    def reply(request: dict[str, Any]) -> Reply:
        return util_reply(request) or matrix_reply(request, "25")

    server = fake(reply)
    start = datetime(2026, 11, 19, tzinfo=UTC)
    window = Window(start=start, end=start + timedelta(days=2, hours=1), step_seconds=300)
    got = PrometheusSource(server.url).gpu_samples(window)
    day = 86_400
    assert range_offsets(server, start.timestamp() + 300) == [
        (0, day - 300),
        (day, 2 * day - 300),
        (2 * day, 2 * day + 3300),
    ]
    assert len(got) == window.n_samples and (got["util_ratio"] == 0.25).all()
    source = PrometheusSource(server.url, max_chunk_seconds=600)
    assert source.chunk_points(3, step_seconds=60) == 10 and source.chunk_points(3) == 11_000


def test_a_chunk_refused_for_too_many_samples_is_halved(fake: Callable[..., FakePrometheus]) -> None:
    def reply(request: dict[str, Any]) -> Reply:
        if (looked_up := util_reply(request, series="")) is not None:
            return looked_up
        if float(request["end"]) - float(request["start"]) > 300:
            return error(422, "execution", "query processing would load too many samples into memory")
        return matrix_reply(request, "NaN")

    server = fake(reply)
    start = datetime(2026, 11, 19, tzinfo=UTC)
    window = Window(start=start, end=start + timedelta(minutes=20))
    got = PrometheusSource(server.url).gpu_samples(window)
    assert len(got) == 20 and got["util_ratio"].isna().all()  # NaN stays unknown, never 0
    assert len([r for r in server.requests if r["path"] == "/api/v1/query_range"]) > 4


def test_gpu_samples_surface_warnings_and_keep_nan(fake: Callable[..., FakePrometheus]) -> None:
    def reply(request: dict[str, Any]) -> Reply:
        if (looked_up := util_reply(request, series="1")) is not None:
            return looked_up
        status, headers, body = matrix_reply(request, "+Inf")
        payload = json.loads(body)
        payload["warnings"] = ["partial response: 1 of 3 stores unavailable"]
        return status, headers, json.dumps(payload).encode()

    server = fake(reply)
    start = datetime(2026, 11, 19, tzinfo=UTC)
    source = PrometheusSource(server.url)
    got = source.gpu_samples(Window(start=start, end=start + timedelta(minutes=5)))
    assert len(got) == 5 and got["util_ratio"].isna().all()
    assert source.warnings == ("prometheus warning: partial response: 1 of 3 stores unavailable",)
