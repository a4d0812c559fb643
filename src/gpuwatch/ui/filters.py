"""The global filters (window, cluster, pool, product, team) and their query-string form, so a view can be
shared."""

from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlencode

# Window presets: days each, and the grid their end is floored to, so a live view is recomputed at most
# that often (a 7-day analysis every minute would be all the UI does).
PRESETS: dict[str, float] = {"1h": 1 / 24, "24h": 1.0, "7d": 7.0, "30d": 30.0}
PRESET_GRID_SECONDS: dict[str, int] = {"1h": 60, "24h": 300, "7d": 900, "30d": 3600}
DEFAULT_WINDOW = "24h"
CUSTOM = "custom"


@dataclass(frozen=True, slots=True, kw_only=True)
class Filters:
    """What the user asked to see; `window` is a preset name or "custom" (then start and end are set)."""

    window: str = DEFAULT_WINDOW
    start: datetime | None = None
    end: datetime | None = None
    pools: tuple[str, ...] = ()
    products: tuple[str, ...] = ()
    teams: tuple[str, ...] = ()
    clusters: tuple[str, ...] = ()

    @property
    def scoped(self) -> bool:
        """True when a cluster, pool, product or team filter narrows the fleet."""
        return bool(self.pools or self.products or self.teams or self.clusters)

    def unscoped(self) -> "Filters":
        """The same window over the whole fleet."""
        return Filters(window=self.window, start=self.start, end=self.end)

    def describe(self) -> str:
        """A short human description of the scope, e.g. "pool NVIDIA-L4 · team vision"."""
        parts = []
        for label, values in (
            ("cluster", self.clusters),
            ("pool", self.pools),
            ("product", self.products),
            ("team", self.teams),
        ):
            if values:
                parts.append(f"{label} {', '.join(values)}")
        return " · ".join(parts) or "whole fleet"


def parse_time(text: str | None) -> datetime | None:
    """An ISO 8601 date or date-time (naive = UTC), or None when empty or malformed."""
    if not text or not text.strip():
        return None
    value = text.strip().replace(" ", "T")
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def format_time(value: datetime | None) -> str:
    """The form parse_time reads back and a person types: 2026-11-19T14:00Z."""
    if value is None:
        return ""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ")


def _values(query: dict[str, list[str]], key: str) -> tuple[str, ...]:
    out: list[str] = []
    for raw in query.get(key, []):
        out += [v.strip() for v in raw.split(",") if v.strip()]
    return tuple(dict.fromkeys(out))


def parse_query(search: str | None) -> Filters:
    """Filters from a URL query string ("?window=7d&pool=A&team=x"); unknown or bad values fall back."""
    query = parse_qs((search or "").lstrip("?"), keep_blank_values=False)
    window = (query.get("window") or [DEFAULT_WINDOW])[-1]
    start = parse_time((query.get("start") or [""])[-1])
    end = parse_time((query.get("end") or [""])[-1])
    if start is not None and end is not None and end > start:
        window = CUSTOM
    elif window not in PRESETS:
        window = DEFAULT_WINDOW
    if window != CUSTOM:
        start = end = None
    return Filters(
        window=window,
        start=start,
        end=end,
        pools=_values(query, "pool"),
        products=_values(query, "product"),
        teams=_values(query, "team"),
        clusters=_values(query, "cluster"),
    )


def to_query(filters: Filters) -> str:
    """The query string of the filters ("" for the defaults), repeated keys for several values."""
    pairs: list[tuple[str, str]] = []
    if filters.window == CUSTOM and filters.start and filters.end:
        pairs += [("start", format_time(filters.start)), ("end", format_time(filters.end))]
    elif filters.window != DEFAULT_WINDOW:
        pairs.append(("window", filters.window))
    pairs += [("cluster", c) for c in filters.clusters]
    pairs += [("pool", p) for p in filters.pools]
    pairs += [("product", p) for p in filters.products]
    pairs += [("team", t) for t in filters.teams]
    return "?" + urlencode(pairs) if pairs else ""


def from_controls(
    window: str | None,
    start: str | None,
    end: str | None,
    pools: list[str] | None,
    products: list[str] | None,
    teams: list[str] | None,
    clusters: list[str] | None = None,
) -> Filters:
    """Filters from the values of the filter bar's controls (a custom window needs a valid start < end)."""
    begin, finish = parse_time(start), parse_time(end)
    chosen = window if window in PRESETS else DEFAULT_WINDOW
    if window == CUSTOM and begin is not None and finish is not None and finish > begin:
        chosen = CUSTOM
    return Filters(
        window=chosen,
        start=begin if chosen == CUSTOM else None,
        end=finish if chosen == CUSTOM else None,
        pools=tuple(pools or ()),
        products=tuple(products or ()),
        teams=tuple(teams or ()),
        clusters=tuple(clusters or ()),
    )
