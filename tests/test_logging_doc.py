"""docs/logging.md lists every audit event the code emits, with its fields, and nothing more.

The events are found in the source (every `audit_event("name", ...)` call, by its AST), not in a list kept
beside them: an event added without its row, or a row left for an event gone, fails here."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def emitted(package: Path) -> dict[str, set[str]]:
    """Every audit event named in `package`'s source, with the fields its calls pass (`level` is not one)."""
    events: dict[str, set[str]] = defaultdict(set)
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "audit_event"):
                continue
            first = node.args[0] if node.args else None
            assert isinstance(first, ast.Constant) and isinstance(first.value, str), (
                f"{path}:{node.lineno}: an audit event's name is a literal string (docs/logging.md lists it)"
            )
            assert all(k.arg is not None for k in node.keywords), f"{path}:{node.lineno}: fields are named, no **"
            events[first.value] |= {k.arg for k in node.keywords if k.arg != "level"}  # type: ignore[misc]
    return dict(events)


def documented(page: str) -> dict[str, set[str]]:
    """The rows of the page's audit event table: `event` -> its `fields`."""
    section = page.split("## Audit events", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and (name := re.fullmatch(r"`([a-z_]+)`", cells[0])):
            rows[name.group(1)] = set(re.findall(r"`([a-z_]+)`", cells[3]))
    return rows


def test_the_audit_event_table_lists_exactly_the_events_and_fields_the_code_emits() -> None:
    code = emitted(ROOT / "remediate")
    doc = documented((ROOT / "docs/logging.md").read_text(encoding="utf-8"))

    assert sorted(set(code) - set(doc)) == [], "events emitted but not in docs/logging.md's table"
    assert sorted(set(doc) - set(code)) == [], "events in docs/logging.md's table that the code never emits"
    assert {name: sorted(fields) for name, fields in code.items()} == {
        name: sorted(fields) for name, fields in doc.items()
    }


def test_the_check_finds_an_event_missing_from_the_table(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text('audit_event("made_up", level=30, who="x")\naudit_event("made_up", why=1)\n')
    assert emitted(tmp_path) == {"made_up": {"who", "why"}}
    page = "## Audit events\n| event | level | where | fields |\n|---|---|---|---|\n"
    page += "| `made_up` | INFO | here | `who` |\n"
    assert documented(page + "## Next\n| `other` | a | b | `c` |\n") == {"made_up": {"who"}}
