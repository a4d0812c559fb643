"""GPU samples × allocations → the attributed per-GPU timeline (SPEC §3 "Allocated", evidence combined)."""

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuwatch.core.model import MIG_SLICES_PER_GPU, mig_profile_slices
from gpuwatch.core.schema import ATTRIBUTED

_KEY = ["namespace", "pod"]
_UNIT = ["node", "uuid", "gpu_instance_id"]
# Summed GE shares carry float noise (7 × 1/7 is not exactly 1): a deficit below this is none.
_EPSILON_GE = 1e-9


@dataclass(frozen=True, slots=True)
class Attribution:
    """The attributed timeline and what could not be attributed."""

    attributed: pd.DataFrame  # ATTRIBUTED contract
    unattributed: pd.DataFrame  # timestamp, node, uuid, gpu_instance_id, ge, util_ratio: busy, no pod
    pods_without_telemetry: int  # running pods attributed from the API server alone (unit unknown)


def attribute(
    *,
    gpu_samples: pd.DataFrame,
    pods: pd.DataFrame,
    nodes: pd.DataFrame,
    sample_times: pd.DatetimeIndex,
    namespace_teams: Mapping[str, str],
    history: pd.DataFrame | None = None,
    busy_threshold: float = 0.05,
) -> Attribution:
    """Combine the three kinds of evidence of who held which GPU when.

    gpu_samples: timestamp, node, uuid, gpu_instance_id, mig_profile, util_ratio, namespace, pod —
      one row per unit and sample, or per unit, pod and sample for time-sliced GPUs (vgpu copies);
      namespace/pod "" where DCGM named no workload; with fb_used_bytes, the attributed rows carry
      their unit's (NaN on an unknown unit or where DCGM reported none).
    pods: namespace, pod, team, node, pool, requested_ge, started_at — pods running now (API server).
    nodes: node, pool, replicas — to size time-slice replicas and name pools.
    history: timestamp, namespace, pod, team, node, pool, ge_share — gpuwatch's own allocation series.
    namespace_teams: team of a namespace when the pod's own labels are unknown (pod gone).

    DCGM labels say which unit a pod held and when; a pod running now holds its requested GE from
    its start even where DCGM labels are missing (on its last known units, else on an unknown unit
    with unknown utilization); the history series covers gone pods DCGM no longer shows. Where the
    history or the API server says how many GE a pod held, DCGM's units are scaled to it (a GPU
    shared by fractional requests shows each pod a whole GPU). Per GPU, not per pod: a unit of a
    multi-GPU pod that DCGM does not report while it reports the pod's others is still held, with
    its own utilization, unknown without a sample (_fill_silent_units).
    """
    replicas = nodes.set_index("node")["replicas"] if len(nodes) else pd.Series(dtype="int64")
    pool_of = nodes.set_index("node")["pool"] if len(nodes) else pd.Series(dtype="str")
    # Key columns as categoricals with one shared dtype each: joins and de-duplication on integer
    # codes instead of millions of strings.
    dtypes = _shared_dtypes([gpu_samples, pods, history])
    needed = ["timestamp", *_UNIT, *_KEY, "util_ratio"] + [
        c for c in ("mig_profile", "fb_used_bytes") if c in gpu_samples
    ]
    samples = _categorize(gpu_samples[needed], dtypes)
    pods = _categorize(pods, dtypes)
    history = None if history is None else _categorize(history, dtypes)
    samples["unit_ge"] = _unit_ge(samples, replicas)
    units = samples.drop_duplicates(["timestamp", *_UNIT])
    util_by_unit = units.set_index(["timestamp", *_UNIT])["util_ratio"]

    dcgm = samples[samples["pod"].ne("") & samples["namespace"].ne("")]
    dcgm = dcgm.groupby(["timestamp", *_KEY, *_UNIT], as_index=False, sort=False).agg(
        ge_share=("unit_ge", "sum"), util_ratio=("util_ratio", "first")
    )
    dcgm["ge_share"] = dcgm["ge_share"].clip(upper=1.0)
    declared = _declared(dcgm, pods, history)
    dcgm["ge_share"] = _declared_shares(dcgm, declared)
    teams = pods.set_index(_KEY)["team"] if len(pods) else pd.Series(dtype="str")

    silent = _fill_silent_units(dcgm, declared, pods, history, util_by_unit, dtypes)
    filled = _fill_running(dcgm, pods, sample_times, util_by_unit, dtypes)
    parts = [dcgm, silent, *filled]
    if history is not None and len(history):
        covered = pd.concat([p[["timestamp", *_KEY]] for p in parts], ignore_index=True).drop_duplicates()
        hist = history.merge(covered, on=["timestamp", *_KEY], how="left", indicator=True)
        hist = hist[hist["_merge"] == "left_only"].drop(columns="_merge")
        hist = hist.assign(
            uuid=_blank(len(hist), dtypes["uuid"]),
            gpu_instance_id=_blank(len(hist), dtypes["gpu_instance_id"]),
            util_ratio=np.nan,
        )
        parts.append(hist[["timestamp", *_KEY, *_UNIT, "ge_share", "util_ratio", "team", "pool"]])
    out = pd.concat(parts, ignore_index=True)
    out["team"] = _resolve_team(out, teams, history, namespace_teams)
    pool_from_node = out["node"].map(pool_of)
    if "pool" in out:
        out["pool"] = pool_from_node.fillna(out["pool"]).fillna("unknown")
    else:
        out["pool"] = pool_from_node.fillna("unknown")
    out = out[list(ATTRIBUTED.columns)].sort_values(["timestamp", *_KEY, "uuid", "gpu_instance_id"])
    out = out.reset_index(drop=True)
    for column in ("team", "pool"):
        out[column] = out[column].astype("str")
    out["ge_share"] = out["ge_share"].astype("float64")
    out["util_ratio"] = out["util_ratio"].astype("float64")
    if "fb_used_bytes" in units:
        # The unit's framebuffer at the sample (a time-sliced GPU's is shared: each holder sees it all).
        fb_by_unit = units.set_index(["timestamp", *_UNIT])["fb_used_bytes"]
        at = pd.MultiIndex.from_frame(out[["timestamp", *_UNIT]])
        out["fb_used_bytes"] = fb_by_unit.reindex(at).to_numpy(dtype=np.float64)

    held_units = out.loc[out["uuid"].ne(""), ["timestamp", *_UNIT]].drop_duplicates()
    busy = units.merge(held_units, on=["timestamp", *_UNIT], how="left", indicator=True)
    busy = busy[(busy["_merge"] == "left_only") & (busy["util_ratio"] >= busy_threshold)]
    unattributed = busy[["timestamp", *_UNIT, "util_ratio"]].assign(
        ge=busy["unit_ge"] * _replicas_of(busy, replicas)
    )
    unattributed = unattributed.astype({c: "str" for c in _UNIT})
    pods_without_telemetry = int(sum(len(f[f["uuid"].eq("")][_KEY].drop_duplicates()) for f in filled))
    return Attribution(
        attributed=ATTRIBUTED.check(out),
        unattributed=unattributed.reset_index(drop=True),
        pods_without_telemetry=pods_without_telemetry,
    )


