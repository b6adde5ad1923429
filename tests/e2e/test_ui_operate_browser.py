"""UI papercuts in a real headless Chromium against the real `remediate serve`: the banner,
the chat preview, the search, the per-node timeline, the ladder after its undo, the opt-in refresh
(and no CSP violation for any of it), and every page on a phone's 390 px viewport without the page
scrolling sideways. Each is photographed into the test's tmp dir; with REMEDIATE_UI_SCREENSHOTS=<dir>
(e.g. docs/img) the photographs are written there too (docs/ui.md shows them).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from playwright.sync_api import Browser, Page

from remediate.store import Store
from tests.e2e.test_ui_browser import APPROVE, OPERATOR_TOKEN, READ_TOKEN, WEBHOOK_TOKEN, _log_in
from tests.support.realsystems import WebhookRecorder
from tests.support.server import RemediateServer, notification, write_playbook
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

PHONE = {"width": 390, "height": 844}
SCREENSHOTS = "REMEDIATE_UI_SCREENSHOTS"
"""A directory (docs/img) to write the screenshots to as well as the test's tmp dir."""
NODE = "gpu-node-07"

CHAT = """\
name: xid-tell-oncall
match: {{alertname: GpuXidError}}
target: node
steps:
  - name: tell on-call
    action: notify.slack
    with: {{url: "{url}", message: "XID {{{{ labels.xid }}}} on *{{{{ labels.node }}}}*: `kubectl cordon` it"}}
  - name: tell the Teams channel
    action: notify.teams
    with: {{url: "{url}"}}
"""

HOT = """\
name: gpu-hot
match: {alertname: GPUTemperatureHigh}
target: node
escalate:
  - name: cap-power
    holds_for: 1h
    steps: [{action: log, with: {message: "cap power on {{ labels.node }}"}}]
    on_resolved: [{action: log, with: {message: "uncap {{ labels.node }}"}}]
  - name: cordon
    holds_for: 1h
    mode: approve
    steps: [{action: log, with: {message: "cordon {{ labels.node }}"}}]
"""


