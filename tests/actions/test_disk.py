"""`disk.cleanup` as playbooks use it: params, policy lookup by name or exact mountpoint, runs through the executor."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from remediate.actions import default_registry
from remediate.actions.base import ActionRegistry, StepContext
from remediate.actions.disk import DiskCleanupAction
from remediate.cli import main
from remediate.config.settings import Settings
from remediate.disk import PolicySource
from remediate.errors import ActionError, ParamsError, PlaybookError
from remediate.executor.loop import Executor
from remediate.intake.alertref import AlertRef
from remediate.judging.engine import Engine
from remediate.playbooks.loading import parse_playbook
from remediate.store import Store
from tests.conftest import alert_payload, ingest_alerts
from tests.support.disk import FakeDisk, allocated, make_file
from tests.support.store_json import run_json_of

T0 = 1_767_225_600.0
CTX = StepContext(run_id=1, step_index=0, playbook="pb", target="node-a", alert=AlertRef())


@pytest.fixture
def policies_file(tmp_path: Path, root: Path) -> Path:
    path = tmp_path / "policies.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "policies": [
                    {
                        "name": "scratch",
                        "mountpoint": "/test",
                        "roots": [str(root)],
                        "patterns": ["*.tmp"],
                        "min_age": "1d",
                        "max_files": 3,
                    }
                ]
            }
        )
    )
    return path


@pytest.fixture
def registry(policies_file: Path) -> ActionRegistry:
    """Overrides the suite's registry: the shipped actions, with this test's policies file."""
    return default_registry(Settings.of(cleanup_policies_file=policies_file))


@pytest.fixture
def action(registry: ActionRegistry) -> DiskCleanupAction:
    found = registry.get("disk.cleanup")
    assert isinstance(found, DiskCleanupAction)
    return found


def disk_playbook(**params: Any) -> dict[str, Any]:
    return {
        "name": "disk-full",
        "match": {"alertname": "NodeFilesystemAlmostOutOfSpace"},
        "target": "node",
        "cooldown": "0s",
        "steps": [{"name": "cleanup", "action": "disk.cleanup", "with": params, "retries": 0}],
    }


def disk_alert(mountpoint: str = "/test") -> dict[str, Any]:
    labels = {"instance": "node-a:9100", "mountpoint": mountpoint, "device": "/dev/vdb", "fstype": "ext4"}
    return alert_payload("NodeFilesystemAlmostOutOfSpace", labels=labels)


# ------------------------------------------------------------------ params


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"free_percent": 10}, "exactly one of policy, mountpoint"),
        ({"policy": "a", "mountpoint": "/", "free_percent": 10}, "exactly one of policy, mountpoint"),
        ({"policy": "a"}, "exactly one of free_percent, free_bytes"),
        ({"policy": "a", "free_percent": 10, "free_bytes": "1GiB"}, "exactly one of free_percent, free_bytes"),
        ({"policy": "a", "free_percent": 0}, "more than 0"),
        ({"policy": "a", "free_percent": 101}, "at most 100"),
        ({"policy": "a", "free_bytes": "lots"}, "not a size"),
        ({"mountpoint": "data", "free_percent": 10}, "absolute mountpoint"),
        ({"mountpoint": "/data", "free_percent": 10, "max_files": 0}, "at least 1"),
        ({"policy": "../etc", "free_percent": 10}, "policy name"),
    ],
)
def test_bad_params_are_refused_before_anything_runs(
    action: DiskCleanupAction, params: dict[str, Any], message: str
) -> None:
    with pytest.raises(ParamsError, match=message):
        action.validate(params)


def test_sizes_in_params_become_bytes(action: DiskCleanupAction) -> None:
    params = action.validate({"mountpoint": "/data", "free_bytes": "2GiB", "max_bytes": "100MB"})
    assert params["free_bytes"] == 2 * 2**30
    assert params["max_bytes"] == 100_000_000
    assert params["missing_policy"] == "fail"
    assert action.validate(params) == params  # the executor validates the stored params again


def test_the_policy_name_can_never_come_from_the_alert(registry: ActionRegistry) -> None:
    with pytest.raises(PlaybookError, match="must be written in the playbook, not templated from the alert"):
        parse_playbook(disk_playbook(policy="{{ labels.policy }}", free_percent=15), registry, source="x.yaml")
    parse_playbook(disk_playbook(mountpoint="{{ labels.mountpoint }}", free_percent=15), registry, source="x.yaml")


def test_the_action_runs_on_the_node_and_may_run_again_after_a_crash(action: DiskCleanupAction) -> None:
    assert action.where.value == "node"
    assert action.idempotent is True


# ------------------------------------------------------------------ policy lookup


def test_a_mountpoint_picks_its_policy_by_exact_match(root: Path, action: DiskCleanupAction) -> None:
    make_file(root / "old.tmp", age_days=10)
    plan = action.plan(action.validate({"mountpoint": "/test", "free_bytes": 2**62}), CTX)
    assert plan["policy"] == "scratch"
    assert [Path(e["path"]).name for e in plan["would_delete"]] == ["old.tmp"]
    for near_miss in ("/test/", "/tes", "/test/sub", "/"):
        with pytest.raises(ActionError, match=f"no cleanup policy serves mountpoint '{near_miss}'"):
            action.plan(action.validate({"mountpoint": near_miss, "free_bytes": 2**62}), CTX)
    assert (root / "old.tmp").exists()


def test_a_mountpoint_without_a_policy_can_be_skipped_and_is_recorded(action: DiskCleanupAction) -> None:
    params = action.validate({"mountpoint": "/boot", "free_percent": 15, "missing_policy": "skip"})
    plan = action.plan(params, CTX)
    result = action.execute(params, CTX)
    assert plan["skipped"] is True and result["skipped"] is True
    assert "no cleanup policy serves mountpoint '/boot' (policies serve: /test)" in result["reason"]


def test_an_unknown_policy_name_fails_with_the_known_ones(action: DiskCleanupAction, policies_file: Path) -> None:
    params = action.validate({"policy": "nope", "free_percent": 15, "missing_policy": "skip"})
    with pytest.raises(ActionError, match=f"no cleanup policy named 'nope' in {policies_file} \\(known: scratch\\)"):
        action.plan(params, CTX)


def test_without_a_policies_file_a_cleanup_fails_clearly() -> None:
    action = default_registry(Settings()).get("disk.cleanup")
    with pytest.raises(ActionError, match="no cleanup policies are configured on this node"):
        action.execute(action.validate({"policy": "scratch", "free_percent": 15}), CTX)
    skipped = action.execute(action.validate({"mountpoint": "/", "free_percent": 15, "missing_policy": "skip"}), CTX)
    assert skipped["skipped"] is True


def test_a_broken_policies_file_fails_the_step_with_the_loaders_message(
    policies_file: Path, action: DiskCleanupAction
) -> None:
    policies_file.write_text("policies:\n  - name: x\n    mountpoint: /x\n    roots: [/]\n    patterns: ['*']\n")
    with pytest.raises(ActionError, match="policy 'x', field roots\\[0\\]: the filesystem root '/' cannot be"):
        action.plan(action.validate({"policy": "x", "free_percent": 15}), CTX)


def test_the_action_stops_at_a_reachable_free_bytes_target(root: Path, policies_file: Path) -> None:
    files = [make_file(root / f"f{i}.tmp", 8192, age_days=10 - i) for i in range(3)]
    disk = FakeDisk(root, capacity=1024 * 1024)
    action = DiskCleanupAction(PolicySource(policies_file), free_space=disk)
    target = disk.free + allocated(files[0])
    result = action.execute(action.validate({"policy": "scratch", "free_bytes": target}), CTX)
    assert [Path(d["path"]).name for d in result["deleted"]] == ["f0.tmp"]
    assert result["stopped_by"] == "target_met"
    assert result["free_before_bytes"] < target <= result["free_after_bytes"]


# ------------------------------------------------------------------ through the engine and the executor


def _run(
    make_engine: Callable[..., Engine],
    store: Store,
    registry: ActionRegistry,
    alert: dict[str, Any],
    server_mode: str = "enforce",
    **params: Any,
) -> dict[str, Any]:
    engine = make_engine(disk_playbook(**params), mode=server_mode)
    (decision,) = ingest_alerts(engine, alert, at=T0).decisions
    assert decision.run_id is not None, decision.reason
    Executor(store=store, registry=registry, retry_wait_max=0.01).drain()
    return run_json_of(store, decision.run_id)


def test_an_alert_runs_the_cleanup_and_the_run_records_every_deleted_file(
    root: Path, make_engine: Any, store: Store, registry: ActionRegistry
) -> None:
    for i in range(4):
        make_file(root / f"f{i}.tmp", 1000 + i, age_days=10 - i)
    run = _run(
        make_engine,
        store,
        registry,
        disk_alert(),
        mountpoint="{{ labels.mountpoint }}",
        free_bytes=2**62,
    )
    assert run["status"] == "succeeded", run
    (step,) = run["steps"]
    assert step["params"]["mountpoint"] == "/test"
    assert [Path(e["path"]).name for e in step["plan"]["would_delete"]] == ["f0.tmp", "f1.tmp", "f2.tmp"]
    result = step["result"]
    assert [(Path(e["path"]).name, e["size"]) for e in result["deleted"]] == [
        ("f0.tmp", 1000),
        ("f1.tmp", 1001),
        ("f2.tmp", 1002),
    ]
    assert result["deleted_bytes"] == 3003
    assert result["stopped_by"] == "max_files"
    assert {"free_before_bytes", "free_after_bytes", "bytes_freed"} <= set(result)
    assert [p.name for p in root.iterdir()] == ["f3.tmp"]


def test_shadow_mode_only_plans(root: Path, make_engine: Any, store: Store, registry: ActionRegistry) -> None:
    make_file(root / "old.tmp", age_days=10)
    run = _run(
        make_engine,
        store,
        registry,
        disk_alert(),
        server_mode="dry-run",
        mountpoint="{{ labels.mountpoint }}",
        free_percent=100,
    )
    assert run["status"] == "planned"
    assert run["steps"][0]["plan"]["would_delete_files"] == 1
    assert (root / "old.tmp").exists()


def test_an_alert_for_a_mountpoint_without_a_policy_fails_the_run_with_the_reason(
    root: Path, make_engine: Any, store: Store, registry: ActionRegistry
) -> None:
    make_file(root / "old.tmp", age_days=10)
    alert = disk_alert(mountpoint="/test/../etc")
    run = _run(make_engine, store, registry, alert, mountpoint="{{ labels.mountpoint }}", free_percent=50)
    assert run["status"] == "failed"
    assert "no cleanup policy serves mountpoint '/test/../etc'" in run["error"]
    assert (root / "old.tmp").exists()


def test_a_playbook_naming_an_unknown_policy_validates_but_its_run_fails_clearly(
    tmp_path: Path,
    root: Path,
    make_engine: Any,
    store: Store,
    registry: ActionRegistry,
    policies_file: Path,
) -> None:
    directory = tmp_path / "playbooks"
    directory.mkdir()
    (directory / "disk.yaml").write_text(yaml.safe_dump(disk_playbook(policy="nope", free_percent=15)))
    result = CliRunner().invoke(main, ["playbooks", "validate", str(directory)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    run = _run(make_engine, store, registry, disk_alert(), policy="nope", free_percent=15)
    assert run["status"] == "failed"
    assert f"no cleanup policy named 'nope' in {policies_file} (known: scratch)" in run["error"]
