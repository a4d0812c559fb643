"""Dash entry point: `gunicorn app:server` (or `python app.py`) serves the fleet the GPUWATCH_* settings name,
and the simulated one when they name no Prometheus."""

from gpuwatch.ui import create_app
from gpuwatch.wiring import service_from_environment

service = service_from_environment()
app = create_app(service)
server = app.server

if __name__ == "__main__":
    app.run(host="127.0.0.1", port=8050, debug=False)
