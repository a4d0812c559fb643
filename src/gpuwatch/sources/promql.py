"""PromQL's parts (escaped strings, label matchers, selectors) and the raw path's queries over DCGM series,
as named builders whose docstrings show the exact query; ownseries and historyqueries build gpuwatch's own."""

import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from gpuwatch.core.errors import ConfigError
from gpuwatch.sources.dcgm import Field

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")
WIDTH: Final = 100  # line width of the pretty-printed queries (they sit in docstrings too)


def escape_string(value: str) -> str:
    """A value as the body of a double-quoted PromQL string: backslash, double quote and newline escaped.

    >>> escape_string('team"} or vector(1) or {a="')
    'team\\\\"} or vector(1) or {a=\\\\"'
    """
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_regex(value: str) -> str:
    """A literal for an RE2 (=~) matcher: metacharacters backslash-escaped (string escaping comes later)."""
    return _RE2_SPECIAL.sub(r"\\\1", value)


def check_label_name(name: str) -> str:
    if not _LABEL_NAME.match(name):
        raise ConfigError(f"not a valid Prometheus label name: {name!r}")
    return name


def check_metric_name(name: str) -> str:
    if not _METRIC_NAME.match(name):
        raise ConfigError(f"not a valid Prometheus metric name: {name!r}")
    return name


@dataclass(frozen=True, slots=True)
class Matcher:
    """One label matcher; the value is escaped when rendered, so user input stays a literal."""

    label: str
    value: str
    op: Literal["=", "!=", "=~", "!~"] = "="

    def __post_init__(self) -> None:
        check_label_name(self.label)

    def render(self) -> str:
        return f'{self.label}{self.op}"{escape_string(self.value)}"'


def equals(label: str, value: str) -> Matcher:
    return Matcher(label, value, "=")


def one_of(label: str, values: Iterable[str]) -> Matcher:
    """label =~ "v1|v2|..." with every value a literal (regex metacharacters escaped)."""
    return Matcher(label, "|".join(escape_regex(v) for v in values), "=~")


def selector(metric: str, matchers: Sequence[Matcher] = ()) -> str:
    """metric{m1,m2,...}, or the bare metric name without matchers.

    >>> selector("DCGM_FI_DEV_GPU_UTIL", [equals("exported_namespace", 'x"} or vector(1) or {a="')])
    'DCGM_FI_DEV_GPU_UTIL{exported_namespace="x\\\\"} or vector(1) or {a=\\\\""}'
    """
    check_metric_name(metric)
    if not matchers:
        return metric
    return metric + "{" + ", ".join(m.render() for m in matchers) + "}"


def names_selector(metrics: Iterable[str], matchers: Sequence[Matcher] = ()) -> str:
    """{__name__=~"a|b|..."} plus matchers: every alias of some fields, for series and label-value lookups.

    >>> names_selector(["DCGM_FI_DEV_GPU_UTIL", "dcgm_gpu_utilization"])
    '{__name__=~"DCGM_FI_DEV_GPU_UTIL|dcgm_gpu_utilization"}'
    """
    names = [check_metric_name(m) for m in metrics]
    return "{" + ", ".join(m.render() for m in (one_of("__name__", names), *matchers)) + "}"


def dcgm_names_selector(matchers: Sequence[Matcher] = ()) -> str:
    """Every name of DCGM's and other vendors' exporters, for /api/v1/label/__name__/values?match[]=...

    AMD's are gpu_* (amd_gpu_* with its usual prefix), Gaudi's habanalabs_*::

    {__name__=~"DCGM_.+|dcgm_.+|gpu_.+|amd_gpu_.+|habanalabs_.+"}
    """
    names = Matcher("__name__", "DCGM_.+|dcgm_.+|gpu_.+|amd_gpu_.+|habanalabs_.+", "=~")
    return "{" + ", ".join(m.render() for m in (names, *matchers)) + "}"


