"""alerts/, docs/runbooks.md and dashboards/: conventions every rule and panel follows (SPEC §4.5).

promtool checks syntax and runs the rule unit tests (`make rules`, and the integration tests); the
dashboards' queries run against a real Prometheus in tests/integration/test_rules_dashboards.py.
"""

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from gpuwatch.read.series import Family
from gpuwatch.sim.backfill import rollup_families
from gpuwatch.sources import ownseries

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "alerts"
DASHBOARDS = ROOT / "dashboards"
RUNBOOKS = ROOT / "docs" / "runbooks.md"
RUNBOOK_BASE = "https://github.com/gpuwatch/gpuwatch/blob/main/docs/runbooks.md#"
SPEC_ALERTS = {
    "GPUIdleAllocated",
    "GPUTeamIdleSpendHigh",
    "GPUCriticalXidError",
    "GPURowRemapFailure",
    "GPUHighTemperature",
    "GPUFramebufferNearFull",
    "GPUTelemetryMissing",
    "GPUsNotAdvertised",
    "GPUFragmentationHigh",
    "GPUPendingWhileIdle",
    "GpuwatchDown",
}
DEVICE_HEALTH = {
    "GPUCriticalXidError",
    "GPURowRemapFailure",
    "GPUHighTemperature",
    "GPUMemoryHigh",
    "GPUFramebufferNearFull",
    "GPUUnderutilized",
}
LEVEL_METRIC_OPERATIONS = re.compile(r"^[a-z][a-z0-9_]*:[a-z][a-z0-9_]*:[a-z][a-z0-9_]*$")
CAMEL_CASE = re.compile(r"^[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*$")


def rule_files() -> list[Path]:
    return sorted(ALERTS.glob("*.rules.yml"))


def rules(kind: str) -> list[dict[str, Any]]:
    out = []
    for path in rule_files():
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            out += [dict(r, _file=path.name) for r in group["rules"] if kind in r]
    return out


