"""The report of SPEC §4.2: valid against its JSON Schema, and the same numbers in every format."""

import io
import json
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import jsonschema
import pandas as pd
import pytest

from gpuwatch.core.config import Settings
from gpuwatch.core.model import LEDGER_STATES, PriceBook, Window
from gpuwatch.read.analysis import Analysis, usage_tables
from gpuwatch.read.service import FleetService
from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.demo import (
    DEMO_COMMITMENT,
    DEMO_COMMITMENT_BEFORE_END,
    DEMO_PRICE_CHANGE,
    DEMO_PRICE_CHANGE_BEFORE_END,
    DEMO_PRICES_USD_PER_GPU_HOUR,
)
from gpuwatch.sim.demoservice import SimulatedSources, demo_service
from gpuwatch.surfaces.renderings import render
from gpuwatch.surfaces.report import build_report, group_rows, json_schema
from gpuwatch.views.base import Scope
from gpuwatch.views.raw import filter_analysis


@pytest.fixture(scope="module")
def analysis() -> Analysis:
    fleet = build_demo_fleet(seed=42, end=datetime(2026, 11, 20, tzinfo=UTC), days=1)
    return demo_service(Settings(), fleet).analysis(fleet.window)


@pytest.fixture(scope="module")
def report(analysis: Analysis) -> dict[str, Any]:
    return build_report(analysis)


def test_schema_rejects_what_the_contract_forbids(report: dict[str, Any]) -> None:
    bad = json.loads(json.dumps(report))
    bad["fleet"]["efficiency"] = 1.5
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, json_schema())
    bad = json.loads(json.dumps(report))
    del bad["coverage"]["util_source"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, json_schema())


def test_ledger_sums_to_capacity_and_money_follows_prices(report: dict[str, Any], analysis: Analysis) -> None:
    fleet = report["fleet"]
    ledger = fleet["ledger_gpu_hours"]
    assert sum(ledger[s] for s in LEDGER_STATES) == pytest.approx(fleet["capacity_gpu_hours"])
    assert fleet["capacity_gpu_hours"] == pytest.approx(96 * 24)  # 80 NVIDIA GPUs and 16 AMD MI300X
    assert fleet["allocated_gpu_hours"] == pytest.approx(
        ledger["allocated_unknown"] + ledger["allocated_idle"] + ledger["allocated_active"]
    )
    assert sum(t["allocated_gpu_hours"] for t in report["teams"]) == pytest.approx(
        fleet["allocated_gpu_hours"]
    )
    assert sum(t["waste_usd"] for t in report["teams"]) == pytest.approx(fleet["waste_usd"])
    assert sum(t["cost_usd"] for t in report["teams"]) == pytest.approx(fleet["cost_usd"])
    wastes = [t["waste_usd"] for t in report["teams"]]
    assert wastes == sorted(wastes, reverse=True)
    # The stuck platform pods hold H100s at 0 %: idle past the first half hour, priced at $4/GPU-hour on
    # demand, and at (24 × $3.00 + 8 × $4.00) / 32 once 24 of the 32 H100s are reserved (the last 12 h).
    platform = next(t for t in report["teams"] if t["team"] == "platform")
    marked = analysis.marked
    idle = marked[(marked["team"] == "platform") & marked["idle"]]
    assert set(idle["pool"]) == {DEMO_COMMITMENT[0]}
    reserved = idle["timestamp"] >= pd.Timestamp(analysis.window.end - DEMO_COMMITMENT_BEFORE_END)
    hours = analysis.window.step_hours
    before, after = (float(idle.loc[m, "ge_share"].sum()) * hours for m in (~reserved, reserved))
    assert before > 1 and after > 1
    assert platform["idle_gpu_hours"] == pytest.approx(before + after)
    assert platform["waste_usd"] == pytest.approx(before * 4.0 + after * (24 * 3.0 + 8 * 4.0) / 32)
    assert platform["efficiency"] == 0.0
    assert not any(
        "unknown product" in w for w in report["coverage"]["warnings"]
    )  # the demo prices all pools
    # Every reason a GPU pod waits, once each at least (the fragmentation one needs the demo's holes).
    assert {p["blocked_by"] for p in report["pending"]} >= {
        "affinity",
        "taint",
        "mig_profile",
        "quota",
        "capacity",
    }


