"""`gpuwatch report --format focus` on the demo fleet: the FinOps Foundation's focus-validator passes its rows
(tests/integration/focus_check.py says which rule of its model no file can pass), and the rows add up to
`report --format json` for the same window. The history path's rows: test_history_path.py."""

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.integration.focus_check import assert_adds_up, assert_conforms, state_of, validate

pytestmark = pytest.mark.integration


def _gpuwatch(*commands: tuple[str, ...]) -> None:
    """gpuwatch `commands` side by side (each builds the demo on its own); each must succeed."""
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "gpuwatch", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in commands
    ]
    for args, run in zip(commands, runs, strict=True):
        _, stderr = run.communicate(timeout=600)
        assert run.returncode == 0, f"gpuwatch {' '.join(args)}: {stderr}"


def _end() -> str:
    """An hour the demo holds and no midnight (the current hour, or the one before it at 00:00 UTC), named
    explicitly: both runs read the same window even when the hour turns between them."""
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    end -= timedelta(hours=1) if end.hour == 0 else timedelta(0)
    return end.strftime("%Y-%m-%dT%H:%M:%SZ")


def _report(tmp_path: Path, *window: str) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The window's FOCUS rows (CSV) and report JSON from the CLI."""
    window = (*window, "--end", _end())
    rows, report = tmp_path / "focus.csv", tmp_path / "report.json"
    _gpuwatch(
        ("report", "--demo", *window, "--format", "focus", "-o", str(rows)),
        ("report", "--demo", *window, "--format", "json", "-o", str(report)),
    )
    return pd.read_csv(rows), json.loads(report.read_text())


def test_a_day_of_the_demo_passes_the_validator_and_adds_up(tmp_path: Path) -> None:
    rows, report = _report(tmp_path, "--since", "1d")
    # The default demo is two clusters, with no config: two sub-accounts, each with its own rows.
    assert [c["cluster"] for c in report["clusters"]] == ["eu-1", "us-1"]
    assert sorted(rows["SubAccountId"].unique()) == ["eu-1", "us-1"]
    assert_conforms(validate(tmp_path / "focus.csv", tmp_path))
    assert_adds_up(rows, report)
    window = report["window"]
    # The window's ends are no midnight: its two days are cut to it.
    assert (rows["ChargePeriodStart"].min(), rows["ChargePeriodEnd"].max()) == (
        window["start"],
        window["end"],
    )
    assert rows["ChargePeriodStart"].nunique() == 2
    assert {"allocated_active", "allocated_idle", "unallocated", "stranded", "unavailable", "energy"} <= set(
        state_of(rows)
    )


def test_a_month_with_a_price_change_and_a_commitment(tmp_path: Path) -> None:
    """The demo's 30 days hold the A100's price change (14 days before the end) and the H100 commitment
    (from 12 hours before it): list and effective prices part where the commitment covers GPUs. One
    cluster: the month's prices are the same in each (the two-cluster rows: the day's test above)."""
    rows, report = _report(tmp_path, "--since", "30d", "--demo-clusters", "1")
    assert_conforms(validate(tmp_path / "focus.csv", tmp_path))
    assert_adds_up(rows, report)
    start, end = (pd.Timestamp(report["window"][k]) for k in ("start", "end"))
    days = pd.date_range(start.floor("D"), end - pd.Timedelta(1), freq="D")
    assert rows["ChargePeriodStart"].nunique() == len(days) in (30, 31)  # calendar days the window touches
    a100 = rows[(rows["SkuId"] == "NVIDIA-A100-SXM4-80GB") & (rows["PricingQuantity"] > 0.01)]
    assert sorted(a100["ListUnitPrice"].round(6).unique())[:1] == [2.0] and a100["ListUnitPrice"].max() > 2.0
    h100 = rows[rows["SkuId"] == "NVIDIA-H100-80GB-HBM3"]
    assert (h100["EffectiveCost"] < h100["ListCost"] - 1e-9).any()


def test_hourly_rows_as_parquet(tmp_path: Path) -> None:
    out = tmp_path / "focus.parquet"
    _gpuwatch(
        ("report", "--demo", "--since", "6h", "--format", "focus", "--focus-period", "hour", "-o", str(out))
    )
    assert_conforms(validate(out, tmp_path))
    rows = pd.read_parquet(out)
    assert rows["ChargePeriodStart"].nunique() == 6
    assert ((rows["ChargePeriodEnd"] - rows["ChargePeriodStart"]) <= pd.Timedelta(hours=1)).all()