_CATEGORICAL = ("namespace", "pod", "node", "uuid", "gpu_instance_id")


def _shared_dtypes(frames: list[pd.DataFrame | None]) -> dict[str, pd.CategoricalDtype]:
    """One categorical dtype per key column over every frame (with "" for an absent value)."""
    out = {}
    for column in _CATEGORICAL:
        # Unique values first: a categorical column is never spelled out as millions of strings.
        values = [pd.unique(f[column]).astype("str") for f in frames if f is not None and column in f]
        categories = pd.Index(np.concatenate([np.array([""], dtype=object), *values])).unique()
        out[column] = pd.CategoricalDtype(categories.astype("str").sort_values())  # sorts like strings
    return out


def _categorize(frame: pd.DataFrame, dtypes: Mapping[str, pd.CategoricalDtype]) -> pd.DataFrame:
    return frame.astype({c: d for c, d in dtypes.items() if c in frame})


def _blank(n: int, dtype: pd.CategoricalDtype) -> pd.Categorical:
    return pd.Categorical.from_codes(np.full(n, dtype.categories.get_loc(""), dtype=np.int64), dtype=dtype)


def _replicas_of(frame: pd.DataFrame, replicas: pd.Series) -> pd.Series:
    """Time-slice replicas of each row's node (1 where unknown or not shared)."""
    return frame["node"].map(replicas).fillna(1).clip(lower=1).astype("float64")


