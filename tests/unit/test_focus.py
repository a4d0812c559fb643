"""FOCUS rows by hand: charges per period × workload or fleet state, their prices, and the FOCUS columns."""

import io
import json
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest

from gpuwatch.analytics.charges import charges
from gpuwatch.analytics.cost import PoolRates
from gpuwatch.core.config import FocusSettings
from gpuwatch.core.model import LEDGER_STATES, Commitment, DatedPrice, PriceBook, Window
from gpuwatch.read.chargeback import period_cuts, raw_charges
from gpuwatch.sim.demo import demo_end
from gpuwatch.sim.demoservice import demo_service
from gpuwatch.surfaces.focus import COLUMNS, focus_rows, render_focus
from gpuwatch.surfaces.report import build_report

A100 = "NVIDIA-A100-SXM4-80GB"
# Two half-hour samples on the last day of November, two on the first of December.
T = [
    pd.Timestamp(s, tz="UTC")
    for s in ("2026-11-30 23:00", "2026-11-30 23:30", "2026-12-01 00:00", "2026-12-01 00:30")
]
MIDNIGHT = T[2].to_pydatetime()
STEP = 1800.0
# $2 a GPU-hour until midnight, $3 after; from midnight one of the node's two GPUs is committed at $1.5.
BOOK = PriceBook(
    products={
        A100: (
            DatedPrice(start=datetime(2026, 1, 1, tzinfo=MIDNIGHT.tzinfo), usd_per_gpu_hour=2.0),
            DatedPrice(start=MIDNIGHT, usd_per_gpu_hour=3.0),
        )
    },
    commitments={
        A100: (Commitment(start=MIDNIGHT, end=MIDNIGHT + timedelta(days=30), gpus=1, usd_per_gpu_hour=1.5),)
    },
)


def marked() -> pd.DataFrame:
    """Pod p1 of team t1 holds one of the node's two GPUs: busy, idle, without telemetry, busy."""
    return pd.DataFrame(
        {
            "timestamp": T,
            "namespace": "ns",
            "pod": "p1",
            "team": "t1",
            "node": "n1",
            "pool": A100,
            "uuid": "GPU-1",
            "gpu_instance_id": "",
            "ge_share": 1.0,
            "util_ratio": [0.9, 0.01, np.nan, 0.5],
            "idle": [False, True, False, False],
            "low_util_since": pd.Series([pd.NaT] * 4, dtype="datetime64[ns, UTC]"),
        }
    )


def by_node() -> pd.DataFrame:
    """The node's other GPU is unallocated at every sample."""
    states = {f"{s}_ge": 0.0 for s in LEDGER_STATES}
    frame = pd.DataFrame({"timestamp": T, "node": "n1", "pool": A100, **states})
    frame["unallocated_ge"] = 1.0
    frame["allocated_active_ge"] = [1.0, 0.0, 0.0, 1.0]
    frame["allocated_idle_ge"] = [0.0, 1.0, 0.0, 0.0]
    frame["allocated_unknown_ge"] = [0.0, 0.0, 1.0, 0.0]
    return frame


def energy() -> pd.DataFrame:
    """1 kWh the pod drew before midnight ($0.20), and 2 kWh of unheld GPU energy after it, unpriced."""
    return pd.DataFrame(
        {
            "timestamp": [T[0], T[2]],
            "namespace": ["ns", ""],
            "pod": ["p1", ""],
            "team": ["t1", ""],
            "node": "n1",
            "pool": A100,
            "uuid": "GPU-1",
            "ge_share": 1.0,
            "energy_joules": [3.6e6, 7.2e6],
            "energy_cost_usd": [0.2, np.nan],
        }
    )


def hand_charges(period_seconds: int = 86_400) -> pd.DataFrame:
    return charges(
        marked=marked(),
        by_node=by_node(),
        clusters=pd.Series({"n1": "east"}),
        rates=PoolRates.of(BOOK, by_node()),
        step_seconds=STEP,
        period_seconds=period_seconds,
        energy=energy(),
    )


