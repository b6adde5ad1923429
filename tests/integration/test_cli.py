"""The `remediate` command line, run through click's CliRunner on real playbook files, real SQLite
stores and (for --server) a real HTTP server in a thread; plus one real `python -m remediate`."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import click
import pytest
import requests

from remediate.cli import main
from remediate.cli._common import rfc3339_times
from tests.support.cli import assert_one_line_error, sqlite_dump
from tests.support.cli import run_cli as cli
from tests.support.http import (
    APPROVE_XID,
    LOG_DISK,
    LOG_XID,
    OPERATOR_TOKEN,
    Server,
    alert,
    notification,
    real_firing,
)
from tests.support.processes import run_remediate
from tests.support.realsystems import free_port
from tests.support.waiting import scaled

pytestmark = pytest.mark.usefixtures("clean_environment")

REPO = Path(__file__).resolve().parents[2]
SHIPPED_PLAYBOOKS = REPO / "playbooks"
FIRING_JSON = REPO / "tests" / "fixtures" / "payloads" / "am-0.25-firing.json"

XID_COOLDOWN = """\
name: xid-cooldown
match:
  alertname: GpuXidError
target: node
cooldown: 1h
steps:
  - action: log
    with: {message: "XID on GPU {{ labels.gpu | default('?') }} of {{ labels.Hostname | default('?') }}"}
"""


def command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and group under `group`, as the words typed to reach it."""
    found = [prefix]
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            found.extend(command_paths(command, (*prefix, name)))
        else:
            found.append((*prefix, name))
    return found


COMMANDS = command_paths(main)


def db_args(server: Server) -> list[str]:
    playbooks = server.services.settings.engine.playbooks
    return ["--database-url", f"sqlite:///{server.db_path}", "--playbooks", str(playbooks)]


@pytest.fixture
def xid_server(make_server: Callable[..., Server]) -> Server:
    """A store with one firing GpuXidError from node-a, judged by the log-xid playbook, not yet run."""
    server = make_server(playbooks={"xid.yaml": LOG_XID})
    server.webhook(notification(alert("f-node-a", Hostname="node-a")))
    return server


# --------------------------------------------------------------------------- help


def test_the_documented_commands_all_exist() -> None:
    documented = {"serve", "dry-run", "history", "show", "approve", "pause", "resume"}
    playbook_commands = {("playbooks", "list"), ("playbooks", "validate")}

    assert {(name,) for name in documented} | playbook_commands <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "remediate")
def test_every_command_has_help(command: tuple[str, ...]) -> None:
    result = cli(*command, "--help")

    assert result.exit_code == 0
    assert result.stdout.startswith("Usage: ")
    assert "--help" in result.stdout


