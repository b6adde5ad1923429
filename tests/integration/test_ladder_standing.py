"""Where a ladder stands is said as it is on every page (GET /ladders, the UI's state and node pages,
`remediate ladder status`): a rung is in force only once its run succeeded. A rung whose run failed (a
cordon the breaker refused, a sink that is not configured) moved the ladder but is NOT in force, and a rung
undone when its alert resolved says so, not the WHY it was chosen for ("first rung")."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from tests.integration.test_ladders import hot, send
from tests.integration.test_ui_pages import log_in, text
from tests.support.cli import run_cli as cli
from tests.support.http import OPERATOR_TOKEN, READ_TOKEN, Server

pytestmark = pytest.mark.usefixtures("clean_environment")

FAILING_RUNG = """\
name: hot
match: {alertname: GPUTemperatureHigh}
target: node
escalate:
  - name: drain
    holds_for: 1h
    steps: [{name: tell, action: notify, with: {sink: nowhere, message: "drained {{ labels.node }}"}}]
  - name: reset
    holds_for: 1h
    steps: [{action: log, with: {message: "reset"}}]
  - name: keep-out
    holds_for: 1h
    steps: [{action: log, with: {message: "keep out"}}]
"""

WORKING_RUNG = """\
name: hot
match: {alertname: GPUTemperatureHigh}
target: node
escalate:
  - name: drain
    holds_for: 1h
    steps: [{action: log, with: {message: "drained"}}]
    on_resolved: [{action: log, with: {message: "undo"}}]
  - name: reset
    holds_for: 1h
    steps: [{action: log, with: {message: "reset"}}]
"""


def local(server: Server) -> tuple[str, ...]:
    return ("--database-url", server.database_url, "--playbooks", server.services.settings.engine.playbooks)


def test_a_rung_whose_run_failed_is_not_in_force_on_any_page(make_server: Callable[..., Server]) -> None:
    server = make_server(playbooks={"hot.yaml": FAILING_RUNG})
    (run_id,) = send(server, hot(1))["runs"]
    log_in(server, OPERATOR_TOKEN)
    queued = text(server.client.get("/ui/state"))
    link = rf'<a href="/ui/runs/{run_id}">run #{run_id}</a>'
    pending = rf'data-state="pending">on rung 1 of 3 \(drain\) since 20[\d: -]+Z: its {link} is queued'
    pending += ", not in force yet<"
    assert re.search(pending, queued), queued
    server.drain()
    assert server.get(f"/runs/{run_id}").get_json()["status"] == "failed"

    (ladder,) = server.get("/ladders?target=node-a", token=READ_TOKEN).get_json()["ladders"]
    assert (ladder["rung"], ladder["run_status"], ladder["standing"], ladder["in_force"]) == (
        1, "failed", "not_in_force", False,
    )  # fmt: skip
    for page in (text(server.client.get("/ui/state")), text(server.client.get("/ui/nodes/node-a"))):
        assert "in force since" not in page
        failed = rf'data-state="not-in-force">on rung 1 of 3 \(drain\) since 20[\d: -]+Z: its {link} failed, so the'
        assert re.search(failed + " rung is NOT in force<", page), page

    table = cli("ladder", "status", *local(server))
    assert table.exit_code == 0, table.output
    assert f"NOT in force: run {run_id} failed" in table.stdout and "in force since" not in table.stdout


def test_a_rung_that_succeeded_is_in_force_and_after_its_undo_the_cli_says_resolved_not_first_rung(
    make_server: Callable[..., Server],
) -> None:
    server = make_server(playbooks={"hot.yaml": WORKING_RUNG})
    send(server, hot(1))
    server.drain()
    (ladder,) = server.get("/ladders", token=READ_TOKEN).get_json()["ladders"]
    assert (ladder["standing"], ladder["in_force"]) == ("in_force", True)
    log_in(server, OPERATOR_TOKEN)
    assert 'data-state="firing">on rung 1 of 2 (drain), in force since' in text(server.client.get("/ui/nodes/node-a"))
    firing = cli("ladder", "status", *local(server))
    assert "in force since" in firing.stdout, firing.output

    send(server, hot(1, "resolved"))
    server.drain()
    undone = cli("ladder", "status", *local(server))
    (row,) = [line for line in undone.stdout.splitlines() if line.startswith("node-a")]
    assert "resolved 20" in row and "no longer in force" in row, undone.stdout
    assert "in force since" not in row
    assert row.index("no longer in force") < row.index("first rung")  # the WHY comes after what holds now
