"""Right-sizing with dollars on hand-computed workloads: MIG tables, the smallest fit, savings, packing."""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pandas.testing import assert_frame_equal

from gpuwatch.analytics.rightsize import (
    BYTES_PER_GIB,
    RightsizeParams,
    framebuffer_bytes,
    gpu_model,
    mig_profiles,
    packed_gpus,
    packing_estimate,
    recommend,
    workload_usage,
)
from gpuwatch.core.errors import ConfigError, DataError
from gpuwatch.core.schema import RIGHTSIZE_WORKLOADS

A100, H100, L4, T4, A30 = (
    "NVIDIA-A100-SXM4-80GB",
    "NVIDIA-H100-80GB-HBM3",
    "NVIDIA-L4",
    "TESLA-T4",
    "NVIDIA-A30",
)
# $/GPU-hour at the window's end. A 2g.20gb of an A100 costs 2/7 × 2.8 = $0.80/h, the same as an L4.
PRICES = {A100: 2.8, H100: 4.2, L4: 0.8, T4: 0.35}
WINDOW_HOURS = 720.0
GIB = BYTES_PER_GIB
EXACT = {"check_exact": False, "rtol": 1e-12, "atol": 1e-12}

Row = tuple[str, str, float, float, float, float, float]


def workloads(rows: list[Row], index: list[int] | None = None) -> pd.DataFrame:
    """RIGHTSIZE_WORKLOADS from (pod, pool, gpus, allocated_gpu_hours, p95_busy_ge, peak GiB,
    telemetry_ratio)."""
    frame = pd.DataFrame(
        {
            "namespace": pd.Series(["ml"] * len(rows), dtype="str"),
            "pod": pd.Series([r[0] for r in rows], dtype="str"),
            "team": pd.Series(["search"] * len(rows), dtype="str"),
            "pool": pd.Series([r[1] for r in rows], dtype="str"),
            "gpus": [float(r[2]) for r in rows],
            "allocated_gpu_hours": [float(r[3]) for r in rows],
            "p95_busy_ge": [float(r[4]) for r in rows],
            "peak_fb_bytes": [float(r[5]) * GIB for r in rows],
            "telemetry_ratio": [float(r[6]) for r in rows],
        }
    )
    if index is not None:
        frame.index = pd.Index(index)
    return RIGHTSIZE_WORKLOADS.check(frame)


def expected(
    frame: pd.DataFrame, rows: list[tuple[str, str, float, float, str]], index: list[int] | None = None
) -> pd.DataFrame:
    """frame plus (kind, target, target_ge, monthly_savings_usd, reason) per row."""
    idx = frame.index if index is None else pd.Index(index)
    return frame.assign(
        recommendation_kind=pd.Series([r[0] for r in rows], index=idx, dtype="str"),
        recommendation_target=pd.Series([r[1] for r in rows], index=idx, dtype="str"),
        target_ge=pd.Series([r[2] for r in rows], index=idx, dtype="float64"),
        monthly_savings_usd=pd.Series([r[3] for r in rows], index=idx, dtype="float64"),
        recommendation_reason=pd.Series([r[4] for r in rows], index=idx, dtype="str"),
    )


# ----------------------------------------------------------------------------------------------------
# MIG profiles and framebuffer


def test_mig_profiles_of_an_a100_80gb_and_an_h100() -> None:
    names = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
    for product in (A100, "NVIDIA-A100-80GB-PCIe", H100, "NVIDIA H100 PCIe", "NVIDIA-H100-SXM5-80GB"):
        assert tuple(p.name for p in mig_profiles(product)) == names, product
    two = mig_profiles(A100)[2]
    assert (two.compute_slices, two.gpu_slices, two.fraction, two.memory_bytes) == (2, 7, 2 / 7, 20 * GIB)


