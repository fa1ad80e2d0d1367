"""The architecture the tree promises: imports point one way, private modules stay home."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("benchmark", "core", "datamodules", "losses", "samplers")
# Layers, top to bottom: a module may import its own layer or any layer below it.
LAYERS = {
    "benchmark.cli": 7,
    "benchmark.embedders": 7,  # the old class_path, an alias of benchmark.training.embedders
    "benchmark.leaderboard": 6,  # reads tuned settings, suite groups and GPU-hours from tuning
    "benchmark.tuning": 5,
    "benchmark.bench": 6,
    "benchmark.data": 6,
    "benchmark.launch": 4,  # runs work in processes and Slurm tasks for leaderboard and tuning
    "benchmark.training": 3,
    "datamodules": 2,
    "losses": 2,
    "samplers": 2,
    "benchmark.evaluation": 1,
    "core": 0,  # what a run ran on, numba's threads, the protocols: imports nothing of ours
    "benchmark.manual": 1,  # the manual page of each command: imports nothing of ours
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> int | None:
    """The layer of `module`: its longest prefix in LAYERS."""
    prefixes = [p for p in LAYERS if module == p or module.startswith(p + ".")]
    return LAYERS[max(prefixes, key=len)] if prefixes else None


SOURCES = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))
MODULES = {module_name(p) for p in SOURCES}


def imports(path: Path) -> list[str]:
    """Every module of ours that `path` imports at run time, at top level or inside functions
    (`from package import module` counts as that module; `if TYPE_CHECKING:` blocks do not)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            node.body = []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = [f"{node.module}.{a.name}" for a in node.names]
            found += [m for m in submodules if m in MODULES] or [node.module]
    return [name for name in found if name.split(".")[0] in PACKAGES]


EDGES = {module_name(p): imports(p) for p in SOURCES}


@pytest.mark.parametrize("module", sorted(EDGES))
def test_imports_point_down_the_layers(module: str) -> None:
    upward = [
        name for name in EDGES[module]
        if (layer(name) or 0) > (layer(module) or 0) and not name.startswith(module)
    ]  # fmt: skip
    assert upward == [], f"{module} imports a layer above it: {upward}"


@pytest.mark.parametrize("module", sorted(EDGES))
def test_private_modules_are_imported_only_inside_their_package(module: str) -> None:
    package = module.rsplit(".", 1)[0]
    foreign = [
        name for name in EDGES[module]
        if any(part.startswith("_") for part in name.split("."))
        and not name.startswith(package + ".")
    ]  # fmt: skip
    assert foreign == [], f"{module} imports another package's private module: {foreign}"


def test_no_import_cycle() -> None:
    graph = {m: {n for n in EDGES[m] if n in EDGES and n != m} for m in EDGES}
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = [*path[path.index(nxt) :], nxt] if nxt in path else [node, nxt]
                pytest.fail(f"import cycle: {' -> '.join(cycle)}")
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])


@pytest.mark.parametrize("library", ["losses", "samplers", "datamodules"])
def test_the_libraries_import_nothing_from_benchmark(library: str) -> None:
    """Losses, samplers and datamodules are usable without the suite: what they share with it
    lives in `core`."""
    found = {
        module: [name for name in EDGES[module] if name.split(".")[0] == "benchmark"]
        for module in EDGES
        if module.split(".")[0] == library
    }
    assert {m: names for m, names in found.items() if names} == {}


def test_import_losses_loads_neither_numba_nor_the_evaluator() -> None:
    """numba (imported at the compiled Circle pass's first call) and the evaluator are not part
    of defining a loss."""
    code = (
        "import sys, losses; print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('numba', 'benchmark')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_layer_table_covers_every_benchmark_package() -> None:
    packages = {module_name(p) for p in (ROOT / "benchmark").glob("*/__init__.py")}
    assert packages <= set(LAYERS), f"add {packages - set(LAYERS)} to LAYERS"


def package_of(module: str) -> str:
    """`benchmark.<package>` for a module under `benchmark/`, else its top-level package."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "benchmark" else parts[0]


def test_no_package_import_cycle() -> None:
    """Packages import one way too: no chain of imports leads from a package back to itself."""
    graph: dict[str, set[str]] = {}
    for module, names in EDGES.items():
        for name in names:
            if package_of(name) != package_of(module):
                graph.setdefault(package_of(module), set()).add(package_of(name))

    def reachable(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    cyclic = sorted(p for p in graph if p in reachable(p))
    assert cyclic == [], f"packages in an import cycle: {cyclic}"