def test_right_sizing_prices_a_committed_pool_as_its_gpu_hours_cost(analysis: Analysis) -> None:
    """At the window's end 24 of the 32 H100s are reserved at $3 (on demand $4): a change within the pool
    saves GPU-hours worth (24 × $3 + 8 × $4) / 32 = $3.25 each, as the ledger prices them, not $4."""
    workloads = usage_tables(analysis)["workload"]
    changed = workloads[
        (workloads["pool"] == DEMO_COMMITMENT[0])
        & workloads["recommendation_kind"].isin(["gpus", "mig", "time_slice"])
    ]
    assert len(changed) >= 1
    window_hours = analysis.window.duration_seconds / 3600
    held = (changed["allocated_gpu_hours"] / changed["gpus"] / window_hours).clip(upper=1.0)
    blended = (24 * 3.0 + 8 * 4.0) / 32
    expected = (changed["gpus"] - changed["target_ge"]) * blended * held * 730
    assert changed["monthly_savings_usd"].tolist() == pytest.approx(expected.tolist())


DECIMALS = {"_gpu_hours": 3, "_kwh": 3, "usd_per_gpu_hour": 4, "_usd": 2}


def _decimals(column: str) -> int | None:
    if column in ("efficiency", "allocation_rate", "utilization", "fragmentation_ratio"):
        return 4
    if column in ("gpus", "largest_free_block"):
        return 3
    return next((d for suffix, d in DECIMALS.items() if column.endswith(suffix)), None)


@pytest.mark.parametrize("group_by", ["team", "namespace", "workload", "pool"])
def test_csv_and_parquet_are_showback_rows_of_the_json(report: dict[str, Any], group_by: str) -> None:
    expected = pd.DataFrame(group_rows(report, group_by))  # a workload's recommendation as columns
    if group_by == "workload":
        first = next(r for r in report["workloads"] if r["recommendation"])
        flat = expected.iloc[0]
        assert flat["recommendation_kind"] == first["recommendation"]["kind"]
        assert flat["monthly_savings_usd"] == first["recommendation"]["monthly_savings_usd"]
    text = render(report, "csv", group_by=group_by).decode()
    # Numbers as people read them: no float noise such as 47.99999999999856.
    assert not re.search(r"\d\.\d{5,}", text)
    from_csv = pd.read_csv(io.StringIO(text), keep_default_na=False)
    from_parquet = pd.read_parquet(io.BytesIO(render(report, "parquet", group_by=group_by)))
    assert len(from_csv) == len(expected) == len(from_parquet) > 0
    assert list(from_csv.columns[:2]) == ["window_start", "window_end"]
    assert list(from_csv.columns[-2:]) == ["usd_per_gpu_hour", "currency"]
    assert list(from_csv.columns) == list(from_parquet.columns)
    assert set(from_csv["window_start"]) == {report["window"]["start"]}
    assert set(from_csv["window_end"]) == {report["window"]["end"]}
    assert set(from_csv["currency"]) == {"USD"}
    for column in expected.columns:
        decimals = _decimals(column)
        if pd.api.types.is_float_dtype(expected[column]) and decimals is not None:
            want = expected[column].round(decimals).tolist()
            read = from_csv[column].replace("", "nan").astype(float)  # unknown: an empty CSV cell
            assert read.tolist() == pytest.approx(want, nan_ok=True, abs=1e-12)
            assert from_parquet[column].tolist() == pytest.approx(want, nan_ok=True, abs=1e-12)
        elif column not in ("idle_since", "usd_per_gpu_hour"):
            # None (no recommendation's target) is an empty cell.
            assert from_csv[column].astype(str).tolist() == expected[column].fillna("").astype(str).tolist()
    prices = {p["pool"]: p["usd_per_gpu_hour"] for p in report["pools"]}
    if group_by in ("pool", "workload"):
        assert from_csv["usd_per_gpu_hour"].tolist() == [prices[p] for p in from_csv["pool"]]
    else:  # teams and namespaces span pools: the effective rate they were charged
        rate = (expected["cost_usd"] / expected["allocated_gpu_hours"]).round(4)
        assert from_csv["usd_per_gpu_hour"].tolist() == pytest.approx(rate.tolist(), abs=1e-12)


def test_table_and_html_show_the_same_numbers(report: dict[str, Any]) -> None:
    table = render(report, "table").decode()
    html = render(report, "html").decode()
    fleet = report["fleet"]
    for state in LEDGER_STATES:
        number = f"{fleet['ledger_gpu_hours'][state]:,.2f}"
        assert number in table and number in html
    for text in (f"${fleet['waste_usd']:,.2f}", f"${fleet['cost_usd']:,.2f}"):
        assert text in table and text in html
    top = report["teams"][0]
    assert top["team"] in table and f"${top['waste_usd']:,.2f}" in html
    assert html.startswith("<!DOCTYPE html>") and "plotly" in html and "<script src=" not in html


