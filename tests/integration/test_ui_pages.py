"""The web pages (remediate.server.ui) through Flask's test client on a real SQLite store: login, the session
cookie, CSRF, roles, and what each page shows. The same pages in a real Chromium: tests/e2e/test_ui_browser.py."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from werkzeug.test import TestResponse

from remediate.config.settings import READ, Credential, load_settings
from remediate.errors import ConfigError
from remediate.server import create_app
from remediate.store import LoginThrottle
from remediate.store import schema as t
from tests.support.http import (
    APPROVE_XID,
    ON_EVERY_DATABASE,
    OPERATOR_TOKEN,
    READ_TOKEN,
    TOKEN,
    MakeServer,
    Server,
    alert,
    notification,
)
from tests.support.realsystems import WebhookRecorder

ALICE_TOKEN = "alice-operator-token-abcdef"
BOB_TOKEN = "bob-operator-token-0123456"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf(page: TestResponse) -> str:
    found = CSRF.search(page.get_data(as_text=True))
    assert found is not None, page.get_data(as_text=True)[:500]
    return found.group(1)


def log_in(server: Server, token: str) -> TestResponse:
    form = server.client.get("/ui/login")
    return server.client.post("/ui/login", data={"token": token, "csrf_token": csrf(form)})


def text(response: TestResponse) -> str:
    return response.get_data(as_text=True)


def approve_server(make_server: MakeServer, **settings: Any) -> Server:
    return make_server(playbooks={"approve-xid.yaml": APPROVE_XID}, **settings)


def awaiting_run(make_server: MakeServer) -> tuple[Server, int]:
    """A server with approve-xid's one run awaiting approval, and that run's id."""
    server = approve_server(make_server)
    server.webhook(notification(alert("ffff000000000001", instance="node-a:9400", gpu="0")))
    return server, server.history()["entries"][0]["run_id"]


def test_pages_need_a_login_and_the_login_sets_a_signed_session_cookie_without_the_token(server: Server) -> None:
    first = server.client.get("/ui/?playbook=log-xid")
    assert first.status_code == 302
    assert first.headers["Location"].startswith("/ui/login?next=")

    answer = log_in(server, OPERATOR_TOKEN)
    assert answer.status_code == 302 and answer.headers["Location"] == "/ui/"
    cookie = answer.headers["Set-Cookie"]
    assert cookie.startswith("remediate_ui=")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui" in cookie and "Expires=" in cookie
    assert "Secure" not in cookie  # plain http here; https: tests below
    assert OPERATOR_TOKEN not in cookie
    page = server.client.get("/ui/")
    assert page.status_code == 200
    assert "operator (operator)" in text(page)
    assert OPERATOR_TOKEN not in text(page) and TOKEN not in text(page)


def test_the_cookie_is_secure_over_https(server: Server) -> None:
    form = server.client.get("/ui/login", base_url="https://remediate.example")
    answer = server.client.post(
        "/ui/login",
        data={"token": READ_TOKEN, "csrf_token": csrf(form)},
        base_url="https://remediate.example",
    )
    assert answer.status_code == 302
    assert "Secure" in answer.headers["Set-Cookie"]


def test_ui_cookie_secure_always_marks_the_cookie_secure_behind_a_tls_terminating_proxy(
    make_server: MakeServer,
) -> None:
    """Behind a proxy that terminates TLS the server sees plain http and left `Secure` off."""
    server = make_server(ui_cookie_secure=load_settings(env={"REMEDIATE_UI_COOKIE_SECURE": "always"}).ui.cookie_secure)
    answer = log_in(server, READ_TOKEN)  # plain http, as the proxy forwards it
    assert answer.status_code == 302
    assert "Secure" in answer.headers["Set-Cookie"]
    with pytest.raises(ConfigError, match="setting 'ui_cookie_secure': must be one of auto, always"):
        load_settings(env={"REMEDIATE_UI_COOKIE_SECURE": "yes"})


def test_the_webhook_token_and_unknown_tokens_cannot_log_in(server: Server) -> None:
    for token in (TOKEN, "not-a-token-at-all-000"):
        answer = log_in(server, token)
        assert answer.status_code == 401
        assert "may not read" in text(answer)
        assert token not in text(answer)
        assert server.client.get("/ui/").status_code == 302


def test_a_next_with_a_line_break_or_control_character_is_refused_not_a_500(make_server: MakeServer) -> None:
    """`next=/ui/%0d%0aSet-Cookie:...` passed the /ui/ check and broke the redirect's
    header after a successful login (500). Such a target is ignored: the login goes to the history."""
    server, run_id = awaiting_run(make_server)
    for target in ("/ui/state\r\nSet-Cookie: evil=1", "/ui/\nx", "/ui/\x00", "/ui/\tx", "/ui/\x7f"):
        server.client.delete_cookie("remediate_ui", path="/ui")
        form = server.client.get("/ui/login", query_string={"next": target})
        assert form.status_code == 200
        answer = server.client.post(
            "/ui/login", data={"token": OPERATOR_TOKEN, "csrf_token": csrf(form), "next": target}
        )
        assert answer.status_code == 302 and answer.headers["Location"] == "/ui/", repr(target)
        assert "evil" not in answer.headers.get("Set-Cookie", "")
        page = server.client.get(f"/ui/runs/{run_id}")
        kept = server.client.post(f"/ui/runs/{run_id}/approve", data={"csrf_token": csrf(page), "next": target})
        assert kept.status_code == 302 and kept.headers["Location"] == f"/ui/runs/{run_id}", repr(target)


def test_rapid_failed_logins_are_throttled_per_address_and_the_right_token_still_logs_in(
    server: Server,
) -> None:
    """200 guesses in 4 s must not go unchecked: after 10 failures in a minute from one address, every wrong
    token from it answers 429 with Retry-After. The right token still logs in at once: behind an ingress
    every user shares one address, and a guesser (or a colleague's typos) must not lock them all out."""
    throttle = LoginThrottle()
    for _ in range(2 * throttle.allowed):  # successful logins count for nothing
        assert log_in(server, READ_TOKEN).status_code == 302
    token = csrf(server.client.get("/ui/login"))

    answers = [
        server.client.post("/ui/login", data={"token": f"guess-{n:04d}-of-a-token-0000", "csrf_token": token})
        for n in range(200)
    ]

    codes = [answer.status_code for answer in answers]
    assert codes == [401] * throttle.allowed + [429] * (200 - throttle.allowed)
    assert 1 <= int(answers[-1].headers["Retry-After"]) <= throttle.window
    assert "Too many failed logins" in text(answers[-1])
    right = log_in(server, OPERATOR_TOKEN)
    assert right.status_code == 302 and "Set-Cookie" in right.headers
    assert server.client.get("/ui/").status_code == 200
    assert log_in(server, READ_TOKEN).status_code == 302  # and again, a read token too, still in the window
    wrong = log_in(server, TOKEN)  # the webhook token may not log in: a failure, still refused
    assert wrong.status_code == 429 and "Set-Cookie" not in wrong.headers
    form = server.client.get("/ui/login", environ_base={"REMOTE_ADDR": "192.0.2.44"})
    other = server.client.post(
        "/ui/login",
        data={"token": "guess-from-another-address-0", "csrf_token": csrf(form)},
        environ_base={"REMOTE_ADDR": "192.0.2.44"},
    )
    assert other.status_code == 401  # another address has its own count

    with server.store.write() as conn:  # the window passes (as the 12-hour test moves the login time)
        conn.execute(sa.update(t.ui_login_failures).values(since=t.ui_login_failures.c.since - throttle.window))
    assert log_in(server, "guess-after-the-window-00000").status_code == 401


def test_a_login_without_its_csrf_token_is_refused(server: Server) -> None:
    server.client.get("/ui/login")
    answer = server.client.post("/ui/login", data={"token": OPERATOR_TOKEN})
    assert answer.status_code == 403
    assert server.client.get("/ui/").status_code == 302


def test_history_filters_folds_duplicates_and_links_runs(server: Server) -> None:
    first = notification(alert("aaaa000000000001", instance="node-1:9400", gpu="0"))
    for _ in range(4):  # the first accepted, three re-sends of the same occurrence: duplicates
        assert server.webhook(first).status_code == 200
    assert server.webhook(notification(alert("bbbb000000000002", instance="node-2:9400", gpu="1"))).status_code == 200
    log_in(server, READ_TOKEN)

    page = text(server.client.get("/ui/"))
    rows = re.findall(r'<tr class="entry" data-id="(\d+)">', page)
    assert len(rows) == 2, page  # 5 decisions: 3 duplicates folded into the first alert's row
    assert "+3 duplicates" in page
    assert 's-queued">queued' in page

    filtered = server.client.get("/ui/", query_string={"target": "node-2"})
    assert filtered.status_code == 200
    assert len(re.findall(r'<tr class="entry"', text(filtered))) == 1
    assert 'value="node-2"' in text(filtered)

    bad = server.client.get("/ui/", query_string={"since": "yesterday"})
    assert bad.status_code == 400
    assert "since must be" in text(bad)


def test_history_pages_with_an_older_link(server: Server) -> None:
    for i in range(55):
        server.webhook(notification(alert(f"cccc{i:012d}", instance=f"node-{i}:9400", gpu="0")))
    log_in(server, READ_TOKEN)
    first = text(server.client.get("/ui/"))
    assert len(re.findall(r'<tr class="entry"', first)) == 50
    older = re.search(r'<a href="([^"]+)" id="older">', first)
    assert older is not None
    second = text(server.client.get(older.group(1).replace("&amp;", "&")))
    assert len(re.findall(r'<tr class="entry"', second)) == 5
    assert 'id="newest"' in second and 'id="older"' not in second


def test_run_page_shows_alert_decision_steps_attempts_and_links_the_undo_both_ways(server: Server) -> None:
    firing = alert("dddd000000000001", instance="node-a:9400", gpu="3")
    firing["generatorURL"] = "http://prometheus.example/graph?g0.expr=up"
    server.webhook(notification(firing))
    server.drain()
    server.webhook(notification(alert("dddd000000000001", status="resolved", instance="node-a:9400", gpu="3")))
    server.drain()
    entries = server.history()["entries"]
    resolved_id, firing_id = entries[0]["run_id"], entries[1]["run_id"]
    log_in(server, READ_TOKEN)

    page = text(server.client.get(f"/ui/runs/{firing_id}"))
    assert 'id="run-status">succeeded' in page
    assert 'href="http://prometheus.example/graph?g0.expr=up"' in page
    assert "XID on GPU 3" in page  # the rendered params
    assert "accepted" in page
    assert f'href="/ui/runs/{resolved_id}"' in page
    assert re.search(r"<td>1</td><td>\d{4}-\d\d-\d\d [\d:]+Z</td><td>\d+ ms</td>", page)
    undo = text(server.client.get(f"/ui/runs/{resolved_id}"))
    assert f'id="firing-run" href="/ui/runs/{firing_id}"' in undo
    assert server.client.get("/ui/runs/999999").status_code == 404


RUN_ON_XID = """\
name: run-on-xid
match:
  alertname: GpuXidError
mode: approve
target: node
steps:
  - {name: note, action: log, with: {message: "XID on {{ labels.instance }}"}}
  - name: reset-there
    action: gpu.reset
    with: {gpu: "{{ labels.gpu }}"}
    run_on: {labels: [control_node]}
"""


def test_run_page_shows_the_node_a_run_on_step_runs_on(make_server: MakeServer) -> None:
    """A `run_on` step's node (resolved at ingest) is on the run page, linked to its node page;
    the run's target stays the alert's node."""
    server = make_server(playbooks={"run-on-xid.yaml": RUN_ON_XID})
    server.webhook(notification(alert("abab000000000001", instance="node-a:9400", gpu="0", control_node="node-c")))
    run_id = server.history()["entries"][0]["run_id"]
    log_in(server, READ_TOKEN)

    page = text(server.client.get(f"/ui/runs/{run_id}"))

    assert re.search(r'on <b><a id="node-link" href="/ui/nodes/node-a">node-a</a></b>', page), page
    assert 'where node on <a href="/ui/nodes/node-c">node-c</a> (run_on)' in page
    assert page.count("(run_on)") == 1  # the log step runs in the server


def test_only_http_generator_urls_become_links(server: Server) -> None:
    hostile = alert("eeee000000000001", instance="node-a:9400", gpu="0")
    hostile["generatorURL"] = "javascript:alert(document.cookie)"
    server.webhook(notification(hostile))
    run_id = server.history()["entries"][0]["run_id"]
    log_in(server, READ_TOKEN)
    page = text(server.client.get(f"/ui/runs/{run_id}"))
    assert 'href="javascript:' not in page
    assert "<code>javascript:alert(document.cookie)</code>" in page


def test_an_operator_approves_from_the_run_page_and_the_run_is_queued(make_server: MakeServer) -> None:
    server, run_id = awaiting_run(make_server)
    log_in(server, OPERATOR_TOKEN)
    page = server.client.get(f"/ui/runs/{run_id}")
    assert 'id="approve"' in text(page)
    answer = server.client.post(f"/ui/runs/{run_id}/approve", data={"csrf_token": csrf(page)})
    assert answer.status_code == 302 and answer.headers["Location"] == f"/ui/runs/{run_id}"
    after = text(server.client.get(f"/ui/runs/{run_id}"))
    assert 'id="run-status">queued' in after
    assert "approved by operator" in after
    assert server.get(f"/runs/{run_id}").get_json()["approved_by"] == "operator"


def test_the_read_role_sees_no_button_and_a_forged_approve_is_403(make_server: MakeServer) -> None:
    server, run_id = awaiting_run(make_server)
    log_in(server, READ_TOKEN)
    page = server.client.get(f"/ui/runs/{run_id}")
    assert 'id="approve"' not in text(page) and 'id="needs-operator"' in text(page)
    state = server.client.get("/ui/state")
    assert f'href="/ui/runs/{run_id}"' in text(state) and "Approve</button>" not in text(state)
    forged = server.client.post(f"/ui/runs/{run_id}/approve", data={"csrf_token": csrf(page)})
    assert forged.status_code == 403
    for path in ("/ui/pause", "/ui/resume", "/ui/breaker/reset"):
        assert server.client.post(path, data={"csrf_token": csrf(page)}).status_code == 403
    assert server.get(f"/runs/{run_id}").get_json()["status"] == "awaiting_approval"
    assert server.get("/pause").get_json()["paused"] is False


def test_a_read_only_credential_named_like_the_operator_gets_no_operator_controls(make_server: MakeServer) -> None:
    """A session's roles are its credential's, never those of another token of the same
    name. The load refuses such a pair (tests/integration/test_auth.py); this one is built past that check."""
    built = approve_server(make_server)
    twin = Credential("operator", "read-only-twin-token-0123", frozenset({READ}))
    services = dataclasses.replace(built.services, credentials=(*built.services.credentials, twin))
    app = create_app(services.settings, services=services)
    server = Server(app, app.test_client(), services, built.db_path, built.database_url)
    server.webhook(notification(alert("ffff000000000005", instance="node-a:9400", gpu="0")))
    run_id = server.history()["entries"][0]["run_id"]

    assert log_in(server, twin.token).status_code == 302
    page = server.client.get(f"/ui/runs/{run_id}")
    assert 'id="approve"' not in text(page) and 'id="needs-operator"' in text(page)
    assert 'id="pause-button"' not in text(server.client.get("/ui/state"))
    assert server.client.post(f"/ui/runs/{run_id}/approve", data={"csrf_token": csrf(page)}).status_code == 403
    assert server.get(f"/runs/{run_id}").get_json()["status"] == "awaiting_approval"


def test_a_post_without_the_sessions_csrf_token_is_refused(make_server: MakeServer) -> None:
    server, run_id = awaiting_run(make_server)
    log_in(server, OPERATOR_TOKEN)
    for data in ({}, {"csrf_token": "forged"}):
        answer = server.client.post(f"/ui/runs/{run_id}/approve", data=data)
        assert answer.status_code == 403
        assert "CSRF" in text(answer)
    assert server.get(f"/runs/{run_id}").get_json()["status"] == "awaiting_approval"


def test_state_page_pauses_resumes_and_resets_the_breaker_as_the_principal(server: Server) -> None:
    log_in(server, OPERATOR_TOKEN)
    page = server.client.get("/ui/state")
    assert "not paused" in text(page) and "closed" in text(page)
    token = csrf(page)
    assert server.client.post("/ui/pause", data={"csrf_token": token, "reason": "maintenance"}).status_code == 302
    assert server.get("/pause").get_json() | {"since": None} == {
        "paused": True,
        "by": "operator",
        "reason": "maintenance",
        "since": None,
    }
    paused = text(server.client.get("/ui/state"))
    assert "Paused by <b>operator</b>" in paused and "maintenance" in paused and 'id="resume"' in paused
    # A form left open from before the pause does not replace it.
    assert server.client.post("/ui/pause", data={"csrf_token": token, "reason": "stale form"}).status_code == 302
    assert server.get("/pause").get_json()["reason"] == "maintenance"
    assert "Not paused again: remediation is already paused by operator: maintenance" in text(
        server.client.get("/ui/state")
    )
    assert server.client.post("/ui/resume", data={"csrf_token": token}).status_code == 302
    assert server.get("/pause").get_json()["paused"] is False
    # A closed breaker is not reset: the page says so and nothing is recorded.
    assert server.client.post("/ui/breaker/reset", data={"csrf_token": token, "reason": "checked"}).status_code == 302
    assert server.get("/breaker").get_json()["reset_by"] is None
    assert "nothing to reset" in text(server.client.get("/ui/state"))


def test_logout_ends_the_session(server: Server) -> None:
    log_in(server, READ_TOKEN)
    page = server.client.get("/ui/")
    assert page.status_code == 200
    assert server.client.post("/ui/logout", data={"csrf_token": csrf(page)}).status_code == 302
    assert server.client.get("/ui/").status_code == 302


@ON_EVERY_DATABASE
def test_after_logout_the_old_cookie_is_refused_by_every_worker_and_replica(make_server: MakeServer) -> None:
    """The cookie is signed, not stored, so a copy kept from before the logout worked for
    12 hours. The logout is recorded in the store, which every process of every replica reads."""
    first = make_server()
    other = make_server(database_url=first.database_url)  # another worker or replica: its own process state
    log_in(first, READ_TOKEN)
    page = first.client.get("/ui/")
    kept = first.client.get_cookie("remediate_ui", path="/ui")
    assert kept is not None and page.status_code == 200
    other.client.set_cookie("remediate_ui", kept.value, path="/ui")
    assert other.client.get("/ui/").status_code == 200

    assert first.client.post("/ui/logout", data={"csrf_token": csrf(page)}).status_code == 302

    first.client.set_cookie("remediate_ui", kept.value, path="/ui")  # the copy kept from before the logout
    for server in (first, other):
        replay = server.client.get("/ui/")
        assert replay.status_code == 302 and replay.headers["Location"].startswith("/ui/login")
        assert server.client.post("/ui/pause", data={"csrf_token": csrf(page)}).status_code == 401
    log_in(other, READ_TOKEN)  # a new login of the same token is a new session
    assert other.client.get("/ui/").status_code == 200


def test_a_rotated_or_removed_token_ends_its_sessions_even_with_a_secret_file(
    make_server: MakeServer, tmp_path: Path
) -> None:
    """With `ui_secret_file` the signing key outlives any token, and a session of a leaked
    token went on for 12 hours after the token was rotated. A server started with the new tokens (same key,
    same database) refuses it at once; one with the same tokens still accepts it."""
    secret = tmp_path / "ui-secret"
    secret.write_text("k" * 40, encoding="utf-8")
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f"alice: {ALICE_TOKEN}\nbob: {BOB_TOKEN}\n", encoding="utf-8")
    before = make_server(tokens_file=tokens, ui_secret_file=secret)
    log_in(before, ALICE_TOKEN)
    cookie = before.client.get_cookie("remediate_ui", path="/ui")
    assert cookie is not None and before.client.get("/ui/").status_code == 200

    def replay(tokens_text: str) -> int:
        tokens.write_text(tokens_text, encoding="utf-8")
        after = make_server(tokens_file=tokens, ui_secret_file=secret, database_url=before.database_url)
        after.client.set_cookie("remediate_ui", cookie.value, path="/ui")
        return after.client.get("/ui/").status_code

    assert replay(f"alice: {ALICE_TOKEN}\nbob: {BOB_TOKEN}\n") == 200  # same tokens: another worker
    assert replay(f"alice: {ALICE_TOKEN[::-1]}\nbob: {BOB_TOKEN}\n") == 302  # alice's token rotated
    assert replay(f"bob: {BOB_TOKEN}\n") == 302  # alice removed


