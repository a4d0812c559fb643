"""Benchmark: server-side time of each UI page's data callback on a 1,000-GPU demo fleet, 24 h and 7 d.

Builds the demo fleet (build_demo_fleet(gpus=1000, days=8) by default), creates the Dash app without its
warm-up thread, and calls every page's callback function directly inside a Flask request context, the
way Dash calls it. Per window it prints the cold cost of the analysis (sources + analytics + report, what
the first visitor of a window pays once), each page's first call after that (cold: its derived frames),
and the p50/p95 of `--repeat` further calls (warm: what every later visitor and refresh pays).
Targets: warm p95 <= 1 s (24 h) and <= 3 s (7 d). Peak RSS is watched: past --max-rss-gb the run stops
with a message instead of pushing a shared machine into swap. Not a test: nothing is asserted on time.
"""

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import dash

from gpuwatch.core.config import Settings
from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.demoservice import demo_service
from gpuwatch.surfaces.report import build_report
from gpuwatch.ui import create_app
from gpuwatch.ui.components import current_store
from gpuwatch.ui.filters import parse_query

TARGETS = {"24h": 1.0, "7d": 3.0}
STAGE = ["start"]


def rss_gb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024 / 1024
    return 0.0


def watch_memory(limit_gb: float, peak: list[float]) -> None:
    """Stop the process (exit 3) when its RSS passes the limit, saying which stage it was in."""
    began = time.perf_counter()
    while True:
        now = rss_gb()
        peak[0] = max(peak[0], now)
        if now > limit_gb:
            print(
                f"\nstopped after {time.perf_counter() - began:.0f} s: RSS {now:.1f} GB > --max-rss-gb "
                f"{limit_gb:g} during: {STAGE[0]}",
                file=sys.stderr,
                flush=True,
            )
            os._exit(3)
        time.sleep(0.2)


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _undecorated(fn: Callable[..., Any]) -> Callable[..., Any]:
    inner: Callable[..., Any] = getattr(fn, "__wrapped__", fn)
    return inner


def page_callbacks(team: str) -> dict[str, Callable[[str], Any]]:
    """Each page's data callback as Dash calls it (the undecorated function), by page path."""
    modules = {
        page["path"] if not page.get("path_template") else "/teams/<team>": page["module"]
        for page in dash.page_registry.values()
    }
    update = {path: _undecorated(sys.modules[module].update) for path, module in modules.items()}
    return {
        "/": lambda search: update["/"](search, 0),
        "/health": lambda search: update["/health"](search, "util", 0),
        "/capacity": lambda search: update["/capacity"](search, 0),
        "/waste": lambda search: update["/waste"](search, 0),
        "/teams": lambda search: update["/teams"](search, 0),
        f"/teams/{team}": lambda search: update["/teams/<team>"](search, 0, team),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--fleet-days", type=float, default=8.0, help="days the simulated fleet covers")
    parser.add_argument("--windows", default="24h,7d", help="comma-separated presets (1h, 24h, 7d, 30d)")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--max-rss-gb", type=float, default=14.0)
    args = parser.parse_args()
    peak = [0.0]
    threading.Thread(target=watch_memory, args=(args.max_rss_gb, peak), daemon=True).start()

    STAGE[0] = "building the simulated fleet"
    started = time.perf_counter()
    fleet = build_demo_fleet(gpus=args.gpus, end=datetime(2026, 11, 20, tzinfo=UTC), days=args.fleet_days)
    service = demo_service(Settings(), fleet)
    app = create_app(service, warm=False)
    print(
        f"fleet: {len(fleet.gpus)} GPU units ({sum(n.gpu_count for n in fleet.nodes)} GPUs) on "
        f"{len(fleet.nodes)} nodes, {args.fleet_days:g} days at {fleet.window.step_seconds} s: "
        f"built in {time.perf_counter() - started:.1f} s",
        flush=True,
    )
    rows = []
    with app.server.test_request_context():
        store = current_store()
        for preset in args.windows.split(","):
            search = "" if preset == "24h" else f"?window={preset}"
            STAGE[0] = f"the {preset} analysis (service: sources + analytics, then the report)"
            filters = parse_query(search)
            cold = timed(lambda f=filters: store.load(f))
            loaded = store.load(filters)
            assert loaded.view is not None and loaded.outage is None
            view = loaded.view
            assert view.report == build_report(service.analysis(view.window))
            print(
                f"{preset}: window {view.window.start:%Y-%m-%d %H:%M} .. {view.window.end:%Y-%m-%d %H:%M}, "
                f"step {view.window.step_seconds} s, {len(view.analysis.marked):,} attributed rows; "
                f"cold analysis + report {cold:.1f} s",
                flush=True,
            )
            team = view.report["teams"][0]["team"] if view.report["teams"] else "none"
            for path, call in page_callbacks(team).items():
                STAGE[0] = f"{preset} {path}: first call"
                first = timed(lambda c=call, s=search: c(s))
                STAGE[0] = f"{preset} {path}: warm calls"
                warm = [timed(lambda c=call, s=search: c(s)) for _ in range(args.repeat)]
                rows.append((preset, path, first, statistics.median(warm), p95(warm)))
                print(
                    f"  {path:<22} first {first:7.3f} s   warm p50 {statistics.median(warm):6.3f} s   "
                    f"p95 {p95(warm):6.3f} s",
                    flush=True,
                )
    print(f"\npeak RSS {peak[0]:.1f} GB")
    print(f"{'window':<7} {'page':<22} {'first s':>8} {'warm p50 s':>11} {'warm p95 s':>11} {'target':>7}")
    for preset, path, first, p50, top in rows:
        target = TARGETS.get(preset)
        verdict = "" if target is None else ("ok" if top <= target else "OVER")
        print(f"{preset:<7} {path:<22} {first:8.3f} {p50:11.3f} {top:11.3f} {verdict:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
