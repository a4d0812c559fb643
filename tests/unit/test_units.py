"""Base-unit conversions and Kubernetes quantity / duration parsing."""

import pytest

from gpuwatch.core.errors import DataError
from gpuwatch.core.units import (
    mib_to_bytes,
    millijoules_to_joules,
    parse_duration_seconds,
    parse_quantity,
    percent_to_ratio,
)


def test_conversions_to_base_units() -> None:
    assert mib_to_bytes(81559) == 81559 * 1048576
    assert percent_to_ratio(37.0) == pytest.approx(0.37)
    assert millijoules_to_joules(213382036) == pytest.approx(213382.036)


@pytest.mark.parametrize(
    ("text", "value"),
    [("8", 8.0), ("0", 0.0), ("500m", 0.5), ("16Gi", 16 * 2**30), ("1k", 1000.0), ("1e3", 1000.0), (2, 2.0)],
)
def test_parse_quantity(text: str, value: float) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["abc", "", "1.5.2", "8 GPUs", "Gi"])
def test_parse_quantity_rejects_garbage_in_one_line(text: str) -> None:
    with pytest.raises(DataError) as err:
        parse_quantity(text)
    assert "malformed quantity" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("5m", 300), ("1h30m", 5400), ("7d", 604800), ("90", 90)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["5x", "m5", "", "1h 30m", "-5m"])
def test_parse_duration_rejects_garbage(text: str) -> None:
    with pytest.raises(DataError, match="bad duration"):
        parse_duration_seconds(text)
