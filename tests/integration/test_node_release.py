"""`remediate node release NODE` (issue 28): an operator gives a node a breakfix system owns back to remediate,
against the test API server (real HTTP, the official client), as a real process; audited `node_released`."""

from __future__ import annotations

import json
from pathlib import Path

from remediate.kube import CORDONED_BY_RUN, OWNER, OWNER_SINCE, OWNER_WHY
from tests.support.fake_apiserver import FakeKubeAPI
from tests.support.processes import run_remediate

OWNED = {OWNER: "breakfix", OWNER_SINCE: "2026-11-27T10:00:00Z", OWNER_WHY: "XID 79 after a reset (run 3)"}


def test_release_removes_only_the_owner_annotations_and_is_audited(kube_api: FakeKubeAPI, kubeconfig: Path) -> None:
    kube_api.add_node("gpu-07", annotations={**OWNED, CORDONED_BY_RUN: "3"}, unschedulable=True)
    env = {"REMEDIATE_KUBECONFIG": str(kubeconfig), "REMEDIATE_LOG_FORMAT": "json"}

    done = run_remediate("node", "release", "gpu-07", "--by", "alice", "--reason", "GPU replaced", env=env)

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("released gpu-07 is owned by breakfix since 2026-11-27T10:00:00Z: XID 79")
    annotations = kube_api.node("gpu-07")["metadata"]["annotations"]
    assert annotations == {CORDONED_BY_RUN: "3"}  # remediate's own marks stay: its undo still applies
    assert kube_api.node("gpu-07")["spec"]["unschedulable"] is True
    (audit,) = [json.loads(line) for line in done.stderr.splitlines() if '"node_released"' in line]
    assert {k: audit[k] for k in ("event", "level", "node", "owner", "owner_since", "principal", "reason")} == {
        "event": "node_released",
        "level": "WARNING",
        "node": "gpu-07",
        "owner": "breakfix",
        "owner_since": "2026-11-27T10:00:00Z",
        "principal": "alice",
        "reason": "GPU replaced",
    }

    again = run_remediate("node", "release", "gpu-07", env=env)

    assert again.returncode == 0 and "not owned by another system: nothing to release" in again.stdout
    assert "node_released" not in again.stderr


def test_release_of_a_missing_or_invalid_node_is_one_line_and_changes_nothing(
    kube_api: FakeKubeAPI, kubeconfig: Path
) -> None:
    env = {"REMEDIATE_KUBECONFIG": str(kubeconfig)}
    missing = run_remediate("node", "release", "gpu-99", env=env)
    assert missing.returncode == 3 and missing.stderr.strip() == "Error: node gpu-99 does not exist in the cluster"

    invalid = run_remediate("node", "release", "GPU_07", env=env)
    assert invalid.returncode == 2 and "Invalid value for NAME" in invalid.stderr and "Traceback" not in invalid.stderr
    assert kube_api.count("PATCH", "/nodes/") == 0
