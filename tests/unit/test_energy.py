"""Energy of SPEC §3 on tiny fleets computed by hand: counter increases, attribution, roll-ups, dollars."""

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pandas.testing import assert_frame_equal

from gpuwatch.analytics.energy import (
    JOULES_PER_KWH,
    attribute_energy,
    counter_increase_joules,
    energy_by,
    energy_cost_usd,
    energy_sources,
    tariff_at,
)
from gpuwatch.core.errors import DataError
from gpuwatch.core.schema import ATTRIBUTED, ATTRIBUTED_ENERGY, GPU_ENERGY

STEP = 60
T0 = pd.Timestamp("2026-11-20 00:00", tz="UTC")
NAN = math.nan
EXACT = {"check_exact": False, "rtol": 1e-12, "atol": 1e-9}  # float shares (3/7), no looser
H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"


def t(i: int) -> pd.Timestamp:
    return T0 + pd.Timedelta(seconds=STEP * i)


def stamps(indexes: list[int]) -> "pd.Series[Any]":
    return pd.Series(pd.to_datetime([t(i) for i in indexes], utc=True))


def samples(rows: list[tuple[int, str, str, float, float]]) -> pd.DataFrame:
    """Energy samples from (sample, uuid, gpu_instance_id, energy_joules counter, power_watts)."""
    return pd.DataFrame(
        {
            "timestamp": stamps([r[0] for r in rows]),
            "uuid": pd.Series([r[1] for r in rows], dtype="str"),
            "gpu_instance_id": pd.Series([r[2] for r in rows], dtype="str"),
            "energy_joules": [float(r[3]) for r in rows],
            "power_watts": [float(r[4]) for r in rows],
        }
    )


def holders(
    rows: list[tuple[int, str, str, str, float]], *, node: str = "n1", pool: str = A100
) -> pd.DataFrame:
    """ATTRIBUTED rows from (sample, pod, uuid, gpu_instance_id, ge_share); namespace ml, team research."""
    frame = pd.DataFrame(
        {
            "timestamp": stamps([r[0] for r in rows]),
            "namespace": "ml",
            "pod": [r[1] for r in rows],
            "team": "research",
            "node": node,
            "pool": pool,
            "uuid": [r[2] for r in rows],
            "gpu_instance_id": [r[3] for r in rows],
            "ge_share": [float(r[4]) for r in rows],
            "util_ratio": 0.5,
        }
    )
    strings = ("namespace", "pod", "team", "node", "pool", "uuid", "gpu_instance_id")
    return ATTRIBUTED.check(
        frame.astype({c: "str" for c in strings} | {"ge_share": "float64", "util_ratio": "float64"})
    )


def gpu_energy(rows: list[tuple[int, str, float, str]]) -> pd.DataFrame:
    """GPU_ENERGY rows from (sample, uuid, energy_joules, energy_source)."""
    return pd.DataFrame(
        {
            "timestamp": stamps([r[0] for r in rows]),
            "uuid": pd.Series([r[1] for r in rows], dtype="str"),
            "energy_joules": [float(r[2]) for r in rows],
            "energy_source": pd.Series([r[3] for r in rows], dtype="str"),
        }
    )


def attributed(rows: list[tuple[int, str, str, str, str, str, float, float]]) -> pd.DataFrame:
    """Expected ATTRIBUTED_ENERGY rows from (sample, pod, team, node, pool, uuid, ge_share, joules);
    namespace ml for a pod, "" for the unheld row."""
    return pd.DataFrame(
        {
            "timestamp": stamps([r[0] for r in rows]),
            "namespace": pd.Series(["ml" if r[1] else "" for r in rows], dtype="str"),
            **{
                c: pd.Series([r[k] for r in rows], dtype="str")
                for k, c in enumerate(("pod", "team", "node", "pool", "uuid"), start=1)
            },
            "ge_share": [float(r[6]) for r in rows],
            "energy_joules": [float(r[7]) for r in rows],
        }
    )