def test_python_dash_m_remediate_help_works_as_a_real_process(tmp_path: Path) -> None:
    done = run_remediate("--help", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: ")
    for command in ("serve", "dry-run", "playbooks", "history", "show", "approve", "pause", "resume"):
        assert command in done.stdout
    assert done.stderr == ""


# --------------------------------------------------------------------------- playbooks


def test_playbooks_list_shows_a_table_of_the_shipped_playbooks() -> None:
    result = cli("playbooks", "list", "--playbooks", SHIPPED_PLAYBOOKS)

    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "ALERTS", "MODE", "STEPS", "ON", "RESOLVED"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert "notify" in rows["notify-oncall"].split()
    assert "GPUTemperatureCritical" in rows["notify-oncall"]


def test_playbooks_list_json_describes_every_playbook(tmp_path: Path) -> None:
    directory = tmp_path / "pb"
    directory.mkdir()
    (directory / "xid.yaml").write_text(LOG_XID, encoding="utf-8")
    (directory / "approve.yaml").write_text(APPROVE_XID, encoding="utf-8")

    result = cli("playbooks", "list", "--json", "--playbooks", directory)

    assert result.exit_code == 0
    listed = {p["name"]: p for p in json.loads(result.stdout)}
    assert set(listed) == {"log-xid", "approve-xid"}
    assert listed["log-xid"]["alertnames"] == ["GpuXidError"]
    assert listed["log-xid"]["matchers"] == ['severity="critical"']
    assert listed["log-xid"]["steps"] == ["log"]
    assert listed["log-xid"]["on_resolved"] == ["log"]
    assert listed["log-xid"]["file"] == str(directory / "xid.yaml")
    assert listed["approve-xid"]["mode"] == "approve"


def test_playbooks_validate_accepts_the_shipped_playbooks() -> None:
    shipped = sorted([*SHIPPED_PLAYBOOKS.glob("*.yaml"), *SHIPPED_PLAYBOOKS.glob("*.yml")])

    result = cli("playbooks", "validate", SHIPPED_PLAYBOOKS)

    assert result.exit_code == 0, result.output
    assert result.stdout.strip().endswith(f"{len(shipped)} playbooks valid")
    for path in shipped:
        assert str(path) in result.stdout


def test_playbooks_validate_takes_the_directory_as_serve_and_dry_run_do(tmp_path: Path) -> None:
    """`validate` took only a positional directory while serve/dry-run take --playbooks."""
    (tmp_path / "empty").mkdir()

    flag = cli("playbooks", "validate", "--playbooks", SHIPPED_PLAYBOOKS)
    both_same = cli("playbooks", "validate", SHIPPED_PLAYBOOKS, "--playbooks", SHIPPED_PLAYBOOKS)
    both_differ = cli("playbooks", "validate", SHIPPED_PLAYBOOKS, "--playbooks", tmp_path / "empty")

    assert flag.exit_code == 0, flag.output
    assert flag.stdout.strip().endswith("playbooks valid")
    assert both_same.exit_code == 0, both_same.output
    assert_one_line_error(both_differ, "two playbook directories", "give one")


def test_playbooks_validate_fails_naming_the_file_and_field_of_each_bad_playbook(tmp_path: Path) -> None:
    directory = tmp_path / "pb"
    directory.mkdir()
    (directory / "good.yaml").write_text(LOG_XID, encoding="utf-8")
    (directory / "bad-action.yaml").write_text(
        LOG_XID.replace("name: log-xid", "name: other").replace("- action: log", "- action: gpu.explode", 1),
        encoding="utf-8",
    )
    (directory / "bad-cooldown.yml").write_text(LOG_DISK + "cooldown: soon\n", encoding="utf-8")

    result = cli("playbooks", "validate", directory)

    assert result.exit_code == 1
    assert f"ok      {directory / 'good.yaml'}" in result.stdout
    errors = result.stderr.splitlines()
    assert len(errors) == 2
    action_error = next(e for e in errors if "bad-action.yaml" in e)
    assert "steps[0].action" in action_error
    assert "gpu.explode" in action_error
    cooldown_error = next(e for e in errors if "bad-cooldown.yml" in e)
    assert "field cooldown" in cooldown_error


def test_playbooks_validate_fails_on_an_empty_or_missing_directory(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()

    empty = cli("playbooks", "validate", tmp_path / "empty")
    missing = cli("playbooks", "validate", tmp_path / "missing")

    assert empty.exit_code == 1
    assert "no playbooks" in empty.stderr
    assert missing.exit_code == 1
    assert "does not exist" in missing.stderr


# --------------------------------------------------------------------------- dry-run


def test_dry_run_of_a_real_payload_shows_playbooks_decisions_and_plans_and_exits_0(tmp_path: Path) -> None:
    directory = tmp_path / "pb"
    directory.mkdir()
    (directory / "xid.yaml").write_text(LOG_XID, encoding="utf-8")
    absent = tmp_path / "absent.db"

    result = cli("dry-run", FIRING_JSON, "--playbooks", directory, "--database-url", f"sqlite:///{absent}")

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "does not exist yet" in out
    assert "alert GpuXidError (firing, fingerprint c5801e9cde93e74f)" in out
    assert "playbook log-xid -> target alert/c5801e9cde93e74f, mode enforce" in out
    assert "decision: accepted" in out
    assert '"would_log": "XID on GPU 3 since 2026-11-21T05:40:14.652668659Z"' in out
    assert out.strip().endswith("would run: yes")
    assert not absent.exists()


def test_dry_run_with_alertname_and_labels_builds_the_alert_and_exits_0(tmp_path: Path) -> None:
    directory = tmp_path / "pb"
    directory.mkdir()
    (directory / "xid.yaml").write_text(XID_COOLDOWN, encoding="utf-8")

    result = cli(
        "dry-run",
        "--alertname",
        "GpuXidError",
        "--label",
        "Hostname=node-a",
        "--label",
        "gpu=3",
        "--playbooks",
        directory,
        "--database-url",
        f"sqlite:///{tmp_path / 'absent.db'}",
    )

    assert result.exit_code == 0, result.output
    assert "playbook xid-cooldown -> target node-a" in result.stdout
    assert '"would_log": "XID on GPU 3 of node-a"' in result.stdout
    assert not (tmp_path / "absent.db").exists()


def test_dry_run_json_output_parses_and_says_what_would_run(xid_server: Server) -> None:
    result = cli(
        "dry-run",
        "--json",
        "--alertname",
        "GpuXidError",
        "--label",
        "severity=critical",
        "--label",
        "gpu=5",
        *db_args(xid_server),
    )

    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert report["would_run"] is True
    assert report["paused"] is False
    (entry,) = report["alerts"]
    assert entry["alert"]["labels"] == {"alertname": "GpuXidError", "severity": "critical", "gpu": "5"}
    (playbook,) = entry["playbooks"]
    assert playbook["playbook"] == "log-xid"
    assert playbook["decision"] == "accepted"
    assert playbook["steps"][0]["plan"]["would_log"].startswith("XID on GPU 5 since ")


def test_dry_run_of_an_unmatched_alert_exits_1(xid_server: Server) -> None:
    result = cli("dry-run", "--alertname", "Watchdog", *db_args(xid_server))

    assert result.exit_code == 1
    assert "no playbook matches" in result.stdout
    assert result.stdout.strip().endswith("would run: no (no playbook matches)")


def test_dry_run_exits_1_when_a_run_in_the_database_puts_the_target_in_cooldown(
    make_server: Callable[..., Server],
) -> None:
    server = make_server(playbooks={"xid.yaml": XID_COOLDOWN})
    assert server.webhook(notification(alert("f-1", Hostname="node-a"))).get_json()["decisions"] == {"accepted": 1}
    before = sqlite_dump(server.db_path)

    same_node = cli("dry-run", "--alertname", "GpuXidError", "--label", "Hostname=node-a", *db_args(server))
    other_node = cli("dry-run", "--alertname", "GpuXidError", "--label", "Hostname=node-b", *db_args(server))

    assert same_node.exit_code == 1
    assert "decision: cooldown (last run for node-a at" in same_node.stdout
    assert other_node.exit_code == 0
    assert sqlite_dump(server.db_path) == before


def test_dry_run_of_a_payload_already_in_the_database_is_a_duplicate_and_exits_1(
    make_server: Callable[..., Server],
) -> None:
    server = make_server(playbooks={"xid.yaml": LOG_XID})
    run_id = server.webhook(real_firing()).get_json()["runs"][0]
    before = sqlite_dump(server.db_path)

    result = cli("dry-run", FIRING_JSON, *db_args(server))

    assert result.exit_code == 1
    assert f"decision: duplicate (already recorded as run {run_id}" in result.stdout
    assert sqlite_dump(server.db_path) == before


def test_dry_run_while_paused_says_so_and_exits_1(xid_server: Server) -> None:
    xid_server.post("/pause", json={"reason": "maintenance", "by": "alice"})

    result = cli("dry-run", "--alertname", "GpuXidError", "--label", "severity=critical", *db_args(xid_server))

    assert result.exit_code == 1
    assert "PAUSED" in result.stdout
    assert "decision: paused (remediation is paused by operator (note: alice): maintenance)" in result.stdout


def test_dry_run_of_an_alert_missing_a_label_the_playbook_needs_is_rejected_and_exits_1(xid_server: Server) -> None:
    result = cli("dry-run", "--alertname", "GpuXidError", "--label", "severity=critical", *db_args(xid_server))

    assert result.exit_code == 1
    assert "decision: rejected (steps[0]" in result.stdout
    assert "gpu" in result.stdout
    assert result.stdout.strip().endswith("would run: no (playbook log-xid: rejected)")


def test_dry_run_reads_the_payload_from_stdin(xid_server: Server) -> None:
    payload = notification(alert("from-stdin", Hostname="node-z"))

    result = cli("dry-run", "-", "--json", *db_args(xid_server), input=json.dumps(payload))

    assert result.exit_code == 0
    assert json.loads(result.stdout)["alerts"][0]["playbooks"][0]["target"] == "node-z"


def test_dry_run_writes_nothing_to_an_existing_database(xid_server: Server) -> None:
    before = sqlite_dump(xid_server.db_path)

    result = cli(
        "dry-run",
        "--alertname",
        "GpuXidError",
        "--label",
        "severity=critical",
        "--label",
        "gpu=1",
        *db_args(xid_server),
    )

    assert result.exit_code == 0
    assert sqlite_dump(xid_server.db_path) == before


def test_dry_run_of_an_invalid_json_file_is_a_one_line_error_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": "4", ', encoding="utf-8")

    result = cli("dry-run", bad, "--playbooks", SHIPPED_PLAYBOOKS)

    assert_one_line_error(result, "bad.json", "not valid JSON")


def test_dry_run_of_a_payload_alertmanager_would_not_send_names_the_field(tmp_path: Path) -> None:
    payload = real_firing()
    payload["alerts"][0]["startsAt"] = "yesterday"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(payload), encoding="utf-8")

    result = cli("dry-run", path, "--playbooks", SHIPPED_PLAYBOOKS)

    assert_one_line_error(result, "alerts[0].startsAt")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        pytest.param([str(FIRING_JSON), "--alertname", "GpuXidError"], ["either PAYLOAD"], id="payload-and-alertname"),
        pytest.param([], ["either PAYLOAD"], id="neither"),
        pytest.param(["--alertname", "GpuXidError", "--label", "novalue"], ["K", "novalue"], id="label-without-equals"),
        pytest.param(["/nonexistent/payload.json"], ["cannot read", "payload.json"], id="missing-file"),
    ],
)
def test_dry_run_with_bad_arguments_is_a_one_line_error_exit_2(args: list[str], words: list[str]) -> None:
    result = cli("dry-run", *args, "--playbooks", SHIPPED_PLAYBOOKS)

    assert_one_line_error(result, *words)


