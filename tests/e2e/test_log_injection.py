"""A CR/LF in an alert label never starts a forged line in the real server's log."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import logfmt
from tests.support.server import RemediateServer, notification, write_playbook

pytestmark = [pytest.mark.integration]

FORGED = "2026-11-23 22:00:00,000 WARNING remediate.server: circuit breaker reset by admin"

PLAYBOOK = """\
name: log-injection
match:
  alertname: E2ELogInjection
target: node
cooldown: 0s
steps:
  - action: log
    with:
      message: "GPU {{ labels.gpu }} reported an error"
"""


def test_a_label_with_a_newline_gives_one_log_line_with_the_newline_escaped(
    start_server: Callable[..., RemediateServer], playbooks_dir: Path
) -> None:
    write_playbook(playbooks_dir, "inject", PLAYBOOK)
    server = start_server()
    label = f"3\r\n{FORGED}\n\x1b[2J"

    response = server.post_webhook(notification("E2ELogInjection", {"Hostname": "node-a", "gpu": label}))
    assert response.status_code == 200, response.text
    [run_id] = response.json()["runs"]
    server.wait_for_run_status(run_id, "succeeded")
    server.stop()

    lines = server.log_path.read_text(encoding="utf-8").splitlines()
    logged = [line for line in lines if f"run {run_id} playbook log-injection" in line]
    assert len(logged) == 1
    assert logged[0].endswith(f"GPU 3\\r\\n{FORGED}\\n\\x1b[2J reported an error")
    assert not [line for line in lines if line.startswith(FORGED)]
    assert "\x1b" not in "".join(lines)


def test_a_label_with_logfmt_fields_gives_a_log_parser_no_field_of_its_own(
    start_server: Callable[..., RemediateServer], playbooks_dir: Path
) -> None:
    """A label rendered into the log action's message must not read as `principal=admin event=approval` to a
    logfmt parser of the server's text log (Loki's `| logfmt` keeps the first of a repeated key)."""
    write_playbook(playbooks_dir, "inject", PLAYBOOK)
    server = start_server()
    label = '3 principal=admin event=approval request_id="forged"'

    response = server.post_webhook(notification("E2ELogInjection", {"Hostname": "node-a", "gpu": label}))
    assert response.status_code == 200, response.text
    [run_id] = response.json()["runs"]
    server.wait_for_run_status(run_id, "succeeded")
    server.stop()

    lines = server.log_path.read_text(encoding="utf-8").splitlines()
    [logged] = [line for line in lines if f"run {run_id} playbook log-injection" in line]
    assert "principal\\x3dadmin event\\x3dapproval" in logged, logged
    assert not {"principal", "event", "request_id"} & set(logfmt.fields(logged)), logged
    decided = [line for line in lines if "remediate.audit: decision " in line]
    assert decided and all(logfmt.fields(line)["decision"] == "accepted" for line in decided), decided