def plain(frame: pd.DataFrame) -> pd.DataFrame:
    """Categorical key columns as plain strings, for comparing with hand-written frames."""
    return frame.astype({c: "str" for c in frame.columns if isinstance(frame[c].dtype, pd.CategoricalDtype)})


# ------------------------------------------------------------------------------------------------
# counter_increase_joules


def test_counter_increase_with_reset_and_power_for_the_first_sample() -> None:
    # 1000 J, 1300 J, 1700 J, then a driver reload: 200 J since the reset (Prometheus increase()).
    # The first sample has no previous reading: 250 W × 60 s = 15000 J.
    frame = samples(
        [
            (0, "g1", "", 1000, 250),
            (1, "g1", "", 1300, 251),
            (2, "g1", "", 1700, 252),
            (3, "g1", "", 200, 253),
        ]
    )
    expected = gpu_energy(
        [
            (0, "g1", 15000, "power"),
            (1, "g1", 300, "counter"),
            (2, "g1", 400, "counter"),
            (3, "g1", 200, "counter"),
        ]
    )
    got = counter_increase_joules(frame, step_seconds=STEP)
    GPU_ENERGY.check(got)
    assert_frame_equal(plain(got), expected)
    assert energy_sources(got) == {"counter": 1, "power": 0, "unknown": 0}


def test_first_sample_without_power_is_unknown() -> None:
    frame = samples([(0, "g1", "", 1000, NAN), (1, "g1", "", 1300, NAN)])
    expected = gpu_energy([(0, "g1", NAN, ""), (1, "g1", 300, "counter")])
    assert_frame_equal(plain(counter_increase_joules(frame, step_seconds=STEP)), expected)


def test_power_times_step_where_the_counter_is_absent() -> None:
    # No energy counter at all (an old driver / exporter config): power × time, source "power".
    frame = samples([(0, "g2", "", NAN, 250), (1, "g2", "", NAN, 100.5), (2, "g2", "", NAN, NAN)])
    expected = gpu_energy([(0, "g2", 15000, "power"), (1, "g2", 6030, "power"), (2, "g2", NAN, "")])
    got = counter_increase_joules(frame, step_seconds=STEP)
    assert_frame_equal(plain(got), expected)
    assert energy_sources(got) == {"counter": 0, "power": 1, "unknown": 0}


def test_a_missing_counter_reading_falls_back_for_the_sample_and_the_next() -> None:
    # Sample 1 lacks the counter (power 200 W); sample 2 has no previous reading (power 210 W).
    frame = samples(
        [
            (0, "g1", "", 1000, 100),
            (1, "g1", "", NAN, 200),
            (2, "g1", "", 25000, 210),
            (3, "g1", "", 26000, 220),
        ]
    )
    expected = gpu_energy(
        [
            (0, "g1", 6000, "power"),
            (1, "g1", 12000, "power"),
            (2, "g1", 12600, "power"),
            (3, "g1", 1000, "counter"),
        ]
    )
    assert_frame_equal(plain(counter_increase_joules(frame, step_seconds=STEP)), expected)


def test_a_gap_in_timestamps_is_no_counter_increase() -> None:
    # Samples 0, 1, 4: the counter rose 9000 J over the gap, but that is not sample 4's energy.
    frame = samples(
        [
            (0, "g1", "", 1000, 100),
            (1, "g1", "", 7000, 100),
            (4, "g1", "", 16000, 150),
            (5, "g1", "", 22000, 100),
        ]
    )
    expected = gpu_energy(
        [
            (0, "g1", 6000, "power"),
            (1, "g1", 6000, "counter"),
            (4, "g1", 9000, "power"),
            (5, "g1", 6000, "counter"),
        ]
    )
    assert_frame_equal(plain(counter_increase_joules(frame, step_seconds=STEP)), expected)