def test_mig_profiles_of_an_a100_40gb_and_the_larger_hoppers() -> None:
    forty = ("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")
    assert tuple(p.name for p in mig_profiles("NVIDIA-A100-SXM4-40GB")) == forty
    assert tuple(p.name for p in mig_profiles("NVIDIA-A100-PCIE-40GB")) == forty
    nvl = ("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb")
    assert tuple(p.name for p in mig_profiles("NVIDIA-H100-NVL")) == nvl
    h200 = ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")
    assert tuple(p.name for p in mig_profiles("NVIDIA-H200")) == h200
    assert tuple(p.name for p in mig_profiles("NVIDIA-H200-NVL")) == h200
    # A 1g.10gb of an A100-40GB holds one compute slice and two memory slices.
    assert mig_profiles("NVIDIA-A100-SXM4-40GB")[1].memory_bytes == 10 * GIB


def test_the_a30_has_four_compute_slices() -> None:
    profiles = mig_profiles(A30)
    assert [(p.name, p.compute_slices, p.gpu_slices, p.fraction) for p in profiles] == [
        ("1g.6gb", 1, 4, 0.25),
        ("2g.12gb", 2, 4, 0.5),
        ("4g.24gb", 4, 4, 1.0),
    ]
    assert [p.memory_bytes for p in profiles] == [6 * GIB, 12 * GIB, 24 * GIB]


def test_products_without_mig_or_unknown_have_no_profiles() -> None:
    for product in (
        L4,
        T4,
        "NVIDIA-A10",
        "NVIDIA-A10G",
        "NVIDIA-L40S",
        "Tesla-V100-SXM2-16GB",
        "WEIRD-GPU",
        "",
    ):
        assert mig_profiles(product) == (), product
    # An A100 whose name does not say its memory could be either: no guess.
    assert mig_profiles("NVIDIA-A100-PCIE") == ()
    assert gpu_model("NVIDIA-A100-PCIE") == ""


def test_framebuffer_by_product() -> None:
    assert framebuffer_bytes(L4) == 24 * GIB
    assert framebuffer_bytes("NVIDIA L40S") == 48 * GIB
    assert framebuffer_bytes("Tesla-T4-SHARED") == 16 * GIB
    assert framebuffer_bytes("Tesla-V100-SXM2-32GB") == 32 * GIB
    assert framebuffer_bytes("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb") == 80 * GIB
    assert framebuffer_bytes("NVIDIA-H100-NVL") == 94 * GIB
    assert framebuffer_bytes("NVIDIA-H200") == 141 * GIB
    assert math.isnan(framebuffer_bytes("Tesla-V100-SXM2"))  # 16 or 32 GB: unknown
    assert math.isnan(framebuffer_bytes("WEIRD-GPU"))


# ----------------------------------------------------------------------------------------------------
# Recommendations


