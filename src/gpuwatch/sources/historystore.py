"""Where the history path reads gpuwatch's own gpuwatch_* series: one store (PrometheusHistory), or several
clusters' stores read as one fleet (ClustersHistory), behind one interface (HistoryStore).

A fleet of several clusters reads each cluster's history from its own store (a store of its own, or its
series of a shared one under its matchers) and merges them: each cluster's pieces keep their own sample
counts (an hour one cluster's exporter missed is that cluster's gap alone) under piece ids of their own,
a `cluster` column on the pieces says whose, and node and pod names are qualified ("eu-1/gpu-h100-000")
as the raw path qualifies them.
"""

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import fields
from datetime import datetime
from typing import Protocol, TypeVar

import numpy as np
import pandas as pd

from gpuwatch.core.errors import PrometheusError
from gpuwatch.core.model import Window, cluster_of, qualified
from gpuwatch.sources.historysums import (
    HistorySums,
    HistoryTimeline,
    PodReader,
    history_sums,
    history_timeline,
    node_states_now,
    pods_by_node_now,
    team_pool_timeline,
    team_states_now,
)
from gpuwatch.sources.prometheus import PrometheusSource
from gpuwatch.sources.windowpieces import history_pieces, window_pieces

T = TypeVar("T")
CLUSTER: str = "cluster"  # the pieces' column naming the cluster whose history each piece is
# The columns qualified by the cluster: nodes and pods, and Kueue's ClusterQueues and cohorts (a cluster's
# Kueue objects are its own, sources.kueue): a namespace or a team spans the clusters.
NAMED: tuple[str, ...] = ("node", "pod", "cluster_queue", "cohort")


class PodFamilyReads(Protocol):
    """The per-pod families of some pieces (PodFamilies), read when asked for."""

    def read(self, *names: str) -> dict[str, pd.DataFrame]: ...

    def start(self, *names: str) -> dict[str, "Future[pd.DataFrame]"]: ...

    def totals(self, *families: str) -> dict[str, pd.DataFrame]: ...


class PodReads(Protocol):
    """The per-pod families of a window's pieces, every pod's, some teams', a few pods' (PodReader)."""

    @property
    def pieces(self) -> pd.DataFrame: ...

    def of_teams(self, teams: tuple[str, ...] = ()) -> PodFamilyReads: ...

    def at_end(self) -> PodFamilyReads: ...

    def of_pods(self, pods: Sequence[tuple[str, str]]) -> PodFamilyReads: ...


class HistoryStore(Protocol):
    """What the history path reads, whatever store (or stores) holds it."""

    @property
    def where(self) -> str:
        """Where the history is read, for messages ("prometheus at http://...")."""
        ...

    def history_pieces(self, window: Window, *, piece_seconds: int) -> pd.DataFrame: ...

    def history_sums(
        self,
        window: Window,
        *,
        pieces: pd.DataFrame,
        piece_seconds: int,
        pods: bool,
        queue_step_seconds: int | None,
    ) -> HistorySums: ...

    def history_timeline(self, window: Window, *, bucket_seconds: int) -> HistoryTimeline: ...

    def pod_reader(self, pieces: pd.DataFrame) -> PodReads: ...

    def team_pool_timeline(self, pieces: pd.DataFrame, teams: Sequence[str]) -> dict[str, pd.DataFrame]: ...

    def pods_by_node_now(self, at: datetime, teams: Sequence[str]) -> dict[str, pd.DataFrame]: ...

    def team_states_now(self, at: datetime) -> pd.DataFrame: ...

    def node_states_now(self, at: datetime) -> pd.DataFrame: ...

    def take_warnings(self) -> list[str]: ...

    def clusters(self) -> tuple[str, ...]:
        """The clusters whose history it merges (none: one cluster's, unqualified)."""
        ...

    def only(self, clusters: Sequence[str]) -> "HistoryStore":
        """The history of `clusters` alone (of those it merges; itself when it merges none)."""
        ...


