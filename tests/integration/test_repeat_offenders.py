"""Repeat offenders through the server: the webhook sends a node's second remediation within the window
straight to the ladder's named rung, and GET /report, `remediate report` (database) and the state page
list the node, on a SQLite file and on PostgreSQL."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from tests.support.cli import run_cli as cli
from tests.support.http import ON_EVERY_DATABASE, READ_TOKEN, Server, alert, notification

pytestmark = pytest.mark.usefixtures("clean_environment")

XID_LADDER = """\
name: xid-ladder
match:
  alertname: GpuXidError
target: node
reset_after: 24h
repeat_offender: {count: 2, within: 7d, then: keep-out}
escalate:
  - name: drain
    holds_for: 1h
    steps: [{action: log, with: {message: "drain {{ labels.Hostname }}"}}]
  - name: reset-gpus
    holds_for: 1h
    steps: [{action: log, with: {message: "reset {{ labels.Hostname }}"}}]
  - name: keep-out
    holds_for: 12h
    steps: [{action: log, with: {message: "keep {{ labels.Hostname }} out"}}]
"""


def rfc3339(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def second_offence(make_server: Callable[..., Server]) -> tuple[Server, dict[str, object]]:
    """node-a: an XID fixed on rung 1 and resolved, then a new XID: its history entry."""
    server = make_server(playbooks={"xid-ladder.yaml": XID_LADDER})
    now = time.time()
    first = alert("x-a1", Hostname="node-a", starts_at=rfc3339(now - 600))
    server.webhook(notification(first))
    server.drain()
    server.webhook(notification({**first, "status": "resolved", "endsAt": rfc3339(now - 300)}))
    server.drain()
    assert (
        server.webhook(notification(alert("x-a2", Hostname="node-a", starts_at=rfc3339(now - 60)))).status_code == 200
    )
    server.drain()
    (entry,) = [e for e in server.history()["entries"] if e["fingerprint"] == "x-a2"]
    return server, entry


@ON_EVERY_DATABASE
def test_the_second_xid_in_a_week_goes_straight_to_keep_out_and_is_listed(
    make_server: Callable[..., Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, entry = second_offence(make_server)

    assert entry["decision"] == "accepted"
    assert "rung 3 of 3 (keep-out): 2nd remediation of node-a in 7d: straight to rung keep-out" in entry["reason"]
    assert "the ladder alone said rung 2: re-fired" in entry["reason"]
    run = server.get(f"/runs/{entry['run_id']}", token=READ_TOKEN).get_json()
    assert (run["status"], run["rung"]) == ("succeeded", 3)

    report = server.get("/report", token=READ_TOKEN).get_json()
    (offender,) = report["repeat_offenders"]
    assert {k: v for k, v in offender.items() if k != "last_run_at"} == {
        "target": "node-a",
        "playbook": "xid-ladder",
        "runs": 2,
        "window_seconds": 7 * 86400,
        "threshold": 2,
        "then": "keep-out",
    }

    # `remediate report` from the database counts by the playbooks it loads, as the server does.
    monkeypatch.setenv("REMEDIATE_PLAYBOOKS", str(server.db_path.parent / "playbooks"))
    window = ["--since", f"{time.time() - 86400:.0f}", "--until", f"{time.time() + 60:.0f}"]
    api = server.get(f"/report?since={window[1]}&until={window[3]}", token=READ_TOKEN).get_json()
    as_json = cli("report", "--json", *window, "--database-url", server.database_url)
    table = cli("report", *window, "--database-url", server.database_url)
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout) == api
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    listed = lines[lines.index("repeat offenders:") + 1 :]
    assert listed[0].split() == ["TARGET", "PLAYBOOK", "RUNS", "LAST", "RUN", "STRAIGHT", "TO"]
    assert listed[1].split()[:5] == ["node-a", "xid-ladder", "2", "in", "7d"]
    assert listed[1].split()[-1] == "keep-out"


def test_the_state_page_lists_the_repeat_offenders(make_server: Callable[..., Server]) -> None:
    server, _ = second_offence(make_server)
    form = server.client.get("/ui/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', form.get_data(as_text=True))
    assert token is not None
    server.client.post("/ui/login", data={"token": READ_TOKEN, "csrf_token": token.group(1)})

    page = server.client.get("/ui/state").get_data(as_text=True)

    section = page[page.index('<section id="repeat-offenders">') :]
    assert "Repeat offenders (1)" in section
    (row,) = re.findall(r'<tr class="offender">(.*?)</tr>', section, re.S)
    cells = [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td>(.*?)</td>", row, re.S)]
    assert cells[:3] == ["node-a", "xid-ladder", "2 in 7d (count 2)"]
    assert cells[4] == "keep-out"
