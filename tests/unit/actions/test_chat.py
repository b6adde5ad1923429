"""remediate.actions.chat: the chat message's content, its escaping and its limits, with no HTTP."""

from __future__ import annotations

import dataclasses

import pytest

from remediate.actions.base import StepContext, StepView
from remediate.actions.chat import (
    SLACK_APPROVE_ACTION,
    ChatMessage,
    clip,
    run_page_url,
    slack_blocks,
    teams_card,
)
from remediate.intake.alertref import AlertRef

ALERT = AlertRef(alertname="GpuXidError", status="firing", annotations={"summary": "GPU 3 fell off the bus"})


def message(**ctx_fields: object) -> ChatMessage:
    fields: dict[str, object] = {
        "run_id": 9,
        "step_index": 1,
        "playbook": "gpu-xid",
        "target": "node-a",
        "alert": ALERT,
        "steps": (StepView(0, "drain", "k8s.drain", "succeeded"), StepView(1, "tell", "notify.slack", "pending")),
    }
    fields.update(ctx_fields)
    return ChatMessage.of_step(StepContext(**fields), public_url="https://remediate.example.com")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("public_url", "expected"),
    [
        ("https://remediate.example.com", "https://remediate.example.com/ui/runs/9"),
        ("https://example.com/remediate/", "https://example.com/remediate/ui/runs/9"),
        (None, None),
    ],
)
def test_run_page_url(public_url: str | None, expected: str | None) -> None:
    assert run_page_url(public_url, 9) == expected


def test_clip_keeps_short_text_and_cuts_long_text_with_an_ellipsis_never_inside_an_escape() -> None:
    assert clip("abc", 3) == "abc"
    assert clip("abcdef", 4) == "abc…"
    assert clip("ab&amp;cd", 5) == "ab…"  # "ab&a…" would show a broken entity
    assert clip("ab&amp;cd", 8) == "ab&amp;…"


def test_an_approve_button_to_the_run_page_while_the_run_waits_for_approval() -> None:
    waiting = dataclasses.replace(message(mode="approve"), awaiting_approval=True)

    slack_buttons = next(b for b in slack_blocks(waiting)["blocks"] if b["type"] == "actions")["elements"]
    teams_actions = teams_card(waiting)["attachments"][0]["content"]["actions"]

    page = "https://remediate.example.com/ui/runs/9"
    assert [(b["text"]["text"], b["url"], b.get("style")) for b in slack_buttons] == [
        ("Open run 9", page, None),
        ("Approve", page, "primary"),
    ]
    assert [(a["title"], a["url"]) for a in teams_actions] == [("Open run 9", page), ("Approve", page)]
    assert waiting.status == "waiting for approval"
    # A running approve-mode run was approved already: no Approve button.
    assert [b["text"]["text"] for b in slack_blocks(message(mode="approve"))["blocks"][-1]["elements"]] == [
        "Open run 9"
    ]
    assert message(mode="approve").status == "alert firing; remediation running (approved)"


def test_with_slack_interactivity_the_approve_button_approves_in_place_and_teams_keeps_the_link() -> None:
    """An interactive button (action_id, the run id as value, a confirmation), which
    Slack posts to /slack/interactions; Teams' card has no such callback without a Bot Framework app."""
    waiting = dataclasses.replace(message(mode="approve"), awaiting_approval=True, approve_in_place=True)

    slack_buttons = next(b for b in slack_blocks(waiting)["blocks"] if b["type"] == "actions")["elements"]
    approve = slack_buttons[1]
    assert [b["action_id"] for b in slack_buttons] == ["open-run", SLACK_APPROVE_ACTION]
    assert (approve["text"]["text"], approve["value"], approve["style"]) == ("Approve", "9", "primary")
    assert "url" not in approve
    assert approve["confirm"]["title"]["text"] == "Approve run 9?"
    assert approve["confirm"]["text"]["text"] == (
        "once approved, remediate runs playbook gpu-xid (2 steps) for GpuXidError on node-a"
    )
    teams_actions = teams_card(waiting)["attachments"][0]["content"]["actions"]
    assert [a["type"] for a in teams_actions] == ["Action.OpenUrl", "Action.OpenUrl"]
    # Without public_url the button still approves (no link to open).
    bare = dataclasses.replace(waiting, run_url=None)
    assert [b["action_id"] for b in slack_blocks(bare)["blocks"][-1]["elements"]] == [SLACK_APPROVE_ACTION]


def test_the_message_after_approval_says_who_approved() -> None:
    approved = message(mode="approve", approved_by="slack:alice")
    assert approved.status == "alert firing; remediation running (approved by slack:alice)"
    assert "remediation running (approved by slack:alice)" in slack_blocks(approved)["text"]


def test_status_says_dry_run_and_undo() -> None:
    assert message(mode="dry-run").status == "alert firing; remediation dry run: planning only, nothing is changed"
    resolved = message(phase="resolved", alert=dataclasses.replace(ALERT, status="resolved"))
    assert resolved.status == "alert resolved; undo running"
    assert resolved.doing == "remediate undoes playbook gpu-xid (2 steps):"
    assert slack_blocks(resolved)["blocks"][0]["text"]["text"] == "✅ resolved: GpuXidError on node-a"


def test_the_description_annotation_stands_in_for_a_missing_summary() -> None:
    described = message(alert=AlertRef(alertname="DiskFull", annotations={"description": "/data is 99% full"}))
    assert described.summary == "/data is 99% full"
    assert message(alert=AlertRef(alertname="DiskFull")).summary == ""
