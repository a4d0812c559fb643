"""The report of SPEC §4.2: valid against its JSON Schema, and the same numbers in every format."""

import io
import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import jsonschema
import pandas as pd
import pytest

from gpuwatch.config import Settings
from gpuwatch.model import LEDGER_STATES
from gpuwatch.report import build_report, json_schema, render
from gpuwatch.service import FleetService
from gpuwatch.sources.simulated import build_demo_fleet


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    fleet = build_demo_fleet(seed=42, end=datetime(2026, 11, 20, tzinfo=UTC), days=1)
    service = FleetService.demo(Settings(), fleet)
    return build_report(service.analysis(fleet.window))


def test_demo_report_from_the_cli_validates_against_the_schema() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "report", "--demo", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    jsonschema.validate(document, json_schema())
    assert document["schema_version"] == 2
    assert len(document["teams"]) >= 12


def test_schema_rejects_what_the_contract_forbids(report: dict[str, Any]) -> None:
    bad = json.loads(json.dumps(report))
    bad["fleet"]["efficiency"] = 1.5
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, json_schema())
    bad = json.loads(json.dumps(report))
    del bad["coverage"]["util_source"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, json_schema())


def test_ledger_sums_to_capacity_and_money_follows_prices(report: dict[str, Any]) -> None:
    fleet = report["fleet"]
    ledger = fleet["ledger_gpu_hours"]
    assert sum(ledger[s] for s in LEDGER_STATES) == pytest.approx(fleet["capacity_gpu_hours"])
    assert fleet["capacity_gpu_hours"] == pytest.approx(80 * 24)
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
    # The stuck platform pods hold H100s at 0 %: idle past the first half hour, priced at $4/GPU-hour.
    platform = next(t for t in report["teams"] if t["team"] == "platform")
    assert platform["waste_usd"] == pytest.approx(platform["idle_gpu_hours"] * 4.0)
    assert platform["efficiency"] == 0.0
    assert not any(
        "unknown product" in w for w in report["coverage"]["warnings"]
    )  # the demo prices all pools
    assert {p["blocked_by"] for p in report["pending"]} <= {"fragmentation", "capacity"}


DECIMALS = {"_gpu_hours": 3, "usd_per_gpu_hour": 4, "_usd": 2}


def _decimals(column: str) -> int | None:
    if column in ("efficiency", "allocation_rate", "utilization", "fragmentation_ratio"):
        return 4
    if column in ("gpus", "largest_free_block"):
        return 3
    return next((d for suffix, d in DECIMALS.items() if column.endswith(suffix)), None)


@pytest.mark.parametrize("group_by", ["team", "namespace", "workload", "pool"])
def test_csv_and_parquet_are_showback_rows_of_the_json(report: dict[str, Any], group_by: str) -> None:
    key = {"team": "teams", "namespace": "namespaces", "workload": "workloads", "pool": "pools"}[group_by]
    expected = pd.DataFrame(report[key])
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
            assert from_csv[column].astype(float).tolist() == pytest.approx(want, nan_ok=True, abs=1e-12)
            assert from_parquet[column].tolist() == pytest.approx(want, nan_ok=True, abs=1e-12)
        elif column not in ("idle_since", "usd_per_gpu_hour"):
            assert from_csv[column].astype(str).tolist() == expected[column].astype(str).tolist()
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
    from gpuwatch.errors import ConfigError

    with pytest.raises(ConfigError, match="--format must be one of"):
        render(report, "xml")
    with pytest.raises(ConfigError, match="--group-by must be one of"):
        render(report, "csv", group_by="node")
