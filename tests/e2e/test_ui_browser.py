"""The web pages in a real headless Chromium against the real `remediate serve` (gunicorn, executor process).

Log in with a token, filter the history, open a run, approve a waiting run and watch it run; the read
token sees no button and a forged POST is 403; a POST without the CSRF token is refused; logout;
--no-ui answers 404. Screenshots of every page land in the test's tmp dir (docs/img/ holds two of them).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from playwright.sync_api import Browser, Page

from tests.support.server import RemediateServer, notification, write_playbook
from tests.support.waiting import scaled, wait_until

pytestmark = [pytest.mark.integration]

OPERATOR_TOKEN = "ui-operator-token-0123456789"
READ_TOKEN = "ui-read-token-0123456789"
WEBHOOK_TOKEN = "ui-webhook-token-0123456789"

APPROVE = """\
name: gpu-xid-drain
description: Cordon a node whose GPU reported an XID error, once a person approves.
match:
  alertname: GpuXidError
mode: approve
target: node
steps:
  - name: say what happens
    action: log
    with: {message: "XID {{ labels.xid }} on GPU {{ labels.gpu }} of {{ labels.node }}: approved"}
on_resolved:
  - action: log
    with: {message: "{{ alertname }} on {{ labels.node }} resolved"}
"""

LOG = """\
name: disk-note
match:
  alertname: NodeFilesystemAlmostOutOfSpace
target: node
cooldown: 0s
steps:
  - action: log
    with: {message: "disk almost full on {{ labels.node }}", level: warning}