def test_each_kind_of_recommendation_by_hand() -> None:
    frame = workloads(
        [
            # need 0.22 × 1.2 = 0.264 GE and 14 × 1.2 = 16.8 GiB on an A100 ($2.80): 1g.* (1/7) and 1/4
            # (0.25) are too small; 2g.20gb (2/7 = 0.286, 20 GiB) at $0.80/h ties an L4 at $0.80/h and
            # MIG wins the tie. Saves (2.80 − 0.80) × 730 = 1460.
            ("mig", A100, 1, 720, 0.22, 14, 0.9),
            # need 0.12 GE and 3.6 GiB on an L4 ($0.80): 1/8 has 0.125 GE but only 3 GiB; 1/4 (6 GiB) at
            # $0.20/h beats a T4 at $0.35. Saves 0.60 × 730 = 438.
            ("slice", L4, 1, 720, 0.1, 3, 0.9),
            # need 0.48 GE and 21.6 GiB on an H100 ($4.20): the cheapest fit in the H100 is a 1/2 share
            # ($2.10/h); an L4 (24 GiB) at $0.80/h is cheaper, and 0.48 ≤ 0.5. Saves 3.40 × 730 = 2482.
            ("switch", H100, 1, 720, 0.4, 18, 0.9),
            # need 1.56 GE → 2 GPUs; 12 GiB fits one. Saves (4 − 2) × 2.80 × 730 = 4088.
            ("multi", A100, 4, 2880, 1.3, 10, 0.9),
            # need 1.08 GE: nothing under 1 GPU fits.
            ("busy", A100, 1, 720, 0.9, 60, 0.9),
            # A tenth of the window on its GPU: a tenth of "mig"'s savings.
            ("part-time", A100, 1, 72, 0.22, 14, 0.9),
        ]
    )
    got = recommend(frame, usd_per_gpu_hour=PRICES, window_hours=WINDOW_HOURS)
    want = expected(
        frame,
        [
            (
                "mig",
                "2g.20gb",
                2 / 7,
                1460.0,
                "p95 compute 0.22 GPU and peak memory 14.0 GiB fit 2g.20gb (2/7 GPU, 20 GiB) "
                "with 20% headroom",
            ),
            (
                "time_slice",
                "1/4 GPU",
                0.25,
                438.0,
                "p95 compute 0.10 GPU and peak memory 3.0 GiB fit 1/4 GPU (6 GiB of 24 GiB) "
                "with 20% headroom",
            ),
            (
                "product",
                L4,
                1.0,
                2482.0,
                "p95 compute 0.40 GPU and peak memory 18.0 GiB fit NVIDIA-L4 (1 GPU, 24 GiB, "
                "$0.80 instead of $4.20 per GPU-hour; offered only up to 0.5 GPU of compute because "
                "products differ in speed) with 20% headroom",
            ),
            (
                "gpus",
                "2 GPUs",
                2.0,
                4088.0,
                "p95 compute 1.30 GPU and peak memory 10.0 GiB fit 2 GPUs (80 GiB each, instead of 4 GPUs) "
                "with 20% headroom",
            ),
            (
                "keep",
                "",
                1.0,
                0.0,
                "p95 compute 0.90 GPU and peak memory 60.0 GiB with 20% headroom: 1 GPU is already the "
                "smallest fit",
            ),
            (
                "mig",
                "2g.20gb",
                2 / 7,
                146.0,
                "p95 compute 0.22 GPU and peak memory 14.0 GiB fit 2g.20gb (2/7 GPU, 20 GiB) "
                "with 20% headroom",
            ),
        ],
    )
    assert_frame_equal(got, want, **EXACT)


def test_too_little_evidence_gives_no_recommendation_and_says_why() -> None:
    frame = workloads(
        [
            ("blind", A100, 1, 720, 0.1, 5, 0.31),
            ("dark", A100, 1, 720, 0.1, 5, math.nan),
            ("brief", A100, 1, 0.5, 0.1, 5, 0.9),
            ("no-util", A100, 1, 720, math.nan, 5, 0.9),
            ("no-fb", A100, 1, 720, 0.1, math.nan, 0.9),
            ("neither", A100, 1, 720, math.nan, math.nan, 0.9),
            ("unpriced", "WEIRD-GPU", 1, 720, 0.1, 5, 0.9),
            ("released", A100, 0, 720, 0.1, 5, 0.9),
            ("blind-brief", "WEIRD-GPU", 1, 0.5, math.nan, 5, 0.31),  # the first failing check says why
        ],
        index=[10, 11, 12, 13, 14, 15, 16, 17, 18],
    )
    got = recommend(frame, usd_per_gpu_hour=PRICES, window_hours=WINDOW_HOURS)
    reasons = [
        "only 31% of samples had utilization telemetry (needs 50%)",
        "no samples had utilization telemetry (needs 50%)",
        "held only 0.50 GPU-hours in the window (needs 1)",
        "p95 compute is unknown",
        "peak framebuffer memory is unknown",
        "p95 compute and peak framebuffer memory are unknown",
        "no price for pool WEIRD-GPU",
        "holds no GPUs",
        "only 31% of samples had utilization telemetry (needs 50%)",
    ]
    assert_frame_equal(got, expected(frame, [("unknown", "", math.nan, math.nan, r) for r in reasons]))


