"""create_app(): the Dash application, its shell (navigation, global filters in the URL) and its data."""

import hashlib
import hmac
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dash
import flask
from dash import ALL, Dash, Input, Output, State, callback, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate
from werkzeug.serving import make_server

from gpuwatch.core.errors import ConfigError
from gpuwatch.read.service import FleetService
from gpuwatch.ui import ids
from gpuwatch.ui.api import install_api
from gpuwatch.ui.components import STORE_KEY, current_store, load
from gpuwatch.ui.data import ViewStore
from gpuwatch.ui.downloads import register_download_callback
from gpuwatch.ui.filters import CUSTOM, PRESETS, Filters, format_time, from_controls, parse_query, to_query


def create_app(
    service: FleetService,
    *,
    auth_file: str | None = None,
    refresh_seconds: float = 60.0,
    warm: bool = True,
) -> Dash:
    """The Dash app over `service` (app.py's: gpuwatch.wiring's, the live fleet the GPUWATCH_* settings
    name, else the simulated one). Dash debug stays off.

    auth_file: a file of `user:password` lines; when given, every route needs HTTP basic auth.
    refresh_seconds: how often open pages refresh, and how old health and quota data may get.
    warm: compute the default view in a background thread now, so the first visitor does not wait.
    """
    users = load_users(auth_file) if auth_file else None
    app = Dash(
        __name__,
        use_pages=True,
        pages_folder=str(Path(__file__).parent / "pages"),
        title="gpuwatch",
        update_title="",
        suppress_callback_exceptions=True,
    )
    store = ViewStore(service, refresh_seconds=refresh_seconds)
    app.server.config[STORE_KEY] = store
    app.layout = _shell(service, refresh_seconds)
    _register_shell_callbacks()
    register_download_callback()
    if users is not None:
        install_basic_auth(app.server, users)
    _install_readiness(app.server, store)
    install_api(app.server, service)
    if warm:
        store.warm()
    else:
        store.warmed.set()
    return app


READY_PATH = "/readyz"


def _install_readiness(server: flask.Flask, store: ViewStore) -> None:
    """GET /readyz: 200 once the default view is warm (the cluster listed, the watches following it),
    503 before, for a readiness probe or a load balancer; it needs no login and tells nothing else."""

    @server.route(READY_PATH)
    def ready() -> flask.Response:
        if store.warmed.is_set():
            return flask.Response("ready\n", 200, mimetype="text/plain")
        return flask.Response("warming up\n", 503, mimetype="text/plain", headers={"Retry-After": "2"})


# -- serving --------------------------------------------------------------------------------------------


class Listener:
    """The dashboard's HTTP server (werkzeug, threaded), bound before the app is built: a port in use is
    known at once, and the address is announced only once it is really served. Until `serve` is
    called it answers 503. For production, gunicorn (app.py, gunicorn.conf.py) serves the app instead."""

    def __init__(self, host: str, port: int) -> None:
        """Bind host:port (OSError if it cannot be: in use, not an address here)."""
        self._app: flask.Flask | None = None
        # Bound here, not by werkzeug, which prints and exits on a port in use.
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(128)
            self.server = make_server(host, port, self, threaded=True, fd=sock.fileno())

    @property
    def url(self) -> str:
        return f"http://{self.server.host}:{self.server.port}/"

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if self._app is None:
            start_response("503 Service Unavailable", [("Content-Type", "text/plain"), ("Retry-After", "5")])
            return [b"gpuwatch is starting\n"]
        return self._app(environ, start_response)

    def serve(self, app: Dash) -> None:
        """Answer with `app` until shutdown() (from another thread) or an interrupt."""
        self._app = app.server
        try:
            self.server.serve_forever()
        finally:
            self.server.server_close()

    def shutdown(self) -> None:
        self.server.shutdown()


# -- basic auth -----------------------------------------------------------------------------------------


