"""The chart picks up a changed ConfigMap. Each workload's pod template carries the
checksum of the ConfigMaps it mounts (rendered twice with `helm template`): a change of the playbooks or of the
server's settings rolls the server, and only the server; the node agents roll on their own settings alone."""

from __future__ import annotations

from typing import Any

from tests.support.helm import Helm, by_kind

EXTRA = "name: extra\nmatch: {alertname: Extra}\nsteps:\n  - {action: log, with: {message: extra}}\n"


def _checksums(helm: Helm, values: dict[str, Any]) -> dict[str, dict[str, str]]:
    objects = helm.objects({"agent": {"enabled": True}, **values})
    return {
        kind: {
            key: value
            for key, value in by_kind(objects, kind)["spec"]["template"]["metadata"]["annotations"].items()
            if key.startswith("checksum/")
        }
        for kind in ("Deployment", "DaemonSet")
    }


def test_a_playbook_change_rolls_the_server_and_not_the_agents(helm: Helm) -> None:
    before = _checksums(helm, {"playbooks": {"extra": {"extra.yaml": EXTRA}}})
    same = _checksums(helm, {"playbooks": {"extra": {"extra.yaml": EXTRA}}})
    edited = _checksums(helm, {"playbooks": {"extra": {"extra.yaml": EXTRA.replace("message: extra", "message: x")}}})

    assert set(before["Deployment"]) == {"checksum/config", "checksum/playbooks"}
    assert same == before
    assert edited["Deployment"]["checksum/playbooks"] != before["Deployment"]["checksum/playbooks"]
    assert edited["Deployment"]["checksum/config"] == before["Deployment"]["checksum/config"]
    assert edited["DaemonSet"] == before["DaemonSet"]


def test_a_settings_change_rolls_the_workload_whose_settings_changed(helm: Helm) -> None:
    before = _checksums(helm, {})
    server = _checksums(helm, {"server": {"config": {"retention": "30d"}}})
    agent = _checksums(helm, {"agent": {"enabled": True, "gpu": {"powerFloorWatts": 300}}})

    assert server["Deployment"]["checksum/config"] != before["Deployment"]["checksum/config"]
    assert server["Deployment"]["checksum/playbooks"] == before["Deployment"]["checksum/playbooks"]
    assert server["DaemonSet"] == before["DaemonSet"]
    assert agent["DaemonSet"]["checksum/config"] != before["DaemonSet"]["checksum/config"]
    assert agent["Deployment"] == before["Deployment"]