def test_evidence_at_a_threshold_but_for_float_rounding_is_enough() -> None:
    """A GE-hour sum of 7 × 1/7 GE × 1 h comes out as 0.9999999999999998, and half the samples with
    telemetry as 0.4999999999999995: at the thresholds, so judged, never unknown."""
    hours = sum([1 / 7] * 7)
    assert hours < 1.0
    frame = workloads([("edge", A100, 1, hours, 0.1, 5, 0.5 - 5e-16)])
    got = recommend(frame, usd_per_gpu_hour=PRICES, window_hours=WINDOW_HOURS)
    assert got["recommendation_kind"].tolist() == ["time_slice"]  # 0.12 GE and 6 GiB: 1/8 of an A100


def test_the_cheapest_fit_wins_even_over_mig() -> None:
    # need 0.24 GE and 16.8 GiB on an A100: 2g.20gb fits ($0.80/h), but so does a 1/4 share (0.25 GE,
    # 20 GiB) at $0.70/h, and the lowest $/h wins. Saves 2.10 × 730 = 1533.
    got = recommend(
        workloads([("light", A100, 1, 720, 0.2, 14, 0.9)]), usd_per_gpu_hour=PRICES, window_hours=WINDOW_HOURS
    )
    assert got[["recommendation_kind", "recommendation_target"]].iloc[0].tolist() == ["time_slice", "1/4 GPU"]
    assert got["target_ge"].iloc[0] == 0.25
    assert got["monthly_savings_usd"].iloc[0] == pytest.approx(1533.0, rel=1e-12)
    # Without time-slicing, the MIG profile.
    no_slices = RightsizeParams(time_slice_shares=())
    got = recommend(
        workloads([("light", A100, 1, 720, 0.2, 14, 0.9)]),
        usd_per_gpu_hour=PRICES,
        window_hours=WINDOW_HOURS,
        params=no_slices,
    )
    assert got["recommendation_target"].iloc[0] == "2g.20gb"


def test_an_a30_mig_share_is_a_quarter_and_ties_with_time_slicing() -> None:
    # need 0.24 GE and 4.8 GiB on an A30 ($1.20): 1g.6gb (1/4 GPU, 6 GiB) and 1/4 (6 GiB) both cost
    # $0.30/h; MIG wins the tie. Saves 0.90 × 730 = 657.
    got = recommend(
        workloads([("a30", A30, 1, 720, 0.2, 4, 0.9)]),
        usd_per_gpu_hour={A30: 1.2},
        window_hours=WINDOW_HOURS,
    )
    assert_frame_equal(
        got,
        expected(
            workloads([("a30", A30, 1, 720, 0.2, 4, 0.9)]),
            [
                (
                    "mig",
                    "1g.6gb",
                    0.25,
                    657.0,
                    "p95 compute 0.20 GPU and peak memory 4.0 GiB fit 1g.6gb (1/4 GPU, 6 GiB) "
                    "with 20% headroom",
                )
            ],
        ),
        **EXACT,
    )


def test_a_cheaper_product_only_for_light_workloads() -> None:
    # need 0.6 GE and 21.6 GiB on an H100: an L4 would be cheaper but 0.6 > 0.5 GE; 4g.40gb (0.571) and
    # a 1/2 share are too small, 7g.80gb costs what the GPU does.
    got = recommend(
        workloads([("mid", H100, 1, 720, 0.5, 18, 0.9)]), usd_per_gpu_hour=PRICES, window_hours=WINDOW_HOURS
    )
    assert got["recommendation_kind"].iloc[0] == "keep"
    assert got["monthly_savings_usd"].iloc[0] == 0.0
    # With a higher cap, the L4 (need 0.6 ≤ 0.7).
    got = recommend(
        workloads([("mid", H100, 1, 720, 0.5, 18, 0.9)]),
        usd_per_gpu_hour=PRICES,
        window_hours=WINDOW_HOURS,
        params=RightsizeParams(cheaper_product_max_busy_ge=0.7),
    )
    assert got["recommendation_target"].iloc[0] == L4


