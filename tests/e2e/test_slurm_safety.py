"""The Slurm safety model end to end: real AlertManager 0.25 -> real `remediate serve` (its Slurm cluster and
breaker cap in the config file a user writes, REMEDIATE_CONFIG) -> the real slurmctld of tests/support/slurm.py.

- An XID storm over more nodes than the breaker's cap drains exactly `cap` of them; the last drain fails with
  the breaker's error, shown in /history and the run, and leaves its node as Slurm had it. Open, the breaker
  gives the next alert no run. Undo is never refused: the resolutions resume the drained nodes while it is
  still open.
- A node a person drained keeps their reason through the alert and its resolution.

One server and one AlertManager serve the module's tests (each test acts on nodes of its own); the breaker a
test left open is reset after it, as an operator resets it (POST /breaker/reset)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests
import yaml

from tests.support.realsystems import AlertManager
from tests.support.server import TOKEN, HasLogTail, RemediateServer
from tests.support.slurm import SlurmCluster, xid_playbook
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

CAP = 2
"""breaker_max_nodes; breaker_max_fraction 1.0 of train's 5 nodes makes it the cap."""


@dataclass
class Rig:
    server: RemediateServer
    alertmanager: AlertManager

    def reset_breaker(self, reason: str) -> dict[str, Any]:
        """POST /breaker/reset, as an operator does."""
        response = requests.post(f"{self.server.url}/breaker/reset", json={"reason": reason},
                                 headers=self.server.auth, timeout=scaled(5))  # fmt: skip
        assert response.status_code == 200, response.text
        status: dict[str, Any] = response.json()
        return status

    def ended(self, phase: str, nodes: tuple[str, ...]) -> dict[str, dict[str, Any]]:
        """The /history entry of the ended `phase` run of each of `nodes`' alerts, by node, once all have one."""

        def find() -> dict[str, dict[str, Any]] | None:
            found = {e["target"]: e for e in self.server.runs(alertname="GPUXidCritical")
                     if e["run"]["phase"] == phase and e["target"] in nodes
                     and e["status"] in ("succeeded", "failed")}  # fmt: skip
            return found if len(found) == len(nodes) else None

        entries: dict[str, dict[str, Any]] = wait_until(
            find, scaled(60), interval=0.2, message=f"no ended {phase} run for each of {nodes}"
        )
        return entries


