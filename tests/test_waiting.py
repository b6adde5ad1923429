"""The tests' one time scale (tests/support/waiting.py): a slow machine makes the tests slower, not red."""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import waiting
from tests.support.waiting import SCALE_VARIABLE, TimeScaleError, read_scale

ROOT = Path(__file__).resolve().parents[1]


def test_the_scale_is_one_unless_the_environment_sets_a_positive_number() -> None:
    assert read_scale({}) == 1.0
    assert read_scale({SCALE_VARIABLE: " "}) == 1.0
    assert read_scale({SCALE_VARIABLE: "2.5"}) == 2.5
    for bad in ("slow", "0", "-1", "inf", "nan"):
        with pytest.raises(TimeScaleError, match=SCALE_VARIABLE):
            read_scale({SCALE_VARIABLE: bad})


def test_the_scale_is_read_once_from_the_environment_of_the_test_process() -> None:
    code = "from tests.support.waiting import SCALE, scaled; print(SCALE, scaled(20))"
    env = {"PYTHONPATH": str(ROOT), SCALE_VARIABLE: "3"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["3.0", "60.0"], done.stderr


def test_wait_until_scales_its_bound_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waiting, "SCALE", 4.0)
    started = time.monotonic()
    said = rf"nothing \(timed out after 0.2 s at {SCALE_VARIABLE}=4; last value: 0\)"
    with pytest.raises(AssertionError, match=said):
        waiting.wait_until(lambda: 0, 0.05, interval=0.01, message="nothing")
    assert time.monotonic() - started >= 0.2  # waited the scaled bound, not the written one
    assert waiting.wait_until(lambda: "ready", 0.05) == "ready"


def test_no_test_module_keeps_a_polling_helper_of_its_own() -> None:
    """A second `wait_until` would not follow the scale; tests/support/waiting.py holds the one."""
    own = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path == ROOT / "tests" / "support" / "waiting.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        own += [
            f"{path.relative_to(ROOT)}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and node.name == "wait_until"
        ]
    assert own == [], f"use tests.support.waiting.wait_until instead of: {own}"
