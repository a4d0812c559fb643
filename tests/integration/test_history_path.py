"""Both history paths agree (SPEC §4.3): a report read from gpuwatch_* series equals the raw recomputation.

One simulated day is backfilled into a real Prometheus twice over: as the DCGM series dcgm-exporter would
have left, and as the gpuwatch_* series `gpuwatch export` would have (computed from the simulator, as the
exporter computes them live). The raw path recomputes the report from DCGM series and the Kubernetes API
test server; the history path reads only the gpuwatch_* series, aggregated in Prometheus. Every test runs
twice: on that Prometheus, and on a VictoriaMetrics the same file was imported into.

Not comparable, so not compared: coverage.util_source and unattributed_gpu_hours (gpuwatch_* series
keep neither; the history path reports 0 and says so in coverage.warnings), and gpu_samples_present,
which history counts per node and day capped at capacity (gpuwatch_node_gpus_reporting counts MIG
instances) — equal here, approximate in general. Pending pods' waiting_seconds are compared within
one step: history has the wait as the exporter's latest cycle published it, the raw path at the end.
"""

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pandas as pd
import pytest

from gpuwatch.core.config import KubernetesSettings, PrometheusSettings, Settings
from gpuwatch.core.model import LEDGER_STATES, Commitment, DatedPrice, Window
from gpuwatch.read.analysis import Analysis, usage_tables
from gpuwatch.read.chargeback import read_charges
from gpuwatch.read.history import NAMESPACE, TEAM, NoHistoryError, price_cuts, read_history, read_pieces
from gpuwatch.read.historytables import History
from gpuwatch.read.service import FleetService, LiveSources
from gpuwatch.sim import SimulatedFleet
from gpuwatch.sim.demoservice import demo_settings
from gpuwatch.sources.historystore import PrometheusHistory
from gpuwatch.sources.prometheus import PrometheusSource
from gpuwatch.surfaces.focus import focus_rows, render_focus
from gpuwatch.surfaces.report import build_history_report, build_report, json_schema
from tests.integration.focus_check import assert_adds_up, assert_conforms, validate
from tests.integration.prom import RAW_PATH_METRICS, Backend, BackfilledPrometheus, PrometheusFactory

pytestmark = pytest.mark.integration
END = datetime(2026, 11, 20, tzinfo=UTC)
UTIL = RAW_PATH_METRICS
ENERGY = ("energy_kwh", "energy_cost_usd")
REL = 0.02  # the tolerance; measured differences are float rounding (~1e-13)
Report = dict[str, Any]
SECTIONS = {
    "teams": ("team",),
    "namespaces": ("namespace",),
    "workloads": ("namespace", "pod"),
    "pools": ("pool",),
    "pending": ("namespace", "pod"),
}


@pytest.fixture(scope="module")
def fleet(day_fleet: SimulatedFleet) -> SimulatedFleet:
    return day_fleet  # seed 5, a day to END: its servers are shared with the other modules reading it


@pytest.fixture(scope="module")
def prom(
    fleet: SimulatedFleet, prometheus_factory: PrometheusFactory, backend: Backend
) -> BackfilledPrometheus:
    """Prometheus, then VictoriaMetrics: every test of the module runs against each."""
    return prometheus_factory(
        fleet, layout="servicemonitor", metrics=UTIL, gpuwatch_series=True, backend=backend, world="seed5-day"
    )


@pytest.fixture(scope="module")
def settings(prom: BackfilledPrometheus, kubeconfig: str) -> Settings:
    # The backfilled gpuwatch_* series were computed with the demo's team map and prices: use the same.
    return demo_settings(
        Settings(
            prometheus=PrometheusSettings(url=prom.url), kubernetes=KubernetesSettings(kubeconfig=kubeconfig)
        )
    )


@pytest.fixture(scope="module")
def service(settings: Settings) -> FleetService:
    return FleetService(settings=settings, sources=LiveSources(settings))


@pytest.fixture(scope="module")
def analysis(fleet: SimulatedFleet, service: FleetService) -> Analysis:
    """The raw path's analysis of the window, read once for every test that reports from it."""
    return service.analysis(fleet.window)


