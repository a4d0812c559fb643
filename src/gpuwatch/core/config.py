"""Settings: CLI flags > GPUWATCH_* environment > YAML config file > defaults. The only env reader."""

import itertools
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import yaml

from gpuwatch.core.errors import ConfigError, DataError
from gpuwatch.core.model import (
    Amortization,
    Budgets,
    Commitment,
    DatedPrice,
    EnergyTariff,
    IdleParams,
    PriceBook,
    TeamRules,
    normalize_product,
)
from gpuwatch.core.units import BYTES_PER_MIB, parse_duration_seconds


@dataclass(frozen=True, slots=True, kw_only=True)
class PrometheusSettings:
    url: str | None = None
    bearer_token_file: str | None = None
    ca_file: str | None = None
    timeout_seconds: float = 60.0
    headers: Mapping[str, str] = field(default_factory=dict)  # sent with every query (Mimir's X-Scope-OrgID)


@dataclass(frozen=True, slots=True, kw_only=True)
class KubernetesSettings:
    kubeconfig: str | None = None  # None: in-cluster config
    context: str | None = None
    timeout_seconds: float = 30.0  # one request's deadline, end to end (a list is paginated: per page)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSettings:
    """One Kubernetes cluster of the fleet: its API server, and where (and under which labels) its
    series are. A cluster sharing the fleet's Prometheus-compatible store is told apart by
    matchers (default: cluster="<name>", the external label each cluster's Prometheus adds)."""

    name: str
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    prometheus: PrometheusSettings = field(default_factory=PrometheusSettings)
    matchers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ViewSettings:
    # Windows holding more GPU-samples (GPUs × samples) than this are read from recorded gpuwatch_*
    # history instead of recomputed from DCGM samples (0: always history where Prometheus holds it).
    raw_max_gpu_samples: int = 1_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class UiSettings:
    # A page waits this long for its sources before its banner says which did not answer in time.
    deadline_seconds: float = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class FocusSettings:
    """The names FOCUS rows carry for who provides, publishes and invoices the GPUs."""

    provider_name: str = "GPU platform"
    publisher_name: str = "gpuwatch"
    invoice_issuer_name: str = "GPU platform"  # another than the provider: the rows bill nothing (FOCUS)
    billing_account_id: str = "gpu-fleet"
    billing_account_name: str = "GPU fleet"


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    prometheus: PrometheusSettings = field(default_factory=PrometheusSettings)
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    teams: TeamRules = field(default_factory=TeamRules)
    pricing: PriceBook = field(default_factory=PriceBook)
    idle: IdleParams = field(default_factory=IdleParams)
    budgets: Budgets = field(default_factory=Budgets)
    views: ViewSettings = field(default_factory=ViewSettings)
    ui: UiSettings = field(default_factory=UiSettings)
    focus: FocusSettings = field(default_factory=FocusSettings)
    clusters: tuple[ClusterSettings, ...] = ()  # empty: one cluster, as `kubernetes` and `prometheus` say

    @property
    def cluster_name(self) -> str:
        """The name of the one cluster gpuwatch watches ("" when no `clusters:` list names it)."""
        return self.clusters[0].name if len(self.clusters) == 1 else ""


# Flat names shared by flags, environment (GPUWATCH_<NAME upper>) and the YAML file (section.key).
_FLAT_KEYS = {
    "prometheus_url": ("prometheus", "url"),
    "prometheus_bearer_token_file": ("prometheus", "bearer_token_file"),
    "prometheus_ca_file": ("prometheus", "ca_file"),
    "kubeconfig": ("kubernetes", "kubeconfig"),
    "context": ("kubernetes", "context"),
    "raw_max_gpu_samples": ("views", "raw_max_gpu_samples"),
}

