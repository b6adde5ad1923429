"""remediate.playbooks (model, loading): loading with errors that name file, playbook and field; matching; targets."""

from __future__ import annotations

import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediate.actions.base import ActionRegistry
from remediate.config.rollout import Mode
from remediate.errors import PlaybookError
from remediate.intake.alertref import strip_port
from remediate.intake.alerts import Alert, parse_notification
from remediate.playbooks.loading import load_directory, load_file, load_playbooks, parse_playbook
from remediate.playbooks.model import MAX_TARGET_LENGTH, NODE_LABELS, Playbook, TargetSpec
from tests.conftest import alert_payload, notification_payload

VALID = """\
name: notify-oncall
description: Post a summary of GPU XID errors.
match:
  alertname: GpuXidError
  labels: ['severity=~"critical|page"']
mode: approve
target: node
cooldown: 10m
max_attempts: 6
steps:
  - action: notify.webhook
    with:
      url: https://chat.example/hooks/oncall
      message: "GPU {{ labels.gpu }} on {{ labels.Hostname }}"
    retries: 3
    timeout: 30s
on_resolved:
  - action: log
    name: say-resolved
    with: {message: "{{ labels.alertname }} resolved"}
"""


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def minimal(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "pb",
        "match": {"alertname": "GpuXidError"},
        "steps": [{"action": "log", "with": {"message": "hi"}}],
    }
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def error_of(data: Any, registry: ActionRegistry) -> PlaybookError:
    with pytest.raises(PlaybookError) as info:
        parse_playbook(data, registry, source="pb.yaml")
    return info.value


def alert(labels: dict[str, str], fingerprint: str = "fp0000000001") -> Alert:
    (parsed,) = parse_notification(
        {
            "version": "4",
            "status": "firing",
            "alerts": [
                {
                    "status": "firing",
                    "labels": {"alertname": "GpuXidError", **labels},
                    "startsAt": "2026-01-01T00:00:00Z",
                    "fingerprint": fingerprint,
                }
            ],
        }
    ).alerts
    return parsed


# --------------------------------------------------------------------------- loading valid files


def test_a_valid_file_loads_with_every_field(tmp_path: Path, registry: ActionRegistry) -> None:
    playbook = load_file(write(tmp_path, "notify.yaml", VALID), registry)

    assert playbook.name == "notify-oncall"
    assert playbook.description == "Post a summary of GPU XID errors."
    assert playbook.alertnames == ("GpuXidError",)
    assert [str(m) for m in playbook.matchers] == ['severity=~"critical|page"']
    assert playbook.mode is Mode.APPROVE
    assert playbook.target.labels == NODE_LABELS
    assert playbook.cooldown == timedelta(minutes=10)
    assert playbook.max_attempts == 6
    assert playbook.source == str(tmp_path / "notify.yaml")
    (step,) = playbook.steps
    assert step.action == "notify.webhook"
    assert step.name == "1-notify.webhook"
    assert step.retries == 3
    assert step.timeout == 30.0
    assert step.params["message"] == "GPU {{ labels.gpu }} on {{ labels.Hostname }}"
    (resolved,) = playbook.on_resolved
    assert resolved.name == "say-resolved"
    assert playbook.steps_for("firing") == playbook.steps
    assert playbook.steps_for("resolved") == playbook.on_resolved


def test_defaults_apply_to_what_a_playbook_leaves_out(registry: ActionRegistry) -> None:
    playbook = parse_playbook(minimal(), registry)

    assert playbook.mode is Mode.ENFORCE
    assert playbook.cooldown == timedelta(0)
    assert playbook.max_attempts is None
    assert playbook.on_resolved == ()
    assert playbook.description == ""
    assert playbook.steps[0].retries == 2
    assert playbook.steps[0].timeout is None
    assert playbook.steps[0].always is False


def test_a_step_may_say_it_runs_always(registry: ActionRegistry) -> None:
    steps = [{"action": "log", "with": {"message": "a"}}, {"action": "log", "with": {"message": "b"}, "always": True}]

    playbook = parse_playbook(minimal(steps=steps), registry)

    assert [s.always for s in playbook.steps] == [False, True]


