"""The plain-loop quick start of docs/training-protocol.md runs as written, and a second run resumes.

The block is taken from the doc itself (the first ```python block under "## Quick start"), with a tiny
model, optimizer, scheduler, loader and train_step defined before it — what the block leaves to the
reader — and its checkpoint directory moved under the test's tmp_path. Each run is a real Python process
with a real control root. The second run must go on from the first one's newest checkpoint: that is what
the fail-slow ladder's `restart` relies on (every rank exits 75, the launcher starts the script again).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.training import require
from tests.support.waiting import scaled

require("torch")

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "training-protocol.md"

PRELUDE = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1000)
loader = [torch.randn(8, 4, generator=torch.Generator().manual_seed(i)) for i in range(120)]


def train_step(batch):
    loss = (model(batch) - batch.sum(dim=1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss
"""
EPILOGUE = """
import json
print("RESULT " + json.dumps({"resumed": None if info is None else info.step, "step": step,
                              "checkpoints": [c.step for c in ckpts.list()]}))
"""


def quick_start_block() -> str:
    section = DOC.read_text().split("## Quick start", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "no python block under ## Quick start"
    return match.group(1)


def run_quick_start(tmp_path: Path) -> dict[str, object]:
    code = quick_start_block().replace('"/scratch/ckpt"', repr(str(tmp_path / "ckpt")))
    env = {**os.environ, "REMEDIATE_TRAINING_CONTROL_ROOT": str(tmp_path / "control"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", PRELUDE + code + EPILOGUE], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=scaled(120))  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    result: dict[str, object] = json.loads(line.removeprefix("RESULT "))
    return result


def test_the_plain_loop_quick_start_runs_as_written_and_a_restarted_run_resumes_from_its_checkpoint(
    tmp_path: Path,
) -> None:
    first = run_quick_start(tmp_path)
    assert first["resumed"] is None and first["step"] == 120  # a fresh start, one step per batch
    assert first["checkpoints"] == [50, 100]

    second = run_quick_start(tmp_path)  # the launcher started it again
    assert second["resumed"] == 100  # the newest checkpoint the first run left
    assert second["step"] == 220
    assert second["checkpoints"] == [50, 100, 150, 200]
