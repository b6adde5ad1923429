"""End to end: a real AlertManager notification -> real `remediate serve` (gunicorn) -> disk.cleanup on a real tree.

The server reads the node's cleanup policies from REMEDIATE_CLEANUP_POLICIES_FILE; the alert only
carries the mountpoint label that picks the policy. Everything is read back the way an operator
would: GET /history, then GET /runs/<id> for the deleted files and the bytes freed.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from tests.support.disk import make_file
from tests.support.realsystems import AlertManager
from tests.support.server import RemediateServer, write_playbook

pytestmark = [pytest.mark.integration]

ALERTNAME = "NodeFilesystemAlmostOutOfSpace"
PLAYBOOK = """\
name: disk-full-e2e
match:
  alertname: NodeFilesystemAlmostOutOfSpace
  labels: ['severity=~"warning|critical"']
target: node
cooldown: 0s
steps:
  - name: cleanup
    action: disk.cleanup
    with:
      mountpoint: "{{ labels.mountpoint }}"
      free_percent: 100      # a real disk never gets there: the run goes until the policy has nothing left
    retries: 0
"""


def test_an_alertmanager_notification_cleans_the_policys_tree_and_history_shows_what_went(tmp_path: Path) -> None:
    root = tmp_path / "data" / "scratch"
    old = [make_file(root / "job-1" / f"shard-{i}.tmp", 1000 * (i + 1), age_days=10 - i) for i in range(4)]
    young = make_file(root / "job-1" / "shard-new.tmp", 500, age_days=0.1)
    other = make_file(root / "dataset.parquet", 7000, age_days=100)
    precious = make_file(tmp_path / "precious" / "model.ckpt", 4096, age_days=100)
    (root / "link.tmp").symlink_to(precious)
    policies = tmp_path / "cleanup-policies.yaml"
    policies.write_text(
        yaml.safe_dump(
            {
                "policies": [
                    {
                        "name": "e2e-scratch",
                        "mountpoint": "/e2e-data",
                        "roots": [str(root)],
                        "patterns": ["*.tmp"],
                        "min_age": "1d",
                        "max_files": 100,
                    }
                ]
            }
        )
    )
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    write_playbook(playbooks, "disk-full-e2e", PLAYBOOK)

    with (
        RemediateServer(
            tmp_path / "remediate", playbooks, env={"REMEDIATE_CLEANUP_POLICIES_FILE": str(policies)}
        ) as server,
        AlertManager(
            tmp_path / "alertmanager", server.webhook_url, token=server.token, group_wait="1s", group_interval="1s"
        ) as am,
    ):
        labels = {
            "alertname": ALERTNAME,
            "severity": "warning",
            "instance": "node-a:9100",
            "mountpoint": "/e2e-data",
            "device": "/dev/vdb",
            "fstype": "ext4",
        }
        started = time.monotonic()
        am.fire(labels, {"summary": "/e2e-data on node-a:9100 has 4.0% space left"})
        try:
            entry = server.wait_for_run(status="succeeded", alertname=ALERTNAME)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nremediate log:\n{server.log_tail()}\nam log:\n{am.log_tail()}") from None
        elapsed = time.monotonic() - started

        assert entry["playbook"] == "disk-full-e2e"
        assert entry["decision"] == "accepted"
        assert entry["target"] == "node-a"
        assert entry["run"]["status"] == "succeeded"
        run = server.run(entry["run_id"])

    (step,) = run["steps"]
    assert step["action"] == "disk.cleanup"
    assert step["params"]["mountpoint"] == "/e2e-data"
    result = step["result"]
    assert result["policy"] == "e2e-scratch"
    assert [(entry["path"], entry["size"]) for entry in result["deleted"]] == [
        (str(p), p_size) for p, p_size in zip(old, (1000, 2000, 3000, 4000), strict=True)
    ]
    assert result["deleted_files"] == 4
    assert result["deleted_bytes"] == 10_000
    assert result["bytes_freed"] >= 10_000  # whole blocks
    assert result["free_before_bytes"] > 0 and result["free_after_bytes"] > 0
    assert result["stopped_by"] == "no_candidates_left"
    assert result["scan"]["kept"] == {"too_young": 1}
    assert result["scan"]["skipped"] == {"symlink": 1}
    assert [p.exists() for p in old] == [False] * 4
    assert young.exists() and other.exists() and precious.read_bytes() == b"x" * 4096
    assert (root / "link.tmp").is_symlink()
    print(f"\nE2E disk cleanup: alert fired -> run succeeded in {elapsed:.2f} s")
