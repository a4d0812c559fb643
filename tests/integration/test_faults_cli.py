"""Each one-shot and long-running command against a source that misbehaves (docs/faults.md): a fault proxy
in front of a real Prometheus and of the Kubernetes API test server, each fault in turn.

A fault is named within the deadline (the source's URL, in one line, no traceback), no number is made up,
and the command works again once the proxy relays.
"""

import contextlib
import json
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.kubeapi import KubeApiServer, write_kubeconfig
from tests.integration.conftest import DEMO_METRICS
from tests.integration.faultproxy import FaultProxy, Mode
from tests.integration.prom import PrometheusFactory, die_with_parent, free_port
from tests.integration.served import get, serve

pytestmark = pytest.mark.integration
END = datetime(2026, 11, 20, tzinfo=UTC)
TIMEOUT_SECONDS = 5  # each source's deadline in these tests (the defaults are 60 s and 30 s)
FAULTS: tuple[Mode, ...] = ("hang", "reset", "drip", "truncate", "garbage")
# What each fault reads as, per source (a dripping or silent source runs out of time).
SAID = {
    "hang": "no answer within 5s",
    "drip": "no answer within 5s",
    "reset": "unreachable",
    "truncate": "unreachable",
    "garbage": "",  # Prometheus: a malformed answer; the Kubernetes API: not TLS, unreachable
}


@dataclass(frozen=True)
class Rig:
    """The fleet's Prometheus and API server, each behind its own fault proxy, and a config naming them."""

    fleet: SimulatedFleet
    prometheus: FaultProxy
    kubernetes: FaultProxy
    kubeconfig: str
    config: str

    def proxy(self, source: str) -> FaultProxy:
        return self.prometheus if source == "prometheus" else self.kubernetes

    def url(self, source: str) -> str:
        return self.prometheus.url() if source == "prometheus" else self.kubernetes.url("https")

    def args(self) -> list[str]:
        return ["--config", self.config, "--kubeconfig", self.kubeconfig]


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=11, end=END, days=0.25, gpus=16)


Cell = tuple[Mode, str]  # (fault, source)
Run = tuple[subprocess.CompletedProcess[str], float]  # a command's outcome and the seconds it took
CELLS: list[Cell] = [(fault, source) for fault in FAULTS for source in ("prometheus", "kubernetes")]
CELL_IDS = [f"{fault}-{source}" for fault, source in CELLS]


@pytest.fixture(scope="module")
def rigs(
    prometheus_factory: PrometheusFactory, fleet: SimulatedFleet, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[Cell | None, Rig]]:
    """A rig per cell of the fault table (its own proxies, so the cells run side by side), and one (None)
    whose proxies relay."""
    prom = prometheus_factory(fleet, metrics=DEMO_METRICS)
    token = "faults-token"
    with KubeApiServer(fleet, token=token) as server, contextlib.ExitStack() as stack:
        rigs: dict[Cell | None, Rig] = {}
        for cell in [None, *CELLS]:
            where = tmp_path_factory.mktemp("faults")
            prometheus = stack.enter_context(FaultProxy("127.0.0.1", int(prom.url.rsplit(":", 1)[1])))
            kubernetes = stack.enter_context(FaultProxy("127.0.0.1", int(server.url.rsplit(":", 1)[1])))
            kubeconfig = where / "kubeconfig"
            write_kubeconfig(
                kubeconfig, server_url=kubernetes.url("https"), token=token, ca_pem=server.ca_pem
            )
            config = where / "gpuwatch.yaml"
            config.write_text(
                f"prometheus: {{url: {prometheus.url()}, timeout: {TIMEOUT_SECONDS}s}}\n"
                f"kubernetes: {{timeout: {TIMEOUT_SECONDS}s}}\n"
            )
            rigs[cell] = Rig(fleet, prometheus, kubernetes, str(kubeconfig), str(config))
        yield rigs


@pytest.fixture(scope="module")
def rig(rigs: dict[Cell | None, Rig]) -> Rig:
    return rigs[None]


def _side_by_side(rigs: dict[Cell | None, Rig], run: Callable[[Rig], Run]) -> dict[Cell, Run]:
    """`run` of every cell's rig under its fault, three at a time (2 cores: each run mostly waits)."""

    def faulted(cell: Cell) -> Run:
        fault, source = cell
        rig = rigs[cell]
        rig.proxy(source).mode = fault
        try:
            return run(rig)
        finally:
            rig.proxy(source).mode = "relay"

    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip(CELLS, pool.map(faulted, CELLS), strict=True))


def _gpuwatch(*args: str, timeout: float = 120) -> Run:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "gpuwatch", *args], capture_output=True, text=True, timeout=timeout
    )
    return result, time.monotonic() - started


