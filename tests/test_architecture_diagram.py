"""The architecture page's diagram is the picture of its checked-in source (scripts/sync-generated renders it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "docs/img/flow.dot"
PICTURE = ROOT / "docs/img/flow.svg"


def _render(source: str) -> bytes:
    dot = shutil.which("dot")
    assert dot, "graphviz's dot is missing (scripts/test installs Debian's graphviz)"
    return subprocess.run([dot, "-Tsvg"], input=source.encode(), capture_output=True, check=True).stdout


def test_the_diagram_is_what_its_source_renders_to() -> None:
    source = SOURCE.read_text(encoding="utf-8")
    assert PICTURE.read_bytes() == _render(source), "run scripts/sync-generated"
    # The comparison can fail: a changed source renders to other bytes.
    assert _render(source.replace('label="wake datagram"', 'label="wake-up"')) != PICTURE.read_bytes()


def test_the_architecture_page_shows_the_diagram_and_names_its_source() -> None:
    page = (ROOT / "docs/architecture.md").read_text(encoding="utf-8")
    overview = page.split("\n## ", 2)[1]
    assert "](img/flow.svg)" in overview and "img/flow.dot" in overview
    # Every class or function a box names (`Executor.run_once`, `AgentService.run`, ...) is in the page's walk.
    walk = page.split("## The walk of one alert", 1)[1]
    labels = SOURCE.read_text(encoding="utf-8").replace("\\n", " ")  # dot's line breaks
    boxes = set(re.findall(r"\b([A-Z]\w+\.\w+)\b", labels))
    assert len(boxes) >= 6, sorted(boxes)
    assert sorted(b for b in boxes if b not in walk) == []
