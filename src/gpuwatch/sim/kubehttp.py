"""HTTP(S) serving for the simulated API server: a thread per connection (TLS handshakes in it) and
chunked streams for watches."""

import contextlib
import socket
import ssl
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, cast


class Api(Protocol):
    """What the server asks of the API it serves (KubeApiServer)."""

    def handle(
        self, method: str, target: str, authorization: str | None, accept: str | None = None
    ) -> tuple[int, str, bytes | Iterator[bytes]]: ...

    def log_request(self, method: str, target: str, code: int, accept: str | None = None) -> None: ...


class HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    api: Api
    tls: ssl.SSLContext | None = None

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-answer (a cut connection, a fault test) is no server error: only
        other failures print their traceback, as socketserver does."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Handle one connection; with TLS the handshake happens here, in the connection's own thread, so
        a client that never completes it holds up no other."""
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(Handler.timeout)
        try:
            secure = self.tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return  # not TLS, or gone: nothing to answer
        with self.connections_lock:
            self.connections.discard(request)
            self.connections.add(secure)
        try:
            self.RequestHandlerClass(secure, client_address, cast(Any, self))
        finally:
            with self.connections_lock:
                self.connections.discard(secure)
            with contextlib.suppress(OSError):
                secure.shutdown(socket.SHUT_RDWR)
            secure.close()

    def drop_connections(self) -> None:
        """Cut kept-alive client connections, so nothing is answered once the server is closed."""
        with self.connections_lock:
            open_now = list(self.connections)
        for conn in open_now:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gpuwatch-kubeapi-sim"
    timeout = 30  # idle kept-alive connections end by themselves
    disable_nagle_algorithm = True  # headers and body go out in two writes; do not wait for delayed ACKs

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)  # drain a body so the kept-alive connection stays in step
        api = cast(HttpServer, self.server).api
        accept = self.headers.get("Accept")
        code, content_type, body = api.handle(
            self.command, self.path, self.headers.get("Authorization"), accept
        )
        api.log_request(self.command, self.path, code, accept)
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache, private")
        if isinstance(body, bytes):
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for line in body:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True  # the client went away, or drop_connections() cut it

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _serve  # noqa: N815

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read `KubeApiServer.request_log` instead of stderr."""
