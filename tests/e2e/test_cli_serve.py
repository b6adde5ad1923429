"""CLI papercuts that need real processes: `approve --wait` prints the outcome of the run it approved
(a real `remediate serve`: gunicorn, its executor process); each process of `remediate serve` and `remediate agent`
is titled by its role in ps."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.http import alert, notification
from tests.support.processes import child_pids, run_remediate
from tests.support.realsystems import free_port
from tests.support.server import TOKEN, WAIT, NodeAgent, RemediateServer
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

APPROVED_LOG = """\
name: approved-log
match: {alertname: FixMe}
mode: approve
target: node
steps:
  - action: log
    with: {message: "fixing {{ labels.node }}"}
"""

APPROVED_FAILING = f"""\
name: approved-failing
match: {{alertname: BreakMe}}
mode: approve
target: node
steps:
  - action: notify.webhook
    retries: 0
    with: {{url: "http://127.0.0.1:{free_port()}/nobody-listens"}}
"""


def test_approve_wait_prints_the_outcome_and_exits_5_when_the_run_failed(tmp_path: Path) -> None:
    """`approve` returned at once; the run failed 8 s later, unseen. --wait waits and says how it ended."""
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    (playbooks / "log.yaml").write_text(APPROVED_LOG, encoding="utf-8")
    (playbooks / "failing.yaml").write_text(APPROVED_FAILING, encoding="utf-8")
    with RemediateServer(tmp_path / "server", playbooks, workers=1) as server:
        for name in ("FixMe", "BreakMe"):
            sent = server.post_webhook(notification(alert(f"{name}-a", alertname=name, node="node-a")))
            assert sent.status_code == 200, sent.text
        ok, broken = (
            server.wait_for_run(status="awaiting_approval", alertname=name)["run_id"] for name in ("FixMe", "BreakMe")
        )

        def approve(run_id: int) -> subprocess.CompletedProcess[str]:
            return run_remediate(
                "approve", str(run_id), "--wait", "--timeout", f"{scaled(WAIT):g}s", "--server", server.url,
                env={"REMEDIATE_TOKEN": TOKEN}, timeout=WAIT + 30,
            )  # fmt: skip

        succeeded = approve(ok)
        failed = approve(broken)
        detail = server.run(broken)

    assert succeeded.returncode == 0, succeeded.stderr
    assert succeeded.stdout.splitlines()[-1].startswith(f"run {ok} succeeded in ")
    assert failed.returncode == 5, failed.stdout + failed.stderr
    assert detail["status"] == "failed"
    assert failed.stdout.splitlines()[-1].startswith(f"run {broken} failed in ")
    assert failed.stdout.splitlines()[-1].endswith(detail["error"])


def title(pid: int) -> str:
    """What ps shows as the process's command line (setproctitle rewrites it)."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()


def test_each_process_of_serve_and_agent_is_titled_by_its_role(tmp_path: Path) -> None:
    """Every process showed as `python -B -P -c import sys; ...` (or `python -m remediate serve ...`) in ps."""
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    (playbooks / "log.yaml").write_text(APPROVED_LOG, encoding="utf-8")
    with RemediateServer(tmp_path / "server", playbooks, workers=2) as server:
        master = server.pid

        def children() -> list[str] | None:
            titles = sorted(title(pid) for pid in child_pids(master))
            return titles if titles == ["remediate: executor", "remediate: http", "remediate: http"] else None

        found = wait_until(children, scaled(10), interval=0.1,
                           message=f"children of the master: {[title(p) for p in child_pids(master)]}")  # fmt: skip
        master_title = title(master)
    agent = NodeAgent(tmp_path / "agent", "node-a").start()
    try:
        agent_title = title(agent.pid)
    finally:
        agent.stop()

    assert master_title == "remediate: master"
    assert found == ["remediate: executor", "remediate: http", "remediate: http"]
    assert agent_title == "remediate: agent"
