"""Optional basic auth on every route of the UI: 401 without credentials, the app with them."""

import base64
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuwatch.core.config import Settings
from gpuwatch.core.errors import ConfigError
from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.demoservice import demo_service
from gpuwatch.ui import create_app
from gpuwatch.ui.app import load_users
from gpuwatch.ui.components import STORE_KEY
from tests.integration.browser import browser_page, settle
from tests.integration.ui_server import serve_app

pytestmark = pytest.mark.integration


def _get(url: str, auth: tuple[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_basic_auth_guards_every_route(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    users = tmp_path / "users"
    users.write_text("# who may look\nalice:s3cret:with-colon\n\nbob:hunter2\n", encoding="utf-8")
    fleet = build_demo_fleet(seed=42, end=datetime(2026, 11, 20, tzinfo=UTC), days=1)
    app = create_app(demo_service(Settings(), fleet), auth_file=str(users), warm=False)
    with serve_app(app) as url:
        for path in ("/", "/waste", "/_dash-layout", "/_dash-dependencies", "/assets/gpuwatch.css"):
            status, headers, body = _get(url + path)
            assert status == 401, path
            assert headers["WWW-Authenticate"].startswith('Basic realm="gpuwatch"')
            assert b"gpuwatch" not in body  # nothing of the app before login
        assert _get(url + "/", ("alice", "wrong"))[0] == 401
        assert _get(url + "/", ("mallory", "s3cret:with-colon"))[0] == 401
        status, _, body = _get(url + "/", ("alice", "s3cret:with-colon"))
        assert status == 200 and b"gpuwatch" in body
        assert _get(url + "/_dash-layout", ("bob", "hunter2"))[0] == 200
        with browser_page(http_credentials={"username": "bob", "password": "hunter2"}) as (page, errors):
            page.goto(url + "/")
            page.wait_for_selector("#kpi-gpus", timeout=120_000)
            settle(page)
            assert page.inner_text("#kpi-gpus") == "96"
            assert errors == []
    assert "s3cret" not in caplog.text and "hunter2" not in caplog.text


def test_readiness_needs_no_login_and_waits_for_the_warm_default_view(tmp_path: Path) -> None:
    """/readyz: 503 until the default view is warm, then 200; a probe needs no credentials for it, and
    it tells nothing of the fleet."""
    users = tmp_path / "users"
    users.write_text("alice:s3cret\n", encoding="utf-8")
    fleet = build_demo_fleet(seed=42, end=datetime(2026, 11, 20, tzinfo=UTC), days=1)
    app = create_app(demo_service(Settings(), fleet), auth_file=str(users), warm=False)
    store = app.server.config[STORE_KEY]
    with serve_app(app) as url:
        assert _get(url + "/")[0] == 401
        store.warmed.clear()  # as while warm() computes the default view
        status, headers, body = _get(url + "/readyz")
        assert (status, body, headers["Retry-After"]) == (503, b"warming up\n", "2")
        thread = store.warm()
        thread.join(timeout=120)
        status, _, body = _get(url + "/readyz")
        assert (status, body) == (200, b"ready\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [("alice\n", "line 1: expected user:password"), ("# nobody\n", "names no user"), (":pw\n", "line 1")],
)
def test_a_bad_auth_file_is_a_config_error_that_does_not_echo_it(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "users"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=message) as raised:
        load_users(str(path))
    assert "pw" not in str(raised.value)
    with pytest.raises(ConfigError, match="cannot read"):
        load_users(str(tmp_path / "missing"))
