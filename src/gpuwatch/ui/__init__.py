"""The Dash web UI: create_app() builds it around a FleetService."""

from gpuwatch.ui.app import Listener, create_app

__all__ = ["Listener", "create_app"]
