"""The chart's `slack` value: the Slack app's signing secret from a Secret of the user's,
mounted read-only (only its key) where the rendered settings read it, and the approver allow-list."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.test_chart_sinks import pod_spec, server_settings
from tests.support.helm import Helm


def test_without_a_slack_secret_the_settings_have_none_and_nothing_is_mounted(helm: Helm, tmp_path: Path) -> None:
    objects = helm.objects()

    notify = server_settings(objects, tmp_path).notify
    assert (notify.slack_signing_secret_file, notify.slack_approvers) == (None, ())
    assert not [v for v in pod_spec(objects)["volumes"] if v["name"] == "slack"]


def test_the_signing_secret_is_mounted_where_the_settings_read_it_and_the_approvers_are_set(
    helm: Helm, tmp_path: Path
) -> None:
    objects = helm.objects(
        {"slack": {"existingSecret": "remediate-slack", "approvers": {"U0123ABCD": "alice", "W0BOB": "bob"}}}
    )

    notify = server_settings(objects, tmp_path).notify
    assert notify.slack_signing_secret_file == Path("/etc/remediate/slack/signing-secret")
    assert notify.slack_approver("U0123ABCD") == "slack:alice" and notify.slack_approver("U0OTHER") is None
    spec = pod_spec(objects)
    [volume] = [v for v in spec["volumes"] if v["name"] == "slack"]
    assert volume["secret"] == {
        "secretName": "remediate-slack",
        "defaultMode": 0o440,
        "items": [{"key": "signing-secret", "path": "signing-secret"}],
    }
    (server,) = [c for c in spec["containers"] if c["name"] == "server"]
    assert {"name": "slack", "mountPath": "/etc/remediate/slack", "readOnly": True} in server["volumeMounts"]


def test_a_bad_approver_is_refused_naming_the_value(helm: Helm) -> None:
    refused = helm.template({"slack": {"approvers": {"alice": "alice"}}}, check=False)
    assert refused.returncode != 0
    assert "slack.approvers" in refused.stderr
