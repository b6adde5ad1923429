"""The shipped systemd units (systemd/): systemd's own check of every directive, then the server started from
its unit's ExecStart, Environment= and WorkingDirectory= as systemd would start it (the install paths moved into
a temp dir), reloaded by the unit's ExecReload signal and stopped by KillMode=mixed's SIGTERM to the main
process alone; and the agent's ExecStart taken by `remediate agent` as written."""

from __future__ import annotations

import configparser
import os
import shlex
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest
import requests
import yaml

from tests.support.processes import REMEDIATE
from tests.support.realsystems import free_port
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "systemd"
PREFIX = "/opt/remediate/venv/bin/remediate"


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd's keys are case-sensitive
    parser.read(UNITS / name)
    return parser


def moved(text: str, tmp: Path) -> str:
    """A unit's paths moved under `tmp` (its install places: /etc/remediate, /var/lib/...), %H expanded."""
    return (
        text.replace(PREFIX, str(REMEDIATE))
        .replace("/etc/remediate", str(tmp / "etc"))
        .replace("/var/lib/", f"{tmp}/var/")
        .replace("%H", socket.gethostname())
    )


def test_systemd_accepts_every_directive_of_the_shipped_units(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze (Debian's systemd package) is needed to check the shipped units")
    for name in ("remediate.service", "remediate-agent.service"):
        # The command must exist for systemd to accept the unit: the venv's, where the unit names /opt/remediate.
        (tmp_path / name).write_text((UNITS / name).read_text().replace(PREFIX, str(REMEDIATE)))
    checked = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / "remediate.service"), str(tmp_path / "remediate-agent.service")],
        capture_output=True,
        text=True,
        timeout=scaled(30),
        check=False,
    )
    assert checked.returncode == 0, checked.stderr
    assert checked.stderr == "", checked.stderr  # not even a warning


def test_the_server_starts_reloads_and_stops_as_its_unit_runs_it(tmp_path: Path) -> None:
    service = unit("remediate.service")["Service"]
    assert service["KillMode"] == "mixed" and service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    (tmp_path / "etc").mkdir()
    state = Path(moved(service["WorkingDirectory"], tmp_path))
    state.mkdir(parents=True)  # StateDirectory=
    playbooks = tmp_path / "etc" / "playbooks"
    shutil.copytree(ROOT / "playbooks", playbooks)
    port = free_port()
    config = {"bind": f"127.0.0.1:{port}", "playbooks": str(playbooks)}
    (tmp_path / "etc" / "remediate.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "etc" / "token").write_text("systemd-unit-token-0123456789\n")
    key, _, value = service["Environment"].partition("=")
    environment = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", key: moved(value, tmp_path)}
    command = shlex.split(moved(service["ExecStart"], tmp_path))

    log = (tmp_path / "server.log").open("wb")
    server = subprocess.Popen(
        command, cwd=state, env=environment, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:

        def ready() -> dict | None:
            try:
                answer = requests.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
            except requests.ConnectionError:
                return None
            return answer.json() if answer.status_code == 200 else None

        wait_until(lambda: ready() is not None, scaled(60), message="the server from its unit never became ready")
        shipped = ready()["playbooks"]  # type: ignore[index]
        assert (state / "remediate.db").exists()  # the store lives in the StateDirectory, as the unit says

        (playbooks / "extra.yaml").write_text(
            yaml.safe_dump(
                {
                    "name": "extra",
                    "match": {"alertname": "Extra"},
                    "steps": [{"action": "log", "with": {"message": "x"}}],
                }
            )
        )
        os.kill(server.pid, signal.SIGHUP)  # ExecReload
        wait_until(lambda: (ready() or {}).get("playbooks") == shipped + 1, scaled(30), message="no reload")

        os.kill(server.pid, signal.SIGTERM)  # KillMode=mixed: the main process alone
        assert server.wait(timeout=scaled(60)) == 0
        # Nothing of the server outlived its main process (systemd would SIGKILL it after TimeoutStopSec).
        wait_until(lambda: not _group_alive(server.pid), scaled(10), message="a process of the server outlived it")
    finally:
        if server.poll() is None or _group_alive(server.pid):
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
        log.close()


def test_the_agents_unit_names_only_options_the_agent_takes(tmp_path: Path) -> None:
    """The agent needs NVML and root to run for real; here its ExecStart is parsed by `remediate agent` itself:
    with `--help` appended, click accepts or refuses each option before any is acted on."""
    service = unit("remediate-agent.service")["Service"]
    command = shlex.split(moved(service["ExecStart"], tmp_path))
    assert command[:2] == [str(REMEDIATE), "agent"]
    parsed = subprocess.run(
        [*command, "--help"], capture_output=True, text=True, timeout=scaled(60), check=False, env=dict(os.environ)
    )
    assert parsed.returncode == 0, parsed.stderr
    options = {word.split("=")[0] for word in command[2:] if word.startswith("--")}
    assert options == {"--node-token-file", "--node-name", "--bind", "--state-file"}
    assert all(option in parsed.stdout for option in options)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
