"""The import graph of cemodel (every import, TYPE_CHECKING ones and those inside functions
included): no cycle, and each layer imports only what it may. The compiler's stages never
import the consumers (check, api, cli, distributed); the runtime (what generated modules and
the drivers run on) imports nothing of the compiler."""

import ast
from functools import cache
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "cemodel"
COMPILER = ("model", "resolve", "resolve_vars", "conjugacy", "terms", "expansion", "plan",
            "codegen", "families", "syntax", "augment", "blocks", "collapse", "compiler",
            "graph", "graph_layout", "topics", "check", "api", "cli", "distributed")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def import_graph() -> nx.DiGraph:
    """cemodel module -> the cemodel modules it imports."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            for target in _targets(node, package):
                # `from .pkg import mod` imports the module mod where there is one
                found = target if target in modules else target.rsplit(".", 1)[0]
                if found in modules and found != name:
                    graph.add_edge(name, found)
    return graph


def _targets(node: ast.AST, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.startswith("cemodel")]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = package.split(".")
        base = base[:len(base) - node.level + 1]
        module = ".".join(base + ([node.module] if node.module else []))
    elif node.module and node.module.startswith("cemodel"):
        module = node.module
    else:
        return []
    return [f"{module}.{a.name}" for a in node.names]


def test_the_graph_sees_the_imports():
    graph = import_graph()
    assert graph.has_edge("cemodel.api", "cemodel.runtime.drivers")
    assert graph.has_edge("cemodel.codegen.module", "cemodel.codegen.lowering")
    assert graph.has_edge("cemodel.runtime.drivers.svi", "cemodel.runtime.driver")


def test_no_import_cycle():
    cycles = list(nx.simple_cycles(import_graph()))
    assert not cycles, cycles[:5]


def _imports_of(prefix: str) -> set[tuple[str, str]]:
    graph = import_graph()
    return {(a, b) for a, b in graph.edges if a == prefix or a.startswith(prefix + ".")}


@pytest.mark.parametrize("forbidden", ["check", "api", "cli", "distributed"])
def test_codegen_never_imports_a_consumer(forbidden):
    bad = [(a, b) for a, b in _imports_of("cemodel.codegen")
           if b == f"cemodel.{forbidden}" or b.startswith(f"cemodel.{forbidden}.")]
    assert not bad


def test_the_runtime_imports_nothing_of_the_compiler():
    bad = [(a, b) for a, b in _imports_of("cemodel.runtime")
           if b.split(".")[1] in COMPILER]
    assert not bad


def test_every_package_is_in_the_wheel():
    """pyproject's package list names every folder of cemodel with an __init__.py (an editable
    install hides a missing one; a wheel would lack it)."""
    import tomllib

    listed = set(tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["packages"])
    found = {_module_name(p) for p in PACKAGE.rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)


@pytest.mark.parametrize("path", sorted((PACKAGE / "runtime" / "drivers").glob("*.py")),
                         ids=lambda p: p.name)
def test_the_drivers_are_small_units(path):
    """No driver file over 600 lines, no class over 300, no function over 100."""
    text = path.read_text()
    assert len(text.splitlines()) <= 600
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            limit = 300 if isinstance(node, ast.ClassDef) else 100
            assert node.end_lineno - node.lineno < limit, node.name


def test_consumers_use_the_interface_not_names():
    """Dask and the API reach a module only through the drivers' interface: no rebinding of
    module functions, no roles guessed from name prefixes, no kernel signatures read."""
    distributed = (PACKAGE / "distributed.py").read_text()
    api = (PACKAGE / "api.py").read_text()
    assert "FunctionType" not in distributed and "_VARIABLE_PREFIXES" not in distributed
    assert "inspect" not in api and "inspect" not in distributed
    for consumer in ("cli", "api", "distributed"):
        assert import_graph().has_edge(f"cemodel.{consumer}", "cemodel.runtime.drivers")


def test_the_option_rules_are_one_leaf_the_command_line_and_the_drivers_read():
    """cemodel.options (every user-facing value's rule) imports nothing but the errors, so the
    command line reads it without loading the runtime (numba) and the runtime without the
    compiler."""
    graph = import_graph()
    assert set(graph.successors("cemodel.options")) <= {"cemodel.errors"}
    assert graph.has_edge("cemodel.cli", "cemodel.cli_parser")  # the parser checks by the rules
    assert graph.has_edge("cemodel.cli_parser", "cemodel.options")
    for driver in ("mf", "svi", "klc"):
        assert graph.has_edge(f"cemodel.runtime.drivers.{driver}", "cemodel.options")
