"""A fault-injection TCP proxy for integration tests: put it between a client and a real server (Prometheus,
the simulated Kubernetes API) and choose, at runtime, how the "network" misbehaves.

    with FaultProxy("127.0.0.1", prometheus_port) as proxy:
        url = proxy.url()                 # "http://127.0.0.1:<proxy port>"; proxy.url("https") for TLS
        proxy.mode = "hang"               # the next connections are accepted, read, never answered

Modes (each connection keeps the mode it was accepted under):

- relay:    plain forwarding both ways.
- hang:     read what the client sends, never answer, keep the socket open.
- reset:    read the client's first bytes, then close with RST (SO_LINGER 0).
- drip:     forward to the target; HTTP: each response's headers (up to the blank line) at once, then the
            rest one byte per `drip_seconds`; TLS: every byte from the target one per `drip_seconds`.
- truncate: HTTP: the target's response headers and half of its body, then close; TLS: the first half of
            the target's first reply (its handshake flight), then close.
- garbage:  HTTP: a 200 `application/json` answer whose body is random non-JSON bytes (correct
            Content-Length); TLS: random non-TLS bytes in reply to the ClientHello. Then close. The
            target is never contacted.

A connection is TLS when its first byte is 0x16 (a TLS handshake record; no HTTP request starts so).
Setting `mode` closes every open connection (relayed ones too: a client's keep-alive pool would otherwise
keep the old mode), as a restarted server would; new connections get the new mode. Nothing waits longer
than stop(): blocked reads end when their sockets are shut down.
"""

import contextlib
import os
import re
import select
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from types import TracebackType
from typing import Literal, Self, get_args

Mode = Literal["relay", "hang", "reset", "drip", "truncate", "garbage"]
MODES: tuple[Mode, ...] = get_args(Mode)

_CHUNK = 65536
_POLL_SECONDS = 0.05
_HEAD_END = b"\r\n\r\n"
_CHUNKED_END = b"0\r\n\r\n"
_CONTENT_LENGTH = re.compile(rb"^content-length:[ \t]*(\d+)", re.IGNORECASE | re.MULTILINE)
_CHUNKED = re.compile(rb"^transfer-encoding:.*chunked", re.IGNORECASE | re.MULTILINE)


def garbage_bytes() -> bytes:
    """Bytes that are neither JSON nor a TLS record (NUL is no TLS content type), part random."""
    return b"\x00\xff not json <html>" + os.urandom(16)


class _Connection:
    """One accepted client connection, its target connection once made, and the mode it was accepted in."""

    def __init__(self, client: socket.socket, mode: Mode) -> None:
        self.client = client
        self.mode = mode
        self.target: socket.socket | None = None
        self.closed = threading.Event()
        self._lock = threading.Lock()  # shutdown (any thread) and close (its own thread) never overlap

    def attach(self, target: socket.socket) -> bool:
        """Keep the target socket; False (and it is closed) if the connection was aborted meanwhile."""
        with self._lock:
            if not self.closed.is_set():
                self.target = target
                return True
        target.close()
        return False

    def abort(self) -> None:
        """Wake this connection's thread from any read, write or wait: it then closes its sockets."""
        with self._lock:
            self.closed.set()
            for sock in (self.client, self.target):
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)

    def close(self, *, reset: bool = False) -> None:
        with self._lock:
            self.closed.set()
            if reset:
                with contextlib.suppress(OSError):
                    self.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            for sock in (self.client, self.target):
                if sock is not None:
                    sock.close()


