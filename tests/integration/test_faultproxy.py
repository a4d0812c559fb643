"""The fault-injection proxy before a tiny local HTTP server and the simulated Kubernetes API (TLS)."""

import http.client
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from kubernetes import client, config

from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.kubeapi import KubeApiServer, write_kubeconfig
from tests.integration.faultproxy import MODES, FaultProxy

pytestmark = pytest.mark.integration

TOKEN = "faultproxy-token"
BODIES = {
    "/data": json.dumps({"status": "success", "data": list(range(200))}).encode(),
    "/small": b"[]",  # two bytes: dripped in two seconds
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as Prometheus answers

    def do_GET(self) -> None:
        body = BODIES.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def http_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def proxy(http_server: ThreadingHTTPServer) -> Iterator[FaultProxy]:
    with FaultProxy("127.0.0.1", http_server.server_address[1]) as p:
        yield p


@pytest.fixture(scope="module")
def kube_server() -> Iterator[KubeApiServer]:
    fleet = build_demo_fleet(seed=42, end=datetime(2026, 11, 20, tzinfo=UTC), days=1)
    with KubeApiServer(fleet, token=TOKEN) as server:
        yield server


@pytest.fixture
def tls_proxy(kube_server: KubeApiServer) -> Iterator[FaultProxy]:
    with FaultProxy(kube_server.host, kube_server.port) as p:
        yield p


@pytest.fixture(scope="module")
def ca_file(kube_server: KubeApiServer, tmp_path_factory: pytest.TempPathFactory) -> str:
    assert kube_server.ca_pem is not None
    path = tmp_path_factory.mktemp("ca") / "ca.crt"
    path.write_bytes(kube_server.ca_pem)
    return str(path)


def _raw_get(port: int, path: str) -> tuple[http.client.HTTPResponse, bytes]:
    """The response and the body bytes that arrived (a short body's partial bytes as well)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("GET", path)
    response = conn.getresponse()
    try:
        return response, response.read()
    except http.client.IncompleteRead as e:
        return response, e.partial
    finally:
        conn.close()


# -- plain HTTP -------------------------------------------------------------------------------------------


def test_relay_forwards_the_same_bytes(proxy: FaultProxy, http_server: ThreadingHTTPServer) -> None:
    direct = requests.get(f"http://127.0.0.1:{http_server.server_address[1]}/data", timeout=5)
    with requests.Session() as session:  # two requests on one keep-alive connection
        relayed = [session.get(proxy.url() + "/data", timeout=5) for _ in range(2)]
    assert [r.content for r in relayed] == [direct.content] * 2
    assert relayed[0].headers["Content-Length"] == str(len(BODIES["/data"]))
    assert proxy.url() == f"http://127.0.0.1:{proxy.port}"
    assert proxy.accepted == {"relay": 1}


def test_hang_times_out_on_the_read_timeout(proxy: FaultProxy) -> None:
    proxy.mode = "hang"
    started = time.monotonic()
    with pytest.raises(requests.ReadTimeout):
        requests.get(proxy.url() + "/data", timeout=(1, 1))
    assert 0.9 < time.monotonic() - started < 2
    assert proxy.accepted == {"hang": 1}


def test_reset_is_a_connection_error(proxy: FaultProxy) -> None:
    proxy.mode = "reset"
    with pytest.raises(requests.ConnectionError, match="reset by peer"):
        requests.get(proxy.url() + "/data", timeout=5)
    assert proxy.accepted == {"reset": 1}


def test_drip_sends_headers_at_once_and_the_body_a_byte_a_second(proxy: FaultProxy) -> None:
    proxy.mode = "drip"
    started = time.monotonic()
    response = requests.get(proxy.url() + "/small", timeout=(1, 1.5), stream=True)
    headers_after = time.monotonic() - started
    body = response.content
    body_after = time.monotonic() - started
    assert response.status_code == 200
    assert headers_after < 0.5
    assert body == BODIES["/small"]
    assert len(body) - 0.2 < body_after < len(body) + 1  # 2 bytes: about 2 s
    assert proxy.accepted == {"drip": 1}


def test_drip_sends_each_keep_alive_response_s_headers_at_once(http_server: ThreadingHTTPServer) -> None:
    with (
        FaultProxy("127.0.0.1", http_server.server_address[1], mode="drip", drip_seconds=0.5) as proxy,
        requests.Session() as session,
    ):
        for _ in range(2):
            started = time.monotonic()
            response = session.get(proxy.url() + "/small", timeout=(1, 1), stream=True)
            assert time.monotonic() - started < 0.4
            assert response.content == BODIES["/small"]
            assert time.monotonic() - started > 0.9
        assert proxy.accepted == {"drip": 1}


def test_truncate_sends_half_the_body_then_closes(proxy: FaultProxy) -> None:
    proxy.mode = "truncate"
    body = BODIES["/data"]
    response, received = _raw_get(proxy.port, "/data")
    assert response.status == 200
    assert response.getheader("Content-Length") == str(len(body))
    assert received == body[: len(body) // 2]
    # requests reads Content-Length bodies strictly: the short body is an error, not fewer bytes.
    with pytest.raises(requests.exceptions.ChunkedEncodingError, match="IncompleteRead"):
        requests.get(proxy.url() + "/data", timeout=5)
    assert proxy.accepted == {"truncate": 2}


def test_garbage_is_a_200_whose_body_is_not_json(proxy: FaultProxy) -> None:
    proxy.mode = "garbage"
    response = requests.get(proxy.url() + "/data", timeout=5)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    assert len(response.content) == int(response.headers["Content-Length"])
    with pytest.raises(requests.JSONDecodeError):
        response.json()
    assert proxy.accepted == {"garbage": 1}


def test_switching_mode_closes_the_hung_connection(proxy: FaultProxy) -> None:
    proxy.mode = "hang"
    with ThreadPoolExecutor(1) as pool:
        hung = pool.submit(requests.get, proxy.url() + "/data", timeout=(1, 30))
        deadline = time.monotonic() + 5
        while proxy.open_connections == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proxy.open_connections == 1
        started = time.monotonic()
        proxy.mode = "relay"
        with pytest.raises(requests.ConnectionError, match="Remote end closed connection"):
            hung.result(timeout=5)
        assert time.monotonic() - started < 1
    assert requests.get(proxy.url() + "/data", timeout=5).content == BODIES["/data"]
    assert proxy.accepted == {"hang": 1, "relay": 1}


def test_stop_ends_held_connections_promptly(http_server: ThreadingHTTPServer) -> None:
    proxy = FaultProxy("127.0.0.1", http_server.server_address[1], mode="hang").start()
    url = proxy.url()
    with ThreadPoolExecutor(1) as pool:
        hung = pool.submit(requests.get, url + "/data", timeout=(1, 30))
        deadline = time.monotonic() + 5
        while proxy.open_connections == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        proxy.stop()
        assert time.monotonic() - started < 1
        with pytest.raises(requests.ConnectionError):
            hung.result(timeout=5)
    with pytest.raises(requests.ConnectionError, match="refused"):  # nothing listens any more
        requests.get(url, timeout=1)
    with pytest.raises(RuntimeError):
        _ = proxy.port


def test_unknown_modes_are_refused(proxy: FaultProxy) -> None:
    with pytest.raises(ValueError, match="one of relay, hang"):
        proxy.mode = "slow"  # type: ignore[assignment]
    assert proxy.mode == "relay"
    assert MODES == ("relay", "hang", "reset", "drip", "truncate", "garbage")


# -- TLS: the simulated Kubernetes API server ------------------------------------------------------------


def test_tls_relay_verifies_the_server_and_forwards_the_same_bytes(
    tls_proxy: FaultProxy, kube_server: KubeApiServer, ca_file: str, tmp_path: Path
) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    direct = requests.get(kube_server.url + "/api/v1/nodes", headers=headers, verify=ca_file, timeout=5)
    relayed = requests.get(
        tls_proxy.url("https") + "/api/v1/nodes", headers=headers, verify=ca_file, timeout=5
    )
    assert relayed.status_code == 200
    assert relayed.content == direct.content
    # The official client from a kubeconfig whose server is the proxy: the certificate's SAN holds 127.0.0.1.
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, server_url=tls_proxy.url("https"), token=TOKEN, ca_pem=kube_server.ca_pem)
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))  # type: ignore[no-untyped-call]
    names = [n.metadata.name for n in api.list_node(_request_timeout=5).items if n.metadata]
    assert names == [n["metadata"]["name"] for n in direct.json()["items"]]
    assert tls_proxy.accepted == {"relay": 2}


@pytest.mark.parametrize(
    ("mode", "error", "match"),
    [
        # The handshake never completes within the read timeout (urllib3 reads the ServerHello under it).
        ("hang", requests.ReadTimeout, "Read timed out"),
        ("reset", requests.ConnectionError, "reset by peer"),
        ("drip", requests.ReadTimeout, "Read timed out"),  # the ServerHello a byte a second
        ("truncate", requests.exceptions.SSLError, "EOF"),  # half the server's handshake flight
        ("garbage", requests.exceptions.SSLError, "WRONG_VERSION_NUMBER|wrong version number"),
    ],
)
def test_tls_faults(
    tls_proxy: FaultProxy, ca_file: str, mode: str, error: type[Exception], match: str
) -> None:
    tls_proxy.mode = mode  # type: ignore[assignment]
    started = time.monotonic()
    with pytest.raises(error, match=match):
        requests.get(tls_proxy.url("https") + "/version", verify=ca_file, timeout=(1, 1))
    assert time.monotonic() - started < 2
    assert tls_proxy.accepted == {mode: 1}