def test_unknown_format_and_grouping_are_one_line_errors(report: dict[str, Any]) -> None:
    from gpuwatch.core.errors import ConfigError

    with pytest.raises(ConfigError, match="--format must be one of"):
        render(report, "xml")
    with pytest.raises(ConfigError, match="--group-by must be one of"):
        render(report, "csv", group_by="node")


def test_the_demo_prices_each_a100_hour_at_the_rate_in_force_when_it_ran() -> None:
    end = datetime(2026, 11, 20, tzinfo=UTC)
    fleet = build_demo_fleet(seed=42, end=end, days=16, step_seconds=600)
    dated = demo_service(Settings(), fleet)
    # The same book with the A100 at its old price all along (the H100 commitment kept).
    book = replace(dated.settings.pricing, products=DEMO_PRICES_USD_PER_GPU_HOUR)
    flat = demo_service(Settings(pricing=book), fleet)
    change = end - DEMO_PRICE_CHANGE_BEFORE_END
    a100, new_price = DEMO_PRICE_CHANGE

    def report_of(service: FleetService, start: datetime, stop: datetime) -> dict[str, Any]:
        return build_report(service.analysis(Window(start=start, end=stop, step_seconds=600)))

    start = end - timedelta(days=16)
    before, after = report_of(dated, start, change), report_of(dated, change, end)
    whole = report_of(dated, start, end)
    # Every GPU-hour at the rate in force at its sample: the window is the sum of its two sides ...
    assert whole["fleet"]["cost_usd"] == pytest.approx(
        before["fleet"]["cost_usd"] + after["fleet"]["cost_usd"]
    )
    # ... the old price before the change, the new one after it.
    assert before["fleet"]["cost_usd"] == pytest.approx(report_of(flat, start, change)["fleet"]["cost_usd"])
    flat_after = report_of(flat, change, end)
    a100_hours = sum(w["allocated_gpu_hours"] for w in flat_after["workloads"] if w["pool"] == a100)
    old_price = DEMO_PRICES_USD_PER_GPU_HOUR[a100]
    assert a100_hours > 100
    assert after["fleet"]["cost_usd"] == pytest.approx(
        flat_after["fleet"]["cost_usd"] - a100_hours * (old_price - new_price)
    )
    assert {p["pool"]: p["usd_per_gpu_hour"] for p in whole["pools"]}[a100] == new_price  # at the end
    # The Capacity page's stranded dollars: each stranded GPU-hour at the price of its sample, too.
    stranded = {p["pool"]: p["stranded_cost_usd"] for p in whole["pools"]}
    flat_stranded = {p["pool"]: p["stranded_cost_usd"] for p in report_of(flat, start, end)["pools"]}
    nodes = dated.analysis(Window(start=start, end=end, step_seconds=600)).by_node
    late = nodes[(nodes["pool"] == a100) & (nodes["timestamp"] >= pd.Timestamp(change))]
    late_hours = float(late["stranded_ge"].sum()) * 600 / 3600
    assert late_hours > 1
    assert stranded[a100] == pytest.approx(flat_stranded[a100] - late_hours * (old_price - new_price))
    assert sum(stranded.values()) == pytest.approx(whole["fleet"]["stranded_cost_usd"])


def test_teams_carry_their_budget_and_the_months_forecast(report: dict[str, Any]) -> None:
    teams = {t["team"]: t for t in report["teams"]}
    # The demo's budgets; a day's spend straight on over November's 720 hours.
    assert teams["platform"]["budget_usd"] == 3_000.0
    assert teams["platform"]["forecast_month_usd"] == pytest.approx(teams["platform"]["cost_usd"] * 720 / 24)
    assert teams["platform"]["forecast_month_usd"] > 0
    assert teams["batch-jobs"]["budget_usd"] is None
    table = render(report, "table", group_by="team").decode()
    assert "budget_usd" in table and "forecast_month_usd" in table
    assert f"${teams['platform']['forecast_month_usd']:,.2f}" in table
    page = render(report, "html", group_by="team").decode()
    assert f"${teams['platform']['forecast_month_usd']:,.2f}" in page