_SCHEMA: dict[str, dict[str, str]] = {
    "prometheus": {
        "url": "str",
        "bearer_token_file": "str",
        "ca_file": "str",
        "timeout": "duration",
        "headers": "str_map",
    },
    "kubernetes": {"kubeconfig": "str", "context": "str", "timeout": "duration"},
    "teams": {"pod_label_keys": "str_list", "namespace_label_keys": "str_list", "namespaces": "str_map"},
    "pricing": {
        "default_usd_per_gpu_hour": "price",
        "products": "price_map",
        "amortization": "amortization_map",
        "commitments": "commitment_map",
        "energy": "energy",
    },
    "idle": {"threshold": "ratio", "window": "duration", "held_fb_mib": "count", "reclaim_after": "duration"},
    "budgets": {"monthly_usd": "usd_map", "idle_usd_per_hour": "usd_map"},
    "views": {"raw_max_gpu_samples": "count"},
    "ui": {"deadline": "duration"},
    "focus": {
        "provider_name": "str",
        "publisher_name": "str",
        "invoice_issuer_name": "str",
        "billing_account_id": "str",
        "billing_account_name": "str",
    },
}
# Top-level keys holding a list rather than a section of keys.
_LISTS = {"clusters"}
_CLUSTER_KEYS = ("kubeconfig", "context", "prometheus")
_CLUSTER_PROMETHEUS_KEYS = ("url", "headers", "matchers", "bearer_token_file", "ca_file")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_CLUSTER_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$")


def is_cluster_name(name: object) -> bool:
    """Whether `name` can name a cluster of a `clusters:` list (a-z, 0-9, '-', '.', '_')."""
    return isinstance(name, str) and bool(_CLUSTER_NAME.match(name))