def _report(rig: Rig) -> Run:
    window = ["--start", rig.fleet.window.start.isoformat(), "--end", rig.fleet.window.end.isoformat()]
    return _gpuwatch("report", *rig.args(), *window, "--source", "raw", "--format", "json")


def _expect_said(line: str, source: str, fault: Mode, url: str) -> None:
    assert url in line, line
    if fault == "garbage":
        expected = "malformed answer" if source == "prometheus" else "unreachable"
    else:
        expected = SAID[fault]
    assert expected in line, line


@pytest.fixture(scope="module")
def baseline(rig: Rig) -> dict[str, Any]:
    """The window's report with every source answering."""
    result, _ = _report(rig)
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["fleet"]["gpus"] > 0 and report["fleet"]["cost_usd"] > 0
    return report


@pytest.fixture(scope="module")
def reports(rigs: dict[Cell | None, Rig]) -> dict[Cell, Run]:
    return _side_by_side(rigs, _report)


@pytest.fixture(scope="module")
def checks(rigs: dict[Cell | None, Rig]) -> dict[Cell, Run]:
    return _side_by_side(
        rigs, lambda rig: _gpuwatch("check", *rig.args(), "--timeout", f"{TIMEOUT_SECONDS}s")
    )


@pytest.mark.parametrize("cell", CELLS, ids=CELL_IDS)
def test_report_names_the_fault_in_one_line_within_the_timeout_and_works_again(
    rigs: dict[Cell | None, Rig],
    reports: dict[Cell, Run],
    baseline: dict[str, Any],
    cell: Cell,
) -> None:
    fault, source = cell
    rig = rigs[cell]
    failed, seconds = reports[cell]
    assert failed.returncode == 3, failed.stderr
    assert seconds < TIMEOUT_SECONDS + 10 + 5  # the deadline plus 10 s, plus the interpreter's start
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuwatch: error: "), failed.stderr
    _expect_said(lines[0], source, fault, rig.url(source))
    assert failed.stdout == ""  # no number is invented
    if fault == "hang":  # a one-shot command keeps nothing from a failed run: once per source suffices
        again, _ = _report(rig)  # the proxy relays again
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["fleet"] == baseline["fleet"]


@pytest.mark.parametrize("cell", CELLS, ids=CELL_IDS)
def test_check_says_every_source_s_line_within_its_deadline(
    rigs: dict[Cell | None, Rig],
    checks: dict[Cell, Run],
    cell: Cell,
) -> None:
    fault, source = cell
    rig = rigs[cell]
    result, seconds = checks[cell]
    assert seconds < 2 * TIMEOUT_SECONDS + 5
    assert result.returncode == 3, result.stdout + result.stderr
    # One line for the failing source (the fleet's samples are days old: Prometheus may add that it holds
    # no recent DCGM series, which is true).
    problems = [line for line in result.stderr.splitlines() if rig.url(source) in line]
    assert len(problems) == 1 and problems[0].startswith("gpuwatch: problem: "), result.stderr
    _expect_said(problems[0], source, fault, rig.url(source))
    assert "Traceback" not in result.stderr
    # The other source's line says it answered.
    if source == "prometheus":
        kube = re.escape(rig.url("kubernetes"))
        assert re.search(rf"^ok: kubernetes {kube}: can list pods$", result.stdout, re.M)
    else:
        assert re.search(rf"^ok: prometheus {re.escape(rig.url('prometheus'))}: ", result.stdout, re.M)


