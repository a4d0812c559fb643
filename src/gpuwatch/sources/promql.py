"""Every PromQL string gpuwatch sends, as named builders whose docstrings show the exact query."""

import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from gpuwatch.errors import ConfigError
from gpuwatch.sources.dcgm import (
    DEV_GPU_UTIL,
    FIELD_LABEL,
    GROUP_LABELS,
    PROF_GR_ENGINE_ACTIVE,
    Alias,
    Field,
)

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


def dcgm_names_selector() -> str:
    """Every DCGM metric name, for /api/v1/label/__name__/values?match[]=...

    {__name__=~"DCGM_.+|dcgm_.+"}
    """
    return '{__name__=~"DCGM_.+|dcgm_.+"}'


def field_aliases_selector(fields: Sequence[Field], matchers: Sequence[Matcher] = ()) -> str:
    """The raw series of some catalog fields under any alias (for /api/v1/series and counts).

    field_aliases_selector([PROF_GR_ENGINE_ACTIVE, DEV_GPU_UTIL]) is::

        {__name__=~"DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO|dcgm_fi_prof_gr_engine_active|DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_GPU_UTIL_RATIO|dcgm_gpu_utilization"}
    """
    return names_selector([m for f in fields for m in f.metrics], matchers)


def series_count_query(fields: Sequence[Field], matchers: Sequence[Matcher] = ()) -> str:
    """How many raw series the fields have now (sizes range-query chunks under the samples limit).

    series_count_query([PROF_GR_ENGINE_ACTIVE, DEV_GPU_UTIL]) is::

        count({__name__=~"DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO|dcgm_fi_prof_gr_engine_active|DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_GPU_UTIL_RATIO|dcgm_gpu_utilization"})
    """
    return f"count({field_aliases_selector(fields, matchers)})"


# ---------------------------------------------------------------------------------------------
# Per-unit aggregates


def _by(aggregate: str, labels: Sequence[str], body: str) -> str:
    """aggregate by (labels, wrapped) (body), with the body indented two spaces."""
    listed = textwrap.fill(", ".join(labels), width=WIDTH, initial_indent="  ", subsequent_indent="  ")
    return f"{aggregate} by (\n{listed}\n) (\n{textwrap.indent(body, '  ')}\n)"


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _alias_term(alias: Alias, function: str, step_seconds: int, matchers: Sequence[Matcher]) -> str:
    term = f"{function}({selector(alias.metric, matchers)}[{step_seconds}s])"
    if alias.mul != 1.0:
        term += f" * {_number(alias.mul)}"
    if alias.div != 1.0:
        term += f" / {_number(alias.div)}"
    return term


_RANGE_FUNCTION: Final = {
    "gauge": "avg_over_time",
    "counter": "last_over_time",
    "last_value": "last_over_time",
}
_COPIES_AGGREGATE: Final = {"gauge": "avg", "counter": "max", "last_value": "max"}


def _field_block(field: Field, step_seconds: int, matchers: Sequence[Matcher]) -> str:
    """One field per unit and workload, in base units, labelled gpuwatch_field="<canonical name>"."""
    if step_seconds <= 0:
        raise ConfigError(f"step must be positive, got {step_seconds}s")
    function = _RANGE_FUNCTION[field.kind]
    terms = [_alias_term(a, function, step_seconds, matchers) for a in field.aliases]
    alternatives = "\n  or ".join(terms)
    folded = (
        "label_replace(label_replace(\n"
        f"  {alternatives},\n"
        '"UUID", "$1", "uuid", "(.+)"), "Hostname", "$1", "hostname", "(.+)")'
    )
    if field.split_label:
        split = check_label_name(field.split_label)
        body = _by("sum", GROUP_LABELS, _by("max", [*GROUP_LABELS, split], folded))
    else:
        body = _by(_COPIES_AGGREGATE[field.kind], GROUP_LABELS, folded)
    return f'label_replace(\n{textwrap.indent(body, "  ")},\n  "{FIELD_LABEL}", "{field.name}", "", "")'


