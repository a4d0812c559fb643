"""A real `gpuwatch serve` process on a free port of 127.0.0.1, and GETs against it (with basic auth)."""

import base64
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from tests.integration.prom import die_with_parent, free_port

USER = ("finops", "s3cret")
Answer = tuple[int, dict[str, str], bytes]


def get(url: str, *, auth: tuple[str, str] | None = USER, timeout: float = 120) -> Answer:
    """status, headers, body of a GET (an HTTP error's too)."""
    request = urllib.request.Request(url)
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def wait_ready(url: str, process: subprocess.Popen[bytes], *, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert process.poll() is None, "gpuwatch serve exited"
        try:
            if get(url + "/readyz", auth=None, timeout=5)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{url} not ready within {seconds}s")


@contextmanager
def serve(*args: str) -> Iterator[str]:
    """`gpuwatch serve` on a free port of 127.0.0.1 until the test module is done: its URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "serve", *args, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=die_with_parent,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
