"""The attributed timeline: evidence from DCGM labels, the API server and history, combined (SPEC §3)."""

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from gpuwatch.analytics.join import attribute
from gpuwatch.core.model import Window
from gpuwatch.read.analysis import namespace_teams, nodes_frame, pods_frame
from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.source import SimulatedSource

T0 = datetime(2026, 11, 20, tzinfo=UTC)


def _times(n: int, step: int = 60) -> pd.DatetimeIndex:
    return pd.date_range(T0, periods=n, freq=f"{step}s")


def _samples(rows: list[tuple[int, str, str, str, float, str, str]]) -> pd.DataFrame:
    times = _times(10)
    return pd.DataFrame(
        [
            {
                "timestamp": times[i],
                "node": node,
                "uuid": uuid,
                "gpu_instance_id": gi,
                "mig_profile": "3g.40gb" if gi else "",
                "util_ratio": util,
                "namespace": ns,
                "pod": pod,
            }
            for i, node, uuid, gi, util, ns, pod in rows
        ]
    )


NODES = pd.DataFrame(
    [
        {"node": "n1", "pool": "NVIDIA-H100", "replicas": 1},
        {"node": "t4", "pool": "TESLA-T4", "replicas": 4},
        {"node": "mig", "pool": "NVIDIA-A100", "replicas": 1},
    ]
)
NO_PODS = pd.DataFrame(columns=["namespace", "pod", "team", "node", "pool", "requested_ge", "started_at"])


def test_dcgm_labels_alone_attribute_a_gone_pod_and_shares() -> None:
    samples = _samples(
        [
            (0, "n1", "GPU-a", "", 0.5, "ml", "train"),
            (1, "n1", "GPU-a", "", 0.7, "ml", "train"),
            # Two pods time-slicing one T4 (replicas 4): a vgpu copy each, 1/4 GE each, GPU util shared.
            (0, "t4", "GPU-t", "", 0.4, "nb", "a"),
            (0, "t4", "GPU-t", "", 0.4, "nb", "b"),
            # A MIG 3g.40gb instance: 3/7 GE.
            (0, "mig", "GPU-m", "2", 0.9, "inf", "srv"),
            # Busy, nobody named: unattributed.
            (0, "n1", "GPU-b", "", 0.6, "", ""),
            (0, "n1", "GPU-c", "", 0.0, "", ""),
        ]
    )
    result = attribute(
        gpu_samples=samples, pods=NO_PODS, nodes=NODES, sample_times=_times(10), namespace_teams={"nb": "ds"}
    )
    got = result.attributed.set_index(["timestamp", "pod"])[["team", "pool", "ge_share", "util_ratio"]]
    times = _times(10)
    assert got.loc[(times[0], "train")].tolist() == ["ml", "NVIDIA-H100", 1.0, 0.5]
    assert got.loc[(times[1], "train")].tolist() == ["ml", "NVIDIA-H100", 1.0, 0.7]
    assert got.loc[(times[0], "a")].tolist() == ["ds", "TESLA-T4", 0.25, 0.4]
    assert got.loc[(times[0], "b")].tolist() == ["ds", "TESLA-T4", 0.25, 0.4]
    assert got.loc[(times[0], "srv")]["ge_share"] == pytest.approx(3 / 7)
    assert len(result.attributed) == 5
    assert result.unattributed[["uuid", "ge", "util_ratio"]].values.tolist() == [["GPU-b", 1.0, 0.6]]