def test_mig_repeats_and_ha_copies_are_one_fact() -> None:
    # The exporter repeats the whole-GPU counter and power on each MIG instance series (read a moment
    # apart: instance 2's counter lags by 2 J at sample 1 — the max is the latest read); an HA copy
    # repeats instance 1's series. Power is the mean of the copies: (100 + 102 + 100) / 3 W.
    rows = []
    for copy in range(2):
        rows += [(0, "mig", "1", 10_000, 100), (1, "mig", "1", 17_000, 100), (2, "mig", "1", 24_000, 100)]
        if copy == 0:
            rows += [(0, "mig", "2", 10_000, 102), (1, "mig", "2", 16_998, 102), (2, "mig", "2", 24_000, 102)]
    got = counter_increase_joules(samples(rows), step_seconds=STEP)
    power_0 = (100 + 102 + 100) / 3 * STEP
    expected = gpu_energy(
        [(0, "mig", power_0, "power"), (1, "mig", 7000, "counter"), (2, "mig", 7000, "counter")]
    )
    assert_frame_equal(plain(got), expected, **EXACT)


def test_order_of_input_rows_does_not_matter_and_gpus_are_separate() -> None:
    rows = [(0, "b", "", 500, 10), (1, "a", "", 1300, 20), (0, "a", "", 1000, 30), (1, "b", "", 400, 40)]
    expected = gpu_energy(
        [(0, "a", 1800, "power"), (1, "a", 300, "counter"), (0, "b", 600, "power"), (1, "b", 400, "counter")]
    )
    assert_frame_equal(plain(counter_increase_joules(samples(rows), step_seconds=STEP)), expected)


def test_garbage_readings_are_unknown_and_rows_without_a_gpu_are_dropped() -> None:
    rows = [
        (0, "g1", "", 1000, -5),
        (1, "g1", "", math.inf, 100),
        (2, "g1", "", 2000, 100),
        (0, "", "", 1, 1),
    ]
    expected = gpu_energy([(0, "g1", NAN, ""), (1, "g1", 6000, "power"), (2, "g1", 6000, "power")])
    got = counter_increase_joules(samples(rows), step_seconds=STEP)
    assert_frame_equal(plain(got), expected)


def test_energy_sources_counts_gpus() -> None:
    energy = gpu_energy(
        [
            (0, "a", 1, "power"),
            (1, "a", 2, "counter"),
            (0, "b", 3, "power"),
            (0, "c", NAN, ""),
            (1, "c", NAN, ""),
        ]
    )
    assert energy_sources(energy) == {"counter": 1, "power": 1, "unknown": 1}
    assert energy_sources(energy.iloc[:0]) == {"counter": 0, "power": 0, "unknown": 0}


def test_empty_samples() -> None:
    got = counter_increase_joules(samples([]), step_seconds=STEP)
    assert len(got) == 0
    GPU_ENERGY.check(got)


# ------------------------------------------------------------------------------------------------
# attribute_energy


def test_mig_gpu_split_3_to_4_sevenths_and_the_unheld_instance_is_idle_energy() -> None:
    # A100 MIG: a 3g instance (pod a) and a 4g instance (pod b); 7000 J per sample from the counter
    # (repeated on both instance series, counted once). At sample 2 pod b is gone: its 4/7 is idle.
    rows = [(i, "mig", gi, 10_000 + 7000 * i, 100) for i in range(3) for gi in ("1", "2")]
    energy = counter_increase_joules(samples(rows), step_seconds=STEP)
    held = holders(
        [(0, "a", "mig", "1", 3 / 7), (0, "b", "mig", "2", 4 / 7), (1, "a", "mig", "1", 3 / 7),
         (1, "b", "mig", "2", 4 / 7), (2, "a", "mig", "1", 3 / 7)]
    )  # fmt: skip
    got = attribute_energy(energy, held)
    ATTRIBUTED_ENERGY.check(got)
    expected = attributed(
        [
            (0, "a", "research", "n1", A100, "mig", 3 / 7, 6000 * 3 / 7),  # 100 W × 60 s at the first sample
            (0, "b", "research", "n1", A100, "mig", 4 / 7, 6000 * 4 / 7),
            (1, "a", "research", "n1", A100, "mig", 3 / 7, 3000),
            (1, "b", "research", "n1", A100, "mig", 4 / 7, 4000),
            (2, "a", "research", "n1", A100, "mig", 3 / 7, 3000),
            (2, "", "", "n1", A100, "mig", 4 / 7, 4000),
        ]
    )
    assert_frame_equal(plain(got), expected, **EXACT)


