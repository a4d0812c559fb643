"""Dollars of SPEC §3 by hand: price book × GE-hours, MIG and time-sliced shares, unknown products."""

import math

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from gpuwatch.analytics.cost import PoolRates, ledger_cost, price_warnings, usage_cost, usd_per_gpu_hour
from gpuwatch.core.model import Amortization, Commitment, DatedPrice, PriceBook
from gpuwatch.core.schema import IDLE_MARKED

T0 = pd.Timestamp("2026-11-20 00:00", tz="UTC")
H100, A100, T4, WEIRD = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "TESLA-T4", "WEIRD-GPU"
# Book keys are normalized like pools: "NVIDIA H100 80GB HBM3" prices the H100 pool.
BOOK = PriceBook(
    default_usd_per_gpu_hour=2.0,
    products={"NVIDIA H100 80GB HBM3": 4.0, "NVIDIA-A100-SXM4-80GB": 2.5, "Tesla-T4": 0.35},
)
WARNING = "unknown product WEIRD-GPU priced at default $2.00/GPU-hour"
EXACT = {"check_exact": False, "rtol": 1e-12, "atol": 1e-15}


def on_demand(book: PriceBook) -> PoolRates:
    """A book's rates where no commitment needs the GPUs present."""
    return PoolRates.of(book, by_node().iloc[0:0])


def test_price_per_pool_keeps_the_index() -> None:
    pools = pd.Series([H100, WEIRD, T4, A100], index=[10, 11, 12, 13], dtype="str")
    expected = pd.Series([4.0, 2.0, 0.35, 2.5], index=[10, 11, 12, 13], name="usd_per_gpu_hour")
    pd.testing.assert_series_equal(
        usd_per_gpu_hour(pools, on_demand(BOOK), pd.Series(T0, index=pools.index)), expected
    )
    assert price_warnings(pools, BOOK) == [WARNING]
    assert price_warnings(pd.Series(["", H100], dtype="str"), BOOK) == [
        "unknown product (none) priced at default $2.00/GPU-hour"
    ]


def by_node() -> pd.DataFrame:
    """A ledger (Ledger.by_node) at one hourly sample, so GE-hours = GE."""
    return pd.DataFrame(
        {
            "timestamp": pd.to_datetime([T0] * 4, utc=True),
            "node": pd.Series(["h", "a", "t", "w"], dtype="str"),
            "pool": pd.Series([H100, A100, T4, WEIRD], dtype="str"),
            "capacity_ge": [8.0, 1.0, 1.0, 2.0],
            "unavailable_ge": [1.0, 0.0, 0.0, 0.0],
            "stranded_ge": [1.5, 0.0, 0.0, 0.0],
            "unallocated_ge": [0.5, 2 / 7, 0.5, 0.0],
            "allocated_unknown_ge": [0.0, 0.0, 0.0, 1.0],  # no telemetry: allocated, priced, never waste
            "allocated_idle_ge": [1.0, 3 / 7, 0.25, 0.0],  # MIG 3g.40gb = 3/7 GE; a 1/4 T4 replica
            "allocated_active_ge": [4.0, 2 / 7, 0.25, 1.0],
            "overallocated_ge": [0.0, 0.0, 0.0, 0.0],
        }
    )


def test_ledger_cost_per_pool() -> None:
    costs, warnings = ledger_cost(by_node(), step_seconds=3600, rates=on_demand(BOOK))
    expected = pd.DataFrame(
        {
            "pool": pd.Series([A100, H100, T4, WEIRD], dtype="str"),
            # A100 $2.5: allocated 5/7, idle 3/7, unallocated 2/7. H100 $4: 5, 1, 0.5, stranded 1.5,
            # unavailable 1. T4 $0.35: 0.5, 0.25, 0.5. WEIRD at the $2 default: 2 (1 unknown), 0, 0.
            "cost_usd": [5 / 7 * 2.5, 20.0, 0.175, 4.0],
            "waste_usd": [3 / 7 * 2.5, 4.0, 0.0875, 0.0],
            "unallocated_cost_usd": [2 / 7 * 2.5, 2.0, 0.175, 0.0],
            "stranded_cost_usd": [0.0, 6.0, 0.0, 0.0],
            "unavailable_cost_usd": [0.0, 4.0, 0.0, 0.0],
        }
    )
    assert_frame_equal(costs, expected, **EXACT)
    assert warnings == [WARNING]


def test_ledger_cost_for_the_fleet_at_one_minute_steps() -> None:
    costs, _ = ledger_cost(by_node(), step_seconds=60, rates=on_demand(BOOK), by=())
    # Sum of the pools above, and a 60 s sample is 1/60 of an hour.
    assert costs.to_dict("records") == [
        {
            "cost_usd": pytest.approx((5 / 7 * 2.5 + 20 + 0.175 + 4) / 60),
            "waste_usd": pytest.approx((3 / 7 * 2.5 + 4 + 0.0875) / 60),
            "unallocated_cost_usd": pytest.approx((2 / 7 * 2.5 + 2 + 0.175) / 60),
            "stranded_cost_usd": pytest.approx(6 / 60),
            "unavailable_cost_usd": pytest.approx(4 / 60),
        }
    ]