def load_users(path: str) -> dict[str, bytes]:
    """user -> SHA-256 of the password, from `user:password` lines (blank lines and # comments skipped)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read --auth-file {path}: {e.strerror or e}") from e
    users: dict[str, bytes] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user or not password:
            raise ConfigError(f"--auth-file {path} line {number}: expected user:password")
        users[user] = hashlib.sha256(password.encode()).digest()
    if not users:
        raise ConfigError(f"--auth-file {path} names no user")
    return users


def install_basic_auth(server: flask.Flask, users: Mapping[str, bytes]) -> None:
    """Require HTTP basic auth on every route (before Dash sees the request); passwords are never logged."""
    unknown = hashlib.sha256(b"\0unknown user\0").digest()

    def require_login() -> flask.Response | None:
        if flask.request.path == READY_PATH:
            return None
        auth = flask.request.authorization
        if auth is not None and auth.type == "basic" and auth.username is not None:
            given = hashlib.sha256((auth.password or "").encode()).digest()
            # Compare even for an unknown user, so timing does not tell which users exist.
            ok = hmac.compare_digest(users.get(auth.username, unknown), given)
            if ok and auth.username in users:
                return None
        return flask.Response(
            "authentication required\n",
            401,
            {"WWW-Authenticate": 'Basic realm="gpuwatch", charset="UTF-8"', "Content-Type": "text/plain"},
        )

    server.before_request_funcs.setdefault(None, []).insert(0, require_login)


# -- the shell ------------------------------------------------------------------------------------------


def _nav_pages() -> list[dict[str, Any]]:
    pages = [p for p in dash.page_registry.values() if not p.get("path_template")]
    return sorted(pages, key=lambda p: (p.get("order") or 0, p["path"]))


POLL_SECONDS = 1.0  # while a computation is under way, pages are drawn again this often


def _shell(service: FleetService, refresh_seconds: float) -> html.Div:
    """The page around every page: navigation, filters, the refresh tick, and the progress tick (ids.POLL),
    which draws a page again while what it lacked is being computed (ids.PENDING)."""
    url = service.settings.prometheus.url
    if service.simulated or not url:
        source = (
            "demo · simulated fleet" if len(service.settings.clusters) < 2 else "demo · simulated clusters"
        )
    else:
        parts = urlsplit(url)
        # Never show credentials a URL may carry (https://user:token@host).
        source = f"live · {parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}"
    window_options = [{"label": k, "value": k} for k in PRESETS] + [{"label": "custom", "value": CUSTOM}]
    return html.Div(
        className="gw-shell",
        children=[
            dcc.Location(id=ids.URL, refresh=False),
            dcc.Interval(id=ids.REFRESH, interval=int(refresh_seconds * 1000), n_intervals=0),
            dcc.Interval(id=ids.POLL, interval=int(POLL_SECONDS * 1000), n_intervals=0),
            dcc.Store(id=ids.PENDING, data=0),
            dcc.Download(id=ids.DOWNLOAD),
            html.Header(
                className="gw-header",
                children=[
                    html.Span("gpuwatch", className="gw-brand"),
                    html.Nav(
                        [
                            dcc.Link(
                                p["name"],
                                href=p["relative_path"],
                                id={"type": ids.NAV_LINK, "path": p["path"]},
                            )
                            for p in _nav_pages()
                        ],
                        className="gw-nav",
                        id=ids.NAV,
                    ),
                    html.Span(source, className="gw-source", id=ids.SOURCE_BADGE),
                ],
            ),
            html.Div(
                className="gw-filters",
                children=[
                    html.Div(
                        [
                            html.Label("Window", className="gw-filter-label"),
                            dcc.RadioItems(
                                id=ids.FILTER_WINDOW,
                                options=window_options,
                                value="24h",
                                inline=True,
                                className="gw-segmented",
                            ),
                        ],
                        className="gw-filter",
                    ),
                    html.Div(
                        [
                            dcc.Input(
                                id=ids.FILTER_START,
                                type="text",
                                placeholder="start, e.g. 2026-11-18T00:00Z",
                                debounce=True,
                                className="gw-input",
                            ),
                            html.Span("→", className="gw-muted"),
                            dcc.Input(
                                id=ids.FILTER_END,
                                type="text",
                                placeholder="end (UTC)",
                                debounce=True,
                                className="gw-input",
                            ),
                        ],
                        id=ids.FILTER_CUSTOM,
                        className="gw-filter gw-custom",
                        style={"display": "none"},
                    ),
                    # Shown only for a fleet of several clusters (a clusters: list in the config).
                    _dropdown(ids.FILTER_CLUSTER, "Cluster", "all clusters", box_id=ids.FILTER_CLUSTER_BOX),
                    _dropdown(ids.FILTER_POOL, "Pool", "all pools"),
                    _dropdown(ids.FILTER_PRODUCT, "Product", "all products"),
                    _dropdown(ids.FILTER_TEAM, "Team", "all teams"),
                    html.Span(id=ids.FILTER_NOTE, className="gw-filter-note"),
                ],
            ),
            html.Main(dash.page_container, className="gw-main"),
            html.Footer(
                "GPU-hours are GPU-equivalent hours (a MIG slice or time-sliced replica counts its share); "
                "dollars are GE-hours × the pool's price per GPU-hour.",
                className="gw-footer",
            ),
        ],
    )


def _dropdown(component_id: str, label: str, placeholder: str, *, box_id: str | None = None) -> html.Div:
    """A multi-select filter; with box_id, hidden until it has something to choose from."""
    children = [
        html.Label(label, className="gw-filter-label", htmlFor=component_id),
        dcc.Dropdown(
            id=component_id,
            options=[],
            value=[],
            multi=True,
            placeholder=placeholder,
            className="gw-dropdown",
        ),
    ]
    if box_id:
        return html.Div(
            children, id=box_id, className="gw-filter gw-filter-dropdown", style={"display": "none"}
        )
    return html.Div(children, className="gw-filter gw-filter-dropdown")


def _options(filters: Filters) -> tuple[list[str], list[str], list[str], list[str]]:
    """Pools, products, teams and clusters to offer: the fleet's (latest whole-fleet view, its clusters
    with those not read) and the filters' own."""
    pools, products, teams = set(filters.pools), set(filters.products), set(filters.teams)
    clusters = set(filters.clusters)
    view = current_store().latest()
    if view is not None:
        nodes = view.nodes()
        pools |= set(nodes["pool"])
        products |= set(nodes["product"])
        teams |= {str(t["team"]) for t in view.headline["teams"]} | {
            str(p["team"]) for p in view.headline["pending"]
        }
        clusters |= {str(c["cluster"]) for c in view.headline.get("clusters", []) if c["cluster"]}
    return sorted(pools), sorted(products), sorted(teams), sorted(clusters)