def dcgm_field_query(field: Field, *, step_seconds: int, matchers: Sequence[Matcher] = ()) -> str:
    """A catalog field per GPU unit and workload over each step, in base units (SPEC §3).

    Evaluated at t_i + step it covers sample i = [t_i, t_i + step): gauges are averaged over the step
    (avg_over_time), counters and sticky values read last (last_over_time). Each alias is its own term
    joined by `or` (not one {__name__=~"a|b"} selector): aliases differ in unit, and two names with the
    same labels would make avg_over_time fail on duplicate label sets. uuid/hostname are folded into
    UUID/Hostname server-side, so a fleet mid-upgrade (the 4.8.3 Hostname -> hostname rename) keeps one
    identity; `vgpu` copies, driver-version and target labels are aggregated away (avg, never sum);
    series split by a code label (DCGM_EXP_XID_ERRORS_*{xid}) are summed over it.

    dcgm_field_query(DEV_FB_USED, step_seconds=60) is::

        label_replace(
          avg by (
            UUID, GPU_I_ID, GPU_I_PROFILE, gpu, modelName, Hostname, instance, namespace, pod, container,
            exported_namespace, exported_pod, exported_container, pod_namespace, pod_name, container_name
          ) (
            label_replace(label_replace(
              avg_over_time(DCGM_FI_DEV_FB_USED[60s]) * 1048576
              or avg_over_time(DCGM_FI_DEV_FB_USED_BYTES[60s])
              or avg_over_time(dcgm_fb_used[60s]) * 1048576,
            "UUID", "$1", "uuid", "(.+)"), "Hostname", "$1", "hostname", "(.+)")
          ),
          "gpuwatch_field", "DCGM_FI_DEV_FB_USED", "", "")
    """
    return _field_block(field, step_seconds, matchers)


def gpu_util_query(*, step_seconds: int, matchers: Sequence[Matcher] = ()) -> str:
    """Utilization per GPU unit and workload over each step, labelled with the field it came from.

    DCGM_FI_PROF_GR_ENGINE_ACTIVE (ratio) where a unit reports it, else DCGM_FI_DEV_GPU_UTIL / 100:
    `or ignoring (gpuwatch_field)` keeps a GPU_UTIL row only where no PROF row has the same unit and
    workload. (gpu_rows then keeps one source per unit over the whole window.)

    gpu_util_query(step_seconds=60) is::

        label_replace(
          avg by (
            UUID, GPU_I_ID, GPU_I_PROFILE, gpu, modelName, Hostname, instance, namespace, pod, container,
            exported_namespace, exported_pod, exported_container, pod_namespace, pod_name, container_name
          ) (
            label_replace(label_replace(
              avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[60s])
              or avg_over_time(DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO[60s])
              or avg_over_time(dcgm_fi_prof_gr_engine_active[60s]),
            "UUID", "$1", "uuid", "(.+)"), "Hostname", "$1", "hostname", "(.+)")
          ),
          "gpuwatch_field", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "", "")
        or ignoring (gpuwatch_field)
        label_replace(
          avg by (
            UUID, GPU_I_ID, GPU_I_PROFILE, gpu, modelName, Hostname, instance, namespace, pod, container,
            exported_namespace, exported_pod, exported_container, pod_namespace, pod_name, container_name
          ) (
            label_replace(label_replace(
              avg_over_time(DCGM_FI_DEV_GPU_UTIL[60s]) / 100
              or avg_over_time(DCGM_FI_DEV_GPU_UTIL_RATIO[60s])
              or avg_over_time(dcgm_gpu_utilization[60s]) / 100,
            "UUID", "$1", "uuid", "(.+)"), "Hostname", "$1", "hostname", "(.+)")
          ),
          "gpuwatch_field", "DCGM_FI_DEV_GPU_UTIL", "", "")
    """
    prof = _field_block(PROF_GR_ENGINE_ACTIVE, step_seconds, matchers)
    dev = _field_block(DEV_GPU_UTIL, step_seconds, matchers)
    return f"{prof}\nor ignoring ({FIELD_LABEL})\n{dev}"


POD_ALLOCATION_LABELS = ("namespace", "pod", "team", "node", "pool")


def pod_allocation_history_query(*, step_seconds: int, matchers: Sequence[Matcher] = ()) -> str:
    """GE each pod held over each step, from gpuwatch's own exporter series (SPEC §4.3 history).

    pod_allocation_history_query(step_seconds=60) is::

        sum by (
          namespace, pod, team, node, pool
        ) (
          avg_over_time(gpuwatch_pod_gpu_allocation[60s])
        )
    """
    body = f"avg_over_time({selector('gpuwatch_pod_gpu_allocation', matchers)}[{step_seconds}s])"
    return _by("sum", POD_ALLOCATION_LABELS, body)