def _unit_ge(samples: pd.DataFrame, replicas: pd.Series) -> pd.Series:
    """GE of one DCGM row: a MIG instance is slices/7; a vgpu copy one replica; a whole GPU 1."""
    profiles = (
        samples["mig_profile"].fillna("") if "mig_profile" in samples else pd.Series("", index=samples.index)
    )
    slices = {p: mig_profile_slices(p) / MIG_SLICES_PER_GPU for p in profiles.unique() if p}
    mig_ge = profiles.map(slices).astype("float64")
    whole_ge = 1.0 / _replicas_of(samples, replicas)
    return mig_ge.fillna(whole_ge)


def _declared_shares(dcgm: pd.DataFrame, declared: pd.Series) -> pd.Series:
    """ge_share of DCGM rows scaled, per pod and sample, to the GE the pod is known to hold.

    Known (`declared`, _declared() per row) = its own history series at that sample, else its API
    request while it runs; rows of pods known neither way keep DCGM's count (a whole unit, a MIG
    instance's slices, one replica).
    """
    per_sample = dcgm.groupby(["timestamp", *_KEY])["ge_share"].transform("sum")
    # Only ever down: a pod seen on fewer units than it requested keeps whole units (never > 1 GE each).
    scale = (declared / per_sample).where(declared.notna() & (per_sample > 0), 1.0).clip(upper=1.0)
    return (dcgm["ge_share"] * scale).astype("float64")


def _declared(
    keys: pd.DataFrame, pods: pd.DataFrame, history: pd.DataFrame | None, *, since_start: bool = False
) -> pd.Series:
    """GE the pod of each row (timestamp, namespace, pod) is known to hold at its sample: its own
    history series there, else its API request (since_start: only from its first sample at or after
    its startTime, where the API server says it holds them); NaN where neither says."""
    declared = pd.Series(np.nan, index=keys.index)
    if history is not None and len(history):
        held = history.groupby(["timestamp", *_KEY], as_index=False, observed=True).agg(
            declared=("ge_share", "sum")
        )
        declared = keys[["timestamp", *_KEY]].merge(held, on=["timestamp", *_KEY], how="left")["declared"]
        declared.index = keys.index
    if len(pods):
        columns = [*_KEY, "requested_ge", *(["started_at"] if since_start else [])]
        requested = keys[["timestamp", *_KEY]].merge(pods[columns], on=_KEY, how="left")
        ge = requested["requested_ge"].to_numpy(dtype=np.float64)
        if since_start:
            started = pd.to_datetime(requested["started_at"], utc=True)
            ge = np.where(requested["timestamp"] >= started, ge, np.nan)  # NaT (not started): False
        declared = declared.fillna(pd.Series(ge, index=keys.index))
    return declared.astype("float64")


