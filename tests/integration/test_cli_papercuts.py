"""The CLI papercuts a new user hit, each pinned (CliRunner on real SQLite stores,
a real HTTP server in a thread for --server, and real `remediate serve` processes where the finding was one)."""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest

from remediate.cli import main
from tests.integration.test_ladders import HOT_LADDER
from tests.support.cli import assert_one_line_error
from tests.support.cli import run_cli as cli
from tests.support.disk import make_file
from tests.support.http import (
    APPROVE_XID,
    LOG_DISK,
    LOG_XID,
    OPERATOR_TOKEN,
    READ_TOKEN,
    Server,
    alert,
    notification,
    real_firing,
)
from tests.support.realsystems import free_port
from tests.support.waiting import scaled

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


# --------------------------------------------------------------------------- 2. the token scripts/serve wrote


@pytest.fixture
def awaiting(make_server: Callable[..., Server]) -> tuple[Server, int]:
    server = make_server(playbooks={"approve.yaml": APPROVE_XID})
    run_id = server.webhook(real_firing()).get_json()["runs"][0]
    return server, run_id


def test_client_commands_read_the_operator_token_scripts_serve_wrote_into_the_working_directory(
    awaiting: tuple[Server, int], serve: Callable[[Server], str]
) -> None:
    """`--server` never found ./remediate.operator-token (scripts/serve writes it; the checkout is the cwd)."""
    server, run_id = awaiting
    Path("remediate.operator-token").write_text(OPERATOR_TOKEN + "\n", encoding="utf-8")

    approved = cli("approve", run_id, "--server", serve(server))

    assert approved.exit_code == 0, approved.output
    assert server.get(f"/runs/{run_id}").get_json()["approved_by"] == "operator (note: tester)"


def test_without_an_operator_token_file_client_commands_read_remediate_token(
    awaiting: tuple[Server, int], serve: Callable[[Server], str]
) -> None:
    server, _ = awaiting
    Path("remediate.token").write_text(READ_TOKEN + "\n", encoding="utf-8")

    read = cli("history", "--json", "--server", serve(server))

    assert read.exit_code == 0, read.output
    assert len(json.loads(read.stdout)["entries"]) == 1


def test_a_401_names_the_options_that_give_a_token(
    awaiting: tuple[Server, int], serve: Callable[[Server], str]
) -> None:
    server, run_id = awaiting

    refused = cli("approve", run_id, "--server", serve(server))

    assert_one_line_error(refused, "HTTP 401", "--token-file", "REMEDIATE_OPERATOR_TOKEN", "REMEDIATE_TOKEN", code=4)
    assert "remediate.operator-token" in refused.stderr


# --------------------------------------------------------------------------- 7. exit codes


