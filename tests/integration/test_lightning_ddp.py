"""Issue 29, deliverable 4 with Lightning's own DDP: 2 gloo ranks on CPU under torchrun.

The job is tests/support/jobs/lightning_ddp_job.py; each rank counts the samples behind every
optimizer step, so the test checks the effective batch step by step on both ranks. About 20 s
on 2 cores (two ranks importing torch and Lightning).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from remediate.training.protocol import APPLIED
from tests.support.training import require, wait_for_ack
from tests.support.waiting import scaled

require("torch")
require("lightning.pytorch")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "support" / "jobs" / "lightning_ddp_job.py"
JOB = "lightning-ddp"


def test_two_lightning_ddp_ranks_halve_the_micro_batch_at_the_next_epoch_keeping_the_effective_batch(
    tmp_path: Path,
) -> None:
    root, out = tmp_path / "control", tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}  # fmt: skip
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone", str(SCRIPT),
               "--root", str(root), "--out", str(out)]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(120))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    shrink, workers = (wait_for_ack(root, JOB, sent) for sent in ranks[0]["sent"])
    assert shrink.status == APPLIED and workers.status == APPLIED, (shrink.detail, workers.detail)
    assert shrink.step_before == 2 and "applies at the next epoch" in shrink.detail
    assert (shrink.result["micro_batch_size_before"], shrink.result["micro_batch_size_after"]) == (16, 8)
    assert (shrink.result["accumulation_steps_before"], shrink.result["accumulation_steps_after"]) == (1, 2)
    # micro-batch x accumulation x 2 ranks, before and after
    assert shrink.result["effective_batch_size_before"] == shrink.result["effective_batch_size_after"] == 32
    for rank in ranks:  # 64 rows per rank and epoch (DistributedSampler): 4 optimizer steps per epoch
        assert rank["batching"] == [8, 2]
        assert rank["epochs"] == [[16, 1, 1], [8, 0, 2], [8, 0, 2]]
        assert [tuple(s[:2]) for s in rank["per_step"]] == [(0, 1)] * 4 + [(1, 2)] * 4 + [(2, 2)] * 4
        assert {s[2] for s in rank["per_step"]} == {16}  # samples per optimizer step per rank: 32 with both
        assert rank["global_step"] == 12
