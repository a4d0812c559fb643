"""CSV and Parquet downloads of every table: pages register exporters, the shell serves the clicks."""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd
from dash import ALL, Input, Output, State, callback, ctx
from dash.dcc.express import send_bytes
from dash.exceptions import PreventUpdate

from gpuwatch.surfaces.renderings import frame_bytes, render, rounded
from gpuwatch.surfaces.report import Report
from gpuwatch.ui import ids
from gpuwatch.ui.components import load
from gpuwatch.ui.data import Loaded
from gpuwatch.ui.filters import Filters

MIME = {"csv": "text/csv", "parquet": "application/vnd.apache.parquet"}


@dataclass(frozen=True, slots=True)
class Export:
    """A table as a frame, or a report group (rendered as `gpuwatch report --format csv|parquet` does)."""

    frame: pd.DataFrame | None = None
    report: Report | None = None
    group_by: str = ""

    def render(self, fmt: str) -> bytes:
        """The file: a report group as `gpuwatch report --format csv|parquet` writes it (showback rows),
        any other table with its numbers rounded the same way."""
        if self.report is not None:
            return render(self.report, fmt, group_by=self.group_by)
        return frame_bytes(rounded(self.frame if self.frame is not None else pd.DataFrame()), fmt)


Exporter = Callable[[Loaded, Filters, str], Export]
EXPORTERS: dict[str, Exporter] = {}


def exporter(name: str) -> Callable[[Exporter], Exporter]:
    """Register the function that builds the table `name` for a download (pages call this at import)."""

    def register(fn: Exporter) -> Exporter:
        EXPORTERS[name] = fn
        return fn

    return register


def report_group(report: Report, group_by: str, *, team: str = "") -> Export:
    """A group of the report (optionally one team's rows) as the CLI renders it."""
    if not team:
        return Export(report=report, group_by=group_by)
    key = {"team": "teams", "namespace": "namespaces", "workload": "workloads", "pool": "pools"}[group_by]
    rows = [r for r in report[key] if r.get("team") == team]
    return Export(report={**report, key: rows}, group_by=group_by)


def filename(name: str, loaded: Loaded, arg: str, fmt: str) -> str:
    """gpuwatch-<table>[-<arg>]-<start>-<end>.<fmt>, safe for any file system."""
    parts = ["gpuwatch", name] + ([arg] if arg else [])
    if loaded.view is not None:
        w = loaded.view.window
        parts += [f"{w.start:%Y%m%dT%H%M}", f"{w.end:%Y%m%dT%H%M}"]
    return re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(parts)) + f".{fmt}"


def register_download_callback() -> None:
    """The shell's callback: a click on any table's CSV/Parquet button sends that table."""

    @callback(
        Output(ids.DOWNLOAD, "data"),
        Input({"type": ids.DOWNLOAD_BUTTON, "table": ALL, "fmt": ALL, "arg": ALL}, "n_clicks"),
        State(ids.URL, "search"),
        prevent_initial_call=True,
    )
    def download(_clicks: list[int | None], search: str | None) -> dict[str, Any]:
        trigger = ctx.triggered_id
        if not isinstance(trigger, dict) or not ctx.triggered or not ctx.triggered[0].get("value"):
            raise PreventUpdate  # buttons mounting with a page, not a click
        name, fmt, arg = str(trigger["table"]), str(trigger["fmt"]), str(trigger.get("arg", ""))
        if name not in EXPORTERS or fmt not in MIME:
            raise PreventUpdate
        filters, loaded = load(search)
        if loaded.view is None:
            raise PreventUpdate
        content = EXPORTERS[name](loaded, filters, arg).render(fmt)
        result: dict[str, Any] = send_bytes(content, filename(name, loaded, arg, fmt), type=MIME[fmt])
        return result