def test_running_pod_held_from_start_through_missing_labels() -> None:
    # DCGM names the pod at samples 2-3 on GPU-a; the API server says it runs since sample 2 (t2 + 30 s
    # rounds up to sample 3? no: held from the first sample at or after startTime) and still runs.
    times = _times(10)
    samples = _samples(
        [
            (2, "n1", "GPU-a", "", 0.9, "ml", "train"),
            (3, "n1", "GPU-a", "", 0.8, "ml", "train"),
            (4, "n1", "GPU-a", "", 0.1, "", ""),  # labels missing, telemetry present
            # samples 5.. no telemetry at all for GPU-a
        ]
    )
    pods = pd.DataFrame(
        [
            {
                "namespace": "ml",
                "pod": "train",
                "team": "research",
                "node": "n1",
                "pool": "NVIDIA-H100",
                "requested_ge": 1.0,
                "started_at": times[2],
            },
            # A pod DCGM never saw (its node's exporter is down): unknown unit, unknown util.
            {
                "namespace": "ml",
                "pod": "ghost",
                "team": "research",
                "node": "n1",
                "pool": "NVIDIA-H100",
                "requested_ge": 2.0,
                "started_at": times[8] - timedelta(seconds=1),
            },
        ]
    )
    result = attribute(gpu_samples=samples, pods=pods, nodes=NODES, sample_times=times, namespace_teams={})
    train = result.attributed[result.attributed.pod == "train"]
    assert train["timestamp"].tolist() == list(times[2:])
    assert train["team"].unique().tolist() == ["research"]
    assert (train["uuid"] == "GPU-a").all() and (train["ge_share"] == 1.0).all()
    np.testing.assert_array_equal(train["util_ratio"].to_numpy(), [0.9, 0.8, 0.1] + [np.nan] * 5)
    ghost = result.attributed[result.attributed.pod == "ghost"]
    assert ghost["timestamp"].tolist() == list(times[8:])
    assert (
        (ghost["uuid"] == "").all() and (ghost["ge_share"] == 2.0).all() and ghost["util_ratio"].isna().all()
    )
    assert result.pods_without_telemetry == 1
    assert len(result.unattributed) == 0  # GPU-a at sample 4 is busy with util 0.1 but held by train


def test_history_covers_gone_pods_dcgm_missed() -> None:
    times = _times(10)
    samples = _samples([(0, "n1", "GPU-a", "", 0.9, "ml", "old")])
    history = pd.DataFrame(
        {
            "timestamp": times[0:3],
            "namespace": "ml",
            "pod": "old",
            "team": "research",
            "node": "n1",
            "pool": "NVIDIA-H100",
            "ge_share": 1.0,
        }
    )
    result = attribute(
        gpu_samples=samples,
        pods=NO_PODS,
        nodes=NODES,
        sample_times=times,
        namespace_teams={"ml": "ml"},
        history=history,
    )
    old = result.attributed
    assert old["timestamp"].tolist() == list(times[0:3])
    assert old["uuid"].tolist() == ["GPU-a", "", ""]
    assert old["team"].unique().tolist() == ["research"]
    assert old["ge_share"].sum() == 3.0


def test_simulated_fleet_join_matches_ground_truth() -> None:
    fleet = build_demo_fleet(seed=3, end=T0, days=1)
    source = SimulatedSource(fleet)
    state = source.cluster_state()
    window = Window(start=fleet.window.start, end=fleet.window.end, step_seconds=60)
    result = attribute(
        gpu_samples=source.gpu_samples(window),
        pods=pods_frame(state, fleet.team_rules),
        nodes=nodes_frame(state),
        sample_times=fleet.sample_times(),
        namespace_teams=namespace_teams(state, fleet.team_rules),
        history=source.allocation_history(window),
    )
    got = result.attributed
    truth = fleet.truth()
    step_h = 60 / 3600

    def per_team(frame: pd.DataFrame) -> pd.DataFrame:
        return (
            frame.assign(
                alloc=frame.ge_share * step_h, used=(frame.ge_share * frame.util_ratio).fillna(0) * step_h
            )
            .groupby("team")[["alloc", "used"]]
            .sum()
        )

    expected, actual = per_team(truth), per_team(got)
    assert list(actual.index) == list(expected.index)
    np.testing.assert_allclose(actual["alloc"], expected["alloc"], rtol=0.01)
    np.testing.assert_allclose(actual["used"], expected["used"], rtol=0.01)
