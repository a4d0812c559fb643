"""PromQL builders: exact query strings, docstrings that show them, and escaping that stops injection."""

import re
import textwrap
from collections.abc import Sequence

import pytest

from gpuwatch.core.errors import ConfigError
from gpuwatch.sources import historyqueries, ownseries, promql
from gpuwatch.sources.dcgm import DEV_FB_USED, DEV_GPU_UTIL, EXP_XID_ERRORS_TOTAL, PROF_GR_ENGINE_ACTIVE
from gpuwatch.sources.promql import Matcher, equals, one_of

INJECTION = 'team"} or vector(1) or {a="'

DEV_UNLESS_PROF_60S = """\
avg_over_time(DCGM_FI_DEV_GPU_UTIL[60s])
unless on (UUID, uuid, GPU_I_ID, Hostname, hostname) {__name__=~"DCGM_FI_PROF_GR_ENGINE_ACTIVE"}"""

UTIL_NAMES = (
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO|dcgm_fi_prof_gr_engine_active"
    "|DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_GPU_UTIL_RATIO|dcgm_gpu_utilization"
    "|gpu_gfx_activity|amd_gpu_gfx_activity|habanalabs_utilization"
)


def dev_unless_prof(step_seconds: int = 60, matchers: Sequence[Matcher] = ()) -> str:
    return promql.dcgm_alias_query(
        DEV_GPU_UTIL,
        "DCGM_FI_DEV_GPU_UTIL",
        step_seconds=step_seconds,
        matchers=matchers,
        unless_metrics=["DCGM_FI_PROF_GR_ENGINE_ACTIVE"],
    )


def test_alias_query_exact() -> None:
    assert dev_unless_prof() == DEV_UNLESS_PROF_60S
    # Units are converted client-side per alias: the query reads the stored values as they are.
    assert promql.dcgm_alias_query(DEV_FB_USED, "dcgm_fb_used", step_seconds=300) == (
        "avg_over_time(dcgm_fb_used[300s])"
    )


def test_counters_read_the_last_value_of_each_step() -> None:
    assert promql.dcgm_alias_query(EXP_XID_ERRORS_TOTAL, "DCGM_EXP_XID_ERRORS_TOTAL", step_seconds=300) == (
        "last_over_time(DCGM_EXP_XID_ERRORS_TOTAL[300s])"
    )


def test_alias_query_refuses_a_name_outside_the_field() -> None:
    with pytest.raises(ConfigError):
        promql.dcgm_alias_query(DEV_GPU_UTIL, "DCGM_FI_DEV_FB_USED", step_seconds=60)


def test_selectors_exact() -> None:
    assert (
        promql.field_aliases_selector([PROF_GR_ENGINE_ACTIVE, DEV_GPU_UTIL])
        == f'{{__name__=~"{UTIL_NAMES}"}}'
    )
    assert (
        promql.series_count_query([PROF_GR_ENGINE_ACTIVE, DEV_GPU_UTIL])
        == f'count({{__name__=~"{UTIL_NAMES}"}})'
    )
    assert promql.dcgm_names_selector() == '{__name__=~"DCGM_.+|dcgm_.+|gpu_.+|amd_gpu_.+|habanalabs_.+"}'
    assert promql.selector("DCGM_FI_DEV_GPU_UTIL") == "DCGM_FI_DEV_GPU_UTIL"
    assert (
        promql.selector("DCGM_FI_DEV_GPU_UTIL", [equals("Hostname", "gpu-1"), Matcher("pod", "", "!=")])
        == 'DCGM_FI_DEV_GPU_UTIL{Hostname="gpu-1", pod!=""}'
    )


def _rule(rules: list[dict[str, str]], record: str) -> str:
    (expr,) = [r["expr"] for r in rules if r["record"] == record]
    return expr


