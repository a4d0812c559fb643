"""The Queues page on the demo fleet in a real headless Chromium: the report's queue numbers, the states
the demo's Kueue holds (borrowing, a starved queue, a preemption), its figures, a team filter, a cluster
without Kueue, and nothing wider than its card at common screen widths."""

import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

from gpuwatch.core.config import Settings
from gpuwatch.core.model import KueueState
from gpuwatch.read.service import FleetService
from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.demoservice import SimulatedSources, demo_service
from gpuwatch.surfaces.report import Report, build_report
from gpuwatch.ui import create_app
from gpuwatch.ui.data import ViewStore
from gpuwatch.ui.filters import Filters
from tests.integration.browser import browser_page, settle, table_rows
from tests.integration.ui_server import serve_app

pytestmark = pytest.mark.integration
SHOTS = Path(tempfile.gettempdir()) / "gpuwatch-ui-queues"  # screenshots to look at, outside the project

NOT_INSTALLED = "Kueue is not installed in this cluster: queues, quota and fairness are not shown"
# Every box on the page, and whether it is wider than it shows (the page itself, each card, each table's
# scroller and each KPI tile).
OVERFLOWS = """() => {
  const boxes = [document.documentElement, document.querySelector('.gw-main'),
                 ...document.querySelectorAll('.gw-card, .gw-table-wrap, .gw-kpi, .gw-kpi-value')];
  return boxes.filter(b => b.offsetParent !== null || b === document.documentElement)
    .filter(b => b.scrollWidth > b.clientWidth + 1)
    .map(b => `${b.className || b.tagName}: ${b.scrollWidth} > ${b.clientWidth}`);
}"""


@dataclass
class Demo:
    service: FleetService
    url: str

    def report(self) -> Report:
        """The report of the window the page shows by default (the UI's own choice of it)."""
        window = ViewStore(self.service).window(Filters())
        return build_report(self.service.analysis(window), queues=self.service.queue_setup())


class NoKueue(SimulatedSources):
    """The simulated fleet in a cluster that serves no Kueue API."""

    def kueue_state(self) -> KueueState:
        return KueueState()


def _fleet() -> Any:
    return build_demo_fleet(seed=42, end=datetime(2026, 11, 20, tzinfo=UTC), days=2)


@pytest.fixture(scope="module")
def demo() -> Iterator[Demo]:
    service = demo_service(Settings(), _fleet())
    with serve_app(create_app(service)) as url:
        yield Demo(service=service, url=url)


@pytest.fixture(scope="module")
def expected(demo: Demo) -> Report:
    return demo.report()


# -- the numbers as the page formats them ------------------------------------------------------------------


def hours(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.2f}"


def usd(value: float | None) -> str:
    return "n/a" if value is None else f"${value:,.2f}"


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def duration(seconds: float | None) -> str:
    """45 s, 5 m, 2 h 05 m, 3 d 4 h; — for no wait."""
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.0f} s"
    days, rest = divmod(int(seconds), 86400)
    h, m = rest // 3600, rest % 3600 // 60
    if days:
        return f"{days} d {h} h"
    return f"{h} h {m:02d} m" if h else f"{m} m"


def lines(cell: str) -> list[str]:
    return [line.strip() for line in cell.splitlines() if line.strip()]


