"""`gpuwatch simulate backfill --output` writes only worlds it can write within 2 GB of memory, and refuses
a larger one at once, in one line pointing to --tsdb, before it builds the fleet or opens the file."""

import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuwatch.core.errors import ConfigError
from gpuwatch.sim.backfill import check_output_fits
from gpuwatch.sim.systems import SimulationParams

END = datetime(2026, 11, 20, tzinfo=UTC)


def test_the_gpus_counted_are_the_fleets() -> None:
    params = SimulationParams(end=END, days=0.05, step_seconds=300, gpus=16)
    fleet = params.build()
    assert params.fleet_gpus() == len({g.uuid for g in fleet.gpus}) == 40  # one node per pool at least
    assert SimulationParams().fleet_gpus() == 96  # the demo: 80 NVIDIA GPUs and 16 AMD MI300X
    assert params.window_samples() == fleet.window.n_samples == 15


@pytest.mark.parametrize(
    ("gpus", "days", "dcgm", "refused"),
    [
        (None, 1, True, ""),  # the README's demo file: 96 GPUs x 1,440 samples
        (500, 7, True, ""),  # 488 GPUs x 2,016 samples at 300 s: 983,808 GPU-samples
        (1000, 7, True, "holds the window's DCGM series"),  # 1,008 x 2,016 = 2,032,128
        (1000, 7, False, ""),  # a day of gpuwatch_* series: 1,008 x 288 = 290,304
        (1700, 1, False, ""),  # 1,688 x 288 = 486,144
        (2500, 1, False, "makes each day's gpuwatch_* series"),  # 2,496 x 288 = 718,848
        (1700, 20, False, ""),  # 1,688 x 5,760 = 9,722,880
        (1000, 40, False, "holds the window's fleet"),  # 1,008 x 11,520 = 11,612,160
    ],
)
def test_the_limits(gpus: int | None, days: float, dcgm: bool, refused: str) -> None:
    step = 60 if gpus is None else 300
    params = SimulationParams(end=END, days=days, step_seconds=step, gpus=gpus)
    if not refused:
        check_output_fits(params, dcgm=dcgm, gpuwatch_series=True)
        return
    with pytest.raises(ConfigError, match=re.escape(refused)):
        check_output_fits(params, dcgm=dcgm, gpuwatch_series=True)


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (
            (),
            "--output holds the window's DCGM series in memory: 9,992 GPUs x 8,640 samples = 86,330,880 "
            "GPU-samples, more than the 1,500,000 that fit in 2 GB; write this world with --tsdb DIR",
        ),
        (
            ("--no-dcgm",),
            "--output holds the window's fleet in memory: 9,992 GPUs x 8,640 samples = 86,330,880 "
            "GPU-samples, more than the 10,000,000 that fit in 2 GB; write this world with --tsdb DIR",
        ),
    ],
)
def test_cli_refuses_a_month_of_10000_gpus_at_once(tmp_path: Path, flags: tuple[str, ...], line: str) -> None:
    target = tmp_path / "fleet.om"
    cmd = [sys.executable, "-m", "gpuwatch", "simulate", "backfill", "--gpus", "10000", "--days", "30"]
    began = time.monotonic()
    done = subprocess.run(
        [*cmd, "--step", "300s", *flags, "-o", str(target)], capture_output=True, text=True, timeout=60
    )
    assert time.monotonic() - began < 20  # refused before the fleet (~35 s to build) is made
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"gpuwatch: error: {line}"]
    assert list(tmp_path.iterdir()) == []  # no file, no scratch directory
