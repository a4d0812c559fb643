"""The `gpuwatch` command: exit codes and one-line errors, run as a user runs it."""

import subprocess
import sys
from pathlib import Path


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