def test_a_step_may_say_its_failure_does_not_stop_the_run(registry: ActionRegistry) -> None:
    steps = [
        {"action": "log", "with": {"message": "a"}, "continue_on_error": True},
        {"action": "log", "with": {"message": "b"}},
    ]

    playbook = parse_playbook(minimal(steps=steps), registry)

    assert [s.continue_on_error for s in playbook.steps] == [True, False]


def test_a_directory_loads_yaml_and_yml_files_in_name_order(tmp_path: Path, registry: ActionRegistry) -> None:
    write(tmp_path, "b.yml", yaml.safe_dump(minimal(name="second")))
    write(tmp_path, "a.yaml", yaml.safe_dump(minimal(name="first")))
    write(tmp_path, "notes.txt", "not a playbook")

    playbooks = load_playbooks(tmp_path, registry)

    assert [p.name for p in playbooks.playbooks] == ["first", "second"]
    assert len(playbooks) == 2
    assert playbooks.get("second") is not None
    assert playbooks.get("third") is None


def test_the_shipped_playbooks_load(registry: ActionRegistry) -> None:
    playbooks = load_playbooks(Path(__file__).resolve().parents[2] / "playbooks", registry)

    assert len(playbooks) >= 1


def test_a_directory_keeps_the_good_playbooks_and_reports_the_bad(tmp_path: Path, registry: ActionRegistry) -> None:
    write(tmp_path, "good.yaml", yaml.safe_dump(minimal(name="good")))
    write(tmp_path, "bad.yaml", yaml.safe_dump(minimal(name="bad", mode="sometimes")))

    playbooks, errors = load_directory(tmp_path, registry)

    assert [p.name for p in playbooks] == ["good"]
    assert [(e.file, e.playbook, e.field) for e in errors] == [(str(tmp_path / "bad.yaml"), "bad", "mode")]
    with pytest.raises(PlaybookError, match="field mode"):
        load_playbooks(tmp_path, registry)


def test_several_bad_files_are_all_listed_in_one_error(tmp_path: Path, registry: ActionRegistry) -> None:
    write(tmp_path, "one.yaml", yaml.safe_dump(minimal(name="one", mode="x")))
    write(tmp_path, "two.yaml", yaml.safe_dump(minimal(name="two", cooldown="soon")))

    with pytest.raises(PlaybookError, match="2 invalid playbooks") as info:
        load_playbooks(tmp_path, registry)

    assert "one.yaml" in str(info.value)
    assert "two.yaml" in str(info.value)


def test_a_missing_directory_is_an_error(tmp_path: Path, registry: ActionRegistry) -> None:
    with pytest.raises(PlaybookError, match="does not exist"):
        load_playbooks(tmp_path / "absent", registry)


def test_duplicate_names_across_files_name_the_second_file(tmp_path: Path, registry: ActionRegistry) -> None:
    first = write(tmp_path, "a.yaml", yaml.safe_dump(minimal(name="same")))
    second = write(tmp_path, "b.yaml", yaml.safe_dump(minimal(name="same")))

    playbooks, errors = load_directory(tmp_path, registry)

    assert [p.source for p in playbooks] == [str(first)]
    (error,) = errors
    assert (error.file, error.playbook, error.field) == (str(second), "same", "name")
    assert f"name already used by {first}" in str(error)


# --------------------------------------------------------------------------- errors name file, playbook, field


def test_invalid_yaml_names_the_file(tmp_path: Path, registry: ActionRegistry) -> None:
    path = write(tmp_path, "broken.yaml", "name: [unclosed\n")

    with pytest.raises(PlaybookError, match="not valid YAML") as info:
        load_file(path, registry)

    assert info.value.file == str(path)


def test_a_playbook_that_is_not_a_mapping_is_an_error(registry: ActionRegistry) -> None:
    assert error_of(["a", "list"], registry).file == "pb.yaml"