def test_a_multi_gpu_job_is_sized_in_whole_gpus_by_memory_too() -> None:
    # need 0.36 GE but 1.2 × 100 GiB = 120 GiB: two 80 GiB GPUs. Never a MIG profile or a product.
    got = recommend(
        workloads([("wide", A100, 4, 2880, 0.3, 100, 0.9)]),
        usd_per_gpu_hour=PRICES,
        window_hours=WINDOW_HOURS,
    )
    assert got[["recommendation_kind", "recommendation_target"]].iloc[0].tolist() == ["gpus", "2 GPUs"]
    assert got["monthly_savings_usd"].iloc[0] == pytest.approx(2 * 2.8 * 730, rel=1e-12)


def test_unknown_framebuffer_keeps_and_says_so() -> None:
    got = recommend(
        workloads([("odd", "WEIRD-GPU", 2, 1440, 0.3, 10, 0.9)]),
        usd_per_gpu_hour={"WEIRD-GPU": 2.0},
        window_hours=WINDOW_HOURS,
    )
    assert got["recommendation_kind"].iloc[0] == "keep"
    assert got["recommendation_reason"].iloc[0] == (
        "p95 compute 0.30 GPU and peak memory 10.0 GiB with 20% headroom: 2 GPUs is already the smallest "
        "fit; the framebuffer of WEIRD-GPU is unknown"
    )


def test_empty_input_and_bad_arguments() -> None:
    empty = workloads([])
    got = recommend(empty, usd_per_gpu_hour=PRICES, window_hours=WINDOW_HOURS)
    assert len(got) == 0 and got["recommendation_kind"].dtype == "str"
    assert_frame_equal(
        packing_estimate(got),
        pd.DataFrame(
            {
                "pool": pd.Series([], dtype="str"),
                "gpus_before": pd.Series([], dtype="int64"),
                "gpus_after": pd.Series([], dtype="int64"),
                "gpus_freed": pd.Series([], dtype="int64"),
            }
        ),
    )
    with pytest.raises(DataError, match="window_hours"):
        recommend(empty, usd_per_gpu_hour=PRICES, window_hours=0.0)
    with pytest.raises(ConfigError, match="headroom_ratio"):
        RightsizeParams(headroom_ratio=-0.1)
    with pytest.raises(ConfigError, match="time_slice_shares"):
        RightsizeParams(time_slice_shares=(1,))


POOLS = [A100, H100, L4, T4, A30, "NVIDIA-H200", "WEIRD-GPU"]
BOOK = {A100: 2.8, H100: 4.2, L4: 0.8, T4: 0.35, A30: 1.2, "NVIDIA-H200": 5.0, "WEIRD-GPU": 2.0}


@st.composite
def fleets(draw: st.DrawFn) -> pd.DataFrame:
    n = draw(st.integers(min_value=1, max_value=25))
    rows: list[Row] = []
    for i in range(n):
        gpus = draw(st.sampled_from([1 / 7, 2 / 7, 3 / 7, 0.125, 0.25, 0.5, 1.0, 2.0, 3.0, 8.0]))
        busy = draw(st.floats(min_value=0.0, max_value=1.0)) * gpus
        peak = draw(st.one_of(st.just(math.nan), st.floats(min_value=0.0, max_value=150.0)))
        rows.append(
            (
                f"p{i}",
                draw(st.sampled_from(POOLS)),
                gpus,
                gpus * draw(st.floats(min_value=0.0, max_value=800.0)),
                busy,
                peak,
                draw(st.floats(min_value=0.0, max_value=1.0)),
            )
        )
    return workloads(rows)