@pytest.mark.parametrize("summed", [False, True])
def test_time_sliced_gpu_one_pod_two_replicas_and_the_idle_remainder(summed: bool) -> None:
    # A T4 sliced into 4 replicas; pod c holds 2 of them (two rows of 1/4, or one summed row of 1/2).
    # 200 W, no counter: 12000 J per sample, half to c, half unheld.
    energy = counter_increase_joules(
        samples([(0, "ts", "", NAN, 200), (1, "ts", "", NAN, 200)]), step_seconds=STEP
    )
    rows = (
        [(i, "c", "ts", "", 0.5) for i in range(2)]
        if summed
        else [(i, "c", "ts", "", 0.25) for i in range(2) for _ in range(2)]
    )
    got = attribute_energy(energy, holders(rows, node="t4-node", pool="TESLA-T4"))
    expected = attributed(
        [
            (0, "c", "research", "t4-node", "TESLA-T4", "ts", 0.5, 6000),
            (0, "", "", "t4-node", "TESLA-T4", "ts", 0.5, 6000),
            (1, "c", "research", "t4-node", "TESLA-T4", "ts", 0.5, 6000),
            (1, "", "", "t4-node", "TESLA-T4", "ts", 0.5, 6000),
        ]
    )
    assert_frame_equal(plain(got), expected, **EXACT)


def test_a_free_gpu_is_all_idle_energy_with_node_and_pool_from_its_holders_or_the_inventory() -> None:
    # g1 held at sample 0 only: at sample 1 its energy is idle, still on node n1 / pool H100.
    # g2 never held: node/pool from the optional inventory, else "".
    energy = gpu_energy([(0, "g1", 600, "counter"), (1, "g1", 500, "counter"), (1, "g2", 400, "power")])
    held = holders([(0, "a", "g1", "", 1.0)], pool=H100)
    expected = attributed(
        [
            (0, "a", "research", "n1", H100, "g1", 1.0, 600),
            (1, "", "", "n1", H100, "g1", 1.0, 500),
            (1, "", "", "", "", "g2", 1.0, 400),
        ]
    )
    assert_frame_equal(plain(attribute_energy(energy, held)), expected)
    inventory = pd.DataFrame({"uuid": ["g2", "unknown-gpu"], "node": ["n2", "n9"], "pool": [H100, A100]})
    with_inventory = expected.assign(node=["n1", "n1", "n2"], pool=[H100, H100, H100])
    assert_frame_equal(plain(attribute_energy(energy, held, gpus=inventory)), with_inventory)


def test_over_allocation_is_scaled_so_shares_sum_to_one() -> None:
    # Two pods both claim the whole GPU (stale evidence): each gets half, nothing is invented.
    energy = gpu_energy([(0, "g1", 1000, "counter")])
    got = attribute_energy(energy, holders([(0, "a", "g1", "", 1.0), (0, "b", "g1", "", 1.0)]))
    expected = attributed(
        [(0, "a", "research", "n1", A100, "g1", 0.5, 500), (0, "b", "research", "n1", A100, "g1", 0.5, 500)]
    )
    assert_frame_equal(plain(got), expected)


