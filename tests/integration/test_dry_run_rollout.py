"""`remediate dry-run` under a staged rollout: each node's effective mode and why, its wave read as the server
reads it (the label, on the test API server; `rollout_nodes` for a host without Kubernetes)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import yaml

from tests.integration.test_cli import XID_COOLDOWN
from tests.support.cli import run_cli as cli
from tests.support.fake_apiserver import FakeKubeAPI

LABEL = "remediate.io/wave"


def test_dry_run_shows_each_nodes_effective_mode_and_its_wave(tmp_path: Path, kube_api: FakeKubeAPI) -> None:
    kube_api.add_node("node-a", labels={LABEL: "1"})
    kube_api.add_node("node-b")
    playbooks = tmp_path / "pb"
    playbooks.mkdir()
    (playbooks / "xid.yaml").write_text(XID_COOLDOWN, encoding="utf-8")
    config = tmp_path / "remediate.yaml"
    settings = {
        "playbooks": str(playbooks),
        "database_url": f"sqlite:///{tmp_path / 'absent.db'}",
        "kubeconfig": str(kube_api.write_kubeconfig(tmp_path / "kubeconfig")),
        "rollout": {"label": LABEL, "waves": {"1": "enforce", "2": "approve"}, "default": "dry-run"},
        "rollout_nodes": {"host-x": "2"},
    }
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")

    def dry_run(node: str) -> dict:
        result = cli(
            "dry-run", "--config", config, "--alertname", "GpuXidError", "--label", f"Hostname={node}", "--json"
        )
        assert result.exit_code == 0, result.output
        (playbook,) = json.loads(result.stdout)["alerts"][0]["playbooks"]
        return playbook

    before = set(threading.enumerate())
    a, b, x = dry_run("node-a"), dry_run("node-b"), dry_run("host-x")

    assert (a["mode"], a["wave"]) == ("enforce", f"node node-a in wave 1 (label {LABEL}=1): enforce")
    assert (b["mode"], b["wave"]) == ("dry-run", f"node node-b in no wave (no label {LABEL}): dry-run")
    assert (x["mode"], x["wave"]) == ("approve", "node host-x in wave 2 (rollout_nodes): approve")
    assert a["reason"].endswith(a["wave"])
    text = cli("dry-run", "--config", config, "--alertname", "GpuXidError", "--label", "Hostname=node-b").stdout
    assert "target node-b, mode dry-run" in text
    assert f"    rollout: node node-b in no wave (no label {LABEL}): dry-run" in text
    # Each dry-run that read a label (all but host-x's, from rollout_nodes) listed the nodes once, through one
    # node cache, and closed it: no watch is left running in this process.
    assert kube_api.request_count(verb="list", resource="nodes") == 3
    assert not [t for t in set(threading.enumerate()) - before if t.name == "remediate-node-cache"]