# --------------------------------------------------------------------------- history


@pytest.fixture
def history_server(make_server: Callable[..., Server]) -> Server:
    """Three decisions: a succeeded xid run on node-a, a queued disk run on node-b, an unmatched Watchdog."""
    server = make_server(playbooks={"xid.yaml": LOG_XID, "disk.yaml": LOG_DISK})
    server.webhook(notification(alert("x-a", Hostname="node-a")))
    server.drain()
    time.sleep(0.02)
    server.webhook(
        notification(
            alert("d-b", alertname="NodeFilesystemAlmostOutOfSpace", instance="node-b:9100"),
            alert("w-1", alertname="Watchdog"),
        )
    )
    return server


def test_history_prints_a_table_newest_first(history_server: Server) -> None:
    result = cli("history", *db_args(history_server))

    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["ID", "TIME", "ALERT", "PLAYBOOK", "TARGET", "STATUS", "RUN", "REASON"]
    assert [row.split()[3:7] for row in rows] == [
        ["Watchdog", "-", "-", "unmatched"],
        ["NodeFilesystemAlmostOutOfSpace", "log-disk", "node-b", "queued"],
        ["GpuXidError", "log-xid", "node-a", "succeeded"],
    ]


def test_history_shows_the_error_of_a_failed_run_as_its_reason(make_server: Callable[..., Server]) -> None:
    """Finding 7: the REASON of a failed run said "matched playbook ..."; it is the run's error now."""
    closed = free_port()  # nothing listens there
    failing = LOG_XID.replace(
        '  - action: log\n    with:\n      message: "XID on GPU {{ labels.gpu }} since {{ startsAt }}"',
        f"  - action: notify.webhook\n    retries: 0\n    with:\n      url: http://127.0.0.1:{closed}/hook",
    )
    server = make_server(playbooks={"xid.yaml": failing})
    server.webhook(notification(alert("x-a", Hostname="node-a")))
    server.drain()

    table = cli("history", *db_args(server))
    (entry,) = server.history()["entries"]

    assert table.exit_code == 0, table.output
    header, row = table.stdout.splitlines()
    reason = row[header.index("REASON") :]
    assert entry["status"] == "failed"
    assert entry["run"]["error"].startswith("step 0 1-notify.webhook (notify.webhook): POST")  # the /history JSON
    assert reason.startswith("step 0 1-notify.webhook (notify.webhook): POST")
    assert "matched playbook" not in row


