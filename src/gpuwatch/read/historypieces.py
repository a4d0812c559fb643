"""The history path's pieces in hours and dollars: each piece's sample interval (SampleHours), the
prices and energy rates in force in it, telemetry hours per node and the pieces without samples."""

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from gpuwatch.core.config import Settings
from gpuwatch.core.model import in_force
from gpuwatch.sources.historystore import CLUSTER
from gpuwatch.sources.historysums import HistorySums

SECONDS_PER_HOUR = 3600.0
PARTIAL_PIECE_RATIO = 0.99  # a piece whose exporter samples cover less than this is named in warnings


# Rows of a piece and pool -> each row's USD per GPU-hour (price_lookup).
PriceOf = Callable[[pd.DataFrame], "np.ndarray[Any, np.dtype[np.float64]]"]


def _piece_prices(sums: HistorySums) -> pd.DataFrame:
    """piece, pool, usd_per_gpu_hour: each pool's published price averaged over the piece."""
    keys = ["piece", "pool"]
    total = sums.price_sum.set_index(keys)["value"]
    count = sums.price_count.set_index(keys)["value"].reindex(total.index)
    return (total / count.where(count > 0)).rename("usd_per_gpu_hour").reset_index()


class SampleHours:
    """Per-piece sums of GE (or USD/h) samples to GE-hours (USD): × the piece's sample interval in hours."""

    def __init__(self, pieces: pd.DataFrame) -> None:
        covered = pieces[pieces["samples"] > 0]
        interval = covered["seconds"].to_numpy() / covered["samples"].to_numpy()
        if "resolution_seconds" in covered:
            # A piece the exporter covered only in part: its samples stand for one grid interval each,
            # so the hours without history count nowhere instead of being stretched over the piece.
            interval = np.minimum(interval, covered["resolution_seconds"].to_numpy(dtype=np.float64))
        self.per_sample = pd.Series(interval / SECONDS_PER_HOUR, index=covered["piece"].to_numpy())
        total = float(covered["samples"].sum())
        self.sample_seconds = float(covered["seconds"].sum()) / total if total else float("nan")

    def weighted(self, frame: pd.DataFrame) -> "pd.Series[float]":
        weight = frame["piece"].map(self.per_sample).fillna(0.0)
        out: pd.Series[float] = frame["value"] * weight
        return out

    def by(self, frame: pd.DataFrame, keys: Sequence[str], name: str) -> pd.DataFrame:
        """Hours per group of `keys`: a frame of the keys and `name` (no row for a group never seen)."""
        summed = self.weighted(frame).groupby([frame[k] for k in keys], sort=True).sum()
        return summed.rename(name).reset_index() if len(frame) else _empty(keys, name)

    def total(self, frame: pd.DataFrame) -> float:
        return float(self.weighted(frame).sum())


def _empty(keys: Sequence[str], name: str) -> pd.DataFrame:
    return pd.DataFrame({**{k: pd.Series(dtype="str") for k in keys}, name: pd.Series(dtype="float64")})


def node_telemetry_hours(sums: HistorySums) -> pd.DataFrame:
    """Per node: capacity_gpu_hours, and present_gpu_hours of GPUs with DCGM telemetry, per piece at most
    its capacity, since gpuwatch_node_gpus_reporting counts each MIG instance (the raw path counts
    physical GPUs)."""
    keys = ["piece", "node"]
    hours = SampleHours(sums.pieces)
    capacity, reporting = (
        frame.assign(value=hours.weighted(frame)).set_index(keys)["value"]
        for frame in (sums.capacity_sum, sums.reporting_sum)
    )
    present = reporting.reindex(capacity.index).fillna(0.0).clip(upper=capacity)
    per_node = {"capacity_gpu_hours": capacity, "present_gpu_hours": present}
    return (
        pd.DataFrame({k: v.groupby(level="node").sum() for k, v in per_node.items()})
        .rename_axis(index="node")
        .reset_index()
    )


