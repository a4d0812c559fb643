"""Dash entry point: `python app.py` serves the demo fleet; `gunicorn app:server` serves it too."""

from gpuwatch.ui import create_app

app = create_app()
server = app.server

if __name__ == "__main__":
    app.run(host="127.0.0.1", port=8050, debug=False)