def marked() -> pd.DataFrame:
    rows = [  # (sample, pod, team, pool, ge_share, util, idle)
        (0, "p", "x", H100, 1.0, 0.5, False),
        (1, "p", "x", H100, 1.0, 0.0, True),
        (0, "q", "x", A100, 3 / 7, 0.0, True),
        (0, "r", "y", T4, 0.25, 0.6, False),
        (0, "s", "y", WEIRD, 1.0, math.nan, True),  # idle-marked with no telemetry: unknown wins
    ]
    frame = pd.DataFrame(
        {
            "timestamp": pd.to_datetime([T0 + pd.Timedelta(hours=r[0]) for r in rows], utc=True),
            "namespace": "ml",
            "pod": [r[1] for r in rows],
            "team": [r[2] for r in rows],
            "node": "n",
            "pool": [r[3] for r in rows],
            "uuid": [f"GPU-{r[1]}" for r in rows],
            "gpu_instance_id": "",
            "ge_share": [r[4] for r in rows],
            "util_ratio": [r[5] for r in rows],
            "idle": [r[6] for r in rows],
            "low_util_since": pd.Series(pd.NaT, index=range(len(rows)), dtype="datetime64[ns, UTC]"),
        }
    )
    for column in ("namespace", "pod", "team", "node", "pool", "uuid", "gpu_instance_id"):
        frame[column] = frame[column].astype("str")
    return IDLE_MARKED.check(frame)


def test_usage_cost_per_team() -> None:
    costs, warnings = usage_cost(marked(), step_seconds=3600, rates=on_demand(BOOK), by="team")
    expected = pd.DataFrame(
        {
            "team": pd.Series(["x", "y"], dtype="str"),
            # x: p 2 GE-h on H100 (1 idle), q 3/7 idle on A100. y: r 1/4 on T4, s 1 unknown on WEIRD:
            # unknown is never idle, so it is cost but not waste.
            "allocated_gpu_hours": [2 + 3 / 7, 1.25],
            "used_gpu_hours": [0.5, 0.15],  # x: 0.5×1 + 0×1 + 0×3/7; y: 0.6×0.25 (s unknown)
            "idle_gpu_hours": [1 + 3 / 7, 0.0],
            "unknown_gpu_hours": [0.0, 1.0],
            "efficiency": [0.5 / (2 + 3 / 7), 0.15 / 0.25],  # of the hours with known utilization
            "pods": [2, 2],
            "cost_usd": [2 * 4.0 + 3 / 7 * 2.5, 0.25 * 0.35 + 2.0],
            "waste_usd": [4.0 + 3 / 7 * 2.5, 0.0],
        }
    )
    assert_frame_equal(costs, expected, **EXACT)
    assert warnings == [WARNING]


def test_usage_cost_per_workload_sums_to_the_fleet() -> None:
    workloads, _ = usage_cost(marked(), step_seconds=3600, rates=on_demand(BOOK), by="workload")
    fleet, _ = usage_cost(marked(), step_seconds=3600, rates=on_demand(BOOK), by="fleet")
    assert workloads["pod"].tolist() == ["p", "q", "r", "s"]
    assert workloads["waste_usd"].sum() == pytest.approx(fleet["waste_usd"].iloc[0])
    assert fleet["cost_usd"].iloc[0] == pytest.approx(8 + 3 / 7 * 2.5 + 0.0875 + 2)


# The A100 costs $2.5 until 2026-11-20 02:00 and $2.0 from then; the L4 is owned: $9,000 over 36 months
# with no residual value is 9000 / (36 × 730 h) per GPU-hour.
DATED = PriceBook(
    default_usd_per_gpu_hour=2.0,
    products={
        A100: (
            DatedPrice(start=T0.to_pydatetime() - pd.Timedelta(days=30), usd_per_gpu_hour=2.5),
            DatedPrice(start=(T0 + pd.Timedelta(hours=2)).to_pydatetime(), usd_per_gpu_hour=2.0),
        )
    },
    amortization={"NVIDIA L4": Amortization(purchase_usd=9000.0, months=36)},
)
L4_RATE = 9000 / (36 * 730)


