"""Issue 27, deliverable 4: the CLI papercuts a new user hit, each pinned (CliRunner on real SQLite stores,
a real HTTP server in a thread for --server, and real `remediate serve` processes where the finding was one)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import run_cli as cli
from tests.support.http import LOG_DISK, LOG_XID, OPERATOR_TOKEN, Server, alert, notification

pytestmark = pytest.mark.usefixtures("clean_environment")


def db_args(server: Server) -> list[str]:
    return ["--database-url", server.database_url, "--playbooks", str(server.services.settings.engine.playbooks)]


@pytest.fixture
def two_alerts(make_server: Callable[..., Server]) -> Server:
    """A decision on an xid alert and one on a disk alert, both made just now."""
    server = make_server(playbooks={"xid.yaml": LOG_XID, "disk.yaml": LOG_DISK})
    server.webhook(notification(alert("x-a", Hostname="node-a")))
    server.webhook(notification(alert("d-b", alertname="NodeFilesystemAlmostOutOfSpace", instance="node-b:9100")))
    return server


# --------------------------------------------------------------------------- 1. durations in --since/--until


@pytest.mark.parametrize("via", ["database", "server"])
def test_history_takes_durations_in_since_and_until_as_report_does(
    two_alerts: Server, serve: Callable[[Server], str], monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    """`history --since 1h` was refused ("must be an RFC 3339 time") while `report --since 7d` worked."""
    monkeypatch.setenv("REMEDIATE_OPERATOR_TOKEN", OPERATOR_TOKEN)
    where = db_args(two_alerts) if via == "database" else ["--server", serve(two_alerts)]

    last_hour = cli("history", "--json", "--since", "1h", *where)
    before_an_hour_ago = cli("history", "--json", "--until", "1h", *where)
    report = cli("report", "--json", "--since", "1h", "--until", "0s", *where)

    assert last_hour.exit_code == 0, last_hour.output
    assert len(json.loads(last_hour.stdout)["entries"]) == 2
    assert before_an_hour_ago.exit_code == 0, before_an_hour_ago.output
    assert json.loads(before_an_hour_ago.stdout)["entries"] == []
    assert report.exit_code == 0, report.output
    assert json.loads(report.stdout)["totals"]["incidents"] == 2