class PrometheusHistory:
    """One store's gpuwatch_* history (its series under the source's scope)."""

    def __init__(self, source: PrometheusSource) -> None:
        self.source = source

    @property
    def where(self) -> str:
        scope = ", ".join(m.render() for m in self.source.scope)
        return f"prometheus at {self.source.url}" + (f" ({scope})" if scope else "")

    def history_pieces(self, window: Window, *, piece_seconds: int) -> pd.DataFrame:
        return history_pieces(self.source, window, piece_seconds=piece_seconds)

    def history_sums(
        self,
        window: Window,
        *,
        pieces: pd.DataFrame,
        piece_seconds: int,
        pods: bool,
        queue_step_seconds: int | None,
    ) -> HistorySums:
        return history_sums(
            self.source,
            window,
            piece_seconds=piece_seconds,
            pieces=pieces,
            pods=pods,
            queue_step_seconds=queue_step_seconds,
        )

    def history_timeline(self, window: Window, *, bucket_seconds: int) -> HistoryTimeline:
        return history_timeline(self.source, window, bucket_seconds=bucket_seconds)

    def pod_reader(self, pieces: pd.DataFrame) -> PodReader:
        return PodReader(self.source, pieces)

    def team_pool_timeline(self, pieces: pd.DataFrame, teams: Sequence[str]) -> dict[str, pd.DataFrame]:
        return team_pool_timeline(self.source, pieces=pieces, teams=teams)

    def pods_by_node_now(self, at: datetime, teams: Sequence[str]) -> dict[str, pd.DataFrame]:
        return pods_by_node_now(self.source, at, teams=teams)

    def team_states_now(self, at: datetime) -> pd.DataFrame:
        return team_states_now(self.source, at)

    def node_states_now(self, at: datetime) -> pd.DataFrame:
        return node_states_now(self.source, at)

    def take_warnings(self) -> list[str]:
        return self.source.take_warnings()

    def clusters(self) -> tuple[str, ...]:
        return ()

    def only(self, clusters: Sequence[str]) -> HistoryStore:
        return self


class ClustersHistory:
    """Several clusters' history as one fleet's: each cluster's read from its own store side by side,
    merged (pieces apart under a `cluster` column, node and pod names qualified).

    A cluster whose store fails is read no more (`failed`, with a warning): its pieces count no sample,
    so its hours are a gap of its own (its `clusters[]` row says no history was read) and the other
    clusters' stay whole. Only when every cluster's store fails is the error raised."""

    def __init__(self, stores: Mapping[str, HistoryStore]) -> None:
        self.stores = dict(stores)
        self.failed: dict[str, str] = {}  # cluster -> why its store could not be read
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        return "; ".join(f"cluster {c}: {s.where}" for c, s in self.stores.items())

    def history_pieces(self, window: Window, *, piece_seconds: int) -> pd.DataFrame:
        parts = self._each(lambda s: s.history_pieces(window, piece_seconds=piece_seconds))
        return merged_pieces(self._with_gaps(parts, window, piece_seconds))

    def history_sums(
        self,
        window: Window,
        *,
        pieces: pd.DataFrame,
        piece_seconds: int,
        pods: bool,
        queue_step_seconds: int | None,
    ) -> HistorySums:
        parts = self._each_own(
            pieces,
            lambda s, own: s.history_sums(
                window,
                pieces=own,
                piece_seconds=piece_seconds,
                pods=pods,
                queue_step_seconds=queue_step_seconds,
            ),
        )
        # A cluster whose store failed since its pieces were read: none of its samples count.
        failed = pieces[CLUSTER].isin(list(self.failed))
        return merged_sums(parts, pieces.assign(samples=pieces["samples"].where(~failed, 0.0)))

    def history_timeline(self, window: Window, *, bucket_seconds: int) -> HistoryTimeline:
        """Each cluster's buckets under ids of their own (their sample counts are theirs): a view sums the
        clusters' bucket means at each bucket start. A cluster whose store failed is left out of what is
        drawn (its clusters[] row and a warning say so), as a cluster whose API server fails is."""
        parts = self._each(lambda s: s.history_timeline(window, bucket_seconds=bucket_seconds))
        pieces = merged_pieces({c: t.pieces for c, t in parts.items()})
        offsets = _offsets({c: len(t.pieces) for c, t in parts.items()})
        frames = {
            f.name: concat_clusters({c: _offset(getattr(t, f.name), offsets[c]) for c, t in parts.items()})
            for f in fields(HistoryTimeline)
            if f.name != "pieces"
        }
        return HistoryTimeline(pieces=pieces, **frames)

    def pod_reader(self, pieces: pd.DataFrame) -> "ClustersPodReader":
        return ClustersPodReader(
            {c: s.pod_reader(own_pieces(pieces, c)) for c, s in self.stores.items() if c not in self.failed},
            pieces,
        )

    def team_pool_timeline(self, pieces: pd.DataFrame, teams: Sequence[str]) -> dict[str, pd.DataFrame]:
        parts = self._each_own(pieces, lambda s, own: s.team_pool_timeline(own, teams))
        return _merged_families(parts)

    def pods_by_node_now(self, at: datetime, teams: Sequence[str]) -> dict[str, pd.DataFrame]:
        return _merged_families(self._each(lambda s: s.pods_by_node_now(at, teams)))

    def team_states_now(self, at: datetime) -> pd.DataFrame:
        states = concat_clusters(self._each(lambda s: s.team_states_now(at)))
        return states.groupby(["team", "state"], as_index=False, sort=True).agg(value=("value", "sum"))

    def node_states_now(self, at: datetime) -> pd.DataFrame:
        return concat_clusters(self._each(lambda s: s.node_states_now(at)))

    def take_warnings(self) -> list[str]:
        failed = [
            f"cluster {c}: gpuwatch_* history not read ({why}); its hours are in no sum of this report"
            for c, why in self.failed.items()
        ]
        return [*failed, *(f"cluster {c}: {w}" for c, s in self.stores.items() for w in s.take_warnings())]

    def clusters(self) -> tuple[str, ...]:
        return tuple(self.stores)

    def only(self, clusters: Sequence[str]) -> HistoryStore:
        """Those of `clusters` it merges, still merged (names qualified, even one cluster's); all of them
        when it merges none of `clusters`."""
        kept = {c: s for c, s in self.stores.items() if c in clusters}
        return ClustersHistory(kept) if kept else self

    def _each(self, read: Callable[[HistoryStore], T]) -> dict[str, T]:
        """read() of every cluster's store, side by side."""
        return self._each_own(None, lambda s, _: read(s))

    def _each_own(
        self, pieces: pd.DataFrame | None, read: Callable[[HistoryStore, pd.DataFrame], T]
    ) -> dict[str, T]:
        """read() of every cluster's store not failed over its own pieces of merged `pieces`, side by
        side; a store that fails now joins `failed`, unless every one has."""
        stores = {c: s for c, s in self.stores.items() if c not in self.failed}
        with ThreadPoolExecutor(max_workers=max(1, len(stores))) as pool:
            futures = {
                c: pool.submit(read, s, pd.DataFrame() if pieces is None else own_pieces(pieces, c))
                for c, s in stores.items()
            }
        out: dict[str, T] = {}
        errors: list[PrometheusError] = []
        for c, future in futures.items():
            try:
                out[c] = future.result()
            except PrometheusError as e:
                errors.append(e)
                with self._lock:
                    self.failed[c] = str(e)
        if not out:
            raise errors[0] if errors else PrometheusError("no cluster's gpuwatch_* history could be read")
        return out

    def _with_gaps(
        self, parts: Mapping[str, pd.DataFrame], window: Window, piece_seconds: int
    ) -> dict[str, pd.DataFrame]:
        """Every cluster's pieces in cluster order, a failed cluster's the window's pieces of no sample."""
        template = next(iter(parts.values()))
        gap = window_pieces(window, piece_seconds=piece_seconds).assign(
            grid_seconds=int(template["grid_seconds"].min()) if len(template) else piece_seconds,
            rollup="",
            resolution_seconds=int(template["resolution_seconds"].min()) if len(template) else piece_seconds,
            samples=0.0,
        )
        return {c: parts[c] if c in parts else gap[list(template.columns)] for c in self.stores}


