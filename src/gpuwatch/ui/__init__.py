"""The Dash web UI: create_app() builds it around a FleetService."""

from gpuwatch.ui.app import create_app

__all__ = ["create_app"]