@pytest.fixture(scope="module")
def read(fleet: SimulatedFleet, settings: Settings) -> History:
    """The history path's read of the window, once for every test that reports from it."""
    return read_history(settings, fleet.window)


@pytest.fixture(scope="module")
def raw(analysis: Analysis) -> Report:
    return build_report(analysis)


@pytest.fixture(scope="module")
def history(read: History) -> Report:
    return build_history_report(read)


def _rows(report: Report, section: str, *keys: str) -> dict[tuple[str, ...], dict[str, Any]]:
    return {tuple(r[k] for k in keys): r for r in report[section]}


def _same_row(got: dict[str, Any], expected: dict[str, Any], *, rel: float = 1e-9) -> None:
    """Numbers equal within `rel`, everything else exactly."""
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        if isinstance(value, float):
            assert got[key] == pytest.approx(value, rel=rel, abs=1e-9), (expected, key)
        else:
            assert got[key] == value, (expected, key)


def test_fleet_ledger_per_state_agrees(raw: Report, history: Report) -> None:
    for state in LEDGER_STATES:
        assert history["fleet"]["ledger_gpu_hours"][state] == pytest.approx(
            raw["fleet"]["ledger_gpu_hours"][state], rel=REL
        ), state
    for key in (
        "capacity_gpu_hours",
        "allocated_gpu_hours",
        "used_gpu_hours",
        "cost_usd",
        "waste_usd",
        "unallocated_cost_usd",
        "stranded_cost_usd",
    ):
        assert history["fleet"][key] == pytest.approx(raw["fleet"][key], rel=REL), key
    assert history["fleet"]["gpus"] == raw["fleet"]["gpus"] == 96
    assert raw["fleet"]["ledger_gpu_hours"]["allocated_idle"] > 0  # the comparison covers every state
    assert raw["fleet"]["ledger_gpu_hours"]["stranded"] > 0


def test_per_team_usage_cost_and_waste_agree(raw: Report, history: Report) -> None:
    got, expected = _rows(history, "teams", "team"), _rows(raw, "teams", "team")
    assert got.keys() == expected.keys()
    for team, row in expected.items():
        for key in ("allocated_gpu_hours", "used_gpu_hours", "idle_gpu_hours", "cost_usd", "waste_usd"):
            assert got[team][key] == pytest.approx(row[key], rel=REL, abs=1e-9), (team, key)
        assert got[team]["pods"] == row["pods"], team
    assert [t["team"] for t in history["teams"]] == [t["team"] for t in raw["teams"]]


def test_per_pool_stranded_and_fragmentation_agree(raw: Report, history: Report) -> None:
    got, expected = _rows(history, "pools", "pool"), _rows(raw, "pools", "pool")
    assert got.keys() == expected.keys()
    for pool, row in expected.items():
        for key in ("stranded_gpu_hours", "fragmentation_ratio", "allocation_rate", "utilization"):
            assert got[pool][key] == pytest.approx(row[key], rel=REL, abs=1e-9), (pool, key)
        for key in ("nodes", "gpus", "largest_free_block"):
            assert got[pool][key] == row[key], (pool, key)
    assert any(r["fragmentation_ratio"] for r in expected.values())