def _register_shell_callbacks() -> None:
    """Callbacks of the shell (registered once per app, like the pages' own)."""

    @callback(
        Output(ids.URL, "search"),
        Output(ids.FILTER_WINDOW, "value"),
        Output(ids.FILTER_START, "value"),
        Output(ids.FILTER_END, "value"),
        Output(ids.FILTER_POOL, "value"),
        Output(ids.FILTER_PRODUCT, "value"),
        Output(ids.FILTER_TEAM, "value"),
        Output(ids.FILTER_CLUSTER, "value"),
        Output(ids.FILTER_CUSTOM, "style"),
        Output(ids.FILTER_NOTE, "children"),
        Output(ids.FILTER_POOL, "options"),
        Output(ids.FILTER_PRODUCT, "options"),
        Output(ids.FILTER_TEAM, "options"),
        Output(ids.FILTER_CLUSTER, "options"),
        Output(ids.FILTER_CLUSTER_BOX, "style"),
        Input(ids.URL, "search"),
        Input(ids.FILTER_WINDOW, "value"),
        Input(ids.FILTER_START, "value"),
        Input(ids.FILTER_END, "value"),
        Input(ids.FILTER_POOL, "value"),
        Input(ids.FILTER_PRODUCT, "value"),
        Input(ids.FILTER_TEAM, "value"),
        Input(ids.FILTER_CLUSTER, "value"),
    )
    def sync_filters(
        search: str | None,
        window: str | None,
        start: str | None,
        end: str | None,
        pools: list[str] | None,
        products: list[str] | None,
        teams: list[str] | None,
        clusters: list[str] | None,
    ) -> tuple[Any, ...]:
        """The URL is the truth: it sets the controls on load and back/forward; controls rewrite it.

        Options travel with values (a dropdown drops a value its options lack), so this one callback
        owns both; on a URL change it waits a moment for the view (ViewStore.load: never for a source
        that does not answer), whose pools, products and teams it offers; refresh_options adds them
        when the view comes later. No timer triggers it: Dash drops an in-flight call's answer when the
        same callback fires again, and a tick right after a click would swallow the click's new URL.
        """
        shown = {"display": "flex"}
        hidden = {"display": "none"}
        keep = (no_update,) * 4
        trigger = ctx.triggered_id
        if trigger in (None, ids.URL):
            f = parse_query(search)
            load(search)  # the options come from the view (usually cached, else computed for the page)
            custom = f.window == CUSTOM
            options = _options(f)
            return (
                no_update,
                f.window,
                format_time(f.start),
                format_time(f.end),
                list(f.pools),
                list(f.products),
                list(f.teams),
                list(f.clusters),
                shown if custom else hidden,
                "",
                *options,
                {} if len(options[3]) > 1 else hidden,
            )
        start_out: Any = no_update
        end_out: Any = no_update
        if window == CUSTOM and trigger == ids.FILTER_WINDOW:
            # Start from the window on screen, so the custom range is a small edit away.
            current = current_store().window(parse_query(search))
            start, end = format_time(current.start), format_time(current.end)
            start_out, end_out = start, end
        wanted = from_controls(window, start, end, pools, products, teams, clusters)
        if window == CUSTOM and wanted.window != CUSTOM:
            note = "enter start and end (UTC), e.g. 2026-11-18T00:00Z, start before end"
            return (no_update, no_update, start_out, end_out, *keep, shown, note, *keep, no_update)
        query = to_query(wanted)
        return (
            query if query != (search or "") else no_update,
            no_update,
            start_out,
            end_out,
            *keep,
            shown if window == CUSTOM else hidden,
            "",
            *keep,
            no_update,
        )

    @callback(
        Output(ids.PENDING, "data"),
        Input(ids.POLL, "n_intervals"),
        State({"type": ids.RENDERED, "page": ALL}, "data"),
        prevent_initial_call=True,
    )
    def progress(tick: int, drawn: list[Any]) -> Any:
        """Draw the page again (bump its progress input) when its last drawing lacked something (still
        being computed, or failing: components.rendered) and, since it started, a computation is under
        way or one has ended: it then says how long it waits, or draws what came. A page drawn whole is
        left alone."""
        generation, busy = current_store().progress()
        lacking = [m for m in drawn if isinstance(m, dict) and m.get("incomplete")]
        if any(busy or m.get("generation") != generation for m in lacking):
            return tick
        return no_update

    @callback(
        Output(ids.FILTER_POOL, "options", allow_duplicate=True),
        Output(ids.FILTER_PRODUCT, "options", allow_duplicate=True),
        Output(ids.FILTER_TEAM, "options", allow_duplicate=True),
        Output(ids.FILTER_CLUSTER, "options", allow_duplicate=True),
        Output(ids.FILTER_CLUSTER_BOX, "style", allow_duplicate=True),
        Input({"type": ids.RENDERED, "page": ALL}, "data"),
        State(ids.URL, "search"),
        State(ids.FILTER_POOL, "options"),
        State(ids.FILTER_PRODUCT, "options"),
        State(ids.FILTER_TEAM, "options"),
        State(ids.FILTER_CLUSTER, "options"),
        prevent_initial_call=True,
    )
    def refresh_options(_drawn: Any, search: str | None, *shown: list[Any] | None) -> tuple[Any, ...]:
        """The filters' options once a page is drawn with a view computed after sync_filters answered,
        which brings the fleet's pools, products, teams and clusters (options only: the URL's values are
        among them, so none is dropped)."""
        options = _options(parse_query(search))
        if list(options) == [list(s or []) for s in shown]:
            raise PreventUpdate
        return (*options, {} if len(options[3]) > 1 else {"display": "none"})

    @callback(
        Output({"type": ids.NAV_LINK, "path": ALL}, "href"),
        Output({"type": ids.NAV_LINK, "path": ALL}, "className"),
        Input(ids.URL, "search"),
        Input(ids.URL, "pathname"),
        State({"type": ids.NAV_LINK, "path": ALL}, "id"),
    )
    def nav_links(
        search: str | None, pathname: str | None, links: list[dict[str, str]]
    ) -> tuple[list[str], list[str]]:
        """Navigation keeps the filters; the current page's link is marked."""
        query = to_query(parse_query(search))
        here = pathname or "/"
        paths = [link["path"] for link in links]
        active = [
            "gw-active" if (p == here or (p != "/" and here.startswith(p + "/"))) else "" for p in paths
        ]
        return [dash.get_relative_path(p) + query for p in paths], active