class FaultProxy:
    """A TCP proxy on 127.0.0.1 (a free port) to target_host:target_port; a context manager."""

    def __init__(
        self, target_host: str, target_port: int, *, mode: Mode = "relay", drip_seconds: float = 1.0
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
        self.target = (target_host, target_port)
        self.drip_seconds = drip_seconds
        self._accepted: Counter[Mode] = Counter()
        self._mode: Mode = mode
        self._lock = threading.Lock()
        self._connections: set[_Connection] = set()
        self._threads: list[threading.Thread] = []
        self._listener: socket.socket | None = None
        self._stopping = threading.Event()

    # -- lifecycle and settings ----------------------------------------------------------------------

    def start(self) -> Self:
        if self._listener is not None:
            return self
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        self._listener = listener
        self._stopping.clear()
        self._spawn(self._accept_loop, "faultproxy-accept")
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Close the listening socket and every connection; join the threads (within `timeout` in all)."""
        with self._lock:  # no connection is registered after this (see _accept_loop)
            self._stopping.set()
            threads = list(self._threads)
        self._close_connections()
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._listener is None:
            raise RuntimeError("FaultProxy is not started")
        port: int = self._listener.getsockname()[1]
        return port

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def mode(self) -> Mode:
        return self._mode

    @mode.setter
    def mode(self, mode: Mode) -> None:
        """A new mode for new connections; the open ones are closed (as by a restart) if it changed."""
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
        with self._lock:
            changed, self._mode = mode != self._mode, mode
        if changed:
            self._close_connections()

    @property
    def accepted(self) -> dict[Mode, int]:
        """How many connections were accepted in each mode (modes none were accepted in are left out)."""
        with self._lock:
            return dict(self._accepted)

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._connections)

    def _close_connections(self) -> None:
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            connection.abort()

    def _spawn(self, target: Callable[..., None], name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    # -- serving --------------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        while not self._stopping.is_set():
            readable, _, _ = select.select([listener], [], [], _POLL_SECONDS)
            if not readable:
                continue
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with self._lock:  # the mode read and the registration are one step for the mode setter
                if self._stopping.is_set():
                    client.close()
                    return
                connection = _Connection(client, self._mode)
                self._accepted[connection.mode] += 1
                self._connections.add(connection)
            self._spawn(self._serve, f"faultproxy-{connection.mode}", connection)

    def _serve(self, connection: _Connection) -> None:
        reset = False
        try:
            first = connection.client.recv(_CHUNK)
            if not first:
                return
            tls = first[0] == 0x16
            mode = connection.mode
            if mode == "hang":
                while connection.client.recv(_CHUNK):
                    pass
            elif mode == "reset":
                reset = True
            elif mode == "garbage":
                if not tls:
                    _read_request(connection.client, first)
                connection.client.sendall(_garbage_response() if not tls else garbage_bytes())
            else:
                target = socket.create_connection(self.target, timeout=2)
                target.settimeout(None)
                if connection.attach(target):
                    target.sendall(first)
                    if mode == "truncate":
                        self._truncate(connection, target, tls)
                    else:
                        self._forward(connection, target, drip=mode == "drip", tls=tls)
        except OSError:
            pass  # a peer went away or the connection was aborted
        finally:
            connection.close(reset=reset)
            with self._lock:
                self._connections.discard(connection)

    def _forward(self, connection: _Connection, target: socket.socket, *, drip: bool, tls: bool) -> None:
        """Both ways until either side closes; with drip, the target's bytes go one per drip_seconds (for
        HTTP, after its response headers went at once)."""
        client = connection.client
        held = bytearray()  # the target's bytes not yet sent to the client
        head_sent = tls or not drip
        next_drip = 0.0
        target_open = True
        while not connection.closed.is_set() and (target_open or held):
            wait = _POLL_SECONDS
            if drip and head_sent and held:
                wait = max(0.0, min(wait, next_drip - time.monotonic()))
            readable, _, _ = select.select([client, target] if target_open else [client], [], [], wait)
            if client in readable:
                data = client.recv(_CHUNK)
                if not data:
                    return
                target.sendall(data)
                if drip and not tls and not held:  # a next request: its response's headers go at once
                    head_sent = False
            if target in readable:
                data = target.recv(_CHUNK)
                target_open = bool(data)
                held += data
            if not drip:
                if held:
                    client.sendall(held)
                    held.clear()
            elif not head_sent and (_HEAD_END in held or not target_open):
                end = held.index(_HEAD_END) + len(_HEAD_END) if _HEAD_END in held else len(held)
                client.sendall(held[:end])
                del held[:end]
                head_sent, next_drip = True, time.monotonic() + self.drip_seconds
            elif head_sent and held and time.monotonic() >= next_drip:
                client.sendall(held[:1])
                del held[:1]
                next_drip = time.monotonic() + self.drip_seconds

    def _truncate(self, connection: _Connection, target: socket.socket, tls: bool) -> None:
        """HTTP: the whole response read, then its headers and half its body sent; TLS: half of the first
        bytes the target sends. The caller then closes the connection."""
        if tls:
            data = target.recv(_CHUNK)
            connection.client.sendall(data[: len(data) // 2])
            return
        head, found, body = _read_response(target).partition(_HEAD_END)
        if found:
            connection.client.sendall(head + found + body[: len(body) // 2])


def _read_request(sock: socket.socket, first: bytes) -> bytes:
    """An HTTP request whose first bytes are `first`: its head and Content-Length body (or less at EOF)."""
    return _read_message(sock, first, chunked_body=False)


def _read_response(sock: socket.socket) -> bytes:
    """An HTTP response: its head and body (Content-Length, chunked, or up to EOF)."""
    return _read_message(sock, b"", chunked_body=True)


def _read_message(sock: socket.socket, first: bytes, *, chunked_body: bool) -> bytes:
    data = bytearray(first)

    def complete() -> bool:
        end = data.find(_HEAD_END)
        if end < 0:
            return False
        head, body = bytes(data[:end]), data[end + len(_HEAD_END) :]
        length = _CONTENT_LENGTH.search(head)
        if length is not None:
            return len(body) >= int(length.group(1))
        if chunked_body and _CHUNKED.search(head):
            return body.startswith(_CHUNKED_END) or b"\r\n" + _CHUNKED_END in body
        return not chunked_body  # a request without a length has no body; a response runs to EOF

    while not complete():
        chunk = sock.recv(_CHUNK)
        if not chunk:
            break
        data += chunk
    return bytes(data)


def _garbage_response() -> bytes:
    body = garbage_bytes()
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body
