"""remediate.history.api: the JSON of /history and /runs/<id> (API v1), key by key and in order."""

from __future__ import annotations

import json

from remediate.history.api import entry_json, history_json, run_json
from remediate.store import (
    AlertDetail,
    AttemptDetail,
    DecisionSummary,
    HistoryEntry,
    RunDetail,
    RunSummary,
    StepDetail,
)

RUN = RunDetail(
    id=7,
    playbook="gpu-overheat",
    alertname="GPUTemperatureHigh",
    target="gpu-node-7",
    phase="firing",
    mode="enforce",
    status="succeeded",
    created_at=10.0,
    started_at=11.0,
    finished_at=12.5,
    approved_by=None,
    approved_at=None,
    announced_at=None,
    announce_error=None,
    error=None,
    rerunnable=False,
    superseded_by=None,
    rung=None,
    decision=DecisionSummary("accepted", "ok"),
    alert=AlertDetail(
        id=3,
        notification_id=2,
        fingerprint="abc",
        status="firing",
        starts_at="2026-01-01T00:00:00Z",
        ends_at=None,
        labels={"alertname": "GPUTemperatureHigh"},
        annotations={"summary": "hot"},
        generator_url="http://prometheus/graph",
    ),
    steps=[
        StepDetail(
            index=0,
            name="cap",
            action="gpu.set_power_limit",
            where="node",
            params={"watts": 300},
            status="succeeded",
            plan={"from": 400},
            result={"to": 300},
            error=None,
            attempts=[AttemptDetail(1, 11.0, 12.0, "succeeded", None, "replica-a:7")],
            timeout=30.0,
            retries=1,
            always=False,
            started_at=11.0,
            finished_at=12.0,
        )
    ],
)


def test_a_run_is_the_api_v1_shape_with_its_keys_in_order() -> None:
    body = run_json(RUN)

    assert list(body) == [
        "id", "playbook", "alertname", "target", "phase", "mode", "status", "created_at", "started_at",
        "finished_at", "approved_by", "approved_at", "announced_at", "announce_error", "error", "rerunnable",
        "superseded_by", "ran_on", "rung", "ladder", "decision", "alert", "steps", "playbook_version", "wave",
    ]  # fmt: skip
    assert (body["rung"], body["ladder"]) == (None, None)  # a playbook without a ladder
    assert body["decision"] == {"decision": "accepted", "reason": "ok"}
    assert body["alert"] == {
        "id": 3,
        "notification_id": 2,
        "fingerprint": "abc",
        "status": "firing",
        "startsAt": "2026-01-01T00:00:00Z",
        "endsAt": None,
        "labels": {"alertname": "GPUTemperatureHigh"},
        "annotations": {"summary": "hot"},
        "generatorURL": "http://prometheus/graph",
    }
    (step,) = body["steps"]
    assert list(step) == [
        "index", "name", "action", "where", "params", "status", "plan", "result", "error", "attempts",
        "timeout", "retries", "always", "continue_on_error", "started_at", "finished_at", "node",
    ]  # fmt: skip
    assert step["attempts"] == [
        {"number": 1, "started_at": 11.0, "finished_at": 12.0, "outcome": "succeeded", "error": None,
         "ran_on": "replica-a:7"}
    ]  # fmt: skip
    assert body["ran_on"] == ["replica-a:7"]
    assert (step["params"], step["plan"], step["result"]) == ({"watts": 300}, {"from": 400}, {"to": 300})
    json.dumps(body)  # plain JSON, nothing left typed


def test_ran_on_names_each_executor_once_in_the_order_it_first_ran_an_attempt() -> None:
    """A run taken over after its replica died shows both; attempts from before schema
    version 6 (no worker recorded) add nothing."""
    (step,) = RUN.steps
    first = step._replace(
        attempts=[
            AttemptDetail(1, 11.0, 12.0, "interrupted", "the executor stopped", "replica-a:7"),
            AttemptDetail(2, 20.0, 21.0, "succeeded", None, "replica-b:9"),
        ]
    )
    earlier = step._replace(index=1, attempts=[AttemptDetail(1, 5.0, 6.0, "succeeded", None, None)])
    later = step._replace(index=2, attempts=[AttemptDetail(1, 22.0, 23.0, "succeeded", None, "replica-b:9")])

    body = run_json(RUN._replace(steps=[first, earlier, later]))

    assert body["ran_on"] == ["replica-a:7", "replica-b:9"]
    assert [a["ran_on"] for a in body["steps"][0]["attempts"]] == ["replica-a:7", "replica-b:9"]
    assert body["steps"][1]["attempts"][0]["ran_on"] is None
    assert run_json(RUN._replace(steps=[earlier]))["ran_on"] == []


def test_a_ladders_run_says_which_rung_of_how_many_and_why() -> None:
    reason = "matched playbook hot (firing); rung 2 of 3 (lock-clocks): re-fired 4m after rung 1 ran (holds_for 30m)"

    body = run_json(RUN._replace(rung=2, decision=DecisionSummary("accepted", reason)))
    unexplained = run_json(RUN._replace(rung=1, decision=None))

    assert body["rung"] == 2
    assert body["ladder"] == {
        "rung": 2, "of": 3, "name": "lock-clocks", "why": "re-fired 4m after rung 1 ran (holds_for 30m)",
    }  # fmt: skip
    assert unexplained["ladder"] == {"rung": 1, "of": None, "name": None, "why": None}


def test_a_history_entry_of_a_ladder_shows_its_rung() -> None:
    entry = HistoryEntry(
        5, 10.0, "GPUTemperatureHigh", "abc", "firing", "hot", "node-7", "accepted", "ok", "queued", 7,
        RunSummary(7, "firing", "enforce", "queued", None, None, None, 3),
    )  # fmt: skip

    body = entry_json(entry)

    assert (body["rung"], body["run"]["rung"]) == (3, 3)


def test_a_run_without_a_decision_shows_null() -> None:

    assert run_json(RUN._replace(decision=None))["decision"] is None


def test_a_history_page_is_its_entries_and_the_next_cursor() -> None:
    with_run = HistoryEntry(
        5, 10.0, "GPUTemperatureHigh", "abc", "firing", "gpu-overheat", "gpu-node-7", "accepted", None,
        "running", 7, RunSummary(7, "firing", "enforce", "running", 11.0, None, None),
    )  # fmt: skip
    without = HistoryEntry(
        4, 9.0, "Other", "def", "firing", None, None, "unmatched", "no playbook", "unmatched", None, None,
        "repeat interval elapsed",
    )  # fmt: skip

    page = history_json([with_run, without], "ZDo0")

    assert list(page) == ["entries", "next_cursor"]
    assert page["next_cursor"] == "ZDo0"
    first, second = page["entries"]
    assert first == {
        "id": 5,
        "time": 10.0,
        "alertname": "GPUTemperatureHigh",
        "fingerprint": "abc",
        "alert_status": "firing",
        "playbook": "gpu-overheat",
        "target": "gpu-node-7",
        "decision": "accepted",
        "reason": None,
        "notification_reason": None,
        "status": "running",
        "run_id": 7,
        "rung": None,
        "run": {
            "id": 7,
            "phase": "firing",
            "mode": "enforce",
            "status": "running",
            "started_at": 11.0,
            "finished_at": None,
            "error": None,
            "rung": None,
        },
    }
    assert list(first) == list(entry_json(without))
    assert (second["run_id"], second["run"], second["reason"]) == (None, None, "no playbook")
    assert second["notification_reason"] == "repeat interval elapsed"
    assert history_json([], None) == {"entries": [], "next_cursor": None}
