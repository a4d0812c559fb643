"""The UI's global filters and their URL form: what a shared link says is what the page shows."""

from datetime import UTC, datetime

from gpuwatch.ui.filters import CUSTOM, Filters, from_controls, parse_query, parse_time, to_query


def test_defaults_have_an_empty_query() -> None:
    assert parse_query("") == Filters()
    assert parse_query(None) == Filters()
    assert to_query(Filters()) == ""


def test_a_query_round_trips() -> None:
    filters = Filters(
        window="7d", pools=("NVIDIA-L4", "TESLA-T4"), products=("Tesla-T4-SHARED",), teams=("a b",)
    )
    query = to_query(filters)
    assert query == "?window=7d&pool=NVIDIA-L4&pool=TESLA-T4&product=Tesla-T4-SHARED&team=a+b"
    assert parse_query(query) == filters


def test_a_custom_window_is_start_and_end() -> None:
    filters = parse_query("?start=2026-11-18T00:00Z&end=2026-11-19 12:30&team=x")
    assert filters.window == CUSTOM
    assert filters.start == datetime(2026, 11, 18, tzinfo=UTC)
    assert filters.end == datetime(2026, 11, 19, 12, 30, tzinfo=UTC)
    assert to_query(filters) == "?start=2026-11-18T00%3A00Z&end=2026-11-19T12%3A30Z&team=x"
    assert parse_query(to_query(filters)) == filters


def test_bad_values_fall_back_to_the_defaults() -> None:
    assert parse_query("?window=2y") == Filters()
    assert parse_query("?start=yesterday&end=2026-11-19") == Filters()
    assert parse_query("?start=2026-11-19&end=2026-11-18").window == "24h"  # end before start
    assert parse_query("?window=1h&start=2026-11-19").window == "1h"  # start alone is not a window
    assert parse_query("?team=a,b&team=b").teams == ("a", "b")


def test_parse_time_takes_dates_and_offsets() -> None:
    assert parse_time("2026-11-19") == datetime(2026, 11, 19, tzinfo=UTC)
    assert parse_time("2026-11-19T02:00+02:00") == datetime(2026, 11, 19, tzinfo=UTC)
    assert parse_time("") is None and parse_time("soon") is None


def test_controls_make_filters_and_a_custom_window_needs_both_ends() -> None:
    assert from_controls("7d", None, None, ["P"], None, ["t"]) == Filters(
        window="7d", pools=("P",), teams=("t",)
    )
    assert from_controls("custom", "2026-11-19", "", None, None, None).window == "24h"
    chosen = from_controls("custom", "2026-11-19", "2026-11-20", None, None, None)
    assert (chosen.window, chosen.start, chosen.end) == (
        CUSTOM,
        datetime(2026, 11, 19, tzinfo=UTC),
        datetime(2026, 11, 20, tzinfo=UTC),
    )
    assert Filters(teams=("x",)).scoped and not Filters(window="7d").scoped
    assert Filters(pools=("A",), teams=("x",)).describe() == "pool A · team x"


def test_the_cluster_filter_lives_in_the_url() -> None:
    f = parse_query("?cluster=eu-1&cluster=us-1&pool=NVIDIA-L4")
    assert f.clusters == ("eu-1", "us-1") and f.pools == ("NVIDIA-L4",) and f.scoped
    assert parse_query(to_query(f)) == f
    assert to_query(f) == "?cluster=eu-1&cluster=us-1&pool=NVIDIA-L4"
    assert f.describe() == "cluster eu-1, us-1 · pool NVIDIA-L4"
    assert from_controls("24h", None, None, None, None, None, ["eu-1"]).clusters == ("eu-1",)
    assert f.unscoped().clusters == ()