def test_check_reports_a_missing_kubeconfig_at_once_beside_prometheus_line(rig: Rig, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    result, seconds = _gpuwatch("check", "--config", rig.config, "--kubeconfig", str(missing))
    assert result.returncode == 2, result.stderr
    assert seconds < TIMEOUT_SECONDS + 5
    assert f"gpuwatch: problem: kubernetes: cannot read kubeconfig {missing}" in result.stderr
    assert re.search(rf"^ok: prometheus {re.escape(rig.url('prometheus'))}: ", result.stdout, re.M)


def _scrape_up(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    found = re.findall(r'^gpuwatch_source_up\{source="(\w+)"\} (\S+)$', text, re.M)
    return {source: float(value) for source, value in found}


def _wait_for_up(port: int, expected: dict[str, float], within: float) -> float:
    """Seconds until the exporter publishes `expected` (fails after `within`)."""
    started = time.monotonic()
    seen: dict[str, float] = {}
    while time.monotonic() - started < within:
        try:
            seen = _scrape_up(port)
        except OSError:
            seen = {}
        if seen == expected:
            return time.monotonic() - started
        time.sleep(0.5)
    raise AssertionError(f"gpuwatch_source_up was {seen}, not {expected}, after {within:g} s")


@contextlib.contextmanager
def _exporter(rig: Rig) -> Iterator[int]:
    """`gpuwatch export` over the rig, every 5 s, once both sources are up on its /metrics: its port."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "export", *rig.args(), "--port", str(port), "--interval", "5s"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=die_with_parent,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert line.startswith(f"gpuwatch: exporting on http://127.0.0.1:{port}/metrics every 5s · reading ")
        assert f"Prometheus at {rig.url('prometheus')}" in line
        _wait_for_up(port, {"prometheus": 1.0, "kubernetes": 1.0}, within=60)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def exporter_cycles(rigs: dict[Cell | None, Rig]) -> dict[Cell, str]:
    """Each cell's fault under a running exporter: "" when the exporter marked the source down within a
    cycle and up again once the proxy relayed, else what it published instead.

    The cells run side by side in groups of up to three faults of one source, each group's in turn
    under an exporter of its own (over the rig of its first cell): a cycle mostly waits for a deadline.
    """

    def cycles(cells: list[Cell]) -> dict[Cell, str]:
        source = cells[0][1]
        other = "kubernetes" if source == "prometheus" else "prometheus"
        rig = rigs[cells[0]]
        outcome: dict[Cell, str] = {}
        with _exporter(rig) as port:
            for cell in cells:
                rig.proxy(source).mode = cell[0]
                try:
                    # One interval (5 s) for the next cycle, its deadline (5 s), and the source's own
                    # timeout when it refuses before the deadline; a scrape answers meanwhile.
                    _wait_for_up(port, {source: 0.0, other: 1.0}, within=20)
                    outcome[cell] = ""
                except AssertionError as failed:
                    outcome[cell] = f"under the fault: {failed}"
                finally:
                    rig.proxy(source).mode = "relay"
                try:
                    _wait_for_up(port, {source: 1.0, other: 1.0}, within=30)
                except AssertionError as failed:
                    outcome[cell] += f" relayed again: {failed}"
        return outcome

    by_source = [[cell for cell in CELLS if cell[1] == source] for source in ("prometheus", "kubernetes")]
    groups = [cells[k : k + 3] for cells in by_source for k in range(0, len(cells), 3)]
    with ThreadPoolExecutor(max_workers=len(groups)) as pool:
        return {cell: said for done in pool.map(cycles, groups) for cell, said in done.items()}


@pytest.mark.parametrize("cell", CELLS, ids=CELL_IDS)
def test_the_exporter_marks_the_failing_source_down_within_a_cycle_and_recovers(
    exporter_cycles: dict[Cell, str], cell: Cell
) -> None:
    assert exporter_cycles[cell] == ""


def test_the_exporter_publishes_its_own_series_before_its_first_cycle_ends(rig: Rig) -> None:
    rig.prometheus.mode = "hang"
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "export", *rig.args(), "--port", str(port), "--interval", "5s"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=die_with_parent,
    )
    try:
        waited = _wait_for_up(port, {"prometheus": 0.0, "kubernetes": 1.0}, within=30)
        assert waited < 20
    finally:
        rig.prometheus.mode = "relay"
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.parametrize("command", ["serve", "export"])
def test_a_missing_kubeconfig_stops_serve_and_export_before_they_listen(
    rig: Rig, command: str, tmp_path: Path
) -> None:
    missing = tmp_path / "missing-kubeconfig"
    port = free_port()
    result, seconds = _gpuwatch(
        command, "--config", rig.config, "--kubeconfig", str(missing), "--port", str(port), timeout=60
    )
    assert result.returncode == 2
    assert seconds < 15
    assert (
        result.stderr
        == f"gpuwatch: error: kubernetes: cannot read kubeconfig {missing}: No such file or directory\n"
    )


@pytest.mark.parametrize("fault", ["hang", "reset"])
def test_the_api_answers_503_naming_the_failing_source_and_recovers(
    rig: Rig, baseline: dict[str, Any], fault: Mode
) -> None:
    """serve's /api/v1/report with Prometheus hung or resetting: a 503 naming its URL, within the
    deadline plus 10 s; the same report as the CLI's once the proxy relays again."""
    window = (
        f"start={rig.fleet.window.start:%Y-%m-%dT%H:%M:%SZ}&end={rig.fleet.window.end:%Y-%m-%dT%H:%M:%SZ}"
    )
    with serve(*rig.args()) as url:
        rig.prometheus.mode = fault
        try:
            started = time.monotonic()
            status, _, body = get(f"{url}/api/v1/report?{window}&source=raw", auth=None)
            waited = time.monotonic() - started
        finally:
            rig.prometheus.mode = "relay"
        assert status == 503, body
        error = json.loads(body)["error"]
        _expect_said(error, "prometheus", fault, rig.url("prometheus"))
        assert waited < TIMEOUT_SECONDS + 10
        status, _, body = get(f"{url}/api/v1/report?{window}&source=raw", auth=None)
        assert status == 200 and json.loads(body)["fleet"] == baseline["fleet"]