def test_namespaces_workloads_and_pending_agree(fleet: SimulatedFleet, raw: Report, history: Report) -> None:
    got, expected = _rows(history, "namespaces", "namespace"), _rows(raw, "namespaces", "namespace")
    assert got.keys() == expected.keys()
    for namespace, row in expected.items():
        for key in (
            "allocated_gpu_hours",
            "used_gpu_hours",
            "idle_gpu_hours",
            "cost_usd",
            "waste_usd",
            "energy_kwh",
            "energy_cost_usd",
        ):
            assert got[namespace][key] == pytest.approx(row[key], rel=REL, abs=1e-9), (namespace, key)
    got, expected = (
        _rows(history, "workloads", "namespace", "pod"),
        _rows(raw, "workloads", "namespace", "pod"),
    )
    assert got.keys() == expected.keys()
    for pod, row in expected.items():
        for key in ("allocated_gpu_hours", "used_gpu_hours", "idle_gpu_hours", "waste_usd", *ENERGY):
            if row[key] is None:  # unknown (no power reading) on both paths, never 0
                assert got[pod][key] is None, (pod, key)
                continue
            assert got[pod][key] == pytest.approx(row[key], rel=REL, abs=1e-9), (pod, key)
        for key in ("team", "node", "pool", "gpus", "idle_since"):
            assert got[pod][key] == row[key], (pod, key)
    assert any(r["idle_since"] for r in expected.values())
    # Each workload's energy (its GE share of its GPUs' power) and its cost at the tariff: known for some.
    assert sum(r["energy_kwh"] > 0 for r in expected.values() if r["energy_kwh"] is not None) > 10
    # History has each pending pod's wait as the exporter's latest cycle published it: up to a step
    # before the window's end, where the raw path measures it.
    got, expected = _rows(history, "pending", "namespace", "pod"), _rows(raw, "pending", "namespace", "pod")
    assert got.keys() == expected.keys() and expected
    for pod, row in expected.items():
        assert got[pod]["waiting_seconds"] == pytest.approx(
            row["waiting_seconds"], abs=fleet.window.step_seconds
        )
        _same_row({**got[pod], "waiting_seconds": 0.0}, {**row, "waiting_seconds": 0.0})


NEED = re.compile(r"p95 compute ([0-9.]+) GPU and peak memory ([0-9.]+) GiB")


def test_right_sizing_agrees_but_where_the_busiest_hour_asks_for_more(raw: Report, history: Report) -> None:
    """History keeps each pod's hourly p95 and peak memory (roll-ups): the peak is the window's, the p95
    its busiest hour's, not below the window's but for interpolation. Each workload is told the same,
    but where that hour needs a bigger fit: then never a smaller (cheaper) one than the raw path's."""
    got, expected = (
        _rows(history, "workloads", "namespace", "pod"),
        _rows(raw, "workloads", "namespace", "pod"),
    )
    same = 0
    for pod, row in expected.items():
        mine, theirs = got[pod]["recommendation"], row["recommendation"]
        if theirs["kind"] == "unknown":
            assert mine == theirs, pod
            same += 1
            continue
        need, raw_need = NEED.match(mine["reason"]), NEED.match(theirs["reason"])
        assert need and raw_need, (mine, theirs)
        assert need[2] == raw_need[2], pod  # peak memory, GiB
        # p95 at 2 decimals: the busiest hour's is at least the window's but for interpolation (a p95
        # falls between two samples, and the window's and its hours' fall between different ones).
        assert float(need[1]) >= 0.98 * float(raw_need[1]) - 0.005, pod
        if (mine["kind"], mine["target"]) == (theirs["kind"], theirs["target"]):
            assert mine["monthly_savings_usd"] == pytest.approx(theirs["monthly_savings_usd"], rel=1e-9)
            same += 1
        else:
            assert float(need[1]) > float(raw_need[1]), pod
            assert mine["monthly_savings_usd"] < theirs["monthly_savings_usd"], pod
    kinds = {r["recommendation"]["kind"] for r in expected.values()}
    assert kinds >= {"gpus", "mig", "time_slice", "product", "keep"}
    assert same >= 0.95 * len(expected)
    savings = history["rightsizing"]["monthly_savings_usd"]
    assert (
        raw["rightsizing"]["monthly_savings_usd"] * 0.95
        <= savings
        <= raw["rightsizing"]["monthly_savings_usd"]
    )
    # The workloads packed are those holding GPUs at the window's end, on both paths.
    before = {p["pool"]: p["gpus_before"] for p in history["rightsizing"]["pools"]}
    assert before == {p["pool"]: p["gpus_before"] for p in raw["rightsizing"]["pools"]}
    assert history["rightsizing"]["gpus_freed"] is not None


