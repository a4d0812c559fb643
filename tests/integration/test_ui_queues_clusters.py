"""The Queues page of the two-cluster demo in a real headless Chromium: both clusters' ClusterQueues under
names qualified by their cluster, and a cluster filter that keeps one cluster's."""

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuwatch.core.config import load_settings
from gpuwatch.core.model import cluster_of
from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.demoservice import demo_service
from gpuwatch.ui import create_app
from tests.integration.browser import browser_page, settle, table_rows
from tests.integration.ui_server import serve_app

pytestmark = pytest.mark.integration
END = datetime(2026, 11, 20, tzinfo=UTC)
TWO_CLUSTERS = Path(__file__).parents[2] / "docs/examples/two-clusters.yaml"


def shown_cluster_queues(rows: list[dict[str, str]]) -> set[str]:
    """The cluster queues of the Queues table (each cell: the name over its cohort)."""
    return {r["cluster_queue"].splitlines()[0].strip() for r in rows}


def test_the_queues_page_lists_both_clusters_cluster_queues() -> None:
    settings = load_settings(config_path=str(TWO_CLUSTERS), env={})
    service = demo_service(settings, build_demo_fleet(seed=42, end=END, days=2), history_days=2)
    cluster_queues = set(service.queue_setup().quotas["cluster_queue"])
    assert {cluster_of(q) for q in cluster_queues} == {"eu-1", "us-1"}
    with serve_app(create_app(service)) as url, browser_page(1440, 1000) as (page, errors):
        page.goto(url + "/queues")
        page.wait_for_selector("#table-queues", timeout=180_000)
        settle(page)
        rows = table_rows(page, "queues")
        assert shown_cluster_queues(rows) == cluster_queues
        assert {r["queue"].splitlines()[0].strip() for r in rows} >= {"eu-1/genai-queue", "us-1/genai-queue"}

        page.goto(url + "/queues?cluster=us-1")
        page.wait_for_selector("#table-queues", timeout=180_000)
        settle(page)
        rows = table_rows(page, "queues")
        assert shown_cluster_queues(rows) == {q for q in cluster_queues if cluster_of(q) == "us-1"}
        assert errors == []
