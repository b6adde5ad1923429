"""The chart's `sinks` value: each named sink rendered into the server's settings file, its
URL from a Secret of the user's mounted read-only as a file (only the keys it names), or a plain `url`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from remediate.config.settings import Settings, read_config_file
from remediate.config.values import Sink
from tests.e2e.test_chart import render_notes
from tests.support.helm import RELEASE, Helm, by_kind

FULLNAME = f"{RELEASE}-remediate"
SINKS = {
    "oncall": {"type": "webhook", "existingSecret": "oncall-hook", "key": "hook-url", "headersKey": "headers"},
    "ml-chat": {"type": "slack", "existingSecret": "ml-slack"},
    "bridge": {"type": "teams", "url": "http://alert-bridge.monitoring:8080/remediate"},
}


def server_settings(objects: list[dict[str, Any]], tmp_path: Path) -> Settings:
    """The server's settings file as rendered, read by remediate's own loader (what the pod does at start)."""
    path = tmp_path / "config.yaml"
    path.write_text(by_kind(objects, "ConfigMap", f"{FULLNAME}-config")["data"]["config.yaml"])
    return Settings.of(**read_config_file(path))


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return by_kind(objects, "Deployment")["spec"]["template"]["spec"]


def test_without_sinks_the_settings_have_none_and_nothing_is_mounted(helm: Helm, tmp_path: Path) -> None:
    objects = helm.objects()

    assert server_settings(objects, tmp_path).notify.sinks == ()
    assert not [v for v in pod_spec(objects)["volumes"] if v["name"].startswith("sink-")]


def test_each_sink_is_in_the_settings_and_its_secret_is_mounted_read_only_where_the_settings_read_it(
    helm: Helm, tmp_path: Path
) -> None:
    objects = helm.objects({"sinks": SINKS})

    settings = server_settings(objects, tmp_path)
    assert settings.notify.sinks == (
        Sink("bridge", "teams", url="http://alert-bridge.monitoring:8080/remediate"),
        Sink("ml-chat", "slack", url_file="/etc/remediate/sinks/ml-chat/url"),
        Sink(
            "oncall",
            "webhook",
            url_file="/etc/remediate/sinks/oncall/hook-url",
            headers_file="/etc/remediate/sinks/oncall/headers",
        ),
    )
    spec = pod_spec(objects)
    volumes = {v["name"]: v for v in spec["volumes"] if v["name"].startswith("sink-")}
    assert volumes == {
        "sink-ml-chat": {
            "name": "sink-ml-chat",
            "secret": {"secretName": "ml-slack", "defaultMode": 0o440, "items": [{"key": "url", "path": "url"}]},
        },
        "sink-oncall": {
            "name": "sink-oncall",
            "secret": {
                "secretName": "oncall-hook",
                "defaultMode": 0o440,
                "items": [{"key": "hook-url", "path": "hook-url"}, {"key": "headers", "path": "headers"}],
            },
        },
    }
    (server,) = [c for c in spec["containers"] if c["name"] == "server"]
    mounts = {m["name"]: m for m in server["volumeMounts"] if m["name"].startswith("sink-")}
    assert mounts == {
        name: {"name": name, "mountPath": f"/etc/remediate/sinks/{name.removeprefix('sink-')}", "readOnly": True}
        for name in volumes
    }
    # Every file the settings name lies in a mounted Secret, under a key that Secret projects.
    for sink in settings.notify.sinks:
        for path in filter(None, (sink.url_file, sink.headers_file)):
            folder, key = path.rsplit("/", 1)
            (mount,) = [m for m in mounts.values() if m["mountPath"] == folder]
            assert {"key": key, "path": key} in volumes[mount["name"]]["secret"]["items"]


def test_bad_sinks_are_refused_naming_the_value(helm: Helm) -> None:
    headers_on_chat = helm.template(
        {"sinks": {"chat": {"type": "slack", "existingSecret": "s", "headersKey": "h"}}}, check=False
    )
    assert headers_on_chat.returncode != 0
    assert "sinks.chat.headersKey: only a webhook sink sends headers" in headers_on_chat.stderr
    for sink in (
        {"type": "webhook"},  # neither a Secret nor a url
        {"type": "webhook", "url": "http://a:1/x", "existingSecret": "s"},  # both
        {"type": "pager", "url": "http://a:1/x"},
        {"type": "webhook", "url": "http://a:1/x", "headers": {"X": "y"}},
    ):
        refused = helm.lint({"sinks": {"oncall": sink}})
        assert refused.returncode != 0, sink
        assert "sinks" in refused.stdout + refused.stderr, sink
    refused = helm.lint({"sinks": {"On_Call": {"type": "webhook", "url": "http://a:1/x"}}})
    assert refused.returncode != 0
    assert helm.lint({"sinks": SINKS}).returncode == 0


BREAKFIX = {"breakfix": {"type": "webhook", "url": "http://tickets.breakfix:8080/remediate"}}


def test_the_notes_say_when_the_shipped_playbooks_have_no_oncall_sink(helm: Helm, tmp_path: Path) -> None:
    without = render_notes(helm, tmp_path / "without", {})
    with_oncall = render_notes(helm, tmp_path / "with", {"sinks": SINKS})

    (line,) = [line for line in without.splitlines() if line.startswith("  Notify:")]
    assert line.startswith(
        "  Notify:  no sinks; the shipped playbooks tell on-call through the sink oncall, which is NOT"
    )
    assert "set sinks.oncall" in line
    assert "; gpu-xid-quarantine hands nodes to the sink breakfix, which is NOT set: that step fails" in line
    (line,) = [line for line in with_oncall.splitlines() if line.startswith("  Notify:")]
    assert line == (
        "  Notify:  sinks bridge, ml-chat, oncall; gpu-xid-quarantine hands nodes to the sink breakfix, which is "
        'NOT set: that step fails (set sinks.breakfix: docs/kubernetes.md, "Hand-off to breakfix")'
    )
    with_breakfix = render_notes(helm, tmp_path / "breakfix", {"sinks": {**SINKS, **BREAKFIX}})
    (line,) = [line for line in with_breakfix.splitlines() if line.startswith("  Notify:")]
    assert line == "  Notify:  sinks breakfix, bridge, ml-chat, oncall"
