"""Fragmentation after Weng et al., "Beware of Fragmentation" (USENIX ATC'23), stranded GE, pending pods."""

from datetime import datetime
from typing import Any, cast

import numpy as np
import pandas as pd

from gpuwatch.core.model import cluster_of, normalize_product, utc
from gpuwatch.core.schema import (
    GPU_REQUESTS,
    PENDING_PODS,
    PENDING_SCREENS,
    PLACEABLE_NODES,
    REQUEST_MIX,
    SCHEDULABLE_FREE,
    categorical_strings,
)

FLEET_POOL = ""  # the pool of a pod without a product selector, and the key of the fleet-wide mix
# Free GE is a sum of float shares: within this of k counts as k (1 − 1e-16 free GPUs fit a 1-GPU pod).
EPSILON_GE = 1e-9


def request_mix(requests: pd.DataFrame, *, per_cluster: bool = False) -> pd.DataFrame:
    """REQUEST_MIX (pool, k, p_k): the share p_k of GPU pods requesting k GE, per pool and fleet-wide.

    requests: GPU_REQUESTS (namespace, pod, pool, gpus), one row per GPU pod seen in the window
    (a repeated namespace/pod counts once, its last row). Pods without a pool ("") count in the
    fleet-wide mix only, which is keyed pool "" and is what a pool with no pods uses. Pods
    requesting no or unknown GE are not GPU pods. Sorted by pool, k; p_k sums to 1 per pool.
    per_cluster: for a fleet of several clusters (pod names qualified "<cluster>/<pod>",
    model.qualified), a cluster column first: each cluster's mixes, its pools' and its fleet-wide
    row "", from its own pods only — as if it were read alone (pods never use another cluster's
    GPUs). Sorted by cluster, pool, k; unqualified pods are cluster "".
    """
    GPU_REQUESTS.check(requests)
    pods = requests.drop_duplicates(["namespace", "pod"], keep="last")
    pods = pods[pods["gpus"] > 0]
    pods = pods.assign(cluster=clusters_of(pods["pod"]) if per_cluster else "")
    pooled = pods[pods["pool"] != FLEET_POOL]
    per_pool = pooled.groupby(["cluster", "pool", "gpus"], as_index=False, sort=True).size()
    fleet = pods.groupby(["cluster", "gpus"], as_index=False, sort=True).size().assign(pool=FLEET_POOL)
    counts = pd.concat([fleet, per_pool], ignore_index=True)
    totals = counts.groupby(["cluster", "pool"])["size"].transform("sum")
    out = pd.DataFrame(
        {
            "cluster": counts["cluster"].astype("str"),
            "pool": counts["pool"].astype("str"),
            "k": counts["gpus"].astype("float64"),
            "p_k": (counts["size"] / totals).astype("float64"),
        }
    ).sort_values(["cluster", "pool", "k"], ignore_index=True)
    return out if per_cluster else out.drop(columns="cluster")


def clusters_of(names: "pd.Series[Any]") -> "pd.Series[str]":
    """model.cluster_of() of each node or pod name ("" when unqualified), a categorical worked out once
    per distinct name: a per-sample frame repeats each node thousands of times."""
    codes, uniques = pd.factorize(names)
    # Code -1 (a missing name) picks the trailing "".
    clusters = categorical_strings([*(cluster_of(str(n)) for n in uniques), ""], codes)
    return clusters.set_axis(names.index)