def test_a_login_older_than_12_hours_is_over(server: Server) -> None:
    log_in(server, READ_TOKEN)
    assert server.client.get("/ui/").status_code == 200
    with server.client.session_transaction("/ui/") as session:
        session["login_at"] -= 12 * 3600 + 1
    assert server.client.get("/ui/").status_code == 302


def test_a_session_signed_under_other_tokens_is_not_accepted(make_server: MakeServer) -> None:
    first = make_server()
    log_in(first, OPERATOR_TOKEN)
    cookie = first.client.get_cookie("remediate_ui", path="/ui")
    assert cookie is not None
    changed = make_server(operator_token="another-operator-token-000")
    changed.client.set_cookie("remediate_ui", cookie.value, path="/ui")
    assert changed.client.get("/ui/").status_code == 302
    same = make_server()  # same tokens: another worker or replica accepts the session
    same.client.set_cookie("remediate_ui", cookie.value, path="/ui")
    assert same.client.get("/ui/").status_code == 200


def test_without_the_ui_setting_the_pages_are_404(make_server: MakeServer) -> None:
    server = make_server(ui=False)
    assert server.client.get("/ui/").status_code == 404
    assert server.client.get("/ui/login").status_code == 404
    assert server.get("/history").status_code == 200


def test_the_stylesheet_is_served_from_the_package(server: Server) -> None:
    css = server.client.get("/ui/static/ui.css")
    try:
        assert css.status_code == 200 and ".s-failed" in text(css)
    finally:
        css.close()  # a file response


