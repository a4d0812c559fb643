"""tsdb.write_block: a block holding exactly what promtool stores from the same OpenMetrics text, and that
Prometheus serves, across the cases the backfill's regular samples never reach: irregular timestamps (every
delta-of-delta width), value changes of every shape, series longer than a chunk, and label values that are
empty, escaped or sort before `__name__`."""

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpuwatch.read.series import Family, write_openmetrics
from gpuwatch.sim.tsdb import SAMPLES_PER_CHUNK, sample_table, write_block
from tests.integration.prom import PROMTOOL, PrometheusServer, create_blocks, query

pytestmark = pytest.mark.integration
START = datetime(2026, 11, 19, tzinfo=UTC)  # a 2 h block boundary
BLOCK_MS = 2 * 3600 * 1000
# Gaps whose deltas of deltas take each width of the XOR chunk's timestamps: 0, 14, 17, 20 and 64 bits.
GAPS_MS = [15_000] * 40 + [15_001, 14_000, 30_000, 5_000, 80_000, 200_000, 1_000, 600_000, 1] + [7] * 300
# Value pairs whose XORs cover the value encoding: equal, tiny (clamped leading zeros), all 64 bits, the
# sign alone. No 0.0 beside the -0.0: write_openmetrics spells equal values alike, and -0.0 == 0.0.
SPECIAL = [1.0, 1.0, 1.0000000000000002, -3.0000000000000004, -0.0, 2.0, -2.0, 1e300, 1e-300, 42.0, 42.0, 7.5]


def _frame(times: "pd.DatetimeIndex", values: np.ndarray, **labels: object) -> pd.DataFrame:
    return pd.DataFrame({"timestamp": times, **labels, "value": values})


def _families() -> list[Family]:
    rng = np.random.default_rng(7)
    times = pd.DatetimeIndex(START + pd.to_timedelta(np.cumsum([0, *GAPS_MS]), unit="ms"))
    assert len(times) > 2 * SAMPLES_PER_CHUNK
    n = len(times)
    wavy = rng.normal(size=n) * 10.0 ** rng.integers(-5, 6, size=n)
    mixed = np.resize(SPECIAL, n)
    steps = np.repeat(rng.normal(size=n // 20 + 1), 20)[:n]  # runs of one value, then a change
    irregular = pd.concat(
        [
            _frame(times, wavy, kind="wavy"),
            _frame(times, np.full(n, 3.25), kind="constant"),
            _frame(times, mixed, kind="mixed"),
            _frame(times, steps, kind="steps"),
        ],
        ignore_index=True,
    )
    pods = [f"pod-{i:03d}" for i in range(300)]
    labelled = pd.DataFrame(
        {
            "timestamp": np.repeat(times[:5], len(pods)),
            "namespace": np.tile(["team-a", "team-b", 'ns \\ with "quotes"\nand a line'], 500),
            "pod": np.tile(pods, 5),
            "empty": np.tile(["", "x"], 750),
            "Zone": np.tile(["", "eu-1", "é"], 500),  # an upper-case name sorts before __name__
            "value": rng.normal(size=5 * len(pods)),
        }
    )
    return [
        Family("test_irregular", "Irregular samples.", ("kind",), irregular),
        Family("test_labelled", "Many label sets.", ("namespace", "pod", "empty", "Zone"), labelled),
    ]


def _dump(tsdb: Path) -> list[str]:
    (tsdb / "wal").mkdir(exist_ok=True)
    done = subprocess.run(
        [PROMTOOL, "tsdb", "dump", str(tsdb)], capture_output=True, text=True, check=True, timeout=300
    )
    return sorted(done.stdout.splitlines())


def test_block_holds_what_promtool_stores(tmp_path: Path) -> None:
    families = _families()
    text = tmp_path / "all.om"
    with text.open("w", encoding="utf-8") as out:
        written = write_openmetrics(families, out)
    create_blocks(text, tmp_path / "promtool")
    direct = tmp_path / "direct"
    direct.mkdir()
    start_ms = int(START.timestamp() * 1000)
    assert (
        write_block(direct, sample_table([(f, 0.0) for f in families]), start_ms, start_ms + BLOCK_MS)
        == written
    )
    expected = _dump(tmp_path / "promtool")
    assert len(expected) == written
    assert _dump(direct) == expected


def test_prometheus_serves_the_block(tmp_path: Path) -> None:
    families = _families()
    start_ms = int(START.timestamp() * 1000)
    tsdb = tmp_path / "tsdb"
    tsdb.mkdir()
    write_block(tsdb, sample_table([(f, 0.0) for f in families]), start_ms, start_ms + BLOCK_MS)
    irregular = families[0].samples
    last = irregular["timestamp"].max().to_pydatetime()
    with PrometheusServer(tsdb) as prometheus:
        counted = query(
            prometheus.url, 'count by (__name__) ({__name__=~"test_.+"})', START + timedelta(minutes=1)
        )
        wavy = query(prometheus.url, 'test_irregular{kind="wavy"}', last)
    assert {r["metric"]["__name__"]: r["value"][1] for r in counted} == {
        "test_irregular": "4",
        "test_labelled": "300",
    }
    expected = irregular.loc[irregular["kind"].eq("wavy"), "value"].iloc[-1]
    assert float(wavy[0]["value"][1]) == expected  # the API writes the shortest text that reads back exactly
