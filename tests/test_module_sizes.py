"""Issue 25's size targets: no module of remediate/ over 600 lines, no class over 300. Before it, ten modules
were over (executor.py 1,091, training/client.py 983, judging/engine.py 841, ...) and eight classes (TrainingControl
864, Executor 764, InMemoryStore 546, RunQueue 493, _TrainingAction 443, Engine 386, Store 362, NvmlBackend 329)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "remediate"
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 300


def oversized(root: Path, pattern: str = "*.py") -> list[str]:
    """The modules under `root` (matching `pattern`) over MAX_MODULE_LINES and their classes over MAX_CLASS_LINES."""
    found = []
    for path in sorted(root.rglob(pattern)):
        name, source = path.relative_to(root).as_posix(), path.read_text(encoding="utf-8")
        if (lines := len(source.splitlines())) > MAX_MODULE_LINES:
            found.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef) and (size := (node.end_lineno or 0) - node.lineno + 1) > MAX_CLASS_LINES:
                found.append(f"{name}: class {node.name}: {size} lines")
    return found


def test_remediate_is_made_of_small_modules_and_classes() -> None:
    assert oversized(PACKAGE) == []


def test_the_check_finds_a_module_and_a_class_too_large(tmp_path: Path) -> None:
    (tmp_path / "small.py").write_text("class Small:\n    x = 1\n", encoding="utf-8")
    body = "    x = 1\n" * MAX_CLASS_LINES
    (tmp_path / "big.py").write_text("class Big:\n" + body + "\n" * (MAX_MODULE_LINES - MAX_CLASS_LINES))
    assert oversized(tmp_path) == [
        f"big.py: {MAX_MODULE_LINES + 1} lines",
        f"big.py: class Big: {MAX_CLASS_LINES + 1} lines",
    ]
