"""Long-window reports from gpuwatch's own low-cardinality gpuwatch_* series (SPEC §4.3), no raw DCGM:
the store read in pieces (cut where a price changes), their sums, narrowed to a scope and assembled."""

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import fields, replace
from datetime import datetime
from itertools import pairwise
from typing import Any

import numpy as np
import pandas as pd

from gpuwatch.analytics.queuetables import queue_step
from gpuwatch.core.config import Settings
from gpuwatch.core.errors import ConfigError, DataError
from gpuwatch.core.model import Window, utc
from gpuwatch.read.historypieces import PARTIAL_PIECE_RATIO, SampleHours, _iso, _piece_prices
from gpuwatch.read.historytables import History, assemble
from gpuwatch.sources.historystore import CLUSTER, HistoryStore, PrometheusHistory
from gpuwatch.sources.historysums import POD_IDLE_SPLIT, PODS_SEEN, HistorySums, pod_totals
from gpuwatch.sources.prometheus import PrometheusSource
from gpuwatch.sources.windowpieces import HISTORY_PIECE_SECONDS

# read_history()'s levels of detail: the rows a report needs, of the finest kind first.
WORKLOAD, NAMESPACE, TEAM = DETAILS = ("workload", "namespace", "team")


class NoHistoryError(DataError):
    """Prometheus holds no gpuwatch_* samples for the window (`gpuwatch export` was not scraped then)."""


def wants_history(source: str, *, demo: bool = False, costly: Callable[[], bool] = lambda: False) -> bool:
    """Whether `--source` (history, raw or auto) asks for the history path; auto asks `costly()`, whether
    the window holds too many GPU-samples for the raw path (views.reader.prefers_recorded)."""
    if source not in ("history", "raw", "auto"):
        raise ConfigError(f"--source must be history, raw or auto, got {source!r}")
    if source == "history" and demo:
        raise ConfigError("the simulated fleet keeps no Prometheus history: use --source raw with --demo")
    if source == "auto":
        return not demo and costly()
    return source == "history"


def no_history(store: HistoryStore, window: Window) -> NoHistoryError:
    """The error of a store that holds none of the window."""
    return NoHistoryError(
        f"{store.where} holds no gpuwatch_* series from {_iso(window.start)} to "
        f"{_iso(window.end)} (was `gpuwatch export` scraped?)"
    )


@contextmanager
def history_store(settings: Settings, store: HistoryStore | None) -> Iterator[HistoryStore]:
    """`store`, or else the history in the Prometheus the settings name (closed when done)."""
    if store is not None:
        yield store
        return
    if not settings.prometheus.url:
        raise ConfigError(
            "no Prometheus URL: pass --prometheus-url, set GPUWATCH_PROMETHEUS_URL or the config"
        )
    own = PrometheusSource.from_settings(settings.prometheus)
    try:
        yield PrometheusHistory(own)
    finally:
        own.close()


def read_history(
    settings: Settings,
    window: Window,
    *,
    store: HistoryStore | None = None,
    piece_seconds: int = HISTORY_PIECE_SECONDS,
    detail: str = WORKLOAD,
) -> History:
    """The window from gpuwatch_* series in `store` (default: the Prometheus the settings name);
    NoHistoryError when there are none in it.

    `detail` says which rows it needs: WORKLOAD all; NAMESPACE all but the workload rows (left empty);
    TEAM all but the workload and namespace rows. The fleet, team and pool rows are the same at each:
    below WORKLOAD they come from sums Prometheus makes per namespace and from the idle pods' families
    (a tenth of the pods), not from every pod's families (a month's ~50,000 pods, several times over),
    which a report writing no workload row need not read."""
    with history_store(settings, store) as store:
        cuts = price_cuts(settings, window)
        if detail not in DETAILS:
            raise ConfigError(f"detail must be one of {', '.join(DETAILS)}, got {detail!r}")
        held_at_end = None
        if detail == WORKLOAD:
            sums = read_sums(store, window, piece_seconds=piece_seconds, cuts=cuts)
            held_at_end = _held_at_end(store, sums.pieces)
        else:
            sums = _namespace_sums(store, window, piece_seconds=piece_seconds, cuts=cuts, detail=detail)
        if not (sums.pieces["samples"] > 0).any():
            raise no_history(store, window)
        history = assemble(
            sums,
            window=window,
            settings=settings,
            source_warnings=store.take_warnings(),
            held_at_end=held_at_end,
        )
        if detail == TEAM:  # its namespace sums hold the busy GE alone (the pools'): no namespace row
            tables = history.tables
            history = replace(history, tables={**tables, "namespace": tables["namespace"][0:0]})
        return replace(history, workloads_read=detail == WORKLOAD)


