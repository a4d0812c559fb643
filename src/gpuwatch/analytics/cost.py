"""Dollars of SPEC §3: price book × GE-hours, for the ledger states and per team/namespace/workload/pool."""

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from gpuwatch.analytics.ledger import SECONDS_PER_HOUR, summarize_usage
from gpuwatch.model import ALLOCATED_STATES, PriceBook


def usd_per_gpu_hour(
    pools: "pd.Series[Any]", price_book: PriceBook, timestamps: "pd.Series[Any]"
) -> "pd.Series[float]":
    """Price per GE-hour of each row's pool (same index) in force at its timestamp; the book's default
    for products it lacks.

    A pool is a normalized product name, and the book normalizes its keys the same way. A MIG or
    time-sliced share costs GE × price, which pricing GE-hours already does (SPEC §3).
    """
    prices, _ = _prices(pools, price_book, timestamps)
    return pd.Series(prices, index=pools.index, name="usd_per_gpu_hour", dtype="float64")


def price_warnings(pools: "pd.Series[Any]", price_book: PriceBook) -> list[str]:
    """One coverage warning per distinct product the price book does not name (sorted); never raises."""
    default = price_book.default_usd_per_gpu_hour
    names = {"" if pd.isna(p) else str(p) for p in pd.unique(pools)}
    unknown = sorted(p for p in names if not price_book.knows(p))
    return [f"unknown product {p or '(none)'} priced at default ${default:.2f}/GPU-hour" for p in unknown]


def _prices(
    pools: "pd.Series[Any]", price_book: PriceBook, timestamps: "pd.Series[Any]"
) -> tuple["np.ndarray[Any, np.dtype[np.float64]]", list[str]]:
    """Per-row prices, each the dated price in force at its row's timestamp, and the unknown-product
    warnings (a missing pool is priced and warned as an unknown product)."""
    codes, uniques = pd.factorize(pools)
    names = [str(p) for p in uniques] + [""]  # code -1, a missing pool: priced as an unknown product
    seconds = np.asarray(pd.DatetimeIndex(timestamps).as_unit("ns").asi8 / 1e9, dtype=np.float64)
    prices = price_book.rates(names, np.where(codes < 0, len(names) - 1, codes), seconds)
    return prices, price_warnings(pools, price_book)


def ledger_cost(
    by_node: pd.DataFrame, *, step_seconds: float, price_book: PriceBook, by: Sequence[str] = ("pool",)
) -> tuple[pd.DataFrame, list[str]]:
    """Dollars of the ledger states, grouped by columns of Ledger.by_node (() = the fleet, one row).

    cost_usd = allocated (unknown + idle + active) GE-hours × the price in force at each sample;
    waste_usd = allocated_idle × price;
    unallocated_cost_usd, stranded_cost_usd and unavailable_cost_usd likewise. Returns the frame
    (sorted by the keys) and the unknown-product warnings.
    """
    price, warnings = _prices(by_node["pool"], price_book, by_node["timestamp"])
    usd_per_ge = price * (step_seconds / SECONDS_PER_HOUR)
    allocated = sum(by_node[f"{state}_ge"].to_numpy() for state in ALLOCATED_STATES)
    dollars = pd.DataFrame(
        {
            "cost_usd": allocated * usd_per_ge,
            "waste_usd": by_node["allocated_idle_ge"].to_numpy() * usd_per_ge,
            "unallocated_cost_usd": by_node["unallocated_ge"].to_numpy() * usd_per_ge,
            "stranded_cost_usd": by_node["stranded_ge"].to_numpy() * usd_per_ge,
            "unavailable_cost_usd": by_node["unavailable_ge"].to_numpy() * usd_per_ge,
        },
        index=by_node.index,
    )
    if by:
        out = dollars.groupby([by_node[c] for c in by], sort=True, observed=True).sum().reset_index()
    else:
        out = dollars.sum().to_frame().T.astype("float64")
    return out, warnings


def usage_cost(
    marked: pd.DataFrame, *, step_seconds: float, price_book: PriceBook, by: str | Sequence[str]
) -> tuple[pd.DataFrame, list[str]]:
    """usage_summary() per group plus cost_usd (allocated GE-hours × price) and waste_usd (idle × price).

    marked: mark_idle() output; by as in usage_summary ("team", "namespace", "workload", "pool",
    "fleet" or columns). One vectorized pass. Returns the frame and the unknown-product warnings.
    """
    price, warnings = _prices(marked["pool"], price_book, marked["timestamp"])
    out = summarize_usage(
        marked,
        step_seconds=step_seconds,
        by=by,
        allocated_weights={"cost_usd": price},
        idle_weights={"waste_usd": price},
    )
    return out, warnings
