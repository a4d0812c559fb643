"""serve's HTTP API against a real `gpuwatch serve --demo` process: the same bytes as `gpuwatch report` for
the same window, 400 with an error object for a bad parameter, 401 without credentials. A failing
source's 503: test_faults_cli.py."""

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.integration.served import USER, get, serve

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    users = tmp_path_factory.mktemp("api") / "users"
    users.write_text(":".join(USER) + "\n", encoding="utf-8")
    with serve("--demo", "--auth-file", str(users)) as url:
        yield url


def _cli(tmp_path: Path, *args: str) -> bytes:
    out = tmp_path / "out"
    subprocess.run(
        [sys.executable, "-m", "gpuwatch", "report", "--demo", *args, "-o", str(out)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return out.read_bytes()


def _end() -> str:
    """An hour the demo fleet holds, as the CLI and the API both take it."""
    return datetime.now(UTC).replace(minute=0, second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_the_report_and_focus_rows_equal_the_cli_s(api: str, tmp_path: Path) -> None:
    for _ in range(2):  # the demo's "now" is the current hour: once more if it turned meanwhile
        end = _end()
        report_body, focus_body = _api_and_cli(api, tmp_path, end)
        if _end() == end:
            break
    assert report_body[0] == report_body[1]
    assert focus_body[0] == focus_body[1]
    report = json.loads(report_body[0])
    assert report["window"]["end"] == end and report["fleet"]["gpus"] > 0
    rows = pd.read_csv(tmp_path / "out")
    assert rows["ChargePeriodStart"].nunique() == 24
    held = rows["Tags"].str.contains('"gpuwatch/state":"allocated_')
    assert rows.loc[held, "EffectiveCost"].sum() == pytest.approx(report["fleet"]["cost_usd"], rel=1e-9)


def _api_and_cli(api: str, tmp_path: Path, end: str) -> tuple[tuple[bytes, bytes], tuple[bytes, bytes]]:
    """The day's report JSON and hourly FOCUS rows, each from the API and from the CLI."""
    status, headers, report = get(f"{api}/api/v1/report?since=1d&end={end}")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    cli_report = _cli(tmp_path, "--since", "1d", "--end", end, "--format", "json")
    status, headers, focus = get(f"{api}/api/v1/focus?since=1d&end={end}&period=hour")
    assert status == 200 and headers["Content-Type"].startswith("text/csv")
    cli_focus = _cli(tmp_path, "--since", "1d", "--end", end, "--format", "focus", "--focus-period", "hour")
    return (report, cli_report), (focus, cli_focus)


def test_a_team_s_report_and_rows(api: str) -> None:
    end = _end()
    status, _, body = get(f"{api}/api/v1/report?since=1d&end={end}&team=genai")
    assert status == 200
    report: dict[str, Any] = json.loads(body)
    assert [t["team"] for t in report["teams"]] == ["genai"]
    assert {w["team"] for w in report["workloads"]} == {"genai"}
    status, _, body = get(f"{api}/api/v1/focus?since=1d&end={end}&team=genai")
    assert status == 200
    rows = pd.read_csv(io.BytesIO(body))
    tags = rows["Tags"].map(json.loads)
    assert len(rows) > 0 and {t["gpuwatch/team"] for t in tags} == {"genai"}
    held = tags.map(lambda t: t.get("gpuwatch/state", "").startswith("allocated_"))
    assert rows.loc[held, "EffectiveCost"].sum() == pytest.approx(report["teams"][0]["cost_usd"], rel=1e-9)


def test_a_cluster_s_report_and_rows(api: str) -> None:
    """The default demo is two clusters: `cluster=` keeps one of them, in the report and in the rows."""
    end = _end()
    status, _, body = get(f"{api}/api/v1/report?since=1d&end={end}")
    both = {c["cluster"]: c for c in json.loads(body)["clusters"]}
    assert status == 200 and sorted(both) == ["eu-1", "us-1"]
    status, _, body = get(f"{api}/api/v1/report?since=1d&end={end}&cluster=us-1")
    report: dict[str, Any] = json.loads(body)
    assert status == 200 and [c["cluster"] for c in report["clusters"]] == ["us-1"]
    assert report["fleet"]["gpus"] == both["us-1"]["gpus"]
    assert report["fleet"]["cost_usd"] == pytest.approx(both["us-1"]["cost_usd"], rel=1e-9)
    status, _, body = get(f"{api}/api/v1/focus?since=1d&end={end}&cluster=us-1")
    rows = pd.read_csv(io.BytesIO(body))
    assert status == 200 and set(rows["SubAccountId"]) == {"us-1"}
    held = rows["Tags"].str.contains('"gpuwatch/state":"allocated_')
    assert rows.loc[held, "EffectiveCost"].sum() == pytest.approx(report["fleet"]["cost_usd"], rel=1e-9)


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("report?since=yesterday", "bad duration 'yesterday'"),
        ("report?start=2026-13-01", "not an ISO 8601 time"),
        ("report?sinze=1d", "unknown parameter 'sinze'"),
        ("report?group_by=planet", "group_by must be one of"),
        ("report?source=cache", "source must be one of"),
        ("report?since=1d&start=2026-11-01T00:00:00Z", "give one of them"),
        ("report?since=1d&since=2d", "given more than once"),
        ("report?step=0.5s", "step must be a whole number"),
        ("focus?period=week", "period must be one of hour, day"),
        ("focus?source=history", "keeps no Prometheus history"),
    ],
)
def test_a_bad_parameter_is_400_with_one_line(api: str, query: str, said: str) -> None:
    status, headers, body = get(f"{api}/api/v1/{query}")
    assert status == 400 and headers["Content-Type"].startswith("application/json"), body
    error = json.loads(body)
    assert list(error) == ["error"] and said in error["error"] and "\n" not in error["error"]
    assert b"Traceback" not in body


def test_credentials_are_needed_and_openapi_describes_both(api: str) -> None:
    for path in ("/api/v1/report", "/api/v1/focus", "/api/v1/openapi.json"):
        status, headers, _ = get(api + path, auth=None)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic"), path
        assert get(api + path, auth=("finops", "wrong"))[0] == 401
    status, _, body = get(api + "/api/v1/openapi.json")
    spec = json.loads(body)
    assert status == 200 and spec["openapi"].startswith("3.")
    assert set(spec["paths"]) == {"/api/v1/report", "/api/v1/focus", "/api/v1/openapi.json"}
    names = {p["name"] for p in spec["paths"]["/api/v1/report"]["get"]["parameters"]}
    assert names == {"start", "end", "since", "step", "group_by", "team", "pool", "cluster", "source"}