def _held_at_end(store: HistoryStore, pieces: pd.DataFrame) -> set[tuple[str, str]]:
    """The pods (namespace, pod) holding GPUs in the exporter's last cycle by the window's end."""
    last = store.pod_reader(pieces).at_end().read("pod_last_allocated")["pod_last_allocated"]
    held = last[last["value"] > 0]
    return set(zip(held["namespace"], held["pod"], strict=True))


def _namespace_sums(
    store: HistoryStore, window: Window, *, piece_seconds: int, cuts: Sequence[datetime], detail: str
) -> HistorySums:
    """read_sums() with the per-pod families left out, and the namespace sums and pods seen
    (PodFamilies.totals: from the namespace roll-ups where the rules record them), read side by side:
    all of them at NAMESPACE, at TEAM the busy GE (the pools' used GPU-hours), the idle split and the
    pods."""
    pieces = read_pieces(store, window, piece_seconds=piece_seconds, cuts=cuts)
    pods = store.pod_reader(pieces).of_teams()
    wanted = ("used", "idle_held", "idle_abandoned", PODS_SEEN) if detail == TEAM else ()
    with ThreadPoolExecutor(max_workers=1) as pool:
        totals = pool.submit(pods.totals, *wanted)
        sums = read_sums(store, window, piece_seconds=piece_seconds, pieces=pieces, pods=False)
    return replace(sums, **totals.result())


def read_pieces(
    store: HistoryStore,
    window: Window,
    *,
    piece_seconds: int = HISTORY_PIECE_SECONDS,
    cuts: Sequence[datetime] = (),
) -> pd.DataFrame:
    """The window's history pieces; where Prometheus holds no gpuwatch_* samples they count none (a
    window wholly without history reads as one gap, never as zeros). No piece spans one of `cuts` (the
    instants a price changes, price_cuts()): the window is read as the stretches between them."""
    inside = sorted({utc(c) for c in cuts if window.start < utc(c) < window.end})
    bounds = [window.start, *inside, window.end]
    parts = [
        merge_covered(
            store.history_pieces(
                Window(start=a, end=b, step_seconds=window.step_seconds), piece_seconds=piece_seconds
            )
        )
        for a, b in pairwise(bounds)
    ]
    if len(parts) == 1:
        return parts[0]
    out = pd.concat(parts, ignore_index=True)
    return out.assign(piece=np.arange(len(out), dtype=np.int64)).astype(parts[0].dtypes.to_dict())


def price_cuts(settings: Settings, window: Window) -> tuple[datetime, ...]:
    """The instants inside the window at which a dated price or energy tariff takes effect, or a
    commitment begins or ends: with pieces cut there (read_pieces), each piece of a pool is priced at
    one rate, the one in force (SPEC: every GPU-hour at the price of its sample's time)."""
    changes = {when for _, when in settings.pricing.changes(window.start, window.end)}
    tariff = settings.pricing.energy
    changes |= {
        w
        for w, _ in (tariff.usd_per_kwh if tariff else ())
        if w is not None and window.start < w <= window.end
    }
    return tuple(sorted(changes))


def read_sums(
    store: HistoryStore,
    window: Window,
    *,
    piece_seconds: int = HISTORY_PIECE_SECONDS,
    pieces: pd.DataFrame | None = None,
    pods: bool = True,
    cuts: Sequence[datetime] = (),
) -> HistorySums:
    """history_sums() of the window over read_pieces() (or `pieces`), the queues' usage on the queue grid."""
    if pieces is None:
        pieces = read_pieces(store, window, piece_seconds=piece_seconds, cuts=cuts)
    return store.history_sums(
        window,
        piece_seconds=piece_seconds,
        pieces=pieces,
        pods=pods,
        queue_step_seconds=queue_step(window),
    )


def merge_covered(pieces: pd.DataFrame, *, covered_ratio: float = PARTIAL_PIECE_RATIO) -> pd.DataFrame:
    """history_pieces() for window sums: back-to-back roll-up pieces of one level that the exporter covered
    (at least `covered_ratio` of them) and whose samples each stand for the same time, read as one piece,
    so a month is one range per family and level, not one per day. Sums stay exact: GE-hours are
    Σ samples × that time. Pieces without samples or covered in part stay apart (coverage names them)."""
    covered = pieces["samples"] * pieces["resolution_seconds"] >= covered_ratio * pieces["seconds"]
    per_sample = pieces["piece"].map(SampleHours(pieces).per_sample).where((pieces["rollup"] != "") & covered)
    merged: list[dict[str, Any]] = []
    weights: list[float] = []
    for row, weight in zip(pieces.to_dict("records"), per_sample.tolist(), strict=True):
        # (a cluster's pieces are never merged with another's: CLUSTER, in a fleet of several)
        same_level = bool(merged) and (merged[-1]["rollup"], merged[-1].get(CLUSTER)) == (
            row["rollup"],
            row.get(CLUSTER),
        )
        if same_level and math.isclose(weights[-1], weight, rel_tol=1e-9):
            last = merged[-1]
            last.update(end=row["end"], seconds=last["seconds"] + row["seconds"])
            last["samples"] += row["samples"]
        else:
            merged.append({str(k): v for k, v in row.items()})
            weights.append(weight)
    out = pd.DataFrame(merged, columns=pieces.columns)
    return out.assign(piece=np.arange(len(out), dtype=np.int64)).astype(pieces.dtypes.to_dict())