def test_what_history_does_not_keep_is_said(raw: Report, history: Report) -> None:
    assert history["coverage"]["util_source"] == {
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0,
        "DCGM_FI_DEV_GPU_UTIL": 0,
    }
    assert raw["coverage"]["util_source"]["DCGM_FI_DEV_GPU_UTIL"] > 0
    assert any(w.startswith("history path:") for w in history["coverage"]["warnings"])
    expected = raw["coverage"]["gpu_samples_expected"]
    assert history["coverage"]["gpu_samples_expected"] == expected
    assert history["coverage"]["gpu_samples_present"] == pytest.approx(
        raw["coverage"]["gpu_samples_present"], rel=REL
    )
    jsonschema.validate(history, json_schema())


@pytest.mark.parametrize(("piece_seconds", "rel"), [(3600, 1e-9), (12_000, 1e-9), (7000, 1 / 116)])
def test_the_pieces_a_window_is_read_in_do_not_change_it(
    fleet: SimulatedFleet, settings: Settings, history: Report, piece_seconds: int, rel: float
) -> None:
    # 24 whole pieces (one range query); 7 whole pieces and a shorter last one (an instant query). Pieces
    # of 7000 s hold 116 or 117 samples of 60 s, so sample interval = length / samples is off by up to
    # 1/116 in each: the price of pieces that are no multiple of the exporter's cycle (days are).
    pieced = build_history_report(read_history(settings, fleet.window, piece_seconds=piece_seconds))
    assert pieced["fleet"]["ledger_gpu_hours"] == pytest.approx(history["fleet"]["ledger_gpu_hours"], rel=rel)
    _same_sections(pieced, history, rel=rel, same_p95=piece_seconds % 3600 == 0)


def test_a_price_change_cuts_the_pieces_and_changes_no_number(
    fleet: SimulatedFleet, settings: Settings, history: Report
) -> None:
    # A dated price taking effect mid-hour, at the price it replaces: the window is read as the stretches
    # on either side (part-hours raw around it), no piece spans it, and every number stays as it was.
    cut = fleet.window.start + timedelta(hours=7, minutes=30)
    product, price = next((k, v) for k, v in settings.pricing.products.items() if isinstance(v, float))
    dated = (
        DatedPrice(start=fleet.window.start - timedelta(days=365), usd_per_gpu_hour=price),
        DatedPrice(start=cut, usd_per_gpu_hour=price),
    )
    products = {**settings.pricing.products, product: dated}
    changed = replace(settings, pricing=replace(settings.pricing, products=products))
    assert price_cuts(changed, fleet.window) == (cut,)
    prometheus = PrometheusSource.from_settings(settings.prometheus)
    try:
        cuts = price_cuts(changed, fleet.window)
        pieces = read_pieces(PrometheusHistory(prometheus), fleet.window, cuts=cuts)
    finally:
        prometheus.close()
    ends = pieces["end"]
    starts = ends - pd.to_timedelta(pieces["seconds"], unit="s")
    assert pd.Timestamp(cut) in set(ends) and not ((starts < cut) & (ends > cut)).any()
    assert pieces["seconds"].sum() == pytest.approx(fleet.window.duration_seconds)
    pieced = build_history_report(read_history(changed, fleet.window))
    assert pieced["fleet"]["cost_usd"] == pytest.approx(history["fleet"]["cost_usd"], rel=1e-9)
    _same_sections(pieced, history, same_p95=False)  # the hour cut at 7:30 is two raw part-hours


def _same_sections(got: Report, expected: Report, *, rel: float = 1e-9, same_p95: bool = True) -> None:
    """Every row of every section the same. Right-sizing's p95 is the busiest piece's, so the same only
    when both read the same pieces (`same_p95`): roll-up hours, not raw pieces of another length."""
    for section, keys in SECTIONS.items():
        mine, theirs = _rows(got, section, *keys), _rows(expected, section, *keys)
        assert mine.keys() == theirs.keys()
        for key, row in theirs.items():
            if section == "workloads" and not same_p95:
                row, mine[key] = {**row, "recommendation": None}, {**mine[key], "recommendation": None}
            _same_row(mine[key], row, rel=rel)


