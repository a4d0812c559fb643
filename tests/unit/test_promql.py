"""PromQL builders: exact query strings, docstrings that show them, and escaping that stops injection."""

import re
import textwrap

import pytest

from gpuwatch.errors import ConfigError
from gpuwatch.sources import promql
from gpuwatch.sources.dcgm import DEV_FB_USED, DEV_GPU_UTIL, EXP_XID_ERRORS_COUNT, PROF_GR_ENGINE_ACTIVE
from gpuwatch.sources.promql import Matcher, equals, one_of

INJECTION = 'team"} or vector(1) or {a="'

GPU_UTIL_60S = """\
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
  "gpuwatch_field", "DCGM_FI_DEV_GPU_UTIL", "", "")"""

FB_USED_60S = """\
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
  "gpuwatch_field", "DCGM_FI_DEV_FB_USED", "", "")"""

XID_COUNT_300S = """\
label_replace(
  sum by (
    UUID, GPU_I_ID, GPU_I_PROFILE, gpu, modelName, Hostname, instance, namespace, pod, container,
    exported_namespace, exported_pod, exported_container, pod_namespace, pod_name, container_name
  ) (
    max by (
      UUID, GPU_I_ID, GPU_I_PROFILE, gpu, modelName, Hostname, instance, namespace, pod, container,
      exported_namespace, exported_pod, exported_container, pod_namespace, pod_name, container_name, xid
    ) (
      label_replace(label_replace(
        avg_over_time(DCGM_EXP_XID_ERRORS_COUNT[300s]),
      "UUID", "$1", "uuid", "(.+)"), "Hostname", "$1", "hostname", "(.+)")
    )
  ),
  "gpuwatch_field", "DCGM_EXP_XID_ERRORS_COUNT", "", "")"""

UTIL_NAMES = (
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO|dcgm_fi_prof_gr_engine_active"
    "|DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_GPU_UTIL_RATIO|dcgm_gpu_utilization"
)


def test_gpu_util_query_exact() -> None:
    assert promql.gpu_util_query(step_seconds=60) == GPU_UTIL_60S


def test_field_query_exact_with_unit_conversion() -> None:
    assert promql.dcgm_field_query(DEV_FB_USED, step_seconds=60) == FB_USED_60S


def test_split_field_sums_codes_after_collapsing_copies() -> None:
    assert promql.dcgm_field_query(EXP_XID_ERRORS_COUNT, step_seconds=300) == XID_COUNT_300S


def test_selectors_exact() -> None:
    assert (
        promql.field_aliases_selector([PROF_GR_ENGINE_ACTIVE, DEV_GPU_UTIL])
        == f'{{__name__=~"{UTIL_NAMES}"}}'
    )
    assert (
        promql.series_count_query([PROF_GR_ENGINE_ACTIVE, DEV_GPU_UTIL])
        == f'count({{__name__=~"{UTIL_NAMES}"}})'
    )
    assert promql.dcgm_names_selector() == '{__name__=~"DCGM_.+|dcgm_.+"}'
    assert promql.selector("DCGM_FI_DEV_GPU_UTIL") == "DCGM_FI_DEV_GPU_UTIL"
    assert (
        promql.selector("DCGM_FI_DEV_GPU_UTIL", [equals("Hostname", "gpu-1"), Matcher("pod", "", "!=")])
        == 'DCGM_FI_DEV_GPU_UTIL{Hostname="gpu-1", pod!=""}'
    )


def test_docstrings_show_the_exact_queries() -> None:
    for builder, query in [
        (promql.gpu_util_query, GPU_UTIL_60S),
        (promql.dcgm_field_query, FB_USED_60S),
        (promql.field_aliases_selector, f'{{__name__=~"{UTIL_NAMES}"}}'),
        (promql.series_count_query, f'count({{__name__=~"{UTIL_NAMES}"}})'),
        (promql.dcgm_names_selector, promql.dcgm_names_selector()),
    ]:
        doc = (builder.__doc__ or "").split("\n", 1)[1]
        shown = textwrap.dedent(doc.split("::\n", 1)[1] if "::\n" in doc else doc).strip()
        assert shown.startswith(query), builder.__name__


def test_injection_is_escaped_into_a_literal() -> None:
    assert promql.escape_string(INJECTION) == 'team\\"} or vector(1) or {a=\\"'
    query = promql.gpu_util_query(step_seconds=60, matchers=[equals("exported_namespace", INJECTION)])
    assert 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{exported_namespace="team\\"} or vector(1) or {a=\\""}[60s]' in query
    # Every quote the user wrote is escaped: the only unescaped quotes are the builder's own.
    unescaped = re.findall(r'(?<!\\)"', query.replace("\\\\", ""))
    baseline = re.findall(r'(?<!\\)"', promql.gpu_util_query(step_seconds=60, matchers=[equals("x", "v")]))
    assert len(unescaped) == len(baseline)


def test_backslash_and_newline_are_escaped() -> None:
    assert equals("pod", 'a\\b"c\nd').render() == 'pod="a\\\\b\\"c\\nd"'


def test_regex_values_are_literals() -> None:
    assert promql.escape_regex("a.b|c*(d)[e]{f}^$+?\\") == "a\\.b\\|c\\*\\(d\\)\\[e\\]\\{f\\}\\^\\$\\+\\?\\\\"
    assert one_of("pod", ["web-1.2", 'x|y"}']).render() == r'pod=~"web-1\\.2|x\\|y\"\\}"'


@pytest.mark.parametrize("bad", ['a"b', "1abc", "a-b", "", "pod} or vector(1)"])
def test_label_names_are_validated(bad: str) -> None:
    with pytest.raises(ConfigError):
        equals(bad, "v")


@pytest.mark.parametrize("bad", ['x"} or vector(1) or {a="', "a b", ""])
def test_metric_names_are_validated(bad: str) -> None:
    with pytest.raises(ConfigError):
        promql.selector(bad)


def test_step_must_be_positive() -> None:
    with pytest.raises(ConfigError):
        promql.gpu_util_query(step_seconds=0)
