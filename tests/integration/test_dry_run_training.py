"""`remediate dry-run` exits 1 when every step's plan says it cannot act: a training job
whose process is gone gets nothing, so nothing would run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import Result

from remediate.training.files import JobPaths, atomic_write_json, read_json
from tests.support.cli import run_cli as cli
from tests.support.training import LiveJob

pytestmark = pytest.mark.usefixtures("clean_environment")

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(control root, playbooks directory holding the shipped loss-spike playbook)."""
    root = tmp_path / "control"
    root.mkdir()
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    shutil.copy(REPO / "playbooks" / "loss-spike.yaml", playbooks)
    monkeypatch.setenv("REMEDIATE_TRAINING_CONTROL_ROOT", str(root))
    monkeypatch.setenv("REMEDIATE_NODE_NAME", "gpu-node-1")  # a single host: the alerts' node is this one
    return root, playbooks


def spike(playbooks: Path, tmp_path: Path, *extra: str) -> Result:
    return cli(
        "dry-run", "--alertname", "TrainingLossSpike", "--label", "training_job=j1", "--label", "node=gpu-node-1",
        "--label", "severity=warning", "--playbooks", playbooks, "--database-url",
        f"sqlite:///{tmp_path / 'absent.db'}", *extra,
    )  # fmt: skip


def test_dry_run_exits_1_when_the_job_is_gone_and_0_when_it_runs(training: tuple[Path, Path], tmp_path: Path) -> None:
    root, playbooks = training
    LiveJob(root, "j1").register()
    alive = spike(playbooks, tmp_path)
    assert alive.exit_code == 0, alive.output
    assert alive.stdout.strip().endswith("would run: yes")

    paths = JobPaths(root, "j1")
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = read_json(paths.registration) | {"pid": int(finished.stdout), "last_poll_at": time.time() - 600}
    atomic_write_json(paths.registration, gone, tmp_dir=paths.tmp)
    dead = spike(playbooks, tmp_path)
    assert dead.exit_code == 1, dead.output
    assert "nothing would change: every step's plan says it cannot act" in dead.stdout
    assert f"process {gone['pid']} is not running" in dead.stdout
    assert dead.stdout.strip().splitlines()[-1].startswith("would run: no (playbook loss-spike: step 0 rollback: ")
    report = json.loads(spike(playbooks, tmp_path, "--json").stdout)
    playbook = report["alerts"][0]["playbooks"][0]
    assert report["would_run"] is False and playbook["decision"] == "accepted" and playbook["would_run"] is False
    assert [step["plan"]["can_act"] for step in playbook["steps"]] == [False, False]


def test_dry_run_exits_1_when_a_step_cannot_succeed_a_typo_in_the_job_or_no_checkpoint_fits(
    training: tuple[Path, Path], tmp_path: Path
) -> None:
    """A plan that errors (a typo in the job's name) or a rollback with no checkpoint
    that fits said `would run: yes` and exited 0; a run that cannot succeed is `would run: no`, exit 1."""
    root, playbooks = training
    # A job 150 steps in: rollback wants a good checkpoint at least 100 steps back (step <= 50); it has 100 and up.
    LiveJob(root, "j1", start_step=150).register()

    typo = cli(
        "dry-run", "--alertname", "TrainingLossSpike", "--label", "training_job=j1-typo", "--label",
        "node=gpu-node-1", "--label", "severity=warning", "--playbooks", playbooks, "--database-url",
        f"sqlite:///{tmp_path / 'absent.db'}",
    )  # fmt: skip

    assert typo.exit_code == 1, typo.output
    assert "plan failed: ActionError: no registered training job found" in typo.stdout
    last = typo.stdout.strip().splitlines()[-1]
    assert last.startswith("would run: no (playbook loss-spike: step 0 rollback: plan failed: ") and "j1-typo" in last

    early = spike(playbooks, tmp_path)
    report = json.loads(spike(playbooks, tmp_path, "--json").stdout)

    assert early.exit_code == 1, early.output
    assert "the run cannot succeed: a step's plan says it cannot act (each step says why)" in early.stdout
    last = early.stdout.strip().splitlines()[-1]
    assert last.startswith("would run: no (playbook loss-spike: step 0 rollback: no checkpoint fits"), last
    playbook = report["alerts"][0]["playbooks"][0]
    assert (report["would_run"], playbook["decision"], playbook["would_run"]) == (False, "accepted", False)
    rollback, lower_lr = playbook["steps"]
    assert rollback["plan"]["can_act"] is False and rollback["plan"]["why_not"].startswith("no checkpoint fits")
    assert lower_lr["plan"]["can_act"] is True


