"""What a newcomer's first commands say, run as they run them: the `remediate` CLI as a process of its own
(`python -m remediate`), on a real SQLite store and, for --server, a real HTTP server.

- `resume` while not paused records nothing, says so and exits 4 (refused: the pause is not in a state that
  allows it), on the database and through the server (HTTP 409), instead of "resumed" and 0;
- `breaker status` writes its window as the settings write durations (10m), not 600s;
- `dry-run` says which server mode it judged in and where that came from, and with the server's config it
  judges in the server's mode (scripts/serve and the chart start in shadow mode: dry-run said "enforce");
- one error that stops several steps (no cluster configured: cordon, taint, drain) is printed once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from remediate.config.settings import Settings, load_settings
from tests.support.cli import sqlite_dump
from tests.support.http import LOG_XID, OPERATOR_TOKEN, Server
from tests.support.waiting import scaled

ROOT = Path(__file__).resolve().parents[2]
NO_CLUSTER = "no Kubernetes cluster configured"


def remediate(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it: its own process, an environment without the caller's REMEDIATE_*."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATE_")}
    return subprocess.run(
        [sys.executable, "-m", "remediate", *args],
        cwd=cwd,
        env={**clean, "USER": "tester", **(env or {})},
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
    )


@pytest.fixture
def store(make_server: Callable[..., Server], tmp_path: Path) -> Server:
    return make_server(playbooks={"xid.yaml": LOG_XID})


def _where(store: Server, serve: Callable[[Server], str], via: str) -> list[str]:
    return ["--database-url", store.database_url] if via == "database" else ["--server", serve(store)]


# --------------------------------------------------------------------------- resume


@pytest.mark.parametrize("via", ["database", "server"])
def test_resume_while_not_paused_says_so_exits_4_and_records_nothing(
    store: Server, serve: Callable[[Server], str], tmp_path: Path, via: str
) -> None:
    where = _where(store, serve, via)
    env = {"REMEDIATE_OPERATOR_TOKEN": OPERATOR_TOKEN}
    before = sqlite_dump(Path(store.database_url.removeprefix("sqlite:///")))

    result = remediate("resume", *where, cwd=tmp_path, env=env)

    assert result.returncode == 4, result.stdout + result.stderr
    assert result.stdout == ""
    assert "not paused" in result.stderr and "resumed" not in result.stderr.replace("nothing to resume", "")
    assert sqlite_dump(Path(store.database_url.removeprefix("sqlite:///"))) == before

    paused = remediate("pause", "--reason", "maintenance", *where, cwd=tmp_path, env=env)
    assert paused.returncode == 0, paused.stderr
    resumed = remediate("resume", *where, cwd=tmp_path, env=env)
    assert (resumed.returncode, resumed.stdout.strip()) == (0, "remediation resumed"), resumed.stderr


# --------------------------------------------------------------------------- breaker status


@pytest.mark.parametrize(("setting", "shown"), [(None, "10m"), ("90s", "1m30s"), ("2h", "2h")])
def test_breaker_status_writes_its_window_as_the_settings_do(
    store: Server, tmp_path: Path, setting: str | None, shown: str
) -> None:
    env = {"REMEDIATE_BREAKER_WINDOW": setting} if setting else {}

    result = remediate("breaker", "status", "--database-url", store.database_url, cwd=tmp_path, env=env)

    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("changed within ")]
    assert line.startswith(f"changed within {shown} ("), line


# --------------------------------------------------------------------------- dry-run's mode


def _dry_run(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return remediate(
        "dry-run", "--playbooks", str(ROOT / "playbooks"), "--alertname", "GPUXidCritical",
        "--label", "severity=critical", "--label", "Hostname=node-a", *args, cwd=tmp_path, env=env,
    )  # fmt: skip


def test_dry_run_judges_in_the_mode_of_the_servers_config_and_says_where_it_came_from(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("mode: dry-run\n")
    server = load_settings(config_file=config, env={})  # what `remediate serve --config config.yaml` runs in

    result = _dry_run(tmp_path, "--config", str(config))

    first, *rest = result.stdout.splitlines()
    assert first == f"judged in server mode {server.engine.mode} (from config file {config})"
    assert "  playbook gpu-xid-quarantine -> target node-a, mode dry-run" in rest


@pytest.mark.parametrize(
    ("args", "env", "first"),
    [
        ((), {"REMEDIATE_MODE": "dry-run"}, "judged in server mode dry-run (from $REMEDIATE_MODE)"),
        (("--mode", "dry-run"), {}, "judged in server mode dry-run (from --mode)"),
        ((), {}, "judged in server mode enforce (the default; a server started by scripts/serve or the chart"),
    ],
)
def test_dry_run_names_the_source_of_its_mode(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], first: str
) -> None:
    result = _dry_run(tmp_path, *args, env=env)
    assert result.stdout.splitlines()[0].startswith(first), result.stdout + result.stderr
    mode = Settings.of(**({"mode": "dry-run"} if env or args else {})).engine.mode
    assert f"mode {mode}\n" in result.stdout


def test_one_error_that_stops_several_steps_is_printed_once(tmp_path: Path) -> None:
    """No cluster configured stops cordon, taint and drain: the message was printed 9 times (each step, the
    summary and the last line repeating each step); the last line, which says what is missing, keeps it."""
    result = _dry_run(tmp_path)

    assert result.returncode == 1, result.stderr
    assert result.stdout.count(NO_CLUSTER) == 1, result.stdout
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith(
        f"would run: no (playbook gpu-xid-quarantine: step 1 cordon: plan failed: KubeConfigError: {NO_CLUSTER}"
    )
    assert "(also steps 2 taint, 3 drain)" in last
    for step in ("step 1 cordon", "step 2 taint", "step 3 drain"):
        block = result.stdout.split(f"    {step} [", 1)[1].split("\n    step ", 1)[0]
        assert "plan failed: KubeConfigError (the last line says why)" in block, block