def _fill_silent_units(
    dcgm: pd.DataFrame,
    declared: pd.Series,
    pods: pd.DataFrame,
    history: pd.DataFrame | None,
    util_by_unit: pd.Series,
    dtypes: Mapping[str, pd.CategoricalDtype],
) -> pd.DataFrame:
    """Rows for the units a pod holds at samples where DCGM named the pod on some of its units but not
    on these (SPEC §3: per GPU, not per pod — one GPU of an 8-GPU pod fallen off the bus, XID 79, or
    missing from a partial exporter, is unknown while its siblings report).

    A unit DCGM named for the pod is held from its first to its last sighting in the window. Outside
    that span (a GPU silent until now) it is held only as far as the GE the pod is known to hold
    (its history series, or its API request since it started) exceed what DCGM shows; a deficit no
    known unit fills is held on an unknown unit. Utilization is the unit's own where it reported
    without the pod's labels, else unknown (NaN): never its siblings'. Only the pod-samples DCGM
    shows short of the pod's units or declared GE are expanded, so a healthy fleet costs two groupbys.
    """
    columns = ["timestamp", *_KEY, *_UNIT, "ge_share", "util_ratio"]
    none = dcgm.iloc[:0][columns]
    if not len(dcgm):
        return none
    pod_samples = ["timestamp", *_KEY]
    grouped = dcgm.assign(declared=declared).groupby(pod_samples, as_index=False, observed=True, sort=False)
    seen = grouped.agg(
        units=("ge_share", "size"),
        seen_ge=("ge_share", "sum"),
        declared=("declared", "first"),
        node=("node", "first"),
    )
    per_pod = dcgm.drop_duplicates([*_KEY, *_UNIT]).groupby(_KEY, observed=True).size().rename("pod_units")
    seen = seen.merge(per_pod.reset_index(), on=_KEY, how="left")
    short = (seen["units"] < seen["pod_units"]) | (seen["declared"] - seen["seen_ge"] > _EPSILON_GE)
    needy = seen[short].drop(columns=["units", "pod_units"]).reset_index(drop=True)
    if not len(needy):
        return none
    # Beyond what DCGM shows, an API request counts only from the pod's start (these few rows alone).
    needy["declared"] = _declared(needy, pods, history, since_start=True).to_numpy()

    # Each unit of the needy pods: its first and last sighting, and its GE share at the last one.
    mine = dcgm.merge(needy[_KEY].drop_duplicates(), on=_KEY, how="inner")
    ordered = mine.sort_values("timestamp", kind="stable")
    spans = ordered.drop_duplicates([*_KEY, *_UNIT], keep="last")[[*_KEY, *_UNIT, "timestamp", "ge_share"]]
    spans = spans.rename(columns={"timestamp": "last_seen"})
    firsts = ordered.drop_duplicates([*_KEY, *_UNIT], keep="first")[[*_KEY, *_UNIT, "timestamp"]]
    spans = spans.merge(firsts.rename(columns={"timestamp": "first_seen"}), on=[*_KEY, *_UNIT])
    candidates = needy.drop(columns="node").merge(spans, on=_KEY, how="inner")
    reported = mine[["timestamp", *_KEY, *_UNIT]].assign(reported=True)
    candidates = candidates.merge(reported, on=["timestamp", *_KEY, *_UNIT], how="left")
    candidates = candidates[candidates["reported"].isna()].drop(columns="reported")
    inside = (candidates["timestamp"] >= candidates["first_seen"]) & (
        candidates["timestamp"] <= candidates["last_seen"]
    )
    within = candidates[inside]
    # Outside its span a unit is held only as far as the declared GE go, the latest-seen units first.
    inside_ge = within.groupby(pod_samples, observed=True)["ge_share"].sum().rename("inside_ge")
    needy = needy.merge(inside_ge.reset_index(), on=pod_samples, how="left").fillna({"inside_ge": 0.0})
    room = needy["declared"] - needy["seen_ge"] - needy["inside_ge"]
    needy = needy.assign(room=room.fillna(0.0))
    outside = candidates[~inside].merge(needy[[*pod_samples, "room"]], on=pod_samples, how="left")
    outside = outside.sort_values([*pod_samples, "last_seen"], ascending=[True, True, True, False])
    running = outside.groupby(pod_samples, observed=True, sort=False)["ge_share"].cumsum()
    beyond = outside[running <= outside["room"] + _EPSILON_GE]
    on_units = pd.concat([within, beyond], ignore_index=True)
    index = pd.MultiIndex.from_frame(on_units[["timestamp", *_UNIT]])
    on_units["util_ratio"] = util_by_unit.reindex(index).to_numpy(dtype=np.float64)
    # What no known unit covers is held on a unit DCGM never named for the pod (identity unknown).
    beyond_ge = beyond.groupby(pod_samples, observed=True)["ge_share"].sum().rename("beyond_ge")
    needy = needy.merge(beyond_ge.reset_index(), on=pod_samples, how="left").fillna({"beyond_ge": 0.0})
    rest = needy[needy["room"] - needy["beyond_ge"] > _EPSILON_GE]
    unknown = rest[[*pod_samples, "node"]].assign(
        uuid=_blank(len(rest), dtypes["uuid"]),
        gpu_instance_id=_blank(len(rest), dtypes["gpu_instance_id"]),
        ge_share=(rest["room"] - rest["beyond_ge"]).to_numpy(dtype=np.float64),
        util_ratio=np.nan,
    )
    out: pd.DataFrame = pd.concat([on_units[columns], unknown[columns]], ignore_index=True)
    return out


