"""Serve a Dash app on 127.0.0.1 in a background thread for browser tests."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from dash import Dash
from werkzeug.serving import make_server


@contextmanager
def serve_app(app: Dash) -> Iterator[str]:
    """Yield the base URL of `app` served on a free loopback port; stop the server afterwards."""
    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)
