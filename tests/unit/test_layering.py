"""The one-way dependency rule of ARCHITECTURE.md, checked on the import statements of src/gpuwatch."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "gpuwatch"

# What each layer may import from gpuwatch itself (besides its own layer).
BASE = {"units", "errors", "model", "schema", "config", "__init__"}
ALLOWED = {
    "units": {"errors"},
    "errors": set(),
    "model": {"units", "errors"},
    "schema": {"model", "units", "errors"},
    "config": {"model", "units", "errors"},
    "sources": BASE,
    "analytics": BASE - {"config"},
    # analysis runs the SPEC §3 model over one window of the sources' frames (pure analytics).
    "analysis": BASE | {"sources", "analytics", "queues"},
    "service": BASE | {"sources", "analysis", "queues"},
    # check, health and simulation stand beside the service: `gpuwatch check`, the /health page's device
    # telemetry, and the simulated fleet served as the outside systems and written as history.
    "check": BASE | {"service", "analysis"},
    "health": BASE | {"service", "analysis", "analytics", "sources"},
    "simulation": BASE | {"service", "analysis", "series", "sources"},
    # series renders an analysis (and its queue tables) as gpuwatch_* series for the service layer
    # (the Analysis and QueueTables types only back).
    "series": BASE | {"analysis", "queues"},
    # history assembles reports from gpuwatch's own series (SPEC §4.3), beside service: the second
    # reader, whose sums go through the same pure analytics (right-sizing) as the raw path's samples.
    "history": BASE | {"sources", "analytics", "series", "analysis", "queues"},
    # backfill writes the simulated fleet's history into a TSDB directory (tsdb, promtool).
    "backfill": BASE | {"simulation", "series", "sources", "tsdb"},
    # tsdb writes series as Prometheus TSDB blocks.
    "tsdb": BASE | {"series"},
    # queues turns Kueue's objects and a report's rows into queue tables (pure analytics under it).
    "queues": BASE | {"analytics"},
    "report": BASE | {"analysis", "history", "queues"},
    # chargeback cuts a window's numbers by charge period on either read path; focus writes them as
    # FOCUS rows (a surface, as report is).
    "chargeback": BASE | {"analysis", "analytics", "history", "sources"},
    "focus": BASE | {"analytics"},
    # exports: what `gpuwatch report` writes and serve's API answers, on the read path a window asks for.
    "exports": BASE | {"chargeback", "focus", "health", "history", "report", "service", "views"},
    "exporter": BASE | {"service", "series"},
    # views answer a window on one of two read paths: raw (service) or recorded history (history, and
    # the PromQL reads of sources.prometheus); the service's sources say whether history exists.
    "views": BASE | {"service", "analysis", "history", "queues", "report", "series", "sources"},
    # ui draws views and shows the report's numbers; never sources or analytics.
    "ui": BASE | {"service", "analysis", "exports", "health", "report", "views"},
    "cli": BASE
    | {
        "backfill",
        "check",
        "exports",
        "health",
        "service",
        "simulation",
        "history",
        "report",
        "exporter",
        "ui",
        "views",
    },
    "__main__": {"cli"},
    "__init__": set(),
}
# Third-party libraries confined to one place.
CONFINED = {
    "dash": {"ui"},
    "plotly": {"ui", "report"},
    "prometheus_client": {"exporter"},
    "kubernetes": {"sources"},
}


def _layer(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_dependencies_point_one_way() -> None:
    broken = []
    for path in PACKAGE.rglob("*.py"):
        layer = _layer(path)
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] == "gpuwatch" and len(parts) > 1:
                target = parts[1]
                if target != layer and target not in ALLOWED[layer]:
                    broken.append(f"{path.relative_to(PACKAGE)} imports {name}")
            elif parts[0] in CONFINED and layer not in CONFINED[parts[0]]:
                broken.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert broken == []


def test_kubernetes_client_only_in_its_source_module() -> None:
    users = [
        p.name for p in PACKAGE.rglob("*.py") if any(n.split(".")[0] == "kubernetes" for n in _imports(p))
    ]
    assert set(users) <= {"kubernetes.py"}


def test_the_rule_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from gpuwatch.sources.simulated import fleet\nimport dash\n")
    assert _imports(bad) == {"gpuwatch.sources.simulated", "dash"}
    assert "sources" not in ALLOWED["ui"] and "ui" not in CONFINED["prometheus_client"]
