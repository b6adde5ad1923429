"""The framework callbacks in DDP: Lightning's and the Hugging Face Trainer's, 2 gloo ranks on CPU under torchrun.

The jobs are tests/support/jobs/lightning_ddp_job.py and hf_ddp_job.py; each rank counts the
samples behind every optimizer step, so the tests check the effective batch step by step on both
ranks. About 40 s each on 2 cores (two ranks importing torch and the framework).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from remediate.training.files import JobPaths
from tests.support.training import halved_at_the_next_epoch, require
from tests.support.waiting import scaled

require("torch")
require("lightning.pytorch")

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "tests" / "support" / "jobs"


def run_ddp(tmp_path: Path, script: str) -> tuple[Path, list[dict[str, Any]]]:
    """torchrun --nproc_per_node 2 `script`: its control root and what each rank recorded."""
    root, out = tmp_path / "control", tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}  # fmt: skip
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
               str(JOBS / script), "--root", str(root), "--out", str(out), "--watchdog", str(scaled(100))]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(120))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root, [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def check_halved(root: Path, job: str, ranks: list[dict[str, Any]]) -> None:
    """16 x 1 -> 8 x 2 from the second epoch on both ranks, 16 samples per rank behind every optimizer step."""
    # micro-batch x accumulation x 2 ranks; the jobs exchange at every poll (sync_every_s=0): claimed at step 2's
    # poll, applied by both ranks at step 3's
    halved_at_the_next_epoch(root, job, ranks[0]["sent"], effective=32, applied_at=3)
    for rank in ranks:  # 64 rows per rank and epoch: 4 optimizer steps per epoch
        assert rank["batching"] == [8, 2]
        assert rank["epochs"] == [[16, 1, 1], [8, 0, 2], [8, 0, 2]]
        assert [tuple(s[:2]) for s in rank["per_step"]] == [(0, 1)] * 4 + [(1, 2)] * 4 + [(2, 2)] * 4
        assert {s[2] for s in rank["per_step"]} == {16}  # samples per optimizer step per rank: 32 with both
        assert rank["global_step"] == 12


def test_two_lightning_ddp_ranks_halve_the_micro_batch_at_the_next_epoch_keeping_the_effective_batch(
    tmp_path: Path,
) -> None:
    root, ranks = run_ddp(tmp_path, "lightning_ddp_job.py")
    check_halved(root, "lightning-ddp", ranks)


def test_two_hugging_face_ddp_ranks_halve_the_micro_batch_at_the_next_epoch_keeping_the_effective_batch(
    tmp_path: Path,
) -> None:
    """Refused before: accelerate's BatchSamplerShard keeps the batch_size it was built with and yields only
    batches of that size, so after the torch sampler alone went to 8 rank 0's epoch came up empty (it stopped
    training) and rank 1 got one batch padded from the epoch's start and waited alone in DDP's all-reduce."""
    require("transformers")
    require("accelerate")
    root, ranks = run_ddp(tmp_path, "hf_ddp_job.py")
    assert ranks[0]["world_size"] == 2
    declared = JobPaths(root, "hf-ddp").read_registration().commands or {}
    assert {"reduce_batch_size", "set_dataloader_workers"} <= set(declared)
    check_halved(root, "hf-ddp", ranks)
    for rank in ranks:  # the loader's real worker processes: 1 in the first epoch, none after
        assert [s[3] for s in rank["per_step"]] == [True] * 4 + [False] * 8
    assert ranks[0]["weights"] == ranks[1]["weights"]
