"""The order `make test` hands modules to its workers (pytest-xdist, --dist loadscope --no-loadscope-reorder:
a module's tests run in one worker, sharing its fixtures, modules in the order of the collection).

Modules that take minutes go first, longest first, so that no worker starts one while the other has
nothing left to do; the rest follow in their usual order. The list is a scheduling hint only: a module
missing from it, or named there after a rename, runs all the same.
"""

import pytest

LONGEST_FIRST = (
    "test_read_paths",
    "test_faults_cli",
    "test_day_rollups",
    "test_history_path",  # after another: the world it shares with test_read_paths is made by then
    "test_ui_faults",
    "test_young_prometheus",
    "test_focus",
    "test_clusters",
    "test_rightsize_reads",
    "test_ui_demo",
    "test_namespace_rollups",
    "test_duplicate_publishers",
    "test_demo_states",
    "test_rollups",
    "test_rules_dashboards",
    "test_prometheus_source",
    "test_live_report",
    "test_api",
    "test_ui_outage",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    order = {f"tests.integration.{name}": rank for rank, name in enumerate(LONGEST_FIRST)}

    def rank(item: pytest.Item) -> int:
        return order.get(item.module.__name__ if item.module else "", len(order))

    items.sort(key=rank)  # stable: each module's tests keep their order
