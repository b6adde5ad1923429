"""The layers stay apart and nothing imports in a circle.

The rules themselves are import-linter contracts in pyproject.toml (`[tool.importlinter]`), which
scripts/test runs as `lint-imports`; these tests run the same contracts so that `pytest` alone checks
them, prove that the contracts do catch a violation, and check the module-level import graph for cycles.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "remediate"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """Run the contracts of root/pyproject.toml against root/remediate (no cache: a fresh graph)."""
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "300"}  # one contract name, one line
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_layer_contracts_hold() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    """A copy of the package and its contracts, to break on purpose."""
    shutil.copytree(PACKAGE, tmp_path / "remediate", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


# (module that gains an import, what it imports, the start of the name of the contract that must break)
VIOLATIONS = [
    ("alerts", "remediate.store", "Intake (alerts"),
    ("templating", "remediate.executor", "Intake (alerts"),
    ("actions.log", "remediate.store", "Actions know no store"),
    ("actions.notify", "flask", "Actions know no store"),
    ("actions.gpu", "remediate.playbooks", "Actions import nothing from intake"),
    ("training.protocol", "remediate.errors", "The training library"),
    ("training.handlers", "torch", "`import remediate.training` stays light"),
    ("store", "remediate.engine", "The store knows no HTTP"),
    ("schema", "werkzeug", "The table definitions"),
    ("config", "werkzeug", "Only the HTTP modules import Flask"),
    ("disk.policy", "os", "The disk policy is pure"),
    ("errors", "remediate.config", "No import cycle"),  # config imports errors
]


def test_the_contracts_break_when_a_layer_is_crossed(tree_copy: Path) -> None:
    # All violations in one copy and one run (each run builds the whole graph); each must be named.
    for module, imported, _ in VIOLATIONS:
        path = (tree_copy / "remediate" / module.replace(".", "/")).with_suffix(".py")
        path.write_text(path.read_text(encoding="utf-8") + f"\nimport {imported}  # noqa\n", encoding="utf-8")
    result = lint_imports(tree_copy)
    assert result.returncode == 1, result.stdout + result.stderr
    summary, _, details = result.stdout.partition("Broken contracts")
    broken = [line for line in summary.splitlines() if " BROKEN" in line]
    for module, imported, contract in VIOLATIONS:
        assert any(line.startswith(contract) for line in broken), (module, result.stdout)
        # the acyclic contract names the import relative to the package of the cycle
        shown = (
            f".{module} -> .{imported.removeprefix('remediate.')}"
            if contract.startswith("No import cycle")
            else f"remediate.{module} -> {imported}"
        )
        assert shown in details, (shown, result.stdout)


def allowed_cycle_imports() -> set[tuple[str, str]]:
    """The acyclic contract's ignore_imports: the one reviewed list of imports that close a cycle today."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (acyclic,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "acyclic_siblings"]
    pairs = set()
    for expression in acyclic.get("ignore_imports", []):
        importer, imported = (part.strip() for part in expression.split("->"))
        pairs.add((importer, imported))
    return pairs


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return sorted(found)


def test_no_import_cycle() -> None:
    # Every import counts: at module level, inside functions (a lazy import hides a cycle, it does not
    # remove it) and under TYPE_CHECKING (those are allowed one by one in pyproject.toml).
    graph = grimp.build_graph("remediate", cache_dir=None)
    allowed = allowed_cycle_imports()
    stale = sorted(pair for pair in allowed if not graph.direct_import_exists(importer=pair[0], imported=pair[1]))
    assert stale == [], f"these imports are gone: delete them from the acyclic contract's ignore_imports: {stale}"
    for importer, imported in allowed:
        graph.remove_import(importer=importer, imported=imported)
    assert cycles(graph) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = grimp.build_graph("remediate", cache_dir=None)
    graph.add_import(importer="remediate.errors", imported="remediate.config")  # config imports errors
    assert ["remediate.config", "remediate.errors"] in cycles(graph)


def test_no_module_uses_a_shell() -> None:
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "shell=True" not in text, path
        assert "os.system" not in text, path
        assert "os.popen" not in text, path
