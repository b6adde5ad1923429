"""The Slurm cluster of the tests (tests/support/slurm.py) leaves nothing behind: its daemons are the processes
its pid files name, and after `stop` none of them runs and its directory is gone."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.slurm import SlurmCluster, missing_requirements


def _running(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "\nState:\tZ" not in status.read_text()


@pytest.mark.usefixtures("slurm_cluster")  # skips, or fails where REMEDIATE_SLURM_REQUIRED=1, as the others
def test_a_cluster_stops_every_daemon_it_started_and_removes_its_directory() -> None:
    assert missing_requirements() == []
    cluster = SlurmCluster.start()
    try:
        pids = cluster.pids()
        assert pids == {name: proc.pid for name, proc in cluster.procs.items()}
        assert set(pids) == {"munged", "slurmctld", "slurmd"} and all(_running(pid) for pid in pids.values())
    finally:
        cluster.stop()
    assert [name for name, pid in pids.items() if _running(pid)] == []
    assert not cluster.root.exists()
