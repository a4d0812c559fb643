"""The Teams page's trend sparklines are visible at common screen widths: inside their card, not
scrolled or clipped out of the table."""

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from gpuwatch.core.config import Settings
from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.demoservice import demo_service
from gpuwatch.ui import create_app
from tests.integration.browser import browser_page, screenshot, settle
from tests.integration.ui_server import serve_app

pytestmark = pytest.mark.integration

BOXES = """() => {
  const box = e => e.getBoundingClientRect();
  return Array.from(document.querySelectorAll('#table-teams .gw-spark')).map(spark => {
    const s = box(spark), card = box(spark.closest('.gw-card')), wrap = spark.closest('.gw-table-wrap');
    const w = box(wrap);
    return {spark: [s.left, s.right, s.top, s.bottom], card: [card.left, card.right, card.top, card.bottom],
            visible: [w.left, w.left + wrap.clientWidth], scrolls: wrap.scrollWidth > wrap.clientWidth,
            drawn: spark.querySelector('polygon') !== null};
  });
}"""


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    fleet = build_demo_fleet(seed=42, end=datetime(2026, 11, 20, tzinfo=UTC), days=2)
    with serve_app(create_app(demo_service(Settings(), fleet))) as url:
        yield url


@pytest.mark.parametrize("width", [1280, 1440, 1920])
def test_every_sparkline_lies_inside_its_card(base_url: str, width: int) -> None:
    with browser_page(width, 1000) as (page, errors):
        page.goto(f"{base_url}/teams")
        page.wait_for_selector("#table-teams svg.gw-spark polygon", timeout=180_000)
        settle(page)
        rows = page.locator("#table-teams tbody tr").count()
        boxes = page.evaluate(BOXES)
        screenshot(page, f"teams-{width}")
        assert not errors, errors
    assert rows >= 12 and len(boxes) == rows  # one trend per team
    for b in boxes:
        left, right, top, bottom = b["spark"]
        assert b["drawn"] and right - left >= 100 and bottom - top >= 30  # readable, not squeezed
        assert b["card"][0] <= left and right <= b["card"][1], b
        assert b["card"][2] <= top and bottom <= b["card"][3], b
        assert b["visible"][0] <= left and right <= b["visible"][1], "scrolled out of the table"
        assert not b["scrolls"], "the table is wider than its card"
