"""Two publishers of gpuwatch_* series in one Prometheus give the numbers of one.

Two replicas of `gpuwatch export` (deploy/exporter.yaml runs two), or one exporter scraped by two jobs,
write every series twice, differing only in the labels the scrape adds. Every read — the history
report, the raw report's own-allocation evidence (what the dashboard shows), the recording rules and
the Grafana panels — keeps one copy. Checked on backfilled history (exactly, also across an HA
failover) and on two exporters really scraped by a real Prometheus.
"""

import json
import math
import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from gpuwatch.core.config import load_settings
from gpuwatch.core.model import Window
from gpuwatch.read.history import read_history
from gpuwatch.read.series import Family, published_series, write_openmetrics
from gpuwatch.read.service import FleetService
from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.demoservice import demo_service
from gpuwatch.sim.exposition import write_backfill
from gpuwatch.surfaces.exporter import serve_exporter
from gpuwatch.surfaces.report import Report, build_history_report, build_report
from tests.integration.prom import PrometheusServer, create_blocks, free_port, query

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
END = datetime(2026, 11, 20, tzinfo=UTC)
METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
REPLICAS = ("10.42.1.7:9402", "10.42.2.9:9402")
REL = 1e-9


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=31, end=END, days=0.25)


def _families(fleet: SimulatedFleet) -> list[Family]:
    service = demo_service(fleet=fleet)
    return published_series(service.analysis(fleet.window), last_only=False)


def _publisher(
    families: list[Family], instance: str, keep: Callable[["pd.Series[Any]"], "pd.Series[bool]"] | None = None
) -> list[Family]:
    """The families as Prometheus stores them when it scrapes one replica: its instance and job added."""
    out = []
    for family in families:
        samples = family.samples if keep is None else family.samples[keep(family.samples["timestamp"])]
        labelled = samples.assign(instance=instance, job="gpuwatch-exporter")
        out.append(Family(family.name, family.help, (*family.labels, "instance", "job"), labelled))
    return out


def _together(*publishers: list[Family]) -> list[Family]:
    return [
        Family(group[0].name, group[0].help, group[0].labels, pd.concat([f.samples for f in group]))
        for group in zip(*publishers, strict=True)
    ]


def _backfilled(fleet: SimulatedFleet, families: list[Family], workdir: Path) -> PrometheusServer:
    workdir.mkdir(parents=True)
    path = workdir / "backfill.om"
    with path.open("w", encoding="utf-8") as out:
        write_backfill(fleet, out, layout="servicemonitor", metrics=METRICS, end_of_file=False)
        # Mid-interval, as write_fleet_backfill places them: sample i is read at t_i + step.
        write_openmetrics(families, out, offset_seconds=fleet.window.step_seconds / 2)
    create_blocks(path, workdir / "tsdb")
    path.unlink()
    return PrometheusServer(workdir / "tsdb").start()