@pytest.mark.parametrize("detail", [NAMESPACE, TEAM])
def test_a_report_without_workload_rows_reads_no_pod_and_changes_no_other_number(
    fleet: SimulatedFleet, settings: Settings, history: Report, detail: str
) -> None:
    # A table of teams or namespaces writes no workload row: its rows come from sums Prometheus makes
    # per namespace (and the idle pods' families), and equal those summed per pod.
    summary = build_history_report(read_history(settings, fleet.window, detail=detail))
    assert summary["workloads"] == [] and len(history["workloads"]) > 0
    assert summary["fleet"] == history["fleet"]
    sections = ["teams", "pools", "pending", *(["namespaces"] if detail == NAMESPACE else [])]
    assert (summary["namespaces"] == []) == (detail == TEAM)
    for section in sections:
        got, expected = (_rows(r, section, *SECTIONS[section]) for r in (summary, history))
        assert got.keys() == expected.keys() and len(got) > 0
        for key, row in expected.items():
            _same_row(got[key], row)


H100 = "NVIDIA-H100-80GB-HBM3"


@pytest.fixture(scope="module")
def committed(
    fleet: SimulatedFleet, prometheus_factory: PrometheusFactory, backend: Backend, settings: Settings
) -> Settings:
    """The demo's settings with 20 of the fleet's 32 H100s reserved at $3.00 (on demand $4.00) from the
    window's tenth hour, and a Prometheus holding the gpuwatch_* history the exporter published under it
    (that history alone: the raw path reads the DCGM series the module's Prometheus holds)."""
    start = fleet.window.start + timedelta(hours=10)
    base = demo_settings()
    reserved = Commitment(start=start, end=start + timedelta(days=365), gpus=20, usd_per_gpu_hour=3.0)
    book = replace(base.pricing, commitments={H100: (reserved,)})
    published = replace(base, pricing=book)
    prom = prometheus_factory(
        fleet,
        layout="servicemonitor",
        metrics=(),
        gpuwatch_series=True,
        backend=backend,
        settings=published,
        world="seed5-day-committed",
    )
    return replace(published, prometheus=PrometheusSettings(url=prom.url), kubernetes=settings.kubernetes)


@pytest.fixture(scope="module")
def committed_history(fleet: SimulatedFleet, committed: Settings) -> Report:
    return build_history_report(read_history(committed, fleet.window))


def test_committed_gpus_cost_the_same_on_both_paths(
    fleet: SimulatedFleet,
    committed: Settings,
    settings: Settings,
    analysis: Analysis,
    committed_history: Report,
) -> None:
    raw = replace(committed, prometheus=settings.prometheus)  # the DCGM series, priced under the commitment
    analyses = [analysis, FleetService(settings=raw, sources=LiveSources(raw)).analysis(fleet.window)]
    paid = [float(usage_tables(a)["fleet_ledger"][list(STATE_USD)].sum(axis=1).iloc[0]) for a in analyses]
    # From the tenth hour the H100s' GPU-hour costs (20 × 3.00 + 12 × 4.00) / 32 = 3.375 instead of 4.00:
    # the fleet pays 14 h × 32 GPUs × 0.625 less, whatever state its GPUs were in.
    assert paid[0] - paid[1] == pytest.approx(14 * 32 * (4.0 - 3.375))
    cut = build_report(analyses[1])
    assert _rows(cut, "pools", "pool")[(H100,)]["usd_per_gpu_hour"] == pytest.approx(3.375)
    # The history path prices each piece at the blended rate the exporter published in it.
    history = committed_history
    for key in ("cost_usd", "waste_usd", "unallocated_cost_usd", "stranded_cost_usd"):
        assert history["fleet"][key] == pytest.approx(cut["fleet"][key], rel=1e-9), key
    for section, keys in (("teams", ("team",)), ("pools", ("pool",))):
        got, expected = _rows(history, section, *keys), _rows(cut, section, *keys)
        for key, row in expected.items():
            for column in ("cost_usd", "waste_usd", "stranded_cost_usd", "usd_per_gpu_hour"):
                if column in row:
                    assert got[key][column] == pytest.approx(row[column], rel=1e-9, abs=1e-9), (key, column)