@pytest.mark.parametrize("name", [None, "", "Upper", "has space", "-dash-first", "x" * 200, 5])
def test_a_bad_name_is_an_error_on_field_name(registry: ActionRegistry, name: object) -> None:
    error = error_of({**minimal(), "name": name}, registry)

    assert (error.file, error.field) == ("pb.yaml", "name")


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"colour": "blue"}, "colour", "unknown key"),
        ({"mode": "sometimes"}, "mode", "must be one of enforce, dry-run, approve, got 'sometimes'"),
        ({"match": None}, "match", "required"),
        ({"match": {"alertname": "X", "extra": 1}}, "match.extra", "unknown key"),
        ({"match": {"alertname": []}}, "match.alertname", "required"),
        ({"match": {"alertname": ["A", ""]}}, "match.alertname", "required"),
        ({"match": {"alertname": "X", "labels": {"a": "b"}}}, "match.labels", "must be a list"),
        ({"match": {"alertname": "X", "labels": ["ok=1", 'sev=~"("']}}, "match.labels[1]", ""),
        ({"match": {"alertname": "X", "labels": ["no operator"]}}, "match.labels[0]", ""),
        ({"match": {"alertname": "X", "labels": [3]}}, "match.labels[0]", "must be a string matcher"),
        ({"target": "pod"}, "target", "must be 'node', 'cluster' or {labels"),
        ({"target": {"labels": []}}, "target", "must be"),
        ({"cooldown": "soon"}, "cooldown", "not a duration"),
        ({"cooldown": -5}, "cooldown", "must be a duration"),
        ({"cooldown": True}, "cooldown", "must be a duration"),
        ({"cooldown": float("inf")}, "cooldown", "not a finite duration"),
        ({"cooldown": 10**30}, "cooldown", "too long"),
        ({"max_attempts": 0}, "max_attempts", "whole number >= 1"),
        ({"max_attempts": "3"}, "max_attempts", "whole number"),
        ({"max_attempts": True}, "max_attempts", "whole number"),
        ({"steps": None}, "steps", "required"),
        ({"steps": []}, "steps", "at least one step"),
        ({"steps": "log"}, "steps", "at least one step"),
        ({"on_resolved": "log"}, "on_resolved", "must be a list of steps"),
        ({"description": 5}, "description", "must be a string"),
    ],
)
def test_playbook_errors_name_the_file_the_playbook_and_the_field(
    registry: ActionRegistry, changes: dict[str, Any], field: str, message: str
) -> None:
    error = error_of(minimal(**changes), registry)  # a None change leaves the key out

    assert (error.file, error.playbook, error.field) == ("pb.yaml", "pb", field)
    assert message in str(error)
    assert str(error).startswith(f"file pb.yaml, playbook 'pb', field {field}: ")


