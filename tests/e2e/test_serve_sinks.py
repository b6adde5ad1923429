"""`remediate serve` names, once at start, the sinks that playbooks notify but the settings do not
define: their notify steps would fail, and nothing else would say so before an alert."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.server import RemediateServer

ROOT = Path(__file__).resolve().parents[2]
WARNING = "WARNING remediate.serve: sinks NOT configured: oncall (used by notify-oncall): "


def start_and_stop(tmp_path: Path, env: dict[str, str]) -> str:
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    (playbooks / "notify-oncall.yaml").write_text((ROOT / "playbooks" / "notify-oncall.yaml").read_text())
    server = RemediateServer(tmp_path / "server", playbooks, workers=1, env=env).start()
    server.stop()
    return server.log_path.read_text()


def test_a_start_warns_once_naming_the_sink_a_playbook_uses_that_is_not_configured(tmp_path: Path) -> None:
    log = start_and_stop(tmp_path, {})

    assert log.count("sinks NOT configured") == 1, log
    (line,) = [line for line in log.splitlines() if "sinks NOT configured" in line]
    assert WARNING in line
    assert line.endswith("set sinks.oncall (settings file or REMEDIATE_SINKS; the chart's `sinks` value)")


def test_a_start_with_the_sink_configured_says_nothing_of_it(tmp_path: Path) -> None:
    sinks = {"oncall": {"type": "slack", "url_file": str(tmp_path / "slack-url")}}

    log = start_and_stop(tmp_path, {"REMEDIATE_SINKS": json.dumps(sinks)})

    assert "remediate listening on" in log
    assert "sinks NOT configured" not in log
