"""A window's charges (schema.CHARGES) per charge period, from either read path: the raw path's analysis, or
gpuwatch's own series read in pieces that never span a period's bounds."""

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from gpuwatch.analytics.charges import ENERGY, FLEET_STATES, charges
from gpuwatch.core.config import Settings
from gpuwatch.core.model import Window, cluster_of
from gpuwatch.core.schema import CHARGES
from gpuwatch.read.analysis import Analysis
from gpuwatch.read.history import history_store, no_history, price_cuts, read_pieces, read_sums
from gpuwatch.read.historypieces import SampleHours, energy_rate_lookup, price_lookup
from gpuwatch.sources.historystore import CLUSTER, HistoryStore
from gpuwatch.sources.historysums import HistorySums

# The pod families a charge is made of: GE held, idle and without telemetry, and the power drawn.
CHARGE_FAMILIES = ("pod_allocated", "pod_idle", "pod_unknown", "pod_power")
WATT_HOURS_PER_KWH = 1000.0


def raw_charges(analysis: Analysis, *, period_seconds: int) -> pd.DataFrame:
    """CHARGES of the raw path's analysis: its samples, each in the period its timestamp falls in."""
    nodes = pd.concat([analysis.marked["node"], analysis.by_node["node"]]).astype("str").unique()
    clusters = analysis.nodes.set_index("node")["cluster"].astype("str")
    clusters = clusters.reindex(nodes).fillna(pd.Series([cluster_of(n) for n in nodes], index=nodes))
    return charges(
        marked=analysis.marked,
        by_node=analysis.by_node,
        clusters=clusters,
        rates=analysis.rates,
        step_seconds=analysis.window.step_seconds,
        period_seconds=period_seconds,
        energy=analysis.energy,
    )


def period_cuts(window: Window, period_seconds: int) -> list[datetime]:
    """The period bounds strictly inside the window (whole multiples of the period since the epoch)."""
    first = int(window.start.timestamp()) // period_seconds * period_seconds + period_seconds
    last = window.end.timestamp()
    return [
        datetime.fromtimestamp(t, window.start.tzinfo)
        for t in range(first, int(np.ceil(last)), period_seconds)
    ]


def read_charges(
    settings: Settings, window: Window, *, store: HistoryStore | None, period_seconds: int
) -> pd.DataFrame:
    """CHARGES from gpuwatch's own series in `store`: the window read in pieces cut where a price changes
    and at every period bound, and of the pod families only CHARGE_FAMILIES. NoHistoryError when the
    store holds none of the window (None: the Prometheus the settings name)."""
    cuts = sorted({*price_cuts(settings, window), *period_cuts(window, period_seconds)})
    with history_store(settings, store) as store:
        pieces = read_pieces(store, window, cuts=cuts)
        if not (pieces["samples"] > 0).any():
            raise no_history(store, window)
        sums = read_sums(store, window, pieces=pieces, pods=False)
        families = store.pod_reader(pieces).of_teams().read(*CHARGE_FAMILIES)
    return history_charges(replace(sums, **families), settings=settings, period_seconds=period_seconds)


