"""The approval announcement as deployed: the real ``remediate serve`` (gunicorn, its executor process) receives
an alert for an approve-mode playbook with a notify.slack step; a local HTTP sink standing for Slack's incoming
webhook receives exactly one Block Kit message saying the run waits, with the Approve link to the run page, as
the alert arrives (before anyone approves); approving then runs the run, whose own slack step posts the usual
message. A Slack that refuses the message fails no run: the failure is on /runs/<id> and in the metric."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from tests.actions.test_notify_chat import check_slack_shape
from tests.support.realsystems import WebhookRecorder
from tests.support.server import RemediateServer, notification, write_playbook
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

PUBLIC_URL = "https://remediate.example.com"
SLACK_PATH = "/services/T000/B000/XXXX"


def playbook(slack_url: str) -> str:
    return f"""\
name: ask-before-reset
match:
  alertname: GpuXidError
target: node
mode: approve
cooldown: 0s
steps:
  - name: note
    action: log
    with: {{message: "xid on {{{{ labels.Hostname }}}}"}}
  - name: tell on-call
    action: notify.slack
    with: {{url: "{slack_url}", message: "GPU {{{{ labels.gpu }}}} of {{{{ labels.Hostname }}}}"}}
"""


@pytest.fixture
def slack() -> Iterator[WebhookRecorder]:
    with WebhookRecorder(path=SLACK_PATH) as sink:
        yield sink


@pytest.fixture
def server(
    playbooks_dir: Path, slack: WebhookRecorder, start_server: Callable[..., RemediateServer]
) -> RemediateServer:
    write_playbook(playbooks_dir, "ask-before-reset", playbook(slack.url))
    return start_server(env={"REMEDIATE_PUBLIC_URL": f"{PUBLIC_URL}/"})


def xid(host: str, fingerprint: str) -> dict[str, object]:
    return notification("GpuXidError", {"Hostname": host, "gpu": "3"}, fingerprint=fingerprint)


def approve(server: RemediateServer, run_id: int) -> None:
    response = requests.post(
        f"{server.url}/runs/{run_id}/approve", json={"by": "alice"}, headers=server.auth, timeout=scaled(10)
    )
    assert response.status_code == 200, response.text


def test_the_on_call_gets_one_message_with_the_approve_link_when_the_run_starts_waiting(
    server: RemediateServer, slack: WebhookRecorder
) -> None:
    assert server.post_webhook(xid("node-a", "aaaa000000000001")).status_code == 200
    entry = server.wait_for_run(status="awaiting_approval", playbook="ask-before-reset")
    run_id = entry["run_id"]

    message = slack.wait_for(timeout=10)
    assert (message.method, message.path) == ("POST", SLACK_PATH)
    assert message.header("Idempotency-Key") == f"remediate-run-{run_id}-awaiting-approval-1"
    check_slack_shape(message.json)
    blocks = message.json["blocks"]
    assert blocks[0]["text"]["text"] == "🔥 GpuXidError on node-a"
    assert blocks[1]["text"]["text"] == "GpuXidError test\nGPU 3 of node-a"
    assert blocks[2]["text"]["text"].startswith("once approved, remediate runs playbook ask-before-reset (2 steps):")
    assert blocks[3]["fields"][0]["text"] == "*Status*\nwaiting for approval"
    link = f"{PUBLIC_URL}/ui/runs/{run_id}"
    assert [(b["text"]["text"], b["url"]) for b in blocks[-1]["elements"]] == [
        (f"Open run {run_id}", link),
        ("Approve", link),
    ]
    detail = wait_until(lambda: (d := server.run(run_id))["announce_error"] is None and d, 10)
    assert detail["status"] == "awaiting_approval"  # nothing ran: only the message went out
    assert detail["announced_at"] is not None and detail["started_at"] is None
    assert [s["status"] for s in detail["steps"]] == ["pending", "pending"]
    wait_until(lambda: server.metric("remediate_approval_announcements_total", outcome="sent") == 1, 10)

    # The same alert again is a duplicate: no second run, no second message. Approving runs the run.
    assert server.post_webhook(xid("node-a", "aaaa000000000001")).status_code == 200
    approve(server, run_id)
    done = server.wait_for_run_status(run_id, "succeeded")
    assert done["approved_by"] == "token (note: alice)"
    second = slack.wait_for(lambda r: r.header("Idempotency-Key") == f"remediate-run-{run_id}-step-1", 10)
    check_slack_shape(second.json)
    assert "remediation running (approved by token (note: alice))" in second.json["text"]
    assert "Approve" not in [b["text"]["text"] for b in second.json["blocks"][-1]["elements"]]
    # Exactly these two: the run was taken once (announced_at), and it no longer awaits approval.
    assert [r.header("Idempotency-Key") for r in slack.requests] == [
        f"remediate-run-{run_id}-awaiting-approval-1",
        f"remediate-run-{run_id}-step-1",
    ]
    assert server.metric("remediate_approval_announcements_total", outcome="sent") == 1


def test_a_slack_that_refuses_the_message_fails_no_run_and_the_failure_is_shown(
    server: RemediateServer, slack: WebhookRecorder
) -> None:
    slack.status = 404  # Slack's answer to a removed webhook ("no_service")
    assert server.post_webhook(xid("node-b", "bbbb000000000002")).status_code == 200
    run_id = server.wait_for_run(status="awaiting_approval", playbook="ask-before-reset")["run_id"]

    detail = wait_until(lambda: (d := server.run(run_id))["announce_error"] and "404" in d["announce_error"] and d, 10)
    assert detail["announce_error"].startswith("step 1 tell on-call (notify.slack): POST ")
    assert detail["status"] == "awaiting_approval" and detail["announced_at"] is not None
    wait_until(lambda: server.metric("remediate_approval_announcements_total", outcome="failed") == 1, 10)
    assert len(slack.requests) == 1  # refused: not sent again

    slack.status = 200
    approve(server, run_id)
    assert server.wait_for_run_status(run_id, "succeeded")["announce_error"] == detail["announce_error"]
    assert len(slack.requests) == 2  # the step's own message


def test_a_run_stored_while_no_executor_process_ran_is_announced_once_one_runs(
    playbooks_dir: Path, slack: WebhookRecorder, start_server: Callable[..., RemediateServer]
) -> None:
    """Durable: the announcement is owed by the database, not by a wake-up. A server that only ingests
    (executor_threads 0: no executor process, no announcer) stores the waiting run; the next start's
    announcer finds it at its first look, sends it once, and a restart after that sends nothing more."""
    write_playbook(playbooks_dir, "ask-before-reset", playbook(slack.url))
    server = start_server(env={"REMEDIATE_PUBLIC_URL": PUBLIC_URL}, executor_threads=0)
    assert server.post_webhook(xid("node-c", "cccc000000000003")).status_code == 200
    run_id = server.wait_for_run(status="awaiting_approval", playbook="ask-before-reset")["run_id"]
    assert server.run(run_id)["announced_at"] is None and slack.requests == []

    server.restart(executor_threads=2)
    message = slack.wait_for(timeout=10)
    assert message.header("Idempotency-Key") == f"remediate-run-{run_id}-awaiting-approval-1"
    assert f"{PUBLIC_URL}/ui/runs/{run_id}" in [b["url"] for b in message.json["blocks"][-1]["elements"]]
    wait_until(lambda: server.run(run_id)["announce_error"] is None and server.run(run_id)["announced_at"], 10)

    server.restart(executor_threads=2)
    approve(server, run_id)
    server.wait_for_run_status(run_id, "succeeded")
    assert [r.header("Idempotency-Key") for r in slack.requests] == [
        f"remediate-run-{run_id}-awaiting-approval-1",
        f"remediate-run-{run_id}-step-1",
    ]
