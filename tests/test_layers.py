"""The layers stay apart and nothing imports in a circle.

The rules themselves are import-linter contracts in pyproject.toml (`[tool.importlinter]`), which
scripts/test runs as `lint-imports`; these tests run the same contracts so that `pytest` alone checks
them, prove that the contracts do catch a violation, and check the whole import graph (function-level
imports too) for cycles.
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

from tests.support.waiting import scaled

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
        timeout=scaled(60),
        check=False,
    )


CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]


def status_line(output: str, name: str) -> str:
    """The summary line of one contract: its name, then KEPT or BROKEN."""
    summary = output.partition("Broken contracts")[0]
    (line,) = [line for line in summary.splitlines() if line.startswith(name + " ")]
    return line.removeprefix(name).strip()


@pytest.fixture(scope="module")
def report() -> subprocess.CompletedProcess[str]:
    return lint_imports(ROOT)


def test_lint_imports_passes(report: subprocess.CompletedProcess[str]) -> None:
    assert report.returncode == 0, report.stdout + report.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in report.stdout


@pytest.mark.parametrize("contract", CONTRACTS, ids=[c["id"] for c in CONTRACTS])
def test_the_layer_contract_holds(report: subprocess.CompletedProcess[str], contract: dict) -> None:
    assert status_line(report.stdout, contract["name"]).startswith("KEPT"), report.stdout + report.stderr


# (module that gains an import, what it imports, the id of the contract that must break)
VIOLATIONS = [
    ("logs.setup", "remediate.config.settings", "layers"),  # logs lie below config: every stage logs
    ("intake.alerts", "remediate.store", "intake"),
    ("actions.templating", "remediate.executor", "actions"),
    ("actions.log", "remediate.store", "actions"),
    ("actions.notify", "flask", "actions"),
    ("actions.gpu", "remediate.playbooks.model", "actions-no-intake"),
    ("actions.training", "remediate.intake.alerts", "actions-no-intake"),  # the alert comes as StepContext.alert
    ("intake.alertref", "remediate.errors", "alertref"),
    ("training.protocol", "remediate.errors", "training"),
    ("training.handlers", "torch", "training-light"),
    ("training.distributed", "transformers", "training-torch-only"),
    ("burnin.verdict", "torch", "burnin-light"),  # the actions judge a burn-in without loading torch
    ("runs", "remediate.store", "runs"),
    ("store.queue", "remediate.judging.engine", "store"),
    ("store.memory", "flask", "store"),
    ("store.schema", "werkzeug", "schema"),
    ("config.settings", "werkzeug", "flask"),
    ("judging.guards", "remediate.store", "guards"),
    ("judging.engine", "remediate.executor", "engine-executor"),
    ("executor.loop", "gunicorn", "engine-executor-http"),
    ("executor.runners", "remediate.store", "runners"),
    ("agent.service", "remediate.judging.engine", "agent"),
    ("kube.model", "remediate.breaker", "backends"),
    ("slurm.client", "remediate.actions.base", "backends"),  # the Slurm client knows no action
    ("breaker.circuit", "kubernetes", "breaker"),
    ("disk.policy", "os", "disk-policy"),
    ("gpu.pci", "remediate.gpu.selection", "acyclic"),  # selection imports pci
    # The client imports the handlers; they know it only as handle.ControlHandle, never by import.
    ("training.handlers", "remediate.training.client", "acyclic"),
]


@pytest.fixture(scope="module")
def broken_report(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """lint-imports over a copy of the package with every violation above added at once (one graph)."""
    root = tmp_path_factory.mktemp("crossed")
    shutil.copytree(PACKAGE, root / "remediate", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    for module, imported, _ in VIOLATIONS:
        path = (root / "remediate" / module.replace(".", "/")).with_suffix(".py")
        path.write_text(path.read_text(encoding="utf-8") + f"\nimport {imported}  # noqa\n", encoding="utf-8")
    return lint_imports(root)


def test_every_contract_is_shown_to_catch_a_violation() -> None:
    assert {c["id"] for c in CONTRACTS} == {contract for _, _, contract in VIOLATIONS}


@pytest.mark.parametrize(("module", "imported", "contract_id"), VIOLATIONS, ids=[f"{m}->{i}" for m, i, _ in VIOLATIONS])
def test_a_contract_breaks_when_a_layer_is_crossed(
    broken_report: subprocess.CompletedProcess[str], module: str, imported: str, contract_id: str
) -> None:
    (contract,) = [c for c in CONTRACTS if c["id"] == contract_id]
    assert broken_report.returncode == 1, broken_report.stdout + broken_report.stderr
    assert status_line(broken_report.stdout, contract["name"]).startswith("BROKEN"), broken_report.stdout
    section = broken_section(broken_report.stdout, contract["name"])
    if contract["type"] == "acyclic_siblings":  # it names the package and the import it would remove
        shown = f"No cycles are allowed in remediate.{module.rpartition('.')[0]}"
    else:
        shown = f"remediate.{module} -> {imported}"
    assert shown in section, (shown, broken_report.stdout)


def broken_section(output: str, name: str) -> str:
    """What lint-imports says under one broken contract's heading, up to the next contract's heading."""
    details = output.partition("Broken contracts")[2]
    starts = sorted(i for i in (details.find(f"\n{c['name']}\n") for c in CONTRACTS) if i >= 0)
    start = details.index(f"\n{name}\n")
    end = next((i for i in starts if i > start), len(details))
    return details[start:end]


STALE_IGNORE = """
[[tool.importlinter.contracts]]
id = "stale"
name = "A contract whose ignore matches no import"
type = "forbidden"
source_modules = ["remediate.intake.alerts"]
forbidden_modules = ["remediate.store"]
ignore_imports = ["remediate.intake.alerts -> remediate.intake.matchers"]
"""


def test_an_ignore_that_matches_no_import_fails(tmp_path: Path) -> None:
    # Known violations are ignored one by one; once a slice removes the import, its ignore must go too.
    assert all(c.get("unmatched_ignore_imports_alerting", "error") == "error" for c in CONTRACTS)
    shutil.copytree(PACKAGE, tmp_path / "remediate", ignore=shutil.ignore_patterns("__pycache__"))
    config = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text(config + STALE_IGNORE, encoding="utf-8")
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        "No matches for ignored import remediate.intake.alerts -> remediate.intake.matchers"
        in result.stdout + result.stderr
    )


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


def test_the_training_library_imports_in_no_circle_not_even_for_type_hints() -> None:
    # The job's parts (handlers, dispatch, job.json, the rank exchange) are given the client typed by the narrow
    # Protocols of training/handle.py: none of them imports the client, under TYPE_CHECKING or otherwise.
    assert not {pair for pair in allowed_cycle_imports() if pair[0].startswith("remediate.training.")}
    graph = grimp.build_graph("remediate", cache_dir=None)
    for part in ("handlers", "dispatch", "jobfile", "exchange", "handle"):
        imported = graph.find_modules_directly_imported_by(f"remediate.training.{part}")
        assert "remediate.training.client" not in imported, part
        assert "remediate.training.handle" in imported or part == "handle", part


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = grimp.build_graph("remediate", cache_dir=None)
    graph.add_import(importer="remediate.errors", imported="remediate.config.settings")  # config imports errors
    assert any({"remediate.config.settings", "remediate.errors"} <= set(cycle) for cycle in cycles(graph))


def test_no_module_uses_a_shell() -> None:
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "shell=True" not in text, path
        assert "os.system" not in text, path
        assert "os.popen" not in text, path


def test_the_two_sides_of_the_agent_call_meet_only_in_the_protocol() -> None:
    graph = grimp.build_graph("remediate", cache_dir=None, include_external_packages=True)
    server_side = {"remediate.executor.agent_calls", "remediate.kube.agents"}
    agent_side = {"remediate.agent.service", "remediate.agent.server"}
    for side, other in ((server_side, agent_side), (agent_side, server_side)):
        for module in side:
            imported = graph.find_modules_directly_imported_by(module)
            assert not imported & other, f"{module} imports {sorted(imported & other)}"
            assert "remediate.agentwire.protocol" in imported or module == "remediate.agent.service", module
    # The protocol itself is plain data and errors: no HTTP library, neither side.
    protocol = graph.find_modules_directly_imported_by("remediate.agentwire.protocol")
    assert protocol <= {"__future__", "json", "abc", "collections", "dataclasses", "typing", "remediate.errors"}, (
        protocol
    )


def test_one_module_builds_the_gunicorn_application() -> None:
    users = [
        path
        for path in PACKAGE.rglob("*.py")
        if "BaseApplication" in (text := path.read_text("utf-8")) or "gunicorn.arbiter" in text
    ]
    assert len(users) == 1, users  # serve/launcher.py, for `remediate serve` (the agent serves itself: agent/server.py)
