"""Dollars of SPEC §3: price book × GE-hours, for the ledger states and per team/namespace/workload/pool."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from gpuwatch.analytics.ledger import SECONDS_PER_HOUR, summarize_usage
from gpuwatch.core.model import ALLOCATED_STATES, LEDGER_STATES, PriceBook, normalize_product, utc


@dataclass(frozen=True, slots=True)
class PoolRates:
    """Each pool's USD per GPU-hour at each sample: the price book's price in force then, with the pool's
    committed GPUs blended in by how many GPUs it had (PriceBook.blended). The GPUs are the whole
    fleet's: a view of one team or pool prices a GPU-hour as the fleet pays for it."""

    book: PriceBook
    # timestamp (epoch ns), pool, gpus: the GPUs of each pool with commitments at each sample (else none)
    present: pd.DataFrame

    @classmethod
    def of(cls, book: PriceBook, by_node: pd.DataFrame) -> "PoolRates":
        """The rates of a window's samples from Ledger.by_node (a node's GE over the ledger states is its
        GPUs); a committed product with no node at a sample has no GPU present then."""
        # Pools are normalized product names, as the book's keys are made.
        committed = sorted({normalize_product(p) for p in book.commitments if book.commits(p)} - {""})
        if not committed or not len(by_node):
            return cls(book, pd.DataFrame({"timestamp": [], "pool": [], "gpus": []}))
        gpus = sum(by_node[f"{state}_ge"].to_numpy() for state in LEDGER_STATES)
        rows = by_node[["timestamp", "pool"]].assign(timestamp=_epoch_ns(by_node["timestamp"]), gpus=gpus)
        summed = rows.groupby(["timestamp", "pool"])["gpus"].sum()
        grid = pd.MultiIndex.from_product(
            [np.unique(rows["timestamp"].to_numpy()), committed], names=["timestamp", "pool"]
        )
        present = summed.reindex(grid, fill_value=0.0).reset_index()
        return cls(book, present.astype({"pool": "str", "gpus": "float64"}))

    def at(self, pools: "pd.Series[Any]", timestamps: "pd.Series[Any]") -> "npt.NDArray[np.float64]":
        """Per row, the rate of its pool at its timestamp (a missing pool: an unknown product's)."""
        codes, uniques = pd.factorize(pools)
        names = [str(p) for p in uniques] + [""]  # code -1, a missing pool: priced as an unknown product
        codes = np.where(codes < 0, len(names) - 1, codes)
        ns = _epoch_ns(timestamps)
        seconds = ns / 1e9
        if not len(self.present):
            return self.book.rates(names, codes, seconds)
        gpus = np.full(len(codes), np.nan)
        for pool, rows in self.present.groupby("pool", sort=False):
            k = names.index(str(pool)) if str(pool) in names else -1
            if k < 0:
                continue
            mine = codes == k
            times = rows["timestamp"].to_numpy()  # increasing: the grid is by time
            at = np.clip(np.searchsorted(times, ns[mine]), 0, len(times) - 1)
            gpus[mine] = np.where(times[at] == ns[mine], rows["gpus"].to_numpy()[at], np.nan)
        return self.book.rates(names, codes, seconds, gpus)

    def listed(self, pools: "pd.Series[Any]", timestamps: "pd.Series[Any]") -> "npt.NDArray[np.float64]":
        """Per row, the on-demand price of its pool in force at its timestamp: at() without commitments."""
        codes, uniques = pd.factorize(pools)
        names = [str(p) for p in uniques] + [""]
        codes = np.where(codes < 0, len(names) - 1, codes)
        return self.book.rates(names, codes, _epoch_ns(timestamps) / 1e9)

    def quoted(self, pool: str, at: datetime) -> float:
        """A pool's price as a table quotes it: in force at `at`, its commitments blended by its GPUs at
        the last sample by then."""
        mine = self.present[
            (self.present["pool"] == pool) & (self.present["timestamp"] <= _epoch_ns([at])[0])
        ]
        if not len(mine):
            return self.book.usd_per_gpu_hour(pool, at)
        gpus = mine["gpus"].to_numpy()[-1:]
        return float(self.book.blended(pool, np.asarray([utc(at).timestamp()]), gpus)[0][0])

    def unused_warnings(self, *, step_seconds: float) -> list[str]:
        """One warning per product whose commitments exceeded its GPUs at some sample: the dollars paid
        for committed GPU-hours no GPU was present for (in no ledger state: no GPU-hour was there)."""
        out = []
        for pool, rows in self.present.groupby("pool", sort=True):
            seconds = rows["timestamp"].to_numpy() / 1e9
            unused = self.book.blended(str(pool), seconds, rows["gpus"].to_numpy())[1]
            usd = float(unused.sum()) * step_seconds / SECONDS_PER_HOUR
            if usd > 0:
                out.append(f"{pool}: ${usd:,.2f} of committed GPU-hours paid for with no GPU present to use")
        return out


