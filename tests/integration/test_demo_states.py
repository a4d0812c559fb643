"""The demo fleet shows every state gpuwatch explains, in its own report and on its own pages: one cluster
of it (`--demo-clusters 1`; the default demo is two clusters of this shape), whose counts these are.

A pending pod blocked by fragmentation (and ones blocked by capacity), a GPU above the 85 °C alert
threshold, idle-allocated workloads beside active ones, a telemetry gap whose GPU-hours are
allocated_unknown; and a 30-day window that lies within the simulated history instead of counting the
days before the fleet existed as unallocated capacity.
"""

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from gpuwatch.sim.demoservice import demo_service
from gpuwatch.ui import create_app
from tests.integration.browser import browser_page, screenshot, settle, table_rows
from tests.integration.ui_server import serve_app

pytestmark = pytest.mark.integration
WINDOWS = ("1d", "7d", "30d")


@pytest.fixture(scope="module")
def reports() -> dict[str, dict[str, Any]]:
    """`gpuwatch report --demo --format json --since W` for each window, as a user runs it."""
    out = {}
    for since in WINDOWS:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpuwatch",
                "report",
                "--demo",
                "--demo-clusters",
                "1",
                "--format",
                "json",
                "--since",
                since,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr
        out[since] = json.loads(done.stdout)
    return out


@pytest.mark.parametrize("since", WINDOWS)
def test_the_demo_report_holds_every_state(reports: dict[str, dict[str, Any]], since: str) -> None:
    report = reports[since]
    blocked = {p["blocked_by"]: p for p in report["pending"]}
    # Every reason a GPU pod waits (SPEC §3), each in the user's words and, but for the gated pod, with the
    # scheduler's own.
    assert set(blocked) == {"affinity", "taint", "mig_profile", "quota", "fragmentation", "capacity"}
    assert blocked["affinity"]["reason"] == (
        "no GPU node matches its node selector or required affinity (nvidia.com/gpu.product In (NVIDIA-B200))"
    )
    assert blocked["taint"]["reason"].endswith("(dedicated=llm-training:NoSchedule)")
    assert "node(s) had untolerated taint {dedicated: llm-training}" in blocked["taint"]["scheduler_message"]
    assert blocked["mig_profile"]["reason"].endswith("(nvidia.com/mig-7g.80gb)")
    # Kueue's own words, from the Workload of the pod it gates.
    assert blocked["quota"]["reason"] == (
        "Kueue has not admitted it: couldn't assign flavors to pod set main: insufficient unused quota for "
        "nvidia.com/gpu in flavor l4, 2 more needed"
    )
    assert blocked["quota"]["scheduler_message"] == "Scheduling is blocked due to non-empty scheduling gates"
    assert blocked["taint"]["tolerations"] == "nvidia.com/gpu:NoSchedule op=Exists"
    # Kueue: two cohorts, a queue borrowing (genai) from the queues lending to it, a starved queue
    # (robotics: workloads waiting, none admitted), a preemption, and unused quota priced.
    assert report["kueue"] == {"installed": True}
    queues = {q["queue"]: q for q in report["queues"]}
    assert {q["cohort"] for q in queues.values()} == {"research", "serving", ""}
    genai = queues["genai-queue"]
    assert genai["borrowed_gpu_hours"] > 0 and genai["preemptions"] >= 1
    lent = sum(q["lent_gpu_hours"] for q in queues.values() if q["cohort"] == "research")
    assert lent == pytest.approx(genai["borrowed_gpu_hours"])  # borrowed in cohort research, lent in it
    starved = queues["robotics-queue"]
    assert starved["pending_workloads"] >= 2 and starved["admitted_workloads"] == 0
    assert starved["wait_seconds_max"] >= 5 * 3600
    assert all(q["reserved_unused_usd"] is not None for q in queues.values())
    assert {f["team"] for f in report["fairness"] if f["fairness_ratio"] is not None} >= {
        "genai",
        "llm-research",
    }
    assert any(b["pending_gpus"] > 0 and b["idle_allocated_gpus"] > 0 for b in report["blocked_vs_idle"])
    assert report["reclaim_candidates"]
    h100 = next(p for p in report["pools"] if p["pool"] == "NVIDIA-H100-80GB-HBM3")
    assert h100["taints"] == (
        "dedicated=llm-training:NoSchedule (4 of 4 nodes), nvidia.com/gpu=present:NoSchedule (4 of 4 nodes)"
    )
    holes = blocked["fragmentation"]
    pool = next(p for p in report["pools"] if p["pool"] == holes["pool"])
    # Fragmentation: the request is larger than any node's free block, not than the pool's free GPUs.
    assert holes["gpus"] > pool["largest_free_block"]
    hot = [h for h in report["health"] if h["kind"] == "high_temperature"]
    assert len(hot) == 1 and hot[0]["value"] > 85 and hot[0]["severity"] == "warning"
    idle = [w for w in report["workloads"] if w["idle_since"] is not None and w["idle_gpu_hours"] > 0]
    active = [w for w in report["workloads"] if w["used_gpu_hours"] > 0.5 * w["allocated_gpu_hours"] > 0]
    assert len(idle) >= 3 and len(active) >= 3
    ledger = report["fleet"]["ledger_gpu_hours"]
    assert ledger["allocated_idle"] > 0 and ledger["allocated_active"] > 0
    # The L4 exporter's two-hour gap: its pods' GPU-hours are unknown, never active or idle.
    assert 0 < ledger["allocated_unknown"] < 0.01 * report["fleet"]["allocated_gpu_hours"]
    coverage = report["coverage"]
    assert 0.99 * coverage["gpu_samples_expected"] < coverage["gpu_samples_present"]
    assert coverage["gpu_samples_present"] < coverage["gpu_samples_expected"]


