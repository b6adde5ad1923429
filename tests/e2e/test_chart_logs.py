"""The chart's `logs` value: JSON logs by default for the server and every agent, as remediate's own
loader reads the rendered settings files; text when chosen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from remediate.config.settings import Settings, read_config_file
from tests.support.helm import RELEASE, Helm, by_kind

FULLNAME = f"{RELEASE}-remediate"


def _settings(objects: list[dict[str, Any]], name: str, tmp_path: Path) -> Settings:
    path = tmp_path / f"{name}.yaml"
    path.write_text(by_kind(objects, "ConfigMap", name)["data"]["config.yaml"])
    return Settings.of(**read_config_file(path))


def test_the_server_and_the_agents_log_json_by_default(helm: Helm, tmp_path: Path) -> None:
    objects = helm.objects()

    for name in (f"{FULLNAME}-config", f"{FULLNAME}-agent-config"):
        log = _settings(objects, name, tmp_path).log
        assert (log.format, log.level) == ("json", "info"), name


def test_text_and_a_level_when_chosen(helm: Helm, tmp_path: Path) -> None:
    objects = helm.objects({"logs": {"format": "text", "level": "warning"}})

    for name in (f"{FULLNAME}-config", f"{FULLNAME}-agent-config"):
        log = _settings(objects, name, tmp_path).log
        assert (log.format, log.level) == ("text", "warning"), name