def history_charges(sums: HistorySums, *, settings: Settings, period_seconds: int) -> pd.DataFrame:
    """CHARGES of per-piece sums whose pieces each lie within one period (read_charges()): a workload's
    active GE-hours are its allocated less its idle and unknown ones, piece by piece; its dollars are its
    GE-hours at the piece's price, as the report's (historypieces.price_lookup); list_usd at the price book's
    on-demand price in force at the piece's middle."""
    hours = SampleHours(sums.pieces)
    price_of = price_lookup(settings, sums)
    pieces = sums.pieces.set_index("piece")
    starts = pieces["end"] - pd.to_timedelta(pieces["seconds"], unit="s")
    middles = pieces["end"] - pd.to_timedelta(pieces["seconds"] / 2, unit="s")
    period = starts.dt.floor(f"{period_seconds}s")
    clusters = pieces[CLUSTER].astype("str") if CLUSTER in pieces else pd.Series("", index=pieces.index)

    def rows(frame: pd.DataFrame, state: str, value: "pd.Series[Any] | None" = None) -> pd.DataFrame:
        if value is not None:
            frame = frame.assign(value=value)
        gpu_hours = hours.weighted(frame).to_numpy(dtype=np.float64)
        pool = frame["pool"].astype("str")
        pairs = pd.MultiIndex.from_arrays([frame["piece"].to_numpy(dtype=np.int64), pool.to_numpy()])
        unique = pairs.unique()
        book = settings.pricing
        on_demand = pd.Series(
            [book.usd_per_gpu_hour(p, middles[k].to_pydatetime()) for k, p in unique],
            index=unique,
            dtype="float64",
        )
        listed = on_demand.reindex(pairs).to_numpy(dtype=np.float64)
        return _rows(
            frame, state, gpu_hours, gpu_hours * price_of(frame), gpu_hours * listed, period, clusters
        )

    keys = ["piece", "namespace", "pod", "team", "pool"]
    held = sums.pod_allocated[[*keys, "value"]].groupby(keys, as_index=False, observed=True).sum()
    for name, family in (("idle", sums.pod_idle), ("unknown", sums.pod_unknown)):
        part = family.groupby(keys, observed=True)["value"].sum().rename(name)
        held = held.merge(part.reset_index(), on=keys, how="left")
    held[["idle", "unknown"]] = held[["idle", "unknown"]].fillna(0.0)
    parts = [
        rows(held, "allocated_active", held["value"] - held["idle"] - held["unknown"]),
        rows(held, "allocated_idle", held["idle"]),
        rows(held, "allocated_unknown", held["unknown"]),
    ]
    states = sums.pool_states
    parts += [rows(states[states["state"] == s], s) for s in FLEET_STATES]
    parts += _energy_rows(sums, hours, energy_rate_lookup(settings, sums), period, clusters)
    out = pd.concat(parts, ignore_index=True)
    group = ["period_start", "cluster", "pool", "team", "namespace", "pod", "state"]
    out = out.groupby(group, sort=True, as_index=False)[["gpu_hours", "effective_usd", "list_usd"]].sum(
        min_count=1
    )
    out = out[(out["gpu_hours"].fillna(0.0) > 0) | (out["state"] == ENERGY)]
    out = out.assign(
        period_start=pd.to_datetime(out["period_start"], utc=True),
        period_end=pd.to_datetime(out["period_start"], utc=True) + timedelta(seconds=period_seconds),
    )
    return CHARGES.check(out.reset_index(drop=True))


def _energy_rows(
    sums: HistorySums, hours: SampleHours, rate_of: Any, period: "pd.Series[Any]", clusters: "pd.Series[str]"
) -> list[pd.DataFrame]:
    """Energy charges: each pod's power (its GE share of its GPUs'), and each pool's less its pods' (what
    no pod held drew); kWh × PUE × tariff. None where the pools' power is unknown."""
    if not len(sums.pool_power):
        return []
    pods = sums.pod_power
    pod_kwh = hours.weighted(pods) / WATT_HOURS_PER_KWH
    pool_kwh = hours.weighted(sums.pool_power) / WATT_HOURS_PER_KWH
    held_kwh = pod_kwh.groupby([pods["piece"], pods["pool"].astype("str")]).sum()
    pools = sums.pool_power.assign(pool=sums.pool_power["pool"].astype("str"))
    held_now = held_kwh.reindex(pd.MultiIndex.from_frame(pools[["piece", "pool"]])).fillna(0.0).to_numpy()
    unheld = np.clip(pool_kwh.to_numpy() - held_now, 0.0, None)
    out = []
    for frame, kwh in ((pods, pod_kwh.to_numpy()), (pools, unheld)):
        usd = kwh * rate_of(frame)
        out.append(_rows(frame, ENERGY, kwh, usd, usd, period, clusters))
    return out


def _rows(
    frame: pd.DataFrame,
    state: str,
    quantity: "np.ndarray[Any, np.dtype[np.floating[Any]]]",
    effective: "np.ndarray[Any, np.dtype[np.floating[Any]]]",
    listed: "np.ndarray[Any, np.dtype[np.floating[Any]]]",
    period: "pd.Series[Any]",
    clusters: "pd.Series[str]",
) -> pd.DataFrame:
    """Charge rows of a per-piece family (its piece's period and cluster, its pool and pod labels)."""
    return pd.DataFrame(
        {
            "period_start": frame["piece"].map(period).to_numpy(),
            "cluster": frame["piece"].map(clusters).to_numpy(),
            "pool": frame["pool"].astype("str").to_numpy(),
            **{
                k: frame[k].astype("str").to_numpy() if k in frame else ""
                for k in ("team", "namespace", "pod")
            },
            "state": state,
            "gpu_hours": quantity,
            "effective_usd": effective,
            "list_usd": listed,
        }
    )