def test_a_price_change_mid_window_prices_each_sample_at_the_rate_then() -> None:
    # One A100 held by pod p for four hourly samples, idle in the last; one L4 held by q for the first two.
    rows = [(k, "p", A100, k == 3) for k in range(4)] + [(k, "q", "NVIDIA-L4", False) for k in range(2)]
    frame = marked().iloc[[0] * len(rows)].reset_index(drop=True)
    frame["timestamp"] = pd.to_datetime([T0 + pd.Timedelta(hours=r[0]) for r in rows], utc=True)
    frame["pod"] = pd.Series([r[1] for r in rows], dtype="str")
    frame["pool"] = pd.Series([r[2] for r in rows], dtype="str")
    frame["idle"] = [r[3] for r in rows]
    costs, warnings = usage_cost(frame, step_seconds=3600, rates=on_demand(DATED), by="workload")
    # p: 00:00 and 01:00 at $2.5, 02:00 (the change) and 03:00 at $2.0; its idle hour is at $2.0.
    assert costs["cost_usd"].tolist() == pytest.approx([2.5 + 2.5 + 2.0 + 2.0, 2 * L4_RATE])
    assert costs["waste_usd"].tolist() == pytest.approx([2.0, 0.0])
    assert warnings == []  # an amortized product is a known one
    ledger = by_node().iloc[[1, 1, 1]].reset_index(drop=True)  # the A100 node at 01:00, 02:00, 03:00
    ledger["timestamp"] = pd.to_datetime([T0 + pd.Timedelta(hours=h) for h in (1, 2, 3)], utc=True)
    fleet, _ = ledger_cost(ledger, step_seconds=3600, rates=on_demand(DATED), by=())
    # Each sample: allocated 5/7 GE, unallocated 2/7; priced 2.5, 2.0, 2.0.
    assert fleet["cost_usd"].iloc[0] == pytest.approx(5 / 7 * (2.5 + 2.0 + 2.0))
    assert fleet["unallocated_cost_usd"].iloc[0] == pytest.approx(2 / 7 * (2.5 + 2.0 + 2.0))


def test_before_a_products_first_dated_price_the_default_applies() -> None:
    early = pd.Series([T0 - pd.Timedelta(days=31), T0], dtype="datetime64[ns, UTC]")
    prices = usd_per_gpu_hour(pd.Series([A100, A100], dtype="str"), on_demand(DATED), early)
    assert prices.tolist() == [2.0, 2.5]


# 6 H100s reserved at $2.80 for the first two hours of the day, 2 more at $3.00 all day; on demand $4.
COMMITTED = PriceBook(
    default_usd_per_gpu_hour=2.0,
    products={H100: 4.0},
    commitments={
        "NVIDIA H100 80GB HBM3": (
            Commitment(
                start=T0.to_pydatetime(),
                end=(T0 + pd.Timedelta(hours=2)).to_pydatetime(),
                gpus=6,
                usd_per_gpu_hour=2.8,
            ),
            Commitment(
                start=T0.to_pydatetime(),
                end=(T0 + pd.Timedelta(days=1)).to_pydatetime(),
                gpus=2,
                usd_per_gpu_hour=3.0,
            ),
        )
    },
)


def test_committed_gpus_are_priced_at_their_rates_and_the_rest_on_demand() -> None:
    # The H100 node holds 8 GPUs at 00:00 and 01:00, 10 at 02:00 (a second node), 1 at 03:00.
    ledger = by_node().iloc[[0, 0, 0, 0, 0]].reset_index(drop=True)
    ledger["timestamp"] = pd.to_datetime([T0 + pd.Timedelta(hours=h) for h in (0, 1, 2, 2, 3)], utc=True)
    ledger["node"] = pd.Series(["h", "h", "h", "h2", "h"], dtype="str")
    states = ["unavailable_ge", "stranded_ge", "unallocated_ge", "allocated_unknown_ge", "allocated_idle_ge"]
    ledger.loc[3, [*states, "allocated_active_ge", "capacity_ge"]] = [0, 0, 2.0, 0, 0, 0, 2.0]
    ledger.loc[4, [*states, "allocated_active_ge", "capacity_ge"]] = [0, 0, 0, 0, 1.0, 0, 1.0]
    rates = PoolRates.of(COMMITTED, ledger)
    times = pd.Series(pd.to_datetime([T0 + pd.Timedelta(hours=h) for h in range(4)], utc=True))
    prices = rates.at(pd.Series([H100] * 4, dtype="str"), times)
    # 00:00, 01:00: 6 × 2.8 + 2 × 3.0 = 22.8 for 8 GPUs. 02:00: the $2.80 reservation has ended: 2 × 3.0 +
    # 8 × 4.0 = 38 for 10. 03:00: one GPU, the cheapest commitment in force ($3.00) covers it.
    assert prices.tolist() == pytest.approx([22.8 / 8, 22.8 / 8, 38 / 10, 3.0])
    # A pool with no commitment (the A100, at the book's default), or a time no sample of the fleet has,
    # is priced on demand.
    assert rates.at(
        pd.Series([A100, H100], dtype="str"), pd.Series([times[0], T0 - pd.Timedelta(hours=1)])
    ).tolist() == [2.0, 4.0]
    # At 03:00 one reserved GPU ($3.00) had no GPU to use: $3.00 paid for nothing, said once.
    assert rates.unused_warnings(step_seconds=3600) == [
        f"{H100}: $3.00 of committed GPU-hours paid for with no GPU present to use"
    ]
    fleet, _ = ledger_cost(ledger, step_seconds=3600, rates=rates, by=())
    # The ledger's dollars add up to what the GPUs present cost: 22.8 + 22.8 + 38 + 3.
    total = fleet[["cost_usd", "unallocated_cost_usd", "stranded_cost_usd", "unavailable_cost_usd"]].sum(
        axis=1
    )
    assert total.iloc[0] == pytest.approx(22.8 + 22.8 + 38 + 3.0)
    assert rates.quoted(H100, (T0 + pd.Timedelta(hours=4)).to_pydatetime()) == pytest.approx(3.0)