def test_focus_rows_of_the_history_path_add_up_and_pass_the_validator(
    fleet: SimulatedFleet, committed: Settings, committed_history: Report, tmp_path: Path
) -> None:
    """Hourly FOCUS rows read from gpuwatch_* series (pieces cut at every hour) under the H100
    commitment: they add up to the history report of the same window, and focus-validator passes them."""
    charges = read_charges(committed, fleet.window, store=None, period_seconds=3600)
    rows, warnings = focus_rows(charges, window=fleet.window, names=committed.focus)
    assert warnings == []
    path = tmp_path / "focus.csv"
    path.write_bytes(render_focus(rows, "csv"))
    assert_conforms(validate(path, tmp_path))
    written = pd.read_csv(path)
    assert_adds_up(written, committed_history)
    assert written["ChargePeriodStart"].nunique() == 24
    # From the tenth hour 20 of the 32 H100s are committed at $3.00: $3.375 a GPU-hour, $4.00 listed.
    h100 = written[(written["SkuId"] == H100) & (written["PricingQuantity"] > 1e-6)]
    late = pd.to_datetime(h100["ChargePeriodStart"]) >= fleet.window.start + timedelta(hours=10)
    assert h100.loc[late, "ContractedUnitPrice"].to_numpy() == pytest.approx(3.375)
    assert h100.loc[late, "ListUnitPrice"].to_numpy() == pytest.approx(4.0)
    assert h100.loc[~late, "ContractedUnitPrice"].to_numpy() == pytest.approx(4.0)


STATE_USD = ("cost_usd", "unallocated_cost_usd", "stranded_cost_usd", "unavailable_cost_usd")


def test_a_window_without_gpuwatch_series_has_no_history(fleet: SimulatedFleet, settings: Settings) -> None:
    before = Window(start=fleet.window.start - timedelta(days=10), end=fleet.window.start - timedelta(days=7))
    with pytest.raises(NoHistoryError, match="holds no gpuwatch_\\* series"):
        read_history(settings, before)


def _cli(
    prom: BackfilledPrometheus, kubeconfig: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuwatch",
            "report",
            "--prometheus-url",
            prom.url,
            "--kubeconfig",
            kubeconfig,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


def test_cli_auto_reads_history_when_the_window_holds_many_gpu_samples(
    prom: BackfilledPrometheus, kubeconfig: str, fleet: SimulatedFleet, history: Report
) -> None:
    # Three days ending with the simulated one: the two days before it have no gpuwatch_* samples. No
    # config: history prices with what the exporter published and needs no team map. 96 GPUs × 4320
    # samples = 414,720 GPU-samples: over a limit of 300,000, under the default 1,000,000.
    start = (fleet.window.end - timedelta(days=3)).isoformat()
    end = fleet.window.end.isoformat()
    low = {"GPUWATCH_RAW_MAX_GPU_SAMPLES": "300000"}
    result = _cli(prom, kubeconfig, "--start", start, "--end", end, "--format", "json", env=low)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    jsonschema.validate(report, json_schema())
    assert report["fleet"]["ledger_gpu_hours"] == pytest.approx(
        history["fleet"]["ledger_gpu_hours"], rel=1e-9
    )
    # The same spend; the budgets are the config's (none here), the forecast of a window three times as long.
    for key, row in _rows(history, "teams", "team").items():
        got = _rows(report, "teams", "team")[key]
        assert got["budget_usd"] is None
        assert got["forecast_month_usd"] == pytest.approx(row["forecast_month_usd"] / 3, rel=1e-9)
        planned = ("budget_usd", "forecast_month_usd")
        _same_row(
            {k: v for k, v in got.items() if k not in planned},
            {k: v for k, v in row.items() if k not in planned},
        )
    # Whole days are read from the daily roll-ups, which sum 23:00 to 23:00 (evaluated at 23:30): the
    # hour before the fleet's start falls in the first day that has samples, named as covered in part.
    gaps = [w for w in report["coverage"]["warnings"] if "gpuwatch_* samples" in w]
    day_edge = (fleet.window.start - timedelta(hours=1)).isoformat()[:19]
    day_end = (fleet.window.end - timedelta(hours=1)).isoformat()[:19]
    assert gaps == [
        f"no gpuwatch_* samples from {start[:19]}Z to {day_edge}Z (47 h): those hours are in no sum of "
        "this report",
        f"gpuwatch_* samples cover only 96% of {day_edge}Z to {day_end}Z: "
        "the hours without them are in no sum of this report",
    ]
    table = _cli(prom, kubeconfig, "--start", start, "--end", end, "--source", "auto", env=low)
    assert table.returncode == 0, table.stderr
    assert "source: history (gpuwatch_* series" in table.stdout
    day = ("--start", fleet.window.start.isoformat(), "--end", end)  # 115,200 GPU-samples
    assert "source: raw" in _cli(prom, kubeconfig, *day, "--source", "auto", env=low).stdout


def test_cli_source_history_and_its_absence(
    prom: BackfilledPrometheus, kubeconfig: str, fleet: SimulatedFleet
) -> None:
    window = ("--start", fleet.window.start.isoformat(), "--end", fleet.window.end.isoformat())
    result = _cli(prom, kubeconfig, *window, "--source", "history", "--group-by", "pool")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1].startswith("source: history")
    long_ago = ("--start", "2026-01-01T00:00:00Z", "--end", "2026-01-05T00:00:00Z")
    missing = _cli(prom, kubeconfig, *long_ago, "--source", "history")
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1
    assert "holds no gpuwatch_* series from 2026-01-01T00:00:00Z" in missing.stderr


