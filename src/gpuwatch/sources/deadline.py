"""Deadlines that bound a read end to end (retries and a dripping body included), and the reads in flight."""

import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

import urllib3

from gpuwatch.core.model import SourceWait

# Asked for by every request read with read_body (it decodes these; br or zstd it would not).
ACCEPT_ENCODING: Final = "gzip, deflate"
# A response body is read in pieces of at most this many bytes, each read bounded by the time left.
BODY_PIECE_BYTES: Final = 1 << 16


class DeadlineError(Exception):
    """The time a read was given ran out (a source that accepts and never answers, or drips)."""


class Deadline:
    """`seconds` from now (monotonic): every wait of one read — connecting, the answer's headers, each
    piece of its body, a retry's backoff — takes what is left, so the read ends by then whatever the
    source does."""

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._end = clock() + seconds

    def remaining(self) -> float:
        return self._end - self._clock()

    def check(self) -> float:
        """The seconds left; DeadlineError when none are."""
        left = self.remaining()
        if left <= 0:
            raise DeadlineError(f"no answer within {self.seconds:g}s")
        return left


def read_body(response: urllib3.BaseHTTPResponse, deadline: Deadline) -> bytes:
    """The whole (decoded) body of an unread urllib3 response, read piece by piece with the socket's
    timeout set to the time left before each piece: a server that sends its headers and then a byte a
    second (or nothing) is cut at the deadline (DeadlineError) instead of holding the read forever, as a
    per-read timeout alone would. The connection is closed when the deadline cuts it.

    Pieces are read as they came (urllib3 would read on until a compressed piece decodes to something,
    past any deadline) and decompressed here as they arrive: gzip or deflate (what gpuwatch accepts)."""
    sock = socket_of(response)
    decoder = _decoder(response.headers.get("Content-Encoding", ""))
    pieces: list[bytes] = []
    try:
        while True:
            left = deadline.check()
            if sock is not None and sock.fileno() >= 0:  # a closed socket: what is left is buffered
                sock.settimeout(left)
            piece = response.read1(BODY_PIECE_BYTES, decode_content=False)
            if not piece:
                break
            pieces.append(decoder.decompress(piece) if decoder else piece)
    except (TimeoutError, urllib3.exceptions.ReadTimeoutError) as e:
        response.close()
        raise DeadlineError(f"no answer within {deadline.seconds:g}s") from e
    except DeadlineError:
        response.close()
        raise
    except zlib.error as e:
        raise urllib3.exceptions.DecodeError(f"the answer does not decompress: {e}") from e
    if decoder is not None:
        pieces.append(decoder.flush())
    return b"".join(pieces)


def _decoder(encoding: str) -> Any:
    """A zlib decompressor for a Content-Encoding (None: identity); DecodeError for one not asked for."""
    name = encoding.strip().lower()
    if name in ("", "identity"):
        return None
    if name in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if name == "deflate":
        return zlib.decompressobj()
    raise urllib3.exceptions.DecodeError(f"unsupported Content-Encoding {encoding!r}")


def socket_of(response: urllib3.BaseHTTPResponse) -> Any:
    """The socket an unread urllib3 response reads from (http.client's file over it), if it has one."""
    fp = getattr(response, "_fp", None)  # http.client.HTTPResponse
    buffered = getattr(fp, "fp", None)  # its BufferedReader over a SocketIO
    return getattr(getattr(buffered, "raw", None), "_sock", None)


class InFlight:
    """The reads of one source under way, so a page or an exporter cycle can say what it waits for, and
    since when (SourceWait)."""

    def __init__(self, source: str, url: str, *, cluster: str = "") -> None:
        self.source = source
        self.url = url
        self.cluster = cluster
        self._lock = threading.Lock()
        self._started: dict[int, float] = {}
        self._next = 0

    @contextmanager
    def track(self) -> Iterator[None]:
        with self._lock:
            token = self._next
            self._next += 1
            self._started[token] = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                del self._started[token]

    def waiting(self) -> SourceWait | None:
        """The oldest read under way, or None when nothing is being read."""
        with self._lock:
            oldest = min(self._started.values(), default=None)
        if oldest is None:
            return None
        return SourceWait(
            source=self.source, url=self.url, seconds=time.monotonic() - oldest, cluster=self.cluster
        )
