"""serve's HTTP API: /api/v1/report (the report JSON), /api/v1/focus (FOCUS rows) and /api/v1/openapi.json.

The same window, read path and numbers as `gpuwatch report`; behind the dashboard's --auth-file. A bad
parameter is 400 and a failing source 503, each with {"error": "<one line>"}; never a traceback."""

import json
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import flask

from gpuwatch.core.errors import ConfigError, GpuwatchError
from gpuwatch.read.service import FleetService
from gpuwatch.surfaces.exports import (
    FOCUS_PERIODS,
    GROUPS,
    SOURCES,
    WindowRequest,
    focus_bytes,
    parse_instant,
    parse_length,
    parse_step,
    report_bytes,
)
from gpuwatch.surfaces.renderings import render
from gpuwatch.surfaces.report import Report
from gpuwatch.views.base import Scope
from gpuwatch.views.reader import open_view

PREFIX = "/api/v1"
WINDOW_PARAMETERS = ("start", "end", "since", "step", "source")
FILTERS = ("team", "pool", "cluster")
REPORT_PARAMETERS = (*WINDOW_PARAMETERS, "group_by", *FILTERS)
FOCUS_PARAMETERS = (*WINDOW_PARAMETERS, "period", *FILTERS)
log = logging.getLogger(__name__)


class BadParameterError(ConfigError):
    """A query parameter the API cannot take (400)."""


def install_api(server: flask.Flask, service: FleetService) -> None:
    """The routes of the API on the dashboard's server (its basic auth, when on, covers them)."""

    @server.route(f"{PREFIX}/report")
    def report() -> flask.Response:
        return _answer(lambda q: _report(service, q), REPORT_PARAMETERS, "application/json")

    @server.route(f"{PREFIX}/focus")
    def focus() -> flask.Response:
        return _answer(lambda q: _focus(service, q), FOCUS_PARAMETERS, "text/csv")

    @server.route(f"{PREFIX}/openapi.json")
    def openapi() -> flask.Response:
        return flask.Response(json.dumps(OPENAPI, indent=2), 200, mimetype="application/json")


def _answer(
    make: Callable[[Mapping[str, str]], bytes], allowed: tuple[str, ...], mimetype: str
) -> flask.Response:
    query = flask.request.args
    try:
        unknown = sorted(set(query) - set(allowed))
        if unknown:
            raise BadParameterError(
                f"unknown parameter {unknown[0]!r}; this endpoint takes {', '.join(allowed)}"
            )
        repeated = [k for k in query if len(query.getlist(k)) > 1]
        if repeated:
            raise BadParameterError(f"parameter {repeated[0]!r} given more than once")
        return flask.Response(make(query.to_dict()), 200, mimetype=mimetype)
    except ConfigError as e:  # a bad parameter, or a window the settings cannot read (no Prometheus URL)
        return _error(400, str(e))
    except GpuwatchError as e:  # a source down, slow or failing; no history where it was asked for
        return _error(503, str(e))
    except Exception as e:  # never a traceback to the client; the log has it
        log.exception("%s failed", flask.request.full_path)
        return _error(500, f"internal error: {type(e).__name__}")


def _error(status: int, message: str) -> flask.Response:
    line = " ".join(message.split())
    return flask.Response(json.dumps({"error": line}), status, mimetype="application/json")


def _window(service: FleetService, query: Mapping[str, str]) -> tuple[WindowRequest, Any]:
    request = WindowRequest(
        start=parse_instant(query["start"]) if "start" in query else None,
        end=parse_instant(query["end"]) if "end" in query else None,
        since_seconds=parse_length(query["since"]) if "since" in query else None,
        step_seconds=parse_step(query["step"]) if "step" in query else 60,
        source=_one_of("source", query.get("source", "auto"), SOURCES),
    )
    return request, request.window(service.now())


