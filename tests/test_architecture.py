"""The layers of docs/architecture.md, checked on the source: no import cycle, no layer
importing a higher one, Spark only under ``spark/``.

Imports inside functions count (they run), imports under ``if TYPE_CHECKING:`` do not.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "icechunk_spark"

# Lower numbers are lower layers; a module may import its own layer and those below.
LAYERS = {
    "errors": 0,
    "retry": 0,
    "progress": 0,
    "exit": 0,
    "pools": 0,
    "format": 1,
    "storage": 2,
    "chunks": 3,
    "splitting": 3,
    "core": 4,
    "ops": 4,  # maintenance beside the engine: it never imports core.repository at runtime
    "zarr_store": 5,
    "zarr_keys": 5,  # the zarr store's key grammar and listing
    "zarr_values": 5,  # what the zarr store reads and writes, in the caller's thread
    "xarray": 5,  # to_repository: xarray datasets through forks (beside the zarr store)
    "inventory": 5,
    "virtual": 5,
    "testing": 5,
    "spark": 6,
    "cli": 7,
    "": 7,  # the package root re-exports the public API
}
# The one upward import: Session.store (and ForkSession.store, a fork's) hands the session to
# the zarr store class, imported when called (DESIGN.md §1), so importing the core never
# imports zarr.
ALLOWED_UPWARD = {
    ("icechunk_spark.core.session", "icechunk_spark.zarr_store"),
    ("icechunk_spark.core.forks", "icechunk_spark.zarr_store"),
}


def module_name(path: Path) -> str:
    parts = ["icechunk_spark", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import that can run, and whether it runs at module level."""

    def walk(node: ast.AST, top: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    yield from walk(other, top)
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, top
            inner = top and not isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            yield from walk(child, inner)

    yield from walk(tree, True)


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        package = module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
        base = package.split(".")
        base = base[: len(base) - (node.level - 1)]
        source = ".".join([*base, node.module] if node.module else base)
    else:
        source = node.module or ""
    # ``from pkg import name`` imports the module pkg.name when there is one.
    names = [f"{source}.{a.name}" for a in node.names]
    return [n for n in names if n in MODULES] or [source]


def import_graph() -> dict[str, dict[str, bool]]:
    """module -> {imported package module: whether imported at module level}."""
    graph: dict[str, dict[str, bool]] = {}
    for module, path in MODULES.items():
        edges: dict[str, bool] = {}
        for node, top in _runtime_imports(ast.parse(path.read_text())):
            for target in _targets(module, node):
                while target and target not in MODULES:  # a name inside a module
                    target = target.rpartition(".")[0]
                if target.startswith("icechunk_spark") and target != module:
                    edges[target] = edges.get(target, False) or top
        graph[module] = edges
    return graph


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS[parts[1] if len(parts) > 1 else ""]


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        _layer(module)  # KeyError names a module the table does not place


def test_no_import_cycle() -> None:
    graph = import_graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in graph[module]:
            if state.get(target) == 1:
                cycle = [*path[path.index(target) :], target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)


def test_lower_layers_never_import_higher_ones() -> None:
    upward = [
        (module, target)
        for module, edges in import_graph().items()
        for target in edges
        if _layer(target) > _layer(module) and (module, target) not in ALLOWED_UPWARD
    ]
    assert upward == []


def test_the_allowed_upward_import_is_not_at_module_level() -> None:
    graph = import_graph()
    for module, target in ALLOWED_UPWARD:
        assert graph[module].get(target) is False, (module, target)


def test_spark_is_imported_only_under_spark() -> None:
    outside = []
    for module, path in MODULES.items():
        if module.startswith("icechunk_spark.spark"):
            continue
        for node, _ in _runtime_imports(ast.parse(path.read_text())):
            for target in _targets(module, node):
                if target.split(".")[0] == "pyspark":
                    outside.append(module)
    assert outside == []
