"""A training job started by the real srun (tests/support/slurm.py's slurmctld and slurmd) knows its rank, world
size and node from Slurm's environment alone (remediate.training.placement): the labels its step metrics carry,
which the straggler rule alerts with and the slurm.* steps take as the node."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.support.slurm import SlurmCluster

REPO = Path(__file__).resolve().parents[2]
TASK = """
import json
from remediate.training.metrics import RankLabels
from remediate.training.placement import from_environment
placed = from_environment()
labels = RankLabels.detect("llm-7b")
print(json.dumps({"rank": placed.rank, "world_size": placed.world_size, "local_rank": placed.local_rank,
                  "node": placed.node, "job": placed.slurm_job, "labels": [labels.rank, labels.world_size,
                  labels.node, labels.gpu]}))
"""


def test_srun_tasks_are_placed_by_slurm_with_no_configuration(slurm: SlurmCluster) -> None:
    # Nothing of remediate's own in the environment: only what any srun user has, and the checkout on the path.
    env = {**slurm.env(), "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = slurm.run_with(
        env, "srun", "--ntasks=2", f"--nodelist={slurm.host}", "--mem=100", f"--chdir={slurm.root}",
        "--export=ALL", sys.executable, "-c", TASK,
    )  # fmt: skip

    tasks = sorted((json.loads(line) for line in done.stdout.splitlines()), key=lambda t: t["rank"])
    assert [(t["rank"], t["world_size"], t["local_rank"], t["node"]) for t in tasks] == [
        (0, 2, 0, slurm.host),
        (1, 2, 1, slurm.host),
    ]
    (job,) = {t["job"] for t in tasks}
    assert job is not None and job.isdigit()
    assert [t["labels"] for t in tasks] == [["0", "2", slurm.host, "0"], ["1", "2", slurm.host, "1"]]
