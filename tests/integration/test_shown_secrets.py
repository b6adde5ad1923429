"""What readers see of a run's steps: a secret a URL or a header carries is hidden wherever the params,
plans, results and errors are shown (GET /runs/<id>, /history, the run page, `remediate show`).

The load-time checks keep such secrets out of new runs; these runs were stored as an older remediate stored
them (a Slack webhook URL written in a playbook, a token in a URL's path, a token-like custom header), and
the history keeps them: the steps' rows are written with the store's own SQL to the real SQLite file."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from remediate.store import schema as t
from tests.support.cli import run_cli
from tests.support.http import APPROVE_XID, READ_TOKEN, MakeServer, Server, alert, notification

SLACK_SECRET = "xYz0123456789AbCdEfGhIjK"
SLACK_HOOK = f"https://hooks.slack.com/services/T0123ABCD/B0456EFGH/{SLACK_SECRET}"
PATH_TOKEN = "sk0123456789abcdefghijKLMN"
HEADER_TOKEN = "tok_0123456789abcdefABCDEF"
SECRETS = (SLACK_SECRET, "T0123ABCD", PATH_TOKEN, HEADER_TOKEN, "hunter2")

STORED_PARAMS = {
    "url": SLACK_HOOK,
    "headers": {"X-Team": "ml-infra", "X-Api-Key": "short", "X-Trace": HEADER_TOKEN},
    "message": "GPU 3",
}
STORED_PLAN = {"would_post_to": SLACK_HOOK}
STORED_RESULT = {"posted_to": f"https://relay.example.test/hook/{PATH_TOKEN}/x?team=ml", "status_code": 200}
STORED_ERROR = f"POST https://ops:hunter2@relay.example.test/hook/{PATH_TOKEN} failed: 500"


@pytest.fixture
def stored(make_server: MakeServer) -> tuple[Server, int]:
    server = make_server(playbooks={"approve-xid.yaml": APPROVE_XID})
    server.webhook(notification(alert("ffff000000000001", instance="node-a:9400", gpu="0")))
    run_id = server.history()["entries"][0]["run_id"]
    with server.store.write() as conn:
        conn.execute(
            sa.update(t.steps)
            .where(t.steps.c.run_id == run_id)
            .values(
                action="notify.slack",
                params=json.dumps(STORED_PARAMS),
                plan=json.dumps(STORED_PLAN),
                result=json.dumps(STORED_RESULT),
                error=STORED_ERROR,
            )
        )
        conn.execute(sa.update(t.runs).where(t.runs.c.id == run_id).values(error=STORED_ERROR))
    return server, run_id


def assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} shown: {text[:2000]}"


def test_the_run_json_hides_chat_webhook_paths_path_tokens_and_token_like_headers(stored: tuple[Server, int]) -> None:
    server, run_id = stored
    answer = server.get(f"/runs/{run_id}", token=READ_TOKEN)
    assert answer.status_code == 200
    body = answer.get_data(as_text=True)

    assert_no_secret(body)
    [step] = answer.get_json()["steps"]
    assert step["params"]["url"] == "https://hooks.slack.com/***"
    assert step["params"]["headers"] == {"X-Team": "ml-infra", "X-Api-Key": "***", "X-Trace": "***"}
    assert step["params"]["message"] == "GPU 3"
    assert step["plan"] == {"would_post_to": "https://hooks.slack.com/***"}
    assert step["result"]["posted_to"] == "https://relay.example.test/hook/***/x?team=ml"
    assert step["error"] == "POST https://ops:***@relay.example.test/hook/*** failed: 500"
    assert answer.get_json()["error"] == step["error"]
    history = server.get("/history", token=READ_TOKEN).get_data(as_text=True)
    assert_no_secret(history)


def test_the_run_page_and_remediate_show_hide_them_too(stored: tuple[Server, int]) -> None:
    server, run_id = stored
    login = server.client.get("/ui/login")
    csrf = login.get_data(as_text=True).split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
    server.client.post("/ui/login", data={"token": READ_TOKEN, "csrf_token": csrf})
    page = server.client.get(f"/ui/runs/{run_id}")
    assert page.status_code == 200
    assert "hooks.slack.com/***" in page.get_data(as_text=True)
    assert_no_secret(page.get_data(as_text=True))

    database_url = server.database_url
    for args in (["show", run_id], ["show", run_id, "--json"]):
        shown = run_cli(*args, "--database-url", database_url)
        assert shown.exit_code == 0, shown.output
        assert "hooks.slack.com/***" in shown.stdout
        assert_no_secret(shown.stdout)
