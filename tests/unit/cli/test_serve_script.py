"""scripts/serve starts in shadow mode, as the chart does, unless the user chose a mode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def mode_args(*args: str, env: dict[str, str] | None = None) -> str:
    """What scripts/serve adds to `remediate serve`'s arguments for the mode (scripts/lib.sh decides it)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
    done = subprocess.run(
        ["bash", "-c", '. scripts/lib.sh && serve_mode_args "$@"', "serve", sys.executable, *args],
        cwd=ROOT,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_without_a_chosen_mode_the_script_starts_in_dry_run() -> None:
    assert mode_args() == "--mode dry-run"
    assert mode_args("--bind", "127.0.0.1:9999") == "--mode dry-run"


@pytest.mark.parametrize("args", [("--mode", "enforce"), ("--mode=enforce",), ("--bind", "x", "--mode", "dry-run")])
def test_a_mode_flag_wins(args: tuple[str, ...]) -> None:
    assert mode_args(*args) == ""


def test_the_environment_wins() -> None:
    assert mode_args(env={"REMEDIATE_MODE": "enforce"}) == ""


def test_a_config_file_that_sets_the_mode_wins_and_one_that_does_not_keeps_dry_run(tmp_path: Path) -> None:
    with_mode = tmp_path / "with.yaml"
    with_mode.write_text("mode: enforce\nbind: 127.0.0.1:9999\n")
    without = tmp_path / "without.yaml"
    without.write_text("bind: 127.0.0.1:9999\n")
    assert mode_args("--config", str(with_mode)) == ""
    assert mode_args(f"--config={with_mode}") == ""
    assert mode_args(env={"REMEDIATE_CONFIG": str(with_mode)}) == ""
    assert mode_args("--config", str(without)) == "--mode dry-run"