def test_charges_split_by_day_state_and_price_by_hand() -> None:
    got = hand_charges().set_index(["period_start", "state", "pod"])
    nov, dec = T[0].normalize(), T[2]
    # Before midnight every GPU-hour is $2. After it, two GPUs are present and one is committed: each
    # costs (1.5 + 3) / 2 = $2.25 as the report prices it, $3 on demand.
    expected = {
        (nov, "allocated_active", "p1"): (0.5, 1.0, 1.0),
        (nov, "allocated_idle", "p1"): (0.5, 1.0, 1.0),
        (nov, "unallocated", ""): (1.0, 2.0, 2.0),
        (nov, "energy", "p1"): (1.0, 0.2, 0.2),
        (dec, "allocated_unknown", "p1"): (0.5, 1.125, 1.5),
        (dec, "allocated_active", "p1"): (0.5, 1.125, 1.5),
        (dec, "unallocated", ""): (1.0, 2.25, 3.0),
        (dec, "energy", ""): (2.0, np.nan, np.nan),
    }
    assert set(got.index) == set(expected)
    for key, (hours, effective, listed) in expected.items():
        row = got.xs(key)
        assert (row["gpu_hours"], row["effective_usd"], row["list_usd"]) == pytest.approx(
            (hours, effective, listed), nan_ok=True
        ), key
    assert set(got["cluster"]) == {"east"}
    assert (got["period_end"] - got.index.get_level_values("period_start") == pd.Timedelta(days=1)).all()
    assert set(got.xs((nov, "unallocated", ""))[["team", "namespace"]]) == {""}


def test_hourly_periods_add_up_to_the_daily_ones() -> None:
    daily = hand_charges().groupby("state")[["gpu_hours", "effective_usd", "list_usd"]].sum()
    hourly = hand_charges(3600)
    assert sorted(set(hourly["period_start"])) == [T[0], T[2]]  # 23:00 and 00:00
    pd.testing.assert_frame_equal(hourly.groupby("state")[list(daily.columns)].sum(), daily)


def test_period_cuts_are_the_bounds_inside_the_window() -> None:
    window = Window(start=T[0].to_pydatetime(), end=(T[3] + timedelta(hours=49)).to_pydatetime())
    assert period_cuts(window, 86_400) == [
        MIDNIGHT,
        MIDNIGHT + timedelta(days=1),
        MIDNIGHT + timedelta(days=2),
    ]
    assert len(period_cuts(window, 3600)) == 50
    assert period_cuts(Window(start=MIDNIGHT, end=MIDNIGHT + timedelta(days=1)), 86_400) == []


def test_focus_columns_of_the_hand_charges() -> None:
    window = Window(
        start=T[0].to_pydatetime(), end=(T[3] + timedelta(minutes=30)).to_pydatetime(), step_seconds=1800
    )
    rows, warnings = focus_rows(hand_charges(), window=window, names=FocusSettings())
    assert warnings == ["1 energy charges of unknown kWh or price left out of the FOCUS rows"]
    assert tuple(rows.columns) == COLUMNS
    assert len(rows) == 7
    idle = rows[rows["ChargeDescription"].str.contains("idle")].iloc[0]
    # Charge periods are clipped to the window; billing periods are the calendar month of the charge.
    assert idle["ChargePeriodStart"] == T[0] and idle["ChargePeriodEnd"] == T[2]
    assert idle["BillingPeriodStart"] == pd.Timestamp("2026-11-01", tz="UTC")
    assert idle["BillingPeriodEnd"] == pd.Timestamp("2026-12-01", tz="UTC")
    assert (idle["PricingQuantity"], idle["ConsumedQuantity"], idle["PricingUnit"]) == (0.5, 0.5, "GPU-Hours")
    assert (idle["EffectiveCost"], idle["BilledCost"], idle["ListCost"], idle["ListUnitPrice"]) == (
        1,
        1,
        1,
        2,
    )
    assert (idle["ResourceId"], idle["ResourceName"], idle["SubAccountId"], idle["SkuId"]) == (
        "east/ns/p1",
        "p1",
        "east",
        A100,
    )
    assert json.loads(idle["Tags"]) == {
        "gpuwatch/team": "t1",
        "gpuwatch/namespace": "ns",
        "gpuwatch/workload": "p1",
        "gpuwatch/pool": A100,
        "gpuwatch/cluster": "east",
        "gpuwatch/state": "allocated_idle",
    }
    unknown = rows[rows["ChargeDescription"].str.contains("unknown")].iloc[0]
    assert unknown["ChargePeriodEnd"] == window.end and unknown["BillingPeriodStart"] == pd.Timestamp(
        "2026-12-01", tz="UTC"
    )
    assert (unknown["EffectiveCost"], unknown["ContractedUnitPrice"], unknown["ListUnitPrice"]) == (
        1.125,
        2.25,
        3.0,
    )
    free = rows[rows["ChargeDescription"].str.startswith("GPU-hours unallocated")]
    assert list(free["ResourceId"]) == [f"east/{A100}"] * 2 and list(free["ResourceType"]) == ["GPU pool"] * 2
    assert "gpuwatch/team" not in json.loads(free.iloc[0]["Tags"])
    power = rows[rows["PricingUnit"] == "kWh"].iloc[0]
    assert (power["PricingQuantity"], power["EffectiveCost"], power["SkuId"]) == (1.0, 0.2, f"energy/{A100}")
    assert "gpuwatch/state" not in json.loads(power["Tags"])  # energy is no ledger state
    # A third party invoicing the charges: FOCUS has them billed at 0 by the provider.
    other = replace(FocusSettings(), invoice_issuer_name="Reseller")
    resold, _ = focus_rows(hand_charges(), window=window, names=other)
    assert (resold["BilledCost"] == 0).all() and resold["EffectiveCost"].sum() == rows["EffectiveCost"].sum()


