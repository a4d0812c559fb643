"""The order `make test` hands modules to its workers (pytest-xdist, --dist loadscope --no-loadscope-reorder:
a module's tests run in one worker, sharing its fixtures, modules in the order of the collection).

Modules that take minutes go first, longest first, so that no worker starts one while the other has
nothing left to do; the rest follow in their usual order. The list is a scheduling hint only: a module
missing from it, or named there after a rename, runs all the same.

The modules that read one world (SHARED_WORLDS) run in one worker, one after the other: the servers
holding that world (a Prometheus and a VictoriaMetrics) start once for all of them, not once per module.
"""

from typing import Any

import pytest

LONGEST_FIRST = (
    "test_read_paths",  # with test_history_path and test_rightsize_reads (SHARED_WORLDS)
    "test_faults_cli",
    "test_day_rollups",
    "test_ui_faults",
    "test_young_prometheus",
    "test_focus",
    "test_clusters",
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


# module -> the world it shares: one work unit of pytest-xdist for all the modules of a world.
SHARED_WORLDS = {
    f"tests/integration/{name}.py": "seed5-day"
    for name in ("test_read_paths", "test_history_path", "test_rightsize_reads")
}


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """--dist loadscope, with the modules of a shared world as one scope; other modes as pytest-xdist has
    them."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class WorldScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return SHARED_WORLDS.get(module) or super()._split_scope(nodeid)

    return WorldScopes(config, log)
