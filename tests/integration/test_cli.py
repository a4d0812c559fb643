"""The `gpuwatch` command: exit codes and one-line errors, the demo's report and its server, run as a user
runs it (a process of its own: `make check` leaves these to `make test`)."""

import json
import os
import socket
import subprocess
import sys
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jsonschema
import pytest

from gpuwatch.surfaces.report import json_schema
from tests.integration.prom import die_with_parent

pytestmark = pytest.mark.integration


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuwatch", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_bad_config_key_exits_2_with_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("pricing: {default_usd_per_gpu_hour: 2, prodcuts: {}}\n")
    result = _run("serve", "--demo", "--config", str(cfg))
    assert result.returncode == 2
    assert result.stderr.strip() == "gpuwatch: error: config: unknown key pricing.prodcuts"
    assert "Traceback" not in result.stderr


def test_negative_price_exits_2(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("pricing: {products: {NVIDIA-L4: -1}}\n")
    result = _run("serve", "--demo", "--config", str(cfg))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "must not be negative" in result.stderr


def test_usage_error_exits_2() -> None:
    result = _run("simulate", "backfill", "--step", "fast", "-o", "x")
    assert result.returncode == 2
    assert "bad duration 'fast'" in result.stderr and "Traceback" not in result.stderr


def test_bad_trace_file_is_one_line(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nnode-1,64000,262144,two,V100M32\n")
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
    )
    result = _run("simulate", "replay", "--nodes", str(nodes), "--pods", str(pods))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.endswith("nodes.csv:2: gpu 'two' is not a number\n")
    assert "Traceback" not in result.stderr


def test_missing_trace_file_is_one_line(tmp_path: Path) -> None:
    result = _run(
        "simulate", "replay", "--nodes", str(tmp_path / "no.csv"), "--pods", str(tmp_path / "no2.csv")
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "no.csv" in result.stderr


def test_version() -> None:
    result = _run("--version")
    assert result.returncode == 0 and result.stdout.startswith("gpuwatch ")


def test_report_since_with_start_is_a_one_line_usage_error() -> None:
    result = _run("report", "--demo", "--since", "7d", "--start", "2026-11-01T00:00:00Z")
    assert result.returncode == 2
    assert (
        result.stderr
        == "gpuwatch: error: --since and --start both set the window's start: give one of them\n"
    )
    bad = _run("report", "--demo", "--since", "soon")
    assert bad.returncode == 2 and "bad duration 'soon'" in bad.stderr and "Traceback" not in bad.stderr


def test_serve_reports_a_port_in_use_in_one_line_and_never_says_serving() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = _run("serve", "--demo", "--port", str(port))
    assert result.returncode == 2
    assert result.stderr == f"gpuwatch: error: cannot serve on 127.0.0.1:{port}: Address already in use\n"
    assert "dashboard on" not in result.stderr + result.stdout


def test_serve_announces_its_address_once_it_answers_there() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "serve", "--demo", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=die_with_parent,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert line.startswith(f"gpuwatch: dashboard on http://127.0.0.1:{port}/ · the simulated fleet ")
        assert "gunicorn -c gunicorn.conf.py app:server" in line
        # Announced after binding: the address answers right away.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=60) as reply:
            assert reply.status == 200
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_gunicorn_s_app_module_serves_the_two_cluster_demo_when_no_prometheus_is_named() -> None:
    """`gunicorn app:server` imports app.py: with no GPUWATCH_* settings it is the default demo."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUWATCH_")}
    code = (
        "import app; s = app.app.server; print(type(s).__name__, app.service.simulated, "
        "[c.name for c in app.service.settings.clusters])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == "Flask True ['eu-1', 'us-1']"


def test_demo_report_from_the_cli_validates_against_the_schema_over_the_window_asked_for() -> None:
    # Two days ending an hour before the demo's (the current hour's) end, named by --since and --until.
    until = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    start, end = ((until - timedelta(days=k)).strftime("%Y-%m-%dT%H:%M:%SZ") for k in (2, 0))
    window = ("--since", "2d", "--until", end)
    result = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "report", "--demo", "--format", "json", *window],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert (document["window"]["start"], document["window"]["end"]) == (start, end)
    jsonschema.validate(document, json_schema())
    assert document["schema_version"] == 4
    assert len(document["teams"]) >= 12
    # The default demo is two simulated clusters, each with its figures.
    clusters = {c["cluster"]: c for c in document["clusters"]}
    assert sorted(clusters) == ["eu-1", "us-1"]
    assert sum(c["cost_usd"] for c in clusters.values()) == pytest.approx(document["fleet"]["cost_usd"])
    assert all(c["gpus"] == 96 and c["error"] is None for c in clusters.values())