class ClustersPodReader:
    """PodReader of merged pieces: each cluster's pods read from its store, their names qualified."""

    def __init__(self, readers: Mapping[str, PodReads], pieces: pd.DataFrame) -> None:
        self.readers = dict(readers)
        self.pieces = pieces

    def of_teams(self, teams: tuple[str, ...] = ()) -> "ClustersPodFamilies":
        return ClustersPodFamilies({c: r.of_teams(teams) for c, r in self.readers.items()})

    def at_end(self) -> "ClustersPodFamilies":
        return ClustersPodFamilies({c: r.at_end() for c, r in self.readers.items()})

    def of_pods(self, pods: Sequence[tuple[str, str]]) -> "ClustersPodFamilies":
        """These pods' families (namespace, qualified pod), each read from its own cluster's store."""
        if not pods:
            raise ValueError("of_pods() needs at least one pod")
        own: dict[str, list[tuple[str, str]]] = {}
        for namespace, pod in pods:
            own.setdefault(cluster_of(pod), []).append((namespace, pod.partition("/")[2]))
        return ClustersPodFamilies(
            {c: self.readers[c].of_pods(p) for c, p in own.items() if c in self.readers}
        )


class ClustersPodFamilies:
    """PodFamilies of several clusters: each family read from every cluster side by side, then merged."""

    def __init__(self, families: Mapping[str, PodFamilyReads]) -> None:
        self.families = dict(families)

    def read(self, *names: str) -> dict[str, pd.DataFrame]:
        return {n: f.result() for n, f in self.start(*names).items()}

    def start(self, *names: str) -> dict[str, "Future[pd.DataFrame]"]:
        started = {c: f.start(*names) for c, f in self.families.items()}  # every cluster's reads begin now
        wanted = names or tuple(next(iter(started.values()), {}))

        def merged(name: str) -> pd.DataFrame:
            return concat_clusters({c: reads[name].result() for c, reads in started.items()})

        pool = ThreadPoolExecutor(max_workers=max(1, len(wanted)))
        out = {n: pool.submit(merged, n) for n in wanted}
        pool.shutdown(wait=False)  # its threads end with the merges
        return out

    def totals(self, *families: str) -> dict[str, pd.DataFrame]:
        parts = {c: f.totals(*families) for c, f in self.families.items()}
        sums = pd.concat([p["namespace_sums"] for p in parts.values()], ignore_index=True)
        pods = pd.concat([p["namespace_pods"] for p in parts.values()], ignore_index=True)
        return {"namespace_sums": sums, "namespace_pods": _pods_per_namespace(pods)}


