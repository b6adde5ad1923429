"""The UI papercuts a new user hit, through Flask's test client on a real SQLite
store: the paused/breaker banner on every page, the ladder after its undo, chat steps as a preview, the
search, the per-node timeline and the opt-in refresh. The same pages in Chromium (a phone's viewport,
the screenshots): tests/e2e/test_ui_operate_browser.py."""

from __future__ import annotations

import re
import time

from werkzeug.test import TestResponse

from remediate.breaker import Claim
from remediate.server.ui.preview import chat_preview
from tests.integration.test_ladders import HOT_LADDER, hot
from tests.integration.test_ui_pages import awaiting_run, csrf, log_in, text
from tests.support.http import APPROVE_XID, OPERATOR_TOKEN, MakeServer, Server, alert, notification
from tests.support.realsystems import WebhookRecorder

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
        assert re.search(r"Remediation is paused</b> by operator\s+since 20[\d: -]+Z: rack 12 maintenance", banner), (
            path
        )
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


def test_a_ladder_after_its_undo_says_it_resolved_not_first_rung(make_server: MakeServer) -> None:
    """It read "1 of 3 cap-power ... first rung" after the alert resolved and on_resolved undid the rung."""
    server = make_server(playbooks={"hot.yaml": HOT_LADDER})
    server.webhook(notification(hot(1)))
    server.drain()  # in force once its run succeeded
    log_in(server, OPERATOR_TOKEN)
    firing = text(server.client.get("/ui/state"))
    assert re.search(r'data-state="firing">on rung 1 of 3 \(cap-power\), in force since 20[\d: -]+Z<', firing)

    server.webhook(notification(hot(1, "resolved")))
    server.drain()
    resolved = text(server.client.get("/ui/state"))
    assert re.search(r'data-state="resolved">rung 1 of 3 \(cap-power\): resolved at 20[\d: -]+Z, no longer in force<',
                     resolved)  # fmt: skip
    assert "in force since" not in resolved

    assert server.post("/ladders/reset", json={"target": "node-a", "reason": "new GPU"}).status_code == 200
    reset = text(server.client.get("/ui/state"))
    assert 'data-state="reset">reset (reset by operator: new GPU): the next firing starts at rung 1<' in reset


def chat_playbook(url: str) -> str:
    return f"""\
name: chat
match: {{alertname: GpuXidError}}
target: node
steps:
  - action: notify.slack
    with: {{url: "{url}", message: "GPU {{{{ labels.gpu }}}} is *hot*: see `nvidia-smi`"}}
  - action: notify.teams
    with: {{url: "{url}"}}
  - action: notify.webhook
    with: {{url: "{url}", message: "webhook says hi"}}
"""


def test_chat_steps_show_the_message_a_person_would_see_and_the_json_behind_details(make_server: MakeServer) -> None:
    """It was ~80 lines of raw JSON per chat step (Block Kit blocks, the Adaptive Card)."""
    with WebhookRecorder(path="/hook") as chat:
        server = make_server(playbooks={"chat.yaml": chat_playbook(chat.url)}, public_url="https://remediate.example")
        server.webhook(notification(alert("ffff000000000001", instance="node-a:9400", gpu="<b>0*</b>")))
        server.drain()
        run_id = server.history()["entries"][0]["run_id"]
    log_in(server, OPERATOR_TOKEN)
    page = text(server.client.get(f"/ui/runs/{run_id}"))
    slack, teams, webhook = re.findall(r'<section class="step".*?</section>', page, re.S)

    preview = re.search(r'<div class="chat-preview" data-kind="Slack">(.*?)</div>', slack, re.S)
    assert preview, slack
    shown = preview.group(1)
    assert f"Slack message to {chat.url} · sent, HTTP 200" in shown
    assert '<p class="chat-title">🔥 GpuXidError on node-a</p>' in shown
    # The playbook's own markup, rendered; the label's value as inert text (escaped, its * a look-alike).
    assert re.search(r"GPU &lt;b&gt;0.&lt;/b&gt; is <b>hot</b>: see <code>nvidia-smi</code>", shown), shown
    assert "<b>0" not in shown
    assert "<dt>Status</dt><dd>alert firing; remediation running</dd>" in shown
    assert (
        f'<span class="chat-button" title="https://remediate.example/ui/runs/{run_id}">Open run {run_id}</span>'
        in shown
    )
    assert "&#34;blocks&#34;" not in shown
    assert re.search(
        r'<details class="raw"><summary>raw JSON \(params, plan, result\)</summary>.*&#34;blocks&#34;', slack, re.S
    )

    shown = re.search(r'<div class="chat-preview" data-kind="Teams">(.*?)</div>', teams, re.S).group(1)  # type: ignore[union-attr]
    assert '<p class="chat-title">GpuXidError on node-a</p>' in shown and "<dd>this message</dd>" in shown
    assert "&#34;AdaptiveCard&#34;" in teams.split("<details")[1]

    shown = re.search(r'<div class="chat-preview" data-kind="webhook \(JSON\)">(.*?)</div>', webhook, re.S).group(1)  # type: ignore[union-attr]
    assert '<p class="chat-line">webhook says hi</p>' in shown and "<dd>succeeded</dd>" in shown


