"""Tokens end to end against the real server.

A real AlertManager with the webhook-only token gets its notifications in, and
nothing else: approving, pausing and resetting the breaker with it are 403 over real HTTP; the operator
token does them, and the history records the operator as who did, not the name the body claims.
The web pages' sessions of a rotated token, and of a logout, end on the real server.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from remediate.store import LoginThrottle
from tests.support.realsystems import AlertManager
from tests.support.server import TOKEN as TOKEN_OF_HARNESS
from tests.support.server import WAIT, RemediateServer, write_playbook
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

WEBHOOK_TOKEN = "e2e-webhook-only-token-77"
OPERATOR_TOKEN = "e2e-operator-token-88"

PLAYBOOK = """\
name: approve-me
match:
  alertname: E2ESplitTokens
mode: approve
target: node
steps:
  - action: log
    with: {message: "approved on {{ labels.Hostname }}"}
"""


def test_alertmanagers_webhook_token_delivers_but_cannot_approve_pause_or_reset(
    start_server: Callable[..., RemediateServer],
    start_alertmanager: Callable[..., AlertManager],
    playbooks_dir: Path,
) -> None:
    write_playbook(playbooks_dir, "approve-me", PLAYBOOK)
    server = start_server(
        token=OPERATOR_TOKEN,  # the harness's own reads and writes use the operator token
        env={
            "REMEDIATE_TOKEN": "",
            "REMEDIATE_TOKEN_ROLES": "webhook",
            "REMEDIATE_WEBHOOK_TOKEN": WEBHOOK_TOKEN,
            "REMEDIATE_OPERATOR_TOKEN": OPERATOR_TOKEN,
        },
    )
    am = start_alertmanager(server.webhook_url, token=WEBHOOK_TOKEN, group_wait="1s", group_interval="1s")
    am.fire({"alertname": "E2ESplitTokens", "severity": "critical", "Hostname": "node-a"})
    entry = server.wait_for_run(status="awaiting_approval", playbook="approve-me")

    def post(path: str, token: str) -> requests.Response:
        return requests.post(
            server.url + path, json={"by": "mallory"}, headers={"Authorization": f"Bearer {token}"}, timeout=scaled(10)
        )

    for path in (f"/runs/{entry['run_id']}/approve", "/pause", "/breaker/reset"):
        refused = post(path, WEBHOOK_TOKEN)
        assert refused.status_code == 403, (path, refused.text)
        assert refused.json()["principal"] == "webhook"
    assert post(f"/runs/{entry['run_id']}/approve", OPERATOR_TOKEN).status_code == 200
    done = server.wait_for_run_status(entry["run_id"], "succeeded")
    assert done["approved_by"] == "operator (note: mallory)"


ALICE_TOKEN = "alice-e2e-operator-token-01"
ALICE_ROTATED = "alice-e2e-operator-token-02"
BOB_TOKEN = "bob-e2e-operator-token-0123"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def ui_login(server: RemediateServer, token: str) -> requests.Session:
    """A browser's login through the form (its CSRF token, then the token); the session keeps the cookie."""
    browser = requests.Session()
    form = browser.get(server.url + "/ui/login", timeout=scaled(10))
    found = CSRF.search(form.text)
    assert found is not None, form.text[:300]
    answer = browser.post(
        server.url + "/ui/login",
        data={"token": token, "csrf_token": found.group(1)},
        allow_redirects=False,
        timeout=scaled(10),
    )
    assert answer.status_code == 302, answer.text[:300]
    return browser


def page_status(browser: requests.Session, server: RemediateServer) -> int:
    """A page with the browser's cookie, on a new connection (an old worker may still finish a kept-alive one)."""
    return requests.get(
        server.url + "/ui/state", cookies=browser.cookies, allow_redirects=False, timeout=scaled(10)
    ).status_code