def _photo(page: Page, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 1000
    if os.environ.get(SCREENSHOTS):
        shutil.copyfile(path, Path(os.environ[SCREENSHOTS]) / name)


def _fire(server: RemediateServer, alertname: str, fingerprint: str, *, status: str = "firing", **labels: str) -> None:
    body = notification(alertname, labels, fingerprint=fingerprint, status=status)
    assert server.post_webhook(body, token=WEBHOOK_TOKEN).status_code == 200


def _no_sideways_scroll(page: Page) -> None:
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"{page.url} scrolls {overflow} px sideways at {page.viewport_size}"


def test_the_operating_pages_in_a_browser_and_on_a_phone(
    start_server: Callable[..., RemediateServer],
    playbooks_dir: Path,
    browser_page: Page,
    chromium: Browser,
    tmp_path: Path,
) -> None:
    with WebhookRecorder(path="/services/T000/B000/XXXX") as chat:
        write_playbook(playbooks_dir, "gpu-xid-drain", APPROVE)
        write_playbook(playbooks_dir, "xid-tell-oncall", CHAT.format(url=chat.url))
        write_playbook(playbooks_dir, "gpu-hot", HOT)
        server = start_server(
            token=OPERATOR_TOKEN,
            env={
                "REMEDIATE_TOKEN": "",
                "REMEDIATE_WEBHOOK_TOKEN": WEBHOOK_TOKEN,
                "REMEDIATE_OPERATOR_TOKEN": OPERATOR_TOKEN,
                "REMEDIATE_READ_TOKEN": READ_TOKEN,
                "REMEDIATE_PUBLIC_URL": "https://remediate.example",
            },
        )
        _fire(server, "GPUTemperatureHigh", "h0h0h0h0h0h0h0h0", node=NODE, gpu="3")
        hot = server.wait_for_run(status="succeeded", playbook="gpu-hot")
        _fire(server, "GPUTemperatureHigh", "h0h0h0h0h0h0h0h0", status="resolved", node=NODE, gpu="3")
        _fire(server, "GpuXidError", "a1a1a1a1a1a1a1a1", node=NODE, gpu="3", xid="79", severity="critical")
        for i in range(3):
            _fire(server, "NodeFilesystemAlmostOutOfSpace", f"d{i}d{i}d{i}d{i}", node=f"cpu-node-{i:02d}")
        told = server.wait_for_run(status="succeeded", playbook="xid-tell-oncall")
        server.wait_for_run(status="awaiting_approval", playbook="gpu-xid-drain")

        def undone() -> bool:
            return any(
                e["alert_status"] == "resolved" and e["status"] == "succeeded"
                for e in server.history(playbook="gpu-hot")
            )

        wait_until(undone, timeout=20, message="the ladder's undo did not run")
    page = browser_page
    violations: list[str] = []
    page.on(
        "console",
        lambda message: violations.append(message.text) if "Content Security Policy" in message.text else None,
    )
    _log_in(page, server, OPERATOR_TOKEN)

    # 6. The ladder after its undo says so (on the state page and the node page).
    page.goto(server.url + "/ui/state")
    assert page.locator("#ladders .ladder-state").inner_text().startswith("rung 1 of 2 (cap-power): resolved at ")
    _photo(page, tmp_path, "ui-ladder-undone.png")

    # 2. The chat steps as the messages a person would see.
    page.goto(f"{server.url}/ui/runs/{told['run_id']}")
    slack = page.locator("#step-0 .chat-preview")
    assert "XID 79 on gpu-node-07: kubectl cordon it" in slack.inner_text()
    assert (
        slack.locator("b").first.inner_text() == NODE
        and slack.locator(".chat-button").first.inner_text() == f"Open run {told['run_id']}"
    )
    assert not page.locator("#step-0 details.raw pre").first.is_visible()  # the JSON, folded away
    _photo(page, tmp_path, "ui-chat-preview.png")

    # 5. Search across the history; 4. the node's timeline, from the row's link.
    page.goto(server.url + "/ui/")
    page.fill("#search", "xid")
    page.click("#filter")
    page.wait_for_url("**/ui/?*q=xid*")
    assert sorted(page.locator("tr.entry td:nth-child(4)").all_inner_texts()) == ["gpu-xid-drain", "xid-tell-oncall"]
    _photo(page, tmp_path, "ui-search.png")
    page.locator("a.node-link", has_text=NODE).first.click()
    page.wait_for_url(f"**/ui/nodes/{NODE}")
    kinds = page.locator("tr.event").evaluate_all("rows => rows.map(r => r.className)")
    assert {"event k-decision", "event k-ladder"} <= set(kinds)
    assert page.locator("tr.event").count() >= 6 and "cpu-node" not in page.locator("#timeline").inner_text()
    _photo(page, tmp_path, "ui-node.png")

    # 3. The opt-in refresh: a meta refresh, no script; the page reloads by itself.
    page.click("#refresh")
    page.wait_for_url(f"**/ui/nodes/{NODE}?refresh=10")
    assert page.locator("meta[http-equiv=refresh]").get_attribute("content") == "10"
    assert page.locator("#refresh").inner_text() == "Stop refreshing (every 10 s)"

    # 1. The banner, on every page, while paused and while the breaker is open.
    paused = requests.post(
        server.url + "/pause", json={"reason": "rack 12 maintenance"}, headers=server.auth, timeout=scaled(5)
    )
    assert paused.status_code == 200
    store = Store.open(server.database_url)
    try:
        with store.breaker.ledger() as ledger:
            ledger.save_state(
                {
                    "open": True,
                    "tripped_at": time.time(),
                    "reason": "3 nodes changed within 1h (cap 2)",
                    "tripped_by_run": hot["run_id"],
                }
            )
    finally:
        store.close()
    for path in ("/ui/", f"/ui/runs/{told['run_id']}", f"/ui/nodes/{NODE}", "/ui/state"):
        page.goto(server.url + path)
        assert "Remediation is paused by operator" in page.locator("#banner-paused").inner_text()
        assert "The circuit breaker is open" in page.locator("#banner-breaker").inner_text()
    page.goto(server.url + "/ui/")
    _photo(page, tmp_path, "ui-banner.png")

    # 7. A phone: no page scrolls sideways; the wide tables scroll in their own box.
    phone = chromium.new_context(viewport=PHONE, is_mobile=True, device_scale_factor=2)
    try:
        mobile = phone.new_page()
        _log_in(mobile, server, OPERATOR_TOKEN)
        for path, name in (
            ("/ui/", "ui-phone-history.png"),
            (f"/ui/runs/{told['run_id']}", "ui-phone-run.png"),
            ("/ui/state", None),
            (f"/ui/nodes/{NODE}", None),
            ("/ui/?q=node", None),
        ):
            mobile.goto(server.url + path)
            _no_sideways_scroll(mobile)
            if name:
                _photo(mobile, tmp_path, name)
    finally:
        phone.close()
    assert violations == []