def alert_names() -> list[str]:
    return [r["alert"] for r in rules("alert")]


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings: lowercase, punctuation dropped, spaces to dashes."""
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+?)\s*$", markdown, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def rule_tests() -> list[dict[str, Any]]:
    out = []
    for path in sorted((ALERTS / "tests").glob("*.yml")):
        out += yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]
    return out


# -- alerts -------------------------------------------------------------------------------------


def test_the_spec_alerts_exist_once_each() -> None:
    names = alert_names()
    assert len(names) == len(set(names))
    assert set(names) >= SPEC_ALERTS


@pytest.mark.parametrize("rule", rules("alert"), ids=lambda r: str(r["alert"]))
def test_alert_follows_the_mixin_style(rule: dict[str, Any]) -> None:
    assert CAMEL_CASE.match(rule["alert"]), rule["alert"]
    assert rule["labels"]["severity"] in {"critical", "warning", "info"}
    annotations = rule["annotations"]
    assert {"summary", "description", "runbook_url"} <= set(annotations)
    assert "{{" not in annotations["summary"], "summaries are static; details go in the description"
    assert re.search(r"\{\{ *(\$labels\.\w+|\$value|with \$labels\.\w+|\.)", annotations["description"])
    assert annotations["runbook_url"] == RUNBOOK_BASE + rule["alert"].lower()


def test_device_health_alerts_read_raw_dcgm_series_only() -> None:
    for rule in rules("alert"):
        if rule["alert"] in DEVICE_HEALTH:
            assert rule["_file"] == "gpu-health.rules.yml"
            assert "gpuwatch_" not in rule["expr"]
            assert not re.search(r"\b[a-z_]+:[a-z0-9_]+:[a-z0-9_]+\b", rule["expr"]), "no recording rules"
            # every label variant of SPEC §2 is folded
            for label in ('"Hostname"', '"hostname"', '"UUID"', '"uuid"'):
                assert label in rule["expr"], f"{rule['alert']} does not fold {label}"
        else:
            assert "DCGM_" not in rule["expr"]


def test_every_alert_has_a_runbook_section_and_every_runbook_url_resolves() -> None:
    text = RUNBOOKS.read_text(encoding="utf-8")
    anchors = github_anchors(text)
    sections = set(re.findall(r"^## (\w+)\s*$", text, flags=re.MULTILINE))
    for rule in rules("alert"):
        assert rule["alert"] in sections, f"docs/runbooks.md has no section for {rule['alert']}"
        anchor = rule["annotations"]["runbook_url"].removeprefix(RUNBOOK_BASE)
        assert anchor in anchors, f"{rule['alert']}: no anchor #{anchor} in docs/runbooks.md"
    for name in sections & set(alert_names()):
        body = text.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
        for part in ("**Meaning.**", "**Impact.**", "**Diagnosis.**", "**Mitigation.**"):
            assert part in body, f"runbook {name} lacks {part}"
        assert "```" in body, f"runbook {name} shows no command or query"


def test_every_alert_has_a_firing_and_a_must_not_fire_case() -> None:
    firing: set[str] = set()
    silent: set[str] = set()
    for test in rule_tests():
        for case in test.get("alert_rule_test", []):
            (firing if case.get("exp_alerts") else silent).add(case["alertname"])
    names = set(alert_names())
    assert names - firing == set(), "alerts without a firing test"
    assert names - silent == set(), "alerts without a must-not-fire test"


# -- recording rules ----------------------------------------------------------------------------


@pytest.mark.parametrize("rule", rules("record"), ids=lambda r: str(r["record"]))
def test_recording_rule_is_named_level_metric_operations(rule: dict[str, Any]) -> None:
    assert LEVEL_METRIC_OPERATIONS.match(rule["record"]), rule["record"]
    level = rule["record"].split(":")[0]
    assert level in {
        "fleet",
        "fleet_state",
        "pool",
        "pool_state",
        "pool_blocked_by",
        "cohort",
        "team",
        "team_state",
        "namespace",
        "node",
        "node_gpu",
        "hour",
        "day",
    }


def test_every_recording_rule_is_unit_tested() -> None:
    tested = {case["expr"].split("{")[0] for t in rule_tests() for case in t.get("promql_expr_test", [])}
    assert {r["record"] for r in rules("record")} <= tested


def test_the_spec_recording_rules_exist() -> None:
    records = {r["record"] for r in rules("record")}
    assert {
        "pool_state:gpuwatch_gpus:sum",
        "team:gpuwatch_idle_cost_usd_per_hour:sum",
        "team_state:gpuwatch_gpus:sum",
        "fleet:gpuwatch_gpus:sum",
        "node_gpu:dcgm_gpu_temp_celsius:max",
    } <= records


def test_the_budget_example_defines_the_series_the_spend_alert_reads() -> None:
    example = yaml.safe_load((ALERTS / "budgets.example.yml").read_text(encoding="utf-8"))
    records = {r["record"] for g in example["groups"] for r in g["rules"]}
    assert records == {"gpuwatch_team_idle_budget_usd_per_hour"}
    (spend,) = [r for r in rules("alert") if r["alert"] == "GPUTeamIdleSpendHigh"]
    assert "gpuwatch_team_idle_budget_usd_per_hour" in spend["expr"]


# -- dashboards -----------------------------------------------------------------------------------


def dashboards() -> list[Path]:
    return sorted(DASHBOARDS.glob("*.json"))


def test_the_team_waste_dashboard_has_a_queues_row_of_every_queue_family() -> None:
    board = json.loads((DASHBOARDS / "gpu-team-waste.json").read_text(encoding="utf-8"))
    (row,) = [p for p in board["panels"] if p["type"] == "row"]
    assert row["title"].startswith("Queues")
    below = [p for p in board["panels"] if p["type"] != "row" and p["gridPos"]["y"] > row["gridPos"]["y"]]
    read = {
        name for p in below for t in p["targets"] for name in re.findall(r"gpuwatch_queue_[a-z_]+", t["expr"])
    }
    queue_families = {name for name in ownseries.FAMILY_LABELS if name.startswith("gpuwatch_queue_")}
    assert read == queue_families
    units = {p["title"]: p["fieldConfig"]["defaults"]["unit"] for p in below}
    assert units["Oldest pending workload's wait per queue"] == "s"
    assert units["Reserved-but-unused quota cost per team"] == "currencyUSD"


def test_the_two_dashboards_exist() -> None:
    titles = {json.loads(p.read_text(encoding="utf-8"))["title"]: p.name for p in dashboards()}
    assert titles == {"GPU fleet health": "gpu-fleet-health.json", "GPU team waste": "gpu-team-waste.json"}


@pytest.mark.parametrize("path", dashboards(), ids=lambda p: p.name)
def test_dashboard_has_a_datasource_variable_and_label_values_filters(path: Path) -> None:
    board = json.loads(path.read_text(encoding="utf-8"))
    assert 39 <= board["schemaVersion"] < 42
    assert board["uid"] and len(board["uid"]) <= 40
    variables = {v["name"]: v for v in board["templating"]["list"]}
    ds = variables["datasource"]
    assert (ds["type"], ds["query"]) == ("datasource", "prometheus")
    wanted = {
        "gpu-fleet-health.json": {"cluster", "pool", "node"},
        "gpu-team-waste.json": {"cluster", "pool", "team", "node"},
    }
    for name in wanted[path.name]:
        assert variables[name]["type"] == "query"
        assert variables[name]["definition"].startswith("label_values(")
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert v["includeAll"] and v["allValue"] == ".*"
            assert v["definition"] == v["query"]["query"]


CLUSTER_MATCHER = 'cluster=~"$cluster"'
# A PromQL lexer good enough to find every series selector: strings, label matchers in braces, range and
# subquery brackets, durations, numbers, identifiers (metric names, functions, keywords), anything else.
PROMQL_TOKEN = re.compile(
    r"""(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    |(?P<braces>\{(?:[^{}"]|"(?:[^"\\]|\\.)*")*\})
    |(?P<brackets>\[[^\]]*\])
    |(?P<duration>(?:\d+(?:ms|[smhdwy]))+)
    |(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<ident>[A-Za-z_:][\w:]*)
    |(?P<space>\s+)
    |(?P<other>.)""",
    re.VERBOSE,
)
LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values"}
AGGREGATIONS |= {"bottomk", "topk", "quantile", "limitk", "limit_ratio"}  # `max by (l) (x)`: no ( after max
KEYWORDS = LABEL_LIST_KEYWORDS | AGGREGATIONS | {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def selectors(expr: str) -> list[str]:
    """Every series selector of a PromQL expression: `name`, `name{...}` or `{...}`."""
    tokens = [(m.lastgroup, m.group()) for m in PROMQL_TOKEN.finditer(expr) if m.lastgroup != "space"]
    found = []
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        following = tokens[i + 1] if i + 1 < len(tokens) else ("", "")
        if kind == "ident" and text in LABEL_LIST_KEYWORDS and following == ("other", "("):
            i = next(j for j in range(i, len(tokens)) if tokens[j] == ("other", ")"))  # a label list
        elif kind == "ident" and text not in KEYWORDS and following != ("other", "("):
            if following[0] == "braces":
                found.append(text + following[1])
                i += 1
            else:
                found.append(text)
        elif kind == "braces":
            found.append(text)
        i += 1
    return found


def variable_selector_expr(definition: str) -> str:
    """The PromQL inside a Grafana query variable: label_values(SELECTOR, label) or query_result(EXPR)."""
    if m := re.fullmatch(r"label_values\((.+),\s*\w+\)", definition):
        return m.group(1)
    m = re.fullmatch(r"query_result\((.+)\)", definition)
    assert m, f"unknown variable query {definition}"
    return m.group(1)


def board_queries(board: dict[str, Any]) -> dict[str, str]:
    """'<panel> / <refId>' or '$<variable>' -> PromQL, every query the board sends but $cluster's own."""
    out = {f"{p['title']} / {t['refId']}": t["expr"] for p in board["panels"] for t in p.get("targets", [])}
    for v in board["templating"]["list"]:
        if v["type"] == "query" and v["name"] != "cluster":
            out[f"${v['name']}"] = variable_selector_expr(v["definition"])
    return out


def test_the_selector_finder_finds_bare_names_braces_and_nothing_in_label_lists_or_strings() -> None:
    expr = (
        'sum by (team) (max by (cluster, team) (a{x="}{", y=~"$y"}) * on (pool) group_left () b)'
        ' / label_replace({__name__=~"c|d"}[5m] offset 1h, "n", "$1", "m", "(.*)") > 1e-9 or vector(0)'
    )
    assert selectors(expr) == ['a{x="}{", y=~"$y"}', "b", '{__name__=~"c|d"}']


@pytest.mark.parametrize("path", dashboards(), ids=lambda p: p.name)
def test_the_cluster_variable_comes_first_and_every_selector_carries_it(path: Path) -> None:
    """Several clusters behind one Thanos/Mimir/VictoriaMetrics: `cluster` (an external label, or stamped
    by gpuwatch) scopes every panel and every other variable. Its "All" is `.*`, which also matches a
    series without the label (an absent label is the empty string), so one unlabelled cluster sees what
    it saw before."""
    board = json.loads(path.read_text(encoding="utf-8"))
    variables = board["templating"]["list"]
    assert [v["name"] for v in variables][:2] == ["datasource", "cluster"], "first after its data source"
    cluster = variables[1]
    assert (cluster["type"], cluster["multi"], cluster["includeAll"]) == ("query", True, True)
    assert cluster["allValue"] == ".*"
    assert re.fullmatch(r"label_values\(.+, cluster\)", cluster["definition"]), cluster["definition"]
    assert "$" not in cluster["definition"]
    queries = board_queries(board)
    assert len(queries) > 15
    for name, expr in queries.items():
        found = selectors(expr)
        assert found, f"{name}: no selector found in {expr}"
        for selector in found:
            assert "{" in selector and CLUSTER_MATCHER in selector, (
                f"{name}: {selector} lacks {CLUSTER_MATCHER}"
            )


@pytest.mark.parametrize("path", dashboards(), ids=lambda p: p.name)
def test_rows_and_matches_keep_two_clusters_apart_and_only_sums_roll_them_up(path: Path) -> None:
    """Two clusters may both have a node gpu-h100-000, a pool H100, a pod ml/train, a ClusterQueue: one
    copy per series (max by), per-row aggregations and vector matches keep `cluster`; a `sum by` may add
    the clusters up (a team's spend over the fleet)."""
    board = json.loads(path.read_text(encoding="utf-8"))
    for p in board["panels"]:
        for t in p.get("targets", []):
            for function, labels in re.findall(r"\b(\w+) by \(([^)]*)\)", t["expr"]):
                if function != "sum":
                    assert "cluster" in labels.split(", "), f"{p['title']}: {function} by ({labels})"
            for labels in re.findall(r"\bon \(([^)]*)\)", t["expr"]):
                assert "cluster" in labels.split(", "), f"{p['title']}: on ({labels})"


@pytest.mark.parametrize("path", dashboards(), ids=lambda p: p.name)
def test_every_panel_has_a_unit_a_description_and_queries_the_chosen_datasource(path: Path) -> None:
    board = json.loads(path.read_text(encoding="utf-8"))
    everything = board["panels"]
    assert len({p["id"] for p in everything}) == len(everything)
    assert len({p["title"] for p in everything}) == len(everything), "panel titles are unique"
    # Rows only head the panels below them: full width, open, queries of their own none.
    for row in (p for p in everything if p["type"] == "row"):
        assert row["title"] and not row["collapsed"] and row["panels"] == [], row["title"]
        assert row["gridPos"] == {"h": 1, "w": 24, "x": 0, "y": row["gridPos"]["y"]}
        assert "targets" not in row
    panels = [p for p in everything if p["type"] != "row"]
    variables = {v["name"] for v in board["templating"]["list"]}
    for p in panels:
        assert p["fieldConfig"]["defaults"]["unit"], p["title"]
        assert len(p["description"]) > 20, p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert set(p["gridPos"]) == {"h", "w", "x", "y"} and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"]
            used = set(re.findall(r"\$([A-Za-z_]\w*)", t["expr"])) - {
                "__range",
                "__range_s",
                "__interval",
                "__rate_interval",
            }
            assert used <= variables, f"{p['title']}: unknown variables {used - variables}"
    units = {p["fieldConfig"]["defaults"]["unit"] for p in panels}
    assert units - {"none", "short"}, "units are real units where there is one"


def test_provisioning_examples_point_grafana_at_the_dashboards_and_prometheus() -> None:
    providers = yaml.safe_load((DASHBOARDS / "provisioning" / "dashboards.yaml").read_text(encoding="utf-8"))
    assert providers["apiVersion"] == 1
    (provider,) = providers["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]
    sources = yaml.safe_load((DASHBOARDS / "provisioning" / "datasources.yaml").read_text(encoding="utf-8"))
    assert sources["apiVersion"] == 1
    assert [d["type"] for d in sources["datasources"]] == ["prometheus"]


def test_every_gpuwatch_series_read_is_one_docs_metrics_md_documents() -> None:
    """Rules and dashboards rely only on the exporter's contract."""
    documented = set(
        re.findall(r"`(gpuwatch_[a-z_]+)`", (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8"))
    )
    exprs = [r["expr"] for r in rules("expr")]
    for path in dashboards():
        board = json.loads(path.read_text(encoding="utf-8"))
        exprs += [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
        exprs += [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]
    read = {name for e in exprs for name in re.findall(r"(?<![:\w])gpuwatch_[a-z_]+", e)}
    assert read <= documented, read - documented


def test_the_hourly_rollups_are_the_grid_reads_the_history_path_makes() -> None:
    """The roll-up group is what the history path reads whole hours from: a drifted expression would
    make a month's report differ from its hour-by-hour raw read."""
    groups = yaml.safe_load((ALERTS / "gpuwatch-recording.rules.yml").read_text(encoding="utf-8"))["groups"]
    (group,) = [g for g in groups if g["name"] == "gpuwatch.rollup"]
    assert group["interval"] == "1h"
    written = [{"record": r["record"], "expr": r["expr"].rstrip("\n")} for r in group["rules"]]
    assert written == ownseries.rollup_rules()


def test_the_idle_and_unknown_rollups_keep_only_pods_above_zero_as_the_backfill_writes_them() -> None:
    """hour:…idle/unknown:sum_over_time are `(…) > 0` in the rules and in the backfill: a pod busy all hour
    has no idle roll-up that hour (it reads as 0), while its allocation and its last idle GE keep zeros
    (a pod busy at the end of a day must read as busy, not as idle at the end of an earlier one)."""
    hourly = {r["record"]: r["expr"] for r in ownseries.rollup_rules()}
    for metric in ("gpuwatch_pod_gpu_idle", "gpuwatch_pod_gpu_unknown"):
        assert hourly[f"hour:{metric}:sum_over_time"].endswith(") > 0")
    for metric, function in (("allocation", "sum"), ("idle", "last")):
        assert "> 0" not in hourly[f"hour:gpuwatch_pod_gpu_{metric}:{function}_over_time"]

    labels = ("namespace", "pod", "team", "node", "pool")
    # Two pods, 10:00-11:59 every minute: "nb" idle (1 GE) in the first hour only, "train" never idle.
    times = pd.date_range("2026-11-19 10:00", periods=120, freq="60s", tz="UTC")
    rows = [
        {
            "namespace": "ml",
            "pod": pod,
            "team": "ml",
            "node": "h100-0",
            "pool": "H100",
            "timestamp": t,
            "value": 1.0 if pod == "nb" and t.hour == 10 else 0.0,
        }
        for pod in ("nb", "train")
        for t in times
    ]
    idle = Family("gpuwatch_pod_gpu_idle", "", labels, pd.DataFrame(rows))
    allocation = Family("gpuwatch_pod_gpu_allocation", "", labels, pd.DataFrame(rows).assign(value=1.0))
    rolled = {f.name: f.samples for f in rollup_families([idle, allocation], offset_seconds=30)}
    idle_sums = rolled["hour:gpuwatch_pod_gpu_idle:sum_over_time"]
    assert list(zip(idle_sums["pod"], idle_sums["value"], strict=True)) == [("nb", 60.0)]
    last_idle = rolled["hour:gpuwatch_pod_gpu_idle:last_over_time"]
    assert sorted(last_idle["value"]) == [0.0, 0.0, 0.0, 1.0]  # both pods, both hours (11:00 and 12:00)
    held = rolled["hour:gpuwatch_pod_gpu_allocation:sum_over_time"]
    assert held.groupby("pod")["value"].sum().to_dict() == {"nb": 120.0, "train": 120.0}


def test_the_daily_rollups_sum_the_hourly_ones_the_history_path_reads_days_from() -> None:
    groups = yaml.safe_load((ALERTS / "gpuwatch-recording.rules.yml").read_text(encoding="utf-8"))["groups"]
    (group,) = [g for g in groups if g["name"] == "gpuwatch.rollup.daily"]
    assert group["interval"] == "1d"
    written = [{"record": r["record"], "expr": r["expr"].rstrip("\n")} for r in group["rules"]]
    assert written == ownseries.day_rollup_rules()
    hourly = {r["record"] for r in ownseries.rollup_rules()}
    hour_only = {ownseries.rollup_name(metric, function) for metric, function in ownseries.HOUR_ONLY_ROLLUPS}
    assert {r["record"].replace("day:", "hour:", 1) for r in written} == hourly - hour_only


# An aggregation, with its by/without label list if any, up to the parenthesis of its argument.
AGGREGATION_CALL = re.compile(
    r"\b(sum|min|max|avg|group|stddev|stdvar|count_values|count|topk|bottomk|quantile)"
    r"(?: (by|without) \(([^)]*)\))? \("
)
# A series that has no cluster by design (a static budget rule), matched to the team in every cluster.
CLUSTERLESS_OPERAND = re.compile(
    r"(?:on \([^)]*\) (?:group_left \([^)]*\) )?)?max by \([^)]*\) \([a-z_:]+\{cluster=\"\"\}\)"
)


@pytest.mark.parametrize("path", [*rule_files(), ALERTS / "budgets.example.yml"], ids=lambda p: p.name)
def test_every_rule_keeps_two_clusters_apart(path: Path) -> None:
    """Several clusters behind one store, the rules evaluated there (Thanos ruler, Mimir ruler, vmalert):
    two clusters both have a node gpu-h100-000 and a team research. Every aggregation keeps `cluster` (by
    it, or without dropping it) and every vector match is on it, so no alert or recorded series merges or
    matches two clusters' series; without the label (one cluster) it changes nothing."""
    for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
        for rule in group["rules"]:
            name = rule.get("alert") or rule["record"]
            flat = re.sub(r"\s+", " ", rule["expr"]).replace("( ", "(").replace(" )", ")")
            flat = re.sub(r"\b(\w+)\(", r"\1 (", flat)  # sum(x) as sum (x)
            flat = CLUSTERLESS_OPERAND.sub("clusterless", flat)
            for function, modifier, labels in AGGREGATION_CALL.findall(flat):
                listed = [label.strip() for label in labels.split(",")]
                if modifier == "without":
                    assert "cluster" not in listed, f"{name}: {function} without ({labels})"
                else:
                    assert "cluster" in listed, f"{name}: {function} {modifier or 'by'} ({labels})"
            for labels in re.findall(r"\bon \(([^)]*)\)", flat):
                assert "cluster" in [label.strip() for label in labels.split(",")], f"{name}: on ({labels})"
            for labels in re.findall(r"\bignoring \(([^)]*)\)", flat):
                assert "cluster" not in labels, f"{name}: ignoring ({labels})"