@pytest.mark.parametrize("via", ["database", "server"])
def test_exit_codes_tell_usage_not_found_and_refused_apart(
    awaiting: tuple[Server, int], serve: Callable[[Server], str], monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    """`show 999` and a usage error both exited 2."""
    server, run_id = awaiting
    monkeypatch.setenv("REMEDIATE_OPERATOR_TOKEN", OPERATOR_TOKEN)
    where = db_args(server) if via == "database" else ["--server", serve(server)]

    usage = cli("show", "not-a-number", *where)
    missing = cli("show", "999", *where)
    approved = cli("approve", run_id, *where)
    again = cli("approve", run_id, *where)

    assert usage.exit_code == 2, usage.output
    assert_one_line_error(missing, "999", code=3)
    assert approved.exit_code == 0, approved.output
    assert_one_line_error(again, "not awaiting approval", code=4)


# --------------------------------------------------------------------------- 6. who did it, on the database


def test_without_user_in_the_environment_database_actions_record_the_login_not_cli(
    awaiting: tuple[Server, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container or cron job sets no $USER: approve/pause/reset on the database recorded "cli"."""
    server, _ = awaiting
    for name in ("USER", "LOGNAME", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    login = pwd.getpwuid(os.getuid()).pw_name

    paused = cli("pause", "--reason", "maintenance", *db_args(server))

    assert paused.exit_code == 0, paused.output
    assert server.get("/pause").get_json()["by"] == login


def test_as_names_who_approves_pauses_and_resets_on_the_database(awaiting: tuple[Server, int]) -> None:
    server, run_id = awaiting

    approved = cli("approve", run_id, "--as", "alice", *db_args(server))
    paused = cli("pause", "--as", "bob", *db_args(server))

    assert approved.exit_code == 0, approved.output
    assert server.get(f"/runs/{run_id}").get_json()["approved_by"] == "alice"
    assert paused.exit_code == 0, paused.output
    assert server.get("/pause").get_json()["by"] == "bob"


# --------------------------------------------------------------------------- 4. one time format in every --json

EPOCH_LIKE = (1e9, 1e11)
"""A number in this range in --json output is a UNIX time (2001..5138): the CLI prints times as RFC 3339 text."""
UNIT_SUFFIX = re.compile(r"_(bytes|seconds|watts|milliwatts|percent)$")
RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def json_commands(group: click.Group = main, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every command that takes --json, as the words typed to reach it."""
    found: set[tuple[str, ...]] = set()
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found |= json_commands(command, (*prefix, name))
        if any("--json" in param.opts for param in command.params):
            found.add((*prefix, name))
    return found


def times_in(value: Any, path: str = "") -> list[tuple[str, Any]]:
    """(where, value) of every value that is a time or named as one (`time`, `at`, `*_at`, `*At`, `since`, ...)."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}"
            named = key in ("time", "at", "since", "until") or key.endswith(("_at", "At", "_since"))
            if named and item is not None and not isinstance(item, dict | list):
                found.append((where, item))
            else:
                found.extend(times_in(item, where))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(times_in(item, f"{path}[{index}]"))
    elif isinstance(value, int | float) and not isinstance(value, bool) and EPOCH_LIKE[0] <= value < EPOCH_LIKE[1]:
        if UNIT_SUFFIX.search(path):  # 64 GiB of memory is no time
            return found
        found.append((path, value))
    return found


@pytest.fixture
def busy(make_server: Callable[..., Server]) -> Server:
    """Runs, steps, attempts, a ladder that climbed twice and a tripped-then-reset pause: every kind of time."""
    server = make_server(playbooks={"hot.yaml": HOT_LADDER, "approve.yaml": APPROVE_XID})
    for minute in (1, 2):
        server.webhook(notification(alert("hot-a", alertname="GPUTemperatureHigh",
                                          starts_at=f"2026-11-21T05:{minute:02d}:00Z", node="node-a")))  # fmt: skip
    server.webhook(real_firing())
    server.drain()
    assert server.post("/pause", json={"reason": "r", "by": "x"}).status_code == 200
    return server


def test_every_json_output_prints_its_times_as_rfc3339_utc(busy: Server, tmp_path: Path) -> None:
    """`ladder status --json` mixed RFC 3339 (starts_at) and UNIX seconds (climbed_at, climb[].at)."""
    root = tmp_path / "scratch"
    make_file(root / "old.tmp", age_days=10)
    policies = tmp_path / "policies.yaml"
    policies.write_text(f"policies: [{{name: s, mountpoint: /x, roots: ['{root}'], patterns: ['*.tmp']}}]\n")
    gpus = tmp_path / "gpus.yaml"
    assert cli("gpu", "simulate", "init", gpus).exit_code == 0
    local = db_args(busy)
    doctor_config = tmp_path / "doctor.yaml"  # every doctor check OK: exit 0
    doctor_config.write_text(f"webhook_token: {'w' * 32}\noperator_token: {'o' * 32}\nschedulers: none\n")
    commands = {
        ("history",): ["history", *local],
        ("history", "prune"): ["history", "prune", "--older-than", "1d", "--dry-run", *local],
        ("show",): ["show", "1", *local],
        ("ladder", "status"): ["ladder", "status", *local],
        ("breaker", "status"): ["breaker", "status", *local],
        ("report",): ["report", *local],
        ("replay",): ["replay", *local],
        ("dry-run",): ["dry-run", "--alertname", "GPUTemperatureHigh", "--label", "node=node-a", *local],
        ("playbooks", "list"): ["playbooks", "list", "--playbooks", local[3]],
        ("actions",): ["actions"],
        ("settings",): ["settings"],
        ("gpu", "status"): ["gpu", "status", "--gpu-backend", "simulated", "--gpu-simulator-file", gpus],
        ("disk", "policies"): ["disk", "policies", "--policies-file", policies],
        ("disk", "plan"): ["disk", "plan", "--policies-file", policies, "--mountpoint", "/x", "--free-percent", "100"],
        ("doctor",): ["doctor", "--config", doctor_config, "--playbooks", local[3]],
    }
    assert set(commands) == json_commands(), "a command with --json is missing here"
    seen = 0
    for words, args in commands.items():
        result = cli(*args, "--json")
        assert result.exit_code in (0, 1), (words, result.output)  # dry-run: 1 = nothing would run
        for where, value in times_in(json.loads(result.stdout)):
            assert isinstance(value, str) and RFC3339_UTC.match(value), (" ".join(words), where, value)
            seen += 1
    assert seen >= 20  # the walk found the times it checks


# --------------------------------------------------------------------------- 5. show's labels, the whole REASON


def test_show_prints_the_labels_as_json(make_server: Callable[..., Server]) -> None:
    """`show` printed `alert: {'alertname': 'GpuXidError', ...}`, a Python dict."""
    server = make_server(playbooks={"xid.yaml": LOG_XID})
    server.webhook(notification(alert("x-a", Hostname="node-a")))

    text = cli("show", "1", *db_args(server))

    assert text.exit_code == 0, text.output
    (line,) = [line for line in text.stdout.splitlines() if line.startswith("alert: ")]
    assert json.loads(line.removeprefix("alert: ")) == server.get("/runs/1").get_json()["alert"]["labels"]


def test_history_wide_prints_the_whole_reason(make_server: Callable[..., Server]) -> None:
    """The REASON column was cut at 60 characters, with no way to see the rest."""
    failing = LOG_XID.replace(
        '  - action: log\n    with:\n      message: "XID on GPU {{ labels.gpu }} since {{ startsAt }}"',
        f"  - action: notify.webhook\n    retries: 0\n    with:\n      url: http://127.0.0.1:{free_port()}/hook",
    )
    server = make_server(playbooks={"xid.yaml": failing})
    server.webhook(notification(alert("x-a", Hostname="node-a")))
    server.drain()
    error = server.history()["entries"][0]["run"]["error"]
    assert len(error) > 60

    cut = cli("history", *db_args(server))
    wide = cli("history", "--wide", *db_args(server))

    assert cut.exit_code == 0 and wide.exit_code == 0, cut.output + wide.output
    assert cut.stdout.splitlines()[1].endswith("…")
    assert wide.stdout.splitlines()[1].endswith(error)


def test_ladder_status_wide_prints_the_whole_why(make_server: Callable[..., Server]) -> None:
    server = make_server(playbooks={"hot.yaml": HOT_LADDER})
    for minute in (1, 2):
        server.webhook(notification(alert("hot-a", alertname="GPUTemperatureHigh",
                                          starts_at=f"2026-11-21T05:{minute:02d}:00Z", node="node-a")))  # fmt: skip
    server.store.ladders.reset("node-a", playbook=None, by="ops", reason="swapped the fan; " * 6, now=time.time())

    cut = cli("ladder", "status", *db_args(server))
    wide = cli("ladder", "status", "--wide", *db_args(server))

    assert cut.stdout.splitlines()[1].endswith("…")
    assert wide.stdout.splitlines()[1].endswith(("swapped the fan; " * 6).strip())


# --------------------------------------------------------------------------- 3. approve --wait (the outcome: e2e)


def test_approve_wait_on_a_run_nothing_executes_gives_up_after_its_timeout_exit_6(awaiting: tuple[Server, int]) -> None:
    """The database only, no executor: the approved run stays queued; --wait says so after --timeout."""
    server, run_id = awaiting

    result = cli("approve", run_id, "--wait", "--timeout", "0.3s", *db_args(server))

    assert result.exit_code == 6, result.output
    assert result.stdout.strip() == f"run {run_id} approved by tester; it is queued"
    assert f"run {run_id} is still queued after 0.3s" in result.stderr


# --------------------------------------------------------------------------- 8. shell completion, documented

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_shell_completion_readme_documents_prints_a_completion_script() -> None:
    """Completion worked (click's) but nothing said how to turn it on."""
    documented = re.findall(r"_REMEDIATE_COMPLETE=(\w+) remediate", README.read_text(encoding="utf-8"))
    console_script = Path(sys.executable).parent / "remediate"  # the installed `remediate`, as a shell runs it
    environment = {**os.environ, "PYTHONPATH": str(README.parent)}

    assert sorted(documented) == ["bash_source", "fish_source", "zsh_source"]
    for shell in documented:
        script = subprocess.run([console_script], env={**environment, "_REMEDIATE_COMPLETE": shell},
                                capture_output=True, text=True, timeout=scaled(30), check=True).stdout  # fmt: skip
        assert "_REMEDIATE_COMPLETE" in script and "remediate" in script, (shell, script)
    answer = subprocess.run([console_script], capture_output=True, text=True, timeout=scaled(30), check=True,
                            env={**environment, "_REMEDIATE_COMPLETE": "bash_complete",
                                 "COMP_WORDS": "remediate hist", "COMP_CWORD": "1"}).stdout  # fmt: skip
    assert answer.split() == ["plain,history"]
