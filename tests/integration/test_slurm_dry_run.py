"""`remediate dry-run` of a Slurm playbook against the real slurmctld (tests/support/slurm.py): the plan says
which reason the drain would set and what the breaker would allow, a person's drain is shown as one that
remediate would leave alone, and nothing changes on the cluster."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.support.cli import run_cli as cli
from tests.support.slurm import SlurmCluster, xid_playbook


def test_a_dry_run_plans_the_drain_and_changes_nothing(slurm: SlurmCluster, tmp_path: Path) -> None:
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    (playbooks / "xid-slurm.yaml").write_text(xid_playbook(requeue=False))
    config = tmp_path / "remediate.yaml"
    config.write_text(yaml.safe_dump({
        "playbooks": str(playbooks), "database_url": f"sqlite:///{tmp_path / 'absent.db'}",
        "schedulers": "slurm", "slurm_conf": str(slurm.conf), "slurm_partitions": ["train"],
    }))  # fmt: skip
    person = slurm.train[1]
    slurm.drain_by_hand(person, "bad DIMM, ticket 123")
    before = {node: slurm.show_node(node).split("LastBusyTime=")[0] for node in slurm.nodes}

    def plan(node: str) -> dict:
        result = cli("dry-run", "--config", config, "--alertname", "GPUXidCritical", "--label", f"Hostname={node}",
                     "--label", "xid=79", "--json")  # fmt: skip
        (playbook,) = json.loads(result.stdout)["alerts"][0]["playbooks"]
        (step,) = playbook["steps"]
        return step["plan"]

    free = plan(slurm.host)
    # A dry-run has no run yet: its reason shows run 0 where the real run's id will be.
    assert free["would"] == "drain the node with reason 'remediate run 0: GPUXidCritical (xid 79)'"
    assert free["breaker"]["would_be"].startswith("allowed")
    taken = plan(person)
    assert taken["can_act"] is False and "bad DIMM, ticket 123" in taken["why_not"]

    assert {node: slurm.show_node(node).split("LastBusyTime=")[0] for node in slurm.nodes} == before