def test_a_rotated_or_removed_token_ends_its_web_sessions_as_soon_as_the_server_reads_the_tokens_file(
    start_server: Callable[..., RemediateServer], tmp_path: Path
) -> None:
    """With `ui_secret_file` the signing key stays across the rotation; the session held a leaked token's
    name and lived on for 12 hours. Now it holds the token's fingerprint: the first page after the server
    reads the new tokens file (SIGHUP: fresh HTTP workers; or a restart) asks for a login."""
    secret = tmp_path / "ui-secret"
    secret.write_text("s" * 48, encoding="utf-8")
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f"alice: {ALICE_TOKEN}\nbob: {BOB_TOKEN}\n", encoding="utf-8")
    server = start_server(env={"REMEDIATE_TOKENS_FILE": str(tokens), "REMEDIATE_UI_SECRET_FILE": str(secret)})
    leaked, bobs = ui_login(server, ALICE_TOKEN), ui_login(server, BOB_TOKEN)
    assert page_status(leaked, server) == 200 and page_status(bobs, server) == 200

    tokens.write_text(f"alice: {ALICE_ROTATED}\nbob: {BOB_TOKEN}\n", encoding="utf-8")
    os.kill(server.pid, signal.SIGHUP)  # gunicorn starts fresh HTTP workers, which read the tokens again

    def api_takes_the_new_token() -> bool:
        # Fresh connections, a few in a row: every worker answering now is a new one. A request the
        # restarting workers leave unanswered (a loaded host) is asked again until WAIT runs out.
        try:
            return all(
                requests.get(
                    server.url + "/history", headers={"Authorization": f"Bearer {ALICE_ROTATED}"}, timeout=scaled(10)
                ).ok
                for _ in range(4)
            )
        except requests.RequestException:
            return False

    wait_until(api_takes_the_new_token, WAIT, message="the workers did not read the rotated tokens file")
    assert page_status(leaked, server) == 302
    assert page_status(bobs, server) == 200  # another token's session goes on
    assert page_status(ui_login(server, ALICE_ROTATED), server) == 200

    tokens.write_text(f"alice: {ALICE_ROTATED}\n", encoding="utf-8")
    server.restart()

    assert page_status(bobs, server) == 302  # bob's token removed


def test_a_cookie_kept_from_before_the_logout_is_refused_by_every_worker(
    start_server: Callable[..., RemediateServer],
) -> None:
    server = start_server(workers=2)
    browser = ui_login(server, TOKEN_OF_HARNESS)
    kept = browser.cookies.copy()  # what a thief (or the browser's disk) keeps of the session

    def replay() -> int:
        # A new connection each time (no session): the requests spread over both HTTP workers.
        return requests.get(
            server.url + "/ui/state", cookies=kept, allow_redirects=False, timeout=scaled(10)
        ).status_code

    assert replay() == 200
    page = browser.get(server.url + "/ui/state", timeout=scaled(10))
    found = CSRF.search(page.text)
    assert found is not None

    logout = browser.post(
        server.url + "/ui/logout", data={"csrf_token": found.group(1)}, allow_redirects=False, timeout=scaled(10)
    )

    assert logout.status_code == 302
    assert [replay() for _ in range(8)] == [302] * 8


def test_two_hundred_rapid_failed_logins_are_throttled_across_the_workers(
    start_server: Callable[..., RemediateServer],
) -> None:
    """200 guesses in 4 s must not all be checked. The failures are counted in the store, so the HTTP workers
    throttle together: 10 are checked, the rest answer 429 with Retry-After; the right token still logs in
    (behind an ingress every user shares one address: a throttle of the right token would lock them all out)."""
    server = start_server(workers=2)
    form = requests.get(server.url + "/ui/login", timeout=scaled(10))
    found = CSRF.search(form.text)
    assert found is not None

    def attempt(token: str) -> requests.Response:
        # A new connection each time (no session, the anonymous cookie sent by hand): both workers answer.
        return requests.post(
            server.url + "/ui/login",
            data={"token": token, "csrf_token": found.group(1)},
            cookies=form.cookies,
            allow_redirects=False,
            timeout=scaled(10),
        )

    answers = [attempt(f"guess-{n:04d}-of-a-token-0000") for n in range(200)]
    right = attempt(TOKEN_OF_HARNESS)

    throttle = LoginThrottle()
    assert [a.status_code for a in answers] == [401] * throttle.allowed + [429] * (200 - throttle.allowed)
    assert 1 <= int(answers[-1].headers["Retry-After"]) <= throttle.window
    assert right.status_code == 302 and "remediate_ui" in right.cookies
