"""Entities of SPEC §3: GPU-equivalents, pools, teams, prices, windows."""

from datetime import UTC, datetime, timedelta

import pytest

from gpuwatch.core.errors import ConfigError, DataError
from gpuwatch.core.model import (
    Amortization,
    DatedPrice,
    Node,
    PriceBook,
    TeamRules,
    Window,
    forecast_month_usd,
    ge_per_unit,
    mig_profile_slices,
    month_hours,
    normalize_product,
)


@pytest.mark.parametrize(
    ("product", "pool"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("nvidia-h100-80gb-hbm3", "NVIDIA-H100-80GB-HBM3"),
        ("Tesla-T4-SHARED", "TESLA-T4"),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "NVIDIA-A100-SXM4-40GB"),
    ],
)
def test_normalize_product(product: str, pool: str) -> None:
    assert normalize_product(product) == pool


def test_gpu_equivalents() -> None:
    assert ge_per_unit("nvidia.com/gpu") == 1.0
    assert ge_per_unit("nvidia.com/gpu", replicas=4) == 0.25
    assert ge_per_unit("nvidia.com/gpu.shared", replicas=8) == 0.125
    assert ge_per_unit("nvidia.com/mig-3g.40gb") == pytest.approx(3 / 7)
    assert ge_per_unit("nvidia.com/mig-1g.10gb+me") == pytest.approx(1 / 7)
    assert mig_profile_slices("7g.80gb") == 7
    with pytest.raises(DataError):
        ge_per_unit("cpu")
    with pytest.raises(DataError):
        mig_profile_slices("9g.90gb")


def test_node_capacity_in_gpu_equivalents() -> None:
    mig = Node(
        name="n",
        product="NVIDIA-A100-SXM4-80GB",
        gpu_count=1,
        capacity={
            "nvidia.com/gpu": 0,
            "nvidia.com/mig-3g.40gb": 1,
            "nvidia.com/mig-2g.20gb": 1,
            "nvidia.com/mig-1g.10gb": 2,
        },
        allocatable={"nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-1g.10gb": 2, "cpu": 64},
    )
    assert mig.capacity_gpus() == pytest.approx(1.0)
    assert mig.allocatable_gpus() == pytest.approx(5 / 7)
    shared = Node(
        name="t", product="Tesla-T4", gpu_count=4, replicas=4, allocatable={"nvidia.com/gpu.shared": 16}
    )
    assert shared.allocatable_gpus() == 4.0
    assert shared.pool == "TESLA-T4"


def test_team_resolution_order() -> None:
    rules = TeamRules(namespaces={"notebooks": "data-science"})
    assert (
        rules.team_of(namespace="ml", pod_labels={"team": "ads"}, namespace_labels={"team": "search"})
        == "ads"
    )
    assert (
        rules.team_of(namespace="ml", pod_labels={"team": ""}, namespace_labels={"team": "search"})
        == "search"
    )
    assert rules.team_of(namespace="notebooks", pod_labels={}, namespace_labels={}) == "data-science"
    assert rules.team_of(namespace="batch-jobs", pod_labels={}, namespace_labels={}) == "batch-jobs"
    custom = TeamRules(pod_label_keys=("owner", "team"), namespace_label_keys=("cost-center",))
    assert custom.team_of(namespace="x", pod_labels={"team": "b", "owner": "a"}, namespace_labels={}) == "a"
    assert custom.team_of(namespace="x", pod_labels={}, namespace_labels={"cost-center": "cc1"}) == "cc1"


def test_price_book_normalizes_products() -> None:
    book = PriceBook(default_usd_per_gpu_hour=2.0, products={"NVIDIA H100 80GB HBM3": 4.0, "nvidia-l4": 0.8})
    now = datetime(2026, 11, 20, tzinfo=UTC)
    assert book.usd_per_gpu_hour("NVIDIA-H100-80GB-HBM3", now) == 4.0
    assert book.usd_per_gpu_hour("NVIDIA-L4", now) == 0.8
    assert book.usd_per_gpu_hour("NVIDIA-B200", now) == 2.0
    assert book.knows("NVIDIA L4") and not book.knows("NVIDIA-B200")


def test_window_samples_and_coarsening() -> None:
    start = datetime(2026, 11, 1, tzinfo=UTC)
    day = Window(start=start, end=start + timedelta(days=1), step_seconds=60)
    assert day.n_samples == 1440
    assert day.coarsened() is day
    month = Window(start=start, end=start + timedelta(days=30), step_seconds=60)
    coarse = month.coarsened()
    assert coarse.step_seconds == 240 and coarse.n_samples <= 11_000
    with pytest.raises(ConfigError):
        Window(start=start, end=start)
    with pytest.raises(ConfigError):
        Window(start=start.replace(tzinfo=None), end=start + timedelta(hours=1))


def test_dated_prices_each_hold_from_their_start_until_the_next() -> None:
    def at(day: int) -> datetime:
        return datetime(2026, 11, day, tzinfo=UTC)

    book = PriceBook(
        default_usd_per_gpu_hour=3.0,
        products={
            "NVIDIA A100": (
                DatedPrice(start=at(1), usd_per_gpu_hour=2.5),
                DatedPrice(start=at(15), usd_per_gpu_hour=2.0),
            )
        },
        amortization={"NVIDIA-L4": Amortization(purchase_usd=9000.0, months=36, residual_usd=1000.0)},
    )
    assert book.usd_per_gpu_hour("NVIDIA-A100", at(14)) == 2.5
    assert book.usd_per_gpu_hour("NVIDIA-A100", at(15)) == 2.0  # in force from its start
    assert book.usd_per_gpu_hour("NVIDIA-A100", datetime(2026, 10, 31, 23, tzinfo=UTC)) == 3.0  # none yet
    assert book.usd_per_gpu_hour("NVIDIA-L4", at(1)) == pytest.approx(8000 / (36 * 730))
    assert book.knows("nvidia l4") and book.knows("NVIDIA-A100") and not book.knows("NVIDIA-B200")
    assert book.changes(at(1), at(20)) == [("NVIDIA-A100", at(15))]  # the start itself is no change inside
    assert book.changes(at(15), at(20)) == []


def test_month_hours_is_the_calendar_month_of_the_windows_last_instant() -> None:
    assert month_hours(datetime(2026, 11, 26, 7, tzinfo=UTC)) == 30 * 24
    assert month_hours(datetime(2026, 12, 1, tzinfo=UTC)) == 30 * 24  # ends as November does
    assert month_hours(datetime(2026, 12, 1, 0, 1, tzinfo=UTC)) == 31 * 24
    assert month_hours(datetime(2028, 2, 10, tzinfo=UTC)) == 29 * 24  # a leap year
    assert month_hours(datetime(2027, 1, 1, tzinfo=UTC)) == 31 * 24  # December, across the year


def test_forecast_month_is_the_windows_rate_over_the_month() -> None:
    week = Window(start=datetime(2026, 11, 19, tzinfo=UTC), end=datetime(2026, 11, 26, tzinfo=UTC))
    # $1,680 over 168 h is $10/h; November has 720 h.
    assert forecast_month_usd(1680.0, week) == pytest.approx(7200.0)
    to_date = Window(start=datetime(2026, 11, 1, tzinfo=UTC), end=datetime(2026, 11, 11, tzinfo=UTC))
    # Month to date: $2,400 spent in 240 h, then 480 h more at the same $10/h.
    assert forecast_month_usd(2400.0, to_date) == pytest.approx(2400.0 + 480 * 10.0)
