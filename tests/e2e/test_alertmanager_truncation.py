"""End to end: the real AlertManager 0.25 with a `max_alerts` cap on its receiver, posting to the real
`remediate serve`. AlertManager sends the first `max_alerts` alerts of the group and counts the rest in
`truncatedAlerts`; remediate runs the alerts it got and records the ones it did not: a `truncated`
decision in /history, remediate_alerts_truncated_total and a WARNING line in its log.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.realsystems import AlertManager
from tests.support.server import RemediateServer, write_playbook
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]

ALERTNAME = "E2ETruncated"
NODES = ("node-a", "node-b", "node-c", "node-d", "node-e")
PLAYBOOK = f"""\
name: truncated
match: {{alertname: {ALERTNAME}}}
target: node
cooldown: 0s
steps: [{{action: log, with: {{message: "hot {{{{ labels.Hostname }}}}"}}}}]
"""


def test_alerts_alertmanager_leaves_out_for_max_alerts_are_recorded_as_truncated(
    start_server: Callable[..., RemediateServer],
    start_alertmanager: Callable[..., AlertManager],
    playbooks_dir: Path,
) -> None:
    write_playbook(playbooks_dir, "truncated", PLAYBOOK)
    server = start_server()
    # One group of five alerts (group_by alertname), collected for 2 s; the receiver takes two of them.
    am = start_alertmanager(server.webhook_url, group_wait="2s", group_interval="1m", max_alerts=2)
    assert server.metric("remediate_alerts_truncated_total") == 0

    for node in NODES:
        am.fire({"alertname": ALERTNAME, "severity": "critical", "Hostname": node})

    (truncated,) = wait_until(
        lambda: server.history(status="truncated"), 30, message="no truncated decision in the history"
    )
    assert truncated["alertname"] == ALERTNAME
    assert (truncated["playbook"], truncated["target"], truncated["run_id"]) == (None, None, None)
    assert truncated["reason"].startswith(
        f'AlertManager dropped 3 alerts of group {{alertname="{ALERTNAME}"}} because of the receiver\'s max_alerts '
        "(this firing notification carried 2 of 5)"
    )
    assert truncated["notification_reason"] is None  # AlertManager 0.25 sends none
    accepted = [e for e in server.history(alertname=ALERTNAME) if e["decision"] == "accepted"]
    assert len(accepted) == 2
    assert {e["target"] for e in accepted} < set(NODES)
    assert server.metric("remediate_alerts_truncated_total") == 3
    assert server.metric("remediate_decisions_total", decision="truncated") == 1
    assert "AlertManager dropped 3 alerts of group" in server.log_tail(200)