"""


def _serve(start_server: Callable[..., RemediateServer], playbooks_dir: Path, **env: str) -> RemediateServer:
    write_playbook(playbooks_dir, "gpu-xid-drain", APPROVE)
    write_playbook(playbooks_dir, "disk-note", LOG)
    return start_server(
        token=OPERATOR_TOKEN,  # the harness's own API reads
        env={
            "REMEDIATE_TOKEN": "",
            "REMEDIATE_WEBHOOK_TOKEN": WEBHOOK_TOKEN,
            "REMEDIATE_OPERATOR_TOKEN": OPERATOR_TOKEN,
            "REMEDIATE_READ_TOKEN": READ_TOKEN,
            **env,
        },
    )


def _fire(server: RemediateServer, alertname: str, fingerprint: str, **labels: str) -> None:
    body = notification(alertname, labels, fingerprint=fingerprint)
    body["alerts"][0]["generatorURL"] = "http://prometheus.example:9090/graph?g0.expr=DCGM_FI_DEV_XID_ERRORS"
    assert server.post_webhook(body, token=WEBHOOK_TOKEN).status_code == 200


def _log_in(page: Page, server: RemediateServer, token: str) -> None:
    page.goto(server.url + "/ui/")
    assert "/ui/login" in page.url
    page.fill("#token", token)
    page.click("#login")
    page.wait_for_url(server.url + "/ui/")


def test_an_operator_logs_in_filters_opens_a_run_and_approves_it(
    start_server: Callable[..., RemediateServer], playbooks_dir: Path, browser_page: Page, tmp_path: Path
) -> None:
    server = _serve(start_server, playbooks_dir)
    _fire(server, "GpuXidError", "a1a1a1a1a1a1a1a1", node="gpu-node-07", gpu="3", xid="79", severity="critical")
    for node in ("gpu-node-02", "gpu-node-11"):
        _fire(server, "NodeFilesystemAlmostOutOfSpace", f"d{node[-2:]}d{node[-2:]}d0d0d0d0d0", node=node)
    waiting = server.wait_for_run(status="awaiting_approval", playbook="gpu-xid-drain")
    for _ in range(2):  # AlertManager's re-sends of the same occurrence: duplicates of the waiting run
        _fire(server, "GpuXidError", "a1a1a1a1a1a1a1a1", node="gpu-node-07", gpu="3", xid="79", severity="critical")
    server.wait_for_run(status="succeeded", playbook="disk-note")
    page = browser_page

    _log_in(page, server, OPERATOR_TOKEN)
    assert page.locator("tr.entry").count() == 3  # 5 decisions, the 2 duplicates folded into their run's row
    assert page.locator(f"tr.entry[data-id] >> text=#{waiting['run_id']}").count() == 1
    assert page.locator("details.dups summary").all_inner_texts() == ["+2 duplicates"]
    assert page.locator(".who").inner_text().startswith("operator (operator)")
    page.screenshot(path=str(tmp_path / "ui-history.png"), full_page=True)

    page.fill("input[name=playbook]", "disk-note")
    page.click("#filter")
    page.wait_for_url("**/ui/?playbook=disk-note*")
    assert page.locator("tr.entry").count() == 2
    assert page.locator("tr.entry .status").all_inner_texts() == ["succeeded", "succeeded"]
    page.screenshot(path=str(tmp_path / "ui-history-filtered.png"), full_page=True)

    page.goto(server.url + "/ui/state")
    assert page.locator("#approvals button.approve").count() == 1
    page.screenshot(path=str(tmp_path / "ui-state.png"), full_page=True)

    page.click(f"#approvals a[href='/ui/runs/{waiting['run_id']}']")
    assert page.locator("#run-status").inner_text() == "awaiting_approval"
    assert page.locator("#generator").get_attribute("href") == (
        "http://prometheus.example:9090/graph?g0.expr=DCGM_FI_DEV_XID_ERRORS"
    )
    assert "gpu-node-07" in page.locator("#labels").inner_text()
    assert "XID 79 on GPU 3 of gpu-node-07: approved" in page.locator("#step-0").inner_text()
    page.click("#approve")
    page.wait_for_url(f"{server.url}/ui/runs/{waiting['run_id']}")
    assert "approved by operator" in page.locator(".flash.ok").inner_text()

    def ran() -> bool:
        page.reload()
        return page.locator("#run-status").inner_text() == "succeeded"

    wait_until(ran, timeout=20, message="the approved run did not succeed")
    assert page.locator("#ran-on").inner_text()  # the executor that ran it
    assert page.locator("#step-0 table.attempts tbody tr").count() == 1
    page.screenshot(path=str(tmp_path / "ui-run.png"), full_page=True)
    assert server.run(waiting["run_id"])["approved_by"] == "operator"

    page.click("#logout")
    page.wait_for_url("**/ui/login")
    page.goto(server.url + "/ui/")
    assert "/ui/login" in page.url
    page.screenshot(path=str(tmp_path / "ui-login.png"), full_page=True)
    html = page.content()
    assert OPERATOR_TOKEN not in html and WEBHOOK_TOKEN not in html


def test_the_read_token_sees_no_approve_button_and_a_forged_post_is_refused(
    start_server: Callable[..., RemediateServer], playbooks_dir: Path, browser_page: Page, chromium: Browser
) -> None:
    server = _serve(start_server, playbooks_dir)
    _fire(server, "GpuXidError", "b2b2b2b2b2b2b2b2", node="gpu-node-03", gpu="1", xid="48")
    run_id = server.wait_for_run(status="awaiting_approval", playbook="gpu-xid-drain")["run_id"]
    page = browser_page

    # The webhook token is AlertManager's: it cannot open a session.
    page.goto(server.url + "/ui/login")
    page.fill("#token", WEBHOOK_TOKEN)
    page.click("#login")
    assert "may not read" in page.locator("#login-error").inner_text()

    _log_in(page, server, READ_TOKEN)
    page.goto(f"{server.url}/ui/runs/{run_id}")
    assert page.locator("#approve").count() == 0
    assert page.locator("#needs-operator").count() == 1
    csrf = page.locator("input[name=csrf_token]").first.get_attribute("value")
    # A forged form POST from the page, with the session's cookie and its valid CSRF token: the role decides.
    forged = page.request.post(f"{server.url}/ui/runs/{run_id}/approve", form={"csrf_token": csrf or ""})
    assert forged.status == 403
    assert server.run(run_id)["status"] == "awaiting_approval"

    # An operator's session without the CSRF token (a cross-site form would have none): refused.
    operator = chromium.new_context()
    try:
        other = operator.new_page()
        _log_in(other, server, OPERATOR_TOKEN)
        refused = other.request.post(f"{server.url}/ui/runs/{run_id}/approve", form={})
        assert refused.status == 403
        assert "CSRF" in refused.text()
    finally:
        operator.close()
    assert server.run(run_id)["status"] == "awaiting_approval"


def test_no_ui_serves_no_pages(start_server: Callable[..., RemediateServer], playbooks_dir: Path) -> None:
    server = _serve(start_server, playbooks_dir, REMEDIATE_UI="false")
    assert requests.get(server.url + "/ui/", timeout=scaled(5)).status_code == 404
    assert requests.get(server.url + "/ui/login", timeout=scaled(5)).status_code == 404
    assert requests.get(server.url + "/history", headers=server.auth, timeout=scaled(5)).status_code == 200
