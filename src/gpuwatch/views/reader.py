"""Which read path answers a window: raw while its GPU-samples are few, recorded history beyond."""

import math
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Final

from gpuwatch.core.model import Window
from gpuwatch.read.analysis import Analysis
from gpuwatch.read.history import price_cuts, read_pieces, read_sums, scope_sums
from gpuwatch.read.historytables import assemble
from gpuwatch.read.service import FleetService
from gpuwatch.sources.historystore import HistoryStore
from gpuwatch.sources.historysums import POD_IDLE_SPLIT
from gpuwatch.sources.ownseries import ROLLUP_SECONDS
from gpuwatch.surfaces.report import Report, build_history_report
from gpuwatch.views.base import FleetView, Scope, bucket_seconds
from gpuwatch.views.raw import RawView
from gpuwatch.views.recorded import Recorded, RecordedView

PRESENT_STEP_SECONDS: Final = 60  # the recorded path's present: the raw path over the window's last minute


def gpu_samples(gpus: float, window: Window) -> float:
    """What the raw path would hold for the window: GPUs × samples."""
    return gpus * window.n_samples


def recorded_bucket_seconds(window: Window) -> int:
    """The recorded path's drawn bucket: the raw path's, widened to whole hours from a quarter hour on,
    so that the hourly roll-ups answer it."""
    bucket = bucket_seconds(window)
    return bucket if bucket < ROLLUP_SECONDS // 4 else math.ceil(bucket / ROLLUP_SECONDS) * ROLLUP_SECONDS


def prefers_recorded(service: FleetService, window: Window) -> bool:
    """Whether the window holds more GPU-samples than views.raw_max_gpu_samples in sources that keep
    gpuwatch_* history: GPUs as the exporter published them at the window's end or, for a window it
    published nothing in (before it was deployed, or while it was down), as the API server counts them now:
    the raw path would read them all."""
    store = service.sources.recorded()
    if store is None:
        return False
    gpus = float(store.node_states_now(window.end)["value"].sum())
    if gpus == 0:
        gpus = float(sum(node.gpu_count for node in service.sources.cluster_state().nodes))
    return gpu_samples(gpus, window) > service.settings.views.raw_max_gpu_samples


def open_view(service: FleetService, window: Window, *, computed_at: datetime) -> FleetView:
    """The whole-fleet view of a window on the path its cost asks for (prefers_recorded): recorded
    history, or the raw path (which holds every GPU-sample in pandas). A costly window Prometheus holds
    no gpuwatch_* history for stays on the recorded path and shows that gap (the previous period of a
    month reaching before the exporter was deployed, say): recomputing it raw is what the cost forbids."""
    store = service.sources.recorded()
    if store is not None and prefers_recorded(service, window):
        return RecordedView(read_recorded(service, store, window, computed_at=computed_at))
    return RawView(analysis=service.analysis(window), computed_at=computed_at, queues=service.queue_setup())


def trend_report(service: FleetService, window: Window, scope: Scope, *, computed_at: datetime) -> Report:
    """What a view's team trends compare with: the report of `window` (the one before the view's) under
    `scope`, of which only the teams and the coverage are read (FleetView.team_changes). On the recorded
    path without a pool or product filter those come from the team, pool and node series alone: the
    per-pod families a whole report reads are left out, so its workload, namespace and pool rows are
    empty. Otherwise the window's whole view."""
    store = service.sources.recorded()
    if store is None or scope.pools or scope.products or not prefers_recorded(service, window):
        return open_view(service, window, computed_at=computed_at).scoped(scope).summary
    store = store.only(scope.clusters)  # a cluster filter: those clusters' history alone
    cuts = price_cuts(service.settings, window)
    sums = scope_sums(read_sums(store, window, pods=False, cuts=cuts), teams=scope.teams)
    history = assemble(sums, window=window, settings=service.settings, source_warnings=store.take_warnings())
    return build_history_report(history)


def read_recorded(
    service: FleetService,
    store: HistoryStore,
    window: Window,
    *,
    computed_at: datetime,
    present: Analysis | None = None,
) -> Recorded:
    """Everything a recorded view draws for the window, read once for the whole fleet (the scoped
    timelines and pods at the end when a scope first asks, once per set of teams; the per-pod families
    when a page asks, PodReader). The reads go side by side: Prometheus sums the window while this
    process builds the present from the API server. The idle pods' families (their idle GE and its held
    and abandoned split), which the default page ranks its most wasteful workloads by, start reading with
    them. `present`: the window's end already computed (the fleet's, when some of its clusters' history
    is read alone: Recorded.of_clusters)."""
    # One sample at the end, of the same length whatever the window's step: windows ending together
    # (24 h, 7 d and 30 d up to now) share it.
    step = min(window.step_seconds, PRESENT_STEP_SECONDS)
    last_step = Window(start=window.end - timedelta(seconds=step), end=window.end, step_seconds=step)
    with ThreadPoolExecutor(max_workers=4) as pool:
        pieces = pool.submit(read_pieces, store, window, cuts=price_cuts(service.settings, window))
        timeline_read = pool.submit(
            store.history_timeline, window, bucket_seconds=recorded_bucket_seconds(window)
        )
        now = pool.submit(lambda: service.analysis(last_step) if present is None else present)
        queues = pool.submit(service.queue_setup)
        node_states = pool.submit(store.node_states_now, window.end)
        team_states = pool.submit(store.team_states_now, window.end)
        pods = store.pod_reader(pieces.result())
        pods.of_teams().start("pod_idle", *POD_IDLE_SPLIT)
        sums = pool.submit(read_sums, store, window, pieces=pods.pieces, pods=False)
    timeline = timeline_read.result()
    return Recorded(
        settings=service.settings,
        window=window,
        sums=sums.result(),
        pods=pods,
        timeline=timeline,
        node_states=node_states.result(),
        team_states=team_states.result(),
        store=store,
        team_pools=lru_cache(maxsize=16)(lambda teams: store.team_pool_timeline(timeline.pieces, teams)),
        pods_now=lru_cache(maxsize=16)(lambda teams: store.pods_by_node_now(window.end, teams)),
        present=now.result(),
        computed_at=computed_at,
        source_warnings=(
            *store.take_warnings(),
            *(  # its history is read from its store; what the API server says now is not
                f"cluster {c}: API server not read ({why}); its nodes and pods now are left out, its "
                "recorded history is whole"
                for c, why in now.result().unreachable.items()
            ),
        ),
        queues=queues.result(),
        of_clusters=lru_cache(maxsize=8)(
            lambda clusters: read_recorded(
                service, store.only(clusters), window, computed_at=computed_at, present=now.result()
            )
        )
        if store.clusters()
        else None,
    )