def scope_sums(
    sums: HistorySums, *, teams: Sequence[str] = (), pools: Sequence[str] | None = None
) -> HistorySums:
    """The sums narrowed to teams and pools, as the raw path's filters narrow an analysis: pods, pending
    pods and team series to the teams; pool, node and pod series to the pools. Under a team filter the
    pool ledger holds the teams' own GE only (allocated unknown, idle, active, from their pods' series);
    under a pool filter the team series are rebuilt from the pods in those pools. pools=None: all.
    Narrowing needs the per-pod families: the pods per team and busy GE per pool are counted from them."""
    if not teams and pools is None:
        return sums

    def keep(frame: pd.DataFrame) -> pd.DataFrame:
        mask = pd.Series(True, index=frame.index)
        if teams and "team" in frame:
            mask &= frame["team"].isin(teams)
        if pools is not None and "pool" in frame:
            mask &= frame["pool"].isin(pools)
        return frame[mask].reset_index(drop=True)

    whole = ("pieces", "queue_usage")  # a queue's quota is its ClusterQueue's, as the raw path's
    narrowed = {f.name: keep(getattr(sums, f.name)) for f in fields(sums) if f.name not in whole}
    nodes = set(narrowed["nodes_now"]["node"])
    for name in ("capacity_sum", "reporting_sum"):
        frame = narrowed[name]
        narrowed[name] = frame if pools is None else frame[frame["node"].isin(nodes)].reset_index(drop=True)
    pods = {
        k: narrowed[k]
        for k in (
            "pod_allocated",
            "pod_idle",
            "pod_unknown",
            "pod_used",
            "pod_power",
            "pod_last_allocated",
            *POD_IDLE_SPLIT,
        )
    }
    narrowed |= pod_totals(pods)
    if teams:  # the teams' share of their GPUs' energy: the scope's whole energy (nothing unheld)
        narrowed["pool_power"], narrowed["pool_energy_cost"] = (
            narrowed["team_power"],
            narrowed["team_energy_cost"],
        )
    if pools is not None:  # the team series span pools: the teams' energy within these is not recorded
        narrowed["team_power"] = narrowed["team_power"].iloc[0:0]
        narrowed["team_energy_cost"] = narrowed["team_energy_cost"].iloc[0:0]
    if teams:
        narrowed["pool_states"] = _allocated_states(pods, ("pool",))
    if pools is not None:
        narrowed["team_states"] = _allocated_states(pods, ("team",))
        narrowed["team_used"] = _grouped(pods["pod_used"], ("team",))
        price = _piece_prices(sums)
        for name, family in (("team_cost", "pod_allocated"), ("team_idle_cost", "pod_idle")):
            frame = pods[family].merge(price, on=["piece", "pool"], how="left")
            priced = frame.assign(value=frame["value"] * frame["usd_per_gpu_hour"])
            narrowed[name] = _grouped(priced, ("team",))
    return HistorySums(pieces=sums.pieces, queue_usage=sums.queue_usage, **narrowed)


def _grouped(frame: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Σ value per piece and keys."""
    return frame.groupby(["piece", *keys], as_index=False, sort=True).agg(value=("value", "sum"))


def _allocated_states(pods: Mapping[str, pd.DataFrame], keys: Sequence[str]) -> pd.DataFrame:
    """piece, keys, state, value: the pods' GE per allocated state (active = allocated − idle − unknown)."""
    allocated = _grouped(pods["pod_allocated"], keys).set_index(["piece", *keys])["value"]
    idle = _grouped(pods["pod_idle"], keys).set_index(["piece", *keys])["value"]
    unknown = _grouped(pods["pod_unknown"], keys).set_index(["piece", *keys])["value"]
    idle, unknown = idle.reindex(allocated.index).fillna(0.0), unknown.reindex(allocated.index).fillna(0.0)
    active = (allocated - idle - unknown).clip(lower=0.0)
    states = {"allocated_unknown": unknown, "allocated_idle": idle, "allocated_active": active}
    parts = [v.rename("value").reset_index().assign(state=state) for state, v in states.items()]
    return pd.concat(parts, ignore_index=True)[["piece", *keys, "state", "value"]]
