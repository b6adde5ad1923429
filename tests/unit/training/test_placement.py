"""remediate.training.placement: a rank's place in its job from torchrun's, srun's or the downward API's
environment."""

from __future__ import annotations

import socket

import pytest

from remediate.training.metrics import RankLabels
from remediate.training.placement import Placement, PlacementError, from_environment

# What srun sets in task 5 of `srun -N 2 -n 8 --ntasks-per-node 4` (srun(1), "OUTPUT ENVIRONMENT VARIABLES").
SRUN = {
    "SLURM_PROCID": "5",
    "SLURM_NTASKS": "8",
    "SLURM_LOCALID": "1",
    "SLURMD_NODENAME": "gpu-b07",
    "SLURM_JOB_ID": "4242",
}


def test_outside_any_launcher_it_is_rank_0_of_1_on_this_host() -> None:
    assert from_environment({}) == Placement(0, 1, None, socket.gethostname(), None)


def test_torchrun_gives_the_rank_and_the_downward_api_the_node() -> None:
    environ = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "NODE_NAME": "gpu-node-7"}
    assert from_environment(environ) == Placement(3, 8, 1, "gpu-node-7", None)


def test_an_srun_task_is_placed_by_slurm_alone_on_its_slurm_node_name() -> None:
    assert from_environment(SRUN) == Placement(5, 8, 1, "gpu-b07", "4242")


def test_under_srun_torchrun_the_rank_is_torchruns_and_the_node_slurms() -> None:
    """`srun torchrun ...`: SLURM_PROCID is the torchrun agent's index (one per node), not the worker's rank."""
    environ = {**SRUN, "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "RANK": "6", "WORLD_SIZE": "8", "LOCAL_RANK": "2"}
    assert from_environment(environ) == Placement(6, 8, 2, "gpu-b07", "4242")


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"RANK": "x"}, "RANK: expected a non-negative integer, got 'x'"),
        ({"SLURM_PROCID": "1", "SLURM_NTASKS": "-2"}, "SLURM_NTASKS"),
        ({"SLURM_PROCID": "4", "SLURM_NTASKS": "4"}, "SLURM_PROCID=4 with SLURM_NTASKS=4"),
        ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0"),
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "a"}, "LOCAL_RANK"),
    ],
)
def test_a_malformed_variable_is_refused_naming_it(environ: dict[str, str], named: str) -> None:
    with pytest.raises(PlacementError, match=named):
        from_environment(environ)


def test_the_step_metrics_labels_of_an_srun_task_need_no_configuration() -> None:
    """The labels TrainingStragglerRank alerts with: its `node` is the name slurm.* steps act on."""
    assert RankLabels.detect("llm-7b", SRUN) == RankLabels("llm-7b", "5", "8", "gpu-b07", "1")