def test_a_step_that_is_not_a_chat_step_keeps_its_json(make_server: MakeServer) -> None:
    server, run_id = awaiting_run(make_server)
    log_in(server, OPERATOR_TOKEN)
    page = text(server.client.get(f"/ui/runs/{run_id}"))
    assert "chat-preview" not in page and '<details class="raw">' not in page and "<h4>params</h4>" in page


def test_a_sink_step_is_previewed_by_the_shape_of_its_body() -> None:
    body = {"blocks": [{"type": "header", "text": {"type": "plain_text", "text": "X on n"}}]}
    preview = chat_preview(
        "notify", {"sink": "oncall", "type": "slack", "would_post_to": "the URL in /s", "body": body}
    )
    assert preview is not None and (preview.kind, preview.to, preview.title) == (
        "Slack",
        "sink oncall (the URL in /s)",
        "X on n",
    )
    assert chat_preview("notify", {"sink": "oncall", "can_act": False, "why_not": "not configured"}) is None
    assert chat_preview("log", {"body": body}) is None


def test_the_history_page_searches_alertname_node_and_playbook_across_pages(make_server: MakeServer) -> None:
    server = make_server(playbooks={"hot.yaml": HOT_LADDER, "approve-xid.yaml": APPROVE_XID})
    for i in range(60):  # more than a page (50) of GpuXidError on gpu-node-NN
        server.webhook(notification(alert(f"ffff0000000{i:05d}", instance=f"gpu-node-{i:02d}:9400", gpu="0")))
    server.webhook(notification(hot(1)))
    log_in(server, OPERATOR_TOKEN)

    def ids(page: str) -> list[str]:
        return re.findall(r'<tr class="entry" data-id="(\d+)"', page)

    assert len(ids(text(server.client.get("/ui/?q=HOT")))) == 1  # the playbook, in any case
    assert len(ids(text(server.client.get("/ui/?q=GPUTemp")))) == 1  # the alertname
    node = text(server.client.get("/ui/?q=gpu-node-07"))  # the node (target)
    assert len(ids(node)) == 1 and 'value="gpu-node-07"' in node
    first = text(server.client.get("/ui/?q=xid"))
    assert len(ids(first)) == 50
    older = re.search(r'<a href="([^"]+)" id="older">', first)
    assert older and "q=xid" in older.group(1)  # the next page keeps the search
    second = text(server.client.get(older.group(1).replace("&amp;", "&")))
    # 60 GpuXidError, and the hot alert: its annotations (the real payload's) say "GPU 3 Xid error".
    assert len(ids(second)) == 11 and not set(ids(first)) & set(ids(second))
    assert len(ids(text(server.client.get("/ui/?q=xid&target=gpu-node-03")))) == 1  # with the filters

    too_long = server.client.get("/ui/?q=" + "x" * 201)
    assert too_long.status_code == 400 and "q (the search) must be at most 200 characters" in text(too_long)