def fragmentation(free: pd.DataFrame, mix: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fragmented GE per node-sample and the fragmentation ratio per pool-sample (SPEC §3).

    The whole-GPU form of the fragmentation measure of Weng et al., "Beware of Fragmentation:
    Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent" (USENIX ATC'23): with
    free_n free GE on each schedulable node of a pool and p_k the share of the window's GPU pods
    requesting k GE, F_n = Σ_k p_k · (free_n if free_n < k else 0) — the free GE a pod drawn from
    the request mix is expected to find too small to use.

    free: SCHEDULABLE_FREE (timestamp, node, pool, schedulable_free_ge; 0 on unschedulable nodes).
    mix: REQUEST_MIX; a pool absent from it uses the fleet-wide mix (pool ""), and with no mix at
    all nothing is fragmented. With a cluster column (request_mix(per_cluster=True)) the same rule
    holds per cluster: a node is weighed by its own cluster's mix (the cluster of its qualified
    name) — its pool's, else that cluster's fleet-wide row, else nothing is fragmented — so a
    cluster's F_n do not change with the other clusters read. The per-pool sums stay per pool.
    Returns per_node — timestamp, node, pool, schedulable_free_ge, fragmented_ge (F_n) — and per_pool
    — timestamp, pool, schedulable_free_ge (Σ free_n), fragmented_ge (Σ F_n), fragmentation_ratio
    (Σ F_n / Σ free_n, 0 when nothing is free). Σ F_n is the fragmented part of `stranded`; the
    ledger adds the free GE of cordoned nodes.
    """
    SCHEDULABLE_FREE.check(free)
    REQUEST_MIX.check(mix)
    free_ge = free["schedulable_free_ge"].to_numpy(dtype=np.float64)
    if "cluster" in mix.columns:
        clusters = clusters_of(free["node"])
    else:  # one mix for every node, whatever its cluster
        mix = mix.assign(cluster="")
        clusters = pd.Series("", index=free.index, dtype="str")
    mixes = {(str(c), str(p)): m for (c, p), m in mix.groupby(["cluster", "pool"], sort=False)}
    groups = free.groupby([clusters, free["pool"]], sort=False, observed=True).indices
    fragmented = np.zeros(len(free))
    for key, rows in groups.items():
        cluster, pool = (str(part) for part in cast(tuple[object, object], key))
        pool_mix = mixes.get((cluster, pool), mixes.get((cluster, FLEET_POOL)))
        if pool_mix is None or not len(pool_mix):
            continue
        fragmented[rows] = _fragmented(free_ge[rows], pool_mix)
    per_node = free[["timestamp", "node", "pool", "schedulable_free_ge"]].assign(fragmented_ge=fragmented)
    return per_node.reset_index(drop=True), pool_fragmentation(per_node)


def pool_fragmentation(per_node: pd.DataFrame) -> pd.DataFrame:
    """fragmentation()'s per_pool of its per_node rows (some nodes' alone: a cluster's, say)."""
    per_pool = per_node.groupby(["timestamp", "pool"], as_index=False, sort=True)[
        ["schedulable_free_ge", "fragmented_ge"]
    ].sum()
    total = per_pool["schedulable_free_ge"].to_numpy(dtype=np.float64)
    ratio = np.divide(
        per_pool["fragmented_ge"].to_numpy(dtype=np.float64),
        total,
        out=np.zeros(len(per_pool)),
        where=total > EPSILON_GE,
    )
    return per_pool.assign(fragmentation_ratio=ratio)


def _fragmented(
    free_ge: "np.ndarray[Any, np.dtype[np.float64]]", mix: pd.DataFrame
) -> "np.ndarray[Any, np.dtype[np.float64]]":
    """F_n = free_n · Σ_{k > free_n} p_k: a sorted search per node instead of a sum over k."""
    ordered = mix.sort_values("k")
    k = ordered["k"].to_numpy(dtype=np.float64)
    p = ordered["p_k"].to_numpy(dtype=np.float64)
    share_above = np.append(np.cumsum(p[::-1])[::-1], 0.0)  # share_above[j] = Σ_{m ≥ j} p_m
    first_larger = np.searchsorted(k, free_ge + EPSILON_GE, side="right")
    fragmented: np.ndarray[Any, np.dtype[np.float64]] = free_ge * share_above[first_larger]
    return fragmented


def fragmentation_summary(per_pool: pd.DataFrame, *, step_seconds: float) -> pd.DataFrame:
    """Per pool over the window: fragmentation_ratio (time average, SPEC §3) and fragmented_gpu_hours."""
    grouped = per_pool.groupby("pool", sort=True)
    return pd.DataFrame(
        {
            "fragmentation_ratio": grouped["fragmentation_ratio"].mean(),
            "fragmented_gpu_hours": grouped["fragmented_ge"].sum() * (step_seconds / 3600.0),
        }
    ).reset_index()


def last_sample(free: pd.DataFrame) -> pd.DataFrame:
    """The rows of a per-sample frame at its last timestamp."""
    if not len(free):
        return free
    at_last: pd.DataFrame = free[free["timestamp"] == free["timestamp"].max()]
    return at_last.reset_index(drop=True)


def largest_free_block(free: pd.DataFrame) -> pd.DataFrame:
    """Per pool at the window's last sample: largest_free_block_ge, the largest request one node can
    place now (max schedulable free GE of a node; 0 where no node is schedulable). Sorted by pool."""
    SCHEDULABLE_FREE.check(free)
    last = last_sample(free)
    block = last.groupby("pool", sort=True)["schedulable_free_ge"].max()
    return pd.DataFrame({"pool": block.index.astype("str"), "largest_free_block_ge": block.to_numpy()})


