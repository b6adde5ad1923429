"""Issue 27, deliverable 5: the UI papercuts a new user hit, through Flask's test client on a real SQLite
store: the paused/breaker banner on every page, the ladder after its undo, chat steps as a preview, the
search, the per-node timeline and the opt-in refresh. The same pages in Chromium (a phone's viewport,
the screenshots): tests/e2e/test_ui_operate_browser.py."""

from __future__ import annotations

import re

from werkzeug.test import TestResponse

from tests.integration.test_ui_pages import awaiting_run, csrf, log_in, text
from tests.support.http import OPERATOR_TOKEN, MakeServer, Server, alert, notification

BANNER = re.compile(r'<div class="banner" id="banner"')


def pages(server: Server, run_id: int) -> dict[str, TestResponse]:
    return {path: server.client.get(path) for path in ("/ui/", f"/ui/runs/{run_id}", "/ui/state", "/ui/runs/999")}


def test_every_page_shows_a_banner_while_paused_or_while_the_breaker_is_open(make_server: MakeServer) -> None:
    server, run_id = awaiting_run(make_server)
    log_in(server, OPERATOR_TOKEN)
    for path, page in pages(server, run_id).items():
        assert not BANNER.search(text(page)), path

    token = csrf(server.client.get("/ui/state"))
    server.client.post("/ui/pause", data={"csrf_token": token, "reason": "rack 12 maintenance"})
    for path, page in pages(server, run_id).items():
        banner = text(page)
        assert BANNER.search(banner), path
        assert re.search(r"Remediation is paused</b> by operator\s+since 20[\d: -]+Z: rack 12 maintenance", banner), path
        assert 'id="banner-breaker"' not in banner

    server.client.post("/ui/resume", data={"csrf_token": token})
    with server.store.breaker.ledger() as ledger:
        ledger.save_state({"open": True, "tripped_at": 1_795_000_000.0, "reason": "3 nodes changed (cap 2)",
                           "tripped_by_run": run_id})  # fmt: skip
    for path, page in pages(server, run_id).items():
        banner = text(page)
        assert 'id="banner-paused"' not in banner, path
        assert "The circuit breaker is open</b>\n    since 2026-11-18 " in banner, path
        assert "3 nodes changed (cap 2)" in banner and f'href="/ui/runs/{run_id}">run #{run_id}</a>' in banner


def test_the_login_page_shows_no_banner(make_server: MakeServer) -> None:
    server = make_server()
    server.store.pause.set(True, by="alice", reason="secret reason", now=1_795_000_000.0)
    assert "secret reason" not in text(server.client.get("/ui/login"))