@settings(max_examples=150, deadline=None)
@given(fleets())
def test_savings_are_never_negative_and_targets_fit(frame: pd.DataFrame) -> None:
    got = recommend(frame, usd_per_gpu_hour=BOOK, window_hours=WINDOW_HOURS)
    kind = got["recommendation_kind"]
    known = kind != "unknown"
    savings = got["monthly_savings_usd"]
    assert (savings[known] >= 0).all() and savings[~known].isna().all()
    assert ((savings > 0) == kind.isin(["gpus", "mig", "time_slice", "product"])).all()
    # A smaller share of the same product; a product switch may hold more GE, but costs less.
    same = known & (kind != "product")
    assert (got["target_ge"][same] <= got["gpus"][same] + 1e-9).all()
    switched = got[kind == "product"]
    today = switched["pool"].map(BOOK).astype("float64") * switched["gpus"]
    target = switched["recommendation_target"].map(BOOK).astype("float64") * switched["target_ge"]
    assert (target < today).all()
    # Every applied target holds the compute need.
    applied = known & (kind != "keep")
    need = got["p95_busy_ge"][applied] * 1.2
    assert (need <= got["target_ge"][applied] + 1e-9).all()


# ----------------------------------------------------------------------------------------------------
# Packing


def test_packed_gpus_first_fit_decreasing() -> None:
    assert packed_gpus([1 / 7] * 7) == 1  # 7 × 1/7 is 1 within the epsilon
    assert packed_gpus([2 / 7, 2 / 7, 2 / 7, 1 / 7]) == 1
    assert packed_gpus([3 / 7, 3 / 7, 2 / 7, 2 / 7]) == 2  # 3+3 | 2+2
    assert packed_gpus([0.5, 0.5, 0.5]) == 2
    # FFD: 0.6 | 0.5 | 0.6+0.4 | 0.5+0.3 | 0.5+0.3+0.2
    assert packed_gpus([0.2, 0.3, 0.4, 0.5, 0.6]) == 2
    assert packed_gpus([1.5, 0.5, 1.0, math.nan, 0.0]) == 2 + 1 + 1  # 1.5 takes two whole GPUs
    assert packed_gpus([]) == 0


def _naive_ffd(shares: list[float]) -> int:
    bins: list[float] = []
    whole = 0
    for share in sorted(shares, reverse=True):
        if share >= 1 - 1e-9:
            whole += math.ceil(share - 1e-9)
            continue
        for j, room in enumerate(bins):
            if room >= share - 1e-9:
                bins[j] = room - share
                break
        else:
            bins.append(1.0 - share)
    return whole + len(bins)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from([k / 7 for k in range(1, 8)] + [1 / 8, 1 / 4, 1 / 2, 2.0]),
            st.floats(min_value=0.01, max_value=1.0),
        ),
        max_size=60,
    )
)
def test_packed_gpus_matches_a_naive_first_fit_decreasing(shares: list[float]) -> None:
    assert packed_gpus(shares) == _naive_ffd(shares)


def test_packing_estimate_on_a_small_fleet() -> None:
    frame = workloads(
        [
            ("a1", A100, 1, 720, 0.22, 14, 0.9),  # → 2g.20gb
            ("a2", A100, 1, 720, 0.22, 14, 0.9),  # → 2g.20gb
            # need 0.36 GE and 36 GiB: 3g.40gb ($1.20/h) beats 1/2 ($1.40/h); the L4 is too small.
            ("a3", A100, 1, 720, 0.3, 30, 0.9),
            ("a4", A100, 1, 720, 0.9, 60, 0.9),  # keep
            ("a5", A100, 1, 720, 0.1, 5, 0.2),  # unknown: keeps its GPU
            ("h1", H100, 1, 720, 0.4, 18, 0.9),  # → NVIDIA-L4
            ("l1", L4, 1, 720, 0.1, 3, 0.9),  # → 1/4 GPU
        ]
    )
    got = recommend(frame, usd_per_gpu_hour=PRICES, window_hours=WINDOW_HOURS)
    assert got["recommendation_target"].tolist() == ["2g.20gb", "2g.20gb", "3g.40gb", "", "", L4, "1/4 GPU"]
    # A100: 5 GPUs before; after, 3/7 + 2/7 + 2/7 = 1 GPU (within the epsilon) and the two kept: 3.
    # H100: its one workload moves to the L4 pool. L4: 1 before; after the moved 1 GPU and 1/4: 2.
    assert_frame_equal(
        packing_estimate(got),
        pd.DataFrame(
            {
                "pool": pd.Series([A100, H100, L4], dtype="str"),
                "gpus_before": [5, 1, 1],
                "gpus_after": [3, 0, 2],
                "gpus_freed": [2, 1, -1],
            }
        ),
    )