def _one_of(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise BadParameterError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _scope(query: Mapping[str, str]) -> Scope:
    return Scope(
        teams=(query["team"],) if "team" in query else (),
        pools=(query["pool"],) if "pool" in query else (),
        clusters=(query["cluster"],) if "cluster" in query else (),
    )


def _report(service: FleetService, query: Mapping[str, str]) -> bytes:
    """The report JSON of `gpuwatch report --format json`; with team, pool or cluster, the dashboard's
    report of that part of the fleet (its view, scoped as the page filters scope it)."""
    request, window = _window(service, query)
    group_by = _one_of("group_by", query.get("group_by", "team"), GROUPS)
    scope = _scope(query)
    if not scope.scoped:
        return report_bytes(service, window, source=request.source, fmt="json", group_by=group_by)
    if request.source != "auto":
        raise BadParameterError(
            "team, pool and cluster filters read the window as the dashboard does: leave out source"
        )
    view: Report = open_view(service, window, computed_at=datetime.now(UTC)).scoped(scope).report
    return render(view, "json", group_by=group_by)


def _focus(service: FleetService, query: Mapping[str, str]) -> bytes:
    """The FOCUS CSV of `gpuwatch report --format focus`; team, pool and cluster keep the rows tagged so."""
    request, window = _window(service, query)
    period = _one_of("period", query.get("period", "day"), FOCUS_PERIODS)
    only = {k: query[k] for k in FILTERS if k in query}
    return focus_bytes(service, window, source=request.source, period=period, only=only)


def _parameter(name: str, description: str, example: str | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    if example is not None:
        schema["example"] = example
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}


_WINDOW = [
    _parameter("start", "window start, ISO 8601 (default: end - 1 day)", "2026-11-01T00:00:00Z"),
    _parameter("end", "window end, ISO 8601 (default: now, floored to the step)", "2026-12-01T00:00:00Z"),
    _parameter("since", "window length back from the end instead of start, e.g. 7d, 30d, 12h", "7d"),
    _parameter("step", "sample step, e.g. 60s (raised on long raw windows)", "60s"),
    _parameter("source", "auto (default), history or raw: the read path, as `gpuwatch report --source`"),
]
_FILTERS = [
    _parameter("team", "only this team"),
    _parameter("pool", "only this pool (product)"),
    _parameter("cluster", "only this cluster"),
]
_ERRORS = {
    "400": {
        "description": "a bad parameter",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    },
    "401": {"description": "credentials missing or wrong (with --auth-file)"},
    "503": {
        "description": "a source failed or did not answer in time",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    },
}
OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {
        "title": "gpuwatch API",
        "version": "1",
        "description": "The GPU-hour ledger report of a window and its FOCUS 1.2 rows, as `gpuwatch report` "
        "writes them.",
    },
    "paths": {
        f"{PREFIX}/report": {
            "get": {
                "summary": "The report JSON (report.schema.json), as `gpuwatch report --format json`",
                "parameters": [
                    *_WINDOW,
                    _parameter("group_by", "team (default), namespace, workload, pool or cluster"),
                    *_FILTERS,
                ],
                "responses": {
                    "200": {
                        "description": "the report",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    **_ERRORS,
                },
            }
        },
        f"{PREFIX}/focus": {
            "get": {
                "summary": "FOCUS 1.2 Cost and Usage rows (CSV), as `gpuwatch report --format focus`",
                "parameters": [
                    *_WINDOW,
                    _parameter("period", "the charge period: day (default) or hour"),
                    *_FILTERS,
                ],
                "responses": {
                    "200": {
                        "description": "the rows",
                        "content": {"text/csv": {"schema": {"type": "string"}}},
                    },
                    **_ERRORS,
                },
            }
        },
        f"{PREFIX}/openapi.json": {
            "get": {"summary": "This description", "responses": {"200": {"description": "OpenAPI 3.0"}}}
        },
    },
    "components": {
        "schemas": {
            "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}
        },
        "securitySchemes": {"basic": {"type": "http", "scheme": "basic"}},
    },
    "security": [{"basic": []}],
}
