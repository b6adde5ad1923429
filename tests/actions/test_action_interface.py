"""The Action interface has no dead member: everything it declares is read somewhere else in remediate."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from remediate.actions import default_registry
from remediate.actions.base import Action

PACKAGE = Path(__file__).resolve().parents[2] / "remediate"
BASE = PACKAGE / "actions" / "base.py"


def _interface_members() -> list[str]:
    """The public names the Action class declares (methods, properties, class attributes)."""
    tree = ast.parse(BASE.read_text())
    (action,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Action"]
    names = []
    for node in action.body:
        if isinstance(node, ast.FunctionDef):
            names.append(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [n for n in names if not n.startswith("_")]


@functools.cache
def _attributes_read_outside_base() -> frozenset[str]:
    read: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        if path == BASE:
            continue
        read |= {n.attr for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Attribute)}
    return frozenset(read)


@pytest.mark.parametrize("member", _interface_members())
def test_every_member_of_the_interface_is_used(member: str) -> None:
    # An interface member nothing calls (like the removed `undo`) promises behaviour nobody tests.
    assert member in _attributes_read_outside_base(), f"Action.{member} is never used outside actions/base.py"


def test_no_action_has_an_undo_method() -> None:
    # Undo is a separate action run by on_resolved steps (docs/architecture.md, "Decisions worth knowing").
    assert not hasattr(Action, "undo")
    registry = default_registry()
    assert [name for name in registry.names() if hasattr(registry.get(name), "undo")] == []
