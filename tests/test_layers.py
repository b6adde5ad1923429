"""The layers stay apart: the store knows no Flask, actions know no store or engine, only server.py knows HTTP."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "remediate"

FRAMEWORKS = ("torch", "lightning", "pytorch_lightning", "transformers", "accelerate")

# module (relative to remediate/) -> imports it must never make (prefix match)
FORBIDDEN = {
    "store.py": [
        "flask",
        "werkzeug",
        "remediate.engine",
        "remediate.playbooks",
        "remediate.actions",
        "remediate.server",
    ],
    "schema.py": ["flask", "remediate."],
    "alerts.py": ["flask", "sqlalchemy", "remediate.store", "remediate.engine"],
    "matchers.py": ["flask", "sqlalchemy", "remediate.store"],
    "playbooks.py": ["flask", "sqlalchemy", "remediate.store", "remediate.engine", "remediate.executor"],
    "guards.py": ["flask", "sqlalchemy", "remediate.store", "remediate.engine"],
    "engine.py": ["flask", "werkzeug", "remediate.server", "remediate.executor"],
    "executor.py": ["flask", "werkzeug", "remediate.server", "remediate.engine"],
    "disk/": [
        "flask",
        "werkzeug",
        "sqlalchemy",
        "remediate.store",
        "remediate.engine",
        "remediate.executor",
        "remediate.server",
        "remediate.actions",
        "remediate.playbooks",
    ],
    "kube/": [
        "flask",
        "werkzeug",
        "sqlalchemy",
        "remediate.store",
        "remediate.engine",
        "remediate.executor",
        "remediate.server",
        "remediate.actions",
        "remediate.playbooks",
        "remediate.breaker",
    ],
    "breaker.py": [
        "flask",
        "werkzeug",
        "sqlalchemy",
        "kubernetes",
        "remediate.store",
        "remediate.engine",
        "remediate.executor",
        "remediate.server",
        "remediate.actions",
        "remediate.kube",
    ],
    "disk/policy.py": ["os", "remediate.disk.fs", "remediate.disk.cleanup"],
    "disk/selection.py": ["os", "remediate.disk.fs", "remediate.disk.cleanup"],
    "disk/patterns.py": ["os", "remediate.disk.fs", "remediate.disk.cleanup"],
    "runners.py": [
        "flask",
        "werkzeug",
        "remediate.server",
        "remediate.engine",
        "remediate.store",
        "remediate.executor",
    ],
    "agent.py": ["flask", "werkzeug", "remediate.server", "remediate.engine", "remediate.runners"],
    "actions/": [
        "flask",
        "werkzeug",
        "sqlalchemy",
        "remediate.store",
        "remediate.engine",
        "remediate.executor",
        "remediate.server",
        "remediate.schema",
    ],
    # The library training jobs import: nothing of remediate's server side (see also the test below).
    "training/": [
        "flask",
        "werkzeug",
        "sqlalchemy",
        "kubernetes",
        "gunicorn",
        "tenacity",
        "jinja2",
        "remediate.actions",
    ],
    # ... and torch only where it is needed: `import remediate.training` must stay light.
    "training/__init__.py": [*FRAMEWORKS],
    "training/protocol.py": [*FRAMEWORKS],
    "training/client.py": [*FRAMEWORKS],
    "training/handlers.py": [*FRAMEWORKS],
    "training/checkpoints.py": ["lightning", "pytorch_lightning", "transformers"],  # torch inside save/load only
    "training/distributed.py": ["lightning", "pytorch_lightning", "transformers"],
    "actions/training.py": [*FRAMEWORKS],
}
HTTP_FRAMEWORKS = ("flask", "werkzeug")
HTTP_MODULES = {"server.py", "agent_server.py"}


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _within(name: str, prefix: str) -> bool:
    """`remediate.` covers every submodule; `flask` covers flask and flask.*."""
    if prefix.endswith("."):
        return name.startswith(prefix)
    return name == prefix or name.startswith(prefix + ".")


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("rule", sorted(FORBIDDEN))
def test_modules_do_not_import_across_their_layer(rule: str) -> None:
    targets = [p for p in modules() if p.relative_to(PACKAGE).as_posix().startswith(rule)]
    assert targets, f"no module matches {rule}"
    for path in targets:
        bad = {name for name in imports_of(path) for prefix in FORBIDDEN[rule] if _within(name, prefix)}
        assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}"


def test_only_the_server_module_imports_flask() -> None:
    offenders = [
        path.relative_to(PACKAGE).as_posix()
        for path in modules()
        if path.relative_to(PACKAGE).as_posix() not in HTTP_MODULES
        and any(name.split(".")[0] in HTTP_FRAMEWORKS for name in imports_of(path))
    ]
    assert offenders == []


def test_the_training_library_imports_nothing_else_of_remediate() -> None:
    for path in sorted((PACKAGE / "training").rglob("*.py")):
        others = {n for n in imports_of(path) if _within(n, "remediate") and not _within(n, "remediate.training")}
        assert not others, f"{path.relative_to(PACKAGE)} imports {sorted(others)}"


def test_no_module_uses_a_shell() -> None:
    for path in modules():
        text = path.read_text(encoding="utf-8")
        assert "shell=True" not in text, path
        assert "os.system" not in text, path
        assert "os.popen" not in text, path
