"""`gpuwatch simulate backfill --tsdb`: history written block by block (as a month of a large fleet must be:
the gpuwatch_* series as blocks directly, the DCGM series through promtool) holds exactly the samples of
the one-file backfill, and its flags behave."""

import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.backfill import write_fleet_backfill, write_tsdb
from tests.integration.prom import PROMTOOL, create_blocks

pytestmark = pytest.mark.integration
END = datetime(2026, 11, 20, tzinfo=UTC)
UTIL = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"]


def _dump(tsdb: Path) -> list[str]:
    """Every sample the TSDB holds, one `{labels} value timestamp` line each, sorted."""
    (tsdb / "wal").mkdir(exist_ok=True)  # dump opens the DB as Prometheus would: it wants a WAL
    done = subprocess.run(
        [PROMTOOL, "tsdb", "dump", str(tsdb)], capture_output=True, text=True, check=True, timeout=300
    )
    return sorted(done.stdout.splitlines())


def _names(lines: list[str]) -> set[str]:
    return set(re.findall(r'__name__="([^"]+)"', "\n".join(lines)))


def _gpuwatch(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "gpuwatch", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)


def test_blocks_hold_exactly_the_one_file_backfill(tmp_path: Path) -> None:
    """Six hours straddling 2 h block boundaries, DCGM and gpuwatch_* series with their hourly roll-ups and
    the day's daily one (23:30), two workers."""
    fleet = build_demo_fleet(seed=3, end=datetime(2026, 11, 19, 23, tzinfo=UTC), days=0.25, step_seconds=300)
    one_file = tmp_path / "all.om"
    with one_file.open("w", encoding="utf-8") as out:
        written = write_fleet_backfill(fleet, out, metrics=UTIL)
    create_blocks(one_file, tmp_path / "one")
    done = write_tsdb(fleet, tmp_path / "blocks", metrics=UTIL, workers=2)
    assert done.samples == written
    assert done.blocks == 4  # 17:00-23:00 -> blocks 16-18, 18-20, 20-22, 22-24 (epoch-aligned 2 h)
    metas = [json.loads(p.read_text()) for p in (tmp_path / "blocks").glob("*/meta.json")]
    # Per 2 h range one block of DCGM series (promtool) and one of gpuwatch_* series (written directly).
    assert len(metas) == 8
    assert len({meta["minTime"] // (2 * 3600 * 1000) for meta in metas}) == 4
    expected = _dump(tmp_path / "one")
    assert len(expected) == written
    assert _dump(tmp_path / "blocks") == expected
    names = _names(expected)
    assert {"DCGM_FI_DEV_GPU_UTIL", "gpuwatch_pod_gpu_allocation", "gpuwatch_node_gpus"} <= names
    assert {
        "hour:gpuwatch_pod_gpu_allocation:sum_over_time",
        "day:gpuwatch_pod_gpu_allocation:sum_over_time",
    } <= names


def test_cli_writes_the_gpuwatch_history_alone(tmp_path: Path) -> None:
    tsdb = tmp_path / "tsdb"
    done = _gpuwatch(
        "simulate", "backfill", "--days", "0.125", "--step", "300s", "--end", END.isoformat(),
        "--no-dcgm", "--tsdb", str(tsdb), "--workers", "1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"blocks of {tsdb}" in done.stderr
    names = _names(_dump(tsdb))
    assert not any(n.startswith("DCGM_") for n in names)
    assert {"gpuwatch_pod_gpu_allocation", "gpuwatch_team_gpus", "gpuwatch_pool_gpus"} <= names


def test_cli_refuses_to_write_nothing(tmp_path: Path) -> None:
    done = _gpuwatch(
        "simulate", "backfill", "--no-dcgm", "--no-gpuwatch-series", "--tsdb", str(tmp_path / "t"),
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "gpuwatch: error: --no-dcgm with --no-gpuwatch-series leaves nothing to write"
    ]
    assert not (tmp_path / "t").exists()


def test_cli_output_holds_exactly_the_blocks(tmp_path: Path) -> None:
    """`--output` makes the history a day at a time, as `--tsdb` does: over a window across two UTC
    midnights, promtool reads from the file exactly the samples `--tsdb` writes, each family under one
    header."""
    world = ("--days", "1.25", "--step", "300s", "--gpus", "16", "--end", "2026-11-20T03:00:00+00:00")
    util = ("--metrics", *UTIL)
    one_file = tmp_path / "fleet.om"
    done = _gpuwatch("simulate", "backfill", *world, *util, "--output", str(one_file))
    assert done.returncode == 0, done.stderr
    text = one_file.read_text(encoding="utf-8")
    assert text.endswith("# EOF\n") and text.count("# EOF") == 1
    helps = re.findall(r"^# HELP (\S+)", text, flags=re.MULTILINE)
    assert len(helps) == len(set(helps))
    assert {
        "DCGM_FI_DEV_GPU_UTIL",
        "gpuwatch_pod_gpu_allocation",
        "day:gpuwatch_pod_gpu_allocation:sum_over_time",
    } <= set(helps)
    assert not list(tmp_path.glob(".gpuwatch-backfill-*"))  # the scratch files are gone
    create_blocks(one_file, tmp_path / "one")
    done = _gpuwatch("simulate", "backfill", *world, *util, "--tsdb", str(tmp_path / "blocks"))
    assert done.returncode == 0, done.stderr
    expected = _dump(tmp_path / "blocks")
    written = int(re.search(r"wrote (\d+) samples", done.stderr).group(1))  # type: ignore[union-attr]
    assert len(expected) == written
    assert _dump(tmp_path / "one") == expected
    # Both days' daily roll-ups (evaluated 23:30 on the 18th and the 19th) are there.
    days = {line.rsplit(" ", 1)[1] for line in expected if "day:gpuwatch_pod_gpu_allocation" in line}
    assert len(days) == 2