def test_queues_agree(service: FleetService, analysis: Analysis, read: History) -> None:
    """Kueue's queues over the window, from the API server's objects on both paths, priced at the prices
    each path charges: the same rows, fairness, blocked demand and reclaim candidates, and the same
    words for the pod Kueue holds back."""
    setup = service.queue_setup()
    raw = build_report(analysis, queues=setup)
    history = build_history_report(read, queues=setup)
    assert raw["kueue"] == history["kueue"] == {"installed": True}
    for section, keys in (
        ("queues", ("namespace", "queue")),
        ("fairness", ("team",)),
        ("blocked_vs_idle", ("pool",)),
        ("reclaim_candidates", ("namespace", "pod")),
    ):
        got, expected = _rows(history, section, *keys), _rows(raw, section, *keys)
        assert got.keys() == expected.keys() and expected, section
        for key, row in expected.items():
            _same_row(got[key], row, rel=REL)
    assert any(q["borrowed_gpu_hours"] > 0 for q in raw["queues"])
    quota = [(p["pod"], p["reason"]) for p in history["pending"] if p["blocked_by"] == "quota"]
    assert quota == [(p["pod"], p["reason"]) for p in raw["pending"] if p["blocked_by"] == "quota"]
    assert quota and "insufficient unused quota" in quota[0][1]


def test_queue_usage_outlives_deleted_workloads(
    service: FleetService, analysis: Analysis, read: History
) -> None:
    """Kueue deletes a Workload with its Job. The history path reads each queue's quota, use, borrowing and
    lending from the gpuwatch_queue_* series the exporter published: a window whose finished Workloads
    are gone reads as it did with them, where the raw path, which has only Kueue's objects, loses them."""
    setup = service.queue_setup()
    finished = setup.workloads["finished_at"].notna()
    assert finished.any()
    gone = replace(setup, workloads=setup.workloads[~finished])
    assert len(read.queue_usage)
    keys = ("namespace", "queue")
    kept = _rows(build_history_report(read, queues=setup), "queues", *keys)
    deleted = _rows(build_history_report(read, queues=gone), "queues", *keys)
    raw = _rows(build_report(analysis, queues=gone), "queues", *keys)
    columns = ("used_gpu_hours", "borrowed_gpu_hours", "lent_gpu_hours", "reserved_unused_usd")
    assert deleted.keys() == kept.keys() == raw.keys()
    for key, row in kept.items():
        assert {c: deleted[key][c] for c in columns} == {c: row[c] for c in columns}, key
    used = sum(r["used_gpu_hours"] for r in kept.values())
    assert used > 0
    assert sum(r["used_gpu_hours"] for r in raw.values()) < used - 1.0