def test_dry_run_exits_1_when_a_run_cannot_succeed_even_if_another_playbook_would_run(
    training: tuple[Path, Path], tmp_path: Path
) -> None:
    """With the example playbook log-critical-alerts (docs/examples), which also
    matches, so `would run: yes` and exit 0 hid a loss-spike run
    that would fail on every step (the alert names another host)."""
    root, playbooks = training
    shutil.copy(REPO / "docs" / "examples" / "log-every-alert.yaml", playbooks)
    LiveJob(root, "j1").register()

    elsewhere = cli(
        "dry-run", "--alertname", "TrainingLossSpike", "--label", "training_job=j1", "--label", "node=gpu-node-9",
        "--label", "severity=warning", "--playbooks", playbooks, "--database-url",
        f"sqlite:///{tmp_path / 'absent.db'}",
    )  # fmt: skip
    here = spike(playbooks, tmp_path)

    assert elsewhere.exit_code == 1, elsewhere.output
    last = elsewhere.stdout.strip().splitlines()[-1]
    assert last.startswith("would run: yes, but cannot succeed (playbook loss-spike: step 0 rollback: plan failed: ")
    assert "WrongHostError: node 'gpu-node-9' is not this host" in last
    assert here.exit_code == 0, here.output
    assert here.stdout.strip().endswith("would run: yes")


RUN_ON_PLAYBOOK = """\
name: fail-slow
match: {alertname: TrainingStragglerRank}
target: node
steps:
  - {name: tell, action: log, with: {message: "rank {{ labels.rank }} straggles on {{ labels.node }}"}}
  - name: restart
    action: training.command
    with: {command: checkpoint}
    run_on: {labels: [control_node]}
"""


def test_dry_run_shows_the_node_a_run_on_step_would_run_on_and_plans_it_there(
    training: tuple[Path, Path], tmp_path: Path
) -> None:
    """The straggler's node (the target) is gpu-node-2, the job registered on rank 0's node, this
    host gpu-node-1 (`control_node`): the `run_on` step is planned here, and the dry run says where."""
    root, _ = training
    LiveJob(root, "j1").register()
    playbooks = tmp_path / "run-on"
    playbooks.mkdir()
    (playbooks / "fail-slow.yaml").write_text(RUN_ON_PLAYBOOK, encoding="utf-8")
    args = (
        "dry-run", "--alertname", "TrainingStragglerRank", "--label", "training_job=j1", "--label", "rank=3",
        "--label", "node=gpu-node-2", "--label", "control_node=gpu-node-1", "--playbooks", playbooks,
        "--database-url", f"sqlite:///{tmp_path / 'absent.db'}",
    )  # fmt: skip

    shown = cli(*args)

    assert shown.exit_code == 0, shown.output
    assert "playbook fail-slow -> target gpu-node-2" in shown.stdout
    assert "step 1 restart [training.command @ node] on gpu-node-1\n" in shown.stdout
    assert "step 0 tell [log @ cluster]\n" in shown.stdout
    report = json.loads(cli(*args, "--json").stdout)
    tell, restart = report["alerts"][0]["playbooks"][0]["steps"]
    assert "node" not in tell
    assert restart["node"] == "gpu-node-1"
    assert restart["plan"]["ran_on"] == "gpu-node-1 (server)"
    assert restart["plan"]["can_act"] is True