def test_history_says_why_alertmanager_sent_a_notification_where_it_did(make_server: Callable[..., Server]) -> None:
    server = make_server(playbooks={"xid.yaml": LOG_XID})
    first = notification(alert("x-a", Hostname="node-a"))
    resend = {**first, "notification_reason": "repeat interval elapsed"}  # AlertManager 0.32+'s field
    server.webhook(first)
    server.webhook(resend)

    table = cli("history", *db_args(server))

    assert table.exit_code == 0, table.output
    header, newest, oldest = table.stdout.splitlines()
    assert newest[header.index("REASON") :].startswith("[AlertManager: repeat interval elapsed] ")
    assert "AlertManager" not in oldest  # 0.25's notifications say nothing


def test_history_json_is_the_same_page_the_api_returns_its_times_in_rfc3339(history_server: Server) -> None:
    result = cli("history", "--json", *db_args(history_server))

    assert result.exit_code == 0
    assert json.loads(result.stdout) == rfc3339_times(history_server.history())  # its times as RFC 3339


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--playbook", "log-xid"], ["GpuXidError"]),
        (["--alertname", "Watchdog"], ["Watchdog"]),
        (["--node", "node-b"], ["NodeFilesystemAlmostOutOfSpace"]),
        (["--target", "node-a"], ["GpuXidError"]),
        (["--status", "queued"], ["NodeFilesystemAlmostOutOfSpace"]),
        (["--status", "failed"], []),
    ],
)
def test_history_filters(history_server: Server, args: list[str], expected: list[str]) -> None:
    result = cli("history", "--json", *args, *db_args(history_server))

    assert result.exit_code == 0
    assert [e["alertname"] for e in json.loads(result.stdout)["entries"]] == expected