def test_without_authentication_the_pages_need_no_login_but_forms_still_need_csrf(make_server: MakeServer) -> None:
    server = make_server(insecure_no_auth=True, token=None, operator_token=None, read_token=None)
    page = server.client.get("/ui/state")
    assert page.status_code == 200
    assert "http:127.0.0.1 (operator)" in text(page)
    assert 'id="logout"' not in text(page)
    assert server.client.post("/ui/pause", data={}).status_code == 403
    assert server.client.post("/ui/pause", data={"csrf_token": csrf(page)}).status_code == 302
    assert server.get("/pause", token=None).get_json()["by"] == "http:127.0.0.1"


def test_pages_forbid_scripts_framing_and_caching(server: Server) -> None:
    log_in(server, READ_TOKEN)
    page = server.client.get("/ui/state")
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    assert page.headers["X-Frame-Options"] == "DENY"
    assert page.headers["Cache-Control"] == "no-store"
    assert "<script" not in text(page)


def test_logout_works_after_the_session_expired(server: Server) -> None:
    log_in(server, READ_TOKEN)
    page = server.client.get("/ui/")
    with server.client.session_transaction("/ui/") as session:
        session["login_at"] -= 13 * 3600
    answer = server.client.post("/ui/logout", data={"csrf_token": csrf(page)})
    assert answer.status_code == 302 and answer.headers["Location"] == "/ui/login"