def test_nan_energy_stays_nan_in_every_share_and_in_the_roll_up() -> None:
    # Sample 1's energy is unknown: NaN for the pod and for the idle remainder, never 0. Pod a holds
    # at a sample with no telemetry row (sample 2): unknown too. Pod u holds a GPU DCGM never named.
    energy = gpu_energy([(0, "g1", 700, "counter"), (1, "g1", NAN, "")])
    held = holders(
        [
            (0, "a", "g1", "", 3 / 7),
            (1, "a", "g1", "", 3 / 7),
            (2, "a", "g1", "", 3 / 7),
            (1, "u", "", "", 1.0),
        ]
    )
    got = attribute_energy(energy, held)
    expected = attributed(
        [
            (0, "a", "research", "n1", A100, "g1", 3 / 7, 300),
            (0, "", "", "n1", A100, "g1", 4 / 7, 400),
            (1, "u", "research", "n1", A100, "", 1.0, NAN),
            (1, "a", "research", "n1", A100, "g1", 3 / 7, NAN),
            (1, "", "", "n1", A100, "g1", 4 / 7, NAN),
            (2, "a", "research", "n1", A100, "g1", 3 / 7, NAN),
            (2, "", "", "n1", A100, "g1", 4 / 7, NAN),
        ]
    )
    assert_frame_equal(plain(got), expected, **EXACT)
    by_pod = plain(energy_by(got, ["pod"]))
    want = pd.DataFrame(
        {
            "pod": pd.Series(["", "a", "u"], dtype="str"),
            "energy_kwh": [400 / JOULES_PER_KWH, 300 / JOULES_PER_KWH, NAN],
            "energy_unknown_samples": np.array([2, 2, 1], dtype=np.int64),
        }
    )
    assert_frame_equal(by_pod, want, **EXACT)
    fleet = energy_by(got, [])
    assert fleet["energy_kwh"].iloc[0] == pytest.approx(700 / JOULES_PER_KWH, rel=1e-12)
    assert fleet["energy_unknown_samples"].iloc[0] == 5


def test_duplicate_gpu_sample_rows_are_refused() -> None:
    energy = gpu_energy([(0, "g1", 1, "counter"), (0, "g1", 2, "counter")])
    with pytest.raises(DataError, match="more than one row"):
        attribute_energy(energy, holders([]))


def test_ha_copies_end_to_end_count_once() -> None:
    # Two exporter replicas publish the same series: the GPU's energy is not doubled.
    one = [(0, "g1", "", 1000, 100), (1, "g1", "", 7000, 100)]
    energy = counter_increase_joules(samples(one + one), step_seconds=STEP)
    got = attribute_energy(energy, holders([(0, "a", "g1", "", 1.0), (1, "a", "g1", "", 1.0)]))
    assert got["energy_joules"].tolist() == [6000.0, 6000.0]


# ------------------------------------------------------------------------------------------------
# Dollars


def test_dated_tariff_change_mid_window_with_pue() -> None:
    # $0.10/kWh until sample 2, $0.25/kWh from it; PUE 1.3. kWh per sample 1, 2, 1, 0.5:
    # 1 × 1.3 × 0.10 = 0.13; 2 × 1.3 × 0.10 = 0.26; 1 × 1.3 × 0.25 = 0.325; 0.5 × 1.3 × 0.25 = 0.1625.
    energy = gpu_energy(
        [(i, "g1", kwh * JOULES_PER_KWH, "counter") for i, kwh in enumerate([1.0, 2.0, 1.0, 0.5])]
    )
    rows = attribute_energy(energy, holders([(i, "a", "g1", "", 1.0) for i in range(4)]))
    priced = energy_cost_usd(
        rows, tariff_starts_seconds=[-math.inf, t(2).timestamp()], tariff_usd_per_kwh=[0.10, 0.25], pue=1.3
    )
    assert priced["energy_cost_usd"].tolist() == pytest.approx([0.13, 0.26, 0.325, 0.1625], rel=1e-12)
    assert_frame_equal(priced.drop(columns="energy_cost_usd"), rows)
    total = energy_by(priced, ["team"])
    assert total["energy_kwh"].tolist() == pytest.approx([4.5], rel=1e-12)
    assert total["energy_cost_usd"].tolist() == pytest.approx([0.8775], rel=1e-12)


def test_tariff_before_its_first_start_and_unknown_energy_cost_nan() -> None:
    energy = gpu_energy(
        [(0, "g1", JOULES_PER_KWH, "counter"), (1, "g1", NAN, ""), (2, "g1", JOULES_PER_KWH, "power")]
    )
    rows = attribute_energy(energy, holders([]))
    priced = energy_cost_usd(
        rows, tariff_starts_seconds=[t(2).timestamp()], tariff_usd_per_kwh=[0.2], pue=1.0
    )
    got = priced["energy_cost_usd"].to_numpy()
    assert math.isnan(got[0]) and math.isnan(got[1])
    assert got[2] == pytest.approx(0.2, rel=1e-12)