def test_docstrings_show_the_exact_queries() -> None:
    for builder, query in [
        (promql.dcgm_alias_query, DEV_UNLESS_PROF_60S),
        (promql.field_aliases_selector, f'{{__name__=~"{UTIL_NAMES}"}}'),
        (promql.series_count_query, f'count({{__name__=~"{UTIL_NAMES}"}})'),
        (promql.dcgm_names_selector, promql.dcgm_names_selector()),
        (ownseries.pod_allocation_history_query, ownseries.pod_allocation_history_query(step_seconds=60)),
        (historyqueries.exporter_interval_query, historyqueries.exporter_interval_query(range_seconds=86400)),
        (
            historyqueries.exporter_samples_query,
            historyqueries.exporter_samples_query(range_seconds=86400, resolution_seconds=60),
        ),
        (
            historyqueries.pool_state_gpus_sum_query,
            historyqueries.pool_state_gpus_sum_query(range_seconds=86400, resolution_seconds=60),
        ),
        (
            historyqueries.team_cost_sum_query,
            historyqueries.team_cost_sum_query(range_seconds=86400, resolution_seconds=60),
        ),
        (
            historyqueries.pod_gpus_sum_query,
            historyqueries.pod_gpus_sum_query(
                "gpuwatch_pod_gpu_allocation", range_seconds=86400, resolution_seconds=60
            ),
        ),
        (
            historyqueries.pod_gpus_last_query,
            historyqueries.pod_gpus_last_query(
                "gpuwatch_pod_gpu_allocation", range_seconds=86400, resolution_seconds=60
            ),
        ),
        (
            historyqueries.node_sum_query,
            historyqueries.node_sum_query(
                "gpuwatch_node_gpu_capacity", range_seconds=86400, resolution_seconds=60
            ),
        ),
        (
            historyqueries.namespace_gpus_sum_query,
            historyqueries.namespace_gpus_sum_query(
                "gpuwatch_pod_gpu_used", range_seconds=86400, resolution_seconds=60, rollup="day"
            ),
        ),
        (historyqueries.team_state_gpus_latest_query, historyqueries.team_state_gpus_latest_query()),
        (
            historyqueries.queue_gpus_mean_query,
            historyqueries.queue_gpus_mean_query(
                "gpuwatch_queue_used_gpus", range_seconds=5400, resolution_seconds=60
            ),
        ),
        (ownseries.rollup_rules, _rule(ownseries.rollup_rules(), "hour:gpuwatch_pool_gpus:sum_over_time")),
        (
            ownseries.day_rollup_rules,
            _rule(ownseries.day_rollup_rules(), "day:gpuwatch_pool_gpus:sum_over_time"),
        ),
    ]:
        doc = (builder.__doc__ or "").split("\n", 1)[1]
        shown = textwrap.dedent(doc.split("::\n", 1)[1] if "::\n" in doc else doc).strip()
        assert shown.startswith(query), builder.__name__


def test_injection_is_escaped_into_a_literal() -> None:
    assert promql.escape_string(INJECTION) == 'team\\"} or vector(1) or {a=\\"'
    query = dev_unless_prof(matchers=[equals("exported_namespace", INJECTION)])
    assert 'DCGM_FI_DEV_GPU_UTIL{exported_namespace="team\\"} or vector(1) or {a=\\""}[60s]' in query
    assert 'ACTIVE", exported_namespace="team\\"} or vector(1) or {a=\\""}' in query
    # Every quote the user wrote is escaped: the only unescaped quotes are the builder's own.
    unescaped = re.findall(r'(?<!\\)"', query.replace("\\\\", ""))
    baseline = re.findall(r'(?<!\\)"', dev_unless_prof(matchers=[equals("x", "v")]))
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
        dev_unless_prof(step_seconds=0)


def test_every_gpuwatch_read_keeps_one_copy_of_each_series() -> None:
    """Two publishers of a series differ only in scrape labels: reads take max by the family's own labels
    before any sum, so HA replicas or a second scrape never double count (issue: 33.8 of 28 GPU-hours)."""
    history = [
        historyqueries.pool_state_gpus_sum_query(range_seconds=86400, resolution_seconds=30),
        historyqueries.team_state_gpus_sum_query(range_seconds=86400, resolution_seconds=30),
        historyqueries.team_used_gpus_sum_query(range_seconds=86400, resolution_seconds=30),
        historyqueries.team_cost_sum_query(range_seconds=86400, resolution_seconds=30, idle=True),
        *(
            historyqueries.pod_gpus_sum_query(m, range_seconds=86400, resolution_seconds=30)
            for m in ownseries.POD_SUM_METRICS
        ),
        *(
            historyqueries.pod_gpus_last_query(m, range_seconds=86400, resolution_seconds=30)
            for m in ownseries.POD_LAST_METRICS
        ),
        historyqueries.pod_idle_since_last_query(range_seconds=86400, resolution_seconds=30),
        historyqueries.pool_sum_query(
            "gpuwatch_pool_price_usd_per_gpu_hour", range_seconds=86400, resolution_seconds=30
        ),
        historyqueries.node_sum_query(
            "gpuwatch_node_gpus_reporting", range_seconds=86400, resolution_seconds=30
        ),
        historyqueries.exporter_samples_query(range_seconds=86400, resolution_seconds=30),
        ownseries.pod_allocation_history_query(step_seconds=60),
        historyqueries.node_capacity_latest_query(),
        historyqueries.largest_free_block_latest_query(),
        historyqueries.pending_pod_gpus_latest_query(),
        historyqueries.pending_pod_waiting_latest_query(),
    ]
    for query in history:
        flat = " ".join(query.split()).replace("( ", "(").replace(" )", ")")
        metric = re.findall(r"gpuwatch_[a-z_]+", flat)[0]
        labels = ownseries.FAMILY_LABELS[metric]
        by = f"max by ({', '.join(labels)}) (" if labels else "max ("
        assert by in flat, query
        # The copy-collapsing max is applied to the raw series, before anything sums across them.
        assert flat.index(by) < flat.index(metric), query
    # Sums over time run on a grid: the max is taken at each grid point, not once per series.
    grid = historyqueries.pool_state_gpus_sum_query(range_seconds=3600, resolution_seconds=30)
    assert grid.endswith("[3599999ms:30s])") and "avg_over_time(gpuwatch_pool_gpus[29999ms])" in grid


