"""Escalation ladders through the Flask app (SQLite and PostgreSQL): /history and /runs/<id> show the rung,
GET /ladders and POST /ladders/reset, `remediate ladder status/reset` and `remediate dry-run`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli as cli
from tests.support.http import ON_EVERY_DATABASE, OPERATOR_TOKEN, READ_TOKEN, Server, alert, notification

pytestmark = pytest.mark.usefixtures("clean_environment")

HOT_LADDER = """\
name: hot
match: {alertname: GPUTemperatureHigh}
target: node
reset_after: 2h
escalate:
  - name: cap-power
    holds_for: 1h
    steps: [{action: log, with: {message: "cap {{ labels.node }}"}}]
    on_resolved: [{action: log, with: {message: "uncap"}}]
  - name: lock-clocks
    holds_for: 1h
    steps: [{action: log, with: {message: "lock"}}]
    on_resolved: [{action: log, with: {message: "unlock"}}]
  - name: cordon
    holds_for: 1h
    mode: approve
    steps: [{action: log, with: {message: "cordon"}}]
"""


def hot(minute: int, status: str = "firing") -> dict[str, Any]:
    """An occurrence of the alert on node-a: occurrences differ by their startsAt."""
    starts = f"2026-11-21T05:{minute:02d}:00Z"
    return alert("hot-a", alertname="GPUTemperatureHigh", status=status, starts_at=starts, node="node-a")


def send(server: Server, payload: dict[str, Any]) -> dict[str, Any]:
    response = server.webhook(notification(payload))
    assert response.status_code == 200, response.get_json()
    return dict(response.get_json())


@ON_EVERY_DATABASE
def test_a_ladder_climbs_shows_its_rung_everywhere_and_an_operator_resets_it(
    make_server: Callable[..., Server],
) -> None:
    server = make_server(playbooks={"hot.yaml": HOT_LADDER})

    send(server, hot(1))
    send(server, hot(1, "resolved"))
    (second_run,) = send(server, hot(2))["runs"]
    send(server, hot(2, "resolved"))
    (third_run,) = send(server, hot(3))["runs"]

    firing = [e for e in server.history(playbook="hot")["entries"] if e["alert_status"] == "firing"]
    assert [(e["rung"], e["run"]["rung"], e["status"]) for e in reversed(firing)] == [
        (1, 1, "queued"), (2, 2, "queued"), (3, 3, "awaiting_approval"),
    ]  # fmt: skip
    undo = next(e for e in server.history(playbook="hot")["entries"] if e["alert_status"] == "resolved")
    assert undo["rung"] is None and undo["reason"].endswith("; undoes rungs 2")
    run = server.get(f"/runs/{second_run}").get_json()
    assert run["rung"] == 2
    assert run["ladder"]["rung"] == 2 and run["ladder"]["of"] == 3 and run["ladder"]["name"] == "lock-clocks"
    assert (
        run["ladder"]["why"].startswith("re-fired ") and "after rung 1 resolved (holds_for 1h)" in run["ladder"]["why"]
    )
    (ladder,) = server.get("/ladders?target=node-a", token=READ_TOKEN).get_json()["ladders"]
    assert (ladder["rung"], ladder["of"], ladder["name"], ladder["run_id"]) == (3, 3, "cordon", third_run)
    assert [step["rung"] for step in ladder["climb"]] == [1, 2, 3]
    assert server.get("/ladders?target=node-b").get_json() == {"ladders": []}

    refused = server.post("/ladders/reset", json={"target": "node-a"}, token=READ_TOKEN)
    missing = server.post("/ladders/reset", json={"reason": "no target"})
    unknown = server.post("/ladders/reset", json={"target": "node-z"})
    reset = server.post("/ladders/reset", json={"target": "node-a", "reason": "replaced the fan"})

    assert refused.status_code == 403
    assert (missing.status_code, missing.get_json()["field"]) == (400, "target")
    assert unknown.status_code == 404
    assert reset.status_code == 200, reset.get_json()
    (after,) = reset.get_json()["ladders"]
    assert (after["rung"], after["name"], after["climb"]) == (0, None, [])
    assert after["reason"] == "reset by operator: replaced the fan"
    # The approve rung's run is still waiting; the next occurrence starts over on rung 1.
    (fourth_run,) = send(server, hot(4))["runs"]
    fourth = server.get(f"/runs/{fourth_run}").get_json()
    assert fourth["ladder"]["rung"] == 1
    assert fourth["ladder"]["why"] == "first rung (the ladder was reset: reset by operator: replaced the fan)"


@ON_EVERY_DATABASE
@pytest.mark.parametrize("shadow", ["server", "playbook"])
def test_shadow_runs_do_not_climb_so_the_first_enforced_incident_starts_on_rung_1(
    make_server: Callable[..., Server], shadow: str
) -> None:
    """A `mode: dry-run` run moved the real ladder to rung 1, so after a week of
    shadow mode the first real incident started on rung 2. Shadow runs (the server's mode: dry-run, or
    the playbook's) record the rung an enforced run would take now and leave the ladder where it is."""
    ladder = HOT_LADDER.replace("    mode: approve\n", "")  # no rung of its own mode: the playbook's decides
    shadow_ladder = ladder.replace("reset_after: 2h\n", "reset_after: 2h\nmode: dry-run\n")
    if shadow == "server":
        watching = make_server(playbooks={"hot.yaml": ladder}, mode="dry-run")
    else:
        watching = make_server(playbooks={"hot.yaml": shadow_ladder})

    (first,) = send(watching, hot(1))["runs"]
    send(watching, hot(1, "resolved"))
    (second,) = send(watching, hot(2))["runs"]  # re-fired within holds_for: enforce would climb

    for run_id in (first, second):
        run = watching.get(f"/runs/{run_id}").get_json()
        assert (run["mode"], run["rung"], run["ladder"]["name"]) == ("dry-run", 1, "cap-power")
    entry = next(e for e in watching.history(playbook="hot")["entries"] if e["run_id"] == second)
    assert entry["reason"].endswith("rung 1 of 3 (cap-power): first rung; shadow (dry-run): the ladder does not move")
    assert watching.store.ladders.read() == []
    send(watching, hot(2, "resolved"))

    # Switched to enforce on the same database: the first real incident gets the gentle rung.
    enforcing = make_server(playbooks={"hot.yaml": ladder}, database_url=watching.database_url)
    (real,) = send(enforcing, hot(3))["runs"]

    run = enforcing.get(f"/runs/{real}").get_json()
    assert (run["mode"], run["rung"], run["ladder"]["why"]) == ("enforce", 1, "first rung")
    (state,) = enforcing.store.ladders.read()
    assert (state.rung, state.run_id) == (1, real)


def test_the_cli_shows_and_resets_ladders_from_the_database_and_a_server(
    make_server: Callable[..., Server], serve: Callable[[Server], str]
) -> None:
    server = make_server(playbooks={"hot.yaml": HOT_LADDER})
    send(server, hot(1))
    send(server, hot(2))
    local = ("--database-url", server.database_url, "--playbooks", server.services.settings.engine.playbooks)

    table = cli("ladder", "status", *local)
    as_json = cli("ladder", "status", "--target", "node-a", "--json", *local)
    remote = cli("ladder", "status", "--json", "--server", serve(server), env={"REMEDIATE_TOKEN": READ_TOKEN})
    reset = cli("ladder", "reset", "node-a", "--reason", "swapped", "--server", serve(server),
                env={"REMEDIATE_OPERATOR_TOKEN": OPERATOR_TOKEN})  # fmt: skip
    none = cli("ladder", "reset", "node-z", *local)

    assert table.exit_code == 0, table.output
    assert "node-a" in table.stdout and "2/3 (lock-clocks)" in table.stdout and "1 -> 2" in table.stdout
    (listed,) = json.loads(as_json.stdout)["ladders"]
    assert (listed["rung"], listed["of"], listed["name"]) == (2, 3, "lock-clocks")
    assert json.loads(remote.stdout)["ladders"] == [listed]
    assert reset.exit_code == 0, reset.output
    assert "1 ladder(s) of node-a reset" in reset.stdout and "reset by operator (note: tester): swapped" in reset.stdout
    assert none.exit_code == 3 and "no ladder for target node-z" in none.stderr  # not found
    (after,) = server.store.ladders.read()
    assert after.rung == 0


def test_dry_run_says_which_rung_would_run_now_and_writes_nothing(make_server: Callable[..., Server]) -> None:
    server = make_server(playbooks={"hot.yaml": HOT_LADDER})
    send(server, hot(1))
    local = ("--database-url", server.database_url, "--playbooks", server.services.settings.engine.playbooks)

    result = cli("dry-run", "--alertname", "GPUTemperatureHigh", "--label", "node=node-a", "--json", *local)
    printed = cli("dry-run", "--alertname", "GPUTemperatureHigh", "--label", "node=node-a", *local)

    (entry,) = json.loads(result.stdout)["alerts"]
    (playbook,) = entry["playbooks"]
    assert playbook["ladder"]["rung"] == 2 and playbook["ladder"]["name"] == "lock-clocks"
    assert (
        playbook["ladder"]["why"].startswith("re-fired ")
        and "after rung 1 ran (holds_for 1h)" in playbook["ladder"]["why"]
    )
    assert [step["params"]["message"] for step in playbook["steps"]] == ["lock"]
    assert "ladder: rung 2 of 3 (lock-clocks) would run: re-fired" in printed.stdout
    (ladder,) = server.store.ladders.read()
    assert ladder.rung == 1


def test_playbooks_validate_refuses_a_ladder_that_can_never_advance_and_warns_of_a_one_rung_ladder(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "pb"
    directory.mkdir()
    (directory / "hot.yaml").write_text(HOT_LADDER.replace("name: hot\n", "name: hot\ncooldown: 1h\n"))
    one_rung = HOT_LADDER.split("  - name: lock-clocks")[0].replace("name: hot\n", "name: single\n")
    (directory / "single.yaml").write_text(one_rung)

    result = cli("playbooks", "validate", directory)

    assert result.exit_code == 1
    assert "ok      " in result.stdout and "(single)" in result.stdout
    assert "warning " in result.stderr and "a one-rung ladder never climbs" in result.stderr
    assert "playbook 'hot'" in result.stderr and "field cooldown" in result.stderr
    assert "cooldown 1h >= holds_for 1h of rung 1 (cap-power)" in result.stderr
