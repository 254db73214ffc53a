"""Imports only go down the pipeline: no import cycle between files or between folders, lazy imports counted,
and every import goes to a layer at or below the importer's (LAYERS).

Reads the source with `ast` (nothing is imported, no GPU or LiteRT needed): every module of gpuengine/, delegate/
(gpuengine.delegate) and tools/ (gpuengine.tools), every `import` and `from ... import` anywhere in a module
(inside functions too), relative ones resolved. Imports under `if TYPE_CHECKING:` are left out: they are never
executed, only read by type checkers. Importing `a.b.c` runs the packages `a` and `a.b` first; those implicit
package imports are not counted (every module would depend on gpuengine/__init__.py), only the named module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Source folders and the package each one is installed as (pyproject.toml's package-dir).
SOURCES = {"gpuengine": ROOT / "gpuengine", "gpuengine.delegate": ROOT / "delegate",
           "gpuengine.tools": ROOT / "tools"}

# The pipeline, lowest layer first: a module may import its own layer and the layers before it. A module is in
# the layer of the longest prefix naming it (a prefix is a module or a package and everything in it).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # exception types; the user's environment settings; LiteRT's start-up lines filtered (stdlib only)
    ("errors", ("gpuengine.errors", "gpuengine.settings", "gpuengine.litert_logging")),
    ("model", ("gpuengine.model",)),  # reader, IR, builder, shapes, validation, op vocabulary
    ("latency", ("gpuengine.latency",)),  # the latency model: prediction only (devices, policy, target classes)
    ("passes", ("gpuengine.passes",)),  # IR -> IR
    ("reference", ("gpuengine.reference", "gpuengine.op_table")),  # the float64 executor; each op's four rules
    ("zoo", ("gpuengine.zoo",)),  # model builders (the int8 one calibrates on the float64 executor)
    # kernel choice, fusion, PHWC4 layout, WGSL codegen, a partition's dispatches and their storage precision
    ("lowering", ("gpuengine.lowering",)),
    # partition: GPU subgraphs and the CPU fallback. It runs before lowering but asks the kernels (registry.check)
    # which ops they take, so it sits above them; nothing in lowering needs the partition.
    ("delegate", ("gpuengine.delegate",)),
    ("memory", ("gpuengine.memory",)),  # memory planners (pure)
    # engine options (checked once) and the plan of a graph: passes, partition, lowering, control flow
    ("planning", ("gpuengine.options", "gpuengine.planning")),
    ("runtime", ("gpuengine.runtime",)),
    # LiteRT as the oracle (reads models, the runtime's index checks): for measuring, the CLI and tests only, never
    # loaded by `import gpuengine` (test_import_gpuengine_leaves_the_oracle_out)
    ("oracle", ("gpuengine.oracle",)),
    ("api", ("gpuengine.api", "gpuengine.interpreter", "gpuengine.compiled_model", "gpuengine.tensor_buffer",
             "gpuengine.hardware_accelerator", "gpuengine.__init__")),  # gpuengine.__init__: the package itself
    # measuring (workgroup search, calibration, the mixed-precision search): above the runtime it measures
    ("tuning", ("gpuengine.tuning", "gpuengine.mixed_precision")),
    ("llm", ("gpuengine.llm",)),
    ("serve", ("gpuengine.serve",)),  # the OpenAI-compatible server, its scheduler, Ray Serve: above llm
    ("tools", ("gpuengine.tools",)),  # the CLI
]
RANK = {name: i for i, (name, _) in enumerate(LAYERS)}

# -- reading the imports --------------------------------------------------------------------------------------
def discover(sources: Mapping[str, Path] = SOURCES) -> dict[str, tuple[Path, bool]]:
    """{module name: (file, is a package's __init__)} for every .py file of the sources."""
    modules = {}
    for package, folder in sources.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            name = ".".join((package, *(parts[:-1] if is_package else parts)))
            modules[name] = (path, is_package)
    return modules


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


# Where statements nest (an import is a statement: expressions need not be visited, which keeps this fast).
_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")


def _import_nodes(tree: ast.AST) -> Iterable[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, except the bodies of `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        skip_body = isinstance(node, ast.If) and _type_checking_only(node)
        for block in _BLOCKS:
            if not (skip_body and block == "body"):
                stack.extend(getattr(node, block, ()))


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a `from` import names."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[:len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(source: str, module: str, is_package: bool, known: Iterable[str]) -> set[str]:
    """The modules of `known` that one module's source imports (the most specific one each import names)."""
    known = set(known)
    found: set[str] = set()

    def add(name: str) -> None:
        while name and name not in known:  # `import gpuengine.x.y` where y is a name, not a module
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)

    for node in _import_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
            continue
        target = _resolve(node, module, is_package)
        for alias in node.names:
            sub = f"{target}.{alias.name}"
            add(sub if sub in known else target)  # `from pkg import module` imports that module
    return found


def import_graph(sources: Mapping[str, Path] = SOURCES) -> dict[str, set[str]]:
    modules = discover(sources)
    return {name: imports_of(path.read_text(), name, is_package, modules)
            for name, (path, is_package) in modules.items()}


# -- cycles and layers ----------------------------------------------------------------------------------------
def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """One cycle (as a path a -> ... -> a) per strongly connected component with more than one node or a self
    loop (Tarjan, iterative), sorted so the failure message is stable."""
    edges = {n: sorted(set(targets)) for n, targets in graph.items()}
    for targets in list(edges.values()):
        for t in targets:
            edges.setdefault(t, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges[node]:
                    components.append(sorted(component))
    return sorted(_cycle_in(edges, set(c)) for c in components)


def _cycle_in(edges: Mapping[str, list[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first node (breadth-first within the component)."""
    start = min(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in edges[node]:
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if child in component and child not in parents:
                    parents[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError("a strongly connected component without a cycle")


def folder(module: str, packages: set[str]) -> str:
    """The pipeline-stage folder a module lives in: the package right under gpuengine (gpuengine.lowering for
    gpuengine.lowering.kernels.conv2d, and anything nested deeper in it); a top-level module of gpuengine/ is its
    own."""
    stage = ".".join(module.split(".")[:2])
    return stage if stage in packages else module


def folder_graph(graph: Mapping[str, Iterable[str]], packages: set[str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        source = folder(module, packages)
        out.setdefault(source, set()).update(folder(t, packages) for t in targets if folder(t, packages) != source)
    return out


def layer(module: str) -> str | None:
    name = "gpuengine.__init__" if module == "gpuengine" else module
    best = None
    for layer_name, prefixes in LAYERS:
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[1])):
                best = (layer_name, prefix)
    return best[0] if best else None


def upward_imports(graph: Mapping[str, Iterable[str]]) -> list[str]:
    return sorted(f"{m} ({layer(m)}) imports {t} ({layer(t)})" for m, targets in graph.items() for t in targets
                  if RANK[layer(t)] > RANK[layer(m)])


def _format(found: list[list[str]]) -> str:
    return "\n".join(" -> ".join(c) for c in found)


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


@pytest.fixture(scope="module")
def packages() -> set[str]:
    return {name for name, (_, is_package) in discover().items() if is_package}


# -- the package ------------------------------------------------------------------------------------------------
def test_every_module_has_a_layer(graph):
    assert len(graph) > 100, "the sources were not found"
    unplaced = sorted(m for m in graph if layer(m) is None)
    assert not unplaced, f"place these modules in LAYERS: {unplaced}"


def test_no_cycle_between_files(graph):
    found = cycles(graph)
    assert not found, f"import cycles between files:\n{_format(found)}"


def test_no_cycle_between_folders(graph, packages):
    found = cycles(folder_graph(graph, packages))
    assert not found, f"import cycles between folders:\n{_format(found)}"


def test_imports_go_down_the_pipeline(graph):
    upward = upward_imports(graph)
    assert not upward, "imports against the layer order (LAYERS):\n" + "\n".join(upward)


def test_import_gpuengine_leaves_the_oracle_out(graph):
    """`import gpuengine` loads neither the LiteRT oracle nor the CLI (what it reaches, lazy imports included)."""
    reached, todo = set(), ["gpuengine"]
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo.extend(graph.get(module, ()))
    assert not {m for m in reached if layer(m) in ("oracle", "tools")}


# -- the checker itself -----------------------------------------------------------------------------------------
def test_cycle_finder_on_a_synthetic_graph():
    acyclic = {"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": {"a"}}
    assert cycles(acyclic) == []
    assert cycles({"a": {"a"}}) == [["a", "a"]]
    two = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert cycles(two) == [["a", "b", "c", "a"], ["d", "e", "d"]]
    # a long way round and a short one through the same node: the short one is named
    assert cycles({"a": {"b", "x"}, "b": {"c"}, "c": {"a"}, "x": {"a"}}) == [["a", "x", "a"]]


def test_import_reader_on_synthetic_sources():
    known = {"pkg", "pkg.a", "pkg.sub", "pkg.sub.b", "pkg.sub.c", "pkg.d"}
    source = '''
from typing import TYPE_CHECKING
from . import a
from .d import something
import pkg.sub.b
if TYPE_CHECKING:
    from .sub import c
def lazy():
    from .sub.c import thing
'''
    assert imports_of(source, "pkg.x", False, known | {"pkg.x"}) == {"pkg.a", "pkg.d", "pkg.sub.b", "pkg.sub.c"}
    assert imports_of("from ..d import y\nfrom .. import a", "pkg.sub.b", False, known) == {"pkg.d", "pkg.a"}
    assert imports_of("from .b import z", "pkg.sub", True, known) == {"pkg.sub.b"}
    typed = "if TYPE_CHECKING:\n    import pkg.a\nelse:\n    import pkg.d"
    assert imports_of(typed, "pkg.x", False, known) == {"pkg.d"}


def test_layers_and_folders_on_synthetic_modules():
    assert layer("gpuengine.lowering.kernels.conv2d") == "lowering" and layer("gpuengine.model.ops") == "model"
    assert layer("gpuengine") == "api" and layer("gpuengine.tools.cli") == "tools"
    assert upward_imports({"gpuengine.model.ir": {"gpuengine.passes.densify"}}) == [
        "gpuengine.model.ir (model) imports gpuengine.passes.densify (passes)"]
    packages = {"gpuengine", "gpuengine.lowering", "gpuengine.model", "gpuengine.runtime", "gpuengine.runtime.gpu"}
    assert folder("gpuengine.lowering.kernels.base", packages) == "gpuengine.lowering"
    assert folder("gpuengine.runtime.gpu.device", packages) == "gpuengine.runtime"
    assert folder("gpuengine.engine", packages) == "gpuengine.engine"
    assert folder("gpuengine.model", packages) == "gpuengine.model"
    graph = {"gpuengine.model.ir": {"gpuengine.lowering.kernels.base"},
             "gpuengine.lowering.kernels.base": {"gpuengine.model.reader"},
             "gpuengine.model.reader": set()}
    assert cycles(graph) == []  # no cycle between files, but one between their folders
    assert cycles(folder_graph(graph, packages)) == [["gpuengine.lowering", "gpuengine.model", "gpuengine.lowering"]]