def test_recommend_keeps_the_index_and_the_input_columns() -> None:
    rng = np.random.default_rng(7)
    n = 2000
    gpus = rng.choice([1 / 7, 0.25, 1.0, 1.0, 2.0, 8.0], n)
    frame = workloads(
        [
            (f"p{i}", str(rng.choice(POOLS)), g, g * 700, g * rng.uniform(), rng.uniform(0, 90), 0.9)
            for i, g in enumerate(gpus)
        ],
        index=list(range(n, 2 * n)),
    )
    got = recommend(frame, usd_per_gpu_hour=BOOK, window_hours=WINDOW_HOURS)
    assert got.index.equals(frame.index)
    assert_frame_equal(got[frame.columns], frame)


def test_workload_usage_from_a_hand_computed_timeline() -> None:
    """p95 of the busy GE per sample, peak memory summed over a workload's units, telemetry share."""
    stamps = pd.date_range("2026-11-20", periods=20, freq="60s", tz="UTC")
    rows = []
    for i in range(len(stamps)):
        # Pod a holds two whole GPUs: one busy i/20, the other idle; 10 GiB + 2 GiB of memory, 20 at i = 19.
        rows.append(("a", "g1", 1.0, i / 20, 10.0 if i < 19 else 20.0))
        rows.append(("a", "g2", 1.0, 0.0, 2.0))
        # Pod b holds a 2/7 MIG slice whose utilization is unknown half of the time.
        rows.append(("b", "g3", 2 / 7, 0.5 if i % 2 else math.nan, math.nan))
    frame = pd.DataFrame(
        {
            "timestamp": np.repeat(stamps, 3),
            "namespace": "ml",
            "pod": [r[0] for r in rows],
            "team": "research",
            "node": "n1",
            "pool": "NVIDIA-A100-SXM4-80GB",
            "uuid": [r[1] for r in rows],
            "gpu_instance_id": "",
            "ge_share": [r[2] for r in rows],
            "util_ratio": [r[3] for r in rows],
            "idle": False,
            "low_util_since": pd.NaT,
            "fb_used_bytes": [r[4] * BYTES_PER_GIB for r in rows],
        }
    )
    usage = workload_usage(frame, step_seconds=60).set_index("pod")
    # a: busy GE i/20 for i = 0..19; the 95th percentile (linear) of 0, 0.05, ..., 0.95 is 0.9025.
    assert usage.loc["a", "p95_busy_ge"] == pytest.approx(np.percentile(np.arange(20) / 20, 95))
    assert usage.loc["a", "peak_fb_bytes"] == 22 * BYTES_PER_GIB
    assert usage.loc["a", "allocated_gpu_hours"] == pytest.approx(2 * 20 / 60)
    assert (usage.loc["a", "gpus"], usage.loc["a", "telemetry_ratio"]) == (2.0, 1.0)
    # b: busy 0.5 × 2/7 on the samples with telemetry (the others are left out, not 0); memory unknown.
    assert usage.loc["b", "p95_busy_ge"] == pytest.approx(0.5 * 2 / 7)
    assert math.isnan(usage.loc["b", "peak_fb_bytes"])
    assert usage.loc["b", "telemetry_ratio"] == 0.5