@pytest.mark.parametrize(
    ("step", "field", "message"),
    [
        ("not a mapping", "steps[0]", "a step must be a mapping"),
        ({"action": "log", "with": {"message": "x"}, "when": "now"}, "steps[0].when", "unknown key"),
        (
            {"action": "shell.run", "with": {}},
            "steps[0].action",
            # The known names start the sorted list; not pinned further, so a new action needs no edit here.
            "unknown action 'shell.run' (known: check.prometheus, disk.cleanup, gpu.",
        ),
        ({"with": {"message": "x"}}, "steps[0].action", "unknown action None"),
        ({"action": "log", "with": ["message"]}, "steps[0].with", "must be a mapping"),
        ({"action": "log", "with": {"message": "x", "colour": "red"}}, "steps[0].with", "unknown parameter 'colour'"),
        ({"action": "log", "with": {}}, "steps[0].with", "missing required parameter 'message'"),
        ({"action": "log", "with": {"message": "x", "level": "loud"}}, "steps[0].with", "must be one of debug"),
        (
            {"action": "notify.webhook", "with": {"url": "{{ annotations.callback }}"}},
            "steps[0].with",
            "parameter 'url' must be written in the playbook, not templated from the alert",
        ),
        (
            {"action": "notify.webhook", "with": {"url": "http://x.example", "headers": {"A": "{{ labels.a }}"}}},
            "steps[0].with",
            "parameter 'headers' must be written in the playbook",
        ),
        ({"action": "log", "with": {"message": "{{ labels.x "}}, "steps[0].with.message", "template syntax error"),
        (
            {"action": "log", "with": {"message": "{% if x %}open"}},
            "steps[0].with.message",
            "template syntax error",
        ),
        ({"action": "log", "with": {"message": "x"}, "retries": 11}, "steps[0].retries", "from 0 to 10"),
        ({"action": "log", "with": {"message": "x"}, "retries": -1}, "steps[0].retries", "from 0 to 10"),
        ({"action": "log", "with": {"message": "x"}, "retries": "3"}, "steps[0].retries", "from 0 to 10"),
        ({"action": "log", "with": {"message": "x"}, "retries": True}, "steps[0].retries", "from 0 to 10"),
        ({"action": "log", "with": {"message": "x"}, "timeout": "0s"}, "steps[0].timeout", "longer than 0s"),
        ({"action": "log", "with": {"message": "x"}, "timeout": "later"}, "steps[0].timeout", "not a duration"),
        ({"action": "log", "with": {"message": "x"}, "name": ""}, "steps[0].name", "non-empty string"),
        ({"action": "log", "with": {"message": "x"}, "always": "yes"}, "steps[0].always", "true or false"),
        (
            {"action": "log", "with": {"message": "x"}, "continue_on_error": 1},
            "steps[0].continue_on_error",
            "true or false",
        ),
    ],
)
def test_step_errors_name_the_step_and_its_field(registry: ActionRegistry, step: Any, field: str, message: str) -> None:
    error = error_of(minimal(steps=[step]), registry)

    assert (error.file, error.playbook, error.field) == ("pb.yaml", "pb", field)
    assert message in str(error)


def test_errors_in_on_resolved_steps_name_that_list(registry: ActionRegistry) -> None:
    data = minimal(on_resolved=[{"action": "log", "with": {"message": "ok"}}, {"action": "nope"}])

    error = error_of(data, registry)

    assert error.field == "on_resolved[1].action"


def test_a_template_deep_in_params_with_bad_syntax_names_the_nested_path(registry: ActionRegistry) -> None:
    step = {
        "action": "notify.webhook",
        "with": {"url": "http://x.example", "headers": {"X-A": "{{ oops"}},
    }

    error = error_of(minimal(steps=[step]), registry)

    assert error.field == "steps[0].with.headers.X-A"


def test_a_templated_param_that_is_not_static_loads(registry: ActionRegistry) -> None:
    step = {"action": "notify.webhook", "with": {"url": "http://x.example", "message": "{{ labels.gpu }}"}}

    assert parse_playbook(minimal(steps=[step]), registry).steps[0].params["message"] == "{{ labels.gpu }}"


def test_numeric_durations_are_seconds(registry: ActionRegistry) -> None:
    playbook = parse_playbook(
        minimal(cooldown=90, steps=[{"action": "log", "with": {"message": "x"}, "timeout": 2.5}]), registry
    )

    assert playbook.cooldown == timedelta(seconds=90)
    assert playbook.steps[0].timeout == 2.5


# --------------------------------------------------------------------------- matching


def test_alertname_may_be_a_list(registry: ActionRegistry) -> None:
    playbook = parse_playbook(minimal(match={"alertname": ["GpuXidError", "GPUTemperatureHigh"]}), registry)

    assert playbook.alertnames == ("GpuXidError", "GPUTemperatureHigh")
    assert playbook.matches(alert({}))
    other = parse_notification(
        {
            "version": "4",
            "status": "firing",
            "alerts": [
                {
                    "status": "firing",
                    "labels": {"alertname": "DiskFull"},
                    "startsAt": "2026-01-01T00:00:00Z",
                    "fingerprint": "f",
                }
            ],
        }
    ).alerts[0]
    assert not playbook.matches(other)


