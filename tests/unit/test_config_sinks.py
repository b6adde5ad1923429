"""The `sinks` setting: named notification destinations, from the config file or from
REMEDIATE_SINKS (YAML or JSON text); a bad one is one ConfigError naming `sinks.<name>.<field>`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from remediate.config.settings import load_settings
from remediate.config.values import Sink
from remediate.errors import ConfigError


def test_sinks_come_from_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "sinks:\n"
        "  oncall: {type: webhook, url_file: /etc/remediate/sinks/oncall/url,"
        " headers_file: /etc/remediate/sinks/oncall/headers}\n"
        "  ml-chat: {type: slack, url_file: /etc/remediate/sinks/ml-chat/url}\n"
        "  bridge: {type: teams, url: 'http://alert-bridge.monitoring:8080/remediate?team=ml'}\n"
    )

    settings = load_settings(config_file=config, env={})

    assert settings.notify.sinks == (
        Sink("bridge", "teams", url="http://alert-bridge.monitoring:8080/remediate?team=ml"),
        Sink("ml-chat", "slack", url_file="/etc/remediate/sinks/ml-chat/url"),
        Sink(
            "oncall",
            "webhook",
            url_file="/etc/remediate/sinks/oncall/url",
            headers_file="/etc/remediate/sinks/oncall/headers",
        ),
    )
    assert settings.notify.sink("oncall") == settings.notify.sinks[2]
    assert settings.notify.sink("pager") is None


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(json.dumps({"oncall": {"type": "webhook", "url": "http://bridge:8080/x"}}), id="json"),
        pytest.param("oncall: {type: webhook, url: 'http://bridge:8080/x'}", id="yaml"),
    ],
)
def test_sinks_come_from_the_environment_as_yaml_or_json(text: str) -> None:
    settings = load_settings(env={"REMEDIATE_SINKS": text})

    assert settings.notify.sinks == (Sink("oncall", "webhook", url="http://bridge:8080/x"),)


def test_no_sinks_by_default() -> None:
    assert load_settings(env={}).notify.sinks == ()


@pytest.mark.parametrize(
    ("sinks", "message"),
    [
        pytest.param(
            {"oncall": {"url": "http://b:1/x"}}, "sinks.oncall.type: must be one of webhook, slack, teams", id="no-type"
        ),
        pytest.param(
            {"oncall": {"type": "pager", "url": "http://b:1/x"}}, "sinks.oncall.type: must be one of", id="bad-type"
        ),
        pytest.param(
            {"oncall": {"type": "webhook"}}, "sinks.oncall.url: give exactly one of url and url_file", id="none"
        ),
        pytest.param(
            {"oncall": {"type": "webhook", "url": "http://b:1/x", "url_file": "/run/url"}},
            "sinks.oncall.url: give exactly one of url and url_file",
            id="both",
        ),
        pytest.param(
            {"oncall": {"type": "slack", "url": "https://hooks.slack.test/x?token=abc"}},
            "sinks.oncall.url: query parameter 'token' looks like a credential",
            id="credential-in-url",
        ),
        pytest.param(
            {"oncall": {"type": "slack", "url": "https://hooks.slack.com/services/T01/B02/abcdefghij0123456789xyz"}},
            "sinks.oncall.url: is a Slack incoming-webhook URL, whose path is its secret",
            id="slack-webhook-url",
        ),
        pytest.param(
            {"oncall": {"type": "webhook", "url": "https://user:pw@bridge/x"}},
            "sinks.oncall.url: holds credentials (user:password@)",
            id="userinfo",
        ),
        pytest.param(
            {"oncall": {"type": "webhook", "url": "bridge:8080"}},
            "sinks.oncall.url: must be an absolute",
            id="not-a-url",
        ),
        pytest.param(
            {"oncall": {"type": "teams", "url": "http://b:1/x", "headers_file": "/run/h"}},
            "sinks.oncall.headers_file: only a webhook sink",
            id="headers-on-chat",
        ),
        pytest.param(
            {"oncall": {"type": "webhook", "url_file": "secrets/url"}},
            "sinks.oncall.url_file: must be the absolute path",
            id="relative-file",
        ),
        pytest.param(
            {"oncall": {"type": "webhook", "url": "http://b:1/x", "headers": {"X": "y"}}},
            "sinks.oncall.headers: unknown field (known: type, url, url_file, headers_file)",
            id="unknown-field",
        ),
        pytest.param({"oncall": "http://b:1/x"}, "sinks.oncall: must be a mapping", id="not-a-mapping"),
        pytest.param(
            {"on call": {"type": "webhook", "url": "http://b:1/x"}}, "sinks.on call: a sink's name", id="name"
        ),
        pytest.param(["oncall"], "must be a mapping of sink names to sinks", id="a-list"),
    ],
)
def test_a_bad_sink_is_one_config_error_naming_its_field(tmp_path: Path, sinks: object, message: str) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"sinks": sinks}))

    with pytest.raises(ConfigError) as raised:
        load_settings(config_file=config, env={})

    assert f"config file {config}: setting 'sinks': " in str(raised.value)
    assert message in str(raised.value)


def test_bad_yaml_in_the_environment_is_a_config_error_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match="environment: setting 'sinks': must be a YAML or JSON mapping"):
        load_settings(env={"REMEDIATE_SINKS": "{oncall: [unclosed"})