def test_the_rollup_rules_keep_each_cluster_apart_and_the_reads_stay_as_they_were() -> None:
    """Rules evaluated over a store shared by several clusters (Thanos, Mimir, vmalert ruler) keep one copy
    of each series per cluster: two clusters' pool H100 or pod ml/train-0 are two roll-ups, never one max.
    The history path's own reads of one cluster's store are unchanged (the label absent, the same)."""
    rules = [*ownseries.rollup_rules(), *ownseries.day_rollup_rules()]
    markers = {
        ownseries.ROLLUP_MARKER,
        ownseries.DAY_ROLLUP_MARKER,
        ownseries.NAMESPACE_ROLLUP_MARKER,
        ownseries.DAY_NAMESPACE_ROLLUP_MARKER,
    }
    namespaces = len(ownseries.namespace_rollups())
    assert len(rules) == 2 * (len(ownseries.ROLLUPS) + 1) + 2 * (namespaces + 1) - len(
        ownseries.HOUR_ONLY_ROLLUPS
    )
    summed_per_namespace = {r["record"] for r in ownseries.namespace_rollup_rules()}
    for rule in rules:
        if rule["record"] in markers:
            assert rule["expr"] == "vector(time())"
            continue
        flat = " ".join(rule["expr"].split()).replace("( ", "(").replace(" )", ")")
        if rule["record"] in summed_per_namespace:  # sums of the pods' roll-ups, each cluster's apart
            groupings = re.findall(r"\bby \(([^)]*)\)", flat)
            assert groupings and all(g.endswith("cluster") for g in groupings), rule
            continue
        metric = rule["record"].split(":")[1]
        by = ", ".join((*ownseries.FAMILY_LABELS[metric], "cluster"))
        assert f"max by ({by}) (" in flat, rule
        assert not re.search(r"\b(sum|max|min|avg|count) \(", flat), rule
    hourly = {r["record"]: r["expr"] for r in ownseries.rollup_rules()}
    assert hourly["hour:gpuwatch_build_info:count_over_time"] == (
        "count_over_time((max by (cluster) (avg_over_time(gpuwatch_build_info[59999ms])))[3599999ms:60s])"
    )
    reads = [
        historyqueries.exporter_samples_query(range_seconds=3600, resolution_seconds=60),
        historyqueries.pool_state_gpus_sum_query(range_seconds=3600, resolution_seconds=60),
        historyqueries.pod_gpus_last_query(
            "gpuwatch_pod_gpu_idle", range_seconds=3600, resolution_seconds=60
        ),
        ownseries.one_copy("gpuwatch_pool_gpus", "gpuwatch_pool_gpus"),
    ]
    assert not any("cluster" in query for query in reads)
    assert reads[0] == "count_over_time((max (avg_over_time(gpuwatch_build_info[59999ms])))[3599999ms:60s])"
    with pytest.raises(ConfigError):
        ownseries.one_copy("gpuwatch_pool_gpus", "gpuwatch_pool_gpus", keep=["not a label"])


def test_a_pod_family_read_for_some_pods_or_a_team_carries_their_matchers() -> None:
    pods = [promql.one_of("namespace", ["ml"]), promql.one_of("pod", ["a.b", "c"])]
    query = historyqueries.pod_gpus_last_query(
        "gpuwatch_pod_gpu_idle", range_seconds=86400, resolution_seconds=60, rollup="day", matchers=pods
    )
    assert 'day:gpuwatch_pod_gpu_idle:last_over_time{namespace=~"ml", pod=~"a\\\\.b|c"}[86399999ms]' in query
    team = [promql.one_of("team", ["nlp"])]
    since = historyqueries.pod_idle_since_last_query(range_seconds=3600, resolution_seconds=60, matchers=team)
    assert 'gpuwatch_pod_gpu_idle_since_timestamp_seconds{team=~"nlp"}[59999ms]' in since
    summed = historyqueries.namespace_gpus_sum_query(
        "gpuwatch_pod_gpu_allocation", range_seconds=3600, resolution_seconds=60, matchers=team
    )
    assert summed.startswith("sum by (\n  namespace, team, pool\n)")
    assert 'avg_over_time(gpuwatch_pod_gpu_allocation{team=~"nlp"}[59999ms])' in summed