@pytest.fixture(scope="module")
def proms(fleet: SimulatedFleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """one: a single publisher; two: both replicas all along; failover: replica A for the first 60 % of
    the window, replica B from 50 % on (they overlap, as during a rolling restart)."""
    families = _families(fleet)
    span = fleet.window.end - fleet.window.start
    early = pd.Timestamp(fleet.window.start + span * 0.6)
    late = pd.Timestamp(fleet.window.start + span * 0.5)
    a, b = REPLICAS
    layouts = {
        "one": _publisher(families, a),
        "two": _together(_publisher(families, a), _publisher(families, b)),
        "failover": _together(
            _publisher(families, a, lambda t: t < early), _publisher(families, b, lambda t: t >= late)
        ),
    }
    root = tmp_path_factory.mktemp("publishers")
    servers = {name: _backfilled(fleet, fams, root / name) for name, fams in layouts.items()}
    try:
        yield {name: server.url for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()


def _settings(url: str, kubeconfig: str) -> Any:
    return load_settings(flags={"prometheus_url": url, "kubeconfig": kubeconfig}, env={})


def _assert_same(got: Any, want: Any, where: str = "report") -> None:
    """Equal structures, numbers to REL (float sums in another order)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), where
        for key in want:
            _assert_same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=REL, abs=1e-9), where
    else:
        assert got == want, where


def _keyed(report: Report) -> Report:
    """The report with its rows in a fixed order (ties in waste may come in either order)."""
    out = dict(report)
    for section, keys in (
        ("teams", ("team",)),
        ("namespaces", ("namespace",)),
        ("workloads", ("namespace", "pod")),
        ("pools", ("pool",)),
        ("pending", ("namespace", "pod")),
    ):
        out[section] = sorted(report[section], key=lambda r: tuple(r[k] for k in keys))
    return out


@pytest.mark.parametrize("layout", ["two", "failover"])
def test_the_history_report_of_two_publishers_is_the_report_of_one(
    fleet: SimulatedFleet, proms: dict[str, str], kubeconfig: str, layout: str
) -> None:
    one = build_history_report(read_history(_settings(proms["one"], kubeconfig), fleet.window))
    got = build_history_report(read_history(_settings(proms[layout], kubeconfig), fleet.window))
    assert one["fleet"]["allocated_gpu_hours"] > 0 and one["workloads"]
    _assert_same(_keyed(got), _keyed(one))


def test_the_raw_report_and_dashboard_numbers_of_two_publishers_are_those_of_one(
    fleet: SimulatedFleet, proms: dict[str, str], kubeconfig: str
) -> None:
    """The raw path (what the dashboard shows) takes gpuwatch's own allocation series as evidence of who
    held which GPU: two copies of it are still one allocation."""
    reports = {
        name: build_report(FleetService.live(_settings(proms[name], kubeconfig)).analysis(fleet.window))
        for name in ("one", "two")
    }
    fleet_one = reports["one"]["fleet"]
    assert fleet_one["allocated_gpu_hours"] <= fleet_one["capacity_gpu_hours"]
    _assert_same(_keyed(reports["two"]), _keyed(reports["one"]))


def _recording_rules() -> dict[str, str]:
    groups = yaml.safe_load((ROOT / "alerts" / "gpuwatch-recording.rules.yml").read_text())["groups"]
    return {r["record"]: r["expr"] for g in groups if g["name"] == "gpuwatch.recording" for r in g["rules"]}


def _panel_queries(window: Window) -> dict[str, str]:
    """Every Grafana panel query over gpuwatch_* series, with the dashboard variables set to "all"."""
    queries = {}
    for path in sorted((ROOT / "dashboards").glob("*.json")):
        stack = list(json.loads(path.read_text())["panels"])
        while stack:
            panel = stack.pop()
            stack += panel.get("panels", [])
            for target in panel.get("targets", []):
                expr = target.get("expr", "")
                if "gpuwatch_" in expr:
                    seconds = int(window.duration_seconds)
                    expr = re.sub(r"\$(cluster|pool|team|node|hostname|model)\b", ".*", expr)
                    expr = expr.replace("$__range_s", str(seconds)).replace("$__range", f"{seconds}s")
                    queries[f"{path.name}: {panel['title']} ({target['refId']})"] = expr
    return queries


def _instant(url: str, expr: str, at: datetime) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(r["metric"].items())): float(r["value"][1])
        for r in query(url, expr, at)
        if r["value"][1] != "NaN"
    }


def test_recording_rules_and_grafana_panels_of_two_publishers_are_those_of_one(
    fleet: SimulatedFleet, proms: dict[str, str]
) -> None:
    queries = {**_recording_rules(), **_panel_queries(fleet.window)}
    assert len(queries) > 30
    at = fleet.window.end
    answered = 0
    for name, expr in queries.items():
        one = _instant(proms["one"], expr, at)
        for layout in ("two", "failover"):
            got = _instant(proms[layout], expr, at)
            assert got.keys() == one.keys(), f"{layout}: {name}"
            for key, value in one.items():
                assert got[key] == pytest.approx(value, rel=REL), f"{layout}: {name} {dict(key)}"
        answered += bool(one)
    assert answered > 25  # most queries have data at the window's end


# -- two exporters, really scraped --------------------------------------------------------------


@pytest.fixture(scope="module")
def small_fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=5, end=END, days=0.1, gpus=16)


CAPACITY_PANEL = "gpu-team-waste.json: GPU-hour ledger: capacity by state (A)"


def test_two_exporters_scraped_by_a_real_prometheus_report_what_one_does(
    small_fleet: SimulatedFleet, tmp_path: Path
) -> None:
    exporters = []
    for _ in range(2):
        server, loop, _registry = serve_exporter(
            demo_service(fleet=small_fleet), host="127.0.0.1", port=free_port(), interval_seconds=1
        )
        exporters.append((server, loop))
    ports = [server.server_port for server, _ in exporters]
    gpus = sum(n.gpu_count for n in small_fleet.nodes)
    targets = {"one": ports[:1], "two": ports}
    servers: dict[str, PrometheusServer] = {}
    try:
        for name, scraped in targets.items():
            listed = ", ".join(f'"127.0.0.1:{p}"' for p in scraped)
            config = f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: gpuwatch-exporter
    honor_labels: true
    static_configs: [{{targets: [{listed}]}}]
"""
            (tmp_path / name).mkdir()
            servers[name] = PrometheusServer(data_dir=tmp_path / name, config_text=config).start()
        # Both servers scrape every exporter they know for a while (however loaded the machine is): the
        # window is the 10 s after each has 5 cycles of every publisher, and ends 2 s before the reads.
        scraped = {name: len(ports) for name, ports in targets.items()}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            now = datetime.now(UTC)
            cycles = {
                name: list(_instant(s.url, "count_over_time(gpuwatch_build_info[30s])", now).values())
                for name, s in servers.items()
            }
            if all(len(c) == scraped[n] and min(c) >= 5 for n, c in cycles.items()):
                break
            time.sleep(1)
        # A scrape a loaded machine delays past its 1 s can leave one server a sample short in a 10 s
        # window: then a later window is read (at most five); a report that counts a second publisher
        # differs in every window, so the assertions below still catch it.
        for _attempt in range(5):
            start = datetime.now(UTC).replace(microsecond=0)
            time.sleep(12)
            end = start + timedelta(seconds=10)
            window = Window(start=start, end=end, step_seconds=1)
            reports = {
                name: build_history_report(
                    read_history(load_settings(flags={"prometheus_url": s.url}, env={}), window)
                )
                for name, s in servers.items()
            }
            at = end - timedelta(seconds=2)
            panels = {
                name: {q: _instant(s.url, e, at) for q, e in _panel_queries(window).items()}
                for name, s in servers.items()
            }
            ledgers = [reports[name]["fleet"]["ledger_gpu_hours"] for name in ("one", "two")]
            # A scrape later than its 1 s times out and marks the target's series stale at once: the
            # panels' instant at `at` then see none of it. A later window is read then too.
            capacity = [sum(panels[name][CAPACITY_PANEL].values()) for name in ("one", "two")]
            if all(math.isclose(ledgers[0][k], ledgers[1][k], rel_tol=1e-6) for k in ledgers[0]) and all(
                math.isclose(c, gpus) for c in capacity
            ):
                break
    finally:
        for s in servers.values():
            s.stop()
        for server, loop in exporters:
            loop.stop()
            server.shutdown()
    one, two = reports["one"], reports["two"]
    assert one["fleet"]["allocated_gpu_hours"] > 0
    # The exporters publish the demo fleet's last sample every cycle: constant values, so the two
    # Prometheus servers (scraping at their own phases) hold the same GE-hours whatever their timing.
    for state, hours in one["fleet"]["ledger_gpu_hours"].items():
        assert two["fleet"]["ledger_gpu_hours"][state] == pytest.approx(hours, rel=1e-6), state
    assert {w["pod"]: w["gpus"] for w in two["workloads"]} == {w["pod"]: w["gpus"] for w in one["workloads"]}
    assert {t["team"]: t["cost_usd"] for t in two["teams"]} == pytest.approx(
        {t["team"]: t["cost_usd"] for t in one["teams"]}, rel=1e-6
    )
    # Capacity from the exporters' own ledger equals the fleet's GPUs: nothing counted twice.
    assert sum(panels["two"][CAPACITY_PANEL].values()) == pytest.approx(gpus)
    for name, values in panels["one"].items():
        assert panels["two"][name].keys() == values.keys(), name
        for key, value in values.items():
            assert panels["two"][name][key] == pytest.approx(value, rel=1e-6), f"{name} {dict(key)}"