def diagnose_pending(
    pending: pd.DataFrame,
    free_at_last_sample: pd.DataFrame,
    *,
    as_of: datetime,
    screens: pd.DataFrame,
    placeable: pd.DataFrame,
) -> pd.DataFrame:
    """Why each pending GPU pod waits (SPEC §3): the first of affinity, taint, mig_profile, quota
    (analytics.placement.screen_pending decides those), then fragmentation or capacity.

    pending: PENDING_PODS (namespace, pod, team, pool — "" for the whole fleet —, gpus = k requested
    GE, created_at). free_at_last_sample: SCHEDULABLE_FREE; only its rows at the last timestamp count.
    screens, placeable: PENDING_SCREENS and PLACEABLE_NODES of the same pods. as_of: the window's end
    (the report's "now"); no clock is read here.
    Fragmentation when the nodes the pod may use have ≥ k free GE in total on schedulable nodes but no
    single node has k; capacity otherwise. In a fleet of several clusters those are the nodes of the
    pod's own cluster (placement.screen_pending screens each pod against them alone). Returns the
    pending columns plus pool_free_ge and largest_free_block_ge (over the nodes it may use),
    waiting_seconds (as_of − created_at), blocked_by, reason (in the user's words), node_affinity,
    tolerations and scheduler_message, sorted by waiting_seconds descending.
    """
    PENDING_PODS.check(pending)
    SCHEDULABLE_FREE.check(free_at_last_sample)
    PENDING_SCREENS.check(screens)
    PLACEABLE_NODES.check(placeable)
    last = last_sample(free_at_last_sample)
    free = placeable.merge(last[["node", "schedulable_free_ge"]], on="node", how="left")
    per_group = free.groupby("group")["schedulable_free_ge"].agg(["sum", "max", "size"])
    screened = pending.merge(screens, on=["namespace", "pod"], how="left", validate="one_to_one")
    stats = per_group.reindex(screened["group"].to_numpy()).fillna(0.0)
    total = stats["sum"].to_numpy(dtype=np.float64)
    largest = stats["max"].to_numpy(dtype=np.float64)
    k = screened["gpus"].to_numpy(dtype=np.float64)
    fragmented = (total >= k - EPSILON_GE) & (largest < k - EPSILON_GE)
    decided = screened["blocked_by"].fillna("").to_numpy(dtype=object)
    blocked_by = np.where(decided != "", decided, np.where(fragmented, "fragmentation", "capacity"))
    waited = (pd.Timestamp(utc(as_of)) - screened["created_at"]).dt.total_seconds()
    out = screened.assign(
        pool=screened["pool"].map(lambda p: normalize_product(p) if p else FLEET_POOL).astype("str"),
        pool_free_ge=total,
        largest_free_block_ge=largest,
        waiting_seconds=waited.astype("float64"),
        blocked_by=pd.Series(blocked_by, index=screened.index, dtype="str"),
    )
    out["reason"] = [
        pending_reason(b, d, gpus=g, free_ge=f, largest_ge=m, nodes=int(n))
        for b, d, g, f, m, n in zip(
            out["blocked_by"],
            out["detail"].fillna(""),
            k,
            total,
            largest,
            stats["size"].to_numpy(),
            strict=True,
        )
    ]
    for column in ("node_affinity", "tolerations", "scheduler_message"):
        out[column] = out[column].fillna("").astype("str")
    out = out.drop(columns=["group", "detail"])
    return out.sort_values(
        ["waiting_seconds", "namespace", "pod"], ascending=[False, True, True], ignore_index=True
    )


def pending_reason(
    blocked_by: str, detail: str, *, gpus: float, free_ge: float, largest_ge: float, nodes: int
) -> str:
    """Why a pending pod waits, in the user's words."""
    if blocked_by == "affinity":
        return f"no GPU node matches its node selector or required affinity ({detail})"
    if blocked_by == "taint":
        return f"every GPU node it may use has a taint it does not tolerate ({detail})"
    if blocked_by == "mig_profile":
        return f"no GPU node it may use offers the MIG profile it requests ({detail})"
    if blocked_by == "quota":
        queue = f" in queue {detail}" if detail else ""
        return f"Kueue has not admitted it{queue}: its queue's quota is in use"
    if blocked_by == "fragmentation":
        return (
            f"{_are_free(free_ge)} on the nodes it may use, but at most {largest_ge:g} on one node; "
            f"it needs {_gpus(gpus)}"
        )
    if detail:
        return f"{detail}; it needs {_gpus(gpus)}"
    if nodes and largest_ge >= gpus - EPSILON_GE:
        return (
            f"it needs {_gpus(gpus)} and a node it may use has {largest_ge:g} free now: "
            "the scheduler has not placed it yet"
        )
    where = f"the {nodes} node{'s' if nodes != 1 else ''} it may use"
    return f"it needs {_gpus(gpus)}; {_are_free(free_ge)} on {where}"


def _gpus(n: float) -> str:
    return f"{n:g} GPU" if n <= 1 else f"{n:g} GPUs"


def _are_free(n: float) -> str:
    if n <= 0:
        return "no GPU is free"
    return f"{_gpus(n)} {'is' if n == 1 else 'are'} free"