def test_the_30_day_window_invents_no_unallocated_days(reports: dict[str, dict[str, Any]]) -> None:
    def unallocated_share(report: dict[str, Any]) -> float:
        fleet = report["fleet"]
        return float(fleet["ledger_gpu_hours"]["unallocated"] / fleet["capacity_gpu_hours"])

    month, week = reports["30d"], reports["7d"]
    # A fleet that existed the whole month is about as free over the month as over its last week
    # (counting the days before a 7-day history as unallocated made it 70 % unallocated).
    assert abs(unallocated_share(month) - unallocated_share(week)) < 0.1
    assert month["fleet"]["capacity_gpu_hours"] == pytest.approx(96 * 24 * 30)
    assert not any(w.startswith("telemetry covers only") for w in month["coverage"]["warnings"])


@pytest.fixture(scope="module")
def demo_url() -> Iterator[str]:
    with serve_app(create_app(demo_service(clusters=1))) as url:
        yield url


def test_the_pages_show_the_hot_gpu_and_the_fragmented_pool(demo_url: str) -> None:
    with browser_page(1440, 1000) as (page, errors):
        page.goto(f"{demo_url}/health")
        page.wait_for_selector("#table-health-events tbody tr", timeout=180_000)
        settle(page)
        hot = [r for r in table_rows(page, "health-events") if r["event"] == "high temperature"]
        assert len(hot) == 1 and hot[0]["severity"] == "warning"
        assert hot[0]["detail"].startswith(("88 °C", "89 °C", "90 °C"))
        screenshot(page, "demo-health-hot-gpu")
        page.goto(f"{demo_url}/capacity")
        page.wait_for_selector("#table-capacity-pending tbody tr", timeout=180_000)
        settle(page)
        pending = {r["pod"]: r for r in table_rows(page, "capacity-pending")}
        assert {r["blocked_by"] for r in pending.values()} == {
            "affinity",
            "taint",
            "mig_profile",
            "quota",
            "fragmentation",
            "capacity",
        }
        assert pending["finetune-vit-0"]["blocked_by"] == "fragmentation"
        assert pending["pretrain-70b-0"]["blocked_by"] == "capacity"
        # What the pod asks of a node, why it waits in words, and what the scheduler said, all on screen.
        sweep = pending["sweep-h100-0"]
        assert sweep["asks"] == (
            "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3 · tolerates nvidia.com/gpu:NoSchedule op=Exists"
        )
        assert sweep["why"].startswith(
            "every GPU node it may use has a taint it does not tolerate (dedicated=llm-training:NoSchedule)\n"
            "scheduler: 0/"
        )
        assert "node(s) had untolerated taint {dedicated: llm-training}" in sweep["why"]
        pools = {r["pool"]: r for r in table_rows(page, "capacity-pools")}
        assert pools["NVIDIA-H100-80GB-HBM3"]["taints"].startswith(
            "dedicated=llm-training:NoSchedule (4 of 4 nodes)"
        )
        screenshot(page, "demo-capacity-fragmentation")
        assert not errors, errors