def test_tariff_at_and_bad_arguments() -> None:
    starts, prices = [-math.inf, 100.0, 200.0], [1.0, 2.0, 3.0]
    assert tariff_at(starts, prices, [0.0, 99.9, 100.0, 150.0, 200.0, 1e12]).tolist() == [1, 1, 2, 2, 3, 3]
    with pytest.raises(DataError, match="strictly increasing"):
        tariff_at([200.0, 100.0], [1.0, 2.0], [0.0])
    with pytest.raises(DataError, match="one price per start"):
        tariff_at([100.0], [1.0, 2.0], [0.0])
    with pytest.raises(DataError, match="PUE"):
        energy_cost_usd(gpu_energy([]), tariff_starts_seconds=[0.0], tariff_usd_per_kwh=[1.0], pue=0.9)


# ------------------------------------------------------------------------------------------------
# Conservation on random fleets


SHARES = (1.0, 3 / 7, 4 / 7, 2 / 7, 1 / 7, 0.25, 0.5, 1 / 3)


@st.composite
def fleets(draw: st.DrawFn) -> tuple[pd.DataFrame, pd.DataFrame]:
    n_samples = draw(st.integers(1, 6))
    sample_rows: list[tuple[int, str, str, float, float]] = []
    holder_rows: list[tuple[int, str, str, str, float]] = []
    for g in range(draw(st.integers(1, 4))):
        uuid = f"GPU-{g}"
        instances = draw(st.sampled_from((("",), ("1", "2"), ("1", "2", "3"))))
        copies = draw(st.integers(1, 2))  # HA duplicates
        counter = draw(st.floats(0, 1e9))
        for i in range(n_samples):
            if draw(st.integers(0, 6)) == 0:
                continue  # a telemetry gap
            counter = 0.0 if draw(st.integers(0, 8)) == 0 else counter + draw(st.floats(0, 1e5))  # resets
            value = NAN if draw(st.integers(0, 5)) == 0 else counter
            power = NAN if draw(st.integers(0, 4)) == 0 else draw(st.floats(0, 700))
            for _ in range(copies):
                sample_rows += [(i, uuid, gi, value, power) for gi in instances]
            for _ in range(draw(st.integers(0, 3))):
                holder_rows.append(
                    (i, f"pod-{draw(st.integers(0, 2))}", uuid, "", draw(st.sampled_from(SHARES)))
                )
    return samples(sample_rows), holders(holder_rows)


@settings(max_examples=200, deadline=None)
@given(fleets())
def test_attributed_energy_sums_to_each_gpus_energy(fleet: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    sample_frame, holder_frame = fleet
    energy = counter_increase_joules(sample_frame, step_seconds=STEP)
    got = attribute_energy(energy, holder_frame)
    keys = ["timestamp", "uuid"]
    assert not energy.duplicated(keys).any()
    assert (got["ge_share"] >= 0).all()
    shares = got.groupby(keys, observed=True)["ge_share"].sum()
    np.testing.assert_allclose(shares.to_numpy(), 1.0, rtol=1e-12)
    sums = got.groupby(keys, observed=True)["energy_joules"].sum(min_count=1)
    unknown = got["energy_joules"].isna().groupby([got[k] for k in keys], observed=True).any()
    want = energy.set_index(keys)["energy_joules"].reindex(sums.index)  # NaN: no telemetry row
    np.testing.assert_allclose(sums.where(~unknown).to_numpy(), want.to_numpy(), rtol=1e-12, atol=1e-6)
    total = energy_by(got, [])["energy_kwh"].iloc[0] * JOULES_PER_KWH
    known = energy["energy_joules"].dropna()
    assert (math.isnan(total) and known.empty) or total == pytest.approx(known.sum(), rel=1e-12, abs=1e-6)
