"""A window's charges: GPU-hours and dollars per charge period × workload or fleet state, pool, cluster."""

import numpy as np
import pandas as pd

from gpuwatch.analytics.cost import PoolRates
from gpuwatch.analytics.ledger import SECONDS_PER_HOUR
from gpuwatch.core.schema import CHARGES

# The ledger states a workload holds GPUs in, and those of the fleet's GPUs no workload holds.
WORKLOAD_STATES = ("allocated_active", "allocated_idle", "allocated_unknown")
FLEET_STATES = ("unallocated", "stranded", "unavailable")
ENERGY = "energy"  # a charge row for energy (kWh, tariff × PUE) rather than GPU-hours
_KEYS = ["period_start", "cluster", "pool", "team", "namespace", "pod", "state"]


def charges(
    *,
    marked: pd.DataFrame,
    by_node: pd.DataFrame,
    clusters: "pd.Series[str]",
    rates: PoolRates,
    step_seconds: float,
    period_seconds: int,
    energy: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """CHARGES of one window's samples, each sample in the period its timestamp falls in (periods start
    at whole multiples of `period_seconds` since the epoch: UTC hours and days).

    marked: IDLE_MARKED (a row's state: allocated_unknown where its utilization is unknown, else
    allocated_idle where idle, else allocated_active); by_node: Ledger.by_node (the unallocated,
    stranded and unavailable GE of each node-sample); clusters: each node's cluster (index node);
    energy: window_energy()'s rows, or None. effective_usd prices a GPU-hour as the report does (the
    price in force, commitments blended: PoolRates.at), list_usd at the on-demand price in force.
    Sums of these rows equal the report's: a team's effective_usd over its workload states is its
    cost_usd, the fleet states' are unallocated_, stranded_ and unavailable_cost_usd."""
    hours = step_seconds / SECONDS_PER_HOUR
    util = marked["util_ratio"].to_numpy(dtype=np.float64)
    state = np.where(
        np.isnan(util),
        "allocated_unknown",
        np.where(marked["idle"].to_numpy(bool), "allocated_idle", "allocated_active"),
    )
    held = _priced(
        marked[["timestamp", "node", "pool", "team", "namespace", "pod"]].assign(
            state=state, gpu_hours=marked["ge_share"].to_numpy(dtype=np.float64) * hours
        ),
        rates,
    )
    fleet = [
        _priced(
            by_node[["timestamp", "node", "pool"]].assign(
                team="", namespace="", pod="", state=name, gpu_hours=by_node[f"{name}_ge"].to_numpy() * hours
            ),
            rates,
        )
        for name in FLEET_STATES
    ]
    parts = [held, *fleet]
    if energy is not None and len(energy):
        kwh = energy["energy_joules"].to_numpy(dtype=np.float64) / 3.6e6
        usd = energy["energy_cost_usd"].to_numpy(dtype=np.float64)
        parts.append(
            energy[["timestamp", "node", "pool", "team", "namespace", "pod"]].assign(
                state=ENERGY, gpu_hours=kwh, effective_usd=usd, list_usd=usd
            )
        )
    rows = pd.concat([_period_rows(p, clusters, period_seconds) for p in parts], ignore_index=True)
    summed = rows.groupby(_KEYS, sort=True, observed=True, dropna=False)[
        ["gpu_hours", "effective_usd", "list_usd"]
    ].sum(min_count=1)
    out = summed.reset_index()
    out = out[(out["gpu_hours"].fillna(0.0) > 0) | (out["state"] == ENERGY)]
    out = out.assign(period_end=out["period_start"] + pd.Timedelta(seconds=period_seconds))
    return CHARGES.check(out.reset_index(drop=True))


def _priced(rows: pd.DataFrame, rates: PoolRates) -> pd.DataFrame:
    hours = rows["gpu_hours"].to_numpy(dtype=np.float64)
    return rows.assign(
        effective_usd=hours * rates.at(rows["pool"], rows["timestamp"]),
        list_usd=hours * rates.listed(rows["pool"], rows["timestamp"]),
    )


def _period_rows(rows: pd.DataFrame, clusters: "pd.Series[str]", period_seconds: int) -> pd.DataFrame:
    """The rows with their period's start and their node's cluster ("" where the node is not listed),
    the timestamp and node dropped; the keys as plain strings."""
    start = rows["timestamp"].dt.floor(f"{period_seconds}s")
    cluster = rows["node"].astype("str").map(clusters).fillna("")
    out = rows.drop(columns=["timestamp", "node"]).assign(period_start=start, cluster=cluster)
    return out.astype({k: "str" for k in _KEYS if k != "period_start"})
