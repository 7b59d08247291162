"""The layers of docs/architecture.md, checked on the source: no import cycle, no layer
importing a higher one, Spark only under ``spark/``.

Imports inside functions count (they run). Imports under ``if TYPE_CHECKING:`` count too: a
type-only import is still a dependency of the design, and a circle of them is a circle of
rooms. The engine names the repository handle (core/handle.py), never ``Repository``, and the
zarr store names ``BaseSession``, never the session classes that hand themselves to it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

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
    "ops": 4,  # maintenance beside the engine, over the same handle
    "repository": 5,  # the face: the verbs of the engine and of maintenance behind one class
    "zarr_store": 5,
    "zarr_keys": 5,  # the zarr store's key grammar and listing
    "zarr_values": 5,  # what the zarr store reads and writes, in the caller's thread
    "xarray": 5,  # to_repository: xarray datasets through forks (beside the zarr store)
    "inventory": 5,
    "export": 5,  # one snapshot as plain Zarr v3 (zarr_keys names the chunks)
    "virtual": 5,
    "values": 5,  # arrays as tables: labels <-> indexes, chunk planning, rows (xarray, no Spark)
    "testing": 5,
    "spark": 6,
    "cli": 7,
    "": 7,  # the package root re-exports the public API
}
# The one upward import: Session.store (and ForkSession.store, a fork's) hands the session to
# the zarr store class, imported when called (docs/architecture.md, "Layers"), so importing
# the core never imports zarr.
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


def _runtime_imports(
    tree: ast.AST, type_only: bool = False
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import that can run (and with ``type_only`` those under ``TYPE_CHECKING``),
    and whether it runs at module level."""

    def walk(node: ast.AST, top: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child) and not type_only:
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


def _source(module: str, node: ast.ImportFrom) -> str:
    """The absolute name of the module ``node`` imports from."""
    if not node.level:
        return node.module or ""
    package = module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    source = _source(module, node)
    # ``from pkg import name`` imports the module pkg.name when there is one; a name a
    # package's face (``core/__init__.py``) hands on comes from the room that defines it.
    faced = FACES.get(source, {})
    targets = []
    for alias in node.names:
        submodule = f"{source}.{alias.name}"
        targets.append(submodule if submodule in MODULES else faced.get(alias.name, source))
    return targets


def _face_exports(package: str) -> dict[str, str]:
    """name -> the module it comes from, for each name a package's ``__init__`` imports from a
    module of its own (a face that only hands names on)."""
    tree = ast.parse(MODULES[package].read_text())
    return {
        alias.asname or alias.name: f"{package}.{node.module}"
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
        for alias in node.names
    }


FACES = {m: _face_exports(m) for m, p in MODULES.items() if p.name == "__init__.py"}


def import_graph(type_only: bool = False) -> dict[str, dict[str, bool]]:
    """module -> {imported package module: whether imported at module level}; with
    ``type_only`` the imports under ``TYPE_CHECKING`` too."""
    graph: dict[str, dict[str, bool]] = {}
    for module, path in MODULES.items():
        edges: dict[str, bool] = {}
        for node, top in _runtime_imports(ast.parse(path.read_text()), type_only):
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


def find_cycle(graph: dict[str, dict[str, bool]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order, the first repeated), if any."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in graph[module]:
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)) is not None:
            return cycle
    return None


def test_no_import_cycle() -> None:
    cycle = find_cycle(import_graph(type_only=True))
    assert cycle is None, "import cycle (TYPE_CHECKING counted): " + " -> ".join(cycle or [])


def test_lower_layers_never_import_higher_ones_even_for_types() -> None:
    upward = [
        (module, target)
        for module, edges in import_graph(type_only=True).items()
        for target in edges
        if _layer(target) > _layer(module) and (module, target) not in ALLOWED_UPWARD
    ]
    assert upward == []


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


def test_the_core_is_reached_through_its_face() -> None:
    """Outside ``core/``, modules import ``icechunk_spark.core`` (its ``__init__``), never a room
    inside it: the rooms can move without touching the layers above."""
    inside = [
        (module, source)
        for module, path in MODULES.items()
        if not module.startswith("icechunk_spark.core")
        for node, _ in _runtime_imports(ast.parse(path.read_text()), type_only=True)
        if isinstance(node, ast.ImportFrom)
        and (source := _source(module, node)).startswith("icechunk_spark.core.")
    ]
    assert inside == []


# Every Python worker Spark starts imports the package through ``pyspark_icechunk``, and every
# CLI run imports the CLI: xarray, pandas, zarr and dask took about half of that import
# (values/__init__ says why), botocore another 0.1 s (storage/s3.py), and none of them is
# needed to plan, write chunk rows, commit, or run a command on a repository not on S3. A
# fresh interpreter, so nothing this test process loaded counts.
NOT_AT_IMPORT = ("xarray", "pandas", "zarr", "dask", "botocore")


def test_the_data_source_and_the_cli_import_only_what_every_run_needs() -> None:
    probe = (
        "import sys, pyspark_icechunk, icechunk_spark.spark, icechunk_spark.values, "
        "icechunk_spark.cli\n"
        f"print(','.join(m for m in {NOT_AT_IMPORT!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
