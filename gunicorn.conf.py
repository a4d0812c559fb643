"""gunicorn settings for `gunicorn app:server` (read from the working directory): loopback, threads."""

# Loopback unless told otherwise (`-b 0.0.0.0:8050` in a container behind a proxy or auth).
bind = "127.0.0.1:8050"
# One process keeps one cache of analyses; threads let other users in while one window is computed.
workers = 1
worker_class = "gthread"
threads = 8
timeout = 300