def price_lookup(settings: Settings, sums: HistorySums) -> "PriceOf":
    """Each row's price (rows of a piece and pool): what the exporter published in the piece (its mean
    there), else the price book's in force at the piece's middle. A piece ends where a price changes
    (price_cuts()), so it holds one rate. Looked up once per piece and pool, not per row (a month holds
    ~50,000 pods)."""
    book = settings.pricing
    published = _piece_prices(sums).dropna().set_index(["piece", "pool"])["usd_per_gpu_hour"]
    pieces = sums.pieces.set_index("piece")
    middles = pieces["end"] - pd.to_timedelta(pieces["seconds"] / 2, unit="s")

    def price_of(frame: pd.DataFrame) -> "np.ndarray[Any, np.dtype[np.float64]]":
        keys = pd.MultiIndex.from_arrays(
            [frame["piece"].to_numpy(dtype=np.int64), frame["pool"].astype("str").to_numpy()]
        )
        pairs = keys.unique()
        prices = published.reindex(pairs)
        missing = prices.isna().to_numpy()
        prices[missing] = [
            book.usd_per_gpu_hour(pool, middles[piece].to_pydatetime()) for piece, pool in pairs[missing]
        ]
        return prices.reindex(keys).to_numpy(dtype=np.float64)

    return price_of


def team_pool_hours(pieces: pd.DataFrame, sums: pd.DataFrame, name: str) -> pd.DataFrame:
    """team, pool, `name`: per-piece sums of GE (piece, team, pool, value) as GE-hours per team and pool."""
    frame: pd.DataFrame = SampleHours(pieces).by(sums, ("team", "pool"), name)
    return frame.astype({"team": "str", "pool": "str", name: "float64"})


def energy_rate_lookup(settings: Settings, sums: HistorySums) -> "PriceOf":
    """Each row's USD per kWh drawn by a GPU (rows of a piece): PUE × the tariff in force at its piece's
    middle (a piece ends where the tariff changes, price_cuts()); NaN without pricing.energy."""
    tariff = settings.pricing.energy
    pieces = sums.pieces.set_index("piece")
    middles = pieces["end"] - pd.to_timedelta(pieces["seconds"] / 2, unit="s")
    seconds = (middles - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy()
    if tariff is None:
        rates = pd.Series(np.nan, index=pieces.index)
    else:
        starts, prices = tariff.schedule()
        rates = pd.Series(tariff.pue * in_force(starts, prices, seconds, before=np.nan), index=pieces.index)

    def rate_of(frame: pd.DataFrame) -> "np.ndarray[Any, np.dtype[np.float64]]":
        return np.asarray(rates.reindex(frame["piece"].to_numpy(dtype=np.int64)), dtype=np.float64)

    return rate_of


def gap_warnings(pieces: pd.DataFrame, *, partial: bool = False) -> list[str]:
    """One line per run of pieces without exporter samples (those hours count nowhere) and, with
    `partial`, one per piece whose samples cover less than PARTIAL_PIECE_RATIO of it. Pieces of several
    clusters (CLUSTER) are looked at cluster by cluster, each line naming its cluster."""
    if CLUSTER in pieces:
        return [
            f"cluster {cluster}: {line}"
            for cluster, own in pieces.groupby(CLUSTER, sort=False)
            for line in gap_warnings(own.drop(columns=CLUSTER).reset_index(drop=True), partial=partial)
        ]
    missing = (pieces["samples"] <= 0).to_numpy()
    starts = pieces["end"] - pd.to_timedelta(pieces["seconds"], unit="s")
    warnings = []
    k = 0
    while k < len(pieces):
        if not missing[k]:
            k += 1
            continue
        first = k
        while k < len(pieces) and missing[k]:
            k += 1
        seconds = float(pieces["seconds"].iloc[first:k].sum())
        warnings.append(
            f"no gpuwatch_* samples from {_iso(starts.iloc[first])} to {_iso(pieces['end'].iloc[k - 1])} "
            f"({seconds / SECONDS_PER_HOUR:g} h): those hours are in no sum of this report"
        )
    if partial and "resolution_seconds" in pieces:
        covered = pieces["samples"] * pieces["resolution_seconds"] / pieces["seconds"]
        short = (covered > 0) & (covered < PARTIAL_PIECE_RATIO)
        warnings += [
            f"gpuwatch_* samples cover only {share:.0%} of {_iso(start)} to {_iso(end)}: the hours without "
            "them are in no sum of this report"
            for share, start, end in zip(covered[short], starts[short], pieces["end"][short], strict=True)
        ]
    return warnings


def _iso(value: Any) -> str:
    return pd.Timestamp(value).tz_convert("UTC").strftime("%Y-%m-%dT%H:%M:%SZ")
