"""Queues, quotas and fairness (analytics.queues) on tiny fleets computed by hand."""

import math
from typing import Any

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from gpuwatch.analytics.queues import (
    blocked_vs_idle,
    fairness,
    queue_summary,
    queue_usage,
    reclaim_candidates,
    wait_stats,
)
from gpuwatch.core.errors import DataError
from gpuwatch.core.schema import (
    BLOCKED_VS_IDLE,
    FAIRNESS,
    IDLE_PODS,
    PENDING_WAITS,
    POOL_PRICES,
    QUEUE_QUOTAS,
    QUEUE_SUMMARY,
    QUEUE_USAGE,
    QUEUE_WORKLOADS,
    RECLAIM_CANDIDATES,
    TEAM_ALLOCATED_HOURS,
    TEAM_QUOTA_HOURS,
)

T0 = pd.Timestamp("2026-11-20 00:00", tz="UTC")
H, L, A = "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4", "NVIDIA-A100-SXM4-80GB"
NAN = math.nan
NAT = pd.NaT
STEP = 3600.0
EXACT = {"check_exact": False, "rtol": 1e-12, "atol": 1e-12}


def t(hours: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(hours=hours)


SAMPLES = pd.DatetimeIndex([t(0), t(1), t(2), t(3)])  # four samples, 3600 s apart


def strs(values: list[str]) -> "pd.Series[str]":
    return pd.Series(values, dtype="str")


def times(values: list[Any]) -> "pd.Series[Any]":
    return pd.Series(pd.to_datetime(values, utc=True)).astype("datetime64[ns, UTC]")


def quotas(rows: list[tuple[str, str, str, str, float, float]]) -> pd.DataFrame:
    """QUEUE_QUOTAS from (cluster_queue, cohort, team, pool, nominal, lending limit); borrowing unlimited."""
    frame = pd.DataFrame(
        {
            "cluster_queue": strs([r[0] for r in rows]),
            "cohort": strs([r[1] for r in rows]),
            "team": strs([r[2] for r in rows]),
            "pool": strs([r[3] for r in rows]),
            "nominal_gpus": pd.Series([r[4] for r in rows], dtype="float64"),
            "borrowing_limit_gpus": pd.Series([NAN] * len(rows), dtype="float64"),
            "lending_limit_gpus": pd.Series([r[5] for r in rows], dtype="float64"),
        }
    )
    return QUEUE_QUOTAS.check(frame)


Workload = tuple[str, str, str, str, str, str, float, Any, Any, Any, int]


def workloads(rows: list[Workload]) -> pd.DataFrame:
    """QUEUE_WORKLOADS from (namespace, workload, queue, cluster_queue, team, pool, gpus, created,
    admitted, finished, preemptions)."""
    frame = pd.DataFrame(
        {
            "namespace": strs([r[0] for r in rows]),
            "workload": strs([r[1] for r in rows]),
            "queue": strs([r[2] for r in rows]),
            "cluster_queue": strs([r[3] for r in rows]),
            "team": strs([r[4] for r in rows]),
            "pool": strs([r[5] for r in rows]),
            "gpus": pd.Series([r[6] for r in rows], dtype="float64"),
            "created_at": times([r[7] for r in rows]),
            "admitted_at": times([r[8] for r in rows]),
            "finished_at": times([r[9] for r in rows]),
            "preemptions": pd.Series([r[10] for r in rows], dtype="int64"),
        }
    )
    return QUEUE_WORKLOADS.check(frame)


def holding(name: str, cluster_queue: str, pool: str, gpus: float, admitted: Any, finished: Any) -> Workload:
    return ("ml", name, "lq", cluster_queue, "", pool, gpus, t(-12), admitted, finished, 0)


def prices(rows: list[tuple[str, pd.Timestamp, float]]) -> pd.DataFrame:
    """POOL_PRICES from (pool, from, usd per GPU-hour)."""
    frame = pd.DataFrame(
        {
            "timestamp": times([r[1] for r in rows]),
            "pool": strs([r[0] for r in rows]),
            "usd_per_gpu_hour": pd.Series([r[2] for r in rows], dtype="float64"),
        }
    )
    return POOL_PRICES.check(frame)


# Two cohorts and a queue without one. Cohort "research": cq-a (alpha: 4 H100 + 1 L4), cq-b (beta: 4 H100)
# and cq-c (gamma: 2 H100, of which it lends at most 1). Cohort "prod": cq-p (epsilon: 2 H100).
# cq-solo (delta: 2 H100) has no cohort.
QUOTAS = quotas(
    [
        ("cq-a", "research", "alpha", H, 4.0, NAN),
        ("cq-a", "research", "alpha", L, 1.0, NAN),
        ("cq-b", "research", "beta", H, 4.0, NAN),
        ("cq-c", "research", "gamma", H, 2.0, 1.0),
        ("cq-p", "prod", "epsilon", H, 2.0, NAN),
        ("cq-solo", "", "delta", H, 2.0, NAN),
    ]
)
WORKLOADS = workloads(
    [
        holding("w1", "cq-a", H, 7.0, t(0), t(2)),  # holds at t0, t1 (not at t2: finished_at is exclusive)
        holding("w2", "cq-a", H, 2.0, t(1), NAT),  # holds from t1 on (admitted_at is inclusive)
        holding("w3", "cq-b", H, 1.0, t(-0.5), t(3)),  # holds at t0, t1, t2
        holding("w4", "cq-solo", H, 3.0, t(0.5), NAT),  # half of t0 (1.5 GE on average), t1, t2, t3 whole
        holding("w5", "cq-a", L, 1.0, t(0), NAT),  # holds at every sample
        holding("w6", "cq-b", "", 4.0, NAT, NAT),  # pending: never admitted, holds nothing
        holding("w7", "cq-b", H, 5.0, t(-3), t(-1)),  # done before the window
        holding("w8", "cq-c", H, 1.0, t(1.2), t(1.8)),  # 0.6 of sample t1: 0.6 GE on average there
    ]
)
# Per sample t0..t3:
#   cq-a/H  used 7, 9, 2, 2 → borrowed 3, 5, 0, 0; unused 0, 0, 2, 2
#   cq-a/L  used 1, 1, 1, 1 = nominal: no borrowing, nothing unused (Σ U of research/L = 0 → lent 0)
#   cq-b/H  used 1, 1, 1, 0 → unused 3, 3, 3, 4
#   cq-c/H  used 0, 0.6, 0, 0 → unused 2, 1.4, 2, 2, lendable U = min(unused, limit 1) = 1
#   cq-p/H  used 0, unused 2, but cohort prod borrows nothing → lent 0
#   cq-solo used 1.5, 3, 3, 3 → borrowed 0, 1, 1, 1 and, without a cohort, lends nothing (unused 0.5 at t0)
# research/H: B = 3, 5, 0, 0; Σ U = 0 + 3 + 1 = 4 at t0 and t1.
#   t0: lent_b = min(3, 3 × 3/4) = 2.25, lent_c = min(1, 3 × 1/4) = 0.75
#   t1: B = 5 exceeds Σ U: lent_b = min(3, 5 × 3/4) = 3, lent_c = min(1, 5 × 1/4) = 1
USAGE_ROWS = [
    # cluster_queue, cohort, team, pool, nominal, used, borrowed, lent
    ("cq-a", "research", "alpha", H, 4.0, [7, 9, 2, 2], [3, 5, 0, 0], [0, 0, 0, 0]),
    ("cq-a", "research", "alpha", L, 1.0, [1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0]),
    ("cq-b", "research", "beta", H, 4.0, [1, 1, 1, 0], [0, 0, 0, 0], [2.25, 3, 0, 0]),
    ("cq-c", "research", "gamma", H, 2.0, [0, 0.6, 0, 0], [0, 0, 0, 0], [0.75, 1, 0, 0]),
    ("cq-p", "prod", "epsilon", H, 2.0, [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]),
    ("cq-solo", "", "delta", H, 2.0, [1.5, 3, 3, 3], [0, 1, 1, 1], [0, 0, 0, 0]),
]


def usage_frame(rows: list[Any], samples: pd.DatetimeIndex = SAMPLES) -> pd.DataFrame:
    n = len(samples)
    frame = pd.DataFrame(
        {
            "timestamp": times([s for _ in rows for s in samples]),
            "cluster_queue": strs([r[0] for r in rows for _ in range(n)]),
            "cohort": strs([r[1] for r in rows for _ in range(n)]),
            "team": strs([r[2] for r in rows for _ in range(n)]),
            "pool": strs([r[3] for r in rows for _ in range(n)]),
            "nominal_gpus": [float(r[4]) for r in rows for _ in range(n)],
            "used_gpus": [float(v) for r in rows for v in r[5]],
            "borrowed_gpus": [float(v) for r in rows for v in r[6]],
            "lent_gpus": [float(v) for r in rows for v in r[7]],
        }
    )
    return QUEUE_USAGE.check(frame)


USAGE = usage_frame(USAGE_ROWS)


def test_usage_borrowing_and_lending_pro_rata_per_cohort() -> None:
    out = queue_usage(WORKLOADS, QUOTAS, SAMPLES, STEP)
    assert_frame_equal(QUEUE_USAGE.check(out), USAGE, **EXACT)


def test_lending_limit_caps_what_a_queue_lends() -> None:
    # Without cq-c's limit its U is its unused: Σ U = 3 + 2 = 5 at t0: B = 3 → cq-b 3 × 3/5 = 1.8, cq-c
    # 3 × 2/5 = 1.2; t1: U_c = 1.4, Σ U = 4.4 < B = 5 → cq-b min(3, 5 × 3/4.4) = 3, cq-c min(1.4, 1.59) = 1.4.
    # (With the limit: 2.25/0.75 and 3/1, as above.)
    unlimited = QUOTAS.assign(lending_limit_gpus=NAN)
    out = queue_usage(WORKLOADS, unlimited, SAMPLES, STEP)
    lent = out.set_index(["cluster_queue", "timestamp"])["lent_gpus"]
    assert lent["cq-b"].tolist() == pytest.approx([1.8, 3.0, 0.0, 0.0])
    assert lent["cq-c"].tolist() == pytest.approx([1.2, 1.4, 0.0, 0.0])


def test_queues_without_a_cohort_lend_nothing_to_each_other() -> None:
    # solo-1 (nominal 1) uses 3 and borrows 2; solo-2 has 4 unused. Neither is in a cohort, so
    # solo-2 lends 0 (were "" a cohort, it would lend min(4, 2 × 4/4) = 2).
    fleet = quotas([("solo-1", "", "s1", H, 1.0, NAN), ("solo-2", "", "s2", H, 4.0, NAN)])
    out = queue_usage(workloads([holding("v1", "solo-1", H, 3.0, t(0), NAT)]), fleet, SAMPLES[:1], STEP)
    expected = usage_frame(
        [("solo-1", "", "s1", H, 1.0, [3], [2], [0]), ("solo-2", "", "s2", H, 4.0, [0], [0], [0])],
        SAMPLES[:1],
    )
    assert_frame_equal(out, expected, **EXACT)


def test_usage_keeps_unknown_unknown() -> None:
    # cq-x (nominal 1) borrows 1 at both samples; cq-y's workload of unknown size holds at t0 only.
    # t0: cq-y used/borrowed unknown → research's B unknown → cq-y's lent unknown; cq-x has nothing
    #     unused and lends 0 whatever B is.
    # t1: cq-y used 0, U = 2, B = 1 → lent min(2, 1 × 2/2) = 1.
    # cq-y also holds 1 GE in pool A where no quota row names it: nominal, borrowed and lent unknown.
    fleet = quotas([("cq-x", "research", "x", H, 1.0, NAN), ("cq-y", "research", "y", H, 2.0, NAN)])
    held = workloads(
        [
            holding("u1", "cq-x", H, 2.0, t(0), NAT),
            holding("u2", "cq-y", H, NAN, t(0), t(1)),
            holding("u3", "cq-y", A, 1.0, t(0), NAT),
        ]
    )
    out = queue_usage(held, fleet, SAMPLES[:2], STEP)
    expected = usage_frame(
        [
            ("cq-x", "research", "x", H, 1.0, [2, 2], [1, 1], [0, 0]),
            ("cq-y", "research", "y", A, NAN, [1, 1], [NAN, NAN], [NAN, NAN]),
            ("cq-y", "research", "y", H, 2.0, [NAN, 0], [NAN, 0], [NAN, 1]),
        ],
        SAMPLES[:2],
    )
    assert_frame_equal(out, expected, **EXACT)


def test_usage_wants_a_regular_tz_aware_grid() -> None:
    with pytest.raises(DataError, match="grid"):
        queue_usage(WORKLOADS, QUOTAS, pd.DatetimeIndex([t(0), t(1), t(3)]), STEP)
    with pytest.raises(DataError, match="tz-aware"):
        queue_usage(WORKLOADS, QUOTAS, pd.DatetimeIndex([t(0).tz_localize(None)]), STEP)


# Price of an H100 GPU-hour: $4, then $6 from t2 (one row per change); an L4 hour $1 (one row per sample).
RATES = prices([(H, t(0), 4.0), (H, t(2), 6.0)] + [(L, s, 1.0) for s in SAMPLES])


def summary_frame(
    rows: list[tuple[str, str, str, str, float, float, float, float, float, float]],
) -> pd.DataFrame:
    columns = list(QUEUE_SUMMARY.columns)
    frame = pd.DataFrame(rows, columns=columns)
    return frame.astype({c: "str" for c in columns[:4]} | {c: "float64" for c in columns[4:]})


def test_summary_gpu_hours_and_reserved_unused_dollars_across_a_price_change() -> None:
    # Hours are Σ GE × 1 h. Unused H100 quota is priced $4 at t0, t1 and $6 at t2, t3:
    #   cq-a/H  unused 0, 0, 2, 2 → 4 h, 2 × 6 + 2 × 6 = $24     cq-a/L nothing unused → $0
    #   cq-b/H  unused 3, 3, 3, 4 → 13 h, 12 + 12 + 18 + 24 = $66
    #   cq-c/H  unused 2, 1.4, 2, 2 → 7.4 h, 8 + 5.6 + 12 + 12 = $37.6 (lending limit irrelevant)
    #   cq-p/H  unused 2 each sample → 8 h, 8 + 8 + 12 + 12 = $40
    #   cq-solo unused 0.5, 0, 0, 0 → 0.5 h, $2
    expected = summary_frame(
        [
            ("cq-a", "research", "alpha", H, 4.0, 20.0, 8.0, 0.0, 4.0, 24.0),
            ("cq-a", "research", "alpha", L, 1.0, 4.0, 0.0, 0.0, 0.0, 0.0),
            ("cq-b", "research", "beta", H, 4.0, 3.0, 0.0, 5.25, 13.0, 66.0),
            ("cq-c", "research", "gamma", H, 2.0, 0.6, 0.0, 1.75, 7.4, 37.6),
            ("cq-p", "prod", "epsilon", H, 2.0, 0.0, 0.0, 0.0, 8.0, 40.0),
            ("cq-solo", "", "delta", H, 2.0, 10.5, 3.0, 0.0, 0.5, 2.0),
        ]
    )
    out = queue_summary(USAGE, STEP, RATES)
    assert_frame_equal(QUEUE_SUMMARY.check(out), expected, **EXACT)
    # The same samples standing for half an hour each: every hour and dollar halves.
    halved = expected.assign(**{c: expected[c] / 2 for c in list(QUEUE_SUMMARY.columns)[5:]})
    assert_frame_equal(queue_summary(USAGE, STEP / 2, RATES), halved, **EXACT)


def test_summary_price_unknown_before_a_pools_first_rate() -> None:
    # H100 priced only from t2: cq-a/H's unused (t2, t3) costs 2 × 6 + 2 × 6 = $24; cq-b/H and cq-solo
    # have unused H100 at t0, unpriced → unknown; cq-a/L uses all its quota → $0 whatever the price.
    out = queue_summary(USAGE, STEP, prices([(H, t(2), 6.0)]))
    assert out["reserved_unused_usd"].tolist()[:3] == [24.0, 0.0, pytest.approx(NAN, nan_ok=True)]
    assert math.isnan(out["reserved_unused_usd"].iloc[5])


WINDOW = {"start": t(0), "as_of": t(4)}
WAITING = workloads(
    [
        # ns, workload, queue, cluster queue, team, pool, gpus, created, admitted, finished, preemptions
        ("a", "a1", "q1", "cq-a", "alpha", H, 1.0, t(-2), t(-1), NAT, 1),  # admitted before the window
        ("a", "a2", "q1", "cq-a", "alpha", H, 1.0, t(0), t(0) + pd.Timedelta(seconds=600), t(2), 0),  # 600 s
        ("a", "a3", "q1", "cq-a", "alpha", H, 1.0, t(1), t(1.5), NAT, 2),  # 1800 s
        ("a", "a4", "q1", "cq-a", "alpha", H, 1.0, t(2), t(2) + pd.Timedelta(seconds=2400), NAT, 0),
        ("a", "a5", "q1", "cq-a", "alpha", "", 1.0, t(1), NAT, NAT, 0),  # pending, 3 h so far: 10800 s
        ("a", "a6", "q1", "cq-a", "alpha", H, 1.0, t(-5), t(-4), t(-1), 5),  # gone before the window
        ("a", "a7", "q1", "cq-a", "alpha", "", 1.0, t(1), NAT, t(2), 1),  # deleted while pending
        ("b", "b1", "q2", "cq-b", "beta", "", 1.0, t(-1), NAT, NAT, 0),  # starved: 5 h = 18000 s so far
        ("b", "b2", "q2", "cq-b", "beta", H, 1.0, t(3), t(4), NAT, 0),  # admitted at as_of: pending, 3600 s
        ("b", "c1", "q3", "cq-b", "beta", H, 1.0, t(-10), t(-9), NAT, 0),  # running all along: no wait
        ("b", "c2", "q3", "cq-b", "beta", H, 1.0, t(-10), t(-9), t(-1), 7),  # gone before the window
        ("b", "c3", "q3", "cq-b", "beta", H, 1.0, t(-3), t(-2), t(0), 3),  # finished at start: counts
        ("c", "d1", "q4", "cq-c", "gamma", H, 1.0, t(-3), t(-2), t(-0.5), 9),  # gone: no row for q4
    ]
)


def waits_frame(
    keys: dict[str, list[str]], rows: list[tuple[int, int, float, float, float, float]]
) -> pd.DataFrame:
    return pd.DataFrame(
        {
            **{k: strs(v) for k, v in keys.items()},
            "admitted_workloads": pd.Series([r[0] for r in rows], dtype="int64"),
            "pending_workloads": pd.Series([r[1] for r in rows], dtype="int64"),
            "preemptions": pd.Series([r[2] for r in rows], dtype="float64"),
            "wait_seconds_p50": pd.Series([r[3] for r in rows], dtype="float64"),
            "wait_seconds_p95": pd.Series([r[4] for r in rows], dtype="float64"),
            "wait_seconds_max": pd.Series([r[5] for r in rows], dtype="float64"),
        }
    )


def test_wait_percentiles_count_pending_waits_so_far() -> None:
    # q1: admitted in the window a2, a3, a4 (600, 1800, 2400 s) + a5 pending 10800 s so far.
    #   Sorted [600, 1800, 2400, 10800]: p50 at rank 1.5 = 1800 + 0.5 × 600 = 2100;
    #   p95 at rank 2.85 = 2400 + 0.85 × 8400 = 9540; max 10800. Preemptions a1 1 + a3 2 + a7 1 = 4.
    # q2: nothing admitted; b1 and b2 pending with 18000 and 3600 s: p50 = 10800,
    #   p95 at rank 0.95 = 3600 + 0.95 × 14400 = 17280, max 18000.
    # q3: c1 runs through the window, c3 finished exactly at start (3 preemptions); no waits.
    expected = waits_frame(
        {"namespace": ["a", "b", "b"], "queue": ["q1", "q2", "q3"]},
        [
            (3, 1, 4.0, 2100.0, 9540.0, 10800.0),
            (0, 2, 0.0, 10800.0, 17280.0, 18000.0),
            (0, 0, 3.0, NAN, NAN, NAN),
        ],
    )
    assert_frame_equal(wait_stats(WAITING, ["namespace", "queue"], **WINDOW), expected, **EXACT)


def test_wait_stats_by_team_and_for_everyone() -> None:
    by_team = waits_frame(
        {"team": ["alpha", "beta"]},
        [(3, 1, 4.0, 2100.0, 9540.0, 10800.0), (0, 2, 3.0, 10800.0, 17280.0, 18000.0)],
    )
    assert_frame_equal(wait_stats(WAITING, ["team"], **WINDOW), by_team, **EXACT)
    # All waits sorted [600, 1800, 2400, 3600, 10800, 18000]: p50 at rank 2.5 = 3000;
    # p95 at rank 4.75 = 10800 + 0.75 × 7200 = 16200.
    everyone = waits_frame({}, [(3, 3, 7.0, 3000.0, 16200.0, 18000.0)])
    assert_frame_equal(wait_stats(WAITING, [], **WINDOW), everyone, **EXACT)


def test_wait_stats_of_plain_pods() -> None:
    # Pods: created and scheduled; no finish time, preemptions unknown. p1 waited 30 s, p2 pends 3 h.
    # [30, 10800]: p50 = 5415, p95 = 30 + 0.95 × 10770 = 10261.5.
    pods = pd.DataFrame(
        {
            "namespace": strs(["ml", "ml"]),
            "pod": strs(["p1", "p2"]),
            "created_at": times([t(0), t(1)]),
            "admitted_at": times([t(0) + pd.Timedelta(seconds=30), NAT]),
        }
    )
    expected = waits_frame({"namespace": ["ml"]}, [(1, 1, NAN, 5415.0, 10261.5, 10800.0)])
    assert_frame_equal(wait_stats(pods, ["namespace"], **WINDOW), expected, **EXACT)


def hours(columns: tuple[str, str, str], rows: list[tuple[str, str, float]]) -> pd.DataFrame:
    team, pool, value = columns
    return pd.DataFrame(
        {
            team: strs([r[0] for r in rows]),
            pool: strs([r[1] for r in rows]),
            value: pd.Series([r[2] for r in rows], dtype="float64"),
        }
    )


def test_fairness_dominant_shares() -> None:
    # Quota GPU-hours: H100 alpha 40 + beta 60 = 100; L4 alpha 20 + gamma 10 + zeta 10 = 40. Pool A has none.
    quota = TEAM_QUOTA_HOURS.check(
        hours(
            ("team", "pool", "nominal_gpu_hours"),
            [("alpha", H, 40), ("beta", H, 60), ("alpha", L, 20), ("gamma", L, 10), ("zeta", L, 10)],
        )
    )
    allocated = TEAM_ALLOCATED_HOURS.check(
        hours(
            ("team", "pool", "allocated_gpu_hours"),
            [
                *[("alpha", H, 50), ("alpha", H, 10), ("alpha", L, 8), ("alpha", A, 7)],
                *[("beta", H, 30), ("gamma", L, 30), ("delta", H, 20)],
            ],
        )
    )
    # alpha: alloc H 60/100 = 0.6, L 8/40 = 0.2 → 0.6 (H); quota H 0.4, L 20/40 = 0.5 → 0.5; ratio 1.2.
    #        Its 7 h in pool A (no quota) are left out.
    # beta:  alloc 0.3 (H); quota 0.6 → 0.5.       gamma: alloc L 30/40 = 0.75; quota 0.25 → 3.0.
    # zeta:  no allocation → 0, quota 0.25 → 0.    delta: alloc 0.2, no quota → NaN.
    expected = pd.DataFrame(
        {
            "team": strs(["gamma", "alpha", "beta", "zeta", "delta"]),
            "allocation_share": [0.75, 0.6, 0.3, 0.0, 0.2],
            "quota_share": [0.25, 0.5, 0.6, 0.25, 0.0],
            "fairness_ratio": [3.0, 1.2, 0.5, 0.0, NAN],
            "dominant_pool": strs([L, H, H, "", H]),
            "unquoted_gpu_hours": [0.0, 7.0, 0.0, 0.0, 0.0],
        }
    )
    assert_frame_equal(FAIRNESS.check(fairness(allocated, quota)), expected, **EXACT)


def pending_frame(rows: list[tuple[str, str, str, float, float]]) -> pd.DataFrame:
    """PENDING_WAITS from (pod, team, pool, gpus, waiting seconds), namespace ml."""
    frame = pd.DataFrame(
        {
            "namespace": strs(["ml"] * len(rows)),
            "pod": strs([r[0] for r in rows]),
            "team": strs([r[1] for r in rows]),
            "pool": strs([r[2] for r in rows]),
            "gpus": pd.Series([r[3] for r in rows], dtype="float64"),
            "waiting_seconds": pd.Series([r[4] for r in rows], dtype="float64"),
        }
    )
    return PENDING_WAITS.check(frame)


def idle_frame(rows: list[tuple[str, str, str, float, Any]]) -> pd.DataFrame:
    """IDLE_PODS from (pod, team, pool, gpus, idle since), namespace ml."""
    frame = pd.DataFrame(
        {
            "namespace": strs(["ml"] * len(rows)),
            "pod": strs([r[0] for r in rows]),
            "team": strs([r[1] for r in rows]),
            "pool": strs([r[2] for r in rows]),
            "gpus": pd.Series([r[3] for r in rows], dtype="float64"),
            "idle_since": times([r[4] for r in rows]),
        }
    )
    return IDLE_PODS.check(frame)


def test_blocked_vs_idle_per_pool() -> None:
    pending = pending_frame(
        [
            ("p1", "alpha", H, 2.0, 1800.0),  # listed twice: counts once, its last row
            ("p1", "alpha", H, 2.0, 3600.0),
            ("p2", "beta", H, 1.0, 7200.0),
            ("p3", "gamma", L, 1.0, 1800.0),
            ("p4", "alpha", "", 4.0, 600.0),  # no product selector: the whole fleet's row
        ]
    )
    idle = idle_frame(
        [
            ("i1", "beta", H, 2.0, t(0)),
            ("i2", "delta", H, 4.0, t(0)),
            ("i3", "beta", H, 1.0, t(0)),
            ("i4", "gamma", A, 1.0, t(0)),
            ("i5", "alpha", A, 3 / 7, t(0)),  # a MIG 3g slice
        ]
    )
    # H100: 2 pods, 3 GE, 2 × 1 h + 1 × 2 h = 4 GE-hours waited; idle delta 4 + beta 2 + 1 = 7.
    # L4: 1 pod, 1 GE, 0.5 GE-hours, nothing idle.   "": 4 GE × 600 s = 2/3 GE-hours.
    # A100: nothing pending, idle 1 + 3/7.
    expected = pd.DataFrame(
        {
            "pool": strs(["", A, H, L]),
            "pending_pods": pd.Series([1, 0, 2, 1], dtype="int64"),
            "pending_gpus": [4.0, 0.0, 3.0, 1.0],
            "pending_gpu_hours_waited": [4 * 600 / 3600, 0.0, 4.0, 0.5],
            "idle_allocated_gpus": [0.0, 1 + 3 / 7, 7.0, 0.0],
            "idle_holders": strs(
                ["", "gamma (1 GPU), alpha (0.43 GPUs)", "delta (4 GPUs), beta (3 GPUs)", ""]
            ),
        }
    )
    assert_frame_equal(BLOCKED_VS_IDLE.check(blocked_vs_idle(pending, idle)), expected, **EXACT)


# Reclaim: rates now — H100 $4 until t2 then $6, L4 $1, no price for A100.
AS_OF = t(1.5)  # the last usage sample by then is t1: cq-a/H (alpha) borrows 5, cq-solo (delta) borrows 1


def idle_before(as_of: pd.Timestamp) -> pd.DataFrame:
    seconds = pd.Timedelta(seconds=1)
    return idle_frame(
        [
            ("r1", "alpha", H, 2.0, as_of - pd.Timedelta(hours=2)),
            ("r2", "beta", H, 1.0, as_of - 3600 * seconds),  # exactly the threshold: in
            ("r3", "beta", H, 4.0, as_of - 3599 * seconds),  # one second short: out
            ("r4", "delta", H, 1.0, as_of - pd.Timedelta(hours=5)),
            ("r5", "omega", H, 8.0, as_of - pd.Timedelta(hours=1)),  # a team without a queue
            ("r6", "alpha", L, 1.0, as_of - pd.Timedelta(hours=10)),
            ("r7", "gamma", A, 1.0, as_of - pd.Timedelta(hours=2)),  # no price for A100
        ]
    )


def candidates(
    rows: list[tuple[str, str, str, float, float, float, str, bool]], as_of: pd.Timestamp
) -> pd.DataFrame:
    """RECLAIM_CANDIDATES from (pod, team, pool, gpus, idle seconds, usd/hour, queue, borrowing)."""
    frame = pd.DataFrame(
        {
            "namespace": strs(["ml"] * len(rows)),
            "pod": strs([r[0] for r in rows]),
            "team": strs([r[1] for r in rows]),
            "pool": strs([r[2] for r in rows]),
            "gpus": pd.Series([r[3] for r in rows], dtype="float64"),
            "idle_since": times([as_of - pd.Timedelta(seconds=r[4]) for r in rows]),
            "idle_seconds": pd.Series([r[4] for r in rows], dtype="float64"),
            "usd_per_hour": pd.Series([r[5] for r in rows], dtype="float64"),
            "idle_usd_so_far": pd.Series([r[5] * r[4] / 3600 for r in rows], dtype="float64"),
            "cluster_queue": strs([r[6] for r in rows]),
            "borrowing": pd.Series([r[7] for r in rows], dtype="bool"),
        }
    )
    return RECLAIM_CANDIDATES.check(frame)


def test_reclaim_candidates_borrowers_first_then_dollars() -> None:
    # Pending demand in H100 and A100 (not L4: r6 stays). H100 $4 now.
    # Borrowing: r4 delta 1 × $4 × 5 h = $20, r1 alpha 2 × $4 × 2 h = $16.
    # Not borrowing: r5 omega 8 × $4 × 1 h = $32, r2 beta $4, r7 unpriced (NaN last).
    expected = candidates(
        [
            ("r4", "delta", H, 1.0, 18000.0, 4.0, "cq-solo", True),
            ("r1", "alpha", H, 2.0, 7200.0, 8.0, "cq-a", True),
            ("r5", "omega", H, 8.0, 3600.0, 32.0, "", False),
            ("r2", "beta", H, 1.0, 3600.0, 4.0, "cq-b", False),
            ("r7", "gamma", A, 1.0, 7200.0, NAN, "", False),
        ],
        AS_OF,
    )
    out = reclaim_candidates(
        idle_before(AS_OF),
        USAGE,
        [("", H), ("", A)],
        RATES,
        as_of=AS_OF.to_pydatetime(),
        min_idle_seconds=3600.0,
    )
    assert_frame_equal(out, expected, **EXACT)


def test_reclaim_reads_the_latest_sample_and_any_pool_demand() -> None:
    # At t3.5 the latest sample is t3: cq-a/H borrows no more, cq-solo still does. H100 costs $6 now.
    # Pending demand without a pool ("") makes every pool count: r6 in L4 joins (alpha's L4 queue, $1).
    as_of = t(3.5)
    expected = candidates(
        [
            ("r4", "delta", H, 1.0, 18000.0, 6.0, "cq-solo", True),
            ("r5", "omega", H, 8.0, 3600.0, 48.0, "", False),
            ("r1", "alpha", H, 2.0, 7200.0, 12.0, "cq-a", False),
            ("r6", "alpha", L, 1.0, 36000.0, 1.0, "cq-a", False),
            ("r2", "beta", H, 1.0, 3600.0, 6.0, "cq-b", False),
            ("r7", "gamma", A, 1.0, 7200.0, NAN, "", False),
        ],
        as_of,
    )
    out = reclaim_candidates(
        idle_before(as_of), USAGE, [("", "")], RATES, as_of=as_of.to_pydatetime(), min_idle_seconds=3600.0
    )
    assert_frame_equal(out, expected, **EXACT)


def test_empty_inputs_give_empty_frames_with_the_columns() -> None:
    no_workloads, no_quotas = QUEUE_WORKLOADS.empty(), QUEUE_QUOTAS.empty()
    assert_frame_equal(queue_usage(no_workloads, no_quotas, SAMPLES, STEP), QUEUE_USAGE.empty())
    assert_frame_equal(queue_usage(WORKLOADS, QUOTAS, [], STEP), QUEUE_USAGE.empty())
    assert_frame_equal(queue_summary(QUEUE_USAGE.empty(), STEP, POOL_PRICES.empty()), QUEUE_SUMMARY.empty())
    waits = wait_stats(no_workloads, ["namespace", "queue"], **WINDOW)
    assert_frame_equal(waits, waits_frame({"namespace": [], "queue": []}, []))
    assert_frame_equal(fairness(TEAM_ALLOCATED_HOURS.empty(), TEAM_QUOTA_HOURS.empty()), FAIRNESS.empty())
    assert_frame_equal(blocked_vs_idle(PENDING_WAITS.empty(), IDLE_PODS.empty()), BLOCKED_VS_IDLE.empty())
    out = reclaim_candidates(
        IDLE_PODS.empty(),
        QUEUE_USAGE.empty(),
        [("", H)],
        POOL_PRICES.empty(),
        as_of=AS_OF,
        min_idle_seconds=0.0,
    )
    assert_frame_equal(out, RECLAIM_CANDIDATES.empty())


def test_usage_is_each_samples_mean_so_hours_are_exact() -> None:
    # 2 GPUs held over [t0 + 15 min, t2 + 30 min): a quarter of t0 missed, t1 whole, half of t2.
    # Mean GE per sample 1.5, 2, 1, 0: Σ × 1 h = 4.5 GPU-hours = 2 GPUs × 2.25 h, exactly.
    fleet = quotas([("cq-x", "", "x", H, 8.0, NAN)])
    out = queue_usage(workloads([holding("v", "cq-x", H, 2.0, t(0.25), t(2.5))]), fleet, SAMPLES, STEP)
    assert out["used_gpus"].tolist() == pytest.approx([1.5, 2.0, 1.0, 0.0])
    assert float(out["used_gpus"].sum()) * STEP / 3600 == pytest.approx(2.0 * 2.25)