def field_aliases_selector(fields: Sequence[Field], matchers: Sequence[Matcher] = ()) -> str:
    """The raw series of some catalog fields under any alias (for /api/v1/series and counts).

    field_aliases_selector([PROF_GR_ENGINE_ACTIVE, DEV_GPU_UTIL]) is::

        {__name__=~"DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO|dcgm_fi_prof_gr_engine_active|DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_GPU_UTIL_RATIO|dcgm_gpu_utilization|gpu_gfx_activity|amd_gpu_gfx_activity|habanalabs_utilization"}
    """
    return names_selector([m for f in fields for m in f.metrics], matchers)


def liveness_query() -> str:
    """The cheapest question a query API answers (whether it answers at all), evaluated on no series::

    vector(1)
    """
    return "vector(1)"


def series_count_query(fields: Sequence[Field], matchers: Sequence[Matcher] = ()) -> str:
    """How many raw series the fields have now (sizes range-query chunks under the samples limit).

    series_count_query([PROF_GR_ENGINE_ACTIVE, DEV_GPU_UTIL]) is::

        count({__name__=~"DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO|dcgm_fi_prof_gr_engine_active|DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_GPU_UTIL_RATIO|dcgm_gpu_utilization|gpu_gfx_activity|amd_gpu_gfx_activity|habanalabs_utilization"})
    """
    return f"count({field_aliases_selector(fields, matchers)})"


# ---------------------------------------------------------------------------------------------
# Per-unit aggregates


def _by(aggregate: str, labels: Sequence[str], body: str) -> str:
    """aggregate by (labels, wrapped) (body), with the body indented two spaces."""
    listed = textwrap.fill(", ".join(labels), width=WIDTH, initial_indent="  ", subsequent_indent="  ")
    return f"{aggregate} by (\n{listed}\n) (\n{textwrap.indent(body, '  ')}\n)"


_RANGE_FUNCTION: Final = {
    "gauge": "avg_over_time",
    "counter": "last_over_time",
    "last_value": "last_over_time",
}
# What identifies a GPU unit on both sides of `unless` (either spelling of the renamed labels).
UNIT_MATCH_LABELS: Final = ("UUID", "uuid", "GPU_I_ID", "Hostname", "hostname")


def dcgm_alias_query(
    field: Field,
    metric: str,
    *,
    step_seconds: int,
    matchers: Sequence[Matcher] = (),
    unless_metrics: Sequence[str] = (),
) -> str:
    """One alias of a catalog field per raw series over each step (SPEC §3), optionally minus the GPU
    units that report any of `unless_metrics` at that step.

    Evaluated at t_i + step it covers sample i = [t_i, t_i + step): gauges are averaged over the step
    (avg_over_time), counters and sticky values read last (last_over_time). Nothing else happens on the
    server: the reduction that matters, a step's raw scrapes to one point, is done there, while label
    work (unit conversion per alias, uuid/hostname spellings, `vgpu` copies, MIG parents, xid codes) is
    done per series on the client (`dcgmrows.row_block`). Prometheus evaluates label_replace, `or` and
    `avg by` per step and series: on a week of 1,000 GPUs that costs ~10x the reads themselves
    (benchmarks/collect.py). The range function drops the metric name; the caller knows it (one query
    per alias).

    dcgm_alias_query(DEV_GPU_UTIL, "DCGM_FI_DEV_GPU_UTIL", step_seconds=60,
    unless_metrics=["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]) is::

        avg_over_time(DCGM_FI_DEV_GPU_UTIL[60s])
        unless on (UUID, uuid, GPU_I_ID, Hostname, hostname) {__name__=~"DCGM_FI_PROF_GR_ENGINE_ACTIVE"}
    """
    if step_seconds <= 0:
        raise ConfigError(f"step must be positive, got {step_seconds}s")
    if metric not in field.metrics:
        raise ConfigError(f"{metric} is not an alias of {field.name}")
    query = f"{_RANGE_FUNCTION[field.kind]}({selector(metric, matchers)}[{step_seconds}s])"
    if unless_metrics:
        on = ", ".join(UNIT_MATCH_LABELS)
        query += f"\nunless on ({on}) {names_selector(unless_metrics, matchers)}"
    return query