def own_pieces(pieces: pd.DataFrame, cluster: str) -> pd.DataFrame:
    """A cluster's pieces of merged pieces (their ids kept: what is read of them carries those ids)."""
    return pieces[pieces[CLUSTER] == cluster].drop(columns=CLUSTER).reset_index(drop=True)


def merged_pieces(parts: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Every cluster's pieces as one frame: ids 0, 1, ... in cluster order, the cluster in CLUSTER."""
    frames = [p.assign(**{CLUSTER: c}) for c, p in parts.items()]
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame({"piece": [], CLUSTER: []})
    return out.assign(piece=np.arange(len(out), dtype=np.int64))


def qualified_rows(frame: pd.DataFrame, cluster: str) -> pd.DataFrame:
    """A cluster's rows with their NAMED columns (node, pod, ClusterQueue, cohort) qualified by the cluster
    (a categorical's categories renamed, a column of strings concatenated: never a Python loop per row)."""
    out = frame.copy()
    for column in NAMED:
        if column not in out:
            continue
        values = out[column]
        if isinstance(values.dtype, pd.CategoricalDtype):
            out[column] = values.cat.rename_categories(
                [qualified(cluster, str(c)) for c in values.cat.categories]
            )
        else:
            text = values.astype("str")
            out[column] = text.where(text.eq(""), f"{cluster}/" + text)
    return out


def concat_clusters(parts: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The clusters' frames of one kind as one, their names qualified."""
    frames = [qualified_rows(f, c) for c, f in parts.items()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def merged_sums(parts: Mapping[str, HistorySums], pieces: pd.DataFrame) -> HistorySums:
    """The clusters' sums over their own pieces of merged `pieces` as one fleet's."""
    frames = {
        f.name: concat_clusters({c: getattr(s, f.name) for c, s in parts.items()})
        for f in fields(HistorySums)
        if f.name != "pieces"
    }
    # The fleet's of what is not a sum: a pool's largest free block is its largest cluster's, its vendor one.
    largest = frames["largest_free_block_now"]
    frames["largest_free_block_now"] = largest.groupby("pool", as_index=False).agg(value=("value", "max"))
    frames["pool_info_now"] = frames["pool_info_now"].drop_duplicates(["pool", "vendor"], ignore_index=True)
    tainted = frames["tainted_nodes_now"]
    frames["tainted_nodes_now"] = tainted.groupby(["pool", "taint"], as_index=False).agg(
        value=("value", "sum")
    )
    frames["namespace_pods"] = _pods_per_namespace(frames["namespace_pods"])
    return HistorySums(pieces=pieces, **frames)


def _pods_per_namespace(pods: pd.DataFrame) -> pd.DataFrame:
    """namespace, team, value: the clusters' pods seen, summed (a pod is its own cluster's alone)."""
    return pods.groupby(["namespace", "team"], as_index=False, sort=True).agg(value=("value", "sum"))


def _merged_families(parts: Mapping[str, Mapping[str, pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    names = next(iter(parts.values()), {})
    return {n: concat_clusters({c: p[n] for c, p in parts.items()}) for n in names}


def _offsets(counts: Mapping[str, int]) -> dict[str, int]:
    """Each cluster's first piece id when their pieces are numbered one after another."""
    starts = np.cumsum([0, *counts.values()])[:-1]
    return {c: int(s) for c, s in zip(counts, starts, strict=True)}


def _offset(frame: pd.DataFrame, offset: int) -> pd.DataFrame:
    return frame.assign(piece=frame["piece"] + offset) if offset and "piece" in frame else frame
