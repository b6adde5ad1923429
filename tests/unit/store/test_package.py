"""Nothing in the store exists for the tests alone: every module of remediate.store is used by
remediate's own code, and a Protocol of the store is there because two classes in use provide it.

The tests run on real databases (a SQLite file, PostgreSQL: tests.support.stores), not on a fake copy of
the store that would need a Protocol and a contract test to keep it honest.
"""

from __future__ import annotations

import ast
import importlib
import inspect

import remediate.store
from tests.support.imports import MODULES, imported_names

STORE = "remediate.store"


def _store_module(name: str) -> str | None:
    """The module of remediate.store that an imported name is or is defined in (through the package's
    re-exports: `remediate.store.Store` is remediate.store.facade); None outside the store."""
    if not name.startswith(f"{STORE}."):
        return None
    first = name.removeprefix(f"{STORE}.").split(".")[0]
    if f"{STORE}.{first}" in MODULES:
        return f"{STORE}.{first}"
    module = getattr(getattr(remediate.store, first, None), "__module__", None)
    return module if module in MODULES and module.startswith(f"{STORE}.") else None


def store_modules_in_use() -> set[str]:
    """The store's modules that remediate outside the store imports, directly or through other store modules.
    The package's __init__ is left out: its re-exports alone make nothing used."""
    imports = {
        name: {m for n in imported_names(ast.parse(path.read_text(encoding="utf-8"))) if (m := _store_module(n))}
        for name, path in MODULES.items()
        if name != STORE
    }
    used: set[str] = set()
    todo = [m for name, found in imports.items() if not name.startswith(f"{STORE}.") for m in found]
    while todo:
        module = todo.pop()
        if module not in used:
            used.add(module)
            todo.extend(imports.get(module, ()))
    return used


def test_every_module_of_the_store_is_used_by_remediate_itself() -> None:
    modules = {name for name in MODULES if name.startswith(f"{STORE}.")}

    assert modules - store_modules_in_use() == set()


def test_a_protocol_of_the_store_has_two_implementations_in_use() -> None:
    classes = [
        c
        for module in store_modules_in_use()
        for c in vars(importlib.import_module(module)).values()
        if inspect.isclass(c) and c.__module__ == module
    ]
    protocols = [c for c in classes if getattr(c, "_is_protocol", False)]
    assert protocols, "the guards' facts (GuardReads) have two readers: the database's and a dry run's"
    for protocol in protocols:
        methods = [name for name in vars(protocol) if not name.startswith("_") and callable(getattr(protocol, name))]
        providers = [
            c.__name__
            for c in classes
            if not getattr(c, "_is_protocol", False) and all(callable(getattr(c, m, None)) for m in methods)
        ]
        assert len(providers) >= 2, (protocol.__name__, providers)