def test_a_single_matcher_string_is_accepted(registry: ActionRegistry) -> None:
    playbook = parse_playbook(minimal(match={"alertname": "GpuXidError", "labels": 'severity="critical"'}), registry)

    assert playbook.matches(alert({"severity": "critical"}))
    assert not playbook.matches(alert({"severity": "warning"}))


@pytest.mark.parametrize(
    ("matchers", "labels", "expected"),
    [
        (['severity="critical"'], {"severity": "critical"}, True),
        (['severity="critical"'], {"severity": "critical-ish"}, False),
        (['severity!="info"'], {"severity": "critical"}, True),
        (['severity!="info"'], {}, True),
        (['severity=~"critical|page"'], {"severity": "page"}, True),
        (['severity=~"crit"'], {"severity": "critical"}, False),  # regexes are fully anchored
        (['severity!~"info|debug"'], {"severity": "debug"}, False),
        (['severity!~"info|debug"'], {"severity": "warning"}, True),
        (['team=""'], {}, True),  # a missing label reads as the empty string
        (['team!=""'], {}, False),
        (['severity="critical"', 'gpu=~"[0-7]"'], {"severity": "critical", "gpu": "3"}, True),
        (['severity="critical"', 'gpu=~"[0-7]"'], {"severity": "critical", "gpu": "12"}, False),
        ([], {"anything": "goes"}, True),
    ],
)
def test_label_matchers_follow_alertmanager_semantics(
    registry: ActionRegistry, matchers: list[str], labels: dict[str, str], expected: bool
) -> None:
    playbook = parse_playbook(minimal(match={"alertname": "GpuXidError", "labels": matchers}), registry)

    assert playbook.matches(alert(labels)) is expected


def test_a_playbook_set_finds_every_matching_playbook(tmp_path: Path, registry: ActionRegistry) -> None:
    write(tmp_path, "a.yaml", yaml.safe_dump(minimal(name="all-xid")))
    write(
        tmp_path,
        "b.yaml",
        yaml.safe_dump(
            minimal(name="critical-xid", match={"alertname": "GpuXidError", "labels": ['severity="critical"']})
        ),
    )
    write(tmp_path, "c.yaml", yaml.safe_dump(minimal(name="disk", match={"alertname": "DiskFull"})))
    playbooks = load_playbooks(tmp_path, registry)

    assert [p.name for p in playbooks.matching(alert({"severity": "critical"}))] == ["all-xid", "critical-xid"]
    assert [p.name for p in playbooks.matching(alert({"severity": "info"}))] == ["all-xid"]


# --------------------------------------------------------------------------- targets


def node_playbook(registry: ActionRegistry, target: Any = "node") -> Playbook:
    return parse_playbook(minimal(target=target), registry)


@pytest.mark.parametrize(
    ("labels", "target"),
    [
        ({"node": "n1", "kubernetes_node": "k1", "Hostname": "h1", "hostname": "h2", "instance": "i:9100"}, "n1"),
        ({"kubernetes_node": "k1", "Hostname": "h1", "hostname": "h2", "instance": "i:9100"}, "k1"),
        ({"Hostname": "h1", "hostname": "h2", "instance": "i:9100"}, "h1"),
        ({"hostname": "h2", "instance": "i:9100"}, "h2"),
        ({"instance": "node-7:9100"}, "node-7"),
        ({"instance": "node-7"}, "node-7"),
        ({"instance": "10.0.0.5:9400"}, "10.0.0.5"),
        ({"instance": "[2001:db8::1]:9100"}, "2001:db8::1"),
        ({"instance": "[::1]"}, "::1"),
        ({"instance": "2001:db8::1"}, "2001:db8::1"),
        ({"node": "", "Hostname": "h1"}, "h1"),  # an empty label does not count
    ],
)
def test_node_targets_take_the_first_node_label_present(
    registry: ActionRegistry, labels: dict[str, str], target: str
) -> None:
    assert node_playbook(registry).target.resolve(alert(labels)) == target


