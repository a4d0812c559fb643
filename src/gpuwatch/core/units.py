"""Base units and conversions: bytes, ratios, watts, joules, seconds; Kubernetes quantities."""

import re
from decimal import Decimal, InvalidOperation

from gpuwatch.core.errors import DataError

BYTES_PER_MIB = 1024 * 1024
SECONDS_PER_HOUR = 3600.0
JOULES_PER_MILLIJOULE = 1e-3


def mib_to_bytes(mib: float) -> float:
    return mib * BYTES_PER_MIB


def bytes_to_mib(n_bytes: float) -> float:
    return n_bytes / BYTES_PER_MIB


def percent_to_ratio(percent: float) -> float:
    return percent / 100.0


def millijoules_to_joules(mj: float) -> float:
    return mj * JOULES_PER_MILLIJOULE


_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_SUFFIX = {
    None: Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def parse_quantity(text: str | int | float) -> float:
    """Parse a Kubernetes resource quantity ("500m", "2", "16Gi", "1e3") into a float.

    Raises DataError with a one-line message for anything else ("abc", "", "1.5.2").
    """
    if isinstance(text, bool):
        raise DataError(f"malformed quantity {text!r}")
    if isinstance(text, int | float):
        return float(text)
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise DataError(f"malformed quantity {text!r}")
    try:
        return float(Decimal(match.group(1)) * _SUFFIX[match.group(2)])
    except InvalidOperation as e:
        raise DataError(f"malformed quantity {text!r}") from e


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_DURATION_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration_seconds(text: str | int | float) -> float:
    """Parse a Prometheus-style duration ("30s", "5m", "1h30m", "7d") or a number of seconds."""
    if isinstance(text, bool):
        raise DataError(f"bad duration {text!r}")
    if isinstance(text, int | float):
        if text < 0:
            raise DataError(f"bad duration {text!r}: negative")
        return float(text)
    s = text.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", s):
        return float(s)
    if not s or _DURATION.sub("", s) != "":
        raise DataError(f"bad duration {text!r} (expected e.g. 30s, 5m, 1h30m, 7d)")
    return sum(float(n) * _DURATION_SECONDS[u] for n, u in _DURATION.findall(s))
