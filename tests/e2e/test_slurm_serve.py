"""`remediate serve` with a playbook that drains Slurm nodes, against the real slurmctld (tests/support/slurm.py):
its executor process polls the cluster from its start (one `sinfo --json` per slurm_poll_interval), the HTTP
workers show that process's cache in /readyz (`slurm_cache`: age, bound, fresh, nodes) and /metrics."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.server import RemediateServer
from tests.support.slurm import SlurmCluster, xid_playbook
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]


def serve(start_server: Callable[..., RemediateServer], playbooks: Path, slurm: SlurmCluster) -> RemediateServer:
    return start_server(
        playbooks=playbooks,
        env={
            "REMEDIATE_SCHEDULERS": "slurm",
            "REMEDIATE_SLURM_CONF": str(slurm.conf),
            "REMEDIATE_SLURM_POLL_INTERVAL": "1s",
        },
    )


def test_a_server_whose_playbooks_drain_slurm_nodes_polls_them_from_its_start(
    start_server: Callable[..., RemediateServer], tmp_path: Path, slurm: SlurmCluster
) -> None:
    playbooks = tmp_path / "drains"
    playbooks.mkdir()
    (playbooks / "xid.yaml").write_text(xid_playbook())
    server = serve(start_server, playbooks, slurm)

    def shown() -> dict[str, object]:
        return dict(server.get("/readyz").get("slurm_cache") or {})

    wait_until(lambda: shown().get("fresh") is True, scaled(20), message="no slurm_cache in /readyz before any alert")
    cache = shown()
    assert cache["nodes"] == len(slurm.nodes) and cache["max_staleness_s"] == 3.0
    assert 0 <= float(cache["age_s"]) <= 3.0  # type: ignore[arg-type]
    assert server.metric("remediate_slurm_cache_max_staleness_seconds") == 3.0
    assert server.metric("remediate_slurm_cache_age_seconds") >= 0
    # The executor's reads, and nothing else: no alert came, so no step read a node.
    wait_until(lambda: server.metric("remediate_slurm_commands_total", tool="sinfo") >= 2, scaled(20))
    assert server.metric("remediate_slurm_commands_total", tool="scontrol") == 0
    assert server.history() == []