def test_without_any_node_label_the_target_is_the_alert_fingerprint(registry: ActionRegistry) -> None:
    assert node_playbook(registry).target.resolve(alert({"gpu": "3"}, "abcdef0123456789")) == "alert/abcdef0123456789"


def test_a_cluster_target_is_the_same_for_every_alert(registry: ActionRegistry) -> None:
    playbook = node_playbook(registry, "cluster")

    assert playbook.target.resolve(alert({"node": "n1"})) == "cluster"
    assert playbook.target.resolve(alert({})) == "cluster"


def test_custom_target_labels_are_tried_in_order(registry: ActionRegistry) -> None:
    playbook = node_playbook(registry, {"labels": ["pod", "exported_pod"]})

    assert playbook.target.resolve(alert({"pod": "p1", "exported_pod": "p2", "node": "n"})) == "p1"
    assert playbook.target.resolve(alert({"exported_pod": "p2", "node": "n"})) == "p2"
    assert playbook.target.resolve(alert({"node": "n"}, "ffff")) == "alert/ffff"


def test_a_custom_target_label_may_be_a_single_string(registry: ActionRegistry) -> None:
    playbook = node_playbook(registry, {"labels": "job"})

    assert playbook.target.resolve(alert({"job": "trainer"})) == "trainer"


@pytest.mark.parametrize(
    ("instance", "host"),
    [
        ("node-1:9100", "node-1"),
        ("node-1", "node-1"),
        ("[::1]:9100", "::1"),
        ("[fe80::1%eth0]:9100", "fe80::1%eth0"),
        ("fe80::1", "fe80::1"),
        ("node-1:http", "node-1:http"),
        ("[broken", "[broken"),
    ],
)
def test_strip_port_removes_only_a_numeric_port(instance: str, host: str) -> None:
    assert strip_port(instance) == host


def test_guard_by_gpu_identity_labels_count_one_gpu_under_one_key_however_it_is_spelled(
    registry: ActionRegistry,
) -> None:
    playbook = parse_playbook(minimal(guard_by=["UUID", "pci_bus_id", "job"]), registry)
    uuid = "GPU-5f6ac2e3-2f4b-13d2-80f4-5e4d9c3e8d2a"

    keys = {
        playbook.guard_key(alert({"UUID": spelling, "pci_bus_id": pci, "job": "dcgm"}), "node-a")
        for spelling, pci in [
            (uuid, "00000000:3B:00.0"),
            (uuid.upper(), "0000:3b:00.0"),
            ("gpu" + uuid[3:].upper(), "3b:00.0"),
        ]
    }

    assert keys == {f"node-a/{uuid}/00000000:3B:00.0/dcgm"}


def test_guard_by_keeps_other_labels_and_values_that_name_no_gpu_as_sent(registry: ActionRegistry) -> None:
    playbook = parse_playbook(minimal(guard_by=["UUID", "training_job"]), registry)

    key = playbook.guard_key(alert({"UUID": "Not-A-Uuid", "training_job": "GPU-Job"}), "node-a")

    assert key == "node-a/Not-A-Uuid/GPU-Job"


def test_a_node_label_longer_than_the_target_limit_is_cut_and_made_unique_by_a_hash() -> None:
    spec = TargetSpec()
    first = parse_notification(notification_payload(alert_payload(labels={"node": "n" * 300 + "a"}))).alerts[0]
    second = parse_notification(notification_payload(alert_payload(labels={"node": "n" * 300 + "b"}))).alerts[0]
    assert len(spec.resolve(first)) == MAX_TARGET_LENGTH
    assert spec.resolve(first) != spec.resolve(second)
    assert spec.resolve(first).startswith("n" * 100)


def test_a_short_node_label_is_the_target_unchanged() -> None:
    alert = parse_notification(notification_payload(alert_payload(labels={"node": "gpu-node-7"}))).alerts[0]
    assert TargetSpec().resolve(alert) == "gpu-node-7"