def test_history_filters_by_time_window_and_pages_with_a_cursor(history_server: Server) -> None:
    entries = history_server.history()["entries"]
    middle = (entries[-1]["time"] + entries[-2]["time"]) / 2

    since = json.loads(cli("history", "--json", "--since", str(middle), *db_args(history_server)).stdout)
    rfc3339 = datetime.fromtimestamp(middle, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    until = json.loads(cli("history", "--json", "--until", rfc3339, *db_args(history_server)).stdout)
    first = cli("history", "--limit", "2", *db_args(history_server))
    cursor = first.stdout.strip().splitlines()[-1].split("--cursor ")[1]
    rest = json.loads(cli("history", "--json", "--limit", "2", "--cursor", cursor, *db_args(history_server)).stdout)

    assert [e["alertname"] for e in since["entries"]] == ["Watchdog", "NodeFilesystemAlmostOutOfSpace"]
    assert [e["alertname"] for e in until["entries"]] == ["GpuXidError"]
    assert first.stdout.strip().splitlines()[-1].startswith("more: --cursor ")
    assert [e["alertname"] for e in rest["entries"]] == ["GpuXidError"]
    assert rest["next_cursor"] is None


def test_history_of_an_empty_store_says_nothing(make_server: Callable[..., Server]) -> None:
    result = cli("history", *db_args(make_server()))

    assert result.exit_code == 0
    assert result.stdout.strip().endswith("(nothing)")


def test_history_with_a_bad_since_is_a_one_line_error_exit_2(history_server: Server) -> None:
    result = cli("history", "--since", "last week", *db_args(history_server))

    assert_one_line_error(result, "since")


def test_history_from_a_running_server_matches_the_database(
    history_server: Server,
    serve: Callable[[Server], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = serve(history_server)
    monkeypatch.setenv("REMEDIATE_OPERATOR_TOKEN", OPERATOR_TOKEN)

    over_http = cli("history", "--json", "--server", url)
    filtered = cli("history", "--json", "--node", "node-b", "--server", url)
    table = cli("history", "--server", url)

    assert over_http.exit_code == 0, over_http.output
    assert json.loads(over_http.stdout) == json.loads(cli("history", "--json", *db_args(history_server)).stdout)
    assert [e["target"] for e in json.loads(filtered.stdout)["entries"]] == ["node-b"]
    assert "NodeFilesystemAlmostOutOfSpace" in table.stdout


def test_history_from_a_server_reads_the_token_from_a_token_file(
    history_server: Server, serve: Callable[[Server], str], tmp_path: Path
) -> None:
    url = serve(history_server)
    token_file = tmp_path / "token"
    token_file.write_text(OPERATOR_TOKEN + "\n", encoding="utf-8")

    result = cli("history", "--json", "--server", url, "--token-file", token_file)

    assert result.exit_code == 0
    assert len(json.loads(result.stdout)["entries"]) == 3


@pytest.mark.parametrize(
    ("args", "words", "code"),
    [
        pytest.param([], ["HTTP 401", "--token-file", "REMEDIATE_OPERATOR_TOKEN"], 4, id="no-token"),
        pytest.param(["--since", "last week"], ["HTTP 400", "since"], 2, id="bad-since"),
        pytest.param(["--cursor", "garbage"], ["HTTP 400", "cursor"], 2, id="bad-cursor"),
    ],
)
def test_history_from_a_server_that_refuses_is_a_one_line_error_with_its_exit_code(
    history_server: Server,
    serve: Callable[[Server], str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    words: list[str],
    code: int,
) -> None:
    """A 401 names the options that give a token, and exits 4 (refused), not 2 (usage)."""
    url = serve(history_server)
    if args:
        monkeypatch.setenv("REMEDIATE_OPERATOR_TOKEN", OPERATOR_TOKEN)

    result = cli("history", *args, "--server", url)

    assert_one_line_error(result, *words, code=code)


@pytest.mark.parametrize(
    "command", [["history"], ["show", "1"], ["approve", "1"], ["pause"], ["resume"]], ids=lambda c: c[0]
)
def test_an_unreachable_server_is_a_one_line_error_exit_2(command: list[str]) -> None:
    result = cli(*command, "--server", f"http://127.0.0.1:{free_port()}")

    assert_one_line_error(result, "cannot reach the server")


def test_a_server_url_without_a_scheme_is_a_one_line_error_exit_2() -> None:
    result = cli("history", "--server", f"127.0.0.1:{free_port()}")

    assert_one_line_error(result, "request to the server failed")


def test_a_missing_database_is_a_one_line_error_and_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"

    result = cli("history", "--database-url", f"sqlite:///{missing}")

    assert_one_line_error(result, str(missing))
    assert not missing.exists()


# --------------------------------------------------------------------------- show, approve


@pytest.fixture
def approval_server(make_server: Callable[..., Server]) -> Iterator[tuple[Server, int]]:
    server = make_server(playbooks={"approve.yaml": APPROVE_XID})
    run_id = server.webhook(real_firing()).get_json()["runs"][0]
    assert server.get(f"/runs/{run_id}").get_json()["status"] == "awaiting_approval"
    yield server, run_id


def test_show_prints_a_run_with_its_steps(xid_server: Server) -> None:
    xid_server.drain()

    text = cli("show", "1", *db_args(xid_server))
    as_json = cli("show", "1", "--json", *db_args(xid_server))

    assert text.exit_code == 0
    assert text.stdout.startswith("run 1: log-xid on node-a (firing, enforce) -> succeeded")
    assert "step 0 1-log [log] succeeded" in text.stdout
    assert json.loads(as_json.stdout) == rfc3339_times(xid_server.get("/runs/1").get_json())


def test_show_says_where_a_run_on_step_runs(make_server: Callable[..., Server]) -> None:
    """A `run_on` step's node (stored when the run was created) is on its line; the others' are not."""
    playbook = APPROVE_XID + "  - {action: gpu.reset, with: {gpu: '0'}, run_on: {labels: [control_node]}}\n"
    server = make_server(playbooks={"approve.yaml": playbook})
    server.webhook(notification(alert("f-node-a", Hostname="node-a", control_node="node-c")))

    text = cli("show", "1", *db_args(server))

    assert text.exit_code == 0, text.output
    assert text.stdout.startswith("run 1: approve-xid on node-a (firing, approve) -> awaiting_approval")
    assert "step 0 1-log [log] pending\n" in text.stdout
    assert "step 1 2-gpu.reset [gpu.reset] on node-c pending\n" in text.stdout


def test_approve_through_the_database_queues_the_run_and_records_who(approval_server: tuple[Server, int]) -> None:
    server, run_id = approval_server

    result = cli("approve", str(run_id), "--by", "alice", *db_args(server))

    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"run {run_id} approved by alice; it is queued"
    detail = server.get(f"/runs/{run_id}").get_json()
    assert (detail["status"], detail["approved_by"]) == ("queued", "alice")
    assert server.drain() == 1
    assert server.get(f"/runs/{run_id}").get_json()["status"] == "succeeded"


def test_approve_through_a_running_server_queues_the_run_and_records_who(
    approval_server: tuple[Server, int],
    serve: Callable[[Server], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, run_id = approval_server
    monkeypatch.setenv("REMEDIATE_OPERATOR_TOKEN", OPERATOR_TOKEN)

    result = cli("approve", str(run_id), "--server", serve(server))

    assert result.exit_code == 0, result.output
    detail = server.get(f"/runs/{run_id}").get_json()
    # The server records the token's principal; the CLI's --by (default: the user) is a note beside it.
    assert (detail["status"], detail["approved_by"]) == ("queued", "operator (note: tester)")


@pytest.mark.parametrize("via", ["database", "server"])
def test_approving_twice_is_refused_exit_4_and_an_unknown_run_not_found_exit_3(
    approval_server: tuple[Server, int],
    serve: Callable[[Server], str],
    monkeypatch: pytest.MonkeyPatch,
    via: str,
) -> None:
    server, run_id = approval_server
    monkeypatch.setenv("REMEDIATE_OPERATOR_TOKEN", OPERATOR_TOKEN)
    target = db_args(server) if via == "database" else ["--server", serve(server)]
    assert cli("approve", str(run_id), *target).exit_code == 0

    twice = cli("approve", str(run_id), *target)
    unknown = cli("approve", "4242", *target)
    huge = cli("show", "99999999999999999999999", *target)

    assert_one_line_error(twice, "queued", code=4)
    assert_one_line_error(unknown, "4242", code=3)
    assert_one_line_error(huge, "99999999999999999999999", code=3)


# --------------------------------------------------------------------------- pause, resume


def test_pause_and_resume_through_the_database(xid_server: Server) -> None:
    paused = cli("pause", "--reason", "driver upgrade", "--by", "bob", *db_args(xid_server))

    assert paused.exit_code == 0
    assert paused.stdout.strip() == "remediation paused: driver upgrade"
    state = xid_server.get("/pause").get_json()
    assert (state["paused"], state["by"], state["reason"]) == (True, "bob", "driver upgrade")
    body = xid_server.webhook(notification(alert("while-paused"))).get_json()
    assert body["decisions"] == {"paused": 1}

    resumed = cli("resume", *db_args(xid_server))

    assert resumed.exit_code == 0
    assert resumed.stdout.strip() == "remediation resumed"
    assert xid_server.get("/pause").get_json()["paused"] is False
    assert xid_server.webhook(notification(alert("after-resume"))).get_json()["decisions"] == {"accepted": 1}


def test_pause_and_resume_through_a_running_server(
    xid_server: Server, serve: Callable[[Server], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = serve(xid_server)
    monkeypatch.setenv("REMEDIATE_OPERATOR_TOKEN", OPERATOR_TOKEN)

    paused = cli("pause", "--reason", "incident 42", "--server", url)

    assert paused.exit_code == 0, paused.output
    state = xid_server.get("/pause").get_json()
    assert (state["paused"], state["by"], state["reason"]) == (True, "operator (note: tester)", "incident 42")

    resumed = cli("resume", "--by", "carol", "--server", url)

    assert resumed.exit_code == 0
    state = xid_server.get("/pause").get_json()
    assert (state["paused"], state["by"]) == (False, "operator (note: carol)")


def test_a_pause_over_a_pause_names_who_paused_and_replaces_only_with_force(
    xid_server: Server, serve: Callable[[Server], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second `pause` silently replaced who paused and why."""
    assert cli("pause", "--reason", "driver upgrade", "--by", "bob", *db_args(xid_server)).exit_code == 0

    again = cli("pause", "--reason", "other", "--by", "eve", *db_args(xid_server))

    assert_one_line_error(again, "already paused by bob: driver upgrade", "force", code=4)
    state = xid_server.get("/pause").get_json()
    assert (state["by"], state["reason"]) == ("bob", "driver upgrade")

    monkeypatch.setenv("REMEDIATE_OPERATOR_TOKEN", OPERATOR_TOKEN)
    url = serve(xid_server)
    over_http = cli("pause", "--reason", "other", "--server", url)
    assert_one_line_error(over_http, "HTTP 409", "already paused by bob: driver upgrade", code=4)
    assert xid_server.get("/pause").get_json()["by"] == "bob"

    forced = cli("pause", "--reason", "incident 43", "--force", "--server", url)

    assert forced.exit_code == 0, forced.output
    state = xid_server.get("/pause").get_json()
    assert (state["paused"], state["by"], state["reason"]) == (True, "operator (note: tester)", "incident 43")


def test_breaker_reset_of_a_closed_breaker_is_a_no_op_that_says_so(
    xid_server: Server, serve: Callable[[Server], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resetting a closed breaker moved the stale horizon, silently."""
    through_db = cli("breaker", "reset", "--reason", "just in case", *db_args(xid_server))
    monkeypatch.setenv("REMEDIATE_OPERATOR_TOKEN", OPERATOR_TOKEN)
    through_server = cli("breaker", "reset", "--server", serve(xid_server))

    for result in (through_db, through_server):
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith("breaker is closed; nothing to reset"), result.stdout
    status = xid_server.get("/breaker").get_json()
    assert (status["open"], status["reset_at"], status["reset_by"]) == (False, None, None)


def test_pause_through_a_server_without_the_write_token_is_refused(
    xid_server: Server, serve: Callable[[Server], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REMEDIATE_TOKEN", "read-token-9876543210")

    result = cli("pause", "--server", serve(xid_server))

    assert_one_line_error(result, "HTTP 403", code=4)
    assert xid_server.get("/pause").get_json()["paused"] is False


# --------------------------------------------------------------------------- serve


@pytest.fixture
def keep_root_logging() -> Iterator[None]:
    """`serve` configures logging for gunicorn; put the root logger back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in root.handlers:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.mark.usefixtures("keep_root_logging")
def test_serve_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    database = tmp_path / "serve.db"

    result = cli(
        "serve", "--playbooks", SHIPPED_PLAYBOOKS, "--database-url", f"sqlite:///{database}", "--bind", "127.0.0.1:1"
    )

    assert result.exit_code == 2
    assert "no token configured" in result.stderr
    assert "REMEDIATE_TOKEN" in result.stderr
    assert "Traceback" not in result.output
    assert not database.exists()  # refused in preflight, before the store or gunicorn


@pytest.mark.usefixtures("keep_root_logging")
def test_serve_refuses_an_empty_token_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("\n", encoding="utf-8")

    result = cli("serve", "--token-file", token_file, "--playbooks", SHIPPED_PLAYBOOKS, "--bind", "127.0.0.1:1")

    assert_one_line_error(result, "empty")


# --------------------------------------------------------------------------- the token of client commands


@pytest.mark.parametrize(
    "command",
    [
        ["history", "--json"],
        ["show", "RUN"],
        ["approve", "RUN"],
        ["pause", "--reason", "token file"],
        ["resume"],
        ["breaker", "status", "--json"],
        ["breaker", "reset", "--reason", "token file"],
    ],
    ids=lambda c: "-".join(c[:2]) if c[0] == "breaker" else c[0],
)
def test_every_client_command_reads_the_token_from_remediate_token_file(
    approval_server: tuple[Server, int],
    serve: Callable[[Server], str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    command: list[str],
) -> None:
    """Finding 15: only --token-file and $REMEDIATE_TOKEN were read; $REMEDIATE_TOKEN_FILE (as `serve` reads it) not."""
    server, run_id = approval_server
    token_file = tmp_path / "operator.token"
    token_file.write_text(OPERATOR_TOKEN + "\n", encoding="utf-8")
    monkeypatch.setenv("REMEDIATE_TOKEN_FILE", str(token_file))
    if command == ["resume"]:
        server.post("/pause", json={"reason": "to resume"})  # a resume of nothing is refused (exit 4)

    result = cli(*[str(run_id) if word == "RUN" else word for word in command], "--server", serve(server))

    assert result.exit_code == 0, result.output
    assert not re.search(r"\b401\b", result.output)  # a word: a timestamp's digits may hold "401"


def test_a_token_file_on_the_command_line_wins_over_the_environment(
    history_server: Server,
    serve: Callable[[Server], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = serve(history_server)
    token_file = tmp_path / "token"
    token_file.write_text(OPERATOR_TOKEN, encoding="utf-8")
    monkeypatch.setenv("REMEDIATE_TOKEN", "not-the-token-0123456789")

    refused = cli("history", "--json", "--server", url)
    accepted = cli("history", "--json", "--server", url, "--token-file", token_file)

    assert_one_line_error(refused, "HTTP 401", code=4)
    assert accepted.exit_code == 0, accepted.output
    assert len(json.loads(accepted.stdout)["entries"]) == 3


def test_an_empty_token_file_is_a_one_line_error_naming_it(
    history_server: Server,
    serve: Callable[[Server], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    empty = tmp_path / "empty.token"
    empty.write_text("\n", encoding="utf-8")
    monkeypatch.setenv("REMEDIATE_TOKEN_FILE", str(empty))

    result = cli("history", "--server", serve(history_server))

    assert_one_line_error(result, str(empty), "empty")


def test_a_real_client_process_authenticates_to_a_real_server_with_remediate_token_file(tmp_path: Path) -> None:
    """`python -m remediate pause/resume/history --server` against gunicorn, the token only in a file."""
    from tests.support.server import TOKEN, RemediateServer

    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    (playbooks / "log.yaml").write_text(LOG_XID, encoding="utf-8")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n", encoding="utf-8")
    with RemediateServer(tmp_path / "server", playbooks, token=TOKEN, workers=1) as server:

        def remediate(*args: str) -> subprocess.CompletedProcess[str]:
            return run_remediate(*args, "--server", server.url, env={"REMEDIATE_TOKEN_FILE": str(token_file)})

        paused = remediate("pause", "--reason", "token file", "--by", "dana")
        state = requests.get(
            f"{server.url}/pause", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=scaled(10)
        ).json()
        resumed = remediate("resume")
        history = remediate("history", "--json")

    assert paused.returncode == 0, paused.stderr
    assert (state["paused"], state["by"]) == (True, "token (note: dana)")  # the principal; the body's name a note
    assert resumed.returncode == 0, resumed.stderr
    assert history.returncode == 0, history.stderr
    assert json.loads(history.stdout)["entries"] == []