def test_a_node_page_shows_its_runs_ladder_and_breaker_claims_as_a_timeline_newest_first(
    make_server: MakeServer,
) -> None:
    server = make_server(playbooks={"hot.yaml": HOT_LADDER})
    first = server.webhook(notification(hot(1))).get_json()["runs"][0]
    server.webhook(notification(hot(1, "resolved")))
    second = server.webhook(notification(hot(2))).get_json()["runs"][0]
    server.webhook(notification(alert("b0b0b0b0", alertname="GPUTemperatureHigh", node="node-b")))
    server.drain()
    now = time.time()
    with server.store.breaker.ledger() as ledger:
        ledger.add_claim(Claim(node="node-a", kind="cordon", run_id=first, claimed_at=now + 1))
        ledger.release("node-a", now=now + 2, reason="uncordoned")
        ledger.add_claim(Claim(node="node-a", kind="cordon", run_id=second, claimed_at=now + 3))
        ledger.add_claim(Claim(node="node-b", kind="cordon", run_id=99, claimed_at=now + 4))
    log_in(server, OPERATOR_TOKEN)

    history = text(server.client.get("/ui/"))
    assert '<a class="node-link" href="/ui/nodes/node-a">node-a</a>' in history
    assert 'id="node-link" href="/ui/nodes/node-a"' in text(server.client.get(f"/ui/runs/{second}"))
    assert 'href="/ui/nodes/node-a">node-a</a>' in text(server.client.get("/ui/state"))  # its ladder

    page = text(server.client.get("/ui/nodes/node-a"))
    assert "#99" not in page  # node-b's claim; its decision is not among the rows below
    assert re.search(rf'id="node-breaker">held by <a href="/ui/runs/{second}">run #{second}</a> \(cordon, since', page)
    assert 'data-state="firing">on rung 2 of 3 (lock-clocks), in force since' in page
    rows = re.findall(r'<tr class="event k-(\w+)"><td class="time">([^<]+)</td><td>([^<]+)</td>', page)
    assert [when for _, when, _ in rows] == sorted((when for _, when, _ in rows), reverse=True)
    assert [kind for kind, _, _ in rows[:3]] == ["breaker"] * 3  # claimed after every decision
    whats = [what for _, _, what in rows]
    assert whats[:3] == [
        f"breaker claim: cordon by run #{second}",
        "breaker claim released (cordon): uncordoned",
        f"breaker claim: cordon by run #{first}",
    ]
    decisions = [what for kind, _, what in rows if kind == "decision"]
    assert [d.split(":")[0] for d in decisions] == [
        f"GPUTemperatureHigh {s}, accepted" for s in ("firing", "resolved", "firing")
    ]
    assert "rung 2 of 3 (lock-clocks)" in decisions[0] and "undoes rungs 1" in decisions[1]
    climbed, started = [what for kind, _, what in rows if kind == "ladder"]
    assert climbed.startswith("ladder hot: rung 2 (re-fired ") and started == "ladder hot: rung 1 (first rung)"

    assert "Nothing has happened on node-z." in text(server.client.get("/ui/nodes/node-z"))


def test_refresh_is_opt_in_by_a_link_and_a_meta_refresh_without_any_script(make_server: MakeServer) -> None:
    server, run_id = awaiting_run(make_server)
    log_in(server, OPERATOR_TOKEN)
    plain = server.client.get("/ui/?playbook=approve-xid")
    assert 'http-equiv="refresh"' not in text(plain)
    assert (
        '<a class="refresh" id="refresh" href="/ui/?playbook=approve-xid&amp;refresh=10">Refresh every 10 s</a>'
        in text(plain)
    )

    on = server.client.get("/ui/?playbook=approve-xid&refresh=10")
    assert '<meta http-equiv="refresh" content="10">' in text(on)
    assert 'href="/ui/?playbook=approve-xid">Stop refreshing (every 10 s)</a>' in text(on)
    assert '<meta http-equiv="refresh" content="30">' in text(server.client.get(f"/ui/runs/{run_id}?refresh=30"))
    assert 'href="/ui/nodes/node-a?refresh=10"' in text(server.client.get("/ui/nodes/node-a"))

    for bad in ("1", "abc", "99999", "-5"):
        refused = server.client.get(f"/ui/state?refresh={bad}")
        assert refused.status_code == 400
        assert "refresh must be a whole number of seconds from 5 to 3600" in text(refused)
    # The strict CSP stays: no script at all, inline or not.
    for page in (plain, on, server.client.get(f"/ui/runs/{run_id}?refresh=30")):
        assert page.headers["Content-Security-Policy"].startswith("default-src 'none'; style-src 'self';")
        assert "script-src" not in page.headers["Content-Security-Policy"] and "<script" not in text(page)
        assert " style=" not in text(page)  # no inline style either (style-src 'self')