def _epoch_ns(timestamps: Any) -> "np.ndarray[Any, np.dtype[np.int64]]":
    return np.asarray(pd.DatetimeIndex(timestamps).as_unit("ns").asi8, dtype=np.int64)


def usd_per_gpu_hour(
    pools: "pd.Series[Any]", rates: PoolRates, timestamps: "pd.Series[Any]"
) -> "pd.Series[float]":
    """Price per GE-hour of each row's pool (same index) at its timestamp; the book's default for
    products it lacks.

    A pool is a normalized product name, and the book normalizes its keys the same way. A MIG or
    time-sliced share costs GE × price, which pricing GE-hours already does (SPEC §3).
    """
    return pd.Series(rates.at(pools, timestamps), index=pools.index, name="usd_per_gpu_hour", dtype="float64")


def price_warnings(pools: "pd.Series[Any]", price_book: PriceBook) -> list[str]:
    """One coverage warning per distinct product the price book does not name (sorted); never raises."""
    default = price_book.default_usd_per_gpu_hour
    names = {"" if pd.isna(p) else str(p) for p in pd.unique(pools)}
    unknown = sorted(p for p in names if not price_book.knows(p))
    return [f"unknown product {p or '(none)'} priced at default ${default:.2f}/GPU-hour" for p in unknown]


def ledger_cost(
    by_node: pd.DataFrame, *, step_seconds: float, rates: PoolRates, by: Sequence[str] = ("pool",)
) -> tuple[pd.DataFrame, list[str]]:
    """Dollars of the ledger states, grouped by columns of Ledger.by_node (() = the fleet, one row).

    cost_usd = allocated (unknown + idle + active) GE-hours × the price in force at each sample;
    waste_usd = allocated_idle × price;
    unallocated_cost_usd, stranded_cost_usd and unavailable_cost_usd likewise. Returns the frame
    (sorted by the keys) and the unknown-product warnings.
    """
    price = rates.at(by_node["pool"], by_node["timestamp"])
    warnings = price_warnings(by_node["pool"], rates.book)
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
    marked: pd.DataFrame, *, step_seconds: float, rates: PoolRates, by: str | Sequence[str]
) -> tuple[pd.DataFrame, list[str]]:
    """usage_summary() per group plus cost_usd (allocated GE-hours × price) and waste_usd (idle × price).

    marked: mark_idle() output; by as in usage_summary ("team", "namespace", "workload", "pool",
    "fleet" or columns). One vectorized pass. Returns the frame and the unknown-product warnings.
    """
    price = rates.at(marked["pool"], marked["timestamp"])
    warnings = price_warnings(marked["pool"], rates.book)
    out = summarize_usage(
        marked,
        step_seconds=step_seconds,
        by=by,
        allocated_weights={"cost_usd": price},
        idle_weights={"waste_usd": price},
    )
    return out, warnings
