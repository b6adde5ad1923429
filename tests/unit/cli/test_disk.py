"""`remediate disk policies` and `remediate disk plan`: check the node's policies, see a cleanup's plan."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from remediate.cli import main
from tests.support.disk import make_file


def _policies(tmp_path: Path, root: Path) -> Path:
    path = tmp_path / "policies.yaml"
    path.write_text(
        yaml.safe_dump(
            {"policies": [{"name": "scratch", "mountpoint": "/x", "roots": [str(root)], "patterns": ["*.tmp"]}]}
        )
    )
    return path


def test_disk_policies_lists_a_valid_file_and_names_the_field_of_a_broken_one(tmp_path: Path, root: Path) -> None:
    path = _policies(tmp_path, root)
    result = CliRunner().invoke(main, ["disk", "policies", "--policies-file", str(path), "--json"], env={})
    assert result.exit_code == 0, result.output
    assert [p["name"] for p in json.loads(result.output)] == ["scratch"]
    path.write_text("policies: [{name: a, mountpoint: /x, roots: [/], patterns: ['*']}]")
    result = CliRunner().invoke(main, ["disk", "policies"], env={"REMEDIATE_CLEANUP_POLICIES_FILE": str(path)})
    assert result.exit_code == 2
    assert f"cleanup policies file {path}, policy 'a', field roots[0]" in result.output


def test_disk_plan_shows_the_files_in_order_and_deletes_nothing(tmp_path: Path, root: Path) -> None:
    old = make_file(root / "old.tmp", age_days=10)
    older = make_file(root / "older.tmp", age_days=20)
    path = _policies(tmp_path, root)
    args = ["disk", "plan", "--policies-file", str(path), "--mountpoint", "/x", "--free-percent", "100"]
    result = CliRunner().invoke(main, args, env={})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("delete") and lines[0].endswith(str(older))
    assert lines[1].endswith(str(old))
    assert "would delete 2 files" in lines[-1]
    assert old.exists() and older.exists()
    result = CliRunner().invoke(main, [*args[:-4], "--mountpoint", "/y", "--free-percent", "100"], env={})
    assert result.exit_code == 2
    assert "no cleanup policy serves mountpoint '/y'" in result.output