def test_approving_from_the_state_page_returns_there_and_the_run_leaves_the_list(make_server: MakeServer) -> None:
    server, run_id = awaiting_run(make_server)
    log_in(server, OPERATOR_TOKEN)
    state = server.client.get("/ui/state")
    assert "Awaiting approval (1)" in text(state) and "Approve</button>" in text(state)
    answer = server.client.post(f"/ui/runs/{run_id}/approve", data={"csrf_token": csrf(state), "next": "/ui/state"})
    assert answer.status_code == 302 and answer.headers["Location"] == "/ui/state"
    after = text(server.client.get("/ui/state"))
    assert "Awaiting approval (0)" in after and f"Run {run_id} approved by operator" in after
    again = server.client.post(f"/ui/runs/{run_id}/approve", data={"csrf_token": csrf(state)})
    assert again.status_code == 302
    assert "Not approved" in text(server.client.get(f"/ui/runs/{run_id}"))


def test_the_login_page_says_how_long_a_session_lasts(server: Server) -> None:
    page = text(server.client.get("/ui/login"))
    assert "for 12 hours" in page and 'type="password"' in page


def test_the_run_page_says_when_the_run_was_announced_in_chat_or_why_not(make_server: MakeServer) -> None:
    with WebhookRecorder(path="/services/T000/B000/XXXX") as slack:
        playbook = APPROVE_XID + f'  - action: notify.slack\n    with: {{url: "{slack.url}"}}\n'
        server = make_server(playbooks={"approve-xid.yaml": playbook}, public_url="https://remediate.example")
        for fingerprint, host in (("ffff000000000001", "node-a"), ("ffff000000000002", "node-b")):
            server.webhook(notification(alert(fingerprint, instance=f"{host}:9400", gpu="0")))
        sent, refused = sorted(e["run_id"] for e in server.history()["entries"])
        log_in(server, OPERATOR_TOKEN)
        assert 'id="announced"' not in text(server.client.get(f"/ui/runs/{sent}"))  # not yet

        announcer = server.services.announcer
        assert announcer is not None and announcer.run_once()  # the executor process's announcer, here
        slack.status = 404
        assert announcer.run_once() and not announcer.run_once()

        page = text(server.client.get(f"/ui/runs/{sent}"))
        assert re.search(r'<dd id="announced">approval request sent to chat at [0-9-]+ [0-9:]+Z</dd>', page), page
        assert 'id="approve"' in page  # the button the message links to
        failed = text(server.client.get(f"/ui/runs/{refused}"))
        assert re.search(
            r'<dd id="announced"><span class="error">approval request to chat not sent \(.*Z\): '
            r"step 1 .*POST .* answered 404",
            failed,
        ), failed
        assert [r.json["blocks"][-1]["elements"][-1]["url"] for r in slack.requests] == [
            f"https://remediate.example/ui/runs/{sent}",
            f"https://remediate.example/ui/runs/{refused}",
        ]
