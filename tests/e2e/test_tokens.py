"""Issue 15, finding 12b end to end: a real AlertManager with the webhook-only token -> the real server.

AlertManager's token gets its notifications in, and nothing else: approving, pausing and resetting
the breaker with it are 403 over real HTTP; the operator token does them, and the history records
the operator as who did, not the name the body claims.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from tests.support.realsystems import AlertManager
from tests.support.server import RemediateServer, write_playbook

pytestmark = [pytest.mark.integration]

WEBHOOK_TOKEN = "e2e-webhook-only-token-77"
OPERATOR_TOKEN = "e2e-operator-token-88"

PLAYBOOK = """\
name: approve-me
match:
  alertname: E2ESplitTokens
mode: approve
target: node
steps:
  - action: log
    with: {message: "approved on {{ labels.Hostname }}"}
"""


def test_alertmanagers_webhook_token_delivers_but_cannot_approve_pause_or_reset(
    start_server: Callable[..., RemediateServer],
    start_alertmanager: Callable[..., AlertManager],
    playbooks_dir: Path,
) -> None:
    write_playbook(playbooks_dir, "approve-me", PLAYBOOK)
    server = start_server(
        token=OPERATOR_TOKEN,  # the harness's own reads and writes use the operator token
        env={
            "REMEDIATE_TOKEN": "",
            "REMEDIATE_TOKEN_ROLES": "webhook",
            "REMEDIATE_WEBHOOK_TOKEN": WEBHOOK_TOKEN,
            "REMEDIATE_OPERATOR_TOKEN": OPERATOR_TOKEN,
        },
    )
    am = start_alertmanager(server.webhook_url, token=WEBHOOK_TOKEN, group_wait="1s", group_interval="1s")
    am.fire({"alertname": "E2ESplitTokens", "severity": "critical", "Hostname": "node-a"})
    entry = server.wait_for_run(status="awaiting_approval", playbook="approve-me")

    def post(path: str, token: str) -> requests.Response:
        return requests.post(
            server.url + path, json={"by": "mallory"}, headers={"Authorization": f"Bearer {token}"}, timeout=10
        )

    for path in (f"/runs/{entry['run_id']}/approve", "/pause", "/breaker/reset"):
        refused = post(path, WEBHOOK_TOKEN)
        assert refused.status_code == 403, (path, refused.text)
        assert refused.json()["principal"] == "webhook"
    assert post(f"/runs/{entry['run_id']}/approve", OPERATOR_TOKEN).status_code == 200
    done = server.wait_for_run_status(entry["run_id"], "succeeded")
    assert done["approved_by"] == "operator (note: mallory)"
