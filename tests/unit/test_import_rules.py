"""The layering of docs/architecture.md, checked on the source: which package may import which,
no package cycles, and no function-local imports of tidesync code (which would hide a cycle).

Every `import` counts, at module level or not, under `TYPE_CHECKING` or not.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "tidesync"

LAYERS = ("domain", "apps", "wire", "cdc", "target", "capture", "migrations", "ingress", "shore",
          "projections", "ship", "graphql")

# What each layer may import besides itself. The composition root (`bootstrap`) may import any
# layer; the entry points may import anything. Nothing else imports `config` or `bootstrap`.
ALLOWED: dict[str, set[str]] = {
    "domain": set(),
    "apps": {"domain"},
    "wire": {"domain"},
    "migrations": {"domain"},
    "cdc": {"domain", "wire"},
    "target": {"domain"},
    "capture": {"domain", "cdc", "target", "failpoints"},
    "ingress": {"domain", "apps", "wire", "migrations"},
    "shore": {"domain", "apps", "cdc", "wire", "target", "migrations", "failpoints"},
    "projections": {"domain", "apps", "wire", "migrations"},
    "ship": {"domain", "cdc", "wire", "target", "failpoints"},
    "graphql": {"domain", "apps", "projections"},
    # Top-level modules.
    "failpoints": set(),
    "embedded_store": {"domain"},
    "localservices": {"domain", "embedded_store"},
    "linkmodel": {"domain"},
    "linksim": {"domain", "linkmodel"},
    # The configuration is made of the layers' own settings types.
    "config": {"domain", *(f"{layer}.settings" for layer in LAYERS)},
    "bootstrap": {*LAYERS, "config", "embedded_store", "failpoints"},
    "entrypoints": {*LAYERS, "config", "bootstrap", "embedded_store", "localservices",
                    "failpoints"},
    "__main__": {"entrypoints"},
    "__init__": set(),
}


def _component(module: str) -> str:
    """`tidesync.shore.worker` → `shore`; `tidesync.config` → `config`."""
    return module.split(".")[1]


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(ROOT.rglob("*.py")):
        if path.name.endswith("_pb2.py"):
            continue
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        yield ".".join(parts), path


def _imports(module: str, path: Path) -> Iterator[tuple[str, bool, int]]:
    """(imported tidesync module, whether at module level, line) for every import."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top_level = {id(node) for node in tree.body}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            # `from tidesync import failpoints` and `from tidesync.target import schema` name
            # modules; `from tidesync.target.schema import x` names one module.
            names = [f"{stem}.{alias.name}" for alias in node.names] if stem in (
                "tidesync", *(f"tidesync.{layer}" for layer in LAYERS)) else [stem]
        else:
            continue
        for name in names:
            if name == "tidesync" or name.startswith("tidesync."):
                yield name, id(node) in top_level, node.lineno


def _allowed(source: str, target_module: str) -> bool:
    target = _component(target_module)
    allowed = ALLOWED[source]
    if target == source or target in allowed:
        return True
    second = ".".join(target_module.split(".")[1:3])
    return second in allowed


def test_every_component_has_a_rule() -> None:
    components = {_component(module) for module, _ in _modules() if module != "tidesync"}
    assert components - set(ALLOWED) == set()


def test_layers_import_only_what_lies_below_them() -> None:
    broken = []
    for module, path in _modules():
        source = "__init__" if module == "tidesync" else _component(module)
        for imported, _, line in _imports(module, path):
            if imported != "tidesync" and not _allowed(source, imported):
                broken.append(f"{path.relative_to(ROOT.parent)}:{line} imports {imported}")
    assert broken == []


# Where a function-local import cannot hide a cycle: the importer sits above the component it
# loads, which ALLOWED forbids to import it back. The composition root and the entry points may
# so load a heavy part (SQLAlchemy's reconciliation, the binlog capture) only when a command
# uses it; the rules above still check those imports like any other.
DEFERRABLE: dict[str, set[str]] = {"bootstrap": set(LAYERS),
                                   "entrypoints": {*LAYERS, "bootstrap"}}


def _deferrable(source: str, imported: str) -> bool:
    target = _component(imported)
    return target in DEFERRABLE.get(source, set()) and source not in ALLOWED[target]


def test_no_function_local_imports_of_tidesync_code() -> None:
    local = [f"{path.relative_to(ROOT.parent)}:{line} {imported}"
             for module, path in _modules() for imported, at_top, line in _imports(module, path)
             if not at_top and not _deferrable(_component(module), imported)]
    assert local == []


@pytest.mark.parametrize(("source", "imported", "expected"), [
    ("bootstrap", "tidesync.ship.reconcile", True),
    ("entrypoints", "tidesync.bootstrap.capture", True),
    ("bootstrap", "tidesync.bootstrap.capture", False),  # within one component: could cycle
    ("ship", "tidesync.target.digests", False),
    ("bootstrap", "tidesync.config", False),
])
def test_only_the_top_of_the_graph_defers_imports(source: str, imported: str,
                                                  expected: bool) -> None:
    assert _deferrable(source, imported) is expected


def test_no_package_cycles() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in _modules():
        if module == "tidesync":
            continue
        source = _component(module)
        for imported, _, _ in _imports(module, path):
            if imported != "tidesync" and _component(imported) != source:
                graph[source].add(_component(imported))
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*trail[trail.index(nxt):], nxt]))
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


@pytest.mark.parametrize(("source", "imported", "expected"), [
    ("graphql", "tidesync.shore.downlink", False),
    ("graphql", "tidesync.apps.conflicts", True),
    ("config", "tidesync.graphql.settings", True),
    ("config", "tidesync.graphql.console", False),
    ("ship", "tidesync.shore.worker", False),
    ("shore", "tidesync.ship.client", False),
    ("domain", "tidesync.config", False),
])
def test_the_rules_themselves(source: str, imported: str, expected: bool) -> None:
    assert _allowed(source, imported) is expected


def test_no_module_over_600_lines() -> None:
    long = [f"{path.relative_to(ROOT.parent)}: {lines} lines" for _, path in _modules()
            if (lines := len(path.read_text(encoding="utf-8").splitlines())) > 600]
    assert long == []