def test_csv_and_parquet_carry_the_same_rows() -> None:
    window = Window(
        start=T[0].to_pydatetime(), end=(T[3] + timedelta(minutes=30)).to_pydatetime(), step_seconds=1800
    )
    rows, _ = focus_rows(hand_charges(), window=window, names=FocusSettings())
    csv = pd.read_csv(io.BytesIO(render_focus(rows, "csv")))
    assert list(csv["ChargePeriodStart"])[:1] == ["2026-11-30T23:00:00Z"]
    assert csv["EffectiveCost"].sum() == pytest.approx(rows["EffectiveCost"].sum())
    assert csv["InvoiceId"].isna().all() and csv["ChargeClass"].isna().all()
    parquet = pd.read_parquet(io.BytesIO(render_focus(rows, "parquet")))
    pd.testing.assert_frame_equal(parquet, rows)


@pytest.fixture(scope="module")
def demo_day() -> tuple[dict[str, Any], pd.DataFrame]:
    """The demo's last day on the raw path: its report and its charges per hour."""
    end = demo_end()
    window = Window(start=end - timedelta(days=1), end=end)
    service = demo_service(history_days=2)
    analysis = service.analysis(window)
    return build_report(analysis), raw_charges(analysis, period_seconds=3600)


def test_demo_rows_add_up_to_the_report(demo_day: tuple[dict[str, Any], pd.DataFrame]) -> None:
    report, hourly = demo_day
    fleet = report["fleet"]
    usd = hourly.groupby("state")["effective_usd"].sum()
    assert usd[["allocated_active", "allocated_idle", "allocated_unknown"]].sum() == pytest.approx(
        fleet["cost_usd"]
    )
    assert usd["allocated_idle"] == pytest.approx(fleet["waste_usd"])
    for state in ("unallocated", "stranded", "unavailable"):
        assert usd[state] == pytest.approx(fleet[f"{state}_cost_usd"]), state
    assert usd.drop("energy").sum() == pytest.approx(fleet["capacity_cost_usd"])
    assert usd["energy"] == pytest.approx(fleet["energy_cost_usd"])
    held = hourly[hourly["state"].str.startswith("allocated")].groupby("team")["effective_usd"].sum()
    assert {t["team"]: pytest.approx(t["cost_usd"]) for t in report["teams"]} == held.to_dict()
    hours = hourly.groupby("state")["gpu_hours"].sum()
    for state, value in fleet["ledger_gpu_hours"].items():
        assert hours.get(state, 0.0) == pytest.approx(value), state
    assert len(set(hourly["period_start"])) == 24
    # The demo's H100 commitment began 12 hours before its end: list and effective prices part there.
    h100 = hourly[hourly["pool"].str.contains("H100") & (hourly["state"] != "energy")]
    late = h100["period_start"] >= pd.Timestamp(demo_end() - timedelta(hours=12))
    assert (h100.loc[late, "effective_usd"] < h100.loc[late, "list_usd"] - 1e-9).all()
    assert np.allclose(h100.loc[~late, "effective_usd"], h100.loc[~late, "list_usd"])