@pytest.fixture(scope="module")
def module_rig(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    root = tmp_path_factory.mktemp("slurm-safety")
    playbooks = root / "playbooks"
    playbooks.mkdir()
    (playbooks / "xid-slurm.yaml").write_text(xid_playbook())
    config = root / "remediate.yaml"
    config.write_text(yaml.safe_dump({
        "schedulers": "slurm", "slurm_conf": str(slurm_cluster.conf), "slurm_partitions": ["train"],
        "slurm_poll_interval": "1s",
        "breaker_max_nodes": CAP, "breaker_max_fraction": 1.0,
    }))  # fmt: skip
    server = RemediateServer(root / "remediate", playbooks, env={"REMEDIATE_CONFIG": str(config)})
    alertmanager = AlertManager(root / "alertmanager", server.webhook_url, token=TOKEN)
    try:
        server.start()
        alertmanager.start()
        yield Rig(server, alertmanager)
    finally:
        alertmanager.stop()
        server.stop()


@pytest.fixture
def rig(module_rig: Rig, slurm: SlurmCluster, watch_log: Callable[[str, HasLogTail], None]) -> Iterator[Rig]:
    """The module's server and AlertManager, every Slurm node in service (`slurm`); a breaker the test left open
    is reset after it (before `slurm` resumes the nodes)."""
    watch_log("remediate", module_rig.server)
    watch_log("alertmanager", module_rig.alertmanager)
    yield module_rig
    if module_rig.server.get("/breaker")["open"]:
        module_rig.reset_breaker("the next test starts from a closed breaker")


def xid(node: str) -> dict[str, str]:
    return {"alertname": "GPUXidCritical", "severity": "critical", "Hostname": node, "gpu": "3", "xid": "79"}


def service_state(slurm: SlurmCluster, node: str) -> tuple[str, str]:
    """(State=..., Reason=... or ""), from `scontrol -o show node` as an operator reads it."""
    line = slurm.show_node(node)
    state = line.split(" State=", 1)[1].split()[0]
    return state, line.split(" Reason=", 1)[1].strip() if " Reason=" in line else ""


def test_an_xid_storm_past_the_breaker_cap_drains_cap_nodes_and_the_last_claim_fails_leaving_its_node(
    rig: Rig, slurm: SlurmCluster
) -> None:
    server, alertmanager = rig.server, rig.alertmanager
    storm = slurm.train[1 : CAP + 2]  # gpu-01 .. gpu-03: one node more than the cap, all in slurm_partitions
    before = {node: service_state(slurm, node) for node in storm}
    for node in storm:
        alertmanager.fire(xid(node), {"summary": f"GPU 3 on {node}: XID 79"})
    firing = rig.ended("firing", storm)

    drained = tuple(node for node in storm if "DRAIN" in service_state(slurm, node)[0])
    assert len(drained) == CAP, (drained, slurm.reasons())
    (refused,) = set(storm) - set(drained)
    for node in drained:
        assert firing[node]["status"] == "succeeded", firing[node]
        reason = f"remediate run {firing[node]['run_id']}: GPUXidCritical GPU 3 (xid 79)"
        assert service_state(slurm, node)[1].startswith(f"{reason} [root@"), slurm.show_node(node)
    # Refused: the run failed on the breaker, as /history shows it and the run's drain step says, and Slurm
    # shows the node as it was before the storm.
    entry = firing[refused]
    assert entry["status"] == "failed" and "breaker open" in (entry["run"]["error"] or ""), entry
    drain, requeue = server.run(entry["run_id"])["steps"]
    assert (drain["action"], drain["status"]) == ("slurm.drain", "failed")
    assert "breaker open" in drain["error"] and requeue["status"] != "succeeded", (drain, requeue)
    assert service_state(slurm, refused) == before[refused] and before[refused][1] == ""
    breaker = server.get("/breaker")
    assert breaker["open"] and breaker["tripped_node"] == refused, breaker
    assert breaker["held_nodes"] == sorted(drained), breaker

    # Open, it stays open: the next alert gets no run at all, its decision says why and what resets it.
    late = slurm.host
    late_before = service_state(slurm, late)
    alertmanager.fire(xid(late), {"summary": f"GPU 3 on {late}: XID 79"})
    decision = wait_until(
        lambda: next((e for e in server.history(node=late) if e["decision"] == "breaker_open"), None),
        scaled(30),
        interval=0.2,
        message=f"no breaker_open decision for {late} in /history",
    )
    assert decision["run_id"] is None and "remediate breaker reset" in decision["reason"], decision
    assert service_state(slurm, late) == late_before

    # Undo is never refused: the storm's end resumes the nodes remediate drained, the breaker still open.
    alertmanager.resolve(xid(late))
    for node in storm:
        alertmanager.resolve(xid(node))
    resolved = rig.ended("resolved", storm)
    outcomes = {node: server.run(resolved[node]["run_id"])["steps"][0]["result"]["outcome"] for node in storm}
    assert outcomes == {node: "left_alone" if node == refused else "resumed" for node in storm}
    assert all("DRAIN" not in service_state(slurm, node)[0] for node in storm), slurm.reasons()
    assert server.get("/breaker")["open"]
    assert rig.reset_breaker("storm over, nodes checked")["reset"] is True
    print("breaker after the storm:", {k: breaker[k] for k in ("reason", "tripped_node", "held_nodes")})


def test_a_node_a_person_drained_keeps_their_drain_through_the_alert_and_its_resolution(
    rig: Rig, slurm: SlurmCluster
) -> None:
    server, alertmanager = rig.server, rig.alertmanager
    node = slurm.train[-1]  # gpu-04: no node of the storm's
    slurm.drain_by_hand(node, "disk swap, ticket 123")
    theirs = service_state(slurm, node)
    assert "DRAIN" in theirs[0] and theirs[1].startswith("disk swap, ticket 123 [root@"), theirs

    alertmanager.fire(xid(node), {"summary": f"GPU 3 on {node}: XID 79"})
    firing = rig.ended("firing", (node,))[node]
    assert firing["status"] == "succeeded", firing
    drain, requeue = server.run(firing["run_id"])["steps"]
    assert drain["result"]["outcome"] == "left_alone" and requeue["result"]["outcome"] == "left_alone"
    assert drain["result"]["slurm_reason"] == "disk swap, ticket 123" and drain["result"]["set_by"] == "root"
    assert "disk swap, ticket 123" in drain["result"]["reason"]
    assert service_state(slurm, node) == theirs

    alertmanager.resolve(xid(node))
    resolved = rig.ended("resolved", (node,))[node]
    (resume,) = server.run(resolved["run_id"])["steps"]
    assert resume["result"]["outcome"] == "left_alone" and "disk swap, ticket 123" in resume["result"]["reason"]
    assert service_state(slurm, node) == theirs  # still drained, still their reason