def load_settings(
    *,
    config_path: str | None = None,
    flags: Mapping[str, str | None] | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Merge the three layers and validate; every problem is one ConfigError line naming the key."""
    env = os.environ if env is None else env
    config_path = config_path or env.get("GPUWATCH_CONFIG") or None
    tree: dict[str, Any] = _read_yaml(config_path) if config_path else {}
    clusters = tree.pop("clusters", None)
    for name, (section, key) in _FLAT_KEYS.items():
        for value in (env.get(f"GPUWATCH_{name.upper()}"), (flags or {}).get(name)):
            if value:
                tree.setdefault(section, {})[key] = value
    values = {
        f"{section}.{key}": _check(f"{section}.{key}", kind, tree.get(section, {}).get(key))
        for section, keys in _SCHEMA.items()
        for key, kind in keys.items()
    }
    settings = _build(values)
    return replace(settings, clusters=_clusters(clusters, settings)) if clusters is not None else settings


def _clusters(value: Any, settings: Settings) -> tuple[ClusterSettings, ...]:
    """clusters: [{name, kubeconfig, context, prometheus: {url, headers, matchers}}], every key but name
    optional. A cluster inherits the top-level kubernetes and prometheus settings it does not override;
    one on the fleet's own Prometheus URL is selected there by matchers, cluster="<name>" by default."""
    if not isinstance(value, list) or not value:
        raise ConfigError("config: clusters must list at least one {name, kubeconfig, context, prometheus}")
    out: list[ClusterSettings] = []
    for k, item in enumerate(value):
        where = f"clusters[{k}]"
        entry = _fields(where, item, ("name",), _CLUSTER_KEYS)
        name = entry["name"]
        if not is_cluster_name(name):
            raise ConfigError(
                f"config: {where}.name must be a cluster name (a-z, 0-9, '-', '.', '_'), got {name!r}"
            )
        if any(c.name == name for c in out):
            raise ConfigError(f"config: clusters: {name!r} is listed twice")
        kubernetes = KubernetesSettings(
            kubeconfig=_check(f"{where}.kubeconfig", "str", entry.get("kubeconfig"))
            or settings.kubernetes.kubeconfig,
            context=_check(f"{where}.context", "str", entry.get("context")),
            timeout_seconds=settings.kubernetes.timeout_seconds,
        )
        prom = _fields(f"{where}.prometheus", entry.get("prometheus") or {}, (), _CLUSTER_PROMETHEUS_KEYS)
        own_url = _check(f"{where}.prometheus.url", "str", prom.get("url"))
        matchers = _check(f"{where}.prometheus.matchers", "str_map", prom.get("matchers"))
        if matchers is None:
            matchers = {} if own_url else {"cluster": name}
        for label in matchers:
            if not _LABEL_NAME.match(label):
                raise ConfigError(f"config: {where}.prometheus.matchers: {label!r} is not a label name")
        headers = _check(f"{where}.prometheus.headers", "str_map", prom.get("headers"))
        prometheus = replace(
            settings.prometheus,
            url=own_url or settings.prometheus.url,
            headers=settings.prometheus.headers if headers is None else headers,
            bearer_token_file=_check(
                f"{where}.prometheus.bearer_token_file", "str", prom.get("bearer_token_file")
            )
            or settings.prometheus.bearer_token_file,
            ca_file=_check(f"{where}.prometheus.ca_file", "str", prom.get("ca_file"))
            or settings.prometheus.ca_file,
        )
        out.append(
            ClusterSettings(name=name, kubernetes=kubernetes, prometheus=prometheus, matchers=matchers)
        )
    return tuple(out)


def _read_yaml(path: str) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(Path(path).expanduser().read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config file {path} is not valid YAML{where}") from e
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path}: top level must be a mapping")
    for section, body in raw.items():
        if section in _LISTS:
            continue
        if section not in _SCHEMA:
            known = ", ".join([*_SCHEMA, *_LISTS])
            raise ConfigError(f"config: unknown key {section!r} (expected one of {known})")
        if body is None:
            raw[section] = {}
            continue
        if not isinstance(body, dict):
            raise ConfigError(f"config: {section} must be a mapping")
        for key in body:
            if key not in _SCHEMA[section]:
                raise ConfigError(f"config: unknown key {section}.{key}")
    return raw


def _check(name: str, kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "str":
        if not isinstance(value, str) or not value:
            raise ConfigError(f"config: {name} must be a non-empty string")
        return value
    if kind == "duration":
        try:
            seconds = parse_duration_seconds(value)
        except DataError as e:
            raise ConfigError(f"config: {name}: {e}") from e
        if seconds <= 0:
            raise ConfigError(f"config: {name} must be a positive duration")
        return seconds
    if kind in ("price", "ratio"):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ConfigError(f"config: {name} must be a number, got {value!r}")
        if value < 0:
            raise ConfigError(f"config: {name} must not be negative, got {value}")
        if kind == "ratio" and value > 1:
            raise ConfigError(f"config: {name} must be a ratio in [0, 1], got {value}")
        return float(value)
    if kind == "count":
        try:
            count = int(str(value).replace("_", ""))
        except ValueError:
            raise ConfigError(f"config: {name} must be a whole number, got {value!r}") from None
        if count < 0 or isinstance(value, bool):
            raise ConfigError(f"config: {name} must be a whole number ≥ 0, got {value!r}")
        return count
    if kind == "str_list":
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"config: {name} must be a list of strings")
        return tuple(value)
    if kind in ("str_map", "price_map", "amortization_map", "commitment_map", "usd_map"):
        if not isinstance(value, dict):
            raise ConfigError(f"config: {name} must be a mapping")
        value_kind = {
            "str_map": "str",
            "price_map": "dated_price",
            "amortization_map": "amortization",
            "commitment_map": "commitments",
            "usd_map": "price",
        }[kind]
        return {str(k): _check(f"{name}.{k}", value_kind, v) for k, v in value.items()}
    if kind == "dated_price":
        return _check(name, "price", value) if not isinstance(value, list) else _dated_prices(name, value)
    if kind == "amortization":
        return _amortization(name, value)
    if kind == "commitments":
        return _commitments(name, value)
    if kind == "energy":
        return _energy(name, value)
    raise AssertionError(kind)


def _fields(
    name: str, value: Any, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A mapping with exactly the `required` keys and some of the `optional` ones (one-line errors)."""
    if not isinstance(value, dict):
        raise ConfigError(f"config: {name} must be a mapping with {', '.join(required)}")
    for key in value:
        if key not in required + optional:
            raise ConfigError(f"config: unknown key {name}.{key}")
    for key in required:
        if key not in value:
            raise ConfigError(f"config: {name} lacks {key}")
    return value


def _dated_prices(name: str, value: list[Any]) -> tuple[DatedPrice, ...]:
    """[{from, usd_per_gpu_hour}, ...] -> DatedPrice by start; two prices from one time overlap."""
    return tuple(DatedPrice(start=t, usd_per_gpu_hour=p) for t, p in _dated(name, value, "usd_per_gpu_hour"))


def _dated(name: str, value: list[Any], key: str) -> list[tuple[datetime, float]]:
    """[{from, <key>}, ...] -> (start, price) by start; two prices from one time overlap."""
    if not value:
        raise ConfigError(f"config: {name} must list at least one {{from, {key}}}")
    prices = []
    for k, item in enumerate(value):
        where = f"{name}[{k}]"
        entry = _fields(where, item, ("from", key))
        prices.append(
            (_instant(f"{where}.from", entry["from"]), _check(f"{where}.{key}", "price", entry[key]))
        )
    prices.sort(key=lambda p: p[0])
    for a, b in itertools.pairwise(prices):
        if a[0] == b[0]:
            raise ConfigError(f"config: {name} has two prices from {a[0].isoformat()} (dated prices overlap)")
    return prices


def _energy(name: str, value: Any) -> EnergyTariff:
    """{usd_per_kwh: a number or [{from, usd_per_kwh}, ...], pue: a number ≥ 1 (default 1)}."""
    entry = _fields(name, value, ("usd_per_kwh",), ("pue",))
    price = entry["usd_per_kwh"]
    schedule: list[tuple[datetime | None, float]] = (
        list(_dated(f"{name}.usd_per_kwh", price, "usd_per_kwh"))
        if isinstance(price, list)
        else [(None, _check(f"{name}.usd_per_kwh", "price", price))]
    )
    pue = _check(f"{name}.pue", "price", entry.get("pue", 1.0))
    if pue < 1.0:
        raise ConfigError(f"config: {name}.pue is facility power over IT power, at least 1, got {pue:g}")
    return EnergyTariff(usd_per_kwh=tuple(schedule), pue=pue)


def _instant(name: str, value: Any) -> datetime:
    """An ISO 8601 time with a timezone (YAML may hand it over parsed), or a date (midnight UTC)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(f"config: {name} must be an ISO 8601 time, got {value!r}") from None
    if isinstance(value, date) and not isinstance(value, datetime):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if not isinstance(value, datetime):
        raise ConfigError(f"config: {name} must be an ISO 8601 time, got {value!r}")
    if value.tzinfo is None:
        raise ConfigError(f"config: {name} must carry a timezone (e.g. 2026-11-15T00:00:00Z), got {value}")
    return value.astimezone(UTC)


def _amortization(name: str, value: Any) -> Amortization:
    entry = _fields(name, value, ("purchase_usd", "months"), ("residual_usd",))
    purchase = _check(f"{name}.purchase_usd", "price", entry["purchase_usd"])
    months = entry["months"]
    if isinstance(months, bool) or not isinstance(months, int) or months < 1:
        raise ConfigError(f"config: {name}.months must be a whole number of months ≥ 1, got {months!r}")
    residual = _check(f"{name}.residual_usd", "price", entry.get("residual_usd", 0.0))
    if residual > purchase:
        raise ConfigError(f"config: {name}.residual_usd ({residual:g}) exceeds purchase_usd ({purchase:g})")
    return Amortization(purchase_usd=purchase, months=months, residual_usd=residual)


def _commitments(name: str, value: Any) -> tuple[Commitment, ...]:
    """[{from, until, gpus, usd_per_gpu_hour}, ...]: GPUs paid for at a committed rate over [from, until);
    commitments of one product may overlap (they add up)."""
    if not isinstance(value, list) or not value:
        raise ConfigError(f"config: {name} must list at least one {{from, until, gpus, usd_per_gpu_hour}}")
    out = []
    for k, item in enumerate(value):
        where = f"{name}[{k}]"
        entry = _fields(where, item, ("from", "until", "gpus", "usd_per_gpu_hour"))
        start, end = _instant(f"{where}.from", entry["from"]), _instant(f"{where}.until", entry["until"])
        if end <= start:
            raise ConfigError(
                f"config: {where}.until ({end.isoformat()}) must come after its from ({start.isoformat()})"
            )
        gpus = _check(f"{where}.gpus", "price", entry["gpus"])
        if gpus <= 0:
            raise ConfigError(f"config: {where}.gpus must be a number of GPUs above 0, got {gpus:g}")
        rate = _check(f"{where}.usd_per_gpu_hour", "price", entry["usd_per_gpu_hour"])
        out.append(Commitment(start=start, end=end, gpus=gpus, usd_per_gpu_hour=rate))
    return tuple(sorted(out, key=lambda c: c.start))


def _price_book(v: Mapping[str, Any]) -> PriceBook:
    products, amortization = v["pricing.products"] or {}, v["pricing.amortization"] or {}
    both = sorted({normalize_product(p) for p in products} & {normalize_product(p) for p in amortization})
    if both:
        raise ConfigError(
            f"config: pricing: {both[0]} is both priced (products) and amortized (amortization)"
        )
    default = v["pricing.default_usd_per_gpu_hour"]
    return PriceBook(
        default_usd_per_gpu_hour=2.0 if default is None else default,
        products=products,
        amortization=amortization,
        commitments=v["pricing.commitments"] or {},
        energy=v["pricing.energy"],
    )


def _build(v: Mapping[str, Any]) -> Settings:
    def pick(key: str, default: Any) -> Any:
        return default if v[key] is None else v[key]

    return Settings(
        prometheus=PrometheusSettings(
            url=v["prometheus.url"],
            bearer_token_file=v["prometheus.bearer_token_file"],
            ca_file=v["prometheus.ca_file"],
            timeout_seconds=pick("prometheus.timeout", 60.0),
            headers=pick("prometheus.headers", {}),
        ),
        kubernetes=KubernetesSettings(
            kubeconfig=v["kubernetes.kubeconfig"],
            context=v["kubernetes.context"],
            timeout_seconds=pick("kubernetes.timeout", 30.0),
        ),
        teams=TeamRules(
            pod_label_keys=pick("teams.pod_label_keys", ("team",)),
            namespace_label_keys=pick("teams.namespace_label_keys", ("team",)),
            namespaces=pick("teams.namespaces", {}),
        ),
        pricing=_price_book(v),
        idle=IdleParams(
            threshold_ratio=pick("idle.threshold", 0.05),
            window_seconds=int(pick("idle.window", 1800)),
            held_fb_bytes=float(pick("idle.held_fb_mib", 1024)) * BYTES_PER_MIB,
            reclaim_after_seconds=int(pick("idle.reclaim_after", 7200)),
        ),
        budgets=Budgets(
            monthly_usd=pick("budgets.monthly_usd", {}),
            idle_usd_per_hour=pick("budgets.idle_usd_per_hour", {}),
        ),
        views=ViewSettings(raw_max_gpu_samples=pick("views.raw_max_gpu_samples", 1_000_000)),
        ui=UiSettings(deadline_seconds=pick("ui.deadline", 30.0)),
        focus=FocusSettings(**{k: v[f"focus.{k}"] for k in _SCHEMA["focus"] if v[f"focus.{k}"] is not None}),
    )
