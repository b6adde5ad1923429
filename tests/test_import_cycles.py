"""No import cycle anywhere in remediate (issue 10), and the agent's two sides meet only in agent_protocol.

Imports inside functions count (a lazy import is still a cycle: it only moves the failure to run time);
imports under `if TYPE_CHECKING:` do not (they never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "remediate"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_names(tree: ast.AST) -> list[str]:
    names: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from remediate.kube import agents` imports the module remediate.kube.agents.
            names.extend([node.module, *(f"{node.module}.{alias.name}" for alias in node.names)])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def _module_of(name: str) -> str | None:
    """The remediate module `name` is (or is defined in); None outside the package."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        targets = {_module_of(n) for n in imported_names(ast.parse(path.read_text(encoding="utf-8")))}
        # Importing a submodule runs its package's __init__ first; that is Python's order, not a cycle.
        graph[name] = {t for t in targets if t is not None and t != name and not name.startswith(f"{t}.")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_no_module_of_remediate_takes_part_in_an_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle_through_a_lazy_import() -> None:
    # The check itself must be able to fail: a module graph with a function-level back edge.
    lazy = ast.parse("import remediate.b\ndef f():\n    from remediate.a import x\n")
    typing_only = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from remediate.c import y\n")
    assert "remediate.a.x" in imported_names(lazy)
    assert imported_names(typing_only) == ["typing", "typing.TYPE_CHECKING"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_two_sides_of_the_agent_call_meet_only_in_the_protocol() -> None:
    graph = import_graph()
    server_side = {"remediate.runners", "remediate.kube.agents"}
    agent_side = {"remediate.agent", "remediate.agent_server"}
    for module in server_side:
        assert not graph[module] & agent_side, f"{module} imports {sorted(graph[module] & agent_side)}"
        assert "remediate.agent_protocol" in graph[module]
    for module in agent_side:
        assert not graph[module] & server_side, f"{module} imports {sorted(graph[module] & server_side)}"
    assert "remediate.agent_protocol" in graph["remediate.agent_server"]
    # The protocol itself is plain data and errors: no HTTP library, neither side.
    protocol = MODULES["remediate.agent_protocol"].read_text(encoding="utf-8")
    imported = set(imported_names(ast.parse(protocol)))
    assert {n.split(".")[0] for n in imported} <= {"__future__", "json", "abc", "dataclasses", "typing", "remediate"}
    assert graph["remediate.agent_protocol"] == {"remediate.errors"}


def test_one_module_builds_the_gunicorn_application() -> None:
    users = [
        name
        for name, path in MODULES.items()
        if "BaseApplication" in path.read_text(encoding="utf-8") or "gunicorn.arbiter" in path.read_text("utf-8")
    ]
    assert len(users) == 1, users  # serving.py, for `remediate serve` (the agent serves itself: agent_server.py)