def per_cluster_queue(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return list({r["cluster_queue"]: r for r in rows}.values())


def screenshot(page: Page, name: str) -> Path:
    SHOTS.mkdir(exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def no_dash_errors(page: Page, errors: list[str]) -> None:
    assert page.locator(".dash-fe-error, .dash-error-card, .dash-debug-menu").count() == 0
    assert errors == []


def open_queues(page: Page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("#queues-kpis .gw-kpi", timeout=180_000)
    settle(page)


# -- tests ---------------------------------------------------------------------------------------------------


def test_the_demo_holds_every_queue_state(expected: Report) -> None:
    assert expected["kueue"]["installed"] is True
    queues = {q["cluster_queue"]: q for q in expected["queues"]}
    # genai borrows H100s from its cohort, over its nominal quota, and had a job preempted.
    assert queues["genai"]["borrowed_gpu_hours"] > 0
    assert queues["genai"]["preemptions"] >= 1
    assert sum(q["lent_gpu_hours"] for q in queues.values() if q["cohort"] == "research") > 0
    # robotics is starved: jobs pending for hours, none admitted.
    assert queues["robotics"]["pending_workloads"] > 0 and queues["robotics"]["admitted_workloads"] == 0
    assert queues["robotics"]["wait_seconds_max"] > 3600
    # Pods wait in pools where allocated GPUs sit idle, and idle pods there are worth reclaiming.
    assert any(b["pending_gpus"] > 0 and b["idle_allocated_gpus"] > 0 for b in expected["blocked_vs_idle"])
    assert expected["reclaim_candidates"]


@pytest.mark.parametrize("width", [1280, 1440, 1920])
def test_the_queues_page_shows_the_report(demo: Demo, expected: Report, width: int) -> None:
    with browser_page(width, 1000) as (page, errors):
        open_queues(page, demo.url + "/queues")
        page.wait_for_selector("#queues-borrowing .main-svg", timeout=60_000)
        page.wait_for_selector("#queues-waits .main-svg", timeout=60_000)
        assert "2026-11-19 00:00 – 2026-11-20 00:00 UTC" in page.inner_text(".gw-as-of")
        assert page.locator(".gw-banner, #queues-not-installed").count() == 0
        queues = table_rows(page, "queues")
        fairness = table_rows(page, "queues-fairness")
        blocked = table_rows(page, "queues-blocked")
        reclaim = table_rows(page, "queues-reclaim")
        kpis = {k: page.inner_text(f"#kpi-queues-{k}") for k in ("pending", "longest-wait", "borrowed")}
        kpis |= {k: page.inner_text(f"#kpi-queues-{k}") for k in ("unused", "idle-while-waiting")}
        # One panel per cluster queue, with its own quota drawn; a box of waits per queue and state.
        panels = page.locator("#queues-borrowing .cartesianlayer > .subplot").count()
        waits_drawn = page.locator("#queues-waits .boxlayer .trace").count()
        overflows = page.evaluate(OVERFLOWS)
        screenshot(page, f"queues-{width}")
        no_dash_errors(page, errors)

    want = expected["queues"]
    assert [lines(r["queue"]) for r in queues] == [[q["queue"], q["namespace"]] for q in want]
    for row, q in zip(queues, want, strict=True):
        cohort = f"cohort {q['cohort']}" if q["cohort"] else "no cohort"
        assert lines(row["cluster_queue"]) == [q["cluster_queue"], cohort]
        assert row["team"] == q["team"]
        assert row["nominal_gpus"] == hours(q["nominal_gpus"])
        assert row["used_gpu_hours"] == hours(q["used_gpu_hours"])
        assert row["borrowed_gpu_hours"] == hours(q["borrowed_gpu_hours"])
        assert row["lent_gpu_hours"] == hours(q["lent_gpu_hours"])
        assert row["admitted_workloads"] == str(q["admitted_workloads"])
        assert row["pending_workloads"] == str(q["pending_workloads"])
        assert row["preemptions"] == str(q["preemptions"])
        assert row["wait_seconds_p50"] == duration(q["wait_seconds_p50"])
        assert row["wait_seconds_p95"] == duration(q["wait_seconds_p95"])
        assert row["wait_seconds_max"] == duration(q["wait_seconds_max"])
        assert lines(row["reserved_unused_usd"]) == [
            usd(q["reserved_unused_usd"]),
            f"{hours(q['reserved_unused_gpu_hours'])} GPU-h",
        ]
    shown = {lines(r["queue"])[0]: r for r in queues}
    assert float(shown["genai-queue"]["borrowed_gpu_hours"]) > 0
    assert int(shown["genai-queue"]["preemptions"]) >= 1
    assert int(shown["robotics-queue"]["pending_workloads"]) > 0
    assert shown["robotics-queue"]["admitted_workloads"] == "0"

    cqs = per_cluster_queue(want)
    longest = max(q["wait_seconds_max"] for q in want if q["wait_seconds_max"] is not None)
    waiting = [b for b in expected["blocked_vs_idle"] if b["pending_gpus"] > 0]
    assert kpis == {
        "pending": str(sum(q["pending_workloads"] for q in want)),
        "longest-wait": duration(longest),
        "borrowed": hours(sum(q["borrowed_gpu_hours"] for q in cqs)),
        "unused": usd(sum(q["reserved_unused_usd"] for q in cqs)),
        "idle-while-waiting": hours(sum(b["idle_allocated_gpus"] for b in waiting)),
    }

    assert [r["team"] for r in fairness] == [f["team"] for f in expected["fairness"]]
    for row, f in zip(fairness, expected["fairness"], strict=True):
        assert row["allocation_share"] == pct(f["allocation_share"])
        assert row["quota_share"] == pct(f["quota_share"])
        ratio = f["fairness_ratio"]
        assert row["fairness_ratio"] == ("no quota" if ratio is None else f"{ratio:,.2f}")

    assert blocked, "no blocked-vs-idle rows"
    assert [r["pool"] for r in blocked] == [
        b["pool"] or "any (no product selector)" for b in expected["blocked_vs_idle"]
    ]
    for row, b in zip(blocked, expected["blocked_vs_idle"], strict=True):
        assert row["pending_pods"] == str(b["pending_pods"])
        assert row["pending_gpus"] == hours(b["pending_gpus"])
        assert row["pending_gpu_hours_waited"] == hours(b["pending_gpu_hours_waited"])
        assert row["idle_allocated_gpus"] == hours(b["idle_allocated_gpus"])

    assert reclaim, "no reclaim candidates"
    want_reclaim = expected["reclaim_candidates"][: len(reclaim)]
    assert [lines(r["pod"]) for r in reclaim] == [[c["pod"], c["namespace"]] for c in want_reclaim]
    for row, c in zip(reclaim, want_reclaim, strict=True):
        assert row["gpus"] == hours(c["gpus"])
        assert lines(row["idle_span"])[0] == duration(c["idle_seconds"])
        assert row["usd_per_hour"] == usd(c["usd_per_hour"])
        assert row["idle_usd_so_far"] == usd(c["idle_usd_so_far"])
        assert row["borrowing"] == ("yes" if c["borrowing"] else "no")

    assert panels == len(cqs)
    assert waits_drawn == 2  # admitted in the window, pending at its end
    assert overflows == [], overflows


def test_a_team_filter_shows_the_team_s_queues(demo: Demo, expected: Report) -> None:
    with browser_page(1280, 1000) as (page, errors):
        open_queues(page, demo.url + "/queues?team=genai")
        page.wait_for_selector("#queues-borrowing .main-svg", timeout=60_000)
        queues = table_rows(page, "queues")
        fairness = table_rows(page, "queues-fairness")
        panels = page.locator("#queues-borrowing .cartesianlayer > .subplot").count()
        overflows = page.evaluate(OVERFLOWS)
        screenshot(page, "queues-team-genai")
        no_dash_errors(page, errors)
    genai = [q for q in expected["queues"] if q["team"] == "genai"]
    assert [lines(r["queue"])[0] for r in queues] == [q["queue"] for q in genai]
    assert [r["borrowed_gpu_hours"] for r in queues] == [hours(q["borrowed_gpu_hours"]) for q in genai]
    assert [r["team"] for r in fairness] == ["genai"]
    assert panels == len(per_cluster_queue(genai))
    assert overflows == [], overflows


def test_without_kueue_the_page_says_so_and_still_shows_idle_gpus_beside_waiting_pods() -> None:
    fleet = _fleet()
    settings = demo_service(Settings(), fleet).settings
    service = FleetService(settings=settings, sources=NoKueue(fleet))
    report = build_report(
        service.analysis(ViewStore(service).window(Filters())), queues=service.queue_setup()
    )
    assert report["kueue"]["installed"] is False
    with serve_app(create_app(service)) as url, browser_page(1280, 1000) as (page, errors):
        open_queues(page, url + "/queues")
        note = page.inner_text("#queues-not-installed")
        has_queue_table = page.locator("#table-queues, #table-queues-fairness").count()
        charts_visible = page.locator("#queues-charts").is_visible()
        blocked = table_rows(page, "queues-blocked")
        reclaim = table_rows(page, "queues-reclaim")
        pending = page.inner_text("#kpi-queues-pending")
        screenshot(page, "queues-no-kueue")
        no_dash_errors(page, errors)
    assert NOT_INSTALLED in note
    assert has_queue_table == 0 and not charts_visible
    assert pending == "n/a"
    assert report["blocked_vs_idle"] and report["reclaim_candidates"]
    assert [r["pool"] for r in blocked] == [b["pool"] for b in report["blocked_vs_idle"]]
    assert [lines(r["pod"])[0] for r in reclaim] == [c["pod"] for c in report["reclaim_candidates"]]