def _fill_running(
    dcgm: pd.DataFrame,
    pods: pd.DataFrame,
    sample_times: pd.DatetimeIndex,
    util_by_unit: pd.Series,
    dtypes: Mapping[str, pd.CategoricalDtype],
) -> list[pd.DataFrame]:
    """Rows for running pods at samples where DCGM did not name them (SPEC: held since startTime)."""
    if not len(pods) or not len(sample_times):
        return []
    times = sample_times.to_numpy()
    started = pd.to_datetime(pods["started_at"], utc=True).to_numpy()
    first = np.searchsorted(times, started, side="left")
    counts = len(times) - first
    counts[pd.isna(pods["started_at"]).to_numpy()] = 0
    rows = np.repeat(np.arange(len(pods)), counts)  # categorical columns repeat as codes
    grid = pods[["namespace", "pod", "node", "requested_ge"]].iloc[rows].reset_index(drop=True)
    grid["requested_ge"] = grid["requested_ge"].astype("float64")
    steps = np.concatenate([np.arange(f, len(times)) for f in first]) if len(first) else np.zeros(0, int)
    grid["timestamp"] = sample_times.take(steps)  # not times[steps]: those are Timestamp objects
    seen = dcgm[["timestamp", *_KEY]].drop_duplicates()
    missing = grid.merge(seen, on=["timestamp", *_KEY], how="left", indicator=True)
    missing = missing[missing["_merge"] == "left_only"].drop(columns="_merge")
    if not len(missing):
        return []
    # The units a pod was seen on (its latest sighting), reused where its labels are missing.
    last_seen = dcgm.sort_values("timestamp").drop_duplicates([*_KEY, "uuid", "gpu_instance_id"], keep="last")
    known_units = last_seen[[*_KEY, *_UNIT, "ge_share"]].rename(columns={"node": "unit_node"})
    on_known = missing.merge(known_units, on=_KEY, how="inner")
    on_known = on_known[on_known["unit_node"] == on_known["node"]].drop(columns=["unit_node", "requested_ge"])
    index = pd.MultiIndex.from_frame(on_known[["timestamp", *_UNIT]])
    on_known["util_ratio"] = util_by_unit.reindex(index).to_numpy()
    unknown = missing[~missing.set_index(_KEY).index.isin(known_units.set_index(_KEY).index)]
    unknown = unknown.assign(
        uuid=_blank(len(unknown), dtypes["uuid"]),
        gpu_instance_id=_blank(len(unknown), dtypes["gpu_instance_id"]),
        util_ratio=np.nan,
    ).rename(columns={"requested_ge": "ge_share"})
    return [on_known, unknown]


def _resolve_team(
    frame: pd.DataFrame,
    teams: pd.Series,
    history: pd.DataFrame | None,
    namespace_teams: Mapping[str, str],
) -> pd.Series:
    """Team per row: the running pod's resolved team, else its history series' team, else the namespace's."""
    keys = pd.MultiIndex.from_frame(frame[_KEY])
    team = pd.Series(teams.reindex(keys).to_numpy(), index=frame.index, dtype="object")
    if history is not None and len(history):
        hist_teams = history.drop_duplicates(_KEY, keep="last").set_index(_KEY)["team"]
        team = team.fillna(pd.Series(hist_teams.reindex(keys).to_numpy(), index=frame.index))
    if "team" in frame:
        team = team.fillna(frame["team"])
    by_namespace = frame["namespace"].map(dict(namespace_teams))
    return team.fillna(by_namespace).fillna(frame["namespace"]).astype("str")
