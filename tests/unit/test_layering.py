"""The floor plan of docs/architecture.md, checked on the files and import statements of src/gpuwatch:
dependencies point one way, the simulator (gpuwatch.sim) is chosen by the CLI and gpuwatch.wiring alone,
no module name appears twice and no module outgrows 900 lines."""

import ast
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "gpuwatch"
# Packages whose modules are layers of their own (core.model below core.config, read.service below
# read.devicehealth, ...); every other package is one layer.
SPLIT = {"core", "read", "surfaces"}
MAX_LINES = 900

CORE = {"core.units", "core.errors", "core.model", "core.schema", "core.config"}
# What each layer may import from gpuwatch itself (besides its own layer).
ALLOWED: dict[str, set[str]] = {
    "core.units": {"core.errors"},
    "core.errors": set(),
    "core.model": {"core.units", "core.errors"},
    "core.schema": {"core.model", "core.units", "core.errors"},
    "core.config": {"core.model", "core.units", "core.errors"},
    # Adapters to real systems (Prometheus, the Kubernetes API, Kueue, DCGM's exposition) and pure
    # frame-in, frame-out analytics: the core beneath them alone.
    "sources": CORE,
    "analytics": CORE - {"core.config"},
    # read: a window read from the sources and analysed — the raw path (analysis, service) and the
    # history path (series; history reads the store, historytables assembles its frames, historypieces
    # turns its pieces into hours and dollars), charges per period and device health beside them.
    "read.analysis": CORE | {"sources", "analytics"},
    "read.service": CORE | {"sources", "analytics", "read.analysis"},
    "read.series": CORE | {"analytics", "read.analysis"},
    "read.historypieces": CORE | {"sources"},
    "read.historytables": CORE | {"sources", "analytics", "read.analysis", "read.historypieces"},
    "read.history": CORE | {"sources", "analytics", "read.historypieces", "read.historytables"},
    "read.chargeback": CORE | {"sources", "analytics", "read.analysis", "read.history", "read.historypieces"},
    "read.devicehealth": CORE | {"sources", "analytics", "read.analysis", "read.service"},
    # surfaces: what users and tools read: the report document (report) and its renderings (table, json,
    # csv, parquet, html). views answer a window on either read path for the pages.
    "surfaces.report": CORE | {"analytics", "read.analysis", "read.historytables"},
    "surfaces.renderings": CORE | {"read.analysis", "surfaces.report"},
    "surfaces.focus": CORE | {"analytics"},
    "surfaces.check": CORE | {"read.analysis", "read.service"},
    "surfaces.exporter": CORE | {"read.series", "read.service"},
    "views": CORE
    | {"sources", "analytics", "read.analysis", "read.history", "read.series", "read.service"}
    | {"read.historypieces", "read.historytables", "surfaces.report"},
    "surfaces.exports": CORE
    | {"read.chargeback", "read.devicehealth", "read.history", "read.service"}
    | {"surfaces.focus", "surfaces.renderings", "surfaces.report", "views"},
    "ui": CORE
    | {"read.analysis", "read.devicehealth", "read.service", "surfaces.exports", "surfaces.report"}
    | {"surfaces.renderings", "views"},
    # The simulator stands on the core and the read layer (its fleet is a FleetService's sources);
    # nothing below the CLI and the wiring module imports it.
    "sim": CORE
    | {"sources", "analytics"}
    | {f"read.{m}" for m in ("analysis", "devicehealth", "series", "service")},
    "wiring": CORE | {"read.service", "sim"},
    "cli": CORE
    | {"read.devicehealth", "read.history", "read.service", "sim", "surfaces.check", "surfaces.exporter"}
    | {"surfaces.exports", "surfaces.renderings", "ui", "views", "wiring"},
    "__main__": {"cli"},
    "__init__": set(),
}
# Third-party libraries confined to one place.
CONFINED = {
    "dash": {"ui"},
    "plotly": {"ui", "surfaces.renderings"},
    "prometheus_client": {"surfaces.exporter"},
    "kubernetes": {"sources"},
}


def _layer_of(parts: tuple[str, ...]) -> str:
    """The layer of a module given by its path under gpuwatch ("read", "service"), without ".py"."""
    if parts[0] in SPLIT:
        return ".".join(parts[:2]) if len(parts) > 1 and parts[1] != "__init__" else parts[0]
    return parts[0]


def _layer(path: Path) -> str:
    return _layer_of(path.relative_to(PACKAGE).with_suffix("").parts)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_dependencies_point_one_way() -> None:
    broken = []
    for path in _modules():
        layer = _layer(path)
        for name in _imports(path):
            parts = tuple(name.split("."))
            if parts[0] == "gpuwatch" and len(parts) > 1:
                target = _layer_of(parts[1:])
                if target != layer and target not in ALLOWED.get(layer, set()):
                    broken.append(f"{path.relative_to(PACKAGE)} imports {name}")
            elif parts[0] in CONFINED and layer not in CONFINED[parts[0]]:
                broken.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert broken == []


def test_only_the_cli_and_the_wiring_module_import_the_simulator() -> None:
    users = {_layer(p) for p in _modules() if any(n.startswith("gpuwatch.sim") for n in _imports(p))} - {
        "sim"
    }
    assert users == {"cli", "wiring"}
    assert not (PACKAGE / "sources" / "simulated").exists()


def test_no_module_name_twice_and_none_over_900_lines() -> None:
    names = Counter(p.name for p in _modules() if p.name != "__init__.py" and p.parent.name != "pages")
    assert [n for n, count in names.items() if count > 1] == []
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in _modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_kubernetes_client_only_in_its_source_module() -> None:
    users = [p.name for p in _modules() if any(n.split(".")[0] == "kubernetes" for n in _imports(p))]
    assert set(users) <= {"kubernetes.py"}


def test_the_rule_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from gpuwatch.sim import fleet\nimport dash\n")
    assert _imports(bad) == {"gpuwatch.sim", "dash"}
    assert _layer_of(("sim", "fleet")) not in ALLOWED["views"] and "ui" not in CONFINED["prometheus_client"]
    assert _layer_of(("read", "service")) == "read.service" and _layer_of(("read", "__init__")) == "read"
    assert _layer_of(("surfaces", "exporter", "collector")) == "surfaces.exporter"