def test_energy_is_each_gpus_draw_once_across_a_counter_reset_and_split_by_holders() -> None:
    fleet = build_demo_fleet(seed=42, end=datetime(2026, 11, 20, tzinfo=UTC), days=1)
    report = build_report(demo_service(Settings(), fleet).analysis(fleet.window))
    telemetry = fleet.telemetry()
    # The first H100 node's driver reloads half way: its counters restart from 0 ...
    reset = telemetry[telemetry["node"] == "gpu-h100-000"].sort_values("timestamp")
    assert (reset.groupby("uuid")["energy_joules"].diff() < 0).any()
    # ... yet every GPU's energy is its draw, counted once per physical GPU (MIG instances repeat it):
    # the counter's increase each minute, and power × 60 s at the first sample (no increase yet).
    power = telemetry.drop_duplicates(["timestamp", "uuid"]).groupby("uuid")["power_watts"]
    drawn_kwh = float((power.sum() * 60).sum()) / 3.6e6
    fleet_energy = report["fleet"]
    assert fleet_energy["energy_kwh"] == pytest.approx(drawn_kwh, rel=1e-5)  # the counter counts whole joules
    # Held energy by team and the energy nobody held add up to the GPUs' own energy.
    held = sum(t["energy_kwh"] for t in report["teams"])
    assert held + fleet_energy["unallocated_energy_kwh"] == pytest.approx(fleet_energy["energy_kwh"])
    assert sum(n["energy_kwh"] for n in report["namespaces"]) == pytest.approx(held)
    assert sum(w["energy_kwh"] for w in report["workloads"]) == pytest.approx(held)
    # The demo's tariff: 12 cents per kWh, PUE 1.3.
    assert fleet_energy["energy_cost_usd"] == pytest.approx(fleet_energy["energy_kwh"] * 1.3 * 0.12)
    for team in report["teams"]:
        assert team["energy_cost_usd"] == pytest.approx(team["energy_kwh"] * 1.3 * 0.12)


def test_energy_without_a_tariff_is_measured_but_not_priced() -> None:
    fleet = build_demo_fleet(seed=42, end=datetime(2026, 11, 20, tzinfo=UTC), days=0.1)
    settings = Settings(pricing=PriceBook(products=DEMO_PRICES_USD_PER_GPU_HOUR))  # no pricing.energy
    service = FleetService(settings=settings, sources=SimulatedSources(fleet))
    report = build_report(service.analysis(fleet.window))
    assert report["fleet"]["energy_kwh"] > 0
    assert report["fleet"]["energy_cost_usd"] is None  # unknown, never 0
    assert all(t["energy_cost_usd"] is None and t["energy_kwh"] > 0 for t in report["teams"])


def test_the_demo_has_a_workload_for_every_recommendation_kind(report: dict[str, Any]) -> None:
    kinds = {w["recommendation"]["kind"] for w in report["workloads"] if w["recommendation"]}
    assert kinds == {"gpus", "mig", "time_slice", "product", "keep", "unknown"}
    unknown = [w["recommendation"] for w in report["workloads"] if w["recommendation"]["kind"] == "unknown"]
    assert all(r["monthly_savings_usd"] is None and r["target"] is None and r["reason"] for r in unknown)
    savings = sum(w["recommendation"]["monthly_savings_usd"] or 0.0 for w in report["workloads"])
    rightsizing = report["rightsizing"]
    assert rightsizing["monthly_savings_usd"] == pytest.approx(savings) and savings > 0
    assert rightsizing["gpus_freed"] == sum(p["gpus_freed"] for p in rightsizing["pools"])
    assert all(p["gpus_before"] - p["gpus_after"] == p["gpus_freed"] for p in rightsizing["pools"])


def test_a_team_filter_keeps_that_teams_energy_alone() -> None:
    fleet = build_demo_fleet(seed=42, end=datetime(2026, 11, 20, tzinfo=UTC), days=0.25)
    analysis = demo_service(Settings(), fleet).analysis(fleet.window)
    whole = build_report(analysis)
    team = next(t for t in whole["teams"] if t["energy_kwh"])
    scoped = build_report(filter_analysis(analysis, Scope(teams=(team["team"],))))
    assert scoped["fleet"]["energy_kwh"] == pytest.approx(team["energy_kwh"])
    assert scoped["fleet"]["unallocated_energy_kwh"] == 0.0  # free GPUs belong to no team
    assert [t["energy_kwh"] for t in scoped["teams"]] == [pytest.approx(team["energy_kwh"])]


def test_a_fleet_without_power_readings_reports_its_energy_unknown(analysis: Analysis) -> None:
    # No DCGM energy counter or power at all: every energy number is null (unknown), never 0, and the
    # report still validates (its energy fields are required).
    report = build_report(replace(analysis, energy=None))
    jsonschema.validate(report, json_schema())
    assert report["fleet"]["energy_kwh"] is None and report["fleet"]["energy_cost_usd"] is None
    for section in ("teams", "namespaces", "workloads"):
        assert report[section] and all(r["energy_kwh"] is None for r in report[section]), section
        assert all(r["energy_cost_usd"] is None for r in report[section]), section
