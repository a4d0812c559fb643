"""The demo: the simulated fleet behind the FleetSources interface, and the FleetService of one or several
simulated clusters with the demo's teams, prices and budgets."""

import threading
from dataclasses import replace
from datetime import datetime

import numpy as np
import pandas as pd

from gpuwatch.core.config import ClusterSettings, Settings
from gpuwatch.core.errors import ConfigError
from gpuwatch.core.model import KueueState, SourceWait, TeamRules, Window
from gpuwatch.read.devicehealth import HEALTH_VALUES
from gpuwatch.read.service import FleetService, FleetSources, MultiClusterSources
from gpuwatch.sim.demo import (
    DEFAULT_DEMO_CLUSTERS,
    DEMO_BUDGETS,
    DEMO_CLUSTERS,
    DEMO_HISTORY_DAYS,
    DEMO_NAMESPACE_TEAMS,
    build_demo_fleet,
    demo_price_book,
)
from gpuwatch.sim.exposition import served_columns
from gpuwatch.sim.fleet import SimulatedFleet
from gpuwatch.sim.kueuecrds import KUEUE_VERSIONS
from gpuwatch.sim.kueueobjects import kueue_objects
from gpuwatch.sim.source import SimulatedSource
from gpuwatch.sources.historystore import HistoryStore
from gpuwatch.sources.kubernetes import ClusterState
from gpuwatch.sources.kueue import state_from_raw as kueue_from_raw


def demo_settings(settings: Settings | None = None, *, end: datetime | None = None) -> Settings:
    """The demo fleet's settings: notebooks belongs to data-science (SPEC §4.1), demo prices (with the
    A100's price change when the fleet's `end` is given) and budgets, unless the user brought their own."""
    base = settings or Settings()
    namespaces = {**DEMO_NAMESPACE_TEAMS, **base.teams.namespaces}
    teams = TeamRules(
        pod_label_keys=base.teams.pod_label_keys,
        namespace_label_keys=base.teams.namespace_label_keys,
        namespaces=namespaces,
    )
    pricing = base.pricing
    if not pricing.products and not pricing.amortization:
        pricing = demo_price_book(pricing.default_usd_per_gpu_hour, end, pricing.energy)
    budgets = base.budgets
    if not budgets.monthly_usd and not budgets.idle_usd_per_hour:
        budgets = DEMO_BUDGETS
    return replace(base, teams=teams, pricing=pricing, budgets=budgets)


class SimulatedSources:
    """The simulated fleet behind the FleetSources interface (the demo)."""

    simulated = True

    def __init__(self, fleet: SimulatedFleet) -> None:
        self.fleet = fleet
        self._source = SimulatedSource(fleet)
        self._kueue: KueueState | None = None

    def cluster_state(self) -> ClusterState:
        return self._source.cluster_state()

    def node_state(self, *, namespaces: bool = False) -> ClusterState:
        return self._source.cluster_state()

    def kueue_state(self) -> KueueState:
        if self._kueue is None:  # the simulated API server's objects, parsed as a live cluster's are
            self._kueue = kueue_from_raw(kueue_objects(self.fleet), version=KUEUE_VERSIONS[0])
        return self._kueue

    def gpu_samples(self, window: Window, state: ClusterState) -> pd.DataFrame:
        return self._source.gpu_samples(window)

    def allocation_history(self, window: Window) -> pd.DataFrame | None:
        return self._source.allocation_history(window)

    def gpu_health(self, window: Window) -> pd.DataFrame:
        return simulated_health(self.fleet, window)

    def take_warnings(self) -> list[str]:
        return []

    def now(self) -> datetime:
        return self.fleet.now

    def history_start(self) -> datetime | None:
        return self.fleet.window.start

    def recorded(self) -> HistoryStore | None:
        return None  # the simulated fleet keeps no Prometheus history

    def waiting(self) -> list[SourceWait]:
        return []  # nothing outside is read

    def load(self) -> None:
        return None  # nothing to read

    def probe(self) -> None:
        return None  # always answers


# A simulated slice still draws its noise over the fleet's whole window (seconds at scale): keep a few.
_SIMULATED_HEALTH: dict[tuple[int, datetime, datetime], tuple[SimulatedFleet, pd.DataFrame]] = {}
_SIMULATED_HEALTH_LOCK = threading.Lock()


def simulated_health(fleet: SimulatedFleet, recent: Window) -> pd.DataFrame:
    """The fleet's device telemetry over `recent` (devicehealth.HEALTH_VALUES, as a live read has them)."""
    key = (id(fleet), recent.start, recent.end)
    with _SIMULATED_HEALTH_LOCK:
        hit = _SIMULATED_HEALTH.get(key)
    if hit is not None and hit[0] is fleet:
        return hit[1]
    rows = fleet.telemetry(recent)
    profile = {(g.uuid, g.gpu_instance_id): g.mig_profile for g in fleet.gpus}
    keys = zip(rows["uuid"], rows["gpu_instance_id"], strict=True)
    rows = rows.assign(
        gpu_index=rows["gpu_index"].astype("str"),
        mig_profile=[profile.get(k, "") for k in keys],
    ).reset_index(drop=True)
    # What another vendor's exporter does not serve is unknown there, as it is read live.
    vendor = rows["node"].map({n.name: n.vendor for n in fleet.nodes})
    for other in set(vendor) - {"nvidia"}:
        unserved = [c for c in HEALTH_VALUES if c in rows and c not in served_columns(other)]
        rows.loc[vendor == other, unserved] = np.nan
    with _SIMULATED_HEALTH_LOCK:
        _SIMULATED_HEALTH[key] = (fleet, rows)
        while len(_SIMULATED_HEALTH) > 4:
            _SIMULATED_HEALTH.pop(next(iter(_SIMULATED_HEALTH)))
    return rows


def demo_service(
    settings: Settings | None = None,
    fleet: SimulatedFleet | None = None,
    *,
    clusters: int | None = None,
    history_days: float = DEMO_HISTORY_DAYS,
) -> FleetService:
    """The simulated fleet (built over `history_days` up to the current hour unless given): every
    window it is asked for lies within that history, so no day is invented empty.

    Its clusters: those the settings' `clusters:` list names, else the first `clusters` of
    DEMO_CLUSTERS (default two; one when a `fleet` is given, for a given fleet is one cluster). Each
    is the demo's shape (seed 42, 43, ...; the first is `fleet` when given), read together as
    MultiClusterSources reads live ones; one cluster is unnamed, as a single live cluster is."""
    base = settings or Settings()
    if not base.clusters:
        count = clusters if clusters is not None else 1 if fleet is not None else DEFAULT_DEMO_CLUSTERS
        if not 1 <= count <= len(DEMO_CLUSTERS):
            raise ConfigError(f"the demo simulates 1 to {len(DEMO_CLUSTERS)} clusters, not {count}")
        if count > 1:
            base = replace(base, clusters=tuple(ClusterSettings(name=n) for n in DEMO_CLUSTERS[:count]))
    fleet = fleet or build_demo_fleet(days=history_days)
    settings = demo_settings(base, end=fleet.window.end)
    names = [c.name for c in settings.clusters]
    if len(names) < 2:
        return FleetService(settings=settings, sources=SimulatedSources(fleet))
    members: dict[str, FleetSources] = {names[0]: SimulatedSources(fleet)}
    for k, name in enumerate(names[1:], start=1):
        other = build_demo_fleet(seed=fleet.seed + k, end=fleet.window.end, days=history_days)
        members[name] = SimulatedSources(other)
    return FleetService(settings=settings, sources=MultiClusterSources(members))
