"""create_app(): the Dash application, its shell (header, navigation) and its FleetService."""

from pathlib import Path

import dash
import flask
from dash import Dash, dcc, html

from gpuwatch.service import FleetService

SERVICE_KEY = "GPUWATCH_SERVICE"


def create_app(service: FleetService | None = None) -> Dash:
    """The Dash app; `service` defaults to the simulated demo fleet. Dash debug stays off."""
    if service is None:
        service = FleetService.demo()
    app = Dash(
        __name__,
        use_pages=True,
        pages_folder=str(Path(__file__).parent / "pages"),
        title="gpuwatch",
        suppress_callback_exceptions=True,
    )
    app.server.config[SERVICE_KEY] = service
    app.layout = html.Div(
        className="gw-shell",
        children=[
            html.Header(
                className="gw-header",
                children=[
                    html.Span("gpuwatch", className="gw-brand"),
                    html.Nav(
                        [
                            dcc.Link(page["name"], href=page["relative_path"])
                            for page in dash.page_registry.values()
                        ],
                        className="gw-nav",
                    ),
                ],
            ),
            html.Main(dash.page_container, className="gw-main"),
        ],
    )
    return app


def current_service() -> FleetService:
    """The FleetService of the app serving the current request (callbacks run inside Flask)."""
    service = flask.current_app.config[SERVICE_KEY]
    assert isinstance(service, FleetService)
    return service
